#!/usr/bin/env bash
# `make run`: run the operator in the foreground against the cluster in KUBECONFIG, or against the embedded local
# cluster when KUBECONFIG is unset: control plane + a real node (started in .cluster/ and left running afterwards;
# `make cluster-down` stops it) and the images built here. Installs the CRD and RBAC, applies the minimal sample,
# waits until it is Available and shows the Slurm it became.
set -euo pipefail
VENV=${1:-.venv}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
SAMPLE=${SLURMCTL_SAMPLE:-config/samples/slurmcluster_minimal.yaml}
AVAILABLE_TIMEOUT=${SLURMCTL_AVAILABLE_TIMEOUT:-900}
HEALTH=${SLURMCTL_HEALTH_PROBE_BIND_ADDRESS:-127.0.0.1:8081}
export SLURMCTL_HEALTH_PROBE_BIND_ADDRESS=$HEALTH
export SLURMCTL_METRICS_BIND_ADDRESS=${SLURMCTL_METRICS_BIND_ADDRESS:-127.0.0.1:8080}
# The developer's own cluster: the hint at the end runs jobs as root in the jail (`kubectl exec ... chroot`), which
# the operator's default policy refuses (DisableRootJobs=YES). SLURMCTL_ALLOW_ROOT_JOBS=false runs the default.
export SLURMCTL_ALLOW_ROOT_JOBS=${SLURMCTL_ALLOW_ROOT_JOBS:-true}
LOG_PREFIX=run
# shellcheck source=hack/lib.sh
. "$ROOT/hack/lib.sh"

quiet_kubectl() { kubectl "$@" 2>&1 | grep -v '^Warning' || true; }

if [ -z "${KUBECONFIG:-}" ]; then
    log "KUBECONFIG is not set: using the embedded local cluster (control plane + node in .cluster/)"
    hack/control-plane.sh build
    hack/node.sh build
    # kubectl of the local cluster's own version, built with it.
    PATH="$(hack/control-plane.sh bin-dir):$PATH"
    export KUBECONFIG="$ROOT/.cluster/kubeconfig"
    hack/control-plane.sh up >/dev/null
    hack/node.sh up
    log "building and importing the images (cached: seconds when nothing changed)"
    PATH="$ROOT/$VENV/bin:$PATH" hack/images.sh build
    local_cluster=1
else
    local_cluster=0
fi
log "cluster: $(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')"
# Everything in config/default but the operator's Deployment and its metrics Service: this process is the operator
# (its /metrics is on $SLURMCTL_METRICS_BIND_ADDRESS).
kubectl kustomize config/default \
    | "$VENV/bin/python" -c 'import sys, yaml; yaml.safe_dump_all((d for d in yaml.safe_load_all(sys.stdin) if d and d.get("kind") not in ("Deployment", "Service")), sys.stdout)' \
    | quiet_kubectl apply --server-side -f - >&2
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
log "applying $SAMPLE (SlurmCluster $name); waiting up to ${AVAILABLE_TIMEOUT}s for it to be Available"
quiet_kubectl apply --server-side -f "$SAMPLE" >&2
deadline=$((SECONDS + AVAILABLE_TIMEOUT))
last=
while :; do
    kill -0 "$operator" 2>/dev/null || { wait "$operator"; exit $?; }
    phase=$(kubectl get slurmcluster "$name" -o jsonpath='{.status.phase}' 2>/dev/null || true)
    [ "$phase" = "$last" ] || { log "SlurmCluster $name: ${phase:-no status yet}"; last=$phase; }
    [ "$phase" = Available ] && break
    if [ $SECONDS -ge $deadline ]; then
        log "SlurmCluster $name is not Available after ${AVAILABLE_TIMEOUT}s; what there is:"
        quiet_kubectl get pods,jobs,pvc -o wide -l "app.kubernetes.io/instance=$name" >&2
        break
    fi
    sleep 2
done

login=$(kubectl get pods -l "app.kubernetes.io/instance=$name,app.kubernetes.io/component=login" \
    -o jsonpath='{.items[0].metadata.name}' 2>/dev/null || true)
{
    printf '\n--- SlurmCluster %s ---\n' "$name"
    quiet_kubectl get slurmcluster "$name"
    printf '\n'
    quiet_kubectl get pods -o wide -l "app.kubernetes.io/instance=$name"
    if [ "$phase" = Available ] && [ -n "$login" ]; then
        printf '\n$ kubectl exec %s -c sshd -- sinfo\n' "$login"
        quiet_kubectl exec "$login" -c sshd -- sinfo
        ip=$(kubectl get pod "$login" -o jsonpath='{.status.podIP}')
        printf '\nReach it:\n'
        printf '  KUBECONFIG=%s kubectl exec -it %s -c sshd -- chroot /mnt/jail bash -l   # a root shell in the jail\n' \
            "$KUBECONFIG" "$login"
        if [ "$local_cluster" = 1 ]; then
            printf '  ssh root@%s        # with a key from spec.login.sshRootPublicKeys (users: their key in the jail)\n' "$ip"
        fi
        printf '  then: sinfo; srun -N2 hostname; sbatch --wrap hostname\n'
    fi
} >&2
if [ "$phase" != Available ]; then
    log "failed: SlurmCluster $name is not Available after ${AVAILABLE_TIMEOUT}s (phase: ${phase:-none}); stopping the operator"
    kill -TERM "$operator" 2>/dev/null || true
    wait "$operator" || true
    exit 1
fi
if [ -z "$login" ] || ! kubectl exec "$login" -c sshd -- sinfo -h >/dev/null 2>&1; then
    log "failed: SlurmCluster $name is Available but sinfo does not answer on its login pod; stopping the operator"
    kill -TERM "$operator" 2>/dev/null || true
    wait "$operator" || true
    exit 1
fi
printf '\n%s\n\n' 'The operator keeps running (Ctrl-C stops it; make cluster-down stops the local cluster).' >&2
wait "$operator"
