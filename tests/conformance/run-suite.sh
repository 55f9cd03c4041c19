#!/usr/bin/env bash
# Runs one version of the official MCP conformance suite's server scenarios against a URL and
# writes {"<scenario>": "pass"|"fail", ...} (sorted) to <out.json>.
#
#   run-suite.sh 2025 <url> <out.json>   @modelcontextprotocol/conformance@0.1.16,
#                                        `server --suite all` (initialize/session revisions)
#   run-suite.sh 2026 <url> <out.json>   @modelcontextprotocol/conformance@0.2.0-alpha.12,
#                                        `server --requirements 2026-07-28` (the scored set plus
#                                        the not-scored extension/pending scenarios it also runs)
#
# The suite writes one directory per scenario, <dir>/server-<scenario>-<ISO timestamp>/checks.json,
# an array of checks with status SUCCESS | FAILURE | WARNING | SKIPPED | INFO. A scenario passes
# when none of its checks is a FAILURE and at least one is a SUCCESS (the rule the suite's own
# tier-check applies); a scenario that wrote no checks.json (it crashed) fails. The suite's
# console output is kept next to <out.json> as <out>.log, the raw results under <out>.d/, and the
# names of the scenarios the suite runs but never scores (2026: extensions such as tasks, and
# pending ones) in <out>.unscored.json.
#
# Uses the Node 22 and suites pinned in tests/peers/conformance (npm ci on first use).
set -euo pipefail

if [[ $# -ne 3 || ( $1 != 2025 && $1 != 2026 ) ]]; then
  echo "usage: $0 <2025|2026> <url> <out.json>" >&2
  exit 2
fi
version=$1 url=$2 out=$3

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
peers="$root/tests/peers/conformance"
node="$peers/node_modules/node22/bin/node"
suite="$peers/node_modules/conformance-$version/dist/index.js"
if [[ ! -x $node || ! -f $suite ]]; then
  (cd "$peers" && npm ci --no-audit --no-fund --loglevel=error) >&2
fi

case $version in
  2025) run=(server --url "$url" --suite all) list=(list --server) ;;
  2026) run=(server --url "$url" --requirements 2026-07-28) list=(list --requirements 2026-07-28) ;;
esac

results="${out%.json}.d" log="${out%.json}.log"
rm -rf "$results"
mkdir -p "$results"
# Nonzero when any scenario fails; the verdicts are read from the results directory instead.
"$node" "$suite" "${run[@]}" --output-dir "$results" >"$log" 2>&1 || true
"$node" "$suite" "${list[@]}" >"$results/scenarios.txt"

python3 - "$results" "$out" <<'EOF'
import json, pathlib, re, sys

results, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])

# Expected scenarios, from `list`: "  - name [versions]" under "Server scenarios", and the
# server entries of the not-scored list ("    - name [server]").
expected, unscored, section = [], [], None
for line in (results / "scenarios.txt").read_text().splitlines():
    if line and not line.startswith(" "):
        section = line
        continue
    m = re.match(r"^\s+- (\S+)(?: \[(.*)\])?$", line)
    if not m or section is None:
        continue
    if section.startswith("Server scenarios"):
        expected.append(m[1])
    elif section.startswith("Run and reported") and m[2] == "server":
        expected.append(m[1])
        unscored.append(m[1])

verdicts = {name: "fail" for name in expected}
stamp = re.compile(r"^server-(.+)-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d{3}Z$")
for checks_file in sorted(results.glob("*/checks.json")):
    m = stamp.match(checks_file.parent.name)
    if not m:
        continue
    statuses = [c.get("status") for c in json.loads(checks_file.read_text())]
    passed = "FAILURE" not in statuses and "SUCCESS" in statuses
    verdicts[m[1]] = "pass" if passed else "fail"

out.write_text(json.dumps(dict(sorted(verdicts.items())), indent=2) + "\n")
# The scenarios the suite runs but never scores (extensions, pending): reported, not compared.
out.with_name(out.stem + ".unscored.json").write_text(json.dumps(sorted(unscored)) + "\n")
EOF
