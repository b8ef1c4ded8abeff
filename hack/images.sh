#!/usr/bin/env bash
# Build the images under images/ with buildah (no daemon, nothing pulled) and import them into the node's containerd.
#
#   hack/images.sh [build] [COMPONENT...]   build what changed (default: every image), then import what the node lacks
#   hack/images.sh base [--refresh]         make localhost/debian:<suite> (mmdebstrap); --refresh re-fetches it
#   hack/images.sh list                     every image: reference, cache key, whether built and imported
#   hack/images.sh archive COMPONENT...     print the path of each image's archive (built and pushed if needed)
#   hack/images.sh check [COMPONENT...]     run each image's smoke check inside it (what its entrypoint needs)
#
# Components are the ones api/v1/defaults.py names (controller worker login accounting rest jail populate-jail
# nccl-benchmark operator), sssd (the directory sidecar, spec.identity.directory), plus the test fixtures test-mariadb
# and test-slapd (images/test-<name>, referenced as localhost/slurmctl-test/<name>:<tag>); slurm-base is a build base only. images/pause is the node's: `hack/node.sh build|up`
# compiles it on the host and imports it (it has no base image to compile in). A component's
# dependencies (slurm-base, jail, the Debian base) are built first but only the named components are imported.
#
# Base: `mmdebstrap --variant=minbase --include=ca-certificates <suite>` from the Debian mirror this system uses
# (read from /etc/apt/sources.list.d/debian.sources, the system's apt config is left alone), imported as
# localhost/debian:<suite> and given to every Dockerfile as DEBIAN_IMAGE.
# Cache: each image carries the label io.slurmctl.context-hash, a hash (hack/image_key.py) of its Dockerfile, every
# context file it COPYs, its build args and its parents' image ids; an image whose label matches is not rebuilt. An
# image is imported when the node does not list its reference or the last import recorded another image id.
#
# Environment:
#   SLURMCTL_CACHE     cache root (default ~/.cache/slurmctl); buildah's storage, archives and logs live under
#                      $SLURMCTL_CACHE/images
#   IMAGE_REGISTRY     registry part of the references (default: IMAGE_REGISTRY in api/v1/defaults.py)
#   IMAGE_TAG          tag (default: IMAGE_TAG in api/v1/defaults.py)
#   SLURM_LINE         24.11 (default): the Dockerfiles as they are (Debian 13 trixie, Slurm 24.11.5); 26.05: every
#                      Slurm image from the same Dockerfiles with the pins of images/lines/26.05.pins (Debian testing
#                      forky, Slurm 26.05.5; hack/image_line.py), tagged <IMAGE_TAG>-slurm26.05 so both lines' images
#                      stay side by side in buildah and in the node. operator, sssd and the test fixtures run no
#                      Slurm: only the default line builds them. Each line has its own archives, import records and logs.
#   DEBIAN_SUITE       suite of the base (default trixie; the line's suite for another line)
#   IMAGES_IMPORT      auto (default: import when hack/node.sh exists), 1 (must import), 0 (build only)
#   NODE_SH            the node script (default hack/node.sh): `NODE_SH import FILE...`, `NODE_SH images`
#   PYTHON             Python whose pip downloads the operator's wheels (default .venv/bin/python, else python3)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CACHE=${SLURMCTL_CACHE:-$HOME/.cache/slurmctl}
WORK=$CACHE/images
LOGS=$WORK/logs
ARCHIVES=$WORK/archives
IMPORTED=$WORK/imported
SLURM_LINE=${SLURM_LINE:-24.11}
# The line's pin file (none for the default line, whose pins are the Dockerfiles'), and what it sets.
LINE_PINS=
TAG_SUFFIX=
NO_VALID_UNTIL=false
case $SLURM_LINE in
    24.11) ;;
    26.05)
        LINE_PINS=images/lines/$SLURM_LINE.pins
        DEBIAN_SUITE=${DEBIAN_SUITE:-$(python3 hack/image_line.py "$LINE_PINS" get suite)}
        TAG_SUFFIX=$(python3 hack/image_line.py "$LINE_PINS" get tag-suffix)
        NO_VALID_UNTIL=$(python3 hack/image_line.py "$LINE_PINS" get no-valid-until)
        LOGS=$WORK/logs-$SLURM_LINE
        ARCHIVES=$WORK/archives-$SLURM_LINE
        IMPORTED=$WORK/imported-$SLURM_LINE
        ;;
    *)
        printf 'images: error: SLURM_LINE=%s: must be 24.11 or 26.05\n' "$SLURM_LINE" >&2
        exit 2
        ;;
