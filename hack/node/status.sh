# shellcheck shell=bash
# hack/node.sh's `status`: what runs, the bridge, and whether each Node is Ready (exit status 1 when anything is not).
# Sourced by hack/node.sh; sets no shell options.

cmd_status() {
    local d up=1
    if [ ! -d "$NODE" ]; then
        printf 'node down (state directory %s)\n' "$STATE"
        return 1
    fi
    for d in "${DAEMONS[@]}"; do
        if daemon_running "$d"; then
            printf '%-15s running (pid %s)\n' "$d" "$(recorded_pid "$d")"
        else
            printf '%-15s not running\n' "$d"
            up=0
        fi
    done
    if [ -e "/sys/class/net/$BRIDGE" ]; then
        printf '%-15s %s %s.1/%s\n' bridge "$BRIDGE" "$NET" "$POD_PREFIX"
    else
        printf '%-15s missing\n' bridge
        up=0
    fi
    if node_ready 2>/dev/null; then
        printf '%-15s %s Ready\n' node "$NODE_NAME"
    else
        printf '%-15s %s not Ready\n' node "$NODE_NAME"
        up=0
    fi
    local k
    for k in $(extra_numbers); do
        extra_node "$k"
        if [ -e "$XDIR/crashed" ]; then
            printf '%-15s %s crashed\n' node "$XNAME"
        elif node_ready "$XNAME" 2>/dev/null && daemon_running "kubelet-$k" && daemon_running "containerd-$k"; then
            printf '%-15s %s Ready (%s)\n' node "$XNAME" "$XIP"
        else
            printf '%-15s %s not Ready\n' node "$XNAME"
            up=0
        fi
    done
    [ "$up" = 1 ]
}
