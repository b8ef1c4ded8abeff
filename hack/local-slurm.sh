#!/usr/bin/env bash
# A real Slurm 24.11 (Debian 13 trixie's slurmctld + slurmd + munged; SLURM_LINE=26.05: Debian testing's 26.05) on
# loopback, with the chroot SPANK plugin
# loaded, so jobs can be tested for real on this Debian 12 machine (whose own Slurm, 22.05, is out of support and is
# not used). The daemons, the clients and the plugin's compiler all run inside a trixie root filesystem that
# mmdebstrap builds once and caches under ~/.cache/slurmctl/slurm-rootfs/<key> (the key is a hash of the suite, the
# mirror and the package list). Several instances may run at once: each has its own state directory, ports, mount
# namespace (with a private /run and /etc/slurm), munge key, pid files and spool directories.
#
#   hack/local-slurm.sh deps          apt-install the host tools this needs (mmdebstrap; unshare/nsenter are util-linux)
#   hack/local-slurm.sh rootfs        build the Slurm root filesystem once, print its path
#   hack/local-slurm.sh plugin        compile native/spank_chroot's plugins inside it, against its Slurm's headers
#   hack/local-slurm.sh include-dir   print a directory whose slurm/ holds those headers (for linters on the host)
#   hack/local-slurm.sh run [--user U] [--fresh] -- CMD...
#                                     run CMD inside the root filesystem: in the instance's namespace when the
#                                     instance in LOCAL_SLURM_DIR is up (so clients reach it), else (or with
#                                     --fresh) in a new one; --user runs it as U (runuser), e.g. `srun` as a job's
#                                     owner (srun has no --uid since Slurm 23.02)
#   hack/local-slurm.sh up       build what is missing, write the configs, start munged/slurmctld/slurmd
#   hack/local-slurm.sh down     stop exactly the processes `up` started (by recorded PID) and remove the state
#   hack/local-slurm.sh status   say whether it is up and where
#
# Inside the root filesystem these host paths are visible at the same path: /tmp, the repository, the state
# directory, the jail, /proc, /sys, /dev and /etc/hosts. With the plugin loaded, `up` completes the jail it built with
# the images' own complement-jail (what slurmstepd needs inside it: SlurmdSpoolDir, the munge socket, configs, /dev,
# /sys, /proc), as the worker containers do. An instance also gets a private tmpfs /run (munge's socket),
# /etc/slurm (= $LOCAL_SLURM_DIR/etc: slurm.conf, cgroup.conf, plugstack.conf) and /etc/passwd + /etc/group with the
# LOCAL_SLURM_JAIL_USERS added, so a non-root user can reach munge and read slurm.conf. The rest of the root
# filesystem is read-only there.
#
# Environment:
#   SLURM_LINE               24.11 (default: Debian trixie's root filesystem) or 26.05 (Debian testing, forky)
#   LOCAL_SLURM_DIR          state directory (default: <repo>/.local-slurm)
#   LOCAL_SLURM_PLUGIN       the SPANK plugin to load (default: native/spank_chroot/chroot.so, built by `up`);
#                            `none` loads no plugin
#   LOCAL_SLURM_JAIL         the jail= argument (default: $LOCAL_SLURM_DIR/jail, the busybox jail `up` builds)
#   LOCAL_SLURM_PLUGIN_ARGS  extra plugin arguments after jail=... (e.g. old_root=.old)
#   LOCAL_SLURM_JOB_CONTAINER  1 (default): JobContainerType=job_container/jail (native/spank_chroot), as on the
#                            workers: what Slurm starts for a job outside a step (sbcast) enters the jail too; 0: none
#   LOCAL_SLURM_JAIL_USERS   host users (besides root) known to the daemons and copied into the jail's /etc/passwd
#   LOCAL_SLURM_EXTRA_CONF   lines appended to slurm.conf (e.g. GresTypes=gpu)
#   LOCAL_SLURM_PROCTRACK    ProctrackType (default: proctrack/linuxproc)
#   LOCAL_SLURM_TASK_PLUGIN  TaskPlugin (default: task/none)
#   LOCAL_SLURM_CGROUP_CONF  the contents of cgroup.conf (default: CgroupPlugin=autodetect, IgnoreSystemd=yes)
#   LOCAL_SLURM_CACHE        where root filesystems are cached (default: ~/.cache/slurmctl/slurm-rootfs)
#   LOCAL_SLURM_MIRROR       Debian mirror (default: the first URIs: of /etc/apt/sources.list.d/debian.sources)
#   LOCAL_SLURM_REST         1: also run slurmrestd with JWT authentication (AuthAltTypes=auth/jwt, a fresh HS256 key
#                            in $LOCAL_SLURM_DIR/jwt/jwt_hs256.key, `-a rest_auth/jwt`) on a free loopback port, as
#                            user nobody; `env` then holds SLURMRESTD_URL and LOCAL_SLURM_JWT_KEY
#   READY_TIMEOUT            seconds to wait for the node to become idle (default: 60)
#
# `up` writes $LOCAL_SLURM_DIR/env (sourceable: SLURM_CONF=... as seen inside the namespace) and prints it.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SELF=$ROOT/hack/local-slurm.sh
STATE=${LOCAL_SLURM_DIR:-$ROOT/.local-slurm}
PLUGIN_DIR=$ROOT/native/spank_chroot
READY_TIMEOUT=${READY_TIMEOUT:-60}
HOST_PACKAGES=(mmdebstrap util-linux)
# The Slurm line, one setting: 24.11 (default) is Debian 13 trixie's slurm-wlm 24.11.5; 26.05 is Debian testing's
# (forky; 26.05.5 when this was written). The suite is part of the root filesystem's cache key, so the lines never
# share a tree. testing's Release file carries a Valid-Until that a mirror snapshot may have passed: apt is told
# not to check it for that line only (trixie's stable Release has none).
# An instance keeps the line it was started with (`run` and `down` for it need no SLURM_LINE).
if [ -z "${SLURM_LINE:-}" ] && [ -f "$STATE/slurm-line" ]; then
    SLURM_LINE=$(cat "$STATE/slurm-line")
