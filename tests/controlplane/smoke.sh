#!/usr/bin/env bash
# Usage: smoke.sh [STATE_DIR]
#
# Self-check of the local control plane: starts it (up.sh), exercises the
# Deployment -> ReplicaSet -> Pod controllers, garbage collection (built-in
# and custom-resource owners), ServiceAccount admission and CEL validation
# rules in CRDs, then stops it (down.sh). STATE_DIR defaults to a temp dir.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
own_state=0 # read by the EXIT trap set at the end
# shellcheck disable=SC2034
if [[ -n ${1:-} ]]; then state=$1; else
  state=$(mktemp -d "${TMPDIR:-/tmp}/berth-cp-smoke.XXXXXX") own_state=1
fi
log() { printf 'smoke.sh: %s\n' "$*" >&2; }
fail() { log "FAIL: $*"; exit 1; }

# The test CRD (a CEL rule on spec) is preloaded, so that the garbage
# collector watches its kind from the start (see BERTH_CP_MANIFESTS in up.sh).
mkdir -p "$state"
cat > "$state/smoke-crd.yaml" <<'EOF'
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.smoke.berth.test
spec:
  group: smoke.berth.test
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-validations:
            - rule: "self.min <= self.max"
              message: "min must not exceed max"
            properties:
              min: {type: integer}
              max: {type: integer}
EOF
BERTH_CP_MANIFESTS="$state/smoke-crd.yaml" "$here/up.sh" "$state" > /dev/null
trap '"$here/down.sh" "$state"' EXIT
# shellcheck source=/dev/null
source "$state/env"
k() { "$BERTH_CP_BIN/kubectl" "$@"; }

# eventually SECONDS CMD...: retry CMD until it succeeds.
eventually() {
  local end=$((SECONDS + $1)); shift
  until "$@" > /dev/null 2>&1; do
    ((SECONDS < end)) || return 1
    sleep 0.5
  done
}
count() { k get "$@" -o name 2>/dev/null | grep -c . || true; }
has() { [[ $(count "$@") -gt 0 ]]; }
none() { [[ $(count "$@") -eq 0 ]]; }

k version -o yaml | grep -E 'gitVersion' >&2
k get ns >&2
for ns in default kube-system kube-public kube-node-lease; do
  k get ns "$ns" > /dev/null || fail "namespace $ns missing"
done

# --- Deployment -> ReplicaSet -> Pod, then GC on delete -------------------
ns=smoke
k create namespace "$ns" > /dev/null
img="registry.example/x@sha256:$(printf '%064d' 0 | tr 0 a)"
k -n "$ns" create deployment web --image="$img" --replicas=2 > /dev/null
eventually 60 has -n "$ns" replicasets -l app=web || fail "no ReplicaSet created"
eventually 60 has -n "$ns" pods -l app=web || fail "no Pod created"
log "ok: Deployment created ReplicaSet $(k -n "$ns" get rs -o name) and $(count -n "$ns" pods -l app=web) Pending pods"
k -n "$ns" get pods -l app=web -o jsonpath='{.items[0].spec.serviceAccountName}' | grep -qx default ||
  fail "pod has no serviceAccountName (ServiceAccount admission)"

start=$SECONDS
k -n "$ns" delete deployment web --wait=false > /dev/null
eventually 60 none -n "$ns" replicasets -l app=web || fail "ReplicaSet not garbage-collected"
eventually 60 none -n "$ns" pods -l app=web || fail "Pods not garbage-collected"
log "ok: garbage collector removed ReplicaSet and Pods in $((SECONDS - start))s"

# --- Pod straight into a brand-new namespace (default SA may lag) --------
k create namespace smoke-fresh > /dev/null
k -n smoke-fresh run p --image="$img" --restart=Never > /dev/null || fail "pod in fresh namespace rejected"
log "ok: pod admitted in a brand-new namespace"

# --- CRD with CEL validation rules -----------------------------------------
k wait --for=condition=Established crd/widgets.smoke.berth.test --timeout=60s > /dev/null
widget() {
  printf 'apiVersion: smoke.berth.test/v1\nkind: Widget\nmetadata: {name: %s, namespace: %s}\nspec: {min: %s, max: %s}\n' "$@"
}
if out=$(widget bad "$ns" 5 1 | k create -f - 2>&1); then
  fail "CEL rule not enforced: invalid Widget accepted"
fi
[[ $out == *"min must not exceed max"* ]] || fail "unexpected error: $out"
widget good "$ns" 1 5 | k create -f - > /dev/null || fail "valid Widget rejected"
log "ok: CEL rule enforced ($(grep -o 'min must not exceed max' <<< "$out"))"

# --- GC of a child owned by a custom resource --------------------------------
uid=$(k -n "$ns" get widget good -o jsonpath='{.metadata.uid}')
k apply -f - > /dev/null <<EOF
apiVersion: v1
kind: ConfigMap
metadata:
  name: owned
  namespace: $ns
  ownerReferences:
  - {apiVersion: smoke.berth.test/v1, kind: Widget, name: good, uid: $uid}
EOF
start=$SECONDS
k -n "$ns" delete widget good --wait=false > /dev/null
eventually 60 none -n "$ns" configmap owned || fail "ConfigMap owned by a Widget not garbage-collected"
log "ok: ConfigMap owned by a custom resource collected in $((SECONDS - start))s"

# --- Namespace deletion (namespace controller) --------------------------------
k delete namespace smoke-fresh --wait=false > /dev/null
eventually 60 none namespace smoke-fresh || fail "namespace not deleted"
log "ok: namespace deletion finished"

log "PASS"
# Keep the state (logs) on failure; drop a temp dir we made on success.
trap '"$here/down.sh" "$state"; ((own_state)) && rm -rf "$state"' EXIT
