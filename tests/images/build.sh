#!/usr/bin/env bash
# Usage: tests/images/build.sh
#
# Builds the images the local test node runs beside Berth's own (images/build.sh), without a
# registry or a base image to pull, and exports each as a docker-archive tarball:
#
#   ${BERTH_CACHE_DIR:-$HOME/.cache/berth}/test-images/<key>/{pause,everything,time}.tar
#
# - pause (berth.local/pause:3.10): the kubelet's sandbox image, Kubernetes' own pause.c (from
#   the k8s.io/kubernetes module the control plane is built from) compiled statically;
# - everything (berth.local/everything:test): the Node reference MCP server
#   @modelcontextprotocol/server-everything (tests/peers/node, npm ci) with this machine's node
#   binary and the shared libraries it loads; entrypoint `node .../dist/index.js`;
# - time (berth.local/mcp-server-time:test): the stdio server mcp-server-time (PyPI, from the
#   Python peer venv, tests/peers/python) with this machine's CPython, its standard library and
#   every shared library its extension modules load; run it as `python3 -m mcp_server_time`.
#
# Every file is world-readable, so the images run as any UID (the pods run as 65532). The
# digests are the ones containerd reports once the archives are imported (up.sh lists them in
# STATE_DIR/images); tests pin the upstream images by those digests. <key> hashes the inputs,
# so unchanged inputs reuse the archives. The last line on stdout is the directory.
set -euo pipefail

me=tests/images/build.sh
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
root=$(cd "$here/../.." && pwd -P)
log() { printf '%s: %s\n' "$me" "$*" >&2; }
fail() { log "FAIL: $*"; exit 1; }
cache=${BERTH_CACHE_DIR:-$HOME/.cache/berth}
command -v buildah >/dev/null || fail "buildah is required (apt-get install buildah)"
command -v gcc >/dev/null || fail "gcc is required"