esac
DEBIAN_SUITE=${DEBIAN_SUITE:-trixie}
BASE_REF=localhost/debian:$DEBIAN_SUITE
IMAGES_IMPORT=${IMAGES_IMPORT:-auto}
NODE_SH=${NODE_SH:-$ROOT/hack/node.sh}
LABEL=io.slurmctl.context-hash
# Bump when the base recipe below changes, so the base is made again.
BASE_RECIPE=2
APT_PACKAGES=(buildah mmdebstrap python3)
# The Python whose pip downloads the operator's wheels (the project's venv when it exists).
PYTHON=${PYTHON:-$([ -x "$ROOT/.venv/bin/python" ] && echo "$ROOT/.venv/bin/python" || echo python3)}

LOG_PREFIX=images
# shellcheck source=hack/lib.sh
. "$ROOT/hack/lib.sh"

B=(buildah --root "$WORK/storage" --runroot "$WORK/run" --storage-driver vfs)

defaults_value() {
    python3 -c 'import runpy, sys; print(runpy.run_path(sys.argv[1])[sys.argv[2]])' api/v1/defaults.py "$1"
}

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# --- the image graph --------------------------------------------------------------------------------------------

COMPONENTS=(controller worker login accounting rest jail populate-jail nccl-benchmark operator sssd test-mariadb test-slapd)
# test-* are test fixtures (images/test-<name>): built and imported like the rest, as localhost/slurmctl-test/<name>.
# Another Slurm line builds the Slurm images only; the others are the same for every line (the default line's).
[ -z "$LINE_PINS" ] || COMPONENTS=(controller worker login accounting rest jail populate-jail nccl-benchmark)

image_dir() {
    case $1 in
        populate-jail) echo images/populate_jail ;;
        nccl-benchmark) echo images/nccl_benchmark ;;
        *) echo "images/$1" ;;
    esac
}

# Images built before this one (in build order).
image_parents() {
    case $1 in
        controller | worker | login | accounting | rest | nccl-benchmark) echo slurm-base ;;
        populate-jail) echo jail ;;
        *) ;;
    esac
}

image_ref() {
    case $1 in
        slurm-base) echo "$IMAGE_REGISTRY/slurm-base:$IMAGE_TAG" ;;
        test-*) echo "localhost/slurmctl-test/${1#test-}:$IMAGE_TAG" ;;
        *) echo "$IMAGE_REGISTRY/$1:$IMAGE_TAG" ;;
    esac
}

# The Dockerfile a build reads: the repository's for the default line, else the line's rendering of it (written
# under $WORK/lines/<line>/, again on every call: it is a function of the repository's Dockerfile and the pin file).
image_dockerfile() {
    local name=$1 out
    if [ -z "$LINE_PINS" ]; then
        echo "$(image_dir "$name")/Dockerfile"
        return 0
    fi
    out=$WORK/lines/$SLURM_LINE/$name/Dockerfile
    python3 hack/image_line.py "$LINE_PINS" render "$(image_dir "$name")/Dockerfile" "$out" ||
        die "cannot write the Slurm $SLURM_LINE Dockerfile of $name"
    echo "$out"
}

# Build args, only those the Dockerfile declares (so the key does not change for args it ignores).
image_build_args() {
    local name=$1 dockerfile arg
    dockerfile=$(image_dir "$name")/Dockerfile
    for arg in DEBIAN_IMAGE SLURM_BASE JAIL_IMAGE; do
        grep -Eq "^ARG ${arg}(=|$)" "$dockerfile" || continue
        case $arg in
            DEBIAN_IMAGE) echo "DEBIAN_IMAGE=$BASE_REF" ;;
            SLURM_BASE) echo "SLURM_BASE=$(image_ref slurm-base)" ;;
            JAIL_IMAGE) echo "JAIL_IMAGE=$(image_ref jail)" ;;
        esac
    done
}

image_id() { "${B[@]}" inspect --type image --format '{{.FromImageID}}' "$1" 2>/dev/null; }
image_label() {
    "${B[@]}" inspect --type image --format "{{index .OCIv1.Config.Labels \"$LABEL\"}}" "$1" 2>/dev/null
}

# --- the Debian base --------------------------------------------------------------------------------------------

# mmdebstrap's source lines: every stanza of the system's debian.sources with its suites moved from the system's
# codename to DEBIAN_SUITE (bookworm → trixie, bookworm-updates → trixie-updates, bookworm-security → trixie-security).
mirror_lines() {
    local sources=/etc/apt/sources.list.d/debian.sources codename
    [ -f "$sources" ] || die "$sources not found: cannot tell which Debian mirror to use"
    # shellcheck disable=SC1091
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    [ -n "$codename" ] || die "no VERSION_CODENAME in /etc/os-release"
    awk -v from="$codename" -v to="$DEBIAN_SUITE" '
        function flush(   i, j, n, m, u, s) {
            if (types ~ /(^| )deb( |$)/ && uris != "" && suites != "") {
                n = split(uris, u, " "); m = split(suites, s, " ")
                for (i = 1; i <= n; i++) for (j = 1; j <= m; j++) {
                    suite = s[j]; sub("^" from, to, suite)
                    printf "deb %s %s %s\n", u[i], suite, comps
                }
            }
            types = uris = suites = comps = ""
        }
        /^[ \t]*#/ { next }
        /^[ \t]*$/ { flush(); next }
        /^Types:/ { sub(/^Types:[ \t]*/, ""); types = $0 }
        /^URIs:/ { sub(/^URIs:[ \t]*/, ""); uris = $0 }
        /^Suites:/ { sub(/^Suites:[ \t]*/, ""); suites = $0 }
        /^Components:/ { sub(/^Components:[ \t]*/, ""); comps = $0 }
        END { flush() }
    ' "$sources"
}

