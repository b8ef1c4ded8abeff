# shellcheck shell=bash
# Helpers shared by the slurmctl container scripts; sourced, never executed. Every path a script touches can be
# moved with an environment variable so the scripts can be exercised outside a container (tests, debugging).

: "${SLURM_CONFIGS_SOURCE:=/mnt/slurm-configs}"
: "${SLURM_CONF_DIR:=/etc/slurm}"
: "${MUNGE_KEY_SOURCE:=/mnt/munge-key/munge.key}"
: "${MUNGE_KEY_FILE:=/etc/munge/munge.key}"
: "${JWT_KEY_SOURCE:=/mnt/jwt-key/jwt_hs256.key}"
: "${MUNGE_SOCKET:=/run/munge/munge.socket.2}"
: "${MUNGE_WAIT_SECONDS:=120}"
: "${MUNGE_USER:=munge}"
: "${JAIL_DIR:=/mnt/jail}"
: "${EXTRAUSERS_DIR:=/var/lib/extrausers}"
# Set (by the operator, only with spec.identity.directory) to where the pod's sssd sidecar published its client side
# (images/sssd/entrypoint); empty: no directory, nothing of SSSD is used.
: "${SSSD_CLIENT_DIR:=}"
# sssd's sockets (pipes) and the memory-mapped caches NSS reads without a round trip (mc): emptyDirs the pod shares
# between the sidecar and this container.
: "${SSSD_SHARED_DIRS:=/var/lib/sss/pipes /var/lib/sss/mc}"
: "${SSHD_CONFIGS_SOURCE:=/mnt/sshd-configs}"
: "${SSH_HOST_KEYS_SOURCE:=/mnt/ssh-host-keys}"
: "${SSH_DIR:=/etc/ssh}"
: "${ROOT_SSH_DIR:=/root/.ssh}"
: "${SSHD_PRIVSEP_DIR:=/run/sshd}"
# A worker's sshd (spec.login.sshToJobNodes), for the preStop's SIGTERM.
: "${JOB_SSHD_PID:=/run/slurmctl-job-sshd.pid}"
# A worker's preStop says here, first thing, that the node is leaving Slurm: from then on nothing registers it again.
: "${WORKER_LEAVING:=/run/slurmctl-worker-leaving}"
: "${COMPLEMENT_JAIL_REFUSED:=/run/slurmctl/refused-submounts}"

PROG=${PROG:-$(basename "$0")}

log() {
    printf '%s %s: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$PROG" "$*" >&2
}

die() {
    log "error: $*"
    exit 1
}

is_true() {
    case "${1,,}" in
        true | yes | 1 | on) return 0 ;;
        false | no | 0 | off | '') return 1 ;;
        *) die "expected true or false, got '$1'" ;;
    esac
}

