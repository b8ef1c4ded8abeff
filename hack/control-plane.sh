#!/usr/bin/env bash
# A real Kubernetes control plane (etcd + kube-apiserver + kube-controller-manager) on loopback, built offline from
# Debian's `kubernetes` source package. See ../shared/notes/control-plane.md for why each step is here.
#
#   hack/control-plane.sh build    apt-install deps, fetch the source package, patch reflect2, build, cache the binaries
#   hack/control-plane.sh up       start etcd, kube-apiserver and kube-controller-manager; write a kubeconfig
#   hack/control-plane.sh down     stop exactly the processes `up` started (by recorded PID) and remove the state
#   hack/control-plane.sh status   say whether it is up and where
#   hack/control-plane.sh bin-dir  print the directory of the cached binaries (kube-scheduler and kubelet included)
#
# A node (kubelet, containerd, pod network and DNS) runs on top of it with hack/node.sh; `down` stops that first.
#
# Environment:
#   SLURMCTL_CLUSTER_DIR   state directory (default: <repo>/.cluster)
#   SLURMCTL_CACHE         binary cache (default: ~/.cache/slurmctl)
#   KUBE_SRC_PACKAGE       Debian source package to build (default: kubernetes)
#   ETCD_PORT, ETCD_PEER_PORT, APISERVER_PORT   fixed ports (default: free ports picked at start)
#   CONTROL_PLANE_NO_CONTROLLER_MANAGER=1   `up` starts no kube-controller-manager, so a benchmark or test can write
#                          workload status itself without the StatefulSet/Job controllers overwriting it
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=${SLURMCTL_CLUSTER_DIR:-$ROOT/.cluster}
CACHE=${SLURMCTL_CACHE:-$HOME/.cache/slurmctl}
KUBE_SRC_PACKAGE=${KUBE_SRC_PACKAGE:-kubernetes}
APT_PACKAGES=(golang-go etcd-server rsync golang-github-modern-go-reflect2-dev openssl curl make ca-certificates)
READY_TIMEOUT=${READY_TIMEOUT:-90}

LOG_PREFIX=control-plane
# shellcheck source=hack/lib.sh
. "$ROOT/hack/lib.sh"

# The cache key names the source version and the patch set: a change to the patches below must bump PATCHSET, so a
# machine with binaries from older patches rebuilds instead of running them.
PATCHSET=node1
KUBE_BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet)
bin_dir_for() { printf '%s/kube-%s-%s/bin' "$CACHE" "$1" "$PATCHSET"; }

cached_bin_dir() {
    local ver
    [ -f "$CACHE/kube-version" ] || return 1
    ver=$(cat "$CACHE/kube-version")
    local dir
    dir=$(bin_dir_for "$ver")
    local b
    for b in "${KUBE_BINARIES[@]}"; do
        [ -x "$dir/$b" ] || return 1
    done
    printf '%s' "$dir"
}

