# shellcheck shell=bash
# hack/node.sh's pod network: the bridge's address, the DNS network namespace and its veth, the CNI config of a node,
# and the Service routing that stands in for kube-proxy (the nat chain, its hooks tagged slurmctl-node:<state dir>, the
# route and sysctls; see hack/node.sh's header); all removed again by teardown_network. Sourced by hack/node.sh; sets
# no shell options.

setup_network() {
    ip addr replace "$NET.1/$POD_PREFIX" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    if [ ! -e "/run/netns/$DNS_NS" ]; then
        ip netns add "$DNS_NS"
        ip link add "$DNS_VETH" type veth peer name eth0 netns "$DNS_NS"
        ip link set "$DNS_VETH" master "$BRIDGE" up
        ip -n "$DNS_NS" addr add "$DNS_IP/$POD_PREFIX" dev eth0
        ip -n "$DNS_NS" link set eth0 up
        ip -n "$DNS_NS" link set lo up
    fi
    setup_service_routing
    write_cni_config "$NODE" "$NET"
}

# --- Service routing (kube-proxy's job for ClusterIPs; see the header) ----------------------------------------------

ipt() { iptables -w 10 -t "$@"; }

# each_service_rule FN [OWNER]: FN TABLE CHAIN POSITION RULE... for every rule that hooks the Service chain and its
# guards into the machine's chains; each carries the comment slurmctl-node:<state directory of the node that made it>.
each_service_rule() {
    local fn=$1 tag=(-m comment --comment "slurmctl-node:${2:-$STATE}")
    "$fn" nat PREROUTING 1 -i "$BRIDGE" "${tag[@]}" -j "$SVC_CHAIN"
    "$fn" nat OUTPUT 1 -d "$SERVICE_NETWORK" "${tag[@]}" -j "$SVC_CHAIN"
    "$fn" nat POSTROUTING 1 -o "$BRIDGE" -m conntrack --ctstate DNAT "${tag[@]}" -j MASQUERADE
    "$fn" filter FORWARD 1 -i "$BRIDGE" -o "$BRIDGE" "${tag[@]}" -j ACCEPT
    "$fn" filter FORWARD 2 -i "$BRIDGE" "${tag[@]}" -j REJECT
    "$fn" filter INPUT 1 -i "$BRIDGE" -d 127.0.0.0/8 -m conntrack ! --ctstate DNAT "${tag[@]}" -j DROP
}

insert_rule() {
    local table=$1 chain=$2 pos=$3
    shift 3
    ipt "$table" -C "$chain" "$@" 2>/dev/null || ipt "$table" -I "$chain" "$pos" "$@"
}

delete_rule() {
    local table=$1 chain=$2
    shift 3
    while ipt "$table" -C "$chain" "$@" 2>/dev/null; do
        ipt "$table" -D "$chain" "$@"
    done
}

setup_service_routing() {
    sysctl -qw "net.ipv4.conf.$BRIDGE.route_localnet=1" "net.ipv4.conf.$BRIDGE.forwarding=1"
    ip route replace "$SERVICE_NETWORK" dev "$BRIDGE" src "$NET.1"
    ipt nat -S "$SVC_CHAIN" >/dev/null 2>&1 || ipt nat -N "$SVC_CHAIN"
    each_service_rule insert_rule
}

# remove_service_routing [OWNER]: the rules (this node's, or those of the node with state directory OWNER) and the
# chain; the route and the sysctls go with the bridge.
remove_service_routing() {
    command -v iptables >/dev/null || return 0
    each_service_rule delete_rule "${1:-}"
    if ipt nat -S "$SVC_CHAIN" >/dev/null 2>&1; then
        ipt nat -F "$SVC_CHAIN"
        ipt nat -X "$SVC_CHAIN"
    fi
}

# write_cni_config NODE_DIR RANGE: the node's CNI config: the shared bridge, addresses RANGE.10-RANGE.250 of the
# pod network from the node's own IPAM directory. No gateway, no masquerade, no default route: pods reach each other
# (on any node), the DNS namespace and, through the bridge's address, the Service network; nothing else.
write_cni_config() {
    local dir=$1 range=$2
    mkdir -p "$dir/cni/net.d" "$dir/cni/ipam"
    cat >"$dir/cni/net.d/10-slurmctl.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "slurmctl",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": false,
      "isDefaultGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$dir/cni/ipam",
        "ranges": [[{"subnet": "$POD_NETWORK", "rangeStart": "$range.10", "rangeEnd": "$range.250", "gateway": "$NET.1"}]],
        "routes": [{"dst": "$SERVICE_NETWORK", "gw": "$NET.1"}]
      }
    }
  ]
}
EOF
}

teardown_network() {
    # The namespace is ours only while the bridge is (or when no bridge claims the machine any more).
    if [ -e "/sys/class/net/$BRIDGE" ] && [ "$(bridge_owner)" != "$STATE" ]; then
        return 0
    fi
    if [ -e "/run/netns/$DNS_NS" ]; then
        ip netns delete "$DNS_NS" || log "could not delete network namespace $DNS_NS"
    fi
    if [ -e "/sys/class/net/$DNS_VETH" ]; then
        ip link delete "$DNS_VETH" 2>/dev/null || true
    fi
    remove_service_routing
    if [ -e "/sys/class/net/$BRIDGE" ] && [ "$(bridge_owner)" = "$STATE" ]; then
        ip link delete "$BRIDGE" || log "could not delete bridge $BRIDGE"
    fi
}
