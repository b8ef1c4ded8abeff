#!/usr/bin/env bash
# A real Slurm (Debian's 22.05 slurmctld + slurmd + munged) on loopback, with the chroot SPANK plugin loaded, so jobs
# can be tested for real on this machine. Several instances may run at once: each has its own state directory, ports,
# munge socket and key, pid files and spool directories.
#
#   hack/local-slurm.sh deps [build|all]   apt-install what building the plugin (and running the daemons) needs
#   hack/local-slurm.sh up       build the plugin and a busybox jail, write the configs, start munged/slurmctld/slurmd
#   hack/local-slurm.sh down     stop exactly the processes `up` started (by recorded PID) and remove the state
#   hack/local-slurm.sh status   say whether it is up and where
#
# Environment:
#   LOCAL_SLURM_DIR          state directory (default: <repo>/.local-slurm)
#   LOCAL_SLURM_PLUGIN       the SPANK plugin to load (default: native/spank_chroot/chroot.so, built by `up`);
#                            `none` loads no plugin
#   LOCAL_SLURM_JAIL         the jail= argument (default: $LOCAL_SLURM_DIR/jail, the busybox jail `up` builds)
#   LOCAL_SLURM_PLUGIN_ARGS  extra plugin arguments after jail=... (e.g. old_root=.old)
#   LOCAL_SLURM_JAIL_USERS   host users (besides root) copied into the jail's /etc/passwd and /etc/group
#   LOCAL_SLURM_EXTRA_CONF   lines appended to slurm.conf (e.g. GresTypes=gpu)
#   READY_TIMEOUT            seconds to wait for the node to become idle (default: 60)
#
# `up` writes $LOCAL_SLURM_DIR/env (sourceable: SLURM_CONF=...) and prints the matching export lines.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=${LOCAL_SLURM_DIR:-$ROOT/.local-slurm}
PLUGIN_DIR=$ROOT/native/spank_chroot
READY_TIMEOUT=${READY_TIMEOUT:-60}
BUILD_PACKAGES=(gcc libc6-dev make libslurm-dev)
RUN_PACKAGES=(slurmctld slurmd slurm-client munge busybox-static)
DAEMONS=(slurmd slurmctld munged)

log() { printf 'local-slurm: %s\n' "$*" >&2; }
die() { printf 'local-slurm: error: %s\n' "$*" >&2; exit 1; }

# run_step NAME LOGFILE CMD...: run a command with its output in LOGFILE; on failure name the step and show the log.
run_step() {
    local name=$1 logfile=$2
    shift 2
    if ! "$@" >"$logfile" 2>&1; then
        {
            printf 'local-slurm: error: step %s failed\n' "'$name'"
            printf '  command: %s\n' "$*"
            printf '  last lines of %s:\n' "$logfile"
            tail -n 25 "$logfile" | sed 's/^/    | /'
        } >&2
        exit 1
    fi
}

# Another agent may hold the dpkg lock: wait for it rather than fail.
ensure_apt_packages() {
    local missing=() p logdir
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    logdir=$(mktemp -d)
    log "installing ${missing[*]}"
    run_step apt-update "$logdir/apt-update.log" apt-get -o DPkg::Lock::Timeout=300 update
    run_step apt-install "$logdir/apt-install.log" env DEBIAN_FRONTEND=noninteractive \
        apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends "${missing[@]}"
    rm -rf "$logdir"
}

# A random unused loopback port. A port taken between this check and the daemon's bind makes that daemon fail at
# start, which `up` reports.
free_port() {
    local port _
    for _ in $(seq 1 100); do
        port=$((20000 + RANDOM % 40000))
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || { printf '%s' "$port"; return 0; }
    done
    die "no free loopback port found"
}

# A recorded PID counts as ours only while its command line still names the binary and our state directory
# (PIDs are reused, and other instances run the same binaries).
pid_alive() {
    local pid=$1 name=$2 cmdline
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
    cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
    [[ $cmdline == *"$name"* && $cmdline == *"$STATE"* ]]
}

recorded_pid() { cat "$STATE/pids/$1" 2>/dev/null || true; }

