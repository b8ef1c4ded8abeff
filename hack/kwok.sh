#!/usr/bin/env bash
# KWOK's controller (sigs.k8s.io/kwok, the version hack/deps/kwok/go.mod pins), built from the Go module proxy with
# the Go in /usr/local/go, for the scale harness (bench/bench_scale_sim.py, test/e2e/test_scale_sim.py): it keeps
# simulated Nodes Ready and makes the pods bound to them "run", so a thousand nodes cost an API object each, not a
# kubelet each (docs/performance.md).
#
#   hack/kwok.sh build    build and cache the kwok binary and its Stage configuration (once per version)
#   hack/kwok.sh bin      print the cached binary's path (fails when not built)
#   hack/kwok.sh config   print the cached Stage configuration's path (pass it to `kwok --config`)
#
# The harness starts and stops the controller itself (by PID), against the control plane of hack/control-plane.sh,
# managing only Nodes annotated kwok.x-k8s.io/node=fake, so it never touches a real node of hack/node.sh.
#
# Environment:
#   SLURMCTL_CACHE   binary cache (default: ~/.cache/slurmctl)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${SLURMCTL_CACHE:-$HOME/.cache/slurmctl}
STATE=${SLURMCTL_CLUSTER_DIR:-$ROOT/.cluster}
LOG_PREFIX=kwok
# shellcheck source=hack/lib.sh
. "$ROOT/hack/lib.sh"

KWOK_DEPS=$ROOT/hack/deps/kwok
KWOK_MODULE=sigs.k8s.io/kwok

kwok_dir() { printf '%s/kwok-%s' "$CACHE" "$(module_version "$KWOK_DEPS" "$KWOK_MODULE")"; }

# The Stages kwokctl gives its clusters by default, from the module's own kustomize/stage files: nodes initialize to
# Ready and renew a Lease (the node lifecycle controller then never marks them unreachable, and a Node's status is
# not rewritten on every heartbeat); pods become Ready at once, a Job's pods complete, deleted pods go.
STAGE_FILES=(
    kustomize/stage/node/fast/node-initialize.yaml
    kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml
    kustomize/stage/pod/fast/pod-ready.yaml
    kustomize/stage/pod/fast/pod-complete.yaml
    kustomize/stage/pod/fast/pod-delete.yaml
)

# Built once under a lock: the control-plane suite's workers and `make bench` may ask at the same time.
build_kwok() {
    local out logs=$CACHE/logs ver lock GO_BUILD_CACHE=$CACHE/go/build-kwok src f
    out=$(kwok_dir)
    ver=$(module_version "$KWOK_DEPS" "$KWOK_MODULE")
    mkdir -p "$logs"
    exec {lock}>"$CACHE/kwok-build.lock"
    flock -w 1200 "$lock" || die "waited 20 minutes for another kwok build ($CACHE/kwok-build.lock)"
    if cached_bins "$out/bin" kwok && [ -f "$out/stages.yaml" ]; then
        log "kwok $ver cached in $out"
        return 0
    fi
    rm -rf "$out.tmp"
    mkdir -p "$out.tmp/bin"
    run_step kwok-build "$logs/kwok-build.log" in_dir "$KWOK_DEPS" go_env build -trimpath \
        -ldflags "-s -w" -o "$out.tmp/bin/kwok" "$KWOK_MODULE/cmd/kwok"
    src=$(in_dir "$KWOK_DEPS" go_env list -m -f '{{.Dir}}' "$KWOK_MODULE")
    for f in "${STAGE_FILES[@]}"; do
        [ -f "$src/$f" ] || die "kwok $ver has no $f"
        printf -- '---\n' >>"$out.tmp/stages.yaml"
        cat "$src/$f" >>"$out.tmp/stages.yaml"
    done
    rm -rf "$GO_BUILD_CACHE" "$out"
    mv "$out.tmp" "$out"
    log "built kwok $ver into $out"
}

case "${1:-}" in
build) build_kwok ;;
bin)
    cached_bins "$(kwok_dir)/bin" kwok || die "kwok not built; run 'hack/kwok.sh build' first"
    printf '%s\n' "$(kwok_dir)/bin/kwok"
    ;;
config)
    [ -f "$(kwok_dir)/stages.yaml" ] || die "kwok not built; run 'hack/kwok.sh build' first"
    printf '%s\n' "$(kwok_dir)/stages.yaml"
    ;;
*)
    printf 'usage: %s build|bin|config\n' "$0" >&2
    exit 2
    ;;
esac
