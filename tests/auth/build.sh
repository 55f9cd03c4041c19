#!/usr/bin/env bash
# Builds ORY Hydra, the OAuth 2.1 authorization server the auth tests run against (issue 15),
# from the pinned Go tool in hydra/go.mod into a cache directory outside the repository:
#
#   ${BERTH_CACHE_DIR:-$HOME/.cache/berth}/auth-tools/<key>/bin/hydra
#
# <key> holds Hydra's version plus a hash of go.mod/go.sum and this recipe, so changing a pin
# builds into a fresh directory; a built binary is reused. The last line on stdout is the bin
# dir; progress goes to stderr. Needs a Go toolchain (>= 1.26), a C compiler (Hydra's in-memory
# store is SQLite) and the module proxy. Modelled on ../chart/build.sh.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
log() { printf 'auth/build.sh: %s\n' "$*" >&2; }

# Bump when the build flags below change, to invalidate existing caches.
recipe=1

version=$(awk '$1 == "github.com/ory/hydra/v2" { print $2; exit }' "$here/hydra/go.mod")
[[ -n $version ]] || { log "cannot read Hydra's version from hydra/go.mod"; exit 1; }
sha() { if command -v sha256sum >/dev/null; then sha256sum; else shasum -a 256; fi | cut -c1-12; }
hash=$({ echo "recipe=$recipe $(uname -sm)"; cat "$here/hydra/go.mod" "$here/hydra/go.sum"; } | sha)
key_dir="${BERTH_CACHE_DIR:-$HOME/.cache/berth}/auth-tools/hydra-${version}_$hash"
bin_dir="$key_dir/bin"

if [[ -x $bin_dir/hydra ]]; then echo "$bin_dir"; exit 0; fi
mkdir -p "$bin_dir"
# Serialise concurrent builders of the same key; the loser finds the binary.
if command -v flock >/dev/null; then
  exec 9>"$key_dir/.lock"
  flock 9
  if [[ -x $bin_dir/hydra ]]; then echo "$bin_dir"; exit 0; fi
fi

go=${GO:-go}
command -v "$go" >/dev/null || go=/usr/local/go/bin/go
command -v "$go" >/dev/null || { log "no Go toolchain found (set GO=/path/to/go)"; exit 1; }

tmp=$(mktemp -d "$key_dir/tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
log "building hydra $version ($($go env GOVERSION); slow when cold)"
# SQLite (cgo) backs `dsn: memory`; Hydra's own release builds use the same tags.
(cd "$here/hydra" && CGO_ENABLED=1 GOWORK=off "$go" build -mod=readonly -trimpath \
  -tags sqlite,sqlite_omit_load_extension -ldflags "-s -w" -o "$tmp/hydra" github.com/ory/hydra/v2)
mv -f "$tmp/hydra" "$bin_dir/hydra"
printf 'hydra=%s go=%s built=%s\n' "$version" "$($go env GOVERSION)" \
  "$(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$key_dir/versions"
log "done in $(( $(date +%s) - start ))s"
echo "$bin_dir"
