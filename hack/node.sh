#!/usr/bin/env bash
# A real Kubernetes node on this machine, on top of hack/control-plane.sh: containerd + runc, a CNI bridge, pod DNS
# (dnsmasq fed by hack/dns_watcher.py), kube-scheduler and a kubelet built from the same source tree as the apiserver.
# See ../shared/notes/real-node.md. Nothing leaves loopback and our own network namespaces: the node IP is 127.0.0.1,
# pods get no default route and a resolver that never forwards, containerd never pulls.
#
# ClusterIP Services route as with kube-proxy (the operator's in-cluster client reaches the API server through the
# `kubernetes` Service, Prometheus-style clients reach the metrics Service): pods get one route besides the pod
# network, the Service network via the bridge's address; the node DNATs each ClusterIP port to its ready endpoints
# (nat chain SLURMCTL-SVC-<bridge>, kept by hack/dns_watcher.py) and default/kubernetes to the API server on
# 127.0.0.1 (route_localnet on the bridge only); traffic between pods through a ClusterIP is masqueraded to the
# bridge's address and forwarded on the bridge only (forwarding on the bridge alone; anything else a pod sends to be
# forwarded is rejected; loopback is reachable from the bridge only through those DNAT rules). The Service network
# is routed onto the bridge on the node too, so no packet for it ever takes the machine's default route. Everything
# goes with `down` (the rules by their comment slurmctl-node:<state dir>; route and sysctls with the bridge).
#
#   hack/node.sh build          apt packages, the kube binaries (hack/control-plane.sh build), the pause image
#   hack/node.sh up             start the node (after `hack/control-plane.sh up` on the same state directory);
#                               idempotent; waits until the Node is Ready and the default StorageClass exists
#   hack/node.sh down           delete pods (short grace), stop kubelet, scheduler, DNS, containerd by recorded PID,
#                               unmount, delete the bridge and the DNS network namespace, remove the fixed host paths
#                               (/var/lib/kubelet, /var/log/pods, ...) that did not exist before `up`
#   hack/node.sh reclaim        remove what an abandoned node left (its processes are all gone: the run was killed,
#                               the machine restarted): its mounts, host paths, bridge and DNS namespace; refuses while
#                               any process of it runs. `up` does this itself.
#   hack/node.sh status         say what runs
#   hack/node.sh import FILE... import OCI or docker archives into the node's containerd image store (namespace k8s.io);
#                               when no node is up, into a temporary containerd on the same persistent store
#   hack/node.sh images         list the image references in that store, one per line
#   hack/node.sh build-image TAG CONTEXT [DOCKERFILE]   buildah-build CONTEXT (vfs, chroot isolation, never pulls) as
#                               TAG and import it (what `up` does for the pause image)
#   hack/node.sh add K          node K (2..8) joins node 1's cluster: slurmctl-node-K at 127.0.0.K, its own containerd
#                               and image store (node 1's images copied in, or those in NODE_IMAGES), its own kubelet;
#                               `up` with NODES=N adds nodes 2..N
#   hack/node.sh crash K        what a machine failure does to node K: its pods drop off the network, its kubelet,
#                               containerd and containers are SIGKILLed; the state stays
#   hack/node.sh start K        start a crashed node K again (a reboot: its kubelet finds its pods' containers gone)
#   hack/node.sh remove K       node K leaves: its pods deleted (short grace), daemons stopped, Node deleted
#
# Environment:
#   SLURMCTL_CLUSTER_DIR   state directory shared with hack/control-plane.sh (default: <repo>/.cluster); the node
#                          keeps its state in <dir>/node/ (containerd state and socket, kubelet root, CNI config and
#                          IPAM, DNS hosts), PIDs in <dir>/pids/, logs in <dir>/logs/
#   SLURMCTL_CACHE         cache (default: ~/.cache/slurmctl): kube binaries, containerd/root (the image store, kept
#                          across down/up), buildah/ (build storage)
#   SLURMCTL_CONTAINERD_DIR  containerd's persistent directory (default: $SLURMCTL_CACHE/containerd): root/ is the image
#                          store, owner names the containerd using it ("PID SOCKET STATE_DIR")
#   SLURMCTL_VENV          the repository's virtualenv, for the DNS watcher (default: <repo>/.venv)
#   NODE_READY_TIMEOUT     seconds `up` waits for the Node to be Ready (default 120)
#   NODES                  nodes `up` starts (default 1): node 1 and `add` 2..NODES
#   NODE_IMAGES            image references `add`/`start` copy to the new node (default: every image of node 1's store)
#   SLURMCTL_NODE_BRIDGE, SLURMCTL_NODE_DNS_NS  the bridge and DNS namespace names (default slurmctl0, slurmctl-dns):
#                          the tests of `reclaim` use their own, beside a running node
#
# Machine-wide: the bridge slurmctl0 (10.244.0.0/16 for the pods of every node, no gateway in pods), the DNS namespace
# slurmctl-dns (10.244.0.2) and the containerd stores are one per machine, so one cluster runs at a time (with up to 8
# nodes); a second `up` from another state directory fails and says which one owns them, unless that cluster was
# abandoned (`reclaim`). Each node uses about 135 MiB (containerd ~50, kubelet ~85) besides its pods.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=${SLURMCTL_CLUSTER_DIR:-$ROOT/.cluster}
CACHE=${SLURMCTL_CACHE:-$HOME/.cache/slurmctl}
VENV=${SLURMCTL_VENV:-$ROOT/.venv}
NODE_READY_TIMEOUT=${NODE_READY_TIMEOUT:-120}
NODES=${NODES:-1}
LOG_PREFIX=node
# shellcheck source=hack/lib.sh
. "$ROOT/hack/lib.sh"

