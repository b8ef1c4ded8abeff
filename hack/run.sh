#!/usr/bin/env bash
# `make run`: run the operator in the foreground against the cluster in KUBECONFIG, or against the embedded local
# control plane (started in .cluster/ and left running afterwards; `make cluster-down` stops it) when KUBECONFIG is
# unset. Installs the CRD and RBAC, applies the minimal sample and prints what the operator made of it.
set -euo pipefail
VENV=${1:-.venv}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
SAMPLE=${SLURMCTL_SAMPLE:-config/samples/slurmcluster_minimal.yaml}
HEALTH=${SLURMCTL_HEALTH_PROBE_BIND_ADDRESS:-127.0.0.1:8081}
export SLURMCTL_HEALTH_PROBE_BIND_ADDRESS=$HEALTH
export SLURMCTL_METRICS_BIND_ADDRESS=${SLURMCTL_METRICS_BIND_ADDRESS:-127.0.0.1:8080}

log() { printf 'run: %s\n' "$*" >&2; }

if [ -z "${KUBECONFIG:-}" ]; then
    log "KUBECONFIG is not set: using the embedded local control plane"
    hack/control-plane.sh build
    export KUBECONFIG="$ROOT/.cluster/kubeconfig"
    hack/control-plane.sh up >/dev/null
fi
log "cluster: $(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')"
# Everything in config/default but the operator's Deployment: this process is the operator.
kubectl kustomize config/default \
    | "$VENV/bin/python" -c 'import sys, yaml; yaml.safe_dump_all((d for d in yaml.safe_load_all(sys.stdin) if d and d.get("kind") != "Deployment"), sys.stdout)' \
    | kubectl apply --server-side -f - 2>&1 | grep -v '^Warning' >&2
kubectl wait --for=condition=Established crd/slurmclusters.slurm.slurmctl.io --timeout=60s >/dev/null 2>&1

log "starting the operator (Ctrl-C stops it)"
"$VENV/bin/slurmctl" run &
operator=$!
trap 'kill -TERM "$operator" 2>/dev/null || true' INT TERM
deadline=$((SECONDS + 60))
until curl -fs "http://$HEALTH/readyz" >/dev/null 2>&1; do
    kill -0 "$operator" 2>/dev/null || { wait "$operator"; exit $?; }
    [ $SECONDS -lt $deadline ] || { log "the operator did not become ready within 60s"; break; }
    sleep 0.5
done

name=$(awk '/^kind: SlurmCluster/ {f=1} f && /^  name:/ {print $2; exit}' "$SAMPLE")
log "applying $SAMPLE (SlurmCluster $name)"
kubectl apply --server-side -f "$SAMPLE" 2>&1 | grep -v '^Warning' >&2
for _ in $(seq 1 40); do
    [ -n "$(kubectl get statefulset -l "app.kubernetes.io/instance=$name" -o name 2>/dev/null)" ] && break
    sleep 0.5
done
{
    printf '\n--- what slurmctl created for SlurmCluster %s ---\n' "$name"
    kubectl get statefulsets,services,configmaps,secrets,jobs -l "app.kubernetes.io/instance=$name" 2>&1 | grep -v '^Warning'
    printf '\n'
    kubectl get slurmcluster "$name" 2>&1 | grep -v '^Warning'
    printf '\n(there is no kubelet on the embedded control plane: pods stay Pending, so the phase stays Reconciling)\n\n'
} >&2
wait "$operator"
