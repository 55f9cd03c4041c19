#!/usr/bin/env bash
# Builds the local test node's container runtime from the pinned Go module in runtime/: containerd
# 2.x, its runc shim (containerd-shim-runc-v2) and ctr, runc, plus the CNI plugins bridge,
# host-local, loopback and portmap, into a cache directory outside the repository:
#
#   ${BERTH_CACHE_DIR:-$HOME/.cache/berth}/runtime/<key>/bin/        containerd, shim, ctr, runc
#   ${BERTH_CACHE_DIR:-$HOME/.cache/berth}/runtime/<key>/cni/bin/    the CNI plugins
#
# runc needs cgo and libseccomp (Debian's libseccomp-dev, installed when missing): Debian's own
# runc 1.1 cannot start the pod sandboxes containerd 2.x asks for. <key> holds the containerd and CNI
# plugin versions plus a hash of runtime/go.mod and go.sum, so changing a pin builds into a fresh
# directory; if everything is already there nothing is built. The last line on stdout is the key
# directory; progress goes to stderr. Needs only a Go toolchain and the module proxy. Modelled on
# build.sh.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# shellcheck source=../go-tool.sh
source "$here/../go-tool.sh"
log() { printf 'build-runtime.sh: %s\n' "$*" >&2; }

# Bump when the build flags below change, to invalidate existing caches.
recipe=1

modver() { awk -v m="$1" '$1 == m && $2 ~ /^v/ { print $2; exit }' "$here/runtime/go.mod"; }
containerd_version=$(modver github.com/containerd/containerd/v2)
runc_version=$(modver github.com/opencontainers/runc)
cni_version=$(modver github.com/containernetworking/plugins)
[[ -n $containerd_version && -n $runc_version && -n $cni_version ]] || { log "cannot read versions from runtime/go.mod"; exit 1; }

sha() { sha256sum | cut -c1-12; }
hash=$({ echo "recipe=$recipe $(uname -sm)"; cat "$here"/runtime/go.mod "$here"/runtime/go.sum; } | sha)
key_dir="${BERTH_CACHE_DIR:-$HOME/.cache/berth}/runtime/containerd-${containerd_version}_cni-${cni_version}_${hash}"
bins=(bin/containerd bin/containerd-shim-runc-v2 bin/ctr bin/runc cni/bin/bridge cni/bin/host-local cni/bin/loopback cni/bin/portmap)

have_all() { local b; for b in "${bins[@]}"; do [[ -x $key_dir/$b ]] || return 1; done; }
# Built already (or by a concurrent builder of the same key, waited for): nothing to do.
if cache_claim "$key_dir" have_all; then echo "$key_dir"; exit 0; fi
mkdir -p "$key_dir/bin" "$key_dir/cni/bin"
go=$(go_toolchain)

# Static builds: without cgo containerd leaves out the btrfs snapshotter, which this node does
# not use (it runs the overlayfs snapshotter).
export CGO_ENABLED=0 GOWORK=off
tmp=$(mktemp -d "$key_dir/tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)

pkg=github.com/containerd/containerd/v2
log "building containerd $containerd_version ($($go env GOVERSION))"
(cd "$here/runtime" && "$go" build -mod=readonly -trimpath \
  -ldflags "-s -w -X $pkg/version.Version=$containerd_version -X $pkg/version.Revision=gomod -X $pkg/version.Package=$pkg" \
  -o "$tmp/" "$pkg/cmd/containerd" "$pkg/cmd/containerd-shim-runc-v2" "$pkg/cmd/ctr")

if ! pkg-config --exists libseccomp 2>/dev/null; then
  log "installing libseccomp-dev and pkg-config (Debian) for runc"
  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q libseccomp-dev pkg-config; } >&2
fi
log "building runc $runc_version (cgo, seccomp)"
(cd "$here/runtime" && CGO_ENABLED=1 "$go" build -mod=readonly -trimpath -tags seccomp \
  -ldflags "-s -w -X main.version=${runc_version#v} -X main.gitCommit=gomod" \
  -o "$tmp/runc" github.com/opencontainers/runc)

plugins=github.com/containernetworking/plugins/plugins
log "building CNI plugins $cni_version"
mkdir -p "$tmp/cni"
(cd "$here/runtime" && "$go" build -mod=readonly -trimpath \
  -ldflags "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$cni_version" \
  -o "$tmp/cni/" "$plugins/main/bridge" "$plugins/main/loopback" "$plugins/ipam/host-local" "$plugins/meta/portmap")

for b in containerd containerd-shim-runc-v2 ctr runc; do mv -f "$tmp/$b" "$key_dir/bin/$b"; done
for b in bridge host-local loopback portmap; do mv -f "$tmp/cni/$b" "$key_dir/cni/bin/$b"; done
printf 'containerd=%s runc=%s cni-plugins=%s go=%s built=%s\n' "$containerd_version" "$runc_version" "$cni_version" \
  "$($go env GOVERSION)" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$key_dir/versions"
log "done in $(( $(date +%s) - start ))s"
echo "$key_dir"
