# shellcheck shell=bash
# hack/node.sh's Kubernetes daemons: kube-scheduler, the kubelet (its KubeletConfiguration, with the cgroup v1 and
# short-sync settings the tests need) for node 1 and node K, and the wait until a Node is Ready. Sourced by
# hack/node.sh; sets no shell options.

start_scheduler() {
    local bin=$1 port
    port=$(free_port)
    start_bg kube-scheduler "$bin/kube-scheduler" --kubeconfig "$STATE/kubeconfig" \
        --authentication-kubeconfig "$STATE/kubeconfig" --authorization-kubeconfig "$STATE/kubeconfig" \
        --leader-elect=false --bind-address=127.0.0.1 --secure-port="$port"
}

# kubelet_flags DIR NAME IP SOCKET: the kubelet's flags for a node with state in DIR (into the array KUBELET_FLAGS),
# its settings in DIR/kubelet-config.yaml (a KubeletConfiguration, as a cluster admin writes one).
# failCgroupV1: false: from 1.35 the kubelet refuses cgroup v1 hosts unless told otherwise, and these machines are
# cgroup v1 (hybrid); 1.37 is the last minor that still runs on them (docs/kubernetes.md).
# syncFrequency 10s (default 1m): a changed ConfigMap reaches a pod's volume only at the pod's next periodic sync, so
# each Slurm config change (a new topology.conf, a scaled group's nodes) took up to a minute and more per pod to reach
# the daemons; at 10 s the tests wait on Slurm, not on a timer sized for large nodes. docs/testing.md lists the short
# settings of the tests.
kubelet_flags() {
    local dir=$1 name=$2 ip=$3 sock=$4 port healthz
    port=$(free_port)
    healthz=$(free_port)
    mkdir -p "$dir/kubelet" "$dir/kubelet-certs" "$dir/kubelet-plugins"
    cat >"$dir/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
containerRuntimeEndpoint: unix://$sock
imageServiceEndpoint: unix://$sock
runtimeRequestTimeout: 5m
volumePluginDir: $dir/kubelet-plugins
address: $ip
port: $port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $healthz
failSwapOn: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
clusterDNS: [$DNS_IP]
clusterDomain: cluster.local
resolvConf: $NODE/resolv.conf
nodeStatusUpdateFrequency: 2s
syncFrequency: 10s
evictionHard: {}
makeIPTablesUtilChains: false
imageGCHighThresholdPercent: 100
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
EOF
    KUBELET_FLAGS=(--kubeconfig "$STATE/kubeconfig" --config "$dir/kubelet-config.yaml"
        --root-dir="$dir/kubelet" --cert-dir="$dir/kubelet-certs" --hostname-override="$name" --node-ip="$ip")
}

start_kubelet() {
    local bin=$1
    kubelet_flags "$NODE" "$NODE_NAME" 127.0.0.1 "$CTR_SOCK"
    # No cloud metadata lookups (the binary has no cloud credential providers either, patch B in control-plane.sh).
    start_bg kubelet env AWS_EC2_METADATA_DISABLED=true "$bin/kubelet" "${KUBELET_FLAGS[@]}"
}

# node_ready [NAME]: the Node (default node 1) says Ready.
node_ready() {
    [ "$(kctl get node "${1:-$NODE_NAME}" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

# wait_node_ready [NAME DAEMON...]: until the Node is Ready, failing as soon as one of its daemons exits.
wait_node_ready() {
    local name=${1:-$NODE_NAME} deadline=$((SECONDS + NODE_READY_TIMEOUT)) d
    # shellcheck disable=SC2153 # DAEMONS is hack/node.sh's (not a misspelt local)
    local daemons=("${DAEMONS[@]}")
    [ $# -le 1 ] || daemons=("${@:2}")
    while [ $SECONDS -lt $deadline ]; do
        node_ready "$name" && return 0
        for d in "${daemons[@]}"; do
            daemon_running "$d" || {
                tail_log "$d"
                die "$d exited while the node was starting (log: $STATE/logs/$d.log)"
            }
        done
        sleep 0.5
    done
    tail_log "${daemons[-1]}"
    die "node $name not Ready within ${NODE_READY_TIMEOUT}s (log: $STATE/logs/${daemons[-1]}.log)"
}