NODE=$STATE/node
NODE_NAME=slurmctl-node
BRIDGE=${SLURMCTL_NODE_BRIDGE:-slurmctl0}
# One pod network for every node of the machine: node K hands out 10.244.<K-1>.10-250 (NET is node 1's range and holds
# the bridge's and the DNS server's addresses).
NET=10.244.0
POD_NETWORK=10.244.0.0/16
POD_PREFIX=16
MAX_NODES=8
DNS_NS=${SLURMCTL_NODE_DNS_NS:-slurmctl-dns}
DNS_VETH=${DNS_NS}0
DNS_IP=$NET.2
# hack/control-plane.sh's --service-cluster-ip-range: the ClusterIPs the node routes (the `kubernetes` Service is .1).
SERVICE_NETWORK=10.96.0.0/16
SVC_CHAIN=SLURMCTL-SVC-$BRIDGE
CTR_DIR=${SLURMCTL_CONTAINERD_DIR:-$CACHE/containerd}
CTR_ROOT=$CTR_DIR/root
CTR_OWNER=$CTR_DIR/owner
CTR_SOCK=$NODE/containerd/containerd.sock
PAUSE_IMAGE=k8s.gcr.io/pause:3.2
REGISTRY_HOSTS=(_default docker.io ghcr.io registry.k8s.io k8s.gcr.io gcr.io quay.io)
NODE_PACKAGES=(runc buildah containernetworking-plugins dnsmasq-base iptables iproute2 gcc libc6-dev
    busybox-static procps)
# Daemons in start order; `down` stops them in reverse (kubelet first, containerd last).
DAEMONS=(containerd dnsmasq dns-watcher kube-scheduler kubelet)
BUILDAH=(buildah --root "$CACHE/buildah/root" --runroot "$CACHE/buildah/runroot" --storage-driver vfs)

# What each daemon's command line contains (pid_alive checks /proc/PID/cmdline for it).
match_of() {
    case $1 in
    dns-watcher) printf 'dns_watcher.py' ;;
    containerd-[0-9]*) printf containerd ;;
    kubelet-[0-9]*) printf kubelet ;;
    *) printf '%s' "$1" ;;
    esac
}

daemon_running() { running "$1" "$(match_of "$1")"; }

node_running() {
    local d
    [ -d "$NODE" ] || return 1
    for d in "${DAEMONS[@]}"; do
        daemon_running "$d" || return 1
    done
}

