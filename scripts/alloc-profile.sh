#!/usr/bin/env bash
# Allocations per `tools/call` through Berth `Shared` (issue 14, "fewer allocations and copies
# per call"), counted by valgrind's DHAT: deterministic, so the figure does not depend on what
# else the machine is doing. The proxy is built without mimalloc (valgrind sees the C
# allocator only) and runs in front of server-everything over Streamable HTTP; a standard
# library Python client makes CALLS sequential calls after a warm-up of WARMUP, and the
# difference between two runs (WARMUP and WARMUP + CALLS) divided by CALLS is per call.
# Prints the figures and the call sites that allocate most per call.
# Usage: scripts/alloc-profile.sh [CALLS] (default 1000). BERTH_ALLOC_PROXY_BIN=PATH profiles
# that binary instead of building one (e.g. an earlier commit's, built with
# `--no-default-features`), for a before-and-after.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$root"
export BERTH_CACHE_DIR="${BERTH_CACHE_DIR:-$HOME/.cache/berth}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$BERTH_CACHE_DIR/target}"
calls=${1:-1000}
warmup=200

if ! command -v valgrind >/dev/null; then
  apt-get update -q >/dev/null && apt-get install -y -q valgrind >/dev/null
fi
(cd tests/peers/node && npm ci --no-audit --no-fund --loglevel=error)
work=$(mktemp -d "${TMPDIR:-/tmp}/berth-alloc.XXXXXX")
if [[ -n "${BERTH_ALLOC_PROXY_BIN:-}" ]]; then
  cp "$BERTH_ALLOC_PROXY_BIN" "$work/berth-proxy"
else
  cargo build --release -p berth-proxy --no-default-features --bin berth-proxy >&2
  cp "$CARGO_TARGET_DIR/release/berth-proxy" "$work/berth-proxy"
fi
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
upstream_port=$(free_port)
PORT=$upstream_port node tests/peers/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js \
  streamableHttp >"$work/upstream.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$upstream_port") 2>/dev/null && break
  sleep 0.1
done

# One proxy under DHAT, CALLS sequential calls, then SIGTERM (DHAT writes its profile on exit).
profile() {
  local n=$1 port admin
  port=$(free_port)
  admin=$(free_port)
  valgrind --tool=dhat --dhat-out-file="$work/dhat.$n.json" "$work/berth-proxy" \
    --upstream-url "http://127.0.0.1:$upstream_port/mcp" --listen "127.0.0.1:$port" \
    --admin-listen "127.0.0.1:$admin" --worker-threads 1 >"$work/proxy.$n.log" 2>&1 &
  local proxy=$!
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$admin/readyz" >/dev/null && break
    sleep 0.1
  done
  python3 tests/peers/alloc/sequential_calls.py "$port" "$n"
  kill -TERM "$proxy"
  wait "$proxy" || true
}
profile "$warmup"
profile "$((warmup + calls))"
python3 tests/peers/alloc/per_call.py "$work/dhat.$warmup.json" "$work/dhat.$((warmup + calls)).json" "$calls"
