# shellcheck shell=bash
# hack/node.sh's containerd: built once from hack/deps/containerd, its config (a CRI runtime for a kubelet, or a plain
# image store), the registries that all point at a closed port, and the persistent image store with its owner file
# (with_store: the running node's containerd, or a temporary one). Sourced by hack/node.sh; sets no shell options.
# Puts the containerd binaries first in PATH when sourced.

# containerd, its runc shim and ctr, built from hack/deps/containerd (Debian 12's containerd 1.6 predates what
# Kubernetes 1.36+ supports). runc stays Debian's. Every containerd of these scripts runs with CTR_BIN first in PATH,
# where it finds its shim.
# shellcheck disable=SC2153 # ROOT is hack/node.sh's (not a misspelt local)
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

start_containerd() {
    mkdir -p "$NODE/containerd" "$CTR_ROOT"
    registry_hosts "$NODE/containerd/certs.d"
    containerd_config "$NODE/containerd/config.toml" "$NODE/containerd/state" "$CTR_SOCK" cri
    start_bg containerd containerd --config "$NODE/containerd/config.toml"
    printf '%s %s %s\n' "$(recorded_pid containerd)" "$CTR_SOCK" "$STATE" >"$CTR_OWNER"
    wait_containerd containerd "$CTR_SOCK" || die "containerd did not start (log: $STATE/logs/containerd.log)"
}