kube_bin_dir() {
    "$ROOT/hack/control-plane.sh" bin-dir 2>/dev/null
}

# The cached binaries with the node's among them: a build for the control plane alone (KUBE_BUILD=control-plane, as
# `make test` builds the oldest minor) has no kubelet and no kube-scheduler.
node_bin_dir() {
    local bin
    bin=$(kube_bin_dir) && [ -x "$bin/kubelet" ] && [ -x "$bin/kube-scheduler" ] && printf '%s' "$bin"
}

# kubectl of the cluster's own version (built with it); the machine's kubectl, if any, is never used.
kctl() {
    local bin
    bin=$(kube_bin_dir) || die "no kubectl cached in $CACHE; run 'hack/control-plane.sh build' first"
    "$bin/kubectl" --kubeconfig "$STATE/kubeconfig" --request-timeout=10s "$@"
}

apiserver_reachable() {
    [ -f "$STATE/kubeconfig" ] && kctl get --raw /readyz >/dev/null 2>&1
}

# --- containerd -----------------------------------------------------------------------------------------------------

# containerd, its runc shim and ctr, built from hack/deps/containerd (Debian 12's containerd 1.6 predates what
# Kubernetes 1.36+ supports). runc stays Debian's. Every containerd of these scripts runs with CTR_BIN first in PATH,
# where it finds its shim.
CONTAINERD_DEPS=$ROOT/hack/deps/containerd
CONTAINERD_VERSION=$(module_version "$CONTAINERD_DEPS" github.com/containerd/containerd/v2)
CTR_BIN=$CACHE/containerd-$CONTAINERD_VERSION/bin
CONTAINERD_BINARIES=(containerd containerd-shim-runc-v2 ctr)
PATH=$CTR_BIN:$PATH

# ensure_containerd: build it once (under a lock: `make test` builds images and the cluster side by side, and both
# need it).
ensure_containerd() {
    cached_bins "$CTR_BIN" "${CONTAINERD_BINARIES[@]}" && return 0
    mkdir -p "$CACHE/logs"
    local lock
    exec {lock}>"$CACHE/containerd-build.lock"
    flock -w 1200 "$lock" || die "waited 20 minutes for another containerd build ($CACHE/containerd-build.lock)"
    if ! cached_bins "$CTR_BIN" "${CONTAINERD_BINARIES[@]}"; then
        local pkgs=() b v=github.com/containerd/containerd/v2/version GO_BUILD_CACHE=$CACHE/go/build-containerd
        for b in "${CONTAINERD_BINARIES[@]}"; do
            pkgs+=("github.com/containerd/containerd/v2/cmd/$b")
        done
        rm -rf "$CTR_BIN.tmp"
        mkdir -p "$CTR_BIN.tmp"
        run_step containerd-build "$CACHE/logs/containerd-build.log" in_dir "$CONTAINERD_DEPS" go_env build \
            -trimpath -tags no_btrfs -ldflags "-s -w -X $v.Version=$CONTAINERD_VERSION -X $v.Revision=gomod" \
            -o "$CTR_BIN.tmp/" "${pkgs[@]}"
        rm -rf "$GO_BUILD_CACHE" "$CTR_BIN"
        mv "$CTR_BIN.tmp" "$CTR_BIN"
        log "built containerd $CONTAINERD_VERSION into $CTR_BIN"
    fi
    exec {lock}>&-
}

# ctr_at SOCKET ARGS...: ctr against a containerd, in the CRI's namespace.
ctr_at() {
    local sock=$1
    shift
    ctr --address "$sock" --timeout "${CTR_TIMEOUT:-60s}" -n k8s.io "$@"
}

# The containerd that owns the persistent store right now, as "PID SOCKET STATE", if it is alive.
store_owner() {
    local pid sock owner_state
    [ -f "$CTR_OWNER" ] || return 1
    read -r pid sock owner_state <"$CTR_OWNER" || return 1
    pid_alive "$pid" containerd || return 1
    printf '%s %s %s' "$pid" "$sock" "$owner_state"
}