fi
SLURM_LINE=${SLURM_LINE:-24.11}
MMDEBSTRAP_APTOPTS=()
case $SLURM_LINE in
24.11) SUITE=trixie ;;
26.05)
    SUITE=forky
    MMDEBSTRAP_APTOPTS=(--aptopt='Acquire::Check-Valid-Until "false"')
    ;;
*)
    printf 'local-slurm: error: SLURM_LINE=%s: must be 24.11 or 26.05\n' "$SLURM_LINE" >&2
    exit 2
    ;;
esac
# Slurm and munge; the plugin's toolchain (gcc brings libasan/libubsan for the argument-parser harness);
# busybox-static for the test jail; python3, procps and coreutils for the image scripts the tests run; slurmrestd
# and Debian's auth/jwt + rest_auth/jwt plugins (slurm-wlm-jwt-plugin) for LOCAL_SLURM_REST.
ROOTFS_PACKAGES=(slurmctld slurmd slurmrestd slurm-wlm-jwt-plugin slurm-client munge libslurm-dev gcc make libc6-dev
    busybox-static python3 procps)
# In the order `down` stops them; slurmrestd only runs with LOCAL_SLURM_REST=1.
ALL_DAEMONS=(slurmrestd slurmd slurmctld munged)
DAEMONS=(slurmd slurmctld munged)
REST=${LOCAL_SLURM_REST:-0}
[ "$REST" != 1 ] || DAEMONS=(slurmrestd "${DAEMONS[@]}")
# slurmrestd refuses to serve as root or SlurmUser: it binds as root, then switches to this user and group (nobody and
# nogroup, by number: since 25.11 Slurm resolves the name "nobody" to its own SLURM_AUTH_NOBODY, which `-u` refuses
# with "Unable to resolve user: nobody").
REST_USER=65534
REST_GROUP=65534
CACHE=${LOCAL_SLURM_CACHE:-${XDG_CACHE_HOME:-${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}/.cache}/slurmctl/slurm-rootfs}
# Inside an instance's namespace.
NS_CONF_DIR=/etc/slurm
NS_MUNGE_SOCKET=/run/munge/munge.socket
# On the instance's private /run: slurmstepd runs batch scripts from here inside the jail, as the job's user, who must
# be able to reach it (a state directory under pytest's 0700 temporary directory would not do).
NS_SPOOL=/run/slurmd-spool

