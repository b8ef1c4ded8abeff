"""The workers' PodDisruptionBudget: evicting a worker pod whose Slurm node may still run a job is refused.

An eviction (`kubectl drain`, a node upgrade, the cluster autoscaler) goes through the API server's eviction API,
which refuses (HTTP 429, which `kubectl drain` retries every few seconds) to evict a pod a budget protects while the
budget allows no disruption. This budget selects every worker pod of the cluster (those labelled by releases before
the component was named `workers` too) that does not carry `slurm.slurmctl.io/evictable=true`, and allows none of
them to go (`maxUnavailable: 0`). The operator puts that label on a pod only while Slurm says no job can run there
(reconcilers/slurm_nodes.py), and takes it off when Slurm cannot be asked, so an eviction waits until the node is
drained and idle. The operator's own deletions are not evictions: they go through the drain gate
(reconcilers/drain.py).
"""

from __future__ import annotations

from typing import Any

from slurmctl.api.v1 import SlurmCluster
from slurmctl.render import meta
from slurmctl.render.kinds import PDB
from slurmctl.render.workers import COMPONENT, FORMER_COMPONENTS


def render_workers_disruption_budget(cluster: SlurmCluster) -> dict[str, Any]:
    c = meta.cluster_name(cluster)
    selector = {
        "matchLabels": {meta.LABEL_INSTANCE: c},
        "matchExpressions": [
            {"key": meta.LABEL_COMPONENT, "operator": "In", "values": sorted({COMPONENT, *FORMER_COMPONENTS})},
            {"key": meta.LABEL_EVICTABLE, "operator": "NotIn", "values": ["true"]},
        ],
    }
    return {
        "apiVersion": PDB.api_version,
        "kind": PDB.kind,
        "metadata": meta.object_meta(cluster, meta.workers_disruption_budget(c), COMPONENT),
        "spec": {"maxUnavailable": 0, "selector": selector},
    }