# Copies every file of the Slurm configs ConfigMap into SLURM_CONF_DIR. ConfigMap volumes present files as symlinks
# into a hidden ..data directory, hence -L; the hidden entries themselves are skipped. Each file is written beside its
# place and renamed over it: a daemon or a starting step (slurmstepd reads plugstack.conf for every step) sees the old
# file or the new one, never a missing or half-written one.
install_slurm_configs() {
    [ -f "$SLURM_CONFIGS_SOURCE/slurm.conf" ] \
        || die "no slurm.conf in $SLURM_CONFIGS_SOURCE (is the Slurm configs ConfigMap mounted there?)"
    mkdir -p "$SLURM_CONF_DIR"
    local f name
    for f in "$SLURM_CONFIGS_SOURCE"/*; do
        name=$(basename "$f")
        [ -f "$f" ] || continue
        install -m 0644 "$f" "$SLURM_CONF_DIR/.$name.new"
        mv -f "$SLURM_CONF_DIR/.$name.new" "$SLURM_CONF_DIR/$name"
        log "installed $SLURM_CONF_DIR/$name"
    done
}

# The settings of SLURMCTL_RESTART_KEYS (comma-separated; the operator sets it from render/slurm_conf.py RESTART_KEYS:
# what a running daemon cannot take from a reconfigure) in a slurm.conf, one KEY=VALUE a line.
# Every SlurmctldHost line adds a controller, so all of its values count, in order (render/slurm_conf.py LIST_KEYS).
restart_settings() {
    local file=$1 key
    for key in ${SLURMCTL_RESTART_KEYS//,/ }; do
        if [ "${key,,}" = slurmctldhost ]; then
            printf '%s=%s\n' "$key" "$(conf_values "$file" "$key")"
        else
            printf '%s=%s\n' "$key" "$(conf_value "$file" "$key" "")"
        fi
    done
}

# Keeps SLURM_CONF_DIR equal to the mounted ConfigMap while the daemon runs, in the background: the kubelet updates
# the mount in place when the operator changes a file; each change is installed, then the command given runs (the
# controller: `scontrol reconfigure`; a worker: a SIGHUP to its own slurmd, which catches up if it reconfigured
# before its own copy changed). Scaling changes no file. A change to a setting of SLURMCTL_RESTART_KEYS is not
# installed at all: the running daemon keeps the configs it started with, consistent with itself and with the jobs it
# runs, until the operator re-creates the pod (workers one drained node at a time; the controller after saving its
# state), and then starts with the new ones.
#
# A command that fails (slurmctld not answering: starting, or a standby taking over) is run again at each poll until
# it succeeds: the files are installed by then, so comparing them would never see the change again.
#
# `follow_slurm_configs --verify FUNC COMMAND...`: every SLURM_CONFIGS_VERIFY_SECONDS, while nothing changed, FUNC
# says what of the installed files the daemon does not apply (one line; nothing when all is applied or it cannot
# tell), and COMMAND runs then too. For what a reconfigure applies only to what the daemon knows at that moment
# (topology.conf and dynamic nodes), where the same file can need a second reconfigure.
follow_slurm_configs() {
    local verify=
    if [ "${1:-}" = --verify ]; then
        verify=$2
        shift 2
    fi
    local interval=${SLURM_CONFIGS_POLL_SECONDS:-5} every=${SLURM_CONFIGS_VERIFY_SECONDS:-30} daemon=$$
    (
        held='' unapplied='' failing='' verified=$SECONDS
        # Ends with the daemon, which keeps this shell's PID: once it exits, this loop has another parent.
        while sleep "$interval"; do
            read -r _ _ _ parent _ <"/proc/$BASHPID/stat"
            [ "$parent" = "$daemon" ] || exit 0
            changed=
            for f in "$SLURM_CONFIGS_SOURCE"/*; do
                [ -f "$f" ] || continue
                cmp -s "$f" "$SLURM_CONF_DIR/$(basename "$f")" || changed=yes
            done
            if [ -n "$changed" ]; then
                if [ -n "${SLURMCTL_RESTART_KEYS:-}" ] && [ "$(restart_settings "$SLURM_CONFIGS_SOURCE/slurm.conf")" \
                    != "$(restart_settings "$SLURM_CONF_DIR/slurm.conf")" ]; then
                    [ -n "$held" ] || log "configs changed in a setting only a restart applies;" \
                        "keeping the running ones until this pod is re-created"
                    held=yes
                    continue
                fi
                held=
                install_slurm_configs
                unapplied="configs changed"
            elif [ -z "$unapplied" ] && [ -n "$verify" ] && [ $((SECONDS - verified)) -ge "$every" ]; then
                verified=$SECONDS
                unapplied=$("$verify") || unapplied=''
            fi
            [ -n "$unapplied" ] || continue
            if out=$("$@" 2>&1); then
                log "$unapplied; ran: $*"
                unapplied='' failing=''
            elif [ -z "$failing" ]; then
                log "$unapplied; '$*' failed: $out (retrying every ${interval}s)"
                failing=yes
            fi
        done
    ) &
}

# The key is secret material: it is copied with install(1) so it never passes through a variable or a log line.
install_munge_key() {
    [ -f "$MUNGE_KEY_SOURCE" ] || die "munge key $MUNGE_KEY_SOURCE is missing (is the munge key Secret mounted?)"
    [ -s "$MUNGE_KEY_SOURCE" ] || die "munge key $MUNGE_KEY_SOURCE is empty"
    mkdir -p "$(dirname "$MUNGE_KEY_FILE")"
    install -o "$MUNGE_USER" -g "$MUNGE_USER" -m 0400 "$MUNGE_KEY_SOURCE" "$MUNGE_KEY_FILE"
    log "installed munge key at $MUNGE_KEY_FILE (owner $MUNGE_USER, mode 0400)"
}

# sshd's configuration from the cluster's sshd ConfigMap and host keys Secret (render/sshd.py): sshd_config, root's
# authorized_keys when the cluster has any, and every host key. The login nodes' sshd, and the workers' with
# spec.login.sshToJobNodes.
install_sshd_files() {
    local key found=0
    [ -f "$SSHD_CONFIGS_SOURCE/sshd_config" ] \
        || die "no sshd_config in $SSHD_CONFIGS_SOURCE (is the sshd ConfigMap mounted?)"
    install -m 0644 "$SSHD_CONFIGS_SOURCE/sshd_config" "$SSH_DIR/sshd_config"
    install -d -m 0700 "$ROOT_SSH_DIR"
    if [ -f "$SSHD_CONFIGS_SOURCE/authorized_keys" ]; then
        install -m 0600 "$SSHD_CONFIGS_SOURCE/authorized_keys" "$ROOT_SSH_DIR/authorized_keys"
    fi
    for key in "$SSH_HOST_KEYS_SOURCE"/ssh_host_*_key; do
        [ -f "$key" ] || continue
        install -m 0600 "$key" "$SSH_DIR/$(basename "$key")"
        [ ! -f "$key.pub" ] || install -m 0644 "$key.pub" "$SSH_DIR/$(basename "$key").pub"
        found=$((found + 1))
    done
    [ "$found" -gt 0 ] || die "no ssh_host_*_key in $SSH_HOST_KEYS_SOURCE (is the SSH host keys Secret mounted?)"
    install -d -m 0755 "$SSHD_PRIVSEP_DIR"
    log "installed sshd_config and $found host keys"
}

# The key slurmctld and slurmdbd verify users' JWTs with, at the path their config names (AuthAltParameters=
# jwt_key=PATH): copied like the munge key, owned by the daemon's user with mode 0600 as Slurm's JWT guide asks. A
# config that names no jwt_key needs none.
install_jwt_key() {
    local conf=$1 owner=$2 path
    path=$(conf_value "$conf" AuthAltParameters "" | tr ',' '\n' | sed -n 's/^jwt_key=//p' | tail -n 1)
    if [ -z "$path" ]; then
        log "$conf names no jwt_key in AuthAltParameters: no JWT key installed"
        return 0
    fi
    [ -f "$JWT_KEY_SOURCE" ] || die "JWT key $JWT_KEY_SOURCE is missing (is the JWT key Secret mounted?)"
    [ -s "$JWT_KEY_SOURCE" ] || die "JWT key $JWT_KEY_SOURCE is empty"
    mkdir -p "$(dirname "$path")"
    install -o "$owner" -g "$owner" -m 0600 "$JWT_KEY_SOURCE" "$path"
    log "installed the JWT key at $path (owner $owner, mode 0600)"
}

wait_for_munge() {
    local deadline=$((SECONDS + MUNGE_WAIT_SECONDS))
    log "waiting up to ${MUNGE_WAIT_SECONDS}s for the munge socket $MUNGE_SOCKET"
    until [ -S "$MUNGE_SOCKET" ]; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            die "munge socket $MUNGE_SOCKET did not appear within ${MUNGE_WAIT_SECONDS}s; is munged (the munge container) running?"
        fi
        sleep 0.2
    done
    log "munge socket is up"
}

# Starts munged as the munge user, with MUNGED_ARGS (word-split) and the given arguments. With "background" it is
# started in the background and its pid is printed. Started as root, it makes the socket directory munge's first;
# started as munge itself (a pod without root, under Pod Security "restricted": render/accounting.py), it cannot:
# the directory is then the pod's emptyDir, root's and writable by the pod's group, which munged calls insecure and
# refuses unless forced. Only the pod's own containers see that directory, and none of them runs users' code.
start_munged() {
    local mode=$1
    shift
    local rundir
    rundir=$(dirname "$MUNGE_SOCKET")
    mkdir -p "$rundir"
    local -a cmd=(munged --foreground --socket="$MUNGE_SOCKET" --key-file="$MUNGE_KEY_FILE")
    if [ "$(id -u)" = 0 ]; then
        chown "$MUNGE_USER:$MUNGE_USER" "$rundir"
        chmod 0755 "$rundir"
        cmd=(setpriv --reuid="$MUNGE_USER" --regid="$MUNGE_USER" --init-groups "${cmd[@]}")
    elif [ "$(stat -c %u "$rundir")" != "$(id -u)" ]; then
        log "the socket directory $rundir is not $(id -un)'s and there is no root to change that: munged runs with --force"
        cmd+=(--force)
    fi
    # shellcheck disable=SC2206 # MUNGED_ARGS is a word list by design
    cmd+=(${MUNGED_ARGS:-} "$@")
    if [ "$mode" = background ]; then
        # stdout goes to stderr so a caller's $(...) does not wait for munged to exit.
        "${cmd[@]}" </dev/null >&2 &
        echo "$!"
    else
        log "starting munged"
        exec "${cmd[@]}"
    fi
}

# Prints the value of a key in a Slurm config file (case-insensitive, last one wins; the value runs from the first
# '=' to whitespace or '#', so it may hold '=' itself, as AuthAltParameters=jwt_key=PATH does), or the default.
conf_value() {
    local file=$1 key=$2 default=$3 value
    value=$(awk -v k="${key,,}" '
        { sub(/#.*/, ""); i = index($0, "=") }
        i > 0 { name = substr($0, 1, i - 1); gsub(/[ \t]/, "", name) }
        i > 0 && tolower(name) == k { v = substr($0, i + 1); sub(/^[ \t]+/, "", v); split(v, w, /[ \t]+/); found = w[1] }
        END { if (found != "") print found }' "$file")
    printf '%s\n' "${value:-$default}"
}

