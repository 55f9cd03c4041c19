#!/usr/bin/env bash
# The whole test suite, as `make test` and CI run it, on a machine that has only the
# toolchains (Rust, Go, Node): installs the MCP peers, builds (cached) and starts the local
# control plane, then runs format, lint and every test, and stops what it started. The last
# stage starts a one-node cluster (kubelet, containerd) and runs Berth's pods on it, from the
# images built here.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$root"
export BERTH_CACHE_DIR="${BERTH_CACHE_DIR:-$HOME/.cache/berth}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$BERTH_CACHE_DIR/target}"
# No incremental caches: a full run builds each crate once, and they grow the shared target
# directory by gigabytes per checkout.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
step() { printf '\n== %s\n' "$*" >&2; }

# Each checkout's test and bench binaries get new hashes in the shared target directory (about
# 350 MB each, 50 of them): keep only the newest build of each name, so repeated runs on new
# clones do not fill the disk (a full disk puts the kubelet's disk-pressure taint on the node).
# The workspace crates' own libraries (`libberth_*.rlib`/`.rmeta`, up to 50 MB each) get new
# hashes the same way: keep the newest three builds of each (one checkout's dev, test and
# clippy builds); cargo rebuilds one it misses.
prune_stale_binaries() {
  local deps="$CARGO_TARGET_DIR/debug/deps"
  [[ -d $deps ]] || return 0
  find "$deps" -maxdepth 1 -type f -perm -u+x ! -name '*.*' -printf '%T@ %f\n' | sort -rn |
    awk '{ name = $2; sub(/-[0-9a-f]+$/, "", name); if (seen[name]++) print $2 }' |
    (cd "$deps" && xargs -r rm -f --)
  find "$deps" -maxdepth 1 -type f -name 'libberth_*' \( -name '*.rlib' -o -name '*.rmeta' \) \
    -printf '%T@ %f\n' | sort -rn |
    awk '{ build = $2; sub(/\.(rlib|rmeta)$/, "", build); name = build; sub(/-[0-9a-f]+$/, "", name)
           if (!(build in rank)) rank[build] = ++builds[name]
           if (rank[build] > 3) print $2 }' |
    (cd "$deps" && xargs -r rm -f --)
}
prune_stale_binaries

step "format and lint"
cargo fmt --all --check
cargo clippy --workspace --all-targets --all-features -- -D warnings
# Every intra-doc link of the crates' docs resolves (module maps, field docs): the public docs
# link to no private item, and the docs of private items resolve too.
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps -p berth-crds -p berth-operator -p berth-proxy
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --document-private-items \
    -p berth-crds -p berth-operator -p berth-proxy

step "MCP peers and the conformance suites (npm, pip)"
(cd tests/peers/node && npm ci --no-audit --no-fund --loglevel=error)
# The MCP conformance suites (0.1.16 and 0.2.0-alpha.12) and the Node 22 they run on.
(cd tests/peers/conformance && npm ci --no-audit --no-fund --loglevel=error)
BERTH_PYTHON="$(tests/peers/python/install.sh | tail -n 1)"
export BERTH_PYTHON

step "nginx (reverse proxy and round-robin ingress in front of the proxy; BR-17, BR-35)"
if [[ ! -x /usr/sbin/nginx ]]; then
  # Debian's service start is refused where policy-rc.d forbids it; tests start their own
  # nginx on 127.0.0.1 from a temporary prefix either way.
  apt-get update -q >/dev/null && apt-get install -y -q nginx-light >/dev/null
fi

step "ORY Hydra (the OAuth 2.1 authorization server of the auth tests; Go, cached)"
BERTH_HYDRA="$(tests/auth/build.sh | tail -n 1)/hydra"
export BERTH_HYDRA

step "Jaeger (the trace backend of the tracing tests; Go, cached)"
BERTH_JAEGER="$(tests/tracing/build.sh | tail -n 1)/jaeger"
export BERTH_JAEGER

step "helm, promtool and Prometheus (the chart, alert and dashboard tests; Go, cached)"
chart_tools=$(tests/chart/build.sh | tail -n 1)
export BERTH_PROMETHEUS="$chart_tools/prometheus"

step "local control plane"
state=$(mktemp -d "${TMPDIR:-/tmp}/berth-test.XXXXXX")
node_state=$(mktemp -d "${TMPDIR:-/tmp}/berth-node.XXXXXX")
log=$(mktemp "${TMPDIR:-/tmp}/berth-cargo-test.XXXXXX")
cleanup() {
  local dir
  for dir in "$state" "$node_state"; do
    tests/controlplane/down.sh "$dir" >/dev/null 2>&1 || true
    rm -rf "$dir"
  done
}
trap cleanup EXIT
BERTH_CP_MANIFESTS=crds/berth.dev_mcpupstreams.yaml tests/controlplane/up.sh "$state"
export KUBECONFIG="$state/kubeconfig"

step "tests"
# Programs the tests run as processes (berth-operator, berth-proxy) are built first: `cargo test`
# alone rebuilds only test targets, and a stale binary from an earlier checkout would be used.
cargo build --workspace --bins
cargo test --workspace 2>&1 | tee "$log"
tests/controlplane/down.sh "$state" >/dev/null

step "chart and alerts (helm, promtool; a control plane of their own)"
tests/chart/test.sh

step "images (static binaries, buildah; no Docker engine)"
if ! command -v buildah >/dev/null; then
  apt-get update -q >/dev/null && apt-get install -y -q buildah >/dev/null
fi
berth_images=$(images/build.sh | tail -n 1)
test_images=$(tests/images/build.sh | tail -n 1)

step "real pods: a one-node cluster (kubelet, containerd, kube-proxy) runs Berth's images"
BERTH_CP_NODE=1 BERTH_CP_IMAGES="$berth_images $test_images" tests/controlplane/up.sh "$node_state" >/dev/null
KUBECONFIG="$node_state/kubeconfig" BERTH_NODE_STATE="$node_state" \
  BERTH_HELM="$chart_tools/helm" \
  cargo test -p berth-tests --features node --test pods --test pods_alerts -- --show-output 2>&1 | tee -a "$log"

# One closing line over every cargo test binary (each prints its own `test result:` line).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
