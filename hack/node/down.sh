# shellcheck shell=bash
# hack/node.sh's `down` for node 1, and the clean-up steps node K's `remove` and `crash` share: pods deleted while the
# kubelet runs, containers and shims the kubelet left, leftover pod network namespaces, mounts, pod logs. Sourced by
# hack/node.sh; sets no shell options.

# delete_pods [KUBELET]: pods go first, while the kubelet (node 1's, or the daemon named KUBELET) still runs, so it
# stops their sandboxes and tears down their networks itself.
delete_pods() {
    apiserver_reachable || return 0
    daemon_running "${1:-kubelet}" || return 0
    kctl get node "$NODE_NAME" >/dev/null 2>&1 || return 0
    kctl cordon "$NODE_NAME" >/dev/null 2>&1 || true
    kctl delete pods -A --field-selector "spec.nodeName=$NODE_NAME" --grace-period=2 --wait=false >/dev/null 2>&1 ||
        true
    # Done when the kubelet has stopped every sandbox (which tears down its network); the API objects go later, after
    # volume cleanup, which the kubelet need not finish: what it leaves is unmounted below.
    local deadline=$((SECONDS + 45))
    while [ $SECONDS -lt $deadline ]; do
        ctr_at "$CTR_SOCK" tasks ls 2>/dev/null | grep RUNNING >/dev/null || return 0
        sleep 0.3
    done
    log "some pods were still running after 45s; removing their containers directly"
}

# remove_containers [CONTAINERD]: whatever the kubelet left in containerd (it was killed, or the apiserver was gone):
# kill the tasks, remember their network namespaces, delete the containers.
remove_containers() {
    daemon_running "${1:-containerd}" || return 0
    local ids id
    ids=$(ctr_at "$CTR_SOCK" containers ls -q 2>/dev/null || true)
    [ -n "$ids" ] || return 0
    local info
    for id in $ids; do
        info=$(ctr_at "$CTR_SOCK" containers info "$id" 2>/dev/null || true)
        grep -o '/var/run/netns/cni-[0-9a-f-]*\|/run/netns/cni-[0-9a-f-]*' <<<"$info" >>"$NODE/leftover-netns" || true
        ctr_at "$CTR_SOCK" tasks delete --force "$id" >/dev/null 2>&1 || true
        rm -f /var/lib/cni/results/*-"$id"-* 2>/dev/null || true
        ctr_at "$CTR_SOCK" containers delete "$id" >/dev/null 2>&1 || true
    done
}

# The kubelet keeps container logs in /var/log/pods/<ns>_<pod>_<uid> (a path fixed in 1.20) and links them from
# /var/log/containers; its garbage collection removes them only a while after a pod goes. Ours are those created
# since `up` (one node per machine).
remove_pod_logs() {
    local dir link
    [ -f "$NODE/started" ] && [ -d /var/log/pods ] || return 0
    while IFS= read -r -d '' dir; do
        for link in /var/log/containers/*.log; do
            [ -L "$link" ] && [[ "$(readlink "$link")" == "$dir"/* ]] && rm -f "$link"
        done
        rm -rf "$dir"
    done < <(find /var/log/pods -mindepth 1 -maxdepth 1 -type d -newer "$NODE/started" -print0)
}

# Shims whose command line names our containerd socket outlive containerd when tasks were left running.
kill_leftover_shims() {
    local pid
    for pid in $(pids_of_shims "$CTR_SOCK"); do
        kill -KILL "$pid" 2>/dev/null || true
    done
}

# pids_of_shims SOCKET: the containerd shims serving the containerd on SOCKET.
pids_of_shims() {
    local p
    for p in /proc/[0-9]*; do
        [ -r "$p/cmdline" ] || continue
        tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -F -- "-address $1 " >/dev/null && printf '%s\n' "${p#/proc/}"
    done
    return 0
}

# The shims' children of the containerd at socket $1: processes in its pods' network namespaces, host-network pods
# (whose namespace is the machine's) left out.
pod_netns_pids() {
    local shim pid host
    host=$(readlink /proc/self/ns/net)
    for shim in $(pids_of_shims "$1"); do
        for pid in $(pgrep -P "$shim" || true); do
            [ "$(readlink "/proc/$pid/ns/net" 2>/dev/null)" = "$host" ] || printf '%s\n' "$pid"
        done
    done
    return 0
}

# Every mount point under a directory, deepest first.
mounts_under() {
    local dir=$1
    awk -v d="$dir" '$5 == d || index($5, d "/") == 1 {print $5}' /proc/self/mountinfo | sort -r
}

unmount_under() {
    local dir=$1 m
    for m in $(mounts_under "$dir"); do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
    done
}

# delete_leftover_netns [MOUNT_NS]: the network namespaces remove_containers noted, unmounted and deleted (in node K's
# mount namespace MOUNT_NS, where its pods' namespaces are mounted; the files themselves are the machine's).
# shellcheck disable=SC2120 # node K's remove (extra-nodes.sh) passes its mount namespace
delete_leftover_netns() {
    local ns in=()
    [ -f "$NODE/leftover-netns" ] || return 0
    [ -z "${1:-}" ] || in=(nsenter --mount="$1")
    while read -r ns; do
        [ -e "$ns" ] || continue
        "${in[@]}" ip netns delete "$(basename "$ns")" 2>/dev/null ||
            { "${in[@]}" umount "$ns" 2>/dev/null; rm -f "$ns"; } || true
    done < <(sort -u "$NODE/leftover-netns")
}

cmd_down() {
    if [ ! -d "$NODE" ]; then
        log "not up"
        return 0
    fi
    local k
    for k in $(extra_numbers); do
        cmd_remove "$k"
    done
    # The scheduler goes first, so no replacement pod (a StatefulSet's, a DaemonSet's) lands here while we drain.
    stop_pid kube-scheduler
    delete_pods
    mark "pods deleted"
    stop_pid kubelet
    stop_pid dns-watcher "$(match_of dns-watcher)"
    stop_pid dnsmasq
    mark "kubelet, scheduler and DNS stopped"
    remove_containers
    stop_pid containerd
    mark "containers removed, containerd stopped"
    local pid _sock ostate
    if [ -f "$CTR_OWNER" ]; then
        read -r pid _sock ostate <"$CTR_OWNER" || true
        [ "${ostate:-}" != "$STATE" ] || rm -f "$CTR_OWNER"
    fi
    kill_leftover_shims
    unmount_under "$NODE"
    # shellcheck disable=SC2119 # node 1's: no mount namespace of its own
    delete_leftover_netns
    remove_pod_logs
    remove_host_paths
    teardown_network
    if apiserver_reachable; then
        kctl delete node "$NODE_NAME" --wait=false >/dev/null 2>&1 || true
    fi
    if [ -n "$(mounts_under "$NODE")" ]; then
        die "mounts left under $NODE, not removing it: $(mounts_under "$NODE" | tr '\n' ' ')"
    fi
    rm -rf "$NODE"
    log "down"
}
