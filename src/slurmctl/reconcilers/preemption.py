"""Kubernetes nodes about to go away: a spot or preemptible machine the cloud has warned about, or one its maintenance
takes. Their taints say so minutes (AWS: two) or seconds (GCP: thirty) before the machine stops; Slurm would learn of
it only once slurmd stops answering, and then requeue the jobs a `SlurmdTimeout` later.

So a worker whose Kubernetes node has one of the operator's preemption taints (`--preemption-taints`, the cluster
admin's list; the default below has the clouds' involuntary ones) is drained in Slurm at once (no new job lands), and
set DOWN when jobs run there: Slurm requeues its batch jobs (a requeued job starts again on another node; interactive
steps end, as they would with the machine), and the pod becomes evictable for the drain that follows. When the taint
goes without the machine (a warning withdrawn), the node is resumed like any drain of slurmctl's.

Voluntary disruptions are left out of the default on purpose: the cluster autoscaler and Karpenter's consolidation
taint a node and then respect the workers' PodDisruptionBudget, so the jobs finish first (a cluster whose Karpenter
forces a `terminationGracePeriod` can add `karpenter.sh/disrupted`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from slurmctl.reconcilers.observed import Live, WorkerPod
from slurmctl.slurm import Node

DEFAULT_PREEMPTION_TAINTS = (
    "cloud.google.com/impending-node-termination",  # GKE: a preemptible or spot VM about to be reclaimed
    "aws-node-termination-handler/spot-itn",  # AWS Node Termination Handler: a spot interruption notice
    "aws-node-termination-handler/scheduled-maintenance",  # ... and an EC2 scheduled event
)


def preemption_taint(node: Live | None, keys: Collection[str]) -> str | None:
    """The first of `keys` among the node's taints (any effect), if any."""
    for taint in ((node or {}).get("spec") or {}).get("taints") or ():
        if taint.get("key") in keys:
            return str(taint["key"])
    return None


def to_set_down(
    workers: Iterable[WorkerPod],
    nodes: Mapping[str, Node],
    running: Mapping[str, tuple[int, ...]],
    *,
    preempted: Collection[str],
) -> list[str]:
    """The preempted workers whose Slurm node still runs jobs and is not DOWN yet: Slurm requeues them once it is."""
    out = []
    for worker in workers:
        node = nodes.get(worker.name)
        busy = node is not None and (worker.name in running or node.busy)
        if worker.name in preempted and busy and node is not None and node.base != "DOWN":
            out.append(worker.name)
    return sorted(out)


def preempted_message(name: str, host: str, taint: str, jobs: tuple[int, ...]) -> str:
    listed = ", ".join(map(str, jobs)) or "none listed"
    going = f"its Kubernetes node {host} is going away (taint {taint})"
    return f"set {name} DOWN in Slurm: {going}; Slurm requeues jobs {listed}"
