#!/usr/bin/env bash
# `make demo`: Berth's main job end to end on this machine, on an embedded default.
#  1. build Berth's images (images/build.sh) and the upstream images (tests/images/build.sh:
#     the Node reference server, a Python stdio server, the pause image), without a registry;
#  2. start a one-node cluster (tests/controlplane/up.sh with BERTH_CP_NODE=1: etcd,
#     kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy, containerd;
#     built from Go modules and cached outside the repo) and import the images;
#  3. `helm install` charts/berth: the operator runs as a pod from its image;
#  4. `kubectl apply` examples/everything.yaml with the locally built server image pinned by
#     its digest, and wait for READY True;
#  5. call the echo tool through the Service's ClusterIP and print the call, the metric line it
#     produced on the pod's /metrics, and `kubectl get mcpu`.
# Needs root (the cluster lives in a network namespace of its own). Nothing listens outside
# 127.0.0.1 and that namespace; everything is stopped on exit.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$root"
export BERTH_CACHE_DIR="${BERTH_CACHE_DIR:-$HOME/.cache/berth}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$BERTH_CACHE_DIR/target}"
step() { printf '\n== %s\n' "$*" >&2; }
t0=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/tmp}/berth-demo.XXXXXX")
cleanup() {
  tests/controlplane/down.sh "$work/cluster" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

step "images: berth-proxy, berth-operator, and the upstream servers (buildah, no registry)"
if ! command -v buildah >/dev/null; then
  apt-get update -q >/dev/null && apt-get install -y -q buildah >/dev/null
fi
berth_images=$(images/build.sh | tail -n 1)
test_images=$(tests/images/build.sh | tail -n 1)

step "a one-node cluster: control plane, kubelet, kube-proxy, containerd"
BERTH_CP_NODE=1 BERTH_CP_IMAGES="$berth_images $test_images" tests/controlplane/up.sh "$work/cluster" >/dev/null
export KUBECONFIG="$work/cluster/kubeconfig"
kubectl="$(tests/controlplane/build.sh | tail -n 1)/kubectl"
helm="$(tests/chart/build.sh helm | tail -n 1)/helm"
digest() { awk -v ref="$1" '$1 == ref { print $2 }' "$work/cluster/images"; }
version=$(awk -F'"' '/^appVersion:/ { print $2 }' charts/berth/Chart.yaml)

step "helm install charts/berth (the operator as a pod, the proxy image pinned by digest)"
"$helm" install berth charts/berth -n berth-system --create-namespace \
  --set "operator.proxyImage.digest=$(digest "ghcr.io/berth-dev/berth-proxy:$version")" --wait --timeout 5m
"$kubectl" get pods -n berth-system

step "kubectl apply examples/everything.yaml (server image pinned by its digest)"
image="berth.local/everything@$(digest berth.local/everything:test)"
sed -E "s#^( *image: ).*#\1$image#" examples/everything.yaml | "$kubectl" apply -f -
"$kubectl" wait --for=condition=Ready mcpupstream/everything --timeout=5m

step "an MCP client calls the echo tool through the Service's ClusterIP"
mcp="http://$("$kubectl" get service everything -o 'jsonpath={.spec.clusterIP}'):8080/mcp"
hdr=(-H 'content-type: application/json' -H 'accept: application/json, text/event-stream')
# The first request may race kube-proxy's rule sync for the new Service: retry a refused connect.
session=$(curl -fsS --retry 20 --retry-connrefused --retry-delay 1 -D - -o /dev/null "${hdr[@]}" "$mcp" -d \
  '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"berth-demo","version":"0"}}}' |
  awk 'tolower($1)=="mcp-session-id:" {print $2}' | tr -d '\r')
curl -fsS "${hdr[@]}" -H "mcp-session-id: $session" "$mcp" -d '{"jsonrpc":"2.0","method":"notifications/initialized"}'
call='{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hello from berth"}}}'
echo "--> POST $mcp $call"
printf '<-- '
curl -fsS "${hdr[@]}" -H "mcp-session-id: $session" "$mcp" -d "$call" | sed -n 's/^data: //p'
echo
pod_ip=$("$kubectl" get pods -l app.kubernetes.io/instance=everything -o 'jsonpath={.items[0].status.podIP}')
echo "--- the metric line it produced (http://$pod_ip:9090/metrics):"
curl -fsS "http://$pod_ip:9090/metrics" | grep '^berth_proxy_tool_calls_total'
echo "--- kubectl get mcpu:"
"$kubectl" get mcpu
echo "--- demo done in $(($(date +%s) - t0)) s"
