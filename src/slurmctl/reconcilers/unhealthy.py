"""Unhealthy workers are replaced: what the Slurm node loop (reconcilers/slurm_nodes.py) does about a worker that one
of slurmctl's own health checks drained, in a worker group with `replaceUnhealthy: true`.

The health checks drain with a reason of their own: `slurmctl-gpu:` (images/scripts/gpu-healthcheck, run by slurmd)
and `slurmctl-nccl:` (images/scripts/nccl_benchmark.py). Neither is `slurmctl:` (the drain gate's and the cordon's,
reconcilers/drain.py), so the drain rule (drain.upkeep) never resumes nor re-drains them; any other reason is an
administrator's and is never acted on here.

A worker is replaced when its Slurm node carries such a drain (the DRAIN flag), runs no job (no active job lists it
and Slurm does not say it is busy), and its pod is Ready, not being deleted, not leaving (the drain gate's) and not
on a lost Kubernetes node (reconcilers/lost_nodes.py's). The Slurm node loop then

1. cordons its Kubernetes node (`spec.unschedulable`), labels it `slurm.slurmctl.io/unhealthy=<gpu|nccl>` and
   annotates it with the Slurm reason (`slurm.slurmctl.io/unhealthy-reason`): no pod lands there any more, and an
   administrator sees why. It is never uncordoned by slurmctl: that is the administrator's, once it is repaired;
2. deletes the pod (only this incarnation: a uid precondition; with its grace period: its preStop deletes the Slurm
   node), so that its StatefulSet re-creates it on another node, where its slurmd registers as a new node;
3. says so in an Event `Replacing` on the SlurmCluster, naming the check, Slurm's reason and the Kubernetes node.

Never a pod on a control-plane node (its node is never cordoned: the API server's machine is not the operator's to
take out of service), and at most CORDON_BURST Kubernetes nodes cordoned per CORDON_WINDOW seconds by the whole
operator (`CordonBudget`): a health check that fails everywhere at once (a bad driver, a broken benchmark image) does
not cordon a fleet. The cluster admin's node-cordon opt-in (--allow-node-cordon and its RBAC) comes first: without
it a group with replaceUnhealthy is refused (api/v1/policy.py).

At most one pod of a group at a time: none while another pod of the group is not Ready, being deleted, leaving,
missing (its StatefulSet has not re-created it yet) or was just replaced (its deletion not seen in the cache yet).
The cordon then drains the other workers on that Kubernetes node (`slurmctl: Kubernetes node N is cordoned`), as any
cordon does, so that they can be moved off it too.

Never twice for the same drain: a drain Slurm set before the pod was created is an older pod's (a new pod whose
slurmd took the old node's record over, when the preStop could not delete it), and the operator also remembers each
replacement (the pod's uid, the reason and when Slurm set it) until the pod is gone and its Slurm node no longer
carries that drain. The GPU health check resumes a node it drained once it finds it healthy. A pod on a Kubernetes
node that is not Ready is not replaced (its kubelet could not run the preStop; lost nodes are lost_nodes.py's), and
holds its group's other replacements back. Nothing is done when Slurm cannot be asked (the pass ends
before this).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from slurmctl.api.v1 import WorkerGroup
from slurmctl.reconcilers.drain import statefulset_of
from slurmctl.reconcilers.observed import WorkerPod
from slurmctl.render import meta
from slurmctl.runtime.clock import Clock
from slurmctl.slurm import Node

# The drain reason prefix of each of slurmctl's health checks -> the check's short name (the Node label's value).
HEALTH_CHECKS: Mapping[str, str] = {"slurmctl-gpu:": "gpu", "slurmctl-nccl:": "nccl"}
CHECK_NAMES: Mapping[str, str] = {"gpu": "GPU health check", "nccl": "NCCL benchmark"}
LABEL_UNHEALTHY = "slurm.slurmctl.io/unhealthy"
ANNOTATION_UNHEALTHY_REASON = "slurm.slurmctl.io/unhealthy-reason"
CORDON_BURST, CORDON_WINDOW = 3, 600.0


class CordonBudget:
    """How many Kubernetes nodes the operator may still cordon now: CORDON_BURST per CORDON_WINDOW seconds (by the
    operator's monotonic clock), for every cluster together."""

    def __init__(self, clock: Clock, burst: int = CORDON_BURST, window: float = CORDON_WINDOW) -> None:
        self.clock, self.burst, self.window = clock, burst, window
        self._spent: deque[float] = deque()

    def allows(self) -> bool:
        now = self.clock.monotonic()
        while self._spent and now - self._spent[0] >= self.window:
            self._spent.popleft()
        return len(self._spent) < self.burst

    def spend(self) -> None:
        self._spent.append(self.clock.monotonic())


def health_check(node: Node | None) -> str | None:
    """Which of slurmctl's health checks drained this Slurm node ("gpu" or "nccl"); None when it is not drained, or
    drained for another reason (an administrator's, or slurmctl's own `slurmctl:` drains)."""
    if node is None or not node.drain:
        return None
    return next((check for prefix, check in HEALTH_CHECKS.items() if node.reason.startswith(prefix)), None)


@dataclass(frozen=True)
class Replacement:
    """A worker pod to move off its Kubernetes node, and the drain that says why."""

    pod: str
    uid: str
    group: str
    k8s_node: str
    check: str  # "gpu" or "nccl"
    reason: str  # Slurm's drain reason
    since: datetime | None  # when Slurm set it

    def same_drain(self, node: Node | None) -> bool:
        """Whether `node` still carries the drain this replacement was for."""
        return node is not None and node.drain and (node.reason, node.reason_changed_at) == (self.reason, self.since)


def judge_unhealthy(
    c: str,
    groups: Sequence[WorkerGroup],
    pods: Iterable[WorkerPod],
    nodes: Mapping[str, Node],
    running: Mapping[str, tuple[int, ...]],
    *,
    leaving: Collection[str] = (),
    lost: Collection[str] = (),
    replaced: Mapping[str, Replacement] | None = None,
    protected: Collection[str] = (),
) -> list[Replacement]:
    """At most one pod of each opted-in group to replace now, from one read of Slurm (`nodes`: the cluster's Slurm
    nodes by name; `running`: drain.jobs_by_node of the same read). `leaving`: pod names the drain gate is moving;
    `lost`: pod names on lost Kubernetes nodes; `replaced`: the replacements made before, by pod name; `protected`:
    Kubernetes nodes never cordoned (control-plane nodes)."""
    replaced = replaced or {}
    by_set: dict[str, list[WorkerPod]] = {}
    for pod in pods:
        by_set.setdefault(statefulset_of(pod.name), []).append(pod)
    acted = {r.uid for r in replaced.values()}
    out: list[Replacement] = []
    for group in groups:
        if not group.replace_unhealthy:
            continue
        statefulset = meta.worker_group(c, group.name)
        members = sorted(by_set.get(statefulset, []), key=lambda p: (len(p.name), p.name))
        present = {pod.name for pod in members}
        if group.autoscale is None and any(f"{statefulset}-{i}" not in present for i in range(group.size)):
            continue  # a pod not (re-)created yet: it may be the one being replaced (an elastic group has no size)
        if any(
            not pod.ready or pod.terminating or pod.name in leaving or pod.name in lost or pod.uid in acted
            for pod in members
        ):
            continue  # one at a time: another member is not serving
        for pod in members:
            node = nodes.get(pod.name)
            check = health_check(node)
            if check is None or node is None or not pod.node_name or not pod.uid or pod.node_name in protected:
                continue
            if pod.name in running or node.busy:
                continue  # its jobs finish first (the drain lets no new one start)
            if node.reason_changed_at and pod.created and node.reason_changed_at < pod.created:
                continue  # drained before this pod existed: an older pod's drain, carried over to this one
            before = replaced.get(pod.name)
            if before is not None and before.same_drain(node):
                continue  # the old pod's drain, carried over to its new pod: not this pod's
            since = node.reason_changed_at
            out.append(Replacement(pod.name, pod.uid, group.name, pod.node_name, check, node.reason, since))
            break
    return out


def still_remembered(
    replaced: Mapping[str, Replacement], pods: Iterable[WorkerPod], nodes: Mapping[str, Node]
) -> dict[str, Replacement]:
    """The replacements worth remembering: while the replaced pod is still in the cache, or its Slurm node (perhaps
    taken over by the new pod) still carries the drain it was replaced for."""
    uids = {pod.uid for pod in pods}
    return {name: r for name, r in replaced.items() if r.uid in uids or r.same_drain(nodes.get(name))}


def cordon_patch(r: Replacement) -> dict[str, Any]:
    """The Kubernetes node's cordon, its label and the Slurm reason: no pod lands there any more, and an administrator
    sees why. Never undone here: uncordoning is the administrator's, once it is repaired."""
    return {
        "metadata": {"labels": {LABEL_UNHEALTHY: r.check}, "annotations": {ANNOTATION_UNHEALTHY_REASON: r.reason}},
        "spec": {"unschedulable": True},
    }


def replacing_message(r: Replacement) -> str:
    return (
        f"replacing Pod {r.pod} (uid {r.uid}): the {CHECK_NAMES[r.check]} drained it in Slurm ({r.reason}); "
        f"cordoned Kubernetes node {r.k8s_node} ({LABEL_UNHEALTHY}={r.check}; uncordon it once repaired) and "
        "deleted the pod, which its StatefulSet re-creates on another node"
    )
