# Sourced by the build scripts of single Go programs the tests run (auth/build.sh: Hydra;
# tracing/build.sh: Jaeger). Each keeps its program in its own tools module (go.mod with a
# `tool` line), so one program's dependency graph touches nothing else.
#
# go_tool_build NAME CACHE MODULE_DIR MODULE PACKAGE RECIPE [GO BUILD FLAGS...]
#   Builds PACKAGE (of MODULE, whose version MODULE_DIR/go.mod pins) into
#   ${BERTH_CACHE_DIR:-$HOME/.cache/berth}/CACHE/NAME-<version>_<hash>/bin/NAME, where <hash>
#   covers go.mod, go.sum, RECIPE and the platform, so changing a pin builds into a fresh
#   directory; a built binary is reused. Concurrent builders of one key are serialised. Prints
#   the bin dir as its last line on stdout; progress goes to stderr. Needs a Go toolchain
#   (>= 1.26; GO=/path/to/go to choose one) and the module proxy.

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
  if [[ -x $bin_dir/$name ]]; then echo "$bin_dir"; return 0; fi
  mkdir -p "$bin_dir"
  if command -v flock >/dev/null; then
    exec 9>"$key_dir/.lock"
    flock 9
    if [[ -x $bin_dir/$name ]]; then echo "$bin_dir"; return 0; fi
  fi
  go=${GO:-go}
  command -v "$go" >/dev/null || go=/usr/local/go/bin/go
  command -v "$go" >/dev/null || { printf '%s: no Go toolchain found (set GO=/path/to/go)\n' "$log_prefix" >&2; return 1; }
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
