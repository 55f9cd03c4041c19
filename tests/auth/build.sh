#!/usr/bin/env bash
# Builds ORY Hydra, the OAuth 2.1 authorization server the auth tests run against (issue 15),
# from the pinned Go tool in hydra/go.mod into a cache directory outside the repository:
#
#   ${BERTH_CACHE_DIR:-$HOME/.cache/berth}/auth-tools/hydra-<version>_<hash>/bin/hydra
#
# The last line on stdout is the bin dir (see ../go-tool.sh). Needs a Go toolchain (>= 1.26),
# a C compiler (Hydra's in-memory store is SQLite) and the module proxy.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
source "$here/../go-tool.sh"

# Bump when the build flags below change, to invalidate existing caches.
recipe=1
# SQLite (cgo) backs `dsn: memory`; Hydra's own release builds use the same tags.
CGO_ENABLED=1 go_tool_build hydra auth-tools "$here/hydra" github.com/ory/hydra/v2 \
  github.com/ory/hydra/v2 "$recipe" -tags sqlite,sqlite_omit_load_extension
