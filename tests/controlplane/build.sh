#!/usr/bin/env bash
# Builds the local test cluster's Kubernetes parts (etcd, kube-apiserver,
# kube-controller-manager, kubectl, and for the node kube-scheduler, kubelet,
# kube-proxy) from the pinned Go modules in k8s/ and etcd/ into a cache
# directory outside the repository:
#
#   ${BERTH_CACHE_DIR:-$HOME/.cache/berth}/controlplane/<key>/bin/
#
# <key> holds the Kubernetes and etcd versions plus a hash of the go.mod/go.sum
# files, so changing a pin builds into a fresh directory. If every binary is
# already there, nothing is built. The last line on stdout is the bin dir;
# progress goes to stderr. Needs only a Go toolchain (>= 1.26) and the module
# proxy; GOMODCACHE and GOCACHE stay at their defaults.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source=../go-tool.sh
source "$here/../go-tool.sh"
log() { printf 'build.sh: %s\n' "$*" >&2; }

# Bump when the build flags below change, to invalidate existing caches.
recipe=1

# Versions come from the committed go.mod files (single source of truth).
modver() { awk -v m="$2" '$1 == m { print $2; exit }' "$here/$1/go.mod"; }
k8s_version=$(modver k8s k8s.io/kubernetes)
etcd_version=$(modver etcd go.etcd.io/etcd/server/v3)
[[ -n $k8s_version && -n $etcd_version ]] || { log "cannot read versions from go.mod"; exit 1; }

sha() { if command -v sha256sum >/dev/null; then sha256sum; else shasum -a 256; fi | cut -c1-12; }
hash=$({ echo "recipe=$recipe $(uname -sm)"; cat "$here"/k8s/go.mod "$here"/k8s/go.sum "$here"/etcd/go.mod "$here"/etcd/go.sum; } | sha)
key="k8s-${k8s_version}_etcd-${etcd_version}_${hash}"
key_dir="${BERTH_CACHE_DIR:-$HOME/.cache/berth}/controlplane/$key"
bin_dir="$key_dir/bin"
bins=(etcd kube-apiserver kube-controller-manager kubectl kube-scheduler kubelet kube-proxy)

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

# --- etcd -------------------------------------------------------------------
log "building etcd $etcd_version ($($go env GOVERSION))"
(cd "$here/etcd" && "$go" build -mod=readonly -trimpath \
  -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=gomod-$etcd_version" \
  -o "$tmp/etcd" go.etcd.io/etcd/server/v3)

# --- Kubernetes ---------------------------------------------------------------
# Without these stamps the binaries report v0.0.0-master+$Format:%H$.
minor=${k8s_version#v1.}; minor=${minor%%.*}
build_date=$(cd "$here/k8s" && "$go" list -mod=readonly -m \
  -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes 2>/dev/null || echo 1970-01-01T00:00:00Z)
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitCommit= -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done
log "building ${bins[*]:1} $k8s_version (slow when cold)"
(cd "$here/k8s" && "$go" build -mod=readonly -trimpath -ldflags "$ldflags" -o "$tmp/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kubectl \
  k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kubelet \
  k8s.io/kubernetes/cmd/kube-proxy)

# Each rename is atomic, so readers never see a half-written binary.
for b in "${bins[@]}"; do mv -f "$tmp/$b" "$bin_dir/$b"; done
printf 'k8s=%s etcd=%s go=%s built=%s\n' "$k8s_version" "$etcd_version" \
  "$($go env GOVERSION)" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$key_dir/versions"
log "done in $(( $(date +%s) - start ))s"
echo "$bin_dir"