# Docs, man pages and translations are left out of every image (like Debian's -slim images), and apt keeps neither
# downloaded .debs nor its binary caches; the dpkg and apt settings stay in the base (/etc/dpkg/dpkg.cfg.d/99mmdebstrap,
# /etc/apt/apt.conf.d/99mmdebstrap and 90slurmctl-clean), so what the Dockerfiles install follows them too.
# shellcheck disable=SC2016  # $1 is expanded by mmdebstrap's hook shell, not here
MMDEBSTRAP_OPTS=(
    --variant=minbase --include=ca-certificates
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*'
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias'
    --dpkgopt='path-exclude=/usr/share/lintian/*'
    --aptopt='APT::Install-Recommends "false"'
    # Not --aptopt: mmdebstrap itself needs the downloaded packages until it has installed them.
    --customize-hook='printf "%s\n" "APT::Keep-Downloaded-Packages \"false\";" "Dir::Cache::pkgcache \"\";" "Dir::Cache::srcpkgcache \"\";" >"$1/etc/apt/apt.conf.d/90slurmctl-clean"'
)

# A testing suite's Release carries a Valid-Until that the mirror's copy may have passed: for a line that says so, apt
# ignores it, in mmdebstrap and (the option stays in the base's /etc/apt/apt.conf.d/99mmdebstrap) in every image build.
if [ "$NO_VALID_UNTIL" = true ]; then
    MMDEBSTRAP_OPTS+=(--aptopt='Acquire::Check-Valid-Until "false"')
fi

base_key() {
    { echo "recipe $BASE_RECIPE $DEBIAN_SUITE"; printf '%s\n' "${MMDEBSTRAP_OPTS[@]}"; mirror_lines; } |
        sha256sum | cut -d' ' -f1
}

