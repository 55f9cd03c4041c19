#!/usr/bin/env bash
# Runs both conformance suite versions directly against the Python fixture
# (tests/peers/python/conformance_server.py, Streamable HTTP, dual era) and prints the
# pass/fail summary. A fresh fixture process serves each suite (its trigger tools mutate
# state). Results go to $BERTH_CONFORMANCE_OUT (default: a new temp dir): 2025.json, 2026.json
# ({"<scenario>": "pass"|"fail"}), the suites' logs and raw checks.
#
# Python: $BERTH_PYTHON if set, else the cached venv from tests/peers/python/install.sh.
# Exit status: 0 when every failure is listed in expected-failures.txt, 1 otherwise.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
root=$(cd "$here/../.." && pwd -P)
python="${BERTH_PYTHON:-$("$root/tests/peers/python/install.sh" | tail -n 1)}"
out="${BERTH_CONFORMANCE_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/berth-conformance.XXXXXX")}"
mkdir -p "$out"

fixture_pid=
stop_fixture() {
  if [[ -n $fixture_pid ]]; then
    kill "$fixture_pid" 2>/dev/null || true
    wait "$fixture_pid" 2>/dev/null || true
    fixture_pid=
  fi
}
trap stop_fixture EXIT

start_fixture() { # <log> -> sets $port and $fixture_pid
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  PORT=$port "$python" "$root/tests/peers/python/conformance_server.py" --transport http --era dual >"$1" 2>&1 &
  fixture_pid=$!
  for _ in $(seq 100); do
    if python3 -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)' "$port" 2>/dev/null; then
      return 0
    fi
    kill -0 "$fixture_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "fixture did not start; see $1" >&2
  cat "$1" >&2
  exit 1
}

for version in 2025 2026; do
  start_fixture "$out/fixture-$version.log"
  "$here/run-suite.sh" "$version" "http://127.0.0.1:$port/mcp" "$out/$version.json"
  stop_fixture
done

python3 - "$out" "$here/expected-failures.txt" <<'EOF'
import json, pathlib, sys

out, expected_file = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
expected = set()
for line in expected_file.read_text().splitlines():
    line = line.split("#", 1)[0].strip()
    if line:
        suite, scenario = line.split()
        expected.add((suite, scenario))

unexpected = []
for suite in ("2025", "2026"):
    verdicts = json.loads((out / f"{suite}.json").read_text())
    failed = sorted(name for name, verdict in verdicts.items() if verdict != "pass")
    print(f"suite {suite}: {len(verdicts) - len(failed)}/{len(verdicts)} scenarios pass")
    for name in failed:
        known = (suite, name) in expected
        print(f"  fail {name}{'' if known else '  (NOT in expected-failures.txt)'}")
        if not known:
            unexpected.append((suite, name))
    for suite_, name in sorted(expected):
        if suite_ == suite and verdicts.get(name) == "pass":
            print(f"  pass {name}  (listed in expected-failures.txt)")
print(f"results: {out}")
sys.exit(1 if unexpected else 0)
EOF
