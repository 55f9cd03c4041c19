#!/usr/bin/env bash
# Usage: tests/chart/test.sh
#
# The chart and alert tests, with the real tools: helm and promtool built from Go modules
# (build.sh), kubectl and a throwaway local control plane of our own (../controlplane), with the
# Prometheus Operator CRDs preloaded so the monitoring resources are checked against their real
# schemas. Steps:
#   1. helm lint; values.schema.json rejects bad values; render variants (alerts disable, CRD off)
#   2. every rendering server-side dry-run applied to the control plane
#   3. promtool check rules and promtool test rules (alerts.test.yaml): every alert has a unit
#      test and a section in docs/runbooks.md
#   4. helm install, then the operator's ServiceAccount checked with `kubectl auth can-i` for
#      everything the operator does and for what it must not do (BR-32)
#   5. helm upgrade to a copy of the chart whose CRD has a new field: the cluster's CRD gets it,
#      the CRD and existing McpUpstreams are not recreated (BR-31); an install into another
#      namespace fails before changing anything; uninstall keeps the CRD and McpUpstreams
# Everything listens on 127.0.0.1; every wait has a deadline. Environment: BERTH_CACHE_DIR (see
# build.sh), BERTH_CHART_KEEP=1 keeps the work directory.
set -euo pipefail

me=chart/test.sh
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
root=$(cd "$here/../.." && pwd -P)
chart=$root/charts/berth
log() { printf '%s: %s\n' "$me" "$*" >&2; }
fail() { log "FAIL: $*"; exit 1; }
pass() { log "ok: $*"; }

tools=$("$here/build.sh" | tail -n 1)
cp_bin=$("$root/tests/controlplane/build.sh" | tail -n 1)
[[ -x $tools/helm && -x $tools/promtool && -x $cp_bin/kubectl ]] || fail "tools were not built"
command -v timeout >/dev/null || fail "coreutils timeout is required"

