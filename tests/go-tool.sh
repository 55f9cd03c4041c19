# Sourced by the build scripts of the Go programs the tests run: single programs through
# go_tool_build (auth/build.sh: Hydra; tracing/build.sh: Jaeger), and the scripts that build
# several (controlplane/build.sh, controlplane/build-runtime.sh, chart/build.sh) through
# go_toolchain and cache_claim. Each keeps its program in its own tools module (go.mod with a
# `tool` line), so one program's dependency graph touches nothing else.
#
# go_tool_build NAME CACHE MODULE_DIR MODULE PACKAGE RECIPE [GO BUILD FLAGS...]
#   Builds PACKAGE (of MODULE, whose version MODULE_DIR/go.mod pins) into
#   ${BERTH_CACHE_DIR:-$HOME/.cache/berth}/CACHE/NAME-<version>_<hash>/bin/NAME, where <hash>
#   covers go.mod, go.sum, RECIPE and the platform, so changing a pin builds into a fresh
#   directory; a built binary is reused. Concurrent builders of one key are serialised. Prints
#   the bin dir as its last line on stdout; progress goes to stderr. Needs a Go toolchain
#   (>= 1.26; GO=/path/to/go to choose one) and the module proxy.

# go_toolchain: prints the Go toolchain to build with: $GO, else `go` on PATH, else
#   /usr/local/go/bin/go; fails (with a message on stderr) when there is none.
go_toolchain() {
  local go=${GO:-go}
  command -v "$go" >/dev/null || go=/usr/local/go/bin/go
  command -v "$go" >/dev/null || { printf 'no Go toolchain found (set GO=/path/to/go)\n' >&2; return 1; }
  echo "$go"
}

# cache_claim KEY_DIR CHECK...: succeeds when the command CHECK says the build in KEY_DIR is
#   already there, before or after waiting for the builder of the same key (the lock is file
#   descriptor 9 on KEY_DIR/.lock, held until the calling script exits); fails when the caller
#   must build, holding the lock.
cache_claim() {
  local key_dir=$1
  shift
  "$@" && return 0
  mkdir -p "$key_dir"
  if command -v flock >/dev/null; then
    exec 9>"$key_dir/.lock"
    flock 9
    "$@" && return 0
  fi
  return 1
}

go_tool_build() {
  local name=$1 cache=$2 dir=$3 module=$4 package=$5 recipe=$6
  shift 6
  local log_prefix="${cache}/build: $name"
  local version hash key_dir bin_dir go tmp start
  version=$(awk -v m="$module" '$1 == m { print $2; exit }' "$dir/go.mod")
  [[ -n $version ]] || { printf '%s: cannot read the version of %s from %s/go.mod\n' "$log_prefix" "$module" "$dir" >&2; return 1; }
  hash=$({ echo "recipe=$recipe $(uname -sm)"; cat "$dir/go.mod" "$dir/go.sum"; } \
    | if command -v sha256sum >/dev/null; then sha256sum; else shasum -a 256; fi | cut -c1-12)
  key_dir="${BERTH_CACHE_DIR:-$HOME/.cache/berth}/$cache/$name-${version}_$hash"
  bin_dir="$key_dir/bin"
  if cache_claim "$key_dir" test -x "$bin_dir/$name"; then echo "$bin_dir"; return 0; fi
  mkdir -p "$bin_dir"
  go=$(go_toolchain) || return 1
  tmp=$(mktemp -d "$key_dir/tmp.XXXXXX")
  start=$(date +%s)
  printf '%s: building %s (%s; slow when cold)\n' "$log_prefix" "$version" "$($go env GOVERSION)" >&2
  if ! (cd "$dir" && GOWORK=off "$go" build -mod=readonly -trimpath -ldflags "-s -w" "$@" \
      -o "$tmp/$name" "$package"); then
    rm -rf "$tmp"
    return 1
  fi
  mv -f "$tmp/$name" "$bin_dir/$name"
  rm -rf "$tmp"
  printf '%s=%s go=%s built=%s\n' "$name" "$version" "$($go env GOVERSION)" \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$key_dir/versions"
  printf '%s: done in %ss\n' "$log_prefix" "$(( $(date +%s) - start ))" >&2
  echo "$bin_dir"
}
