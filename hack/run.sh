#!/usr/bin/env bash
# `make run`: run the operator in the foreground against the cluster in KUBECONFIG, or against the embedded local
# control plane (started in .cluster/ and left running afterwards; `make cluster-down` stops it) when KUBECONFIG is
# unset.
set -euo pipefail
VENV=${1:-.venv}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

log() { printf 'run: %s\n' "$*" >&2; }

if [ -z "${KUBECONFIG:-}" ]; then
    log "KUBECONFIG is not set: using the embedded local control plane"
    hack/control-plane.sh build
    export KUBECONFIG="$ROOT/.cluster/kubeconfig"
    hack/control-plane.sh up >/dev/null
fi
log "cluster: $(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')"
log "starting the operator (Ctrl-C stops it)"
exec "$VENV/bin/slurmctl" run