# The deb-src entry mirrors the system's own archive and keyring, but lives in a private file and list directory so
# the system's apt configuration is never changed.
write_src_list() {
    local out=$1 uri keyring
    uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    keyring=$(awk '/^Signed-By:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    [ -n "$uri" ] || uri=http://deb.debian.org/debian
    [ -n "$keyring" ] || keyring=/usr/share/keyrings/debian-archive-keyring.gpg
    cat >"$out" <<EOF
Types: deb-src
URIs: $uri
Suites: bookworm
Components: main
Signed-By: $keyring
EOF
}

cmd_build() {
    local dir
    ensure_apt_packages "${APT_PACKAGES[@]}"
    if dir=$(cached_bin_dir) && [ "$KUBE_SRC_PACKAGE" = kubernetes ]; then
        log "cached binaries in $dir (nothing to build)"
        return 0
    fi
    local work=$CACHE/src logs=$CACHE/logs
    rm -rf "$work"
    mkdir -p "$work/lists/partial" "$logs"
    write_src_list "$work/src.sources"
    local aptopts=(-o "Dir::Etc::SourceList=$work/src.sources" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$work/lists")
    run_step fetch-index "$logs/fetch-index.log" apt-get "${aptopts[@]}" update
    run_step fetch-source "$logs/fetch-source.log" in_dir "$work" apt-get "${aptopts[@]}" source --download-only \
        "$KUBE_SRC_PACKAGE"
    local dsc ver orig
    dsc=$(find "$work" -maxdepth 1 -name '*.dsc' | head -n 1)
    [ -n "$dsc" ] || die "step 'fetch-source': no .dsc downloaded into $work"
    ver=$(awk '/^Version:/ {print $2; exit}' "$dsc")
    orig=$(find "$work" -maxdepth 1 -name '*.orig.tar.*' | head -n 1)
    log "source package $KUBE_SRC_PACKAGE version $ver"
    mkdir -p "$work/tree"
    run_step unpack "$logs/unpack.log" tar -xf "$orig" -C "$work/tree" --strip-components=1
    # reflect2 1.0.1 crashes the apiserver under Go >= 1.18 the first time a custom resource is written.
    local vend=$work/tree/vendor/github.com/modern-go/reflect2 fixed=/usr/share/gocode/src/github.com/modern-go/reflect2
    [ -d "$vend" ] || die "step 'patch-reflect2': $vend not found in the source tree"
    [ -d "$fixed" ] || die "step 'patch-reflect2': $fixed not found (package golang-github-modern-go-reflect2-dev)"
    find "$vend" -maxdepth 1 \( -name '*.go' -o -name '*.s' \) -delete
    cp "$fixed"/*.go "$vend"/
    cp "$fixed"/*.s "$vend"/ 2>/dev/null || true
    patch_kubelet "$work/tree"
    mkdir -p "$work/tree/.go/src/k8s.io"
    ln -sfn ../../.. "$work/tree/.go/src/k8s.io/kubernetes"
    run_step go-build "$logs/go-build.log" in_dir "$work/tree" env GOPATH="$work/tree/.go" CGO_ENABLED=0 \
        GOCACHE="$CACHE/gocache" make WHAT="cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler cmd/kubelet"
    local out
    out=$(bin_dir_for "$ver")
    mkdir -p "$out"
    local b
    for b in "${KUBE_BINARIES[@]}"; do
        local f
        f=$(find "$work/tree/_output" -type f -name "$b" -perm -u+x | head -n 1)
        [ -n "$f" ] || die "step 'install': $b was not produced (see $logs/go-build.log)"
        cp "$f" "$out/$b"
    done
    printf '%s\n' "$ver" >"$CACHE/kube-version"
    rm -rf "$work" "$CACHE/gocache"
    log "built $out"
}

# Two kubelet patches (../shared/notes/real-node.md): A lets the node IP be 127.0.0.1, so every connection to the
# kubelet stays on loopback; B drops the in-tree cloud credential providers, which query cloud metadata addresses.
patch_kubelet() {
    local tree=$1
    local a=$tree/pkg/kubelet/kubelet_node_status.go b=$tree/cmd/kubelet/app/plugins.go
    perl -0pi -e 's/\n\tif nodeIP\.IsLoopback\(\) \{\n\t\treturn fmt\.Errorf\("nodeIP can.t be loopback address"\)\n\t\}//' "$a"
    ! grep -q "can't be loopback address" "$a" || die "step 'patch-kubelet': loopback check not removed from $a"
    sed -i -E '/_ "k8s\.io\/kubernetes\/pkg\/credentialprovider\/(aws|azure|gcp)"/d' "$b"
    ! grep -qE 'credentialprovider/(aws|azure|gcp)"' "$b" || die "step 'patch-kubelet': credential providers left in $b"
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
    local url=$1 token=$2 deadline=$((SECONDS + READY_TIMEOUT))
    while [ $SECONDS -lt $deadline ]; do
        if curl -fsk --max-time 2 -H "Authorization: Bearer $token" "$url/readyz" >/dev/null 2>&1; then
            return 0
        fi
        pid_alive "$(cat "$STATE/pids/kube-apiserver")" kube-apiserver || break
        sleep 0.5
    done
    printf 'control-plane: error: kube-apiserver not ready at %s within %ss; last lines of its log:\n' \
        "$url" "$READY_TIMEOUT" >&2
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

start_apiserver() {
    local bin=$1 ETCD_ENDPOINT API_PORT
    # shellcheck disable=SC1091
    . "$STATE/ports.env"
    [ -f "$STATE/audit-policy.yaml" ] || write_audit_policy
    start_bg kube-apiserver "$bin/kube-apiserver" \
        --audit-policy-file "$STATE/audit-policy.yaml" --audit-log-path "$STATE/logs/audit.log" \
        --audit-log-maxsize 100 --audit-log-maxbackup 1 \
        --etcd-servers "$ETCD_ENDPOINT" \
        --secure-port "$API_PORT" --insecure-port 0 --bind-address 127.0.0.1 --advertise-address 127.0.0.1 \
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
    ensure_apt_packages etcd-server openssl curl
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

    start_bg etcd etcd --name default --data-dir "$STATE/etcd" \
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
        --leader-elect=false --port 0 --secure-port 0 \
        --enable-hostpath-provisioner
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
bin-dir) cached_bin_dir || die "no binaries cached in $CACHE; run 'hack/control-plane.sh build' first" ;;
stop-apiserver) cmd_stop_apiserver ;;
start-apiserver) cmd_start_apiserver ;;
*)
    printf 'usage: %s build|up|down|status|bin-dir|stop-apiserver|start-apiserver\n' "$0" >&2
    exit 2
    ;;
esac