all_running() {
    local n
    for n in "${DAEMONS[@]}"; do
        pid_alive "$(recorded_pid "$n")" "$n" || return 1
    done
}

start_bg() {
    local name=$1
    shift
    setsid "$@" >"$STATE/log/$name.out" 2>&1 </dev/null &
    echo $! >"$STATE/pids/$name"
}

stop_pid() {
    local n=$1 pid _
    pid=$(recorded_pid "$n")
    pid_alive "$pid" "$n" || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
        pid_alive "$pid" "$n" || return 0
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
}

# The busybox jail: a shell and coreutils applets, a marker, and passwd/group entries for root and the named users.
build_jail() {
    local jail=$STATE/jail applet u
    rm -rf "$jail"
    mkdir -p "$jail"/{bin,etc,proc,tmp,root,home,data,dev}
    chmod 1777 "$jail/tmp" "$jail/data"
    cp /bin/busybox "$jail/bin/busybox"
    for applet in $("$jail/bin/busybox" --list); do
        [ "$applet" = busybox ] || ln -s busybox "$jail/bin/$applet"
    done
    ln -s bin "$jail/sbin"
    mkdir -p "$jail/usr"
    ln -s ../bin "$jail/usr/bin"
    printf 'slurmctl test jail\n' >"$jail/etc/slurmctl-jail"
    getent passwd root | sed 's#:[^:]*$#:/bin/sh#' >"$jail/etc/passwd"
    getent group root >"$jail/etc/group"
    for u in ${LOCAL_SLURM_JAIL_USERS:-}; do
        getent passwd "$u" >/dev/null || die "LOCAL_SLURM_JAIL_USERS: no user '$u' on this host"
        getent passwd "$u" | sed 's#:[^:]*$#:/bin/sh#' >>"$jail/etc/passwd"
        getent group "$(id -gn "$u")" >>"$jail/etc/group"
        local home
        home=$(getent passwd "$u" | cut -d: -f6)
        mkdir -p "$jail$home"
        chown "$u:$(id -gn "$u")" "$jail$home"
    done
}

write_configs() {
    local ctld_port=$1 slurmd_port=$2 node plugin jail
    node=$(hostname -s)
    plugin=${LOCAL_SLURM_PLUGIN:-$PLUGIN_DIR/chroot.so}
    jail=${LOCAL_SLURM_JAIL:-$STATE/jail}
    # Only the hardware layout of `slurmd -C`: the node's memory may change between runs and a configured
    # RealMemory above the real one would drain the node.
    local hw
    hw=$(slurmd -C | head -n 1 | tr ' ' '\n' | grep -E '^(CPUs|Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore)=' |
        tr '\n' ' ')
    cat >"$STATE/etc/slurm.conf" <<EOF
# Written by hack/local-slurm.sh for a local test instance.
ClusterName=local$(printf '%s' "$STATE" | md5sum | cut -c1-8)
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
AuthInfo=socket=$STATE/munge/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
SlurmdDebug=debug
PlugStackConfig=$STATE/etc/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
PrologFlags=Contain
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MailProg=/bin/true
InactiveLimit=0
KillWait=5
MinJobAge=300
NodeName=$node NodeAddr=127.0.0.1 ${hw}State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
${LOCAL_SLURM_EXTRA_CONF:-}
EOF
    if [ "$plugin" = none ]; then
        : >"$STATE/etc/plugstack.conf"
    else
        printf 'required %s jail=%s %s\n' "$plugin" "$jail" "${LOCAL_SLURM_PLUGIN_ARGS:-}" >"$STATE/etc/plugstack.conf"
    fi
    printf 'SLURM_CONF=%s\nLOCAL_SLURM_NODE=%s\nLOCAL_SLURM_JAIL=%s\n' "$STATE/etc/slurm.conf" "$node" "$jail" \
        >"$STATE/env"
}

print_export() {
    sed 's/^/export /' "$STATE/env"
}

scontrol_() { SLURM_CONF=$STATE/etc/slurm.conf scontrol "$@"; }

