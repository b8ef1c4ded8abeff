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

# The node's parts, one file per thing it sets up (each says what it holds), in the order they define and run.
# shellcheck source=hack/node/common.sh
. "$ROOT/hack/node/common.sh"
# shellcheck source=hack/node/containerd.sh
. "$ROOT/hack/node/containerd.sh"
# shellcheck source=hack/node/image-store.sh
. "$ROOT/hack/node/image-store.sh"
# shellcheck source=hack/node/machine.sh
. "$ROOT/hack/node/machine.sh"
# shellcheck source=hack/node/network.sh
. "$ROOT/hack/node/network.sh"
# shellcheck source=hack/node/dns.sh
. "$ROOT/hack/node/dns.sh"
# shellcheck source=hack/node/kubelet.sh
. "$ROOT/hack/node/kubelet.sh"
# shellcheck source=hack/node/up.sh
. "$ROOT/hack/node/up.sh"
# shellcheck source=hack/node/down.sh
. "$ROOT/hack/node/down.sh"
# shellcheck source=hack/node/extra-nodes.sh
. "$ROOT/hack/node/extra-nodes.sh"
# shellcheck source=hack/node/status.sh
. "$ROOT/hack/node/status.sh"

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
