#!/usr/bin/env bash
# `make demo`: Berth's main job end to end on this machine, on an embedded default.
#  1. build the binaries and start the local control plane (etcd, kube-apiserver,
#     kube-controller-manager; built from Go modules and cached outside the repo);
#  2. install the McpUpstream CRD, start the operator, apply examples/everything.yaml;
#  3. take the proxy config the operator rendered into the ConfigMap, and run the berth proxy
#     with exactly that config (listen addresses moved to loopback) in front of the Node
#     reference server, which is what the upstream sidecar runs in the pod;
#  4. make an MCP tools/call through the proxy and print it with the metric line it produced.
# Everything listens on 127.0.0.1 only and is stopped on exit.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$root"
export BERTH_CACHE_DIR="${BERTH_CACHE_DIR:-$HOME/.cache/berth}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$BERTH_CACHE_DIR/target}"
step() { printf '\n== %s\n' "$*" >&2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/berth-demo.XXXXXX")
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  tests/controlplane/down.sh "$work/cp" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

step "build berth-operator and berth-proxy"
cargo build --workspace --bins --quiet
bin="$CARGO_TARGET_DIR/debug"

step "install the Node reference MCP server (npm)"
(cd tests/peers/node && npm ci --no-audit --no-fund --loglevel=error)

step "start the local control plane"
BERTH_CP_MANIFESTS=crds/berth.dev_mcpupstreams.yaml tests/controlplane/up.sh "$work/cp" >/dev/null
export KUBECONFIG="$work/cp/kubeconfig"
kubectl="$(tests/controlplane/build.sh | tail -n 1)/kubectl"

step "install the CRD and start the operator"
"$kubectl" apply --server-side -f crds/berth.dev_mcpupstreams.yaml
"$kubectl" wait --for=condition=Established crd/mcpupstreams.berth.dev --timeout=60s
"$bin/berth-operator" run --metrics-listen 127.0.0.1:0 > "$work/operator.log" 2>&1 &
pids+=($!)

step "apply examples/everything.yaml"
"$kubectl" apply -f examples/everything.yaml
for _ in $(seq 1 60); do
  "$kubectl" get configmap everything-proxy >/dev/null 2>&1 && break
  sleep 1
done
"$kubectl" get mcpupstream everything
"$kubectl" get deployment,service,configmap -l app.kubernetes.io/instance=everything
"$kubectl" get configmap everything-proxy -o 'jsonpath={.data.proxy\.yaml}' > "$work/proxy.yaml"
echo "--- proxy config rendered by the operator (ConfigMap everything-proxy):" >&2
cat "$work/proxy.yaml" >&2

step "run the upstream (Node reference server) and the proxy with that config"
upstream_url=$(awk '/url:/ {print $2}' "$work/proxy.yaml")
upstream_port=$(echo "$upstream_url" | sed -E 's#^http://127\.0\.0\.1:([0-9]+)/.*#\1#')
PORT="$upstream_port" node --import ./tests/peers/node/loopback.mjs \
  tests/peers/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js streamableHttp \
  > "$work/upstream.log" 2>&1 &
pids+=($!)
# The pod gets its session-signing key from the Secret the operator created
# (everything-session-key); the demo passes it the same way, as an environment variable.
for _ in $(seq 1 30); do
  "$kubectl" get secret everything-session-key >/dev/null 2>&1 && break
  sleep 1
done
BERTH_SESSION_KEY=$("$kubectl" get secret everything-session-key -o 'jsonpath={.data.key}' | base64 -d) \
  "$bin/berth-proxy" --config "$work/proxy.yaml" --listen 127.0.0.1:18080 --admin-listen 127.0.0.1:19090 \
  > "$work/proxy.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 60); do
  curl -fs http://127.0.0.1:19090/readyz >/dev/null 2>&1 && break
  sleep 0.5
done
curl -fs http://127.0.0.1:19090/readyz >/dev/null || { tail -20 "$work/proxy.log" >&2; exit 1; }

step "an MCP client calls the echo tool through the proxy"
mcp=http://127.0.0.1:18080/mcp
hdr=(-H 'content-type: application/json' -H 'accept: application/json, text/event-stream')
session=$(curl -fsS -D - -o /dev/null "${hdr[@]}" "$mcp" -d \
  '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"berth-demo","version":"0"}}}' \
  | awk 'tolower($1)=="mcp-session-id:" {print $2}' | tr -d '\r')
curl -fsS "${hdr[@]}" -H "mcp-session-id: $session" "$mcp" \
  -d '{"jsonrpc":"2.0","method":"notifications/initialized"}'
echo '--> {"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hello from berth"}}}'
printf '<-- '
curl -fsS "${hdr[@]}" -H "mcp-session-id: $session" "$mcp" \
  -d '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hello from berth"}}}' \
  | sed -n 's/^data: //p'
echo
echo "--- the metric line it produced:"
curl -fsS http://127.0.0.1:19090/metrics | grep '^berth_proxy_tool_calls_total'
