#!/usr/bin/env bash
# Installs the Python MCP SDK peer's requirements into a venv cached outside the repo, keyed by
# the hash of requirements.txt, so a second run is a fast no-op. Writes the venv's python path
# to $BERTH_CACHE_DIR/python-peer (read by berth_tests::peers::python_server) and prints it as
# the last line of stdout.
#
# Needs: python3 >= 3.10 with the venv module (override with BERTH_PYTHON_BASE=/path/to/python).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
cache="${BERTH_CACHE_DIR:-$HOME/.cache/berth}"
base="${BERTH_PYTHON_BASE:-python3}"
hash=$(sha256sum "$here/requirements.txt" | cut -c1-16)
venv="$cache/venv-$hash"
python="$venv/bin/python"

if [[ ! -f "$venv/.installed" ]]; then
  mkdir -p "$cache"
  rm -rf "$venv"
  "$base" -m venv "$venv"
  "$python" -m pip install --quiet --disable-pip-version-check --no-input \
    --requirement "$here/requirements.txt" >&2
  touch "$venv/.installed"
fi

printf '%s\n' "$python" > "$cache/python-peer"
printf '%s\n' "$python"
