# shellcheck shell=bash
# hack/node.sh's images: `import`, `images`, `build-image` (buildah, never pulls), the pause image compiled on the host,
# and `build` (what `up` needs cached: kube binaries, apt packages, containerd, the pause image). Sourced by
# hack/node.sh; sets no shell options.

import_files() {
    local f
    for f in "$@"; do
        log "importing $f"
        ctr_at "$STORE_SOCK" images import --snapshotter overlayfs "$f" >&2 || {
            log "error: ctr images import $f failed"
            return 1
        }
    done
}

list_images() {
    ctr_at "$STORE_SOCK" images ls -q | grep -v '^sha256:' || true
}

cmd_import() {
    [ $# -gt 0 ] || die "usage: hack/node.sh import FILE..."
    local f
    for f in "$@"; do
        [ -f "$f" ] || die "no such file: $f"
    done
    with_store import_files "$@"
    local k
    for k in $(extra_numbers); do
        extra_node "$k"
        daemon_running "containerd-$k" || continue
        STORE_SOCK=$XSOCK import_files "$@"
    done
}

cmd_images() {
    with_store list_images
}

# build_image TAG CONTEXT [DOCKERFILE]: buildah build (never pulls) and import into the store.
build_image() {
    local tag=$1 context=$2 dockerfile=${3:-$2/Dockerfile}
    ensure_apt_packages buildah runc
    mkdir -p "$CACHE/logs" "$CACHE/buildah"
    local name logname
    name=$(printf '%s' "$tag" | tr -c 'A-Za-z0-9._-' '_')
    logname="$CACHE/logs/build-$name.log"
    run_step "build $tag" "$logname" "${BUILDAH[@]}" bud --isolation chroot --pull-never --format docker \
        -f "$dockerfile" -t "$tag" "$context"
    local archive
    archive=$(mktemp /tmp/slurmctl-image.XXXXXX.tar)
    rm -f "$archive"
    run_step "push $tag" "$CACHE/logs/push-$name.log" "${BUILDAH[@]}" push "$tag" "oci-archive:$archive:$tag"
    cmd_import "$archive"
    rm -f "$archive"
}

cmd_build_image() {
    [ $# -ge 2 ] || die "usage: hack/node.sh build-image TAG CONTEXT [DOCKERFILE]"
    build_image "$@"
}

# The pause image: compiled on the host (no image with a compiler exists here, nothing is pulled) into a build
# context with images/pause/Dockerfile.
ensure_pause_image() {
    if [ -n "${STORE_SOCK:-}" ] && ctr_at "$STORE_SOCK" images ls -q "name==$PAUSE_IMAGE" | grep . >/dev/null; then
        return 0
    fi
    local ctx start=$SECONDS
    ctx=$(mktemp -d /tmp/slurmctl-pause.XXXXXX)
    cp "$ROOT/images/pause/Dockerfile" "$ctx/"
    gcc -Os -static -Wall -Werror -o "$ctx/pause" "$ROOT/images/pause/pause.c" || die "compiling images/pause/pause.c"
    strip "$ctx/pause" 2>/dev/null || true
    build_image "$PAUSE_IMAGE" "$ctx"
    rm -rf "$ctx"
    log "pause image $PAUSE_IMAGE built and imported in $((SECONDS - start))s"
}

has_pause_image() {
    list_images | grep -x "$PAUSE_IMAGE" >/dev/null
}

cmd_build() {
    KUBE_BUILD=all "$ROOT/hack/control-plane.sh" build
    ensure_apt_packages "${NODE_PACKAGES[@]}"
    ensure_containerd
    if with_store has_pause_image; then
        log "pause image $PAUSE_IMAGE present"
    else
        STORE_SOCK='' ensure_pause_image
    fi
}
