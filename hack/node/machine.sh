# shellcheck shell=bash
# hack/node.sh's claim on the machine (one node per machine): the bridge whose alias names the owning state directory,
# taken under a lock; an abandoned node's bridge, DNS namespace and mounts reclaimed (`reclaim`, and `up` itself); the
# fixed host paths (/var/lib/kubelet, /var/log/pods, ...) that did not exist at `up` and go at `down`. Sourced by
# hack/node.sh; sets no shell options.

bridge_owner() {
    cat "/sys/class/net/$BRIDGE/ifalias" 2>/dev/null || true
}

# A node whose recorded processes (node and control plane) are all gone was abandoned: its run was killed, or the
# machine restarted under it. Only the bridge, the DNS namespace and mounts are left, and nothing would ever remove
# them, so they must not keep every later node from starting.
node_abandoned() {
    local owner=$1 f
    [ -n "$owner" ] || return 0
    for f in "$owner"/pids/*; do
        [ -f "$f" ] || continue
        pid_alive "$(cat "$f" 2>/dev/null)" "$(match_of "$(basename "$f")")" && return 1
    done
    return 0
}

# Takes the machine back from an abandoned node: its own `down` (which stops nothing, as nothing of it runs, and
# removes its mounts, host paths and network), then whatever a state directory that is gone can no longer name.
reclaim_abandoned_node() {
    local owner=$1
    log "bridge $BRIDGE belongs to '${owner:-unknown}', whose processes are all gone; removing what that node left"
    if [ -n "$owner" ] && [ -d "$owner/node" ]; then
        SLURMCTL_CLUSTER_DIR=$owner "$ROOT/hack/node.sh" down >&2 || log "down for '$owner' failed; removing its network"
    fi
    if [ -e "/sys/class/net/$BRIDGE" ] && [ "$(bridge_owner)" = "$owner" ]; then
        ip netns delete "$DNS_NS" 2>/dev/null || true
        ip link delete "$DNS_VETH" 2>/dev/null || true
        remove_service_routing "$owner"
        ip link delete "$BRIDGE" || die "could not delete the abandoned bridge $BRIDGE"
    fi
}

# One node per machine: the bridge (its alias names the owning state directory), the DNS namespace and the
# containerd store must be free, ours, or left by an abandoned node (which `check_machine_free reclaim`, run under the
# machine lock, removes).
check_machine_free() {
    local owner
    if [ -e "/sys/class/net/$BRIDGE" ]; then
        owner=$(bridge_owner)
        if [ "$owner" != "$STATE" ]; then
            node_abandoned "$owner" ||
                die "another node is up on this machine: bridge $BRIDGE belongs to state directory '${owner:-unknown}'" \
                    "(stop it with: SLURMCTL_CLUSTER_DIR=$owner hack/node.sh down)"
            [ "${1:-}" != reclaim ] || reclaim_abandoned_node "$owner"
        fi
    elif [ -e "/run/netns/$DNS_NS" ]; then
        # No node runs without the bridge: a namespace without it was left by a node that died while going down.
        [ "${1:-}" = reclaim ] ||
            die "network namespace $DNS_NS exists without bridge $BRIDGE (left over?); remove it with: ip netns delete $DNS_NS"
        log "network namespace $DNS_NS exists without bridge $BRIDGE; removing it"
        ip netns delete "$DNS_NS"
    fi
    local o pid _sock ostate
    if o=$(store_owner); then
        read -r pid _sock ostate <<<"$o"
        [ "$ostate" = "$STATE" ] ||
            die "the containerd image store $CTR_ROOT is in use by containerd PID $pid (state directory $ostate)"
    fi
}

# The bridge, created with our state directory as its alias, is the claim on the machine; checking and creating it
# happen under a lock, so two `up`s at once cannot both think the machine is free.
claim_machine() {
    local claim=${1:-bridge}
    mkdir -p "$CACHE"
    (
        flock -w 60 9 || die "timed out waiting for $CACHE/node.lock"
        check_machine_free reclaim
        if [ "$claim" = bridge ] && [ ! -e "/sys/class/net/$BRIDGE" ]; then
            ip link add "$BRIDGE" type bridge
            ip link set "$BRIDGE" alias "$STATE"
        fi
    ) 9>"$CACHE/node.lock"
}

# Paths outside the state directory that the kubelet, containerd, CNI or runc create at fixed places (kubelet 1.20's
# device plugin socket, container logs, CNI result cache, shim sockets, the k8s.io cgroups): those that did not exist
# at `up` are ours and go at `down` (one node per machine).
host_paths() {
    printf '%s\n' /var/lib/kubelet /var/log/pods /var/log/containers /var/lib/cni /run/containerd
    local c
    for c in /sys/fs/cgroup/*/; do
        [ -d "$c" ] && printf '%sk8s.io\n' "$c"
    done
}

record_host_paths() {
    local p
    : >"$NODE/host-paths"
    while read -r p; do
        [ -e "$p" ] || printf '%s\n' "$p" >>"$NODE/host-paths"
    done < <(host_paths)
}

remove_host_paths() {
    local p
    [ -f "$NODE/host-paths" ] || return 0
    while read -r p; do
        [ -e "$p" ] || continue
        case $p in
        /sys/fs/cgroup/*) find "$p" -depth -type d -exec rmdir {} + 2>/dev/null || log "cgroup $p is not empty; left" ;;
        *) rm -rf "$p" ;;
        esac
    done <"$NODE/host-paths"
}
