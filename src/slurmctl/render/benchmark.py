"""The `benchmark` component: the CronJob that runs the NCCL benchmark on every idle GPU node through Slurm.

The Job is a Slurm client: it gets the Slurm configs and the munge key and starts munged itself (entrypoint-nccl-
benchmark), then `srun`s all_reduce_perf on the nodes. Those steps run inside the jail, so the Job also mounts the jail
volume: before benchmarking it installs the image's own all_reduce_perf (and the NCCL it loads) there, once per image
build (images/scripts/install-all-reduce-perf). It is rendered whenever the cluster has GPU groups and is suspended
while the benchmark is disabled, so toggling `enabled` is one field, not a create/delete.

What a run found is its container's termination message: one line of JSON (images/scripts/nccl_benchmark.py, `report`)
that the benchmark reconciler reads from the Job's pod, which the operator already watches (its own pods carry the
owned-children labels): no ConfigMap to write, no permission to add. A run that died before writing it falls back to
the tail of its log.
"""

from __future__ import annotations

import math
from typing import Any

from slurmctl.api.v1 import SlurmCluster, parse_quantity
from slurmctl.render import meta, pods
from slurmctl.render.kinds import CRONJOB
from slurmctl.render.slurm_conf import JAIL_PATH

COMPONENT = "benchmark"
CONTAINER = "nccl-benchmark"
# Where the benchmark leaves its report; the kubelet falls back to the log's tail when it ends in error without one.
TERMINATION_MESSAGE_PATH = "/dev/termination-log"
ENTRYPOINT = ["/usr/bin/tini", "--", "/usr/lib/slurmctl/entrypoint-nccl-benchmark"]
HISTORY_LIMIT = 3
# A schedule missed by more than this (operator or controller-manager down) is skipped rather than run late.
STARTING_DEADLINE_SECONDS = 600
# timeoutSeconds bounds each node's run (they run in parallel); the Job also starts munged, asks Slurm for idle nodes
# and drains failed ones, so it gets this much longer before Kubernetes kills it.
DEADLINE_GRACE_SECONDS = 120


# The limit leaves room for the page cache of the first run's copy of all_reduce_perf into the jail (about 420 MB).
def _bytes(quantity: int | str) -> str:
    """Plain bytes: the benchmark reads 512M as 512 MiB, so Kubernetes' decimal and binary suffixes end here."""
    return str(max(1, math.floor(parse_quantity(quantity))))


def benchmark_env(cluster: SlurmCluster) -> list[dict[str, Any]]:
    nccl = cluster.spec.health_checks.nccl_benchmark
    # --gpus-per-node must fit every benchmarked node: the smallest GPU group decides.
    gpus = min((g.gpus for g in cluster.spec.gpu_groups), default=1)
    values = {
        "NCCL_MIN_BYTES": _bytes(nccl.min_bytes),
        "NCCL_MAX_BYTES": _bytes(nccl.max_bytes),
        "NCCL_STEP_FACTOR": str(nccl.step_factor),
        "NCCL_MIN_BUS_BANDWIDTH_GBPS": f"{nccl.min_bus_bandwidth_gbps:g}",
        "NCCL_DRAIN_ON_FAILURE": "true" if nccl.drain_on_failure else "false",
        "NCCL_TIMEOUT_SECONDS": str(nccl.timeout_seconds),
        "GPUS_PER_NODE": str(gpus),
        "JAIL_DIR": JAIL_PATH,
        "TERMINATION_LOG": TERMINATION_MESSAGE_PATH,
    }
    return [{"name": name, "value": value} for name, value in values.items()]


def render_benchmark_cronjob(cluster: SlurmCluster) -> dict[str, Any]:
    c = meta.cluster_name(cluster)
    nccl = cluster.spec.health_checks.nccl_benchmark
    benchmark = {
        "name": CONTAINER,
        "image": cluster.spec.image_for("nccl-benchmark", nccl.image),
        "command": list(ENTRYPOINT),
        "env": benchmark_env(cluster),
        "volumeMounts": [*pods.slurm_mounts(), {"name": "jail", "mountPath": JAIL_PATH}],
        "resources": pods.resources(nccl.resources),
        "terminationMessagePath": TERMINATION_MESSAGE_PATH,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        # Root to install the munge key and start munged (as munge), the benchmark as SlurmUser; KILL to stop munged
        # at the end (another user's process).
        "securityContext": pods.root_then_drop(),
    }
    return {
        "apiVersion": CRONJOB.api_version,
        "kind": "CronJob",
        "metadata": meta.object_meta(cluster, meta.nccl_benchmark(c), COMPONENT),
        "spec": {
            "schedule": nccl.schedule,
            "suspend": not nccl.enabled,
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": STARTING_DEADLINE_SECONDS,
            "successfulJobsHistoryLimit": HISTORY_LIMIT,
            "failedJobsHistoryLimit": HISTORY_LIMIT,
            "jobTemplate": {
                "metadata": {"labels": meta.labels(c, COMPONENT)},
                "spec": {
                    # A failed run has already drained what failed; a retry would only benchmark the rest again.
                    "backoffLimit": 0,
                    "activeDeadlineSeconds": nccl.timeout_seconds + DEADLINE_GRACE_SECONDS,
                    "template": {
                        "metadata": pods.pod_metadata(nccl, meta.labels(c, COMPONENT)),
                        "spec": {
                            "automountServiceAccountToken": False,
                            "restartPolicy": "Never",
                            "containers": [benchmark],
                            "volumes": [*pods.slurm_volumes(c), pods.volume("jail", cluster.spec.jail.volume)],
                            **pods.pod_settings(nccl, cluster.spec.slurm.image_pull_secrets),
                        },
                    },
                },
            },
        },
    }
