#!/usr/bin/env bash
# A real Kubernetes control plane (etcd + kube-apiserver + kube-controller-manager) on loopback, built from the Go
# module proxy at the versions pinned in hack/deps/ (docs/kubernetes.md says which and why).
#
#   hack/control-plane.sh build    build and cache the Kubernetes binaries and etcd (once per version)
#   hack/control-plane.sh up       start etcd, kube-apiserver and kube-controller-manager; write a kubeconfig
#   hack/control-plane.sh down     stop exactly the processes `up` started (by recorded PID) and remove the state
#   hack/control-plane.sh status   say whether it is up and where
#   hack/control-plane.sh bin-dir  print the directory of the cached binaries (kubectl; kube-scheduler and kubelet too
#                                  unless KUBE_BUILD=control-plane built them)
#   hack/control-plane.sh version  print the Kubernetes version KUBE_VERSION selects (e.g. v1.37.2)
#
# A node (kubelet, containerd, pod network and DNS) runs on top of it with hack/node.sh; `down` stops that first.
#
# Environment:
#   KUBE_VERSION           the Kubernetes minor to build and run (default 1.37; one of hack/deps/kube-*)
#   KUBE_BUILD             all (default) or control-plane: `build` makes only what `up` and kubectl need (no
#                          kube-scheduler, no kubelet), as `make test` does for the oldest supported minor
#   SLURMCTL_CLUSTER_DIR   state directory (default: <repo>/.cluster)
#   SLURMCTL_CACHE         binary cache (default: ~/.cache/slurmctl)
#   ETCD_PORT, ETCD_PEER_PORT, APISERVER_PORT   fixed ports (default: free ports picked at start)
#   CONTROL_PLANE_NO_CONTROLLER_MANAGER=1   `up` starts no kube-controller-manager, so a benchmark or test can write
#                          workload status itself without the StatefulSet/Job controllers overwriting it
#   CONTROL_PLANE_CONTROLLER_MANAGER_QPS   kube-controller-manager's client rate (default: its own, 20 a second, burst
#                          30), for the scale benchmark: the StatefulSet controller creates pods at this rate
#   CONTROL_PLANE_NODE_MONITOR_GRACE_PERIOD   how long a node may go without renewing its lease before
#                          kube-controller-manager marks it NotReady (default: its own, 50s), for the scale benchmark:
#                          1,000 simulated nodes on 2 cores renew late under load, and KWOK never re-readies the pods
#                          the NotReady marked not ready (a kubelet would)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=${SLURMCTL_CLUSTER_DIR:-$ROOT/.cluster}
CACHE=${SLURMCTL_CACHE:-$HOME/.cache/slurmctl}
APT_PACKAGES=(openssl curl ca-certificates)
READY_TIMEOUT=${READY_TIMEOUT:-90}

LOG_PREFIX=control-plane
# shellcheck source=hack/lib.sh
. "$ROOT/hack/lib.sh"

# What `up` and the suite's kubectl need, and what a node adds (hack/node.sh): the control-plane suite on the oldest
# minor runs no node, and a build without the kubelet and kube-scheduler costs a third less on a cold machine.
CONTROL_PLANE_BINARIES=(kube-apiserver kube-controller-manager kubectl)
NODE_BINARIES=(kube-scheduler kubelet)
case "${KUBE_BUILD:-all}" in
all) KUBE_BINARIES=("${CONTROL_PLANE_BINARIES[@]}" "${NODE_BINARIES[@]}") ;;
control-plane) KUBE_BINARIES=("${CONTROL_PLANE_BINARIES[@]}") ;;
*) die "KUBE_BUILD=$KUBE_BUILD: not all or control-plane" ;;
esac
ETCD_DEPS=$ROOT/hack/deps/etcd
# The cache key names the version and the patch set: a change to patch_kubelet or the build flags must bump
# PATCHSET, so a machine with binaries built the old way rebuilds instead of running them.
PATCHSET=gomod1