# What mmdebstrap leaves that no image should carry: apt's binary caches (86 MB; its final `apt-get clean` does not
# remove them once Dir::Cache::pkgcache is empty), and the build host's resolver and hostname. Pods get
# /etc/resolv.conf, /etc/hosts and /etc/hostname from the kubelet; the jail gets them from complement-jail.
scrub_base() {
    local root=$1
    [ -d "$root/etc" ] || die "cannot scrub the base: $root is not a root filesystem"
    rm -f "$root"/var/cache/apt/*.bin
    find "$root/var/lib/apt/lists" -mindepth 1 -maxdepth 1 ! -name partial ! -name lock -exec rm -rf {} +
    rm -f "$root/etc/resolv.conf" "$root/etc/hostname" "$root/etc/hosts"
    install -m 0644 /dev/null "$root/etc/resolv.conf"
    printf 'localhost\n' >"$root/etc/hostname"
    printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
    chmod 0644 "$root/etc/hostname" "$root/etc/hosts"
}

ensure_base() {
    local refresh=${1:-0} key mirrors=() tar c t0
    key=$(base_key)
    if [ "$refresh" = 0 ] && [ "$(image_label "$BASE_REF")" = "$key" ]; then
        log "$BASE_REF is up to date"
        return 0
    fi
    mapfile -t mirrors < <(mirror_lines)
    [ ${#mirrors[@]} -gt 0 ] || die "no deb lines in /etc/apt/sources.list.d/debian.sources"
    log "making $BASE_REF with mmdebstrap from ${mirrors[0]#deb } ..."
    t0=$(now)
    tar=$WORK/debian-$DEBIAN_SUITE.tar
    run_step mmdebstrap "$LOGS/mmdebstrap.log" mmdebstrap --format=tar "${MMDEBSTRAP_OPTS[@]}" "$DEBIAN_SUITE" "$tar.tmp" \
        "${mirrors[@]}"
    mv -f "$tar.tmp" "$tar"
    log "mmdebstrap: $(since "$t0") s, $(du -m "$tar" | cut -f1) MB"
    t0=$(now)
    c=$("${B[@]}" from scratch)
    run_step base-add "$LOGS/base-import.log" "${B[@]}" add "$c" "$tar" /
    scrub_base "$("${B[@]}" mount "$c")"
    "${B[@]}" umount "$c" >/dev/null
    "${B[@]}" config --cmd /bin/bash --env 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --label "$LABEL=$key" "$c"
    run_step base-commit "$LOGS/base-import.log" "${B[@]}" commit --rm --format docker "$c" "$BASE_REF"
    rm -f "$tar"
    log "$BASE_REF imported into buildah: $(since "$t0") s"
}

# --- the operator's wheels ---------------------------------------------------------------------------------------

# The operator image installs slurmctl's dependencies from wheels downloaded here, with this machine's pip and its
# configuration (index, proxy, CA): the image build itself needs no network access and no index. They are
# requirements/operator.lock's (`make lock`: pyproject.toml's runtime requirements and build backend at the versions
# the tests ran, each file's hash checked here and again by the image's `pip install --require-hashes`). The wheelhouse
# (build/operator-wheels, in the build context) is fetched again only when the lock or the target changes.
OPERATOR_WHEELS=build/operator-wheels
OPERATOR_LOCK=requirements/operator.lock
OPERATOR_PYTHON_VERSION=3.13
WHEEL_PLATFORMS=(manylinux1_x86_64 manylinux2010_x86_64 manylinux2014_x86_64)
for _glibc in 5 12 17 24 26 27 28 31 32 33 34 35 36 37 38 39 40 41; do WHEEL_PLATFORMS+=("manylinux_2_${_glibc}_x86_64"); done

ensure_operator_wheels() {
    local key plat=() p t0
    key=$({ echo "wheels 2 $OPERATOR_PYTHON_VERSION ${WHEEL_PLATFORMS[*]}"; cat "$OPERATOR_LOCK"; } | sha256sum | cut -c1-16)
    [ "$(cat "$OPERATOR_WHEELS/.key" 2>/dev/null)" = "$key" ] && return 0
    command -v "$PYTHON" >/dev/null 2>&1 || die "no $PYTHON to download the operator's wheels with (run make setup)"
    for p in "${WHEEL_PLATFORMS[@]}"; do plat+=(--platform "$p"); done
    log "operator: downloading wheels for Python $OPERATOR_PYTHON_VERSION ($OPERATOR_LOCK) into $OPERATOR_WHEELS ..."
    t0=$(now)
    rm -rf "$OPERATOR_WHEELS"
    mkdir -p "$OPERATOR_WHEELS"
    run_step "operator wheels" "$LOGS/operator-wheels.log" "$PYTHON" -m pip download --disable-pip-version-check \
        --dest "$OPERATOR_WHEELS" --require-hashes --only-binary=:all: --python-version "$OPERATOR_PYTHON_VERSION" \
        --implementation cp "${plat[@]}" -r "$OPERATOR_LOCK"
    printf '%s\n' "$key" >"$OPERATOR_WHEELS/.key"
    log "operator: $(find "$OPERATOR_WHEELS" -name '*.whl' | wc -l) wheels in $(since "$t0") s"
}

# --- the NVIDIA wheels of all_reduce_perf ------------------------------------------------------------------------

# The nccl-benchmark image compiles slurmctl's all_reduce_perf (native/all_reduce_perf) against NVIDIA's NCCL and CUDA
# runtime wheels and ships their libraries: downloaded here, as the operator's wheels are, pinned with their hashes in
# images/nccl_benchmark/wheels.txt (pip refuses any other file). About 400 MB, fetched again only when that file changes.
NCCL_WHEELS=build/nccl-wheels
NCCL_WHEELS_LIST=images/nccl_benchmark/wheels.txt

ensure_nccl_wheels() {
    local key plat=() p t0
    key=$({ echo "nccl-wheels 1 ${WHEEL_PLATFORMS[*]}"; cat "$NCCL_WHEELS_LIST"; } | sha256sum | cut -c1-16)
    [ "$(cat "$NCCL_WHEELS/.key" 2>/dev/null)" = "$key" ] && return 0
    command -v "$PYTHON" >/dev/null 2>&1 || die "no $PYTHON to download NVIDIA's wheels with (run make setup)"
    for p in "${WHEEL_PLATFORMS[@]}"; do plat+=(--platform "$p"); done
    log "nccl-benchmark: downloading NVIDIA's wheels ($NCCL_WHEELS_LIST) into $NCCL_WHEELS ..."
    t0=$(now)
    rm -rf "$NCCL_WHEELS"
    mkdir -p "$NCCL_WHEELS"
    run_step "nccl wheels" "$LOGS/nccl-wheels.log" "$PYTHON" -m pip download --disable-pip-version-check \
        --dest "$NCCL_WHEELS" --no-deps --require-hashes --only-binary=:all: --python-version "$OPERATOR_PYTHON_VERSION" \
        --implementation cp "${plat[@]}" -r "$NCCL_WHEELS_LIST"
    printf '%s\n' "$key" >"$NCCL_WHEELS/.key"
    log "nccl-benchmark: $(find "$NCCL_WHEELS" -name '*.whl' | wc -l) wheels, $(du -sm "$NCCL_WHEELS" | cut -f1) MB in $(since "$t0") s"
}

# --- building ---------------------------------------------------------------------------------------------------

declare -A BUILT=()   # component → image id, once checked or built in this run
REBUILT=()
# How many image builds (and archive writes) run at once. A build mostly waits: on apt's downloads inside it and on
# buildah's vfs copies, so one at a time left the two cores half idle on a cold machine (cold CI on 0f4cdf9: 31 min
# of image builds, one after another, beside the Kubernetes build).
IMAGE_JOBS=${IMAGE_JOBS:-3}

compute_key() {
    local name=$1 args=() parents=() a p
    mapfile -t args < <(image_build_args "$name")
    parents=(--parent "base=${BASE_ID}")
    for p in $(image_parents "$name"); do parents+=(--parent "$p=${BUILT[$p]}"); done
    for a in "${args[@]}"; do parents+=(--build-arg "$a"); done
    python3 hack/image_key.py --context . --dockerfile "$(image_dockerfile "$name")" "${parents[@]}"
}

ensure_image() {
    local name=$1 p key ref args=() bargs=() a t0
    [ -n "${BUILT[$name]:-}" ] && return 0
    for p in $(image_parents "$name"); do ensure_image "$p"; done
    [ -f "$(image_dir "$name")/Dockerfile" ] || die "unknown image '$name' (no $(image_dir "$name")/Dockerfile)"
    [ "$name" = operator ] && ensure_operator_wheels
    [ "$name" = nccl-benchmark ] && ensure_nccl_wheels
    key=$(compute_key "$name") || die "cannot compute the cache key of $name"
    ref=$(image_ref "$name")
    if [ "$(image_label "$ref")" = "$key" ]; then
        BUILT[$name]=$(image_id "$ref")
        log "$name: up to date ($ref, key ${key:0:12})"
        return 0
    fi
    mapfile -t args < <(image_build_args "$name")
    for a in "${args[@]}"; do bargs+=(--build-arg "$a"); done
    log "$name: building $ref (key ${key:0:12}) ..."
    t0=$(now)
    run_step "build $name" "$LOGS/build-$name.log" "${B[@]}" bud --isolation chroot --pull-never --format docker \
        --layers=false --label "$LABEL=$key" "${bargs[@]}" -f "$(image_dockerfile "$name")" -t "$ref" .
    BUILT[$name]=$(image_id "$ref")
    REBUILT+=("$name")
    [ -z "${REBUILT_MARKS:-}" ] || : >"$REBUILT_MARKS/$name"
    log "$name: built in $(since "$t0") s, $(image_size "$ref")"
}

# side_by_side FUNCTION NAME...: FUNCTION NAME for every NAME, IMAGE_JOBS at once, each in a subshell of its own
# (which changes nothing here); fails naming those that failed, once all have ended.
side_by_side() {
    local fn=$1 n running=0 failed=()
    shift
    local -A pids=()
    for n in "$@"; do
        if [ "$running" -ge "$IMAGE_JOBS" ]; then
            wait -n || true
            running=$((running - 1))
        fi
        "$fn" "$n" &
        pids[$n]=$!
        running=$((running + 1))
    done
    for n in "$@"; do
        wait "${pids[$n]}" || failed+=("$n")
    done
    [ ${#failed[@]} -eq 0 ] || die "$fn failed for: ${failed[*]} (their logs: $LOGS)"
}

# ensure_images NAME...: every named image and the images it is built on, IMAGE_JOBS at once, each started as soon as
# its parents are built (each in a subshell of its own, which changes nothing here: what it built is read back when
# it ends); fails naming what failed, once everything started has ended.
ensure_images() {
    local -a closure=() todo=() rest=() failed=()
    local -A running=() # pid -> image
    local n p ready pid status
    add_with_parents() {
        local x
        for x in $(image_parents "$1"); do add_with_parents "$x"; done
        [[ " ${closure[*]} " == *" $1 "* ]] || closure+=("$1")
    }
    for n in "$@"; do add_with_parents "$n"; done
    REBUILT_MARKS=$(mktemp -d)
    todo=("${closure[@]}")
    while :; do
        rest=()
        for n in "${todo[@]}"; do
            ready=1
            for p in $(image_parents "$n"); do [ -n "${BUILT[$p]:-}" ] || ready=0; done
            if [ "$ready" = 1 ] && [ ${#running[@]} -lt "$IMAGE_JOBS" ] && [ ${#failed[@]} -eq 0 ]; then
                ensure_image "$n" &
                running[$!]=$n
            else
                rest+=("$n")
            fi
        done
        todo=("${rest[@]}")
        [ ${#running[@]} -gt 0 ] || break
        pid=""
        wait -n -p pid "${!running[@]}" && status=0 || status=$?
        n=${running[$pid]}
        unset "running[$pid]"
        if [ "$status" = 0 ]; then
            BUILT[$n]=$(image_id "$(image_ref "$n")")
            [ ! -e "$REBUILT_MARKS/$n" ] || REBUILT+=("$n")
        else
            failed+=("$n")
        fi
    done
    rm -rf "$REBUILT_MARKS"
    REBUILT_MARKS=
    [ ${#failed[@]} -eq 0 ] || die "building failed: ${failed[*]} (their logs: $LOGS; not started: ${todo[*]:-none})"
}

image_size() {
    "${B[@]}" images --format '{{.Size}}' "$1" 2>/dev/null | head -n 1
}

# The archive of an image, made once per image id (older archives of the component are removed).
ensure_archive() {
    local name=$1 ref id file t0
    ref=$(image_ref "$name")
    id=${BUILT[$name]}
    file=$ARCHIVES/$name-${id:0:16}.tar
    if [ ! -f "$file" ]; then
        mkdir -p "$ARCHIVES"
        find "$ARCHIVES" -maxdepth 1 -name "$name-*.tar*" -delete
        t0=$(now)
        run_step "push $name" "$LOGS/push-$name.log" \
            "${B[@]}" push "$ref" "oci-archive:$file.tmp:$ref"
        mv -f "$file.tmp" "$file"
        log "$name: archive written in $(since "$t0") s ($(du -m "$file" | cut -f1) MB)"
    fi
    printf '%s\n' "$file"
}

# write_archive NAME: the archive made (ensure_archive), its path not printed: for side_by_side.
write_archive() { ensure_archive "$1" >/dev/null; }

import_wanted() {
    case $IMAGES_IMPORT in
        0 | no | false) return 1 ;;
        1 | yes | true) [ -x "$NODE_SH" ] || die "IMAGES_IMPORT=$IMAGES_IMPORT but $NODE_SH does not exist"; return 0 ;;
        auto) [ -x "$NODE_SH" ] ;;
        *) die "IMAGES_IMPORT must be auto, 1 or 0 (is '$IMAGES_IMPORT')" ;;
    esac
}

import_images() {
    local present name ref files=() names=() t0
    if ! import_wanted; then
        log "not importing ($NODE_SH not found or IMAGES_IMPORT=$IMAGES_IMPORT)"
        return 0
    fi
    present=$("$NODE_SH" images) || die "$NODE_SH images failed"
    for name in "$@"; do
        [ "$name" = slurm-base ] && continue # a build base only: no pod runs it
        ref=$(image_ref "$name")
        if grep -Fqx -- "$ref" <<<"$(awk '{print $1}' <<<"$present")" &&
            [ "$(cat "$IMPORTED/$name" 2>/dev/null)" = "${BUILT[$name]}" ]; then
            continue
        fi
        names+=("$name")
    done
    [ ${#names[@]} -eq 0 ] || side_by_side write_archive "${names[@]}"
    for name in "${names[@]}"; do files+=("$(ensure_archive "$name")"); done
    if [ ${#files[@]} -eq 0 ]; then
        log "the node already has every image ($*)"
        return 0
    fi
    t0=$(now)
    run_step import "$LOGS/import.log" "$NODE_SH" import "${files[@]}"
    mkdir -p "$IMPORTED"
    for name in "${names[@]}"; do printf '%s\n' "${BUILT[$name]}" >"$IMPORTED/$name"; done
    log "imported ${names[*]} in $(since "$t0") s"
}

# --- checks -----------------------------------------------------------------------------------------------------

# What each image's entrypoint needs, checked inside the built image (buildah run, chroot isolation).
image_check() {
    case $1 in
        slurm-base)
            cat <<'EOS'
for b in tini munged munge unmunge setpriv srun sbatch scontrol sinfo; do
    command -v "$b" >/dev/null || { echo "missing $b"; exit 1; }
done
test -f /usr/lib/slurmctl/chroot.so
test -x /usr/lib/slurmctl/entrypoint-worker && test -f /usr/lib/slurmctl/lib.sh
grep -Eq '^passwd:[[:space:]]+files extrausers$' /etc/nsswitch.conf
mkdir -p /tmp/j/etc && echo 'jailuser:x:2000:2000::/home/jailuser:/bin/bash' >/tmp/j/etc/passwd
echo 'jailuser:x:2000:' >/tmp/j/etc/group && echo 'jailuser:!:1::::::' >/tmp/j/etc/shadow
for f in passwd group shadow; do ln -sfn "/tmp/j/etc/$f" "/var/lib/extrausers/$f"; done
[ "$(id -u jailuser)" = 2000 ] || { echo "extrausers: jail users do not resolve"; exit 1; }
test -f /usr/lib/x86_64-linux-gnu/slurm-wlm/auth_munge.so
test -f /usr/lib/x86_64-linux-gnu/slurm-wlm/auth_jwt.so
ids="$(id -u munge):$(id -g munge):$(id -u slurm):$(id -g slurm)"
[ "$ids" = 990:990:64030:64030 ] || { echo "ids $ids"; exit 1; }
if command -v systemctl; then echo "systemd is installed"; exit 1; fi
install -d -o munge -g munge -m 0755 /tmp/k
dd if=/dev/urandom of=/tmp/k/munge.key bs=1024 count=1 status=none
chown munge:munge /tmp/k/munge.key && chmod 0400 /tmp/k/munge.key
setpriv --reuid=munge --regid=munge --init-groups munged --socket=/tmp/k/sock --key-file=/tmp/k/munge.key \
    --pid-file=/tmp/k/pid --seed-file=/tmp/k/seed --log-file=/tmp/k/log
rc=0
munge -S /tmp/k/sock -n | unmunge -S /tmp/k/sock | grep STATUS || rc=1
kill "$(cat /tmp/k/pid)"
munged -V
exit "$rc"
EOS
            ;;
        controller) echo 'slurmctld -V && test -d /var/spool/slurmctld && curl --version | head -n 1 && test -x /usr/lib/slurmctl/resume-nodes && test -x /usr/lib/slurmctl/await-nodes' ;;
        worker)
            echo 'slurmd -V && test -x /etc/slurmctl/complement-jail.d/50-nvidia'
            echo 'ls /usr/lib/x86_64-linux-gnu/slurm-wlm/ | grep -E "^(cgroup|proctrack|task)_"'
            ;;
        accounting) echo 'dpkg-query -W slurmdbd && ! ldd /usr/sbin/slurmdbd | grep "not found" && mariadb-dump --version' ;;
        rest)
            # slurmrestd lists its plugins only with a slurm.conf to read, and refuses to run as SlurmUser.
            cat <<'EOS'
[ "$(id -u slurmrestd):$(id -g slurmrestd)" = 991:991 ]
printf 'ClusterName=check\nSlurmctldHost=localhost\nSlurmUser=slurm\nAuthAltTypes=auth/jwt\n' >/tmp/slurm.conf
! ldd /usr/sbin/slurmrestd | grep "not found"
list() { SLURM_CONF=/tmp/slurm.conf SLURM_JWT=daemon setpriv --reuid=991 --regid=991 --clear-groups slurmrestd "$@" 2>&1; }
out=$(list -a list; list -s list)
echo "$out"
grep -qx 'rest_auth/jwt' <<<"$out" && grep -qx 'openapi/slurmctld' <<<"$out" && grep -qx 'openapi/slurmdbd' <<<"$out"
EOS
            ;;
        nccl-benchmark)
            # No GPU here: all_reduce_perf must load its libraries and say it could not run (exit 2).
            cat <<'EOS'
python3 --version && python3 -c "import ast, sys; ast.parse(open(sys.argv[1]).read())" /usr/lib/slurmctl/nccl-benchmark
b=/usr/lib/slurmctl/all-reduce-perf
test -x /usr/lib/slurmctl/install-all-reduce-perf && test -s $b/VERSION
if ldd $b/bin/all_reduce_perf | grep 'not found'; then exit 1; fi
rc=0; out=$($b/bin/all_reduce_perf -b 8M -e 8M 2>&1) || rc=$?
echo "$out"
[ "$rc" = 2 ] && grep -q 'could not run, no GPU to measure' <<<"$out"
EOS
            ;;
        login)
            cat <<'EOS'
test -x /usr/lib/openssh/sshd-session
id sshd
test -d /run/sshd
curl --version | head -n 1
if ls /etc/ssh/ssh_host_* 2>/dev/null; then echo "host keys baked in"; exit 1; fi
ssh-keygen -q -t ed25519 -N "" -f /tmp/hk
printf 'HostKey /tmp/hk\nUsePAM yes\nChrootDirectory /mnt/jail\nSubsystem sftp internal-sftp\n' >/tmp/c
/usr/sbin/sshd -t -f /tmp/c
# The version, from the server: on Debian forky openssh-server no longer brings openssh-client (ssh), which the
# login pod does not use (sessions run in the jail, which has its own).
/usr/sbin/sshd -V
EOS
            ;;
        jail)
            cat <<'EOS'
dpkg-query -W slurm-client
curl --version | head -n 1
if ldd /usr/bin/srun | grep 'not found'; then exit 1; fi
python3 --version
[ "$(id -u slurm):$(id -u munge)" = 64030:990 ]
test -d /run/munge -a -d /etc/slurm -a -d /usr/lib/slurmctl
EOS
            ;;
        populate-jail)
            echo 'rsync --version | head -n 1 && test -x /jail-rootfs/usr/bin/srun && test -x /usr/lib/slurmctl/populate-jail'
            ;;
        operator) echo 'slurmctl --help >/dev/null && python3 --version' ;;
        test-mariadb) echo 'mariadbd --version && command -v mariadb-install-db mariadb-admin tini' ;;
        test-slapd) echo 'slapd -VV 2>&1 | head -n 1 && command -v slapadd slappasswd ldapsearch tini' ;;
        sssd)
            cat <<'EOS'
sssd --version
c=/usr/lib/slurmctl/sssd-client
test -f $c/libnss_sss.so.2 -a -f $c/pam_sss.so -a -x $c/bin/sss_ssh_authorizedkeys
if LD_LIBRARY_PATH=$c/lib ldd $c/bin/sss_ssh_authorizedkeys.real | grep 'not found'; then exit 1; fi
EOS
            ;;
        *) ;;
    esac
}

cmd_check() {
    local n ref script c rc=0
    for n in "$@"; do
        script=$(image_check "$n")
        [ -n "$script" ] || continue
        ref=$(image_ref "$n")
        c=$("${B[@]}" from --pull-never "$ref") || die "no image $ref (build it first)"
        if "${B[@]}" run --isolation chroot --user 0:0 "$c" -- /bin/bash -euc "$script" >"$LOGS/check-$n.log" 2>&1; then
            log "$n: ok ($(tr '\n' ' ' <"$LOGS/check-$n.log" | cut -c1-100))"
        else
            log "$n: FAILED, see $LOGS/check-$n.log:"
            sed 's/^/    | /' "$LOGS/check-$n.log" >&2
            rc=1
        fi
        "${B[@]}" rm "$c" >/dev/null
    done
    return "$rc"
}

setup() {
    mkdir -p "$WORK" "$LOGS"
    ensure_apt_packages "${APT_PACKAGES[@]}"
    IMAGE_REGISTRY=${IMAGE_REGISTRY:-$(defaults_value IMAGE_REGISTRY)}
    IMAGE_TAG=${IMAGE_TAG:-$(defaults_value IMAGE_TAG)}$TAG_SUFFIX
    IMAGE_REGISTRY=${IMAGE_REGISTRY%/}
    # One build at a time per cache: buildah locks its storage, but the keys and archives are ours.
    exec 9>"$WORK/lock"
    flock 9
}

cmd_build() {
    local t0 names=("$@") n
    t0=$(now)
    [ ${#names[@]} -gt 0 ] || names=("${COMPONENTS[@]}")
    for n in "${names[@]}"; do
        [ "$n" = slurm-base ] || [[ " ${COMPONENTS[*]} " == *" $n "* ]] ||
            die "unknown component '$n' (known: slurm-base ${COMPONENTS[*]})"
    done
    ensure_base
    BASE_ID=$(image_id "$BASE_REF")
    ensure_images "${names[@]}"
    import_images "${names[@]}"
    if [ ${#REBUILT[@]} -eq 0 ]; then
        log "nothing rebuilt: every image is up to date ($(since "$t0") s)"
    else
        # Working containers left in our private storage (buildah 1.28 leaves the `FROM <image> AS stage` container of
        # populate-jail's `COPY --from`) hold whole vfs copies of old images; nothing else uses this storage.
        "${B[@]}" rm --all >/dev/null 2>&1 || true
        "${B[@]}" rmi --prune >/dev/null 2>&1 || true
        log "rebuilt ${REBUILT[*]} in $(since "$t0") s"
    fi
}

cmd_list() {
    local n ref id imported
    BASE_ID=$(image_id "$BASE_REF" || true)
    printf '%-16s %-44s %-14s %s\n' COMPONENT REFERENCE IMAGE-ID IMPORTED
    for n in slurm-base "${COMPONENTS[@]}"; do
        ref=$(image_ref "$n")
        id=$(image_id "$ref" || true)
        imported=no
        [ -n "$id" ] && [ "$(cat "$IMPORTED/$n" 2>/dev/null)" = "$id" ] && imported=yes
        [ "$n" = slurm-base ] && imported=-
        printf '%-16s %-44s %-14s %s\n' "$n" "$ref" "${id:0:12}" "$imported"
    done
}

cmd=${1:-build}
[ $# -gt 0 ] && shift
case $cmd in
    build)
        setup
        cmd_build "$@"
        ;;
    base)
        setup
        if [ "${1:-}" = --refresh ]; then ensure_base 1; else ensure_base; fi
        ;;
    list)
        setup
        cmd_list
        ;;
    check)
        setup
        [ $# -gt 0 ] || set -- slurm-base "${COMPONENTS[@]}"
        cmd_check "$@"
        ;;
    archive)
        setup
        [ $# -gt 0 ] || die "archive needs at least one component"
        ensure_base
        BASE_ID=$(image_id "$BASE_REF")
        for n in "$@"; do ensure_image "$n"; ensure_archive "$n"; done
        ;;
    -h | --help | help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' ;;
    *)
        # `hack/images.sh controller worker` means `build controller worker`.
        setup
        cmd_build "$cmd" "$@"
        ;;
esac
