# shellcheck shell=bash
# Helpers shared by hack/control-plane.sh and hack/node.sh. Source it after setting:
#   LOG_PREFIX   what log/die print in front of each line (e.g. "control-plane")
#   CACHE        the binary/log cache (~/.cache/slurmctl)
#   STATE        the state directory; start_bg/stop_pid keep PIDs in $STATE/pids and logs in $STATE/logs
#
# Under `set -o pipefail`, `cmd | grep -q X` can fail although X was there: grep exits at the first match and cmd,
# still writing, dies of SIGPIPE. These scripts test pipes with `grep X >/dev/null`, which reads everything.

log() { printf '%s: %s\n' "$LOG_PREFIX" "$*" >&2; }
die() {
    printf '%s: error: %s\n' "$LOG_PREFIX" "$*" >&2
    exit 1
}

# run_step NAME LOGFILE CMD...: run a command with its output in LOGFILE; on failure say which step, which command,
# and show the tail of the log, so a user sees why without digging.
run_step() {
    local name=$1 logfile=$2
    shift 2
    log "step '$name': $*"
    mkdir -p "$(dirname "$logfile")"
    if ! "$@" >"$logfile" 2>&1; then
        {
            printf '\n%s: error: step %s failed\n' "$LOG_PREFIX" "'$name'"
            printf '  command: %s\n' "$*"
            printf '  log:     %s\n' "$logfile"
            printf '  last lines of the log:\n'
            tail -n 25 "$logfile" | sed 's/^/    | /'
        } >&2
        exit 1
    fi
}

in_dir() {
    local dir=$1
    shift
    (cd "$dir" && "$@")
}

# ensure_apt_packages PKG...: install what is missing (checked with dpkg, so a warm machine never touches apt).
apt_updated=0
ensure_apt_packages() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep 'install ok installed' >/dev/null || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    mkdir -p "$CACHE/logs"
    # `make test` builds side by side: one apt at a time (DPkg::Lock::Timeout covers dpkg's lock, not the package
    # lists an update rewrites), whoever comes second waits for the first.
    local lock
    exec {lock}>/run/lock/slurmctl-apt.lock
    flock -w 1200 "$lock" || die "waited 20 minutes for another slurmctl script's apt-get (/run/lock/slurmctl-apt.lock)"
    if [ "$apt_updated" = 0 ]; then
        run_step apt-update "$CACHE/logs/apt-update.log" apt-get -o DPkg::Lock::Timeout=300 update
        apt_updated=1
    fi
    run_step apt-install "$CACHE/logs/apt-install.log" \
        env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends \
        "${missing[@]}"
    exec {lock}>&-
}

# --- Go builds of pinned modules (hack/deps/*) ------------------------------------------------------------------------
# Kubernetes, etcd and containerd are built from the Go module proxy with the Go in /usr/local/go, each from a small
# module of ours whose go.mod pins the version and whose go.sum pins every dependency (the go command refuses a
# download that does not match). GOTOOLCHAIN=local: the build never fetches another Go. Module downloads are cached
# under $CACHE/go/mod (a version bump fetches only what changed); the build cache is removed after each build.
# Each build has a build cache of its own (GO_BUILD_CACHE, set local by the build): `make test` builds containerd
# (for the image import) while Kubernetes builds, and removing a shared cache under a running build broke it.
# GO_MOD_MODE=mod lets `go mod tidy` (hack/kube-deps.sh) rewrite go.mod and go.sum; builds never do.
GO=${GO:-/usr/local/go/bin/go}

# The Kubernetes minor every script builds and runs: hack/deps/kube-<minor> pins its exact version.
KUBE_VERSION=${KUBE_VERSION:-1.37}
KUBE_DEPS=$ROOT/hack/deps/kube-$KUBE_VERSION

# kube_version: the exact version KUBE_VERSION selects (v1.37.2).
kube_version() {
    [ -f "$KUBE_DEPS/go.mod" ] ||
        die "KUBE_VERSION=$KUBE_VERSION: no $KUBE_DEPS/go.mod (minors: $(cd "$ROOT/hack/deps" && echo kube-* | sed 's/kube-//g'))"
    module_version "$KUBE_DEPS" k8s.io/kubernetes
}

go_env() {
    [ -x "$GO" ] || die "Go not found at $GO (these machines carry Go 1.26 in /usr/local/go; GO=... overrides)"
    env GOTOOLCHAIN=local GOFLAGS="-mod=${GO_MOD_MODE:-readonly}" GOPATH="$CACHE/go" GOMODCACHE="$CACHE/go/mod" \
        GOCACHE="${GO_BUILD_CACHE:-$CACHE/go/build}" CGO_ENABLED=0 GOPROXY="${GOPROXY:-https://proxy.golang.org}" "$GO" "$@"
}

# module_version DIR MODULE: the version DIR/go.mod requires of MODULE (the one place each version is written).
module_version() {
    awk -v m="$2" '$1 == "require" && $2 == m {print $3; exit} $1 == m && $2 ~ /^v/ {print $2; exit}' "$1/go.mod"
}