registry_hosts() {
    local dir=$1 h
    for h in "${REGISTRY_HOSTS[@]}"; do
        mkdir -p "$dir/$h"
        # Every registry points at a closed loopback port: a pull fails at once instead of leaving the machine.
        cat >"$dir/$h/hosts.toml" <<EOF
server = "http://127.0.0.1:9"

[host."http://127.0.0.1:9"]
  capabilities = ["pull", "resolve"]
EOF
    done
}

# containerd_config FILE STATE_DIR SOCKET [cri]: the config for a containerd on the persistent store; with "cri" it
# serves the kubelet, without it is a plain image store (used by `import`/`images` when no node is up).
containerd_config() {
    local file=$1 state=$2 sock=$3 cri=${4:-}
    local disabled='"io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing"'
    [ "$cri" = cri ] || disabled="$disabled, \"io.containerd.grpc.v1.cri\", \"io.containerd.cri.v1.runtime\",
  \"io.containerd.cri.v1.images\""
    local root=${CFG_ROOT:-$CTR_ROOT} node=${CFG_NODE:-$NODE} opt=${CFG_OPT:-$CTR_DIR/opt}
    cat >"$file" <<EOF
version = 3
root = "$root"
state = "$state"
disabled_plugins = [$disabled]

[grpc]
  address = "$sock"

[debug]
  address = ""

[metrics]
  address = ""

[plugins.'io.containerd.internal.v1.opt']
  path = "$opt"
EOF
    [ "$cri" = cri ] || return 0
    cat >>"$file" <<EOF

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"

  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$PAUSE_IMAGE"

  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "$node/containerd/certs.d"

[plugins.'io.containerd.cri.v1.runtime']
  disable_apparmor = true
  restrict_oom_score_adj = true

  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"

    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$node/containerd/runc"

  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$node/cni/net.d"
    max_conf_num = 1

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
EOF
}

# wait_containerd NAME SOCKET: until containerd answers on SOCKET (or its recorded process died).
wait_containerd() {
    local name=$1 sock=$2 deadline=$((SECONDS + 30))
    while [ $SECONDS -lt $deadline ]; do
        ctr --address "$sock" --timeout 2s version >/dev/null 2>&1 && return 0
        running "$name" containerd || break
        sleep 0.2
    done
    tail_log "$name"
    log "error: containerd ($name) did not answer on $sock"
    return 1
}

# with_store CMD...: run CMD with STORE_SOCK set to a containerd on the persistent image store: the node's (or another
# state directory's node's) when one runs, otherwise a temporary one started and stopped here.
with_store() {
    local owner pid sock _state
    if owner=$(store_owner); then
        read -r pid sock _state <<<"$owner"
        STORE_SOCK=$sock "$@"
        return
    fi
    ensure_apt_packages runc
    ensure_containerd
    local tmp
    tmp=$(mktemp -d /tmp/slurmctl-ctr.XXXXXX)
    mkdir -p "$CTR_ROOT" "$tmp/pids" "$tmp/logs"
    containerd_config "$tmp/config.toml" "$tmp/state" "$tmp/containerd.sock"
    local saved_state=$STATE rc=0
    STATE=$tmp
    start_bg containerd-store containerd --config "$tmp/config.toml"
    printf '%s %s %s\n' "$(recorded_pid containerd-store)" "$tmp/containerd.sock" "$tmp" >"$CTR_OWNER"
    if wait_containerd containerd-store "$tmp/containerd.sock"; then
        STORE_SOCK=$tmp/containerd.sock "$@" || rc=$?
    else
        rc=1
    fi
    stop_pid containerd-store containerd
    STATE=$saved_state
    rm -f "$CTR_OWNER"
    rm -rf "$tmp"
    return "$rc"
}

import_files() {
    local f
    for f in "$@"; do
        log "importing $f"
        ctr_at "$STORE_SOCK" images import --snapshotter overlayfs "$f" >&2 || {
            log "error: ctr images import $f failed"
            return 1
        }
    done
}