# Prints every value of a key in a Slurm config file (case-insensitive), in order, separated by spaces.
conf_values() {
    local file=$1 key=$2
    awk -v k="${key,,}" '
        { sub(/#.*/, ""); i = index($0, "=") }
        i > 0 { name = substr($0, 1, i - 1); gsub(/[ \t]/, "", name) }
        i > 0 && tolower(name) == k { v = substr($0, i + 1); sub(/^[ \t]+/, "", v); split(v, w, /[ \t]+/); all = all (all == "" ? "" : " ") w[1] }
        END { print all }' "$file"
}

# Prints the value of a slurm.conf key, or the default when absent.
slurm_conf_value() {
    conf_value "$SLURM_CONF_DIR/slurm.conf" "$1" "$2"
}

# Runs a daemon as the given user until it exits, as this shell's child rather than in its place: SIGTERM and SIGINT
# are passed on to it, and its exit is logged (the pod's munge sidecar stops only after this container has exited:
# render/pods.py munge_container). Exits with the daemon's status.
run_until_stopped() {
    local user=$1 pid
    shift
    if [ "$user" = root ] || [ "$(id -u "$user")" = 0 ]; then
        "$@" &
    else
        setpriv --reuid="$user" --regid="$user" --init-groups "$@" &
    fi
    pid=$!
    trap 'kill -TERM "$pid" 2>/dev/null' TERM
    trap 'kill -INT "$pid" 2>/dev/null' INT
    # `wait` returns early when a trapped signal arrives: wait again until the daemon is gone.
    while kill -0 "$pid" 2>/dev/null; do
        wait "$pid" || true
    done
    local status=0
    wait "$pid" || status=$?
    log "$(basename "$1") exited ($status)"
    exit "$status"
}

# Runs a daemon as the given user (no switch when it is root, or already the user: a pod without root) so that
# daemons that can live without root do.
exec_as() {
    local user=$1
    shift
    if [ "$user" = root ] || [ "$(id -u "$user")" = 0 ] || [ "$(id -u "$user")" = "$(id -u)" ]; then
        exec "$@"
    fi
    exec setpriv --reuid="$user" --regid="$user" --init-groups "$@"
}

# Users and groups live in the jail. The images' NSS reads "files extrausers" (libnss-extrausers), and the extrausers
# files point into the jail: sshd, slurmctld and slurmstepd resolve users created in the jail, at once and without a
# restart (a symlink follows useradd's rename, a bind mount would not), while the image's own system users come first.
link_jail_users() {
    local f
    mkdir -p "$EXTRAUSERS_DIR"
    for f in passwd group shadow; do
        ln -sfn "$JAIL_DIR/etc/$f" "$EXTRAUSERS_DIR/$f"
    done
    log "users and groups from $JAIL_DIR/etc (via $EXTRAUSERS_DIR)"
    use_sssd
}

# The directory of the multiarch libraries (where glibc loads NSS modules from).
multiarch_libdir() { dirname "$(readlink -f /usr/lib/*-linux-gnu/libc.so.6)"; }

# spec.identity.directory: NSS asks the pod's sssd for users and groups after the image's files and the jail's
# ("files extrausers sss"); libnss_sss is the sidecar's own (SSSD_CLIENT_DIR), so it speaks its daemon's protocol.
# Without SSSD_CLIENT_DIR nothing changes.
use_sssd() {
    local libdir
    [ -n "$SSSD_CLIENT_DIR" ] || return 0
    [ -f "$SSSD_CLIENT_DIR/libnss_sss.so.2" ] || die "no libnss_sss.so.2 in $SSSD_CLIENT_DIR (has the sssd sidecar started?)"
    libdir=$(multiarch_libdir)
    ln -sfn "$SSSD_CLIENT_DIR/libnss_sss.so.2" "$libdir/libnss_sss.so.2"
    sed -i -E 's/^(passwd|group):([[:space:]]+)files extrausers$/\1:\2files extrausers sss/' /etc/nsswitch.conf
    [ "$(grep -cE '^(passwd|group):[[:space:]]+files extrausers sss$' /etc/nsswitch.conf)" = 2 ] ||
        die "cannot add sss to passwd and group in /etc/nsswitch.conf"
    log "users and groups also from the directory (sssd, via $SSSD_CLIENT_DIR)"
}

# spec.identity.directory on a login node: sshd's PAM checks a directory user's password with pam_sss (the sidecar's
# module) after pam_unix has not found the user in the image's or the jail's shadow, and asks sssd whether the account
# may log in (pam_sss's account phase; a user sssd does not know is left to pam_unix). These are Debian's
# pam-auth-update stacks with libpam-sss installed, with the module named by its path in SSSD_CLIENT_DIR.
use_pam_sss() {
    [ -n "$SSSD_CLIENT_DIR" ] || return 0
    [ -f "$SSSD_CLIENT_DIR/pam_sss.so" ] || die "no pam_sss.so in $SSSD_CLIENT_DIR (has the sssd sidecar started?)"
    printf '%s\n' \
        '# Written by slurmctl (spec.identity.directory): the image'"'"'s accounts, then the directory'"'"'s.' \
        'auth [success=2 default=ignore] pam_unix.so nullok' \
        "auth [success=1 default=ignore] $SSSD_CLIENT_DIR/pam_sss.so use_first_pass" \
        'auth requisite pam_deny.so' \
        'auth required pam_permit.so' >/etc/pam.d/common-auth
    printf '%s\n' \
        '# Written by slurmctl (spec.identity.directory).' \
        'account [success=1 new_authtok_reqd=done default=ignore] pam_unix.so' \
        'account requisite pam_deny.so' \
        'account required pam_permit.so' \
        "account [default=bad success=ok user_unknown=ignore] $SSSD_CLIENT_DIR/pam_sss.so" >/etc/pam.d/common-account
    log "sshd's PAM also checks directory passwords (pam_sss)"
}
