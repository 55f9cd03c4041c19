#!/usr/bin/env bash
# Usage: down.sh STATE_DIR
#
# Stops the control plane started by up.sh STATE_DIR: the processes listed in
# STATE_DIR/pids, in reverse start order (TERM, then KILL after
# BERTH_CP_STOP_GRACE seconds, default 10). Only PIDs from that file whose
# command line refers to STATE_DIR are signalled. Idempotent; keeps the
# state (logs, data) so it can be inspected. A cluster with a node (up.sh with
# BERTH_CP_NODE=1) also loses its containers, mounts, pod cgroups and network
# namespace (node.sh, node_teardown).
set -euo pipefail

me=down.sh
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
[[ $# -eq 1 && -n $1 ]] || { echo "usage: $0 STATE_DIR" >&2; exit 2; }
[[ -d $1 ]] || exit 0 # nothing was ever started there
state=$(cd "$1" && pwd -P)
# shellcheck source=lib.sh
source "$here/lib.sh"

stop_all
if [[ -f $state/netns ]]; then
  # shellcheck source=node.sh
  source "$here/node.sh"
  node_teardown
fi