work=$(mktemp -d "${TMPDIR:-/tmp}/berth-chart.XXXXXX")
cleanup() {
  local rc=$?
  "$root/tests/controlplane/down.sh" "$work/cp" >/dev/null 2>&1 || true
  if [[ $rc != 0 || ${BERTH_CHART_KEEP:-0} == 1 ]]; then
    log "work directory kept: $work"
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT

# helm keeps no state outside $work; every call is bounded.
export HELM_CACHE_HOME=$work/helm/cache HELM_CONFIG_HOME=$work/helm/config HELM_DATA_HOME=$work/helm/data
helm() { timeout 120 "$tools/helm" "$@"; }
promtool() { timeout 120 "$tools/promtool" "$@"; }
kubectl() { timeout 120 "$cp_bin/kubectl" --request-timeout=60s "$@"; }
# until SECONDS DESCRIPTION COMMAND...: retry COMMAND every 0.5 s until it succeeds or the
# deadline passes.
until_ok() {
  local deadline=$(($(date +%s) + $1)) what=$2
  shift 2
  until "$@" >/dev/null 2>&1; do
    (($(date +%s) < deadline)) || fail "$what (gave up after deadline)"
    sleep 0.5
  done
}

release=berth
ns=berth-system
sa="system:serviceaccount:$ns:$release-operator"
monitoring=(--set monitoring.serviceMonitor.enabled=true --set monitoring.podMonitor.enabled=true
  --set monitoring.prometheusRule.enabled=true --set monitoring.dashboard.enabled=true)

# --- 1. lint, schema, render -------------------------------------------------------------
helm lint --strict "$chart" >&2
helm lint --strict "$chart" "${monitoring[@]}" >&2
pass "helm lint"

# The chart's CRD is the generated one (crds/tests/generated.rs regenerates both).
cmp -s "$chart/files/crds/berth.dev_mcpupstreams.yaml" "$root/crds/berth.dev_mcpupstreams.yaml" ||
  fail "charts/berth/files/crds/berth.dev_mcpupstreams.yaml differs from crds/berth.dev_mcpupstreams.yaml; run make crds"
# Helm installs crds/ once and never upgrades it (BR-31); the chart must package no crds/.
[[ -z $(helm show crds "$chart") ]] || fail "the chart packages crds/; the CRD must only be a template"

render() { helm template "$release" "$chart" -n "$ns" "$@"; }
rejects() {
  local out
  if out=$(render "$@" 2>&1); then fail "values.schema.json accepted $*"; fi
  grep -q "schema" <<< "$out" || fail "rendering with $* failed for another reason: $out"
}
rejects --set operator.replicas=2 --set operator.leaderElection.enabled=false
rejects --set operator.replicas=6
rejects --set unknownKey=1
rejects --set operator.image.unknown=1
rejects --set operator.image.digest=latest
rejects --set monitoring.prometheusRule.alerts.BerthUpstreamNotReady.severity=page
rejects --set monitoring.prometheusRule.alerts.BerthToolCallFailureRatioHigh.threshold=2
pass "values.schema.json rejects bad values"

render > "$work/default.yaml"
render "${monitoring[@]}" --api-versions monitoring.coreos.com/v1 > "$work/monitoring.yaml"
for kind in ServiceAccount ClusterRole ClusterRoleBinding Service Deployment CustomResourceDefinition; do
  grep -q "^kind: $kind\$" "$work/default.yaml" || fail "default rendering has no $kind"
done
for kind in ServiceMonitor PodMonitor PrometheusRule; do
  ! grep -q "^kind: $kind\$" "$work/default.yaml" || fail "$kind rendered by default"
  grep -q "^kind: $kind\$" "$work/monitoring.yaml" || fail "$kind not rendered when enabled"
done
# The Grafana dashboard: opt-in, labelled for Grafana's sidecar, and the chart's JSON verbatim.
! grep -q 'grafana_dashboard' "$work/default.yaml" || fail "dashboard rendered by default"
out=$(render --show-only templates/dashboard.yaml --set monitoring.dashboard.enabled=true \
  --set monitoring.dashboard.annotations.grafana_folder=MCP)
grep -q '^    grafana_dashboard: "1"$' <<< "$out" || fail "dashboard ConfigMap lacks the sidecar label"
grep -q '^    grafana_folder: MCP$' <<< "$out" || fail "dashboard ConfigMap lacks its annotation"
python3 -c '
import json, sys
text = sys.stdin.read()
body = text.split("berth.json: |-\n", 1)[1]
embedded = "\n".join(line[4:] for line in body.splitlines())
want = json.load(open(sys.argv[1]))
assert json.loads(embedded) == want, "the rendered dashboard differs from files/dashboards/berth.json"
' "$chart/files/dashboards/berth.json" <<< "$out" || fail "rendered dashboard is not the chart's JSON"
# Without the monitoring API in the cluster, enabling monitoring renders nothing of it.
# (Here-strings, not pipes: with pipefail an early-exiting grep -q would hide a match.)
out=$(render "${monitoring[@]}")
grep -q '^kind: PrometheusRule$' <<< "$out" && fail "PrometheusRule rendered without monitoring.coreos.com/v1"
grep -q 'helm.sh/resource-policy: keep' "$work/default.yaml" || fail "CRD not kept by default"
out=$(render --set crds.keep=false)
grep -q 'helm.sh/resource-policy' <<< "$out" && fail "crds.keep=false still keeps"
out=$(render --set crds.install=false)
grep -q '^kind: CustomResourceDefinition$' <<< "$out" && fail "crds.install=false still installs the CRD"
# Secure defaults on the operator container.
for want in 'runAsNonRoot: true' 'readOnlyRootFilesystem: true' 'allowPrivilegeEscalation: false' \
  'type: RuntimeDefault' '- ALL'; do
  grep -qF -- "$want" "$work/default.yaml" || fail "operator pod lacks '$want'"
done
# Each alert can be disabled on its own.
alerts=$(grep -o 'alert: Berth[A-Za-z]*' "$work/monitoring.yaml" | cut -d' ' -f2)
[[ $(wc -l <<< "$alerts") -eq 8 ]] || fail "expected 8 alerts, got: $alerts"
for alert in $alerts; do
  out=$(render "${monitoring[@]}" --api-versions monitoring.coreos.com/v1 \
    --set "monitoring.prometheusRule.alerts.$alert.enabled=false")
  grep -q "alert: $alert\$" <<< "$out" && fail "$alert still rendered when disabled"
  [[ $(grep -c 'alert: Berth' <<< "$out") -eq 7 ]] || fail "disabling $alert removed other alerts"
done
# The Secret admission policy (issue 40, item 6): on by default, bound to the operator's
# ServiceAccount, and switchable off.
grep -q '^kind: ValidatingAdmissionPolicy$' "$work/default.yaml" || fail "no Secret admission policy by default"
grep -qF "request.userInfo.username == 'system:serviceaccount:$ns:$release-operator'" "$work/default.yaml" ||
  fail "the admission policy does not match the operator's ServiceAccount"
out=$(render --set admissionPolicy.enabled=false)
grep -q '^kind: ValidatingAdmissionPolicy$' <<< "$out" && fail "admissionPolicy.enabled=false still renders the policy"
# Namespaced mode: a Role and RoleBinding per watched namespace, no ClusterRole, and the flag.
out=$(render --set 'watchNamespaces={team-a,team-b}')
grep -q '^kind: ClusterRole$' <<< "$out" && fail "watchNamespaces still renders a ClusterRole"
grep -q '^kind: ClusterRoleBinding$' <<< "$out" && fail "watchNamespaces still renders a ClusterRoleBinding"
[[ $(grep -c '^kind: RoleBinding$' <<< "$out") -eq 3 ]] || fail "expected RoleBindings in team-a, team-b and the Lease's"
grep -qF -- '- --watch-namespaces=team-a,team-b' <<< "$out" || fail "the operator is not started with --watch-namespaces"
grep -q -- '--watch-namespaces' "$work/default.yaml" && fail "the default rendering restricts namespaces"
rejects --set 'watchNamespaces={Team_A}'
pass "renderings (defaults, monitoring, dashboard, schema, alert switches, admission policy, watchNamespaces)"

# The chart's README documents every value: each leaf of values.yaml, or a parent of it with at
# least two segments (e.g. `operator.resources`), appears in backticks; alerts may be
# documented once as `...alerts.<alert>.key`.
value_paths() {
  awk '
    /^[[:space:]]*(#|$)/ || /^[[:space:]]*- / { next }
    {
      match($0, /^ */); depth = RLENGTH / 2; line = substr($0, RLENGTH + 1)
      if (line !~ /^[A-Za-z0-9_]+:/) next
      key = line; sub(/:.*/, "", key); value = line; sub(/^[^:]*:[ ]*/, "", value)
      path[depth] = key; p = path[0]; for (i = 1; i <= depth; i++) p = p "." path[i]
      if (value != "") print p
    }' "$chart/values.yaml"
}
undocumented=""
while read -r path; do
  generic=$(sed -E 's/\.alerts\.Berth[A-Za-z]+\./.alerts.<alert>./' <<< "$path")
  found=0 p=$path
  while :; do
    if grep -qF "\`$p\`" "$chart/README.md" || grep -qF "\`$generic\`" "$chart/README.md"; then found=1; break; fi
    [[ $p == *.*.* ]] || break
    p=${p%.*} generic=${generic%.*}
  done
  ((found)) || undocumented+=" $path"
done < <(value_paths)
[[ -z $undocumented ]] || fail "values missing from charts/berth/README.md:$undocumented"
pass "charts/berth/README.md documents every value"

# --- 2. a control plane of our own, server-side dry run ------------------------------------
mkdir -p "$work/monitoring-crds"
po_dir=$(cd "$here/tools/monitoring-crds" && GOWORK=off GOFLAGS=-mod=readonly timeout 300 \
  "${GO:-$(command -v go || echo /usr/local/go/bin/go)}" mod download -json \
  github.com/prometheus-operator/prometheus-operator | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[[ -n $po_dir && -d $po_dir ]] || fail "cannot download the Prometheus Operator module (tools/monitoring-crds)"
for crd in servicemonitors podmonitors prometheusrules; do
  cp "$po_dir/example/prometheus-operator-crd/monitoring.coreos.com_$crd.yaml" "$work/monitoring-crds/"
done
BERTH_CP_MANIFESTS=$work/monitoring-crds "$root/tests/controlplane/up.sh" "$work/cp" > /dev/null
export KUBECONFIG=$work/cp/kubeconfig
kubectl create namespace "$ns" >/dev/null
kubectl apply --server-side --dry-run=server -f "$work/default.yaml" >&2
kubectl apply --server-side --dry-run=server -f "$work/monitoring.yaml" >&2
pass "server-side dry run of the default and the monitoring renderings"

# --- 3. promtool ----------------------------------------------------------------------------
# The rules file promtool reads is the PrometheusRule's spec, as the API server returns it.
render "${monitoring[@]}" --api-versions monitoring.coreos.com/v1 \
  --show-only templates/prometheusrule.yaml > "$work/prometheusrule.yaml"
kubectl create --dry-run=server -o 'jsonpath={.spec}' -f "$work/prometheusrule.yaml" > "$work/rules.json"
promtool check rules "$work/rules.json" >&2
cp "$here/alerts.test.yaml" "$work/alerts.test.yaml"
promtool test rules "$work/alerts.test.yaml" >&2
for alert in $alerts; do
  grep -q "alertname: $alert\$" "$here/alerts.test.yaml" || fail "$alert has no promtool unit test"
  grep -q "^## $alert\$" "$root/docs/runbooks.md" || fail "$alert has no section in docs/runbooks.md"
  grep -q "#${alert,,}\$" "$work/monitoring.yaml" || fail "$alert has no runbook_url to its section"
done
pass "promtool check rules and test rules ($(wc -w <<< "$alerts") alerts)"

# --- 4. install; RBAC as the operator's ServiceAccount (BR-32) ------------------------------
helm install "$release" "$chart" -n "$ns" "${monitoring[@]}" --timeout 60s >&2
crd=mcpupstreams.berth.dev
kubectl wait --for=condition=Established --timeout=60s "crd/$crd" >/dev/null
[[ $(kubectl get crd "$crd" -o 'jsonpath={.metadata.annotations.helm\.sh/resource-policy}') == keep ]] ||
  fail "installed CRD is not annotated helm.sh/resource-policy: keep"
for kind in prometheusrule podmonitor servicemonitor deployment service serviceaccount; do
  [[ -n $(kubectl get "$kind" -n "$ns" -l "app.kubernetes.io/instance=$release" -o name) ]] ||
    fail "helm install created no $kind"
done
kubectl create namespace team-a >/dev/null
until_ok 30 "McpUpstream served after install" \
  kubectl apply --server-side -n team-a -f "$root/examples/everything.yaml"
pass "helm install (CRD, operator, monitoring) and an McpUpstream applied"

# can VERB RESOURCE [can-i flags]: the operator's ServiceAccount may do it.
can() { kubectl auth can-i --as="$sa" "$@" >/dev/null || fail "operator ServiceAccount cannot: $*"; }
cannot() { ! kubectl auth can-i --as="$sa" "$@" >/dev/null 2>&1 || fail "operator ServiceAccount can: $* (least privilege)"; }
# What the operator does (operator/src/controller.rs, apply.rs, status.rs, reconcile.rs).
for verb in get list watch; do can "$verb" mcpupstreams.berth.dev --all-namespaces; done
can patch mcpupstreams.berth.dev --subresource=status -n team-a
can update mcpupstreams.berth.dev --subresource=finalizers -n team-a
for resource in deployments.apps services configmaps; do
  for verb in list watch; do can "$verb" "$resource" --all-namespaces; done
  for verb in get create patch; do can "$verb" "$resource" -n team-a; done
done
for verb in create patch; do can "$verb" events.events.k8s.io -n team-a; done
can create secrets -n team-a
for resource in networkpolicies.networking.k8s.io poddisruptionbudgets.policy; do
  for verb in list watch; do can "$verb" "$resource" --all-namespaces; done
  for verb in get create patch delete; do can "$verb" "$resource" -n team-a; done
done
can list pods --all-namespaces
# Leader election: the Lease in the release namespace only.
for verb in get create update patch watch; do can "$verb" leases.coordination.k8s.io -n "$ns"; done
cannot update leases.coordination.k8s.io -n team-a
# Every rule the installed ClusterRole grants holds for the ServiceAccount (the binding works).
rules=$(kubectl get clusterrole "$release-operator" \
  -o 'jsonpath={range .rules[*]}{.apiGroups[*]}{"|"}{.resources[*]}{"|"}{.verbs[*]}{"\n"}{end}')
[[ -n $rules ]] || fail "installed ClusterRole has no rules"
while IFS='|' read -r groups resources verbs; do
  [[ -n $resources ]] || continue
  for resource in $resources; do
    sub=()
    [[ $resource == */* ]] && sub=(--subresource="${resource#*/}")
    read -ra group_list <<< "$groups"
    ((${#group_list[@]} > 0)) || group_list=("") # the core group prints as nothing
    for group in "${group_list[@]}"; do
      for verb in $verbs; do
        can "$verb" "${resource%%/*}${group:+.$group}" "${sub[@]}" -n team-a
      done
    done
  done
done <<< "$rules"
# What it must not do.
cannot delete deployments.apps -n team-a
cannot update deployments.apps -n team-a
# It never reads a Secret (issue 40, item 6): the session key's uid is recorded in status.
for verb in get list watch update patch delete; do cannot "$verb" secrets -n team-a; done
cannot delete services -n team-a
cannot delete configmaps -n team-a
cannot create pods -n team-a
cannot create roles.rbac.authorization.k8s.io -n team-a
cannot create mcpupstreams.berth.dev -n team-a
cannot update customresourcedefinitions.apiextensions.k8s.io
pass "RBAC: the operator's ServiceAccount can do all it needs and no more (BR-32)"

# --- 5. upgrade to a CRD with a new field (BR-31) -------------------------------------------
crd_uid=$(kubectl get crd "$crd" -o 'jsonpath={.metadata.uid}')
cr_uid=$(kubectl get mcpupstream everything -n team-a -o 'jsonpath={.metadata.uid}')
# Chart v2: a copy whose CRD has spec.newField with a default (as if a new default transport
# arrived). A test fixture made here; the real CRD is only ever generated from the Rust types.
cp -R "$chart" "$work/chart-v2"
v2_crd=$work/chart-v2/files/crds/berth.dev_mcpupstreams.yaml
awk '
  { print }
  /^          spec:$/ { in_spec = 1 }
  in_spec && /^            properties:$/ && !done {
    print "              newField:"
    print "                default: v2-default"
    print "                description: Added by chart v2 (test fixture)."
    print "                type: string"
    done = 1
  }
  END { if (!done) exit 1 }
' "$chart/files/crds/berth.dev_mcpupstreams.yaml" > "$v2_crd" || fail "cannot find spec.properties in the CRD"
sed -i.bak 's/^version: .*/version: 0.2.0-br31/' "$work/chart-v2/Chart.yaml" && rm -f "$work/chart-v2/Chart.yaml.bak"
helm upgrade "$release" "$work/chart-v2" -n "$ns" "${monitoring[@]}" --timeout 60s >&2
got=$(kubectl get crd "$crd" \
  -o 'jsonpath={.spec.versions[0].schema.openAPIV3Schema.properties.spec.properties.newField.type}')
[[ $got == string ]] || fail "after helm upgrade the cluster's CRD has no spec.newField (BR-31)"
[[ $(kubectl get crd "$crd" -o 'jsonpath={.metadata.uid}') == "$crd_uid" ]] || fail "helm upgrade recreated the CRD"
[[ $(kubectl get mcpupstream everything -n team-a -o 'jsonpath={.metadata.uid}') == "$cr_uid" ]] ||
  fail "the McpUpstream did not survive the upgrade"
# The new field is accepted and not pruned once the API server serves the new schema.
new_field() {
  kubectl patch mcpupstream everything -n team-a --type=merge -p '{"spec":{"newField":"v2"}}' &&
    [[ $(kubectl get mcpupstream everything -n team-a -o 'jsonpath={.spec.newField}') == v2 ]]
}
until_ok 30 "spec.newField kept on an McpUpstream after the upgrade" new_field
# A new McpUpstream gets the new default.
sed 's/^  name: everything$/  name: after-upgrade/' "$root/examples/everything.yaml" > "$work/after-upgrade.yaml"
grep -q '^  name: after-upgrade$' "$work/after-upgrade.yaml" || fail "cannot rename the example"
kubectl apply --server-side -n team-a -f "$work/after-upgrade.yaml" >&2
got=$(kubectl get mcpupstream after-upgrade -n team-a -o 'jsonpath={.spec.newField}')
[[ $got == v2-default ]] || fail "a new McpUpstream did not get the v2 default (got '$got') (BR-31)"
pass "br_31_helm_upgrade_updates_the_crd_in_place: spec.newField is served and defaulted, the CRD and McpUpstreams kept their uids"

# The namespace variant: the same release name in another namespace fails before changing
# anything, naming the ownership conflict.
kubectl create namespace mcp-system >/dev/null
if out=$(helm upgrade --install "$release" "$work/chart-v2" -n mcp-system 2>&1); then
  fail "installing into a second namespace took over the CRD"
fi
grep -q 'meta.helm.sh/release-namespace' <<< "$out" || fail "unexpected error for the namespace variant: $out"
[[ -z $(kubectl get deployment,serviceaccount -n mcp-system -l "app.kubernetes.io/instance=$release" -o name) ]] ||
  fail "the failed install left objects in mcp-system"
[[ $(kubectl get crd "$crd" -o 'jsonpath={.metadata.annotations.meta\.helm\.sh/release-namespace}') == "$ns" ]] ||
  fail "the failed install changed the CRD's owner"
pass "br_31_install_into_another_namespace_fails_before_changing_anything"

# Uninstall keeps the CRD and every McpUpstream.
helm uninstall "$release" -n "$ns" --timeout 60s >&2
[[ $(kubectl get crd "$crd" -o 'jsonpath={.metadata.uid}') == "$crd_uid" ]] || fail "helm uninstall deleted the CRD"
[[ $(kubectl get mcpupstream everything -n team-a -o 'jsonpath={.metadata.uid}') == "$cr_uid" ]] ||
  fail "helm uninstall deleted an McpUpstream"
no_operator() { [[ -z $(kubectl get deployment -n "$ns" -l "app.kubernetes.io/instance=$release" -o name) ]]; }
until_ok 30 "the operator Deployment gone after helm uninstall" no_operator
pass "br_31_helm_uninstall_keeps_the_crd_and_mcp_upstreams"
log "all chart tests passed"
