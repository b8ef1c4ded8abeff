# shellcheck shell=bash
# hack/node.sh's `up`: node 1 from claim to Ready (and nodes 2..NODES), the default StorageClass, the timing marks `up`
# and `down` log, and the EXIT trap that stops what a failed `up` started. Sourced by hack/node.sh; sets no shell
# options. Sourcing starts the clock the marks count from.

apply_storage_class() {
    kctl apply --server-side --force-conflicts --field-manager=slurmctl-node -f - >/dev/null 2>&1 <<EOF || die "applying the default StorageClass"
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local-hostpath
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: kubernetes.io/host-path
reclaimPolicy: Delete
volumeBindingMode: Immediate
EOF
}

T0=$(date +%s%N)
mark() { log "$1 (+$((($(date +%s%N) - T0) / 1000000)) ms)"; }

up_done=0
on_up_exit() {
    [ "$up_done" = 1 ] && return 0
    log "up failed: stopping what it started"
    cmd_down >/dev/null 2>&1 || true
}

cmd_up() {
    local start=$SECONDS
    [[ $NODES =~ ^[0-9]+$ ]] && [ "$NODES" -ge 1 ] && [ "$NODES" -le "$MAX_NODES" ] ||
        die "NODES is 1..$MAX_NODES, not '$NODES'"
    if node_running; then
        log "already up (node $NODE_NAME, state in $NODE)"
        local k
        for k in $(seq 2 "$NODES"); do
            cmd_add "$k"
        done
        return 0
    fi
    check_machine_free
    "$ROOT/hack/control-plane.sh" status >/dev/null 2>&1 ||
        die "the control plane in $STATE is not up; run 'hack/control-plane.sh up' first (same SLURMCTL_CLUSTER_DIR)"
    [ -f "$STATE/no-controller-manager" ] &&
        die "the control plane in $STATE runs without kube-controller-manager; a node needs it"
    local bin
    bin=$(node_bin_dir) || die "no kubelet/kube-scheduler cached in $CACHE; run 'hack/node.sh build' first"
    [ -x "$VENV/bin/python" ] || die "no virtualenv at $VENV (the DNS watcher runs in it); run 'make setup' first"
    ensure_apt_packages "${NODE_PACKAGES[@]}"
    [ -d "$NODE" ] && cmd_down >/dev/null 2>&1
    mkdir -p "$NODE"
    rm -f "$STATE/.picked-ports"
    trap on_up_exit EXIT
    claim_machine
    touch "$NODE/started"
    record_host_paths
    setup_network
    start_containerd
    mark "containerd answers"
    STORE_SOCK=$CTR_SOCK ensure_pause_image
    start_dns
    start_scheduler "$bin"
    start_kubelet "$bin"
    mark "DNS, scheduler and kubelet started"
    apply_storage_class
    wait_node_ready
    kctl uncordon "$NODE_NAME" >/dev/null 2>&1 || true
    log "up in $((SECONDS - start))s: node $NODE_NAME Ready, pods $NET.0/24 of $POD_NETWORK on $BRIDGE, DNS $DNS_IP" \
        "(state in $NODE)"
    local k
    for k in $(seq 2 "$NODES"); do
        cmd_add "$k"
    done
    up_done=1
}
