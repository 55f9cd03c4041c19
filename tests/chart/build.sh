#!/usr/bin/env bash
# Builds the chart test tools (helm, promtool, and the Prometheus server that the pod tests run
# against the one-node cluster) from the pinned Go modules in tools/helm and tools/promtool into
# a cache directory outside the repository:
#
#   ${BERTH_CACHE_DIR:-$HOME/.cache/berth}/chart-tools/<key>/bin/
#
# <key> holds the helm and Prometheus versions plus a hash of the go.mod/go.sum
# files, so changing a pin builds into a fresh directory. If the tools asked for
# are already there, nothing is built. The last line on stdout is the bin dir;
# progress goes to stderr. Needs only a Go toolchain (>= 1.26) and the module
# proxy; GOMODCACHE and GOCACHE stay at their defaults. Modelled on
# ../controlplane/build.sh.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source=../go-tool.sh
source "$here/../go-tool.sh"
log() { printf 'chart/build.sh: %s\n' "$*" >&2; }

# Bump when the build flags below change, to invalidate existing caches.
recipe=2

# Versions come from the committed go.mod files (single source of truth).
modver() { awk -v m="$2" '$1 == m { print $2; exit }' "$here/tools/$1/go.mod"; }
helm_version=$(modver helm helm.sh/helm/v3)
prom_version=$(modver promtool github.com/prometheus/prometheus)
client_go=$(modver helm k8s.io/client-go)
[[ -n $helm_version && -n $prom_version && -n $client_go ]] || { log "cannot read versions from go.mod"; exit 1; }

sha() { if command -v sha256sum >/dev/null; then sha256sum; else shasum -a 256; fi | cut -c1-12; }
hash=$({ echo "recipe=$recipe $(uname -sm)"; cat "$here"/tools/helm/go.mod "$here"/tools/helm/go.sum \
  "$here"/tools/promtool/go.mod "$here"/tools/promtool/go.sum; } | sha)
key="helm-${helm_version}_prometheus-${prom_version}_${hash}"
key_dir="${BERTH_CACHE_DIR:-$HOME/.cache/berth}/chart-tools/$key"
bin_dir="$key_dir/bin"
# Usage: build.sh [helm] [prometheus]: only the named tools (prometheus means promtool and the
# server, one build), default both; `make demo` needs only helm.
wanted=("${@:-helm prometheus}")
wanted=(${wanted[*]})
bins=()
for tool in "${wanted[@]}"; do
  case $tool in
    helm) bins+=(helm) ;;
    prometheus) bins+=(promtool prometheus) ;;
    *) log "unknown tool $tool (helm or prometheus)"; exit 2 ;;
  esac
done

have_all() { local b; for b in "${bins[@]}"; do [[ -x $bin_dir/$b ]] || return 1; done; }

# Built already (or by a concurrent builder of the same key, waited for): nothing to do.
if cache_claim "$key_dir" have_all; then echo "$bin_dir"; exit 0; fi
mkdir -p "$bin_dir"
go=$(go_toolchain)

# Static, reproducible builds that ignore any surrounding go.work.
export CGO_ENABLED=0 GOWORK=off
tmp=$(mktemp -d "$key_dir/tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)

# --- helm -------------------------------------------------------------------
# The same stamps as helm's Makefile: the Kubernetes minor that `helm template`
# and `helm lint` assume without a cluster follows the client-go it links.
k8s_minor=${client_go#v0.}; k8s_minor=${k8s_minor%%.*}
hv=helm.sh/helm/v3
ldflags="-s -w -X $hv/internal/version.version=$helm_version -X $hv/internal/version.gitTreeState=clean"
for pkg in $hv/pkg/chartutil $hv/pkg/lint/rules; do
  ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
done
if [[ " ${bins[*]} " == *" helm "* && ! -x $bin_dir/helm ]]; then
  log "building helm $helm_version ($($go env GOVERSION))"
  (cd "$here/tools/helm" && "$go" build -mod=readonly -trimpath -ldflags "$ldflags" \
    -o "$tmp/helm" $hv/cmd/helm)
fi

# --- promtool ---------------------------------------------------------------
# Prometheus tags its Go module v0.3XX.Y for release v3.XX.Y.
mm=${prom_version#v0.}; mm=${mm%%.*}; patch=${prom_version##*.}
prom_release="${mm:0:1}.$(( 10#${mm:1} )).$patch"
# The server without its web UI assets (no `builtinassets` tag): the tests use its HTTP API.
# Only the Kubernetes service discovery is linked (Prometheus's own `remove_all_sd` and
# `enable_<name>_sd` build tags): the cloud SDKs it drops were half of a cold build.
if [[ " ${bins[*]} " == *" prometheus "* && ! ( -x $bin_dir/promtool && -x $bin_dir/prometheus ) ]]; then
  log "building promtool and prometheus $prom_version (Prometheus $prom_release; slow when cold)"
  (cd "$here/tools/promtool" && "$go" build -mod=readonly -trimpath -tags remove_all_sd,enable_kubernetes_sd \
    -ldflags "-s -w -X github.com/prometheus/common/version.Version=$prom_release -X github.com/prometheus/common/version.Branch=gomod" \
    -o "$tmp/" github.com/prometheus/prometheus/cmd/promtool github.com/prometheus/prometheus/cmd/prometheus)
fi

# Each rename is atomic, so readers never see a half-written binary.
for b in "${bins[@]}"; do if [[ -x $tmp/$b ]]; then mv -f "$tmp/$b" "$bin_dir/$b"; fi; done
printf 'helm=%s prometheus=%s go=%s built=%s\n' "$helm_version" "$prom_version" \
  "$($go env GOVERSION)" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$key_dir/versions"
log "done in $(( $(date +%s) - start ))s"
echo "$bin_dir"