show_logs_and_fail() {
    local msg=$1 n
    {
        printf 'local-slurm: error: %s\n' "$msg"
        for n in munged slurmctld slurmd; do
            local f=$STATE/log/$n.log
            [ -s "$f" ] || f=$STATE/log/$n.out
            printf '  last lines of %s:\n' "$f"
            tail -n 15 "$f" 2>/dev/null | sed 's/^/    | /'
        done
    } >&2
    cmd_down >/dev/null 2>&1 || true
    exit 1
}

wait_for() {
    local what=$1 deadline=$((SECONDS + READY_TIMEOUT))
    shift
    until "$@" >/dev/null 2>&1; do
        local n
        for n in "${DAEMONS[@]}"; do
            [ -f "$STATE/pids/$n" ] || continue
            pid_alive "$(recorded_pid "$n")" "$n" || show_logs_and_fail "$n exited while waiting for $what"
        done
        [ $SECONDS -lt $deadline ] || show_logs_and_fail "timed out after ${READY_TIMEOUT}s waiting for $what"
        sleep 0.2
    done
}

node_idle() {
    scontrol_ show node "$(hostname -s)" | grep -Eq 'State=IDLE( |$)'
}

cmd_deps() {
    case $1 in
    build) ensure_apt_packages "${BUILD_PACKAGES[@]}" ;;
    all) ensure_apt_packages "${BUILD_PACKAGES[@]}" "${RUN_PACKAGES[@]}" ;;
    *) die "deps: unknown set '$1' (build or all)" ;;
    esac
}

cmd_up() {
    if all_running; then
        log "already up (state in $STATE)"
        print_export
        return 0
    fi
    [ -d "$STATE/pids" ] && cmd_down >/dev/null 2>&1
    cmd_deps all
    mkdir -p "$STATE"/{pids,log,run,etc,munge,ctld,spool}
    chmod 700 "$STATE" "$STATE/munge"
    if [ -z "${LOCAL_SLURM_PLUGIN:-}" ]; then
        run_step build-plugin "$STATE/log/build-plugin.log" make -C "$PLUGIN_DIR"
    fi
    build_jail

    dd if=/dev/urandom of="$STATE/munge/munge.key" bs=1024 count=1 status=none
    chmod 400 "$STATE/munge/munge.key"
    local ctld_port slurmd_port
    ctld_port=$(free_port)
    slurmd_port=$(free_port)
    [ "$ctld_port" != "$slurmd_port" ] || slurmd_port=$(free_port)
    write_configs "$ctld_port" "$slurmd_port"

    # --force: the state directory may sit under a world-writable /tmp, which munged's path checks reject.
    start_bg munged munged --foreground --force --socket "$STATE/munge/munge.socket" \
        --key-file "$STATE/munge/munge.key" --pid-file "$STATE/munge/munged.pid" \
        --log-file "$STATE/log/munged.log" --seed-file "$STATE/munge/munged.seed"
    wait_for "munged's socket" test -S "$STATE/munge/munge.socket"
    start_bg slurmctld slurmctld -D -i -f "$STATE/etc/slurm.conf"
    wait_for "slurmctld to answer" scontrol_ ping
    start_bg slurmd slurmd -D -f "$STATE/etc/slurm.conf"
    wait_for "node $(hostname -s) to be idle" node_idle
    log "up: slurmctld 127.0.0.1:$ctld_port, slurmd 127.0.0.1:$slurmd_port (state in $STATE)"
    print_export
}

cmd_down() {
    [ -d "$STATE" ] || { log "not up"; return 0; }
    local n
    for n in "${DAEMONS[@]}"; do
        stop_pid "$n"
    done
    # Steps still running under the slurmstepds this slurmd started hold files in the state directory.
    rm -rf "$STATE" 2>/dev/null || rm -rf "$STATE"
    log "down"
}

cmd_status() {
    if all_running; then
        printf 'up: state %s\nnode: %s\n' "$STATE" "$(hostname -s)"
        scontrol_ show node "$(hostname -s)" | grep -E '^\s*State=' | sed 's/^\s*/node /'
    else
        printf 'down (state directory %s)\n' "$STATE"
        return 1
    fi
}

case "${1:-}" in
deps) cmd_deps "${2:-all}" ;;
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
*)
    printf 'usage: %s deps|up|down|status\n' "$0" >&2
    exit 2
    ;;
esac