LOG_PREFIX=local-slurm
PID_MATCH_STATE=1
# shellcheck source=hack/lib.sh
. "$ROOT/hack/lib.sh"

mirror() {
    local m=${LOCAL_SLURM_MIRROR:-}
    [ -n "$m" ] || m=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    printf '%s' "${m:-http://deb.debian.org/debian}"
}

rootfs_dir() {
    local key
    key=$(printf 'v1 %s %s minbase %s\n' "$SUITE" "$(mirror)" "${ROOTFS_PACKAGES[*]}" | sha256sum | cut -c1-16)
    printf '%s/%s-%s' "$CACHE" "$SUITE" "$key"
}

# Built into a temporary directory and renamed, under a lock, so concurrent callers build it once and nobody sees a
# half-built tree.
ensure_rootfs() {
    local dir tmp started
    dir=$(rootfs_dir)
    # A stamp, not a binary: the tree's /usr/sbin/slurmd is an absolute symlink into its own /etc/alternatives.
    [ -f "$dir/.slurmctl-rootfs" ] && return 0
    ensure_apt_packages "${HOST_PACKAGES[@]}"
    mkdir -p "$CACHE"
    exec 9>"$CACHE/.lock"
    flock -w 900 9 || die "timed out waiting for another build of the Slurm root filesystem"
    if [ ! -f "$dir/.slurmctl-rootfs" ]; then
        tmp=$dir.tmp.$$
        rm -rf "$tmp"
        mkdir -p "$CACHE/logs"
        started=$SECONDS
        log "building the Slurm $SUITE root filesystem in $dir (once; about 1-2 minutes)"
        local packages
        packages=$(IFS=,; printf '%s' "${ROOTFS_PACKAGES[*]}")
        run_step mmdebstrap "$CACHE/logs/$(basename "$dir").log" mmdebstrap --variant=minbase \
            "${MMDEBSTRAP_APTOPTS[@]}" --include="$packages" "$SUITE" "$tmp" \
            "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $(mirror) $SUITE main"
        # The mount points an instance needs; the rest of the tree is never written after this.
        mkdir -p "$tmp/etc/slurm" "$tmp/run/munge"
        printf '%s\n' "${ROOTFS_PACKAGES[@]}" >"$tmp/.slurmctl-rootfs"
        rm -rf "$dir"
        mv "$tmp" "$dir"
        log "root filesystem built in $((SECONDS - started))s"
    fi
    exec 9>&-
}

# --- namespaces --------------------------------------------------------------------------------------------------

# bind_same HOSTPATH: make HOSTPATH visible at the same path inside the root filesystem $R. The directories on the
# way are created in the cached tree (empty mount points only).
bind_same() {
    local src=$1 dst
    dst=$R$src
    if [ -d "$src" ]; then mkdir -p "$dst"; else mkdir -p "$(dirname "$dst")" && touch "$dst"; fi
    mount --rbind "$src" "$dst"
}

