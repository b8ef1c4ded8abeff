# shellcheck shell=bash
# hack/node.sh's helpers used by every part of the node: which process is which daemon (node 1's and node K's), whether
# node 1 runs, the cached kube binaries and the cluster's own kubectl. Sourced by hack/node.sh after its settings and
# hack/lib.sh; it sets no shell options (node.sh's `set -euo pipefail` holds).

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
