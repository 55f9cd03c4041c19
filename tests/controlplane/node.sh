# shellcheck shell=bash disable=SC2154
# The local test cluster's node (sourced by up.sh and down.sh when BERTH_CP_NODE=1): containerd
# 2.x with runc and the CNI plugins (build-runtime.sh), kube-scheduler, kubelet and kube-proxy, so the pods the
# cluster schedules really run.
#
# Network: the whole cluster lives in one network namespace of its own, $node_netns, a test
# host joined to this machine by a veth pair ($node_host_ip here, $node_ip there). Inside it
# etcd, the controller manager, the scheduler, containerd and the kubelet's health port listen on
# 127.0.0.1; the API server and the kubelet listen on $node_ip, which pods reach through their
# bridge. Pods get addresses from $node_pod_cidr on the bridge berth0 and Services from
# $node_service_cidr (kube-proxy, iptables mode, inside the namespace); this machine routes both
# ranges into the namespace, so tests reach pods and ClusterIPs directly. The namespace has no
# default route and nothing is masqueraded: no packet leaves the machine, and a lookup or image
# pull that would need another host fails at once (images are imported, never pulled).
#
# State lives under $state/node (containerd's root and state, the kubelet's root dir and pod
# logs, CNI config and IP leases). node_teardown removes everything the node made outside it:
# containers, mounts, pod cgroups, the namespace.
#
# Facts about the machines this runs on: cgroups v1 (hybrid), so the kubelet runs with
# failCgroupV1: false and the cgroupfs driver; no swap; no systemd as PID 1; root lacks
# CAP_SYS_RESOURCE, so no process may lower its OOM score (containerd restricts the scores it
# gives pods, and the kubelet keeps its own at 0).

node_netns=berth-node
node_name=berth-node
node_host_ip=10.213.0.1
node_ip=10.213.0.2
node_pod_cidr=10.214.0.0/24
node_service_cidr=10.215.0.0/24
node_service_ip=10.215.0.1 # the "kubernetes" Service: first address of the range
node_sandbox_image=berth.local/pause:3.10
node_dir="$state/node"

# in_node CMD...: run CMD inside the node's network namespace.
# nsenter joins the network namespace only: `ip netns exec` would also give each process a
# mount namespace of its own (and a fresh /sys without the cgroup mounts), hiding the
# kubelet's volume mounts from containerd.
in_node() { nsenter --net="/run/netns/$node_netns" "$@"; }

