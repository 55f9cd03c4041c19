#!/usr/bin/env bash
# Usage: images/build.sh
#
# Builds the berth-proxy and berth-operator images without a Docker engine and exports them as
# docker-archive tarballs:
#
#   ${BERTH_CACHE_DIR:-$HOME/.cache/berth}/images/<key>/berth-{proxy,operator}.tar
#
# 1. cargo builds both binaries statically against glibc (RUSTFLAGS="-C target-feature=+crt-static"
#    with an explicit --target x86_64-unknown-linux-gnu, so build scripts and proc macros stay
#    dynamic) into ${BERTH_CACHE_DIR}/target-static, apart from the debug target directory;
# 2. buildah (Debian package `buildah`; vfs storage under the cache, no daemon) builds
#    images/{proxy,operator}.Dockerfile with --build-arg BINARIES=prebuilt from a context that
#    holds those binaries and the host's CA bundle, tagged as the chart's defaults
#    (ghcr.io/berth-dev/berth-<name>:<chart appVersion>);
# 3. checks each image: non-root user 65532, entrypoint, OCI labels, and that the binary runs
#    with nothing else in the root filesystem (`--help` under chroot as UID 65532).
#
# <key> hashes both binaries, the Dockerfiles, this script and the version, so unchanged inputs
# reuse the archives (the cargo step is then a no-op). The last line on stdout is the directory.
set -euo pipefail

me=images/build.sh
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
root=$(cd "$here/.." && pwd -P)
log() { printf '%s: %s\n' "$me" "$*" >&2; }
fail() { log "FAIL: $*"; exit 1; }
cache=${BERTH_CACHE_DIR:-$HOME/.cache/berth}
target=x86_64-unknown-linux-gnu
names=(proxy operator)
registry=ghcr.io/berth-dev

[[ $(uname -m) == x86_64 ]] || fail "static glibc builds are set up for x86_64 only"
command -v buildah >/dev/null || fail "buildah is required (apt-get install buildah)"
ca=/etc/ssl/certs/ca-certificates.crt
[[ -s $ca ]] || fail "$ca is required (apt-get install ca-certificates)"

version=$(awk -F'"' '/^appVersion:/ { print $2 }' "$root/charts/berth/Chart.yaml")
[[ -n $version ]] || fail "cannot read appVersion from charts/berth/Chart.yaml"
cargo_version=$(awk -F'"' '/^\[workspace.package\]/ { p = 1 } p && /^version *=/ { print $2; exit }' "$root/Cargo.toml")
[[ -z $cargo_version || $cargo_version == "$version" ]] ||
  fail "Cargo.toml version $cargo_version differs from the chart's appVersion $version"
revision=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)

# --- 1. static binaries -------------------------------------------------------------------
export CARGO_TARGET_DIR=$cache/target-static
log "building static binaries (release, crt-static)"
RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --locked --target "$target" \
  -p berth-proxy --bin berth-proxy -p berth-operator --bin berth-operator >&2
out=$CARGO_TARGET_DIR/$target/release
for name in "${names[@]}"; do
  file "$out/berth-$name" 2>/dev/null | grep -q 'dynamically linked' && fail "berth-$name is not static"
done

sha() { sha256sum | cut -c1-16; }
key=$(cat "$out/berth-proxy" "$out/berth-operator" "$here/proxy.Dockerfile" "$here/operator.Dockerfile" \
  "$here/build.sh" "$ca" <(echo "$version") | sha)
dir=$cache/images/$key
if [[ -s $dir/berth-proxy.tar && -s $dir/berth-operator.tar ]]; then
  log "images unchanged: $dir"
  echo "$dir"
  exit 0
fi

# --- 2. images ------------------------------------------------------------------------------
mkdir -p "$dir"
tmp=$(mktemp -d "$dir/tmp.XXXXXX")
storage=(--storage-driver vfs --root "$cache/images/storage" --runroot "$tmp/run")
containers=()
cleanup() {
  local c
  for c in "${containers[@]}"; do buildah "${storage[@]}" rm "$c" >/dev/null 2>&1 || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
for name in "${names[@]}"; do
  image=$registry/berth-$name:$version
  context=$tmp/context-$name
  mkdir -p "$context/out"
  cp "$out/berth-$name" "$ca" "$context/out/"
  log "building $image"
  timeout 600 buildah "${storage[@]}" bud --layers=false --isolation chroot \
    -f "$here/$name.Dockerfile" --build-arg BINARIES=prebuilt \
    --build-arg VERSION="$version" --build-arg REVISION="$revision" \
    -t "$image" "$context" >&2

  # --- 3. checks ---------------------------------------------------------------------------
  config=$(buildah "${storage[@]}" inspect --type image --format \
    '{{.OCIv1.Config.User}}|{{.OCIv1.Config.Entrypoint}}|{{index .OCIv1.Config.Labels "org.opencontainers.image.version"}}|{{index .OCIv1.Config.Labels "org.opencontainers.image.source"}}' \
    "$image")
  [[ $config == "65532:65532|[/usr/local/bin/berth-$name]|$version|https://github.com/berth-dev/berth" ]] ||
    fail "$image has an unexpected config: $config"
  container=$(buildah "${storage[@]}" from "$image")
  containers+=("$container")
  mnt=$(buildah "${storage[@]}" mount "$container")
  files=$(cd "$mnt" && find . -type f | sort | tr '\n' ' ')
  [[ $files == "./etc/ssl/certs/ca-certificates.crt ./usr/local/bin/berth-$name " ]] ||
    fail "$image holds unexpected files: $files"
  timeout 30 chroot --userspec=65532:65532 "$mnt" "/usr/local/bin/berth-$name" --help >/dev/null ||
    fail "berth-$name does not run in its image"
  buildah "${storage[@]}" umount "$container" >/dev/null

  rm -f "$dir/berth-$name.tar"
  buildah "${storage[@]}" push "$image" "docker-archive:$tmp/berth-$name.tar:$image" >&2
  mv -f "$tmp/berth-$name.tar" "$dir/berth-$name.tar"
  log "$image -> $dir/berth-$name.tar"
done
echo "$dir"
