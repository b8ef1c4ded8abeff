#!/usr/bin/env bash
# A real Kubernetes node on this machine, on top of hack/control-plane.sh: containerd + runc, a CNI bridge, pod DNS
# (dnsmasq fed by hack/dns_watcher.py), kube-scheduler and a kubelet built from the same source tree as the apiserver.
# See ../shared/notes/real-node.md. Nothing leaves loopback and our own network namespaces: the node IP is 127.0.0.1,
# pods get no default route and a resolver that never forwards, containerd never pulls.
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
#   SLURMCTL_NODE_BRIDGE, SLURMCTL_NODE_DNS_NS  the bridge and DNS namespace names (default slurmctl0, slurmctl-dns):
#                          the tests of `reclaim` use their own, beside a running node
#
# Machine-wide: the bridge slurmctl0 (10.244.0.0/24, no gateway in pods), the DNS namespace slurmctl-dns (10.244.0.2)
# and the containerd store are one per machine, so one node runs at a time; a second `up` from another state
# directory fails and says which one owns them, unless that node was abandoned (`reclaim`).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=${SLURMCTL_CLUSTER_DIR:-$ROOT/.cluster}
CACHE=${SLURMCTL_CACHE:-$HOME/.cache/slurmctl}
VENV=${SLURMCTL_VENV:-$ROOT/.venv}
NODE_READY_TIMEOUT=${NODE_READY_TIMEOUT:-120}
LOG_PREFIX=node
# shellcheck source=hack/lib.sh
. "$ROOT/hack/lib.sh"

NODE=$STATE/node
NODE_NAME=slurmctl-node
BRIDGE=${SLURMCTL_NODE_BRIDGE:-slurmctl0}
NET=10.244.0
DNS_NS=${SLURMCTL_NODE_DNS_NS:-slurmctl-dns}
DNS_VETH=${DNS_NS}0
DNS_IP=$NET.2
CTR_DIR=${SLURMCTL_CONTAINERD_DIR:-$CACHE/containerd}
CTR_ROOT=$CTR_DIR/root
CTR_OWNER=$CTR_DIR/owner
CTR_SOCK=$NODE/containerd/containerd.sock
PAUSE_IMAGE=k8s.gcr.io/pause:3.2
REGISTRY_HOSTS=(_default docker.io ghcr.io registry.k8s.io k8s.gcr.io gcr.io quay.io)
NODE_PACKAGES=(containerd runc buildah containernetworking-plugins dnsmasq-base iptables iproute2 gcc libc6-dev
    busybox-static)
# Daemons in start order; `down` stops them in reverse (kubelet first, containerd last).
DAEMONS=(containerd dnsmasq dns-watcher kube-scheduler kubelet)
BUILDAH=(buildah --root "$CACHE/buildah/root" --runroot "$CACHE/buildah/runroot" --storage-driver vfs)

# What each daemon's command line contains (pid_alive checks /proc/PID/cmdline for it).
match_of() {
    case $1 in
    dns-watcher) printf 'dns_watcher.py' ;;
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

kctl() {
    kubectl --kubeconfig "$STATE/kubeconfig" --request-timeout=10s "$@"
}

apiserver_reachable() {
    [ -f "$STATE/kubeconfig" ] && kctl get --raw /readyz >/dev/null 2>&1
}

# --- containerd -----------------------------------------------------------------------------------------------------

# ctr_at SOCKET ARGS...: ctr against a containerd, in the CRI's namespace.
ctr_at() {
    local sock=$1
    shift
    ctr --address "$sock" --timeout 60s -n k8s.io "$@"
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
    [ "$cri" = cri ] || disabled="$disabled, \"io.containerd.grpc.v1.cri\""
    cat >"$file" <<EOF
version = 2
root = "$CTR_ROOT"
state = "$state"
disabled_plugins = [$disabled]

[grpc]
  address = "$sock"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "$CTR_DIR/opt"
EOF
    [ "$cri" = cri ] || return 0
    cat >>"$file" <<EOF

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  disable_apparmor = true
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$NODE/containerd/runc"

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$NODE/cni/net.d"
    max_conf_num = 1

  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$NODE/containerd/certs.d"
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
    ensure_apt_packages containerd runc
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
}

