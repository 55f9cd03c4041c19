# shellcheck shell=bash disable=SC2154
# Helpers shared by up.sh and down.sh (sourced, not executed).
# Expects $state (absolute, symlink-free STATE_DIR) and $me (script name).

log() { printf '%s: %s\n' "$me" "$*" >&2; }

# alive PID: the process exists and is not a zombie.
alive() {
  local st
  st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [[ -n $st && $st != Z* ]]
}

# ours PID: its command line mentions this STATE_DIR (all our processes get
# paths under it), which guards against a recycled PID.
ours() {
  local args
  args=$(ps -ww -o args= -p "$1" 2>/dev/null) || return 1
  [[ $args == *"$state/"* ]]
}

# stop_all: stop every process in $state/pids, last started first:
# TERM, then KILL after a grace period. Removes the pids file.
stop_all() {
  local pidfile="$state/pids" name pid i grace=${BERTH_CP_STOP_GRACE:-10}
  [[ -f $pidfile ]] || return 0
  # Reverse the file portably (no tac on macOS).
  while read -r name pid; do
    [[ $pid =~ ^[0-9]+$ ]] || continue
    if ! alive "$pid" || ! ours "$pid"; then continue; fi
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < grace * 10; i++)); do alive "$pid" || break; sleep 0.1; done
    if alive "$pid"; then
      log "$name did not exit after ${grace}s; sending KILL"
      kill -KILL "$pid" 2>/dev/null || true
      for ((i = 0; i < 50; i++)); do alive "$pid" || break; sleep 0.1; done
    fi
  done < <(awk '{ l[NR] = $0 } END { for (i = NR; i > 0; i--) print l[i] }' "$pidfile")
  rm -f "$pidfile"
}