# cached_bins DIR NAME...: DIR holds every named executable.
cached_bins() {
    local dir=$1 b
    shift
    for b in "$@"; do
        [ -x "$dir/$b" ] || return 1
    done
}

# A random unused loopback port (pure bash: `cluster-up` must work before Python is installed). A port taken between
# this check and the daemon's bind makes that daemon fail at start, which `up` reports.
# Ports come from below the kernel's ephemeral range: a port there may be the local end of some outgoing connection,
# which a connect test cannot see but which makes bind fail ("address already in use"; seen with etcd). Ports already
# handed out by this script run are skipped too (nothing listens on them yet); callers use `port=$(free_port)`, a
# subshell, so the record is a file.
free_port() {
    local port _ picked=${STATE:?}/.picked-ports lo=32768 hi=60999 base=20000
    mkdir -p "$STATE"
    read -r lo hi </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
    [ "$lo" -gt $((base + 1000)) ] || base=$((hi + 1))
    [ "$base" -lt 65000 ] || die "no port range outside the ephemeral range $lo-$hi"
    local span=$((base < lo ? lo - base : 65535 - base))
    for _ in $(seq 1 100); do
        port=$((base + RANDOM % span))
        grep -qx "$port" "$picked" 2>/dev/null && continue
        port_in_use "$port" || {
            printf '%s\n' "$port" >>"$picked"
            printf '%s' "$port"
            return 0
        }
    done
    die "no free loopback port found"
}

port_in_use() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

pick_port() {
    local want=$1
    if [ -n "$want" ]; then
        port_in_use "$want" && die "port $want on 127.0.0.1 is already in use"
        printf '%s' "$want"
    else
        free_port
    fi
}

# pid_alive PID NAME: a recorded PID counts as ours only while its command line still names what we started (PIDs
# are reused). With PID_MATCH_STATE=1 it must also name our state directory (in its command line, or as
# LOCAL_SLURM_DIR=<state> in its environment for daemons whose arguments cannot), for scripts whose instances run the
# same binaries side by side (hack/local-slurm.sh).
pid_alive() {
    local pid=$1 name=$2 cmdline
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
    cmdline=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || return 1
    [[ $cmdline == *"$name"* ]] || return 1
    [ "${PID_MATCH_STATE:-0}" != 1 ] || [[ $cmdline == *"$STATE"* ]] ||
        tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ" | grep -xF "LOCAL_SLURM_DIR=$STATE" >/dev/null
}

recorded_pid() {
    cat "$STATE/pids/$1" 2>/dev/null || true
}

# running NAME [MATCH]: the daemon recorded under NAME is alive (its command line contains MATCH, default NAME).
running() {
    pid_alive "$(recorded_pid "$1")" "${2:-$1}"
}

# start_bg NAME CMD...: start a daemon in its own session, output in $STATE/logs/NAME.log, PID in $STATE/pids/NAME.
# It returns once the PID has left this shell for setsid (or is gone): until that exec its command line is this
# script's, so a `running`/pid_alive check right after the start, on a loaded machine, called a starting daemon dead
# (CI: "kube-apiserver not ready", with an empty log, a few milliseconds after its start).
start_bg() {
    local name=$1 pid shell exe _
    shift
    mkdir -p "$STATE/pids" "$STATE/logs"
    setsid "$@" >"$STATE/logs/$name.log" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$STATE/pids/$name"
    shell=$(readlink "/proc/$$/exe")
    for _ in $(seq 1 200); do
        exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 0
        [ "$exe" = "$shell" ] || return 0
        sleep 0.05
    done
}

# stop_pid NAME [MATCH]: TERM the recorded daemon, KILL it after 10 s, and forget it.
stop_pid() {
    local n=$1 match=${2:-$1} pid _
    pid=$(recorded_pid "$n")
    if pid_alive "$pid" "$match"; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do
            pid_alive "$pid" "$match" || break
            sleep 0.2
        done
        if pid_alive "$pid" "$match"; then
            kill -KILL "$pid" 2>/dev/null || true
            for _ in $(seq 1 25); do
                pid_alive "$pid" "$match" || break
                sleep 0.2
            done
        fi
        # Its command line goes as it starts exiting, before it has released its memory and ports: wait until only
        # its exit status is left (a big apiserver under load took a moment more; a reused PID costs 5 s at most).
        for _ in $(seq 1 50); do
            pid_exited "$pid" && break
            sleep 0.1
        done
    fi
    rm -f "$STATE/pids/$n"
}

# pid_exited PID: the process is gone, or a zombie (only its exit status is left for its parent).
pid_exited() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    stat=${stat##*) }
    [ "${stat%% *}" = Z ]
}

# tail_log NAME: the last lines of a daemon's log, indented, on stderr.
tail_log() {
    tail -n 25 "$STATE/logs/$1.log" 2>/dev/null | sed 's/^/    | /' >&2 || true
}
