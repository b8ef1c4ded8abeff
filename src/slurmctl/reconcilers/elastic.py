"""Elastic worker groups (`autoscale`): which pods to create and delete, decided purely from one Slurm snapshot.

Slurm decides, slurmctl follows. Every node of the range is a CLOUD node in nodes.conf (render/slurm_conf.py), so Slurm
allocates powered-down nodes to jobs and powers them up itself (ResumeProgram does nothing); slurmctl sees POWERING_UP
and creates the node's pod, whose slurmd registers, and the job starts. A node idle for the group's idleTime is
powered down by Slurm (its power partition's SuspendTime); slurmctl sees POWERING_DOWN or POWERED_DOWN and deletes the
pod. A node whose pod could not be placed or started within resumeTimeout is set DOWN by Slurm (reason "ResumeTimeout
reached", its batch jobs requeued) and POWERED_DOWN, and its pod goes the same way.

Fail-safe: nothing is decided without a snapshot (the caller asks Slurm first), and a node an active job lists keeps
its pod whatever its power state says. Fixed-size groups are not planned here (StatefulSets,
reconcilers/workers/plan.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slurmctl.api.v1 import WorkerGroup, WorkerGroupStatus
from slurmctl.reconcilers.observed import deleting, pod_ready
from slurmctl.reconcilers.views import Pod, condition
from slurmctl.render import meta
from slurmctl.runtime.objects import ObjectMeta, meta_of
from slurmctl.slurm import Node

# With elastic groups, the Slurm node loop polls Slurm's power states at least this often (Slurm's power saving itself
# acts about every 10 s); a new state wakes the workers component (SlurmAccess.listen).
ELASTIC_POLL_SECONDS = 10.0
# What the kubelet says of a container that cannot start from its image.
_IMAGE_FAILURES = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})


@dataclass(frozen=True)
class ElasticPlan:
    """One pass over the elastic groups."""

    create: tuple[tuple[WorkerGroup, int], ...] = ()  # (group, index): pods to create
    delete: tuple[tuple[str, str], ...] = ()  # (pod, why)
    power_up: tuple[str, ...] = ()  # powered-down nodes to resume so that `min` are up
    rows: tuple[WorkerGroupStatus, ...] = ()
    problems: tuple[str, ...] = ()  # pods that cannot be placed or started, nodes that did not resume: a person's
    in_flight: bool = False  # a node powering up or down, or a pod on its way: look again soon


def node_names(c: str, group: WorkerGroup) -> list[str]:
    return [f"{meta.worker_group(c, group.name)}-{i}" for i in range(group.node_count)]


def why_not_running(pod: Mapping[str, Any]) -> str:
    """Why a pending pod does not run, when that needs a person: the scheduler cannot place it, or its image cannot
    be pulled. "" while it is merely on its way."""
    status = Pod.of(pod).status
    scheduled = condition(status.conditions, "PodScheduled")
    if scheduled is not None and scheduled.status == "False" and scheduled.reason == "Unschedulable":
        return f"cannot be placed: {scheduled.message or 'Unschedulable'}"
    for container in (*status.init_container_statuses, *status.container_statuses):
        waiting = container.state.waiting
        if waiting is not None and waiting.reason in _IMAGE_FAILURES:
            detail = f"{waiting.reason} {waiting.message}".strip()
            return f"container {container.name} cannot start: {detail}"
    return ""


def resume_failed(node: Node) -> bool:
    """Slurm gave up on the node: not up within ResumeTimeout, so DOWN (and powered down) until someone resumes it."""
    return node.base == "DOWN" and "POWERED_DOWN" in node.state and "ResumeTimeout" in node.reason


def plan_elastic(
    c: str,
    groups: Sequence[WorkerGroup],
    pods: Mapping[str, Mapping[str, Any]],
    nodes: Mapping[str, Node],
    running: Mapping[str, tuple[int, ...]],
) -> ElasticPlan:
    """`pods`: the cluster's worker pods by name; `nodes`: Slurm's nodes by name; `running`: the active jobs by node
    (drain.jobs_by_node), all from the same pass."""
    create: list[tuple[WorkerGroup, int]] = []
    delete: list[tuple[str, str]] = []
    power_up: list[str] = []
    rows: list[WorkerGroupStatus] = []
    problems: list[str] = []
    in_flight = False
    for group in groups:
        assert group.autoscale is not None
        wanted = ready = 0
        up: list[str] = []
        sleeping: list[str] = []
        for index, name in enumerate(node_names(c, group)):
            node, pod = nodes.get(name), pods.get(name)
            if node is None:
                continue  # not in Slurm's config yet (the ConfigMap reaches slurmctld with a reconfigure)
            if node.powered_down or resume_failed(node):
                if resume_failed(node):
                    problems.append(
                        f"worker group {group.name}: node {name} was not up within its resumeTimeout, so Slurm set it "
                        f"DOWN ({node.reason}) and requeued its jobs; once the cause is fixed: scontrol update "
                        f"nodename={name} state=resume"
                    )
                elif "POWERED_DOWN" in node.state and node.base == "IDLE" and not node.drain:
                    sleeping.append(name)
                if "POWERING_DOWN" in node.state:
                    in_flight = True
                # A node a job lists keeps its pod, whatever its power state says.
                if pod is not None and not deleting(pod) and name not in running:
                    why = (
                        "its node was not up within resumeTimeout (Slurm set it DOWN)"
                        if resume_failed(node)
                        else f"Slurm powered its node down (idle for {group.autoscale.idle_time})"
                    )
                    delete.append((name, why))
                    in_flight = True
                continue
            up.append(name)
            wanted += 1
            if node.powering_up:
                in_flight = True
            if pod is None:
                create.append((group, index))
                in_flight = True
            elif deleting(pod):
                in_flight = True  # the old pod is still going: its successor is created once the name is free
            elif pod_ready(pod):
                ready += 1
            else:
                in_flight = True
                if why := why_not_running(pod):
                    problems.append(f"worker group {group.name}: pod {name} {why}")
        missing = group.autoscale.min - len(up)
        if missing > 0:
            power_up.extend(sleeping[:missing])
        rows.append(WorkerGroupStatus(name=group.name, desired=wanted, ready=ready))
    return ElasticPlan(
        create=tuple(create),
        delete=tuple(delete),
        power_up=tuple(power_up),
        rows=tuple(rows),
        problems=tuple(problems),
        in_flight=in_flight or bool(power_up),
    )


def is_elastic_pod(pod: Mapping[str, Any]) -> bool:
    return is_elastic(meta_of(pod))


def is_elastic(md: ObjectMeta) -> bool:
    """An elastic group's pod, by its metadata: owned by its SlurmCluster directly (a fixed group's pods are their
    StatefulSet's, and a pod a deleted StatefulSet left behind has no owner)."""
    return any(o.controller and o.kind == "SlurmCluster" for o in md.owner_references)


def stray_elastic_pods(
    c: str, groups: Sequence[WorkerGroup], pods: Sequence[Mapping[str, Any]], *, going: bool = False
) -> list[tuple[str, str]]:
    """Elastic pods no elastic group of the spec has (a removed group, a group made fixed, an index at or past a
    lowered `max`): (pod, group) pairs. They leave through the drain gate, as a scale-in does; `going`: those already
    being deleted too (their nodes stay in nodes.conf until they are gone)."""
    wanted = {name for group in groups for name in node_names(c, group)}
    prefix = meta.worker_group(c, "")
    out = []
    for md in map(meta_of, pods):
        if is_elastic(md) and md.name not in wanted and (going or not md.deletion_timestamp):
            out.append((md.name, md.name.removeprefix(prefix).rpartition("-")[0]))
    return out