node_bin=$(command -v node) || fail "node is required"
node_bin=$(readlink -f "$node_bin")
python=${BERTH_PYTHON:-$("$root/tests/peers/python/install.sh" | tail -n 1)}
py_prefix=$("$python" -c 'import sys; print(sys.base_prefix)')
py_ver=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
py_site=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# The module may not be in the module cache yet on a fresh machine (`make demo` builds these
# images before the control plane): download the pinned version first.
(cd "$root/tests/controlplane/k8s" && GOWORK=off go mod download k8s.io/kubernetes) >&2
pause_c=$(cd "$root/tests/controlplane/k8s" && GOWORK=off go list -mod=readonly -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c
[[ -f $pause_c ]] || fail "no pause.c in the k8s.io/kubernetes module ($pause_c)"

(cd "$root/tests/peers/node" && npm ci --no-audit --no-fund --loglevel=error >&2)
key=$({ cat "$here/build.sh" "$pause_c" "$root/tests/peers/node/package-lock.json" \
  "$root/tests/peers/python/requirements.txt"; "$node_bin" --version; "$python" --version; } | sha256sum | cut -c1-16)
dir=$cache/test-images/$key
if [[ -s $dir/pause.tar && -s $dir/everything.tar && -s $dir/time.tar ]]; then
  log "images unchanged: $dir"
  echo "$dir"
  exit 0
fi
mkdir -p "$dir"
tmp=$(mktemp -d "$dir/tmp.XXXXXX")
storage=(--storage-driver vfs --root "$cache/test-images/storage" --runroot "$tmp/run")
containers=()
cleanup() {
  local c
  for c in "${containers[@]}"; do buildah "${storage[@]}" rm "$c" >/dev/null 2>&1 || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

# copy_at ROOTFS FILE: FILE (its target, if a symlink) at the same path under ROOTFS.
copy_at() { mkdir -p "$1$(dirname "$2")" && cp -L "$2" "$1$2"; }

# copy_closure ROOTFS FILE...: FILE and every shared library it loads (ldd), at their own paths.
copy_closure() {
  local rootfs=$1 f lib; shift
  for f in "$@"; do
    copy_at "$rootfs" "$f"
    while read -r lib; do
      [[ -e $rootfs$lib ]] || copy_at "$rootfs" "$lib"
    done < <(ldd "$f" 2>/dev/null | awk '/=> \// { print $3 } /^\t\/lib/ { print $1 }')
  done
}

# image NAME REF CONFIG...: a scratch image whose root filesystem fill_NAME writes, configured
# with the buildah config flags CONFIG, exported to $dir/NAME.tar.
image() {
  local name=$1 ref=$2 c mnt; shift 2
  c=$(buildah "${storage[@]}" from scratch)
  containers+=("$c")
  mnt=$(buildah "${storage[@]}" mount "$c")
  "fill_$name" "$mnt"
  chmod -R a+rX "$mnt"
  buildah "${storage[@]}" umount "$c" >/dev/null
  buildah "${storage[@]}" config "$@" --label org.opencontainers.image.title="$name" "$c"
  buildah "${storage[@]}" commit --rm -q "$c" "$ref" >/dev/null
  rm -f "$tmp/$name.tar"
  buildah "${storage[@]}" push -q "$ref" "docker-archive:$tmp/$name.tar:$ref"
  mv -f "$tmp/$name.tar" "$dir/$name.tar"
  log "$ref -> $dir/$name.tar"
}

fill_pause() {
  mkdir -p "$1/bin"
  gcc -Os -static -Wall -DVERSION=v3.10-berth -o "$1/bin/pause" "$pause_c"
  strip "$1/bin/pause"
}

fill_everything() {
  mkdir -p "$1/app" "$1/tmp" && chmod 1777 "$1/tmp"
  copy_closure "$1" "$node_bin"
  cp -a "$root/tests/peers/node/node_modules" "$1/app/"
}

fill_time() {
  local rootfs=$1 so
  mkdir -p "$rootfs/opt/python/lib" "$rootfs/opt/app" "$rootfs/tmp" && chmod 1777 "$rootfs/tmp"
  cp -aL "$py_prefix/bin/python$py_ver" "$rootfs/opt/python/python3"
  cp -aL "$py_prefix"/lib/libpython"$py_ver"*.so* "$rootfs/opt/python/lib/" 2>/dev/null || true
  # The standard library without its tests, tooling and the base interpreter's own packages.
  (cd "$py_prefix/lib" && tar -cf - --exclude="python$py_ver/test" --exclude="python$py_ver/site-packages" \
    --exclude="python$py_ver/idlelib" --exclude="python$py_ver/tkinter" --exclude="python$py_ver/turtledemo" \
    --exclude="python$py_ver/ensurepip" --exclude="python$py_ver/lib2to3" --exclude='__pycache__' \
    "python$py_ver") | tar -xf - -C "$rootfs/opt/python/lib"
  (cd "$py_site" && tar -cf - --exclude='pip' --exclude='pip-*' --exclude='__pycache__' .) |
    tar -xf - -C "$rootfs/opt/app"
  copy_closure "$rootfs" "$py_prefix/bin/python$py_ver"
  while IFS= read -r so; do
    copy_closure "$rootfs" "$so"
  done < <(find "$py_prefix/lib/python$py_ver/lib-dynload" "$py_site" -name '*.so*' -type f)
  # copy_closure placed the originals at their host paths as well; the image uses /opt.
  rm -rf "${rootfs:?}${py_site:?}" "${rootfs:?}${py_prefix:?}/lib/python$py_ver"
}

image pause berth.local/pause:3.10 --entrypoint '["/bin/pause"]' --user 65535:65535
image everything berth.local/everything:test \
  --entrypoint "[\"$node_bin\", \"/app/node_modules/@modelcontextprotocol/server-everything/dist/index.js\"]" \
  --env PORT=3001 --user 65532:65532
image time berth.local/mcp-server-time:test \
  --entrypoint '["/opt/python/python3", "-m", "mcp_server_time"]' \
  --env PATH=/opt/python:/usr/bin:/bin --env PYTHONPATH=/opt/app \
  --env PYTHONHOME=/opt/python --env LD_LIBRARY_PATH=/opt/python/lib --user 65532:65532
echo "$dir"
