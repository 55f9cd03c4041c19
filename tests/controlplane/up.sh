#!/usr/bin/env bash
# Usage: up.sh STATE_DIR
#
# Starts a throwaway Kubernetes control plane for tests: etcd,
# kube-apiserver and kube-controller-manager, all on 127.0.0.1 with free
# ports, so several instances (different STATE_DIRs) can run at once.
# No scheduler and no kubelet: Pods are created but stay Pending.
#
# With BERTH_CP_NODE=1 the cluster also gets a real node (node.sh): the
# scheduler, a kubelet, kube-proxy and containerd, so pods run. The whole
# cluster then lives in a network namespace of its own and the API server
# listens on the node's address there (pods must reach it); one such cluster
# runs on a machine at a time, as root. BERTH_CP_IMAGES names the image
# archives to import (the sandbox image among them); their digests are listed
# in STATE_DIR/images.
#
# STATE_DIR receives: pki/ (certificates), etcd/ (data), *.log, pids,
# kubeconfig (admin, certificates embedded) and env (shell exports).
# Prints the kubeconfig path on stdout. Stop it with down.sh STATE_DIR.
#
# Environment: BERTH_CP_TIMEOUT (startup deadline in s, default 120),
# BERTH_CP_MANIFESTS (optional file/dir applied before the controller manager
# starts, e.g. CRDs; see below), BERTH_CP_SERVICE_CIDR (Service IP range,
# default 10.0.0.0/24; the operator bench needs more than 254 Services),
# BERTH_CP_NODE, BERTH_CP_IMAGES (above), BERTH_CACHE_DIR (see build.sh).
set -euo pipefail