cmd_images() {
    with_store list_images
}

# build_image TAG CONTEXT [DOCKERFILE]: buildah build (never pulls) and import into the store.
build_image() {
    local tag=$1 context=$2 dockerfile=${3:-$2/Dockerfile}
    ensure_apt_packages buildah containerd runc
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
    if [ -n "${STORE_SOCK:-}" ] && ctr_at "$STORE_SOCK" images ls -q "name==$PAUSE_IMAGE" | grep -q .; then
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
    list_images | grep -qx "$PAUSE_IMAGE"
}

cmd_build() {
    "$ROOT/hack/control-plane.sh" build
    ensure_apt_packages "${NODE_PACKAGES[@]}"
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
    ip addr replace "$NET.1/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    if [ ! -e "/run/netns/$DNS_NS" ]; then
        ip netns add "$DNS_NS"
        ip link add "$DNS_VETH" type veth peer name eth0 netns "$DNS_NS"
        ip link set "$DNS_VETH" master "$BRIDGE" up
        ip -n "$DNS_NS" addr add "$DNS_IP/24" dev eth0
        ip -n "$DNS_NS" link set eth0 up
        ip -n "$DNS_NS" link set lo up
    fi
    mkdir -p "$NODE/cni/net.d" "$NODE/cni/ipam"
    # No gateway, no masquerade, no default route: pods reach each other and the DNS namespace, nothing else.
    cat >"$NODE/cni/net.d/10-slurmctl.conflist" <<EOF
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
        "dataDir": "$NODE/cni/ipam",
        "ranges": [[{"subnet": "$NET.0/24", "rangeStart": "$NET.10", "rangeEnd": "$NET.250", "gateway": "$NET.1"}]]
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
    start_bg dns-watcher "$VENV/bin/python" "$ROOT/hack/dns_watcher.py" --kubeconfig "$STATE/kubeconfig" \
        --hosts-dir "$NODE/dns/hosts" --work-dir "$NODE/dns"
}

start_scheduler() {
    local bin=$1 port
    port=$(free_port)
    start_bg kube-scheduler "$bin/kube-scheduler" --kubeconfig "$STATE/kubeconfig" \
        --authentication-kubeconfig "$STATE/kubeconfig" --authorization-kubeconfig "$STATE/kubeconfig" \
        --leader-elect=false --port=0 --bind-address=127.0.0.1 --secure-port="$port"
}

start_kubelet() {
    local bin=$1 port healthz
    port=$(free_port)
    healthz=$(free_port)
    mkdir -p "$NODE/kubelet" "$NODE/kubelet-certs" "$NODE/kubelet-plugins"
    # No cloud metadata lookups (the binary has no cloud credential providers either, patch B in control-plane.sh).
    start_bg kubelet env AWS_EC2_METADATA_DISABLED=true "$bin/kubelet" \
        --kubeconfig "$STATE/kubeconfig" \
        --container-runtime=remote --container-runtime-endpoint="unix://$CTR_SOCK" \
        --image-service-endpoint="unix://$CTR_SOCK" --runtime-request-timeout=5m \
        --root-dir="$NODE/kubelet" --cert-dir="$NODE/kubelet-certs" --volume-plugin-dir="$NODE/kubelet-plugins" \
        --hostname-override="$NODE_NAME" --node-ip=127.0.0.1 --address=127.0.0.1 --port="$port" \
        --read-only-port=0 --healthz-bind-address=127.0.0.1 --healthz-port="$healthz" \
        --fail-swap-on=false --cgroup-driver=cgroupfs --cgroups-per-qos=false --enforce-node-allocatable= \
        --cluster-dns="$DNS_IP" --cluster-domain=cluster.local --resolv-conf="$NODE/resolv.conf" \
        --make-iptables-util-chains=false --node-status-update-frequency=2s --containerd="$CTR_SOCK" \
        --eviction-hard= --image-gc-high-threshold=100 --anonymous-auth=true --authorization-mode=AlwaysAllow
}