# Runs inside `unshare --mount --propagation private`: set up the mounts, then chroot and run the command.
#   __enter fresh|instance CWD CMD...
cmd_enter() {
    local mode=$1 cwd=$2 p
    shift 2
    R=$(rootfs_dir)
    # pivot_root (done by the plugin inside the tasks) needs the caller's root to be a mount point.
    mount --bind "$R" "$R"
    mount --rbind /proc "$R/proc"
    mount --rbind /sys "$R/sys"
    mount --rbind /dev "$R/dev"
    mount --bind /etc/hosts "$R/etc/hosts"
    mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs "$R/run"
    mkdir -p "$R/run/munge"
    for p in /tmp "$ROOT"; do
        bind_same "$p"
    done
    if [ "$mode" = instance ]; then
        for p in "$STATE" "${LOCAL_SLURM_JAIL:-}"; do
            case $p in "" | /tmp/* | "$ROOT"/*) ;; *) [ -e "$p" ] && bind_same "$p" ;; esac
        done
        mount --bind "$STATE/etc" "$R$NS_CONF_DIR"
        mount --bind "$STATE/rootfs-etc/passwd" "$R/etc/passwd"
        mount --bind "$STATE/rootfs-etc/group" "$R/etc/group"
    fi
    # The cached tree is shared by every instance and build: nothing may write to it (what Slurm writes goes to the
    # state directory, /tmp or the private /run). Submounts keep their own flags.
    mount -o remount,bind,ro "$R"
    exec chroot "$R" /usr/bin/env -C "$cwd" "$@"
}

# munged is started first in a new namespace; everything else of the instance joins that namespace.
anchor_pid() {
    local pid
    pid=$(recorded_pid munged)
    pid_alive "$pid" munged || return 1
    printf '%s' "$pid"
}

# in_fresh_ns CMD...: run CMD in the root filesystem in a namespace of its own (nothing of an instance).
in_fresh_ns() {
    local cwd=$PWD
    case $cwd in /tmp | /tmp/* | "$ROOT" | "$ROOT"/*) ;; *) cwd=/ ;; esac
    unshare --mount --propagation private -- "$SELF" __enter fresh "$cwd" "$@"
}

# instance_ns: set NS to the command prefix that enters the running instance's namespace and root, in the caller's
# working directory when the namespace has it (else in /).
instance_ns() {
    local pid cwd=$PWD
    pid=$(anchor_pid) || return 1
    [ -d "/proc/$pid/root$cwd" ] || cwd=/
    NS=(nsenter --target "$pid" --mount --root --wd -- /usr/bin/env -C "$cwd")
}

# in_instance CMD...: run CMD in the running instance's namespace.
in_instance() {
    instance_ns || die "the instance in $STATE is not up"
    "${NS[@]}" "$@"
}

all_running() {
    local n
    for n in "${DAEMONS[@]}"; do
        pid_alive "$(recorded_pid "$n")" "$n" || return 1
    done
}

# passwd/group for the daemons (the root filesystem's own, plus the named host users).
write_rootfs_etc() {
    local u dir=$STATE/rootfs-etc r
    r=$(rootfs_dir)
    mkdir -p "$dir"
    cp "$r/etc/passwd" "$dir/passwd"
    cp "$r/etc/group" "$dir/group"
    for u in ${LOCAL_SLURM_JAIL_USERS:-}; do
        getent passwd "$u" >/dev/null || die "LOCAL_SLURM_JAIL_USERS: no user '$u' on this host"
        getent passwd "$u" | sed 's#:[^:]*$#:/bin/sh#' >>"$dir/passwd"
        getent group "$(id -gn "$u")" >>"$dir/group"
    done
}

# The busybox jail: a shell and coreutils applets, /dev/null, a marker, and passwd/group entries for root and the named users.
build_jail() {
    local jail=$STATE/jail applet u r
    r=$(rootfs_dir)
    rm -rf "$jail"
    mkdir -p "$jail"/{bin,etc,proc,tmp,root,home,data,dev}
    chmod 1777 "$jail/tmp" "$jail/data"
    cp "$r/bin/busybox" "$jail/bin/busybox"
    for applet in $(chroot "$r" /bin/busybox --list); do
        [ "$applet" = busybox ] || ln -s busybox "$jail/bin/$applet"
    done
    ln -s bin "$jail/sbin"
    mkdir -p "$jail/usr"
    ln -s ../bin "$jail/usr/bin"
    # /dev/null: shells redirect the stdin of background jobs from it.
    mknod -m 666 "$jail/dev/null" c 1 3
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
    local ctld_port=$1 slurmd_port=$2 rest_port=${3:-} node plugin jail tag jwt_conf=""
    node=$(hostname -s)
    plugin=${LOCAL_SLURM_PLUGIN:-$PLUGIN_DIR/chroot.so}
    jail=${LOCAL_SLURM_JAIL:-$STATE/jail}
    tag=$(printf '%s' "$STATE" | md5sum | cut -c1-8)
    if [ -n "$rest_port" ]; then
        jwt_conf="AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$STATE/jwt/jwt_hs256.key"
    fi
    # Only the hardware layout of `slurmd -C`: the node's memory may change between runs and a configured
    # RealMemory above the real one would drain the node.
    local hw
    hw=$(in_fresh_ns slurmd -C | head -n 1 | tr ' ' '\n' |
        grep -E '^(CPUs|Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore)=' | tr '\n' ' ')
    # FirstJobId differs per instance: cgroup plugins name their cgroups after the job id (/slurm/uid_U/job_N), and
    # instances run side by side on one host.
    cat >"$STATE/etc/slurm.conf" <<EOF
# Written by hack/local-slurm.sh for a local test instance (Slurm $SLURM_LINE; read inside the instance's namespace).
ClusterName=local$tag
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
AuthInfo=socket=$NS_MUNGE_SOCKET
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$NS_SPOOL
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
SlurmdDebug=debug
PlugStackConfig=$NS_CONF_DIR/plugstack.conf
ProctrackType=${LOCAL_SLURM_PROCTRACK:-proctrack/linuxproc}
TaskPlugin=${LOCAL_SLURM_TASK_PLUGIN:-task/none}
PrologFlags=Contain
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
$jwt_conf
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
FirstJobId=$(((0x${tag:0:4} % 60000) * 1000 + 1000))
NodeName=$node NodeAddr=127.0.0.1 ${hw}State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
${LOCAL_SLURM_EXTRA_CONF:-}
EOF
    # Read only by the cgroup plugins (ProctrackType=proctrack/cgroup, TaskPlugin=task/cgroup); there is no systemd.
    printf '%s\n' "${LOCAL_SLURM_CGROUP_CONF:-CgroupPlugin=autodetect
IgnoreSystemd=yes}" >"$STATE/etc/cgroup.conf"
    if [ "$plugin" = none ]; then
        : >"$STATE/etc/plugstack.conf"
    else
        if job_container; then
            # As render/slurm_conf.py renders it for the workers; the plugin comes from the same build as chroot.so.
            printf 'JobContainerType=job_container/jail\nPluginDir=%s:%s\n' "$(rootfs_plugin_dir)" "$PLUGIN_DIR" \
                >>"$STATE/etc/slurm.conf"
        fi
        printf 'required %s jail=%s %s\n' "$plugin" "$jail" "${LOCAL_SLURM_PLUGIN_ARGS:-}" >"$STATE/etc/plugstack.conf"
    fi
    printf 'SLURM_CONF=%s\nLOCAL_SLURM_NODE=%s\nLOCAL_SLURM_JAIL=%s\nLOCAL_SLURM_DIR=%s\n' \
        "$NS_CONF_DIR/slurm.conf" "$node" "$jail" "$STATE" >"$STATE/env"
    if [ -n "$rest_port" ]; then
        printf 'SLURMRESTD_URL=http://127.0.0.1:%s\nLOCAL_SLURM_JWT_KEY=%s\n' "$rest_port" "$STATE/jwt/jwt_hs256.key" \
            >>"$STATE/env"
    fi
}

job_container() {
    [ "${LOCAL_SLURM_JOB_CONTAINER:-1}" = 1 ] && [ "${LOCAL_SLURM_PLUGIN:-}" != none ]
}

# What the workers' entrypoint does before slurmd starts: the images' complement-jail binds into the jail what
# slurmstepd needs there once the plugin moved it in (the spool directory, munge, configs, /dev, /sys, /proc). Only for
# the jail `up` built: a test's own jail (LOCAL_SLURM_JAIL) is taken as it is.
complete_jail() {
    [ "${LOCAL_SLURM_PLUGIN:-}" != none ] && [ -z "${LOCAL_SLURM_JAIL:-}" ] || return 0
    in_instance mkdir -p "$NS_SPOOL"
    in_instance env JAIL_DIR="$STATE/jail" MUNGE_SOCKET="$NS_MUNGE_SOCKET" SLURM_CONF_DIR="$NS_CONF_DIR" \
        COMPLEMENT_JAIL_BINDS="$NS_SPOOL $(rootfs_plugin_dir)" COMPLEMENT_JAIL_HOOKS=/nonexistent \
        PROG=complement-jail "$ROOT/images/scripts/complement-jail" >>"$STATE/log/complement-jail.log" 2>&1 ||
        show_logs_and_fail "complement-jail failed (log: $STATE/log/complement-jail.log)"
}

# Slurm's plugin directory as seen inside the root filesystem.
rootfs_plugin_dir() {
    local d r
    r=$(rootfs_dir)
    for d in "$r"/usr/lib/*-linux-gnu/slurm-wlm; do
        printf '%s' "${d#"$r"}"
    done
}

print_export() {
    sed 's/^/export /' "$STATE/env"
}

scontrol_() { (in_instance scontrol "$@"); }

show_logs_and_fail() {
    local msg=$1 n
    {
        printf 'local-slurm: error: %s\n' "$msg"
        # Each daemon's own log file, and what it printed before it had one (start_bg's capture).
        for n in munged slurmctld slurmd slurmrestd; do
            local f
            for f in "$STATE/log/$n.log" "$STATE/logs/$n.log"; do
                [ -s "$f" ] || continue
                printf '  last lines of %s:\n' "$f"
                tail -n 15 "$f" | sed 's/^/    | /'
            done
        done
    } >&2
    cmd_down >/dev/null 2>&1 || true
    exit 1
}

# wait_for WHAT CMD...: until CMD succeeds, failing early when a started daemon is gone. CMD runs in a subshell: a
# probe that dies (in_instance before munged is up) must not end this script silently. A daemon counts as gone when
# its PID is: on its way through setsid and this script's `run` to the daemon, its command line does not always name
# the daemon (pid_alive would call a daemon that is starting dead).
wait_for() {
    local what=$1 deadline=$((SECONDS + READY_TIMEOUT))
    shift
    until ("$@") >/dev/null 2>&1; do
        local n
        for n in "${DAEMONS[@]}"; do
            [ -f "$STATE/pids/$n" ] || continue
            kill -0 "$(recorded_pid "$n")" 2>/dev/null || show_logs_and_fail "$n exited while waiting for $what"
        done
        [ $SECONDS -lt $deadline ] || show_logs_and_fail "timed out after ${READY_TIMEOUT}s waiting for $what"
        sleep 0.2
    done
}

node_idle() {
    scontrol_ show node "$(hostname -s)" | grep -Eq 'State=IDLE( |$)'
}

cmd_plugin() {
    ensure_rootfs
    if [ $# -gt 0 ]; then
        run_step build-plugin "$1" in_fresh_ns make -C "$PLUGIN_DIR"
    else
        in_fresh_ns make -C "$PLUGIN_DIR"
    fi
}

# Linters run on the host but must see the line's Slurm headers (SLURM_LINE), not whatever the host has (if anything).
cmd_include_dir() {
    local dir
    ensure_rootfs
    dir=$(rootfs_dir).include
    if [ ! -e "$dir/slurm" ]; then
        mkdir -p "$dir"
        ln -sfn "$(rootfs_dir)/usr/include/slurm" "$dir/slurm"
    fi
    printf '%s\n' "$dir"
}

cmd_run() {
    local user="" fresh=""
    while [ $# -gt 0 ]; do
        case $1 in
        --user) user=$2; shift 2 ;;
        --fresh) fresh=1; shift ;;
        --) shift; break ;;
        *) break ;;
        esac
    done
    [ $# -gt 0 ] || die "run: no command"
    [ -z "$user" ] || set -- runuser -u "$user" -- "$@"
    # exec: `up` records the PIDs of the daemons it starts through here.
    if [ -z "$fresh" ] && instance_ns; then
        exec "${NS[@]}" "$@"
    fi
    ensure_rootfs
    in_fresh_ns "$@"
}

cmd_up() {
    if all_running; then
        log "already up (state in $STATE)"
        print_export
        return 0
    fi
    [ -d "$STATE/pids" ] && cmd_down >/dev/null 2>&1
    ensure_rootfs
    mkdir -p "$STATE"/{pids,log,run,etc,munge,ctld,spool}
    printf '%s\n' "$SLURM_LINE" >"$STATE/slurm-line"
    chmod 700 "$STATE/munge"
    if [ -z "${LOCAL_SLURM_PLUGIN:-}" ]; then
        cmd_plugin "$STATE/log/build-plugin.log"
    fi
    build_jail
    write_rootfs_etc

    dd if=/dev/urandom of="$STATE/munge/munge.key" bs=1024 count=1 status=none
    chmod 400 "$STATE/munge/munge.key"
    local ctld_port slurmd_port rest_port=""
    ctld_port=$(free_port)
    slurmd_port=$(free_port)
    [ "$ctld_port" != "$slurmd_port" ] || slurmd_port=$(free_port)
    if [ "$REST" = 1 ]; then
        rest_port=$(free_port)
        # Read by slurmctld only (root here); the tests mint tokens with it.
        mkdir -p "$STATE/jwt"
        chmod 700 "$STATE/jwt"
        dd if=/dev/urandom of="$STATE/jwt/jwt_hs256.key" bs=32 count=1 status=none
        chmod 400 "$STATE/jwt/jwt_hs256.key"
    fi
    write_configs "$ctld_port" "$slurmd_port" "$rest_port"

    # munged starts the instance's namespace; --force: the state directory may sit under a world-writable /tmp.
    start_bg munged unshare --mount --propagation private -- "$SELF" __enter instance / \
        munged --foreground --force --socket "$NS_MUNGE_SOCKET" \
        --key-file "$STATE/munge/munge.key" --pid-file "$STATE/munge/munged.pid" \
        --log-file "$STATE/log/munged.log" --seed-file "$STATE/munge/munged.seed"
    # `unshare` and the entering script exec into munged, so the recorded PID is munged's.
    wait_for "munged's socket" in_instance test -S "$NS_MUNGE_SOCKET"
    complete_jail
    start_bg slurmctld "$SELF" run -- slurmctld -D -i -f "$NS_CONF_DIR/slurm.conf" -L "$STATE/log/slurmctld.log"
    wait_for "slurmctld to answer" scontrol_ ping
    start_bg slurmd "$SELF" run -- slurmd -D -f "$NS_CONF_DIR/slurm.conf" -L "$STATE/log/slurmd.log"
    wait_for "node $(hostname -s) to be idle" node_idle
    if [ "$REST" = 1 ]; then
        # SLURM_JWT=daemon: slurmrestd passes each client's token on to slurmctld. It reads slurm.conf as nobody,
        # who may not traverse the state directory's parents: /etc/slurm is the same file. LOCAL_SLURM_DIR in its
        # environment is how `down` recognises this instance's slurmrestd (pid_alive).
        start_bg slurmrestd "$SELF" run -- env LOCAL_SLURM_DIR="$STATE" SLURM_JWT=daemon \
            slurmrestd -f "$NS_CONF_DIR/slurm.conf" -a rest_auth/jwt -s openapi/slurmctld \
            -u "$REST_USER" -g "$REST_GROUP" "127.0.0.1:$rest_port"
        wait_for "slurmrestd to listen on 127.0.0.1:$rest_port" port_in_use "$rest_port"
    fi
    log "up: Slurm $(in_instance slurmd -V | cut -d' ' -f2), slurmctld 127.0.0.1:$ctld_port," \
        "slurmd 127.0.0.1:$slurmd_port${rest_port:+, slurmrestd http://127.0.0.1:$rest_port} (state in $STATE)"
    print_export
}

cmd_down() {
    [ -d "$STATE" ] || { log "not up"; return 0; }
    local n
    for n in "${ALL_DAEMONS[@]}"; do
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
deps) ensure_apt_packages "${HOST_PACKAGES[@]}" ;;
rootfs) ensure_rootfs && printf '%s\n' "$(rootfs_dir)" ;;
plugin) cmd_plugin ;;
include-dir) cmd_include_dir ;;
run) shift && cmd_run "$@" ;;
__enter) shift && cmd_enter "$@" ;;
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
*)
    printf 'usage: %s deps|rootfs|plugin|include-dir|run|up|down|status\n' "$0" >&2
    exit 2
    ;;
esac