me=up.sh
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
[[ $# -eq 1 && -n $1 ]] || { echo "usage: $0 STATE_DIR" >&2; exit 2; }
mkdir -p "$1"
state=$(cd "$1" && pwd -P)
# shellcheck source=lib.sh
source "$here/lib.sh"
timeout=${BERTH_CP_TIMEOUT:-120}
command -v openssl >/dev/null || { log "openssl is required"; exit 1; }
command -v curl >/dev/null || { log "curl is required"; exit 1; }
node=${BERTH_CP_NODE:-0}
api_addr=127.0.0.1 in_ns=() service_cidr=${BERTH_CP_SERVICE_CIDR:-10.0.0.0/24} service_ip=10.0.0.1
if [[ $node == 1 ]]; then
  # shellcheck source=node.sh
  source "$here/node.sh"
  api_addr=$node_ip in_ns=(nsenter --net="/run/netns/$node_netns")
  service_cidr=$node_service_cidr service_ip=$node_service_ip
fi

# Refuse to start over a running instance.
if [[ -f $state/pids ]]; then
  while read -r name pid; do
    if alive "$pid" && ours "$pid"; then
      log "$name is already running from $state (pid $pid); run down.sh first"
      exit 1
    fi
  done < "$state/pids"
fi
# Fresh state each time; only remove what this script creates.
if [[ $node == 1 ]]; then
  node_preflight || exit 1
  node_teardown
  rm -rf "$node_dir" "$state/images"
fi
rm -rf "$state/etcd" "$state/pki" "$state/flexvolume" "$state/pids" "$state/kubeconfig" "$state/env" \
  "$state/etcd.log" "$state/kube-apiserver.log" "$state/kube-controller-manager.log"

bin=$("$here/build.sh" | tail -n 1)
[[ -x $bin/kube-apiserver ]] || { log "build.sh did not produce binaries"; exit 1; }
t0=$(date +%s)

# On any failure: show the relevant log, stop what was started.
ok=0 failed_log=""
on_exit() {
  [[ $ok == 1 ]] && return
  if [[ -n $failed_log && -f $failed_log ]]; then
    log "last lines of $failed_log:"
    tail -n 40 "$failed_log" >&2
  fi
  stop_all
  [[ $node == 1 ]] && node_teardown
  log "failed"
}
trap on_exit EXIT

# --- Certificates -------------------------------------------------------------
# RSA keys via genpkey are PKCS#8, which kube-rs/rustls accepts (not SEC1 EC).
pki="$state/pki"
mkdir -p "$pki" && chmod 700 "$pki"
(
  cd "$pki"
  umask 077
  key() { openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$1" 2>/dev/null; }
  # sign NAME SUBJECT EXTENSIONS: NAME.crt signed by the CA.
  sign() {
    key "$1.key"
    openssl req -new -key "$1.key" -subj "$2" -out "$1.csr"
    printf '%s\n' "$3" > "$1.ext"
    openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
      -days 30 -sha256 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
    rm -f "$1.csr" "$1.ext"
  }
  key ca.key
  openssl req -x509 -new -key ca.key -subj "/CN=berth-test-ca" -days 30 -sha256 \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" -out ca.crt
  sign apiserver "/CN=kube-apiserver" "$(printf '%s\n' \
    "basicConstraints=critical,CA:FALSE" \
    "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=serverAuth" \
    "subjectAltName=IP:127.0.0.1,DNS:localhost,IP:$api_addr,IP:$service_ip,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc")"
  sign admin "/O=system:masters/CN=admin" "$(printf '%s\n' \
    "basicConstraints=critical,CA:FALSE" \
    "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=clientAuth")"
  # Service-account token signing key pair.
  key sa.key
  openssl pkey -in sa.key -pubout -out sa.pub 2>/dev/null
  if [[ $node == 1 ]]; then node_certs; fi
)

# --- Ports --------------------------------------------------------------------
# Random ports in 15000-19999: below the usual ephemeral range (32768+) and the
# 20000-29999 the Rust test harness hands to test servers (tests/src/lib.rs
# free_port); a port that accepts a connection is taken. A lost race with another process shows up as
# "address already in use" and is retried with new ports below.
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
etcd_port="" peer_port="" api_port="" kcm_port="" picked=" "
# pick_port VAR: store a free port in VAR, distinct from earlier picks.
pick_port() {
  local p
  while :; do
    p=$((15000 + RANDOM % 5000))
    [[ $picked == *" $p "* ]] && continue
    port_in_use "$p" && continue
    picked+="$p "
    printf -v "$1" %s "$p"
    return
  done
}

b64() { base64 < "$1" | tr -d '\n'; }
# write_kubeconfig [NAME]: STATE_DIR/kubeconfig with the admin certificate, or
# STATE_DIR/NAME.kubeconfig with pki/NAME.crt.
write_kubeconfig() {
  local user=${1:-admin} file=$state/${1:+$1.}kubeconfig
  cat > "$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: berth-test
  cluster:
    server: https://$api_addr:$api_port
    certificate-authority-data: $(b64 "$pki/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(b64 "$pki/$user.crt")
    client-key-data: $(b64 "$pki/$user.key")
contexts:
- name: berth-test
  context:
    cluster: berth-test
    user: $user
current-context: berth-test
EOF
  chmod 600 "$file"
}

# start NAME ARGS...: run $bin/NAME in the background, log to NAME.log, record
# the PID. stdin/stdout are detached so callers capturing our output don't hang.
start() { local name=$1; shift; start_at "$bin/$name" "$name" "$@"; }
# start_at PATH NAME ARGS...: the same for the program at PATH (inside the
# node's network namespace when there is one).
start_at() {
  local path=$1 name=$2; shift 2
  "${in_ns[@]}" "$path" "$@" < /dev/null >> "$state/$name.log" 2>&1 &
  echo "$name $!" >> "$state/pids"
  last_pid=$!
}

# wait_until NAME PID CHECK...: poll CHECK until it succeeds. Returns 1 on
# timeout or if the process exits, 3 if it died because its port was taken.
deadline=$((t0 + timeout))
wait_until() {
  local name=$1 pid=$2; shift 2
  failed_log="$state/$name.log"
  while :; do
    if ! alive "$pid"; then
      if grep -q 'address already in use' "$failed_log" 2>/dev/null; then return 3; fi
      log "$name exited during startup"
      return 1
    fi
    if "$@" > /dev/null 2>&1; then failed_log=""; return 0; fi
    if (($(date +%s) >= deadline)); then
      log "$name not healthy after ${timeout}s"
      return 1
    fi
    sleep 0.2
  done
}

etcd_healthy() { "${in_ns[@]}" curl -sf --max-time 2 "http://127.0.0.1:$etcd_port/health" | grep -q '"health":"true"'; }
apiserver_ready() {
  [[ $(curl -sf --max-time 2 --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
    "https://$api_addr:$api_port/readyz") == ok ]]
}
# The KCM serves a self-signed certificate; /healthz needs no credentials.
kcm_healthy() { [[ $("${in_ns[@]}" curl -sfk --max-time 2 "https://127.0.0.1:$kcm_port/healthz") == ok ]]; }

# preload: apply $BERTH_CP_MANIFESTS (file or dir) and wait until all CRDs
# are established and served by discovery.
preload() {
  local kc=("$bin/kubectl" --kubeconfig "$state/kubeconfig") crds
  failed_log=""
  log "applying $BERTH_CP_MANIFESTS"
  "${kc[@]}" apply -f "$BERTH_CP_MANIFESTS" >&2 || return 1
  crds=$("${kc[@]}" get crd -o name) || return 1
  [[ -z $crds ]] && return 0
  # shellcheck disable=SC2086 # one word per CRD
  "${kc[@]}" wait --for=condition=Established --timeout="$((deadline - $(date +%s)))s" $crds >&2 || return 1
  while :; do
    local served missing=0 c
    served=$("${kc[@]}" api-resources -o name 2>/dev/null) || served=""
    for c in $crds; do grep -qx "${c#*/}" <<< "$served" || missing=1; done
    ((missing == 0)) && return 0
    (($(date +%s) < deadline)) || { log "CRDs not served after ${timeout}s"; return 1; }
    sleep 0.2
  done
}

# start_all: one attempt at starting the three components (returns as
# wait_until does). Explicit `|| return`: set -e is off in `start_all || ...`.
start_all() {
  pick_port etcd_port; pick_port peer_port; pick_port api_port; pick_port kcm_port
  write_kubeconfig
  if [[ $node == 1 ]]; then write_kubeconfig kubelet; write_kubeconfig kube-proxy; write_kubeconfig kube-scheduler; fi
  log "ports: etcd=$etcd_port peer=$peer_port apiserver=$api_port kcm=$kcm_port"

  local etcd_url="http://127.0.0.1:$etcd_port" peer_url="http://127.0.0.1:$peer_port"
  start etcd \
    --name=berth-test \
    --data-dir="$state/etcd" \
    --listen-client-urls="$etcd_url" --advertise-client-urls="$etcd_url" \
    --listen-peer-urls="$peer_url" --initial-advertise-peer-urls="$peer_url" \
    --initial-cluster="berth-test=$peer_url" \
    --unsafe-no-fsync=true \
    --log-level=warn
  wait_until etcd "$last_pid" etcd_healthy || return

  # The endpoint reconciler rejects a loopback advertise address, so the
  # "kubernetes" Service gets no endpoints (nothing in-cluster needs them).
  # ServiceAccount admission stays enabled (as in real clusters): the KCM
  # creates each namespace's "default" ServiceAccount, and the plugin retries
  # its lookup for a moment while a new namespace gets one.
  # With a node the API server listens on the node's address, which pods reach;
  # the "kubernetes" Service then has that endpoint, the kubelet is reached
  # with the admin certificate, and nodes are authorized as nodes.
  local node_flags=(--endpoint-reconciler-type=none --authorization-mode=RBAC)
  if [[ $node == 1 ]]; then
    node_flags=(--authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction
      --kubelet-client-certificate="$pki/admin.crt" --kubelet-client-key="$pki/admin.key"
      --kubelet-certificate-authority="$pki/ca.crt" --kubelet-preferred-address-types=InternalIP)
  fi
  start kube-apiserver \
    --etcd-servers="$etcd_url" \
    --bind-address="$api_addr" --advertise-address="$api_addr" --secure-port="$api_port" \
    "${node_flags[@]}" \
    --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
    --client-ca-file="$pki/ca.crt" \
    --service-cluster-ip-range="$service_cidr" \
    --service-account-issuer="https://$api_addr:$api_port" \
    --service-account-key-file="$pki/sa.pub" \
    --service-account-signing-key-file="$pki/sa.key" \
    --allow-privileged=true
  wait_until kube-apiserver "$last_pid" apiserver_ready || return

  # Optional manifests (e.g. CRDs) go in before the KCM starts: its garbage
  # collector rediscovers resource types only every 30s, so owners of a kind
  # created later are noticed with up to ~30-60s delay.
  if [[ -n ${BERTH_CP_MANIFESTS:-} ]]; then
    preload || return
  fi

  # All default controllers, incl. garbage collector, deployment, replicaset,
  # namespace and service-account controllers. The flex-volume dir is moved
  # into STATE_DIR, else the KCM creates /usr/libexec/kubernetes/... .
  start kube-controller-manager \
    --kubeconfig="$state/kubeconfig" \
    --leader-elect=false \
    --bind-address=127.0.0.1 --secure-port="$kcm_port" \
    --controllers='*' \
    --use-service-account-credentials=false \
    --service-account-private-key-file="$pki/sa.key" \
    --root-ca-file="$pki/ca.crt" \
    --cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" \
    --flex-volume-plugin-dir="$state/flexvolume"
  wait_until kube-controller-manager "$last_pid" kcm_healthy || return
  if [[ $node == 1 ]]; then node_start || return; fi
}

[[ $node == 1 ]] && node_network
for attempt in 1 2 3; do
  rc=0
  start_all || rc=$?
  ((rc == 0)) && break
  if ((rc == 3 && attempt < 3)); then
    log "port clash, retrying with other ports"
    stop_all
    rm -rf "$state/etcd"
    failed_log=""
    continue
  fi
  exit 1
done

cat > "$state/env" <<EOF
export KUBECONFIG='$state/kubeconfig'
export BERTH_CP_BIN='$bin'
export BERTH_CP_SERVER='https://$api_addr:$api_port'
EOF
if [[ $node == 1 ]]; then
  cat >> "$state/env" <<EOF
export BERTH_CP_NETNS='$node_netns'
export BERTH_CP_NODE_IP='$node_ip'
export BERTH_CP_CTR='$runtime/bin/ctr --address $node_dir/containerd/containerd.sock -n k8s.io'
EOF
fi
ok=1
log "control plane up in $(($(date +%s) - t0))s: https://$api_addr:$api_port"
log "  export KUBECONFIG=$state/kubeconfig"
log "  kubectl: $bin/kubectl   (or: source $state/env)"
log "  stop:    $here/down.sh $state"
echo "$state/kubeconfig"
