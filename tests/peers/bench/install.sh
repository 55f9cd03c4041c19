#!/usr/bin/env bash
# Installs what bench_proxy runs beside Berth (issue 14), cached outside the repository:
#   - npm: server-everything and the TypeScript SDK client (tests/peers/node), supergateway and
#     mcp-proxy (TypeScript) (tests/peers/bench, package-lock.json);
#   - PyPI: mcp-proxy (Python), httpx and matplotlib (requirements.txt), in a venv keyed by the
#     hash of requirements.txt; its python is written to $BERTH_CACHE_DIR/bench-python;
#   - Go: ToolHive's thv, built from the Go module proxy (with GOTOOLCHAIN=go1.27.3, which the go
#     command fetches like a module); its path is written to $BERTH_CACHE_DIR/bench-thv, or,
#     when it does not build, the reason to $BERTH_CACHE_DIR/bench-thv.unavailable
#     (bench_proxy then reports thv as not measured).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
root=$(cd "$here/../../.." && pwd -P)
cache="${BERTH_CACHE_DIR:-$HOME/.cache/berth}"
mkdir -p "$cache"

(cd "$root/tests/peers/node" && npm ci --no-audit --no-fund --loglevel=error)
(cd "$here" && npm ci --no-audit --no-fund --loglevel=error)

hash=$(sha256sum "$here/requirements.txt" | cut -c1-16)
venv="$cache/bench-venv-$hash"
if [[ ! -f "$venv/.installed" ]]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
    --requirement "$here/requirements.txt" >&2
  touch "$venv/.installed"
fi
printf '%s\n' "$venv/bin/python" > "$cache/bench-python"

# The newest that builds here: v0.63.0, v0.62.0, v0.60.0, v0.57.0 and v0.55.2 (tried on
# 2026-12-03) need module versions the Go module proxy refuses (403), e.g.
# github.com/getsentry/sentry-go/otel/otlp v0.50.0.
thv_versions=(v0.47.0)
thv_dir="$cache/thv"
if [[ ! -x "$thv_dir/bin/thv" ]]; then
  rm -f "$cache/bench-thv" "$cache/bench-thv.unavailable"
  log=$(mktemp)
  for version in "${thv_versions[@]}"; do
    if GOTOOLCHAIN=go1.27.3 GOBIN="$thv_dir/bin" \
      go install "github.com/stacklok/toolhive/cmd/thv@$version" >"$log" 2>&1; then
      printf '%s\n' "$version" > "$thv_dir/version"
      break
    fi
    printf 'thv %s: %s\n' "$version" "$(grep -m1 -E 'not available|error' "$log" || tail -n 1 "$log")" \
      >> "$cache/bench-thv.unavailable"
  done
  rm -f "$log"
fi
if [[ -x "$thv_dir/bin/thv" ]]; then
  rm -f "$cache/bench-thv.unavailable"
  printf '%s\n' "$thv_dir/bin/thv" > "$cache/bench-thv"
fi