kube_bin_dir() { printf '%s/kube-%s-%s/bin' "$CACHE" "$(kube_version)" "$PATCHSET"; }
etcd_bin_dir() { printf '%s/etcd-%s/bin' "$CACHE" "$(module_version "$ETCD_DEPS" go.etcd.io/etcd/server/v3)"; }

cached_bin_dir() {
    local dir
    dir=$(kube_bin_dir)
    cached_bins "$dir" "${CONTROL_PLANE_BINARIES[@]}" || return 1
    printf '%s' "$dir"
}

# The kubelet patch (../shared/notes/real-node.md): the node IP is 127.0.0.1, so every connection to the kubelet stays
# on loopback, and upstream refuses a loopback node IP. The in-tree cloud credential providers the 1.20 build also
# dropped are gone from Kubernetes since 1.26.
patch_kubelet() {
    local a=$1/pkg/kubelet/kubelet_node_status.go
    perl -0pi -e 's/\n\tif nodeIP\.IsLoopback\(\) \{\n\t\treturn fmt\.Errorf\("nodeIP can.t be loopback address"\)\n\t\}//' "$a"
    ! grep -q "can't be loopback address" "$a" || die "step 'patch-kubelet': loopback check not removed from $a"
}

# k8s.io/kubernetes at the version hack/deps/kube-<minor>/go.mod pins, copied out of the module cache (read-only, and
# `go build -overlay` may not replace files there) so the kubelet can be patched, then built with the version
# stamped in, as upstream's release build does (`kubectl version` and /version report it).
# Each version has its own build cache and logs: `make test` builds the default and the oldest minor side by side.
build_kube() {
    local ver out work logs=$CACHE/logs GO_BUILD_CACHE
    ver=$(kube_version)
    GO_BUILD_CACHE=$CACHE/go/build-kube-$ver
    out=$(kube_bin_dir)
    work=$CACHE/src/kube-$ver
    rm -rf "$work"
    mkdir -p "$work" "$logs"
    cp "$KUBE_DEPS"/go.mod "$KUBE_DEPS"/go.sum "$KUBE_DEPS"/tools.go "$work/"
    run_step kube-download "$logs/kube-$ver-download.log" in_dir "$work" go_env mod download -x
    local src
    src=$(in_dir "$work" go_env list -m -f '{{.Dir}}' k8s.io/kubernetes)
    cp -r "$src" "$work/kubernetes"
    chmod -R u+w "$work/kubernetes"
    patch_kubelet "$work/kubernetes"
    in_dir "$work" go_env mod edit -replace k8s.io/kubernetes=./kubernetes
    local minor=${ver#v1.}
    minor=${minor%%.*}
    local v=k8s.io/component-base/version
    local ldflags="-s -w -X $v.gitVersion=$ver -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
    ldflags+=" -X $v.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    local pkgs=() b
    for b in "${KUBE_BINARIES[@]}"; do
        pkgs+=("k8s.io/kubernetes/cmd/$b")
    done
    mkdir -p "$work/bin"
    run_step kube-build "$logs/kube-$ver-build.log" in_dir "$work" go_env build -trimpath -ldflags "$ldflags" \
        -o "$work/bin/" "${pkgs[@]}"
    mkdir -p "$out"
    for b in "${KUBE_BINARIES[@]}"; do
        cp "$work/bin/$b" "$out/$b"
    done
    rm -rf "$work" "$GO_BUILD_CACHE"
    "$out/kube-apiserver" --version | grep -x "Kubernetes $ver" >/dev/null ||
        die "step 'kube-build': $out/kube-apiserver reports '$("$out/kube-apiserver" --version)', not $ver"
    log "built Kubernetes $ver into $out"
}

# etcd: its server module's replace directives point into its repository, so hack/deps/etcd requires it instead.
# Built once under a lock: every Kubernetes minor's control plane runs it, and `make test` builds two side by side.
build_etcd() {
    local out logs=$CACHE/logs ver lock GO_BUILD_CACHE=$CACHE/go/build-etcd
    out=$(etcd_bin_dir)
    ver=$(module_version "$ETCD_DEPS" go.etcd.io/etcd/server/v3)
    mkdir -p "$logs"
    exec {lock}>"$CACHE/etcd-build.lock"
    flock -w 1200 "$lock" || die "waited 20 minutes for another etcd build ($CACHE/etcd-build.lock)"
    if cached_bins "$out" etcd; then
        log "etcd $ver built meanwhile by another build"
        return 0
    fi
    rm -rf "$out.tmp"
    mkdir -p "$out.tmp"
    run_step etcd-build "$logs/etcd-build.log" in_dir "$ETCD_DEPS" go_env build -trimpath \
        -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$ver" -o "$out.tmp/etcd" go.etcd.io/etcd/server/v3
    rm -rf "$GO_BUILD_CACHE" "$out"
    mv "$out.tmp" "$out"
    log "built etcd $ver into $out"
}

# etcd builds beside Kubernetes (each with a build cache of its own): Kubernetes' module download, which mostly waits
# on the network, then has the CPU etcd leaves.
cmd_build() {
    ensure_apt_packages "${APT_PACKAGES[@]}"
    local etcd=""
    if cached_bins "$(etcd_bin_dir)" etcd; then
        log "cached etcd in $(etcd_bin_dir)"
    else
        build_etcd &
        etcd=$!
    fi
    if cached_bins "$(kube_bin_dir)" "${KUBE_BINARIES[@]}"; then
        log "cached Kubernetes $(kube_version) in $(kube_bin_dir) (nothing to build)"
    else
        build_kube
    fi
    [ -z "$etcd" ] || wait "$etcd" || die "the etcd build failed (log: $CACHE/logs/etcd-build.log)"
}

all_running() {
    [ -d "$STATE/pids" ] || return 1
    local n daemons=(etcd kube-apiserver)
    [ -f "$STATE/no-controller-manager" ] || daemons+=(kube-controller-manager)
    for n in "${daemons[@]}"; do
        pid_alive "$(cat "$STATE/pids/$n" 2>/dev/null)" "$n" || return 1
    done
}

wait_ready() {
    local url=$1 token=$2 start=$SECONDS deadline=$((SECONDS + READY_TIMEOUT)) why
    why="not ready at $url within ${READY_TIMEOUT}s"
    while [ $SECONDS -lt $deadline ]; do
        if curl -fsk --max-time 2 -H "Authorization: Bearer $token" "$url/readyz" >/dev/null 2>&1; then
            return 0
        fi
        pid_alive "$(cat "$STATE/pids/kube-apiserver")" kube-apiserver || {
            why="exited after $((SECONDS - start))s, before it was ready at $url"
            break
        }
        sleep 0.5
    done
    printf 'control-plane: error: kube-apiserver %s; last lines of its log:\n' "$why" >&2
    tail -n 25 "$STATE/logs/kube-apiserver.log" | sed 's/^/    | /' >&2
    if ! running etcd; then
        printf 'control-plane: etcd is not running; last lines of its log:\n' >&2
        tail_log etcd
    fi
    cmd_down >/dev/null 2>&1 || true
    exit 1
}

print_export() {
    printf 'export KUBECONFIG=%s\n' "$STATE/kubeconfig"
}

# The audit log records every request of the operator's ServiceAccounts (names starting slurmctl-) with its full URI,
# query included, and nothing else: the e2e tests read it to prove, from the API server's side, e.g. that the operator
# never lists Secrets without a label selector. Metadata level: no request or response bodies, so no Secret data.
write_audit_policy() {
    cat >"$STATE/audit-policy.yaml" <<'POLICY'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  userGroups: ["system:serviceaccounts:slurmctl-system"]
- level: None
POLICY
}

# --endpoint-reconciler-type none: the API server listens on loopback only, and a current one refuses to publish a
# loopback address as the `kubernetes` Service's endpoints; hack/dns_watcher.py routes that Service to it instead.
start_apiserver() {
    local bin=$1 ETCD_ENDPOINT API_PORT
    # shellcheck disable=SC1091
    . "$STATE/ports.env"
    [ -f "$STATE/audit-policy.yaml" ] || write_audit_policy
    start_bg kube-apiserver "$bin/kube-apiserver" \
        --audit-policy-file "$STATE/audit-policy.yaml" --audit-log-path "$STATE/logs/audit.log" \
        --audit-log-maxsize 100 --audit-log-maxbackup 1 \
        --etcd-servers "$ETCD_ENDPOINT" \
        --secure-port "$API_PORT" --bind-address 127.0.0.1 --advertise-address 127.0.0.1 \
        --endpoint-reconciler-type none \
        --cert-dir "$STATE/certs" \
        --service-account-issuer https://kubernetes.default.svc \
        --service-account-key-file "$STATE/certs/sa.pub" \
        --service-account-signing-key-file "$STATE/certs/sa.key" \
        --token-auth-file "$STATE/certs/tokens.csv" \
        --authorization-mode RBAC --allow-privileged=true \
        --kubelet-preferred-address-types InternalIP \
        --service-cluster-ip-range 10.96.0.0/16
}

# Test aids: stop and start only the apiserver (same port, same etcd) to prove clients survive an apiserver restart.
cmd_stop_apiserver() {
    stop_pid kube-apiserver
    log "kube-apiserver stopped"
}

cmd_start_apiserver() {
    local bin
    bin=$(cached_bin_dir) || die "no control-plane binaries cached in $CACHE"
    pid_alive "$(cat "$STATE/pids/kube-apiserver" 2>/dev/null)" kube-apiserver && { log "kube-apiserver already running"; return 0; }
    start_apiserver "$bin"
    wait_ready "$(cat "$STATE/server")" "$(cut -d, -f1 "$STATE/certs/tokens.csv")"
    log "kube-apiserver started"
}

cmd_up() {
    if all_running; then
        log "already up ($(cat "$STATE/server"))"
        print_export
        return 0
    fi
    [ -d "$STATE/pids" ] && cmd_down >/dev/null 2>&1
    local bin
    bin=$(cached_bin_dir) || die "no control-plane binaries cached in $CACHE; run 'hack/control-plane.sh build' first"
    ensure_apt_packages "${APT_PACKAGES[@]}"
    local etcd
    etcd=$(etcd_bin_dir)/etcd
    [ -x "$etcd" ] || die "no etcd cached in $(dirname "$etcd"); run 'hack/control-plane.sh build' first"
    mkdir -p "$STATE"/{pids,logs,certs,etcd}
    chmod 700 "$STATE"
    local etcd_port peer_port api_port
    rm -f "$STATE/.picked-ports"
    etcd_port=$(pick_port "${ETCD_PORT:-}")
    peer_port=$(pick_port "${ETCD_PEER_PORT:-}")
    api_port=$(pick_port "${APISERVER_PORT:-}")
    local token
    token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
    printf '%s,admin,admin,system:masters\n' "$token" >"$STATE/certs/tokens.csv"
    openssl genrsa -out "$STATE/certs/sa.key" 2048 >/dev/null 2>&1
    openssl rsa -in "$STATE/certs/sa.key" -pubout -out "$STATE/certs/sa.pub" >/dev/null 2>&1
    chmod 600 "$STATE/certs"/*

    start_bg etcd "$etcd" --name default --data-dir "$STATE/etcd" \
        --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
        --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
        --initial-cluster "default=http://127.0.0.1:$peer_port"
    printf 'ETCD_ENDPOINT=http://127.0.0.1:%s\nAPI_PORT=%s\n' "$etcd_port" "$api_port" >"$STATE/ports.env"
    printf 'http://127.0.0.1:%s\n' "$etcd_port" >"$STATE/etcd-endpoint"
    start_apiserver "$bin"
    local server=https://127.0.0.1:$api_port
    printf '%s\n' "$server" >"$STATE/server"
    wait_ready "$server" "$token"

    cat >"$STATE/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: slurmctl-local
  cluster:
    server: $server
    certificate-authority: $STATE/certs/apiserver.crt
contexts:
- name: slurmctl-local
  context: {cluster: slurmctl-local, user: admin}
current-context: slurmctl-local
users:
- name: admin
  user: {token: $token}
EOF
    chmod 600 "$STATE/kubeconfig"
    if [ "${CONTROL_PLANE_NO_CONTROLLER_MANAGER:-}" = 1 ]; then
        touch "$STATE/no-controller-manager"
        log "up without kube-controller-manager: $server (state in $STATE)"
        print_export
        return 0
    fi
    start_bg kube-controller-manager "$bin/kube-controller-manager" \
        --kubeconfig "$STATE/kubeconfig" \
        --service-account-private-key-file "$STATE/certs/sa.key" \
        --root-ca-file "$STATE/certs/apiserver.crt" \
        --leader-elect=false --secure-port 0 \
        --enable-hostpath-provisioner \
        ${CONTROL_PLANE_CONTROLLER_MANAGER_QPS:+--kube-api-qps "$CONTROL_PLANE_CONTROLLER_MANAGER_QPS"} \
        ${CONTROL_PLANE_CONTROLLER_MANAGER_QPS:+--kube-api-burst "$((2 * CONTROL_PLANE_CONTROLLER_MANAGER_QPS))"} \
        ${CONTROL_PLANE_NODE_MONITOR_GRACE_PERIOD:+--node-monitor-grace-period "$CONTROL_PLANE_NODE_MONITOR_GRACE_PERIOD"}
    sleep 0.2
    pid_alive "$(cat "$STATE/pids/kube-controller-manager")" kube-controller-manager || {
        tail -n 25 "$STATE/logs/kube-controller-manager.log" | sed 's/^/    | /' >&2
        cmd_down >/dev/null 2>&1 || true
        die "kube-controller-manager exited at start"
    }
    log "up: $server (state in $STATE)"
    print_export
}

# kube-controller-manager's development hostPath provisioner (`--enable-hostpath-provisioner`, used by the node's
# default StorageClass) creates each volume as /tmp/hostpath_pv/<uuid>; the path is fixed in its source.
hostpath_volumes() {
    [ -f "$STATE/kubeconfig" ] || return 0
    kubectl --kubeconfig "$STATE/kubeconfig" --request-timeout=10s get pv \
        -o jsonpath='{range .items[*]}{.spec.hostPath.path}{"\n"}{end}' 2>/dev/null | grep '^/tmp/hostpath_pv/.' || true
}

cmd_down() {
    [ -d "$STATE" ] || { log "not up"; return 0; }
    # A node started from this state directory (hack/node.sh) goes first: its mounts live under $STATE, and it needs
    # the apiserver to delete its pods.
    if [ -d "$STATE/node" ]; then
        "$ROOT/hack/node.sh" down || die "hack/node.sh down failed; not removing $STATE"
    fi
    local n volumes
    volumes=$(hostpath_volumes)
    for n in kube-controller-manager kube-apiserver etcd; do
        stop_pid "$n"
    done
    # The hostPath provisioner's directories die with the cluster that recorded them (only ours, by PV).
    for n in $volumes; do
        rm -rf "$n"
    done
    rmdir /tmp/hostpath_pv 2>/dev/null || true
    rm -rf "$STATE"
    log "down"
}

cmd_status() {
    if all_running; then
        printf 'up: %s\nkubeconfig: %s\n' "$(cat "$STATE/server")" "$STATE/kubeconfig"
    else
        printf 'down (state directory %s)\n' "$STATE"
        return 1
    fi
}

case "${1:-}" in
build) cmd_build ;;
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
bin-dir) cached_bin_dir || die "no Kubernetes $(kube_version) binaries cached in $CACHE; run 'hack/control-plane.sh build' first" ;;
version) kube_version ;;
stop-apiserver) cmd_stop_apiserver ;;
start-apiserver) cmd_start_apiserver ;;
*)
    printf 'usage: %s build|up|down|status|bin-dir|version|stop-apiserver|start-apiserver\n' "$0" >&2
    exit 2
    ;;
esac