node_ready() {
    [ "$(kctl get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

wait_node_ready() {
    local deadline=$((SECONDS + NODE_READY_TIMEOUT)) d
    while [ $SECONDS -lt $deadline ]; do
        node_ready && return 0
        for d in "${DAEMONS[@]}"; do
            daemon_running "$d" || {
                tail_log "$d"
                die "$d exited while the node was starting (log: $STATE/logs/$d.log)"
            }
        done
        sleep 0.5
    done
    tail_log kubelet
    die "node $NODE_NAME not Ready within ${NODE_READY_TIMEOUT}s (log: $STATE/logs/kubelet.log)"
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
    if node_running; then
        log "already up (node $NODE_NAME, state in $NODE)"
        return 0
    fi
    check_machine_free
    "$ROOT/hack/control-plane.sh" status >/dev/null 2>&1 ||
        die "the control plane in $STATE is not up; run 'hack/control-plane.sh up' first (same SLURMCTL_CLUSTER_DIR)"
    [ -f "$STATE/no-controller-manager" ] &&
        die "the control plane in $STATE runs without kube-controller-manager; a node needs it"
    local bin
    bin=$(kube_bin_dir) || die "no kubelet/kube-scheduler cached in $CACHE; run 'hack/node.sh build' first"
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
    up_done=1
    log "up in $((SECONDS - start))s: node $NODE_NAME Ready, pod network $NET.0/24 on $BRIDGE, DNS $DNS_IP (state in $NODE)"
}

# --- down -----------------------------------------------------------------------------------------------------------

# Pods go first, while the kubelet still runs, so it stops their sandboxes and tears down their networks itself.
delete_pods() {
    apiserver_reachable || return 0
    daemon_running kubelet || return 0
    kctl get node "$NODE_NAME" >/dev/null 2>&1 || return 0
    kctl cordon "$NODE_NAME" >/dev/null 2>&1 || true
    kctl delete pods -A --field-selector "spec.nodeName=$NODE_NAME" --grace-period=2 --wait=false >/dev/null 2>&1 ||
        true
    # Done when the kubelet has stopped every sandbox (which tears down its network); the API objects go later, after
    # volume cleanup, which the kubelet need not finish: what it leaves is unmounted below.
    local deadline=$((SECONDS + 45))
    while [ $SECONDS -lt $deadline ]; do
        ctr_at "$CTR_SOCK" tasks ls 2>/dev/null | grep -q RUNNING || return 0
        sleep 0.3
    done
    log "some pods were still running after 45s; removing their containers directly"
}

# Whatever the kubelet left in containerd (it was killed, or the apiserver was gone): kill the tasks, remember their
# network namespaces, delete the containers.
remove_containers() {
    daemon_running containerd || return 0
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
    local p
    for p in /proc/[0-9]*; do
        [ -r "$p/cmdline" ] || continue
        if tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF -- "-address $CTR_SOCK"; then
            kill -KILL "${p#/proc/}" 2>/dev/null || true
        fi
    done
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

delete_leftover_netns() {
    local ns
    [ -f "$NODE/leftover-netns" ] || return 0
    while read -r ns; do
        [ -e "$ns" ] || continue
        ip netns delete "$(basename "$ns")" 2>/dev/null || { umount "$ns" 2>/dev/null && rm -f "$ns"; } || true
    done < <(sort -u "$NODE/leftover-netns")
}

cmd_down() {
    if [ ! -d "$NODE" ]; then
        log "not up"
        return 0
    fi
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
        printf '%-15s %s %s.1/24\n' bridge "$BRIDGE" "$NET"
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
*)
    printf 'usage: %s build|up|down|reclaim|status|import FILE...|images|build-image TAG CONTEXT [DOCKERFILE]\n' "$0" >&2
    exit 2
    ;;
esac
