#!/usr/bin/env bash
# The proxy benchmark beside its peers (issue 14), as docs/benchmarks.md records it: installs
# the peers (tests/peers/bench/install.sh: npm, PyPI, Go, cached), builds the release proxy and
# bench_proxy, runs every system in one invocation, and writes docs/benchmarks/proxy.json and
# docs/benchmarks/latency.png. The Markdown tables go to stdout. Extra arguments go to
# bench_proxy (e.g. --only "berth Shared"). nginx must be installed (make test installs it).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$root"
export BERTH_CACHE_DIR="${BERTH_CACHE_DIR:-$HOME/.cache/berth}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$BERTH_CACHE_DIR/target}"

if [[ ! -x /usr/sbin/nginx ]]; then
  apt-get update -q >/dev/null && apt-get install -y -q nginx-light >/dev/null
fi
tests/peers/bench/install.sh >&2
cargo build --release -p berth-proxy -p berth-tests --bin berth-proxy --bin bench_proxy --bin plain_hop >&2
mkdir -p docs/benchmarks
"$CARGO_TARGET_DIR/release/bench_proxy" --proxy-bin "$CARGO_TARGET_DIR/release/berth-proxy" \
  --json docs/benchmarks/proxy.json "$@"
"$(cat "$BERTH_CACHE_DIR/bench-python")" tests/peers/bench/plot.py \
  docs/benchmarks/proxy.json docs/benchmarks/latency.png
echo "wrote docs/benchmarks/proxy.json and docs/benchmarks/latency.png" >&2