# node_preflight: root, the tools the node needs, and no other node running on this machine
# (the kubelet owns the machine-wide pod cgroups).
node_preflight() {
  [[ $(id -u) == 0 ]] || { log "BERTH_CP_NODE=1 needs root (network namespace, containers)"; return 1; }
  local pkg missing=()
  for pkg in iptables:iptables conntrack:conntrack ip:iproute2 nsenter:util-linux; do
    command -v "${pkg%%:*}" >/dev/null || missing+=("${pkg#*:}")
  done
  if ((${#missing[@]})); then
    log "installing ${missing[*]} (Debian)"
    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"; } >&2 ||
      { log "cannot install ${missing[*]}"; return 1; }
  fi
  if ip netns list | grep -qw "$node_netns"; then
    if [[ -n $(ip netns pids "$node_netns" 2>/dev/null) ]]; then
      log "network namespace $node_netns is in use: another node is running (down.sh its STATE_DIR)"
      return 1
    fi
    # Left by a run that was killed before its teardown: nothing runs in it any more.
    log "removing the stale network namespace $node_netns"
    ip netns delete "$node_netns"
  fi
  runtime=$("$here/build-runtime.sh" | tail -n 1)
}

# node_network: the namespace, the veth pair, routes to pods and Services, forwarding.
node_network() {
  ip netns add "$node_netns"
  echo "$node_netns" > "$state/netns"
  ip link add berth-host type veth peer name berth-node0 netns "$node_netns"
  ip addr add "$node_host_ip/30" dev berth-host
  ip link set berth-host up
  in_node ip addr add "$node_ip/30" dev berth-node0
  in_node ip link set berth-node0 up
  in_node ip link set lo up
  ip route add "$node_pod_cidr" via "$node_ip" dev berth-host
  ip route add "$node_service_cidr" via "$node_ip" dev berth-host
  in_node sysctl -qw net.ipv4.ip_forward=1
  # Pod-to-Service traffic crosses the bridge; kube-proxy's rules must see it.
  in_node sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true
}

# node_certs: run inside the pki subshell of up.sh (uses its sign function).
node_certs() {
  local client="basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
  sign kubelet "/O=system:nodes/CN=system:node:$node_name" "$client"
  sign kubelet-serving "/CN=$node_name" "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:$node_ip,DNS:$node_name"
  sign kube-proxy "/CN=system:kube-proxy" "$client"
  sign kube-scheduler "/CN=system:kube-scheduler" "$client"
}

# node_images: import every image archive named by BERTH_CP_IMAGES (files or directories of
# *.tar, space-separated) into containerd's k8s.io namespace, then list name and digest of each
# image in $state/images ("NAME sha256:..."), which tests use to pin images by digest.
node_images() {
  local ctr=("$runtime/bin/ctr" --address "$node_dir/containerd/containerd.sock" -n k8s.io) src tar
  for src in ${BERTH_CP_IMAGES:-}; do
    for tar in "$src" "$src"/*.tar; do
      [[ -f $tar ]] || continue
      log "importing $(basename "$tar")"
      "${ctr[@]}" images import --local "$tar" >&2 || return 1
    done
  done
  "${ctr[@]}" images ls | awk 'NR > 1 && $1 !~ /^sha256:/ && $1 !~ /@sha256:/ { print $1, $3 }' > "$state/images"
  # An import names each image NAME:TAG only; pods that pin NAME@DIGEST need that name too (a
  # pull would create it), else the kubelet would try to pull.
  local ref digest
  while read -r ref digest; do
    "${ctr[@]}" images tag --force "$ref" "${ref%:*}@$digest" >/dev/null 2>&1 || return 1
  done < "$state/images"
  grep -q "^$node_sandbox_image " "$state/images" ||
    { log "the sandbox image $node_sandbox_image is not among BERTH_CP_IMAGES"; return 1; }
}

node_configs() {
  mkdir -p "$node_dir"/{containerd,cni/net.d,cni/ipam,kubelet/root,kubelet/logs,kubelet/pki}
  cat > "$node_dir/containerd/config.toml" <<EOF
version = 3
root = "$node_dir/containerd/root"
state = "$node_dir/containerd/state"
[grpc]
  address = "$node_dir/containerd/containerd.sock"
[debug]
  address = "$node_dir/containerd/debug.sock"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$node_sandbox_image"
[plugins.'io.containerd.cri.v1.runtime']
  enable_selinux = false
  # No CAP_SYS_RESOURCE here: nothing may lower its OOM score below containerd's own.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "$runtime/bin/runc"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["$runtime/cni/bin"]
    conf_dir = "$node_dir/cni/net.d"
EOF
  cat > "$node_dir/cni/net.d/10-berth.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "berth",
  "plugins": [
    {
      "type": "bridge", "bridge": "berth0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {
        "type": "host-local", "dataDir": "$node_dir/cni/ipam",
        "ranges": [[{ "subnet": "$node_pod_cidr" }]], "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } }
  ]
}
EOF
  # Pods get no cluster DNS (none runs here): an empty resolv.conf keeps the machine's out.
  : > "$node_dir/kubelet/resolv.conf"
  cat > "$node_dir/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $node_ip
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: $pki/kubelet-serving.crt
tlsPrivateKeyFile: $pki/kubelet-serving.key
authentication:
  anonymous: { enabled: false }
  webhook: { enabled: true }
  x509: { clientCAFile: $pki/ca.crt }
authorization: { mode: Webhook }
cgroupDriver: cgroupfs
failCgroupV1: false
oomScoreAdj: 0
failSwapOn: false
containerRuntimeEndpoint: unix://$node_dir/containerd/containerd.sock
podLogsDir: $node_dir/kubelet/logs
resolvConf: $node_dir/kubelet/resolv.conf
clusterDomain: cluster.local
serializeImagePulls: false
# Images are imported, never pulled: image garbage collection would delete them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: { memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1% }
EOF
  cat > "$node_dir/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: $node_pod_cidr
hostnameOverride: $node_name
bindAddress: $node_ip
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
clientConnection: { kubeconfig: $state/kube-proxy.kubeconfig }
conntrack: { maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s }
iptables: { localhostNodePorts: false }
EOF
}

containerd_ready() { [[ -S $node_dir/containerd/containerd.sock ]] && "$runtime/bin/ctr" --address "$node_dir/containerd/containerd.sock" version; }
scheduler_healthy() { [[ $(in_node curl -sfk --max-time 2 "https://127.0.0.1:10259/healthz") == ok ]]; }
kubelet_healthy() { [[ $(in_node curl -sf --max-time 2 "http://127.0.0.1:10248/healthz") == ok ]]; }
proxy_healthy() { in_node curl -sf --max-time 2 "http://127.0.0.1:10256/healthz"; }
node_ready() {
  [[ $("$bin/kubectl" --kubeconfig "$state/kubeconfig" get node "$node_name" \
    -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}') == True ]]
}

# node_start: the runtime, images, scheduler, kubelet and kube-proxy; waits for a Ready node.
node_start() {
  node_configs
  PATH="$runtime/bin:$PATH" start_at "$runtime/bin/containerd" containerd --config "$node_dir/containerd/config.toml"
  wait_until containerd "$last_pid" containerd_ready || return
  node_images || return
  start kube-scheduler --kubeconfig="$state/kube-scheduler.kubeconfig" --leader-elect=false \
    --bind-address=127.0.0.1 --secure-port=10259
  wait_until kube-scheduler "$last_pid" scheduler_healthy || return
  start kubelet --config="$node_dir/kubelet/config.yaml" --kubeconfig="$state/kubelet.kubeconfig" \
    --root-dir="$node_dir/kubelet/root" --cert-dir="$node_dir/kubelet/pki" \
    --hostname-override="$node_name" --node-ip="$node_ip"
  wait_until kubelet "$last_pid" kubelet_healthy || return
  start kube-proxy --config="$node_dir/kube-proxy.yaml"
  wait_until kube-proxy "$last_pid" proxy_healthy || return
  failed_log="$state/kubelet.log"
  wait_until kubelet "$last_pid" node_ready || return
}

# node_teardown: after stop_all. Kills what the kubelet left running (containers and their
# shims), unmounts everything under $state, removes the pod cgroups and the namespace.
node_teardown() {
  local pid mnt dir
  for pid in $(pgrep -f "containerd-shim-runc-v2 .*$state/" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
  for dir in /sys/fs/cgroup/*/kubepods; do
    [[ -d $dir ]] || continue
    find "$dir" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
  done
  sleep 0.5
  # Deepest mounts first.
  awk -v s="$state/" 'index($2, s) == 1 { print $2 }' /proc/mounts | sort -r | while read -r mnt; do
    umount -l "$mnt" 2>/dev/null || true
  done
  for dir in /sys/fs/cgroup/*/kubepods; do
    [[ -d $dir ]] && find "$dir" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  if [[ -f $state/netns ]]; then
    ip netns delete "$(cat "$state/netns")" 2>/dev/null || true
    rm -f "$state/netns"
  fi
}