list_images() {
    ctr_at "$STORE_SOCK" images ls -q | grep -v '^sha256:' || true
}

cmd_import() {
    [ $# -gt 0 ] || die "usage: hack/node.sh import FILE..."
    local f
    for f in "$@"; do
        [ -f "$f" ] || die "no such file: $f"
    done
    with_store import_files "$@"
    local k
    for k in $(extra_numbers); do
        extra_node "$k"
        daemon_running "containerd-$k" || continue
        STORE_SOCK=$XSOCK import_files "$@"
    done
}

cmd_images() {
    with_store list_images
}

# build_image TAG CONTEXT [DOCKERFILE]: buildah build (never pulls) and import into the store.
build_image() {
    local tag=$1 context=$2 dockerfile=${3:-$2/Dockerfile}
    ensure_apt_packages buildah runc
    mkdir -p "$CACHE/logs" "$CACHE/buildah"
    local name logname
    name=$(printf '%s' "$tag" | tr -c 'A-Za-z0-9._-' '_')
    logname="$CACHE/logs/build-$name.log"
    run_step "build $tag" "$logname" "${BUILDAH[@]}" bud --isolation chroot --pull-never --format docker \
        -f "$dockerfile" -t "$tag" "$context"
    local archive
    archive=$(mktemp /tmp/slurmctl-image.XXXXXX.tar)
    rm -f "$archive"
    run_step "push $tag" "$CACHE/logs/push-$name.log" "${BUILDAH[@]}" push "$tag" "oci-archive:$archive:$tag"
    cmd_import "$archive"
    rm -f "$archive"
}

cmd_build_image() {
    [ $# -ge 2 ] || die "usage: hack/node.sh build-image TAG CONTEXT [DOCKERFILE]"
    build_image "$@"
}

# The pause image: compiled on the host (no image with a compiler exists here, nothing is pulled) into a build
# context with images/pause/Dockerfile.
ensure_pause_image() {
    if [ -n "${STORE_SOCK:-}" ] && ctr_at "$STORE_SOCK" images ls -q "name==$PAUSE_IMAGE" | grep . >/dev/null; then
        return 0
    fi
    local ctx start=$SECONDS
    ctx=$(mktemp -d /tmp/slurmctl-pause.XXXXXX)
    cp "$ROOT/images/pause/Dockerfile" "$ctx/"
    gcc -Os -static -Wall -Werror -o "$ctx/pause" "$ROOT/images/pause/pause.c" || die "compiling images/pause/pause.c"
    strip "$ctx/pause" 2>/dev/null || true
    build_image "$PAUSE_IMAGE" "$ctx"
    rm -rf "$ctx"
    log "pause image $PAUSE_IMAGE built and imported in $((SECONDS - start))s"
}

has_pause_image() {
    list_images | grep -x "$PAUSE_IMAGE" >/dev/null
}

cmd_build() {
    KUBE_BUILD=all "$ROOT/hack/control-plane.sh" build
    ensure_apt_packages "${NODE_PACKAGES[@]}"
    ensure_containerd
    if with_store has_pause_image; then
        log "pause image $PAUSE_IMAGE present"
    else
        STORE_SOCK='' ensure_pause_image
    fi
}

# --- network --------------------------------------------------------------------------------------------------------

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
    local o pid sock ostate
    if o=$(store_owner); then
        read -r pid sock ostate <<<"$o"
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

# --- up -------------------------------------------------------------------------------------------------------------

start_containerd() {
    mkdir -p "$NODE/containerd" "$CTR_ROOT"
    registry_hosts "$NODE/containerd/certs.d"
    containerd_config "$NODE/containerd/config.toml" "$NODE/containerd/state" "$CTR_SOCK" cri
    start_bg containerd containerd --config "$NODE/containerd/config.toml"
    printf '%s %s %s\n' "$(recorded_pid containerd)" "$CTR_SOCK" "$STATE" >"$CTR_OWNER"
    wait_containerd containerd "$CTR_SOCK" || die "containerd did not start (log: $STATE/logs/containerd.log)"
}

start_dns() {
    mkdir -p "$NODE/dns/hosts"
    : >"$NODE/resolv.conf"
    # The pod resolver answers only cluster.local names from the watcher's hosts file and never forwards anywhere.
    start_bg dnsmasq ip netns exec "$DNS_NS" dnsmasq --keep-in-foreground --no-resolv --no-hosts --no-poll \
        --hostsdir="$NODE/dns/hosts" --local=/cluster.local/ --domain-needed --bogus-priv \
        --listen-address="$DNS_IP" --bind-interfaces --user=root --pid-file= --log-facility=-
    local server
    server=$(cat "$STATE/server")
    start_bg dns-watcher "$VENV/bin/python" "$ROOT/hack/dns_watcher.py" --kubeconfig "$STATE/kubeconfig" \
        --hosts-dir "$NODE/dns/hosts" --work-dir "$NODE/dns" --service-chain "$SVC_CHAIN" --apiserver "${server#https://}"
}

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

# --- down -----------------------------------------------------------------------------------------------------------

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

# --- more nodes -----------------------------------------------------------------------------------------------------
# Node K (2..MAX_NODES) joins node 1's cluster: its own containerd (own image store, root, socket) and kubelet, node
# name slurmctl-node-K, address 127.0.0.K, pods from 10.244.<K-1>.10-250 on the shared bridge; node 1's scheduler and
# DNS serve every node. A kubelet and its containerd also use a few fixed host paths: /var/log/pods (where every
# kubelet garbage-collects the log directories of pods it does not know), /var/lib/kubelet/device-plugins (whose
# sockets each kubelet removes at start), /var/lib/cni. Node K's two daemons run in a mount namespace of their own
# (slave of the machine's: host mounts reach it, its own mounts stay inside) in which those paths are directories of
# node K, so nodes never touch each other's. Its pods' network namespaces live in that mount namespace too.

# Paths each extra node has for itself (bind mounts inside its mount namespace).
OWN_PATHS=(/var/lib/kubelet /var/log/pods /var/log/containers /var/lib/cni)

# extra_node K: set XDIR, XNAME, XIP, XRANGE, XSOCK, XSTORE, XNS for node K (2..MAX_NODES).
extra_node() {
    local k=$1
    [[ $k =~ ^[0-9]+$ ]] && [ "$k" -ge 2 ] && [ "$k" -le "$MAX_NODES" ] || die "a node number is 2..$MAX_NODES, not '$k'"
    XK=$k
    XDIR=$STATE/node-$k
    XNAME=$NODE_NAME-$k
    XIP=127.0.0.$k
    XRANGE=10.244.$((k - 1))
    XSOCK=$XDIR/containerd/containerd.sock
    XSTORE=$CTR_DIR-node-$k
    XNS=$XDIR/ns/mnt
}

extra_numbers() {
    local d
    for d in "$STATE"/node-[0-9]*; do
        [ -d "$d" ] && printf '%s\n' "${d##*-}"
    done
}

# The node's mount namespace, bound to $XNS (a file on a private mount, as a bound namespace must be), with its own
# directories over OWN_PATHS.
make_mount_namespace() {
    local p
    mkdir -p "$XDIR/ns"
    if ! mountpoint -q "$XDIR/ns"; then
        mount --bind "$XDIR/ns" "$XDIR/ns"
        mount --make-private "$XDIR/ns"
    fi
    nsenter --mount="$XNS" true 2>/dev/null && return 0
    : >"$XNS"
    unshare --mount="$XNS" --propagation slave true
    for p in "${OWN_PATHS[@]}"; do
        mkdir -p "$p" "$XDIR/own$p"
        nsenter --mount="$XNS" mount --bind "$XDIR/own$p" "$p"
    done
}

# The kubelet accepts a node IP only if an interface of the machine has it: 127.0.0.K is added to lo (as a /32, so
# no route changes: all of 127.0.0.0/8 is local already), labelled as ours, and removed with the node.
add_node_address() {
    ip -o addr show dev lo | grep -F " $XIP/" >/dev/null && return 0
    ip addr add "$XIP/32" dev lo label "lo:slurmctl$XK"
}

remove_node_address() {
    ip -o addr show dev lo label "lo:slurmctl$XK" | grep -F " $XIP/32" >/dev/null || return 0
    ip addr del "$XIP/32" dev lo label "lo:slurmctl$XK" || log "could not remove $XIP from lo"
}

remove_mount_namespace() {
    [ -d "$XDIR/ns" ] || return 0
    umount "$XNS" 2>/dev/null || true
    umount "$XDIR/ns" 2>/dev/null || true
}

# Node 1's images (or those named in NODE_IMAGES, and the pause image) that node K lacks or has at another digest,
# exported from node 1's containerd straight into node K's.
sync_images() {
    local ref digest _ missing=() wanted=" ${NODE_IMAGES:-} $PAUSE_IMAGE "
    local -A theirs=()
    while read -r ref _ digest _; do
        theirs[$ref]=$digest
    done < <(ctr_at "$XSOCK" images ls | tail -n +2)
    while read -r ref _ digest _; do
        [[ $ref == sha256:* ]] && continue
        [ -z "${NODE_IMAGES:-}" ] || [[ $wanted == *" $ref "* ]] || continue
        [ "${theirs[$ref]:-}" = "$digest" ] || missing+=("$ref")
    done < <(ctr_at "$CTR_SOCK" images ls | tail -n +2)
    [ ${#missing[@]} -gt 0 ] || return 0
    local start=$SECONDS
    # One stream for every missing image: a new node's first copy is gigabytes (over a minute on a busy machine).
    CTR_TIMEOUT=900s ctr_at "$CTR_SOCK" images export - "${missing[@]}" |
        CTR_TIMEOUT=900s ctr_at "$XSOCK" images import --snapshotter overlayfs - >/dev/null ||
        die "copying images to node $XNAME failed: ${missing[*]}"
    log "node $XNAME: ${#missing[@]} image(s) copied from node 1 in $((SECONDS - start))s"
}

# start_extra K: containerd and kubelet of node K (again, after `crash`), until its Node is Ready.
# Node K's containerd, in its mount namespace (unless it runs), answering on its socket.
start_extra_containerd() {
    daemon_running "containerd-$XK" ||
        start_bg "containerd-$XK" nsenter --mount="$XNS" containerd --config "$XDIR/containerd/config.toml"
    wait_containerd "containerd-$XK" "$XSOCK"
}

start_extra() {
    local bin
    bin=$(node_bin_dir) || die "no kubelet cached in $CACHE; run 'hack/node.sh build' first"
    make_mount_namespace
    add_node_address
    mkdir -p "$XDIR/containerd" "$XSTORE/root"
    registry_hosts "$XDIR/containerd/certs.d"
    CFG_ROOT=$XSTORE/root CFG_NODE=$XDIR CFG_OPT=$XSTORE/opt \
        containerd_config "$XDIR/containerd/config.toml" "$XDIR/containerd/state" "$XSOCK" cri
    write_cni_config "$XDIR" "$XRANGE"
    start_extra_containerd || die "containerd of $XNAME did not start (log: $STATE/logs/containerd-$XK.log)"
    sync_images
    if ! daemon_running "kubelet-$XK"; then
        kubelet_flags "$XDIR" "$XNAME" "$XIP" "$XSOCK"
        start_bg "kubelet-$XK" nsenter --mount="$XNS" env AWS_EC2_METADATA_DISABLED=true "$bin/kubelet" \
            "${KUBELET_FLAGS[@]}"
    fi
    wait_node_ready "$XNAME" "containerd-$XK" "kubelet-$XK"
    rm -f "$XDIR/crashed"
}

cmd_add() {
    local start=$SECONDS
    node_running || die "node 1 is not up (hack/node.sh up): node $1 joins its cluster"
    extra_node "$1"
    if daemon_running "kubelet-$XK" && daemon_running "containerd-$XK"; then
        log "node $XNAME already up"
        return 0
    fi
    [ ! -e "$XDIR/crashed" ] || die "node $XNAME crashed; 'hack/node.sh start $XK' starts it again"
    mkdir -p "$XDIR"
    start_extra
    kctl uncordon "$XNAME" >/dev/null 2>&1 || true
    log "node $XNAME up in $((SECONDS - start))s: address $XIP, pods $XRANGE.0/24 (state in $XDIR)"
}

# What a machine failure does to node K: its pods drop off the network, then its kubelet, containerd and every
# container die at once (SIGKILL, no grace, no preStop). Its state stays, so `start K` is a reboot.
cmd_crash() {
    extra_node "$1"
    [ -d "$XDIR" ] || die "node $XNAME is not up"
    local pid
    # Only node K's pods: found through its own shims' processes, never through /run/netns, where node K's mount
    # namespace (a slave of the machine's) also sees node 1's pods' namespaces.
    for pid in $(pod_netns_pids "$XSOCK"); do
        nsenter --net="/proc/$pid/ns/net" ip link set eth0 down 2>/dev/null || true
    done
    for pid in $(recorded_pid "kubelet-$XK") $(recorded_pid "containerd-$XK"); do
        kill -KILL "$pid" 2>/dev/null || true
    done
    for pid in $(pids_of_shims "$XSOCK"); do
        pkill -KILL -P "$pid" 2>/dev/null || true
        kill -KILL "$pid" 2>/dev/null || true
    done
    touch "$XDIR/crashed"
    log "node $XNAME crashed: kubelet, containerd and its containers killed, its pods off the network"
}

cmd_start() {
    local start=$SECONDS
    node_running || die "node 1 is not up"
    extra_node "$1"
    [ -d "$XDIR" ] || die "node $XNAME was never added (hack/node.sh add $XK)"
    start_extra
    log "node $XNAME started again in $((SECONDS - start))s"
}

# Like `down` for node 1: its pods deleted while its kubelet runs, then kubelet and containerd stopped, what they
# left removed (a crashed node's containerd is started once more for that), the Node deleted.
cmd_remove() {
    extra_node "$1"
    if [ ! -d "$XDIR" ]; then
        log "node $XNAME is not up"
        return 0
    fi
    NODE_NAME=$XNAME CTR_SOCK=$XSOCK delete_pods "kubelet-$XK"
    stop_pid "kubelet-$XK" kubelet
    if ! daemon_running "containerd-$XK" && [ -f "$XDIR/containerd/config.toml" ] &&
        nsenter --mount="$XNS" true 2>/dev/null; then
        start_extra_containerd || true
    fi
    CTR_SOCK=$XSOCK NODE=$XDIR remove_containers "containerd-$XK"
    stop_pid "containerd-$XK" containerd
    CTR_SOCK=$XSOCK kill_leftover_shims
    NODE=$XDIR delete_leftover_netns "$XNS"
    remove_mount_namespace
    remove_node_address
    unmount_under "$XDIR"
    if apiserver_reachable; then
        kctl delete node "$XNAME" --wait=false >/dev/null 2>&1 || true
    fi
    [ -z "$(mounts_under "$XDIR")" ] || die "mounts left under $XDIR: $(mounts_under "$XDIR" | tr '\n' ' ')"
    rm -rf "$XDIR"
    log "node $XNAME removed"
}

# --- status ---------------------------------------------------------------------------------------------------------

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

case "${1:-}" in
build) cmd_build ;;
up) cmd_up ;;
down) cmd_down ;;
reclaim) claim_machine nothing ;;
status) cmd_status ;;
import)
    shift
    cmd_import "$@"
    ;;
images) cmd_images ;;
build-image)
    shift
    cmd_build_image "$@"
    ;;
add | crash | start | remove)
    [ $# -eq 2 ] || die "usage: hack/node.sh $1 K (K = 2..$MAX_NODES)"
    "cmd_$1" "$2"
    ;;
*)
    printf 'usage: %s build|up|down|reclaim|status|import FILE...|images|build-image TAG CONTEXT [DOCKERFILE]|%s\n' \
        "$0" 'add K|crash K|start K|remove K' >&2
    exit 2
    ;;
esac
