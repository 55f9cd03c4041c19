#!/usr/bin/env bash
# Builds Jaeger (`cmd/jaeger`, the OpenTelemetry-collector based all-in-one), the trace backend
# the tracing tests run against (issue 16), from the pinned Go tool in jaeger/go.mod into a
# cache directory outside the repository:
#
#   ${BERTH_CACHE_DIR:-$HOME/.cache/berth}/tracing-tools/jaeger-<version>_<hash>/bin/jaeger
#
# The last line on stdout is the bin dir (see ../go-tool.sh). Needs a Go toolchain (>= 1.26)
# and the module proxy.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
source "$here/../go-tool.sh"

# Bump when the build flags below change, to invalidate existing caches.
recipe=1
CGO_ENABLED=0 go_tool_build jaeger tracing-tools "$here/jaeger" github.com/jaegertracing/jaeger \
  github.com/jaegertracing/jaeger/cmd/jaeger "$recipe"
