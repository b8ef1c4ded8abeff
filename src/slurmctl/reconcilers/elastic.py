"""Elastic worker groups (`autoscale`): which pods to create and delete, decided purely from one Slurm snapshot.

Slurm decides, slurmctl follows. Every node of the range is a CLOUD node in nodes.conf (render/slurm_conf.py), so Slurm
allocates powered-down nodes to jobs and powers them up itself (ResumeProgram does nothing); slurmctl sees POWERING_UP
and creates the node's pod, whose slurmd registers, and the job starts. A node idle for the group's idleTime is
powered down by Slurm (its power partition's SuspendTime); slurmctl sees POWERING_DOWN or POWERED_DOWN and deletes the
pod. A node whose pod could not be placed or started within resumeTimeout is set DOWN by Slurm (reason "ResumeTimeout
reached", its batch jobs requeued) and POWERED_DOWN, and its pod goes the same way; slurmctl resumes it after a
backoff (`resume_backoff`), so that Slurm can power it up again once the cause is gone.

An elastic pod keeps its template while its node is up. A pod made from an older template than its group's (its
TEMPLATE_HASH_ANNOTATION differs, or it has none) is replaced through Slurm once its node is idle: slurmctl asks for
POWER_DOWN_ASAP (drained, powered down once no job is left), and the next power-up makes a pod of the new template.

Fail-safe: nothing is decided without a snapshot (the caller asks Slurm first), and a node an active job lists keeps
its pod whatever its power state says. Fixed-size groups are not planned here (StatefulSets,
reconcilers/workers/plan.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from slurmctl.api.v1 import ResumeFailure, WorkerGroup, WorkerGroupStatus, parse_duration
from slurmctl.reconcilers.observed import WorkerPod, deleting, pod_ready
from slurmctl.reconcilers.views import Pod, condition
from slurmctl.render import meta
from slurmctl.runtime.objects import meta_of
from slurmctl.slurm import Node

# With elastic groups, the Slurm node loop polls Slurm's power states at least this often (Slurm's power saving itself
# acts about every 10 s); a new state wakes the workers component (SlurmAccess.listen).
ELASTIC_POLL_SECONDS = 10.0
# What the kubelet says of a container that cannot start from its image.
_IMAGE_FAILURES = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
# The first retry of a node Slurm set DOWN after its resumeTimeout waits this long at least (or resumeTimeout, if
# longer), each consecutive failure twice as long as the one before, never more than RESUME_BACKOFF_CAP (or the
# first wait, if longer): a cause a person fixes is picked up within the hour, a lasting one costs a requeue an hour.
RESUME_BACKOFF_MIN = timedelta(seconds=60)
RESUME_BACKOFF_CAP = timedelta(hours=1)


@dataclass(frozen=True)
class Retry:
    """A node to resume in Slurm: its `attempt`-th retry after consecutive ResumeTimeouts."""

    node: str
    attempt: int


@dataclass(frozen=True)
class ElasticPlan:
    """One pass over the elastic groups."""

    create: tuple[tuple[WorkerGroup, int], ...] = ()  # (group, index): pods to create
    delete: tuple[tuple[str, str], ...] = ()  # (pod, why)
    power_up: tuple[str, ...] = ()  # powered-down nodes to resume so that `min` are up
    resume: tuple[Retry, ...] = ()  # nodes Slurm set DOWN after their resumeTimeout, whose backoff is over
    power_down: tuple[str, ...] = ()  # idle nodes whose pod is of an older template: POWER_DOWN_ASAP
    rows: tuple[WorkerGroupStatus, ...] = ()
    problems: tuple[str, ...] = ()  # pods that cannot be placed or started, nodes that did not resume: a person's
    in_flight: bool = False  # a node powering up or down, or a pod on its way: look again soon
    retry_in: float | None = None  # seconds until the next resume of a failed node is due


@dataclass(frozen=True)
class ElasticMemory:
    """What the elastic groups' plan needs from before: each failed node's consecutive ResumeTimeouts, as the last
    pass wrote them into the groups' status rows (`resumeFailures`), so that an operator restart keeps the count."""

    failures: Mapping[str, ResumeFailure] = field(default_factory=dict)

    @classmethod
    def of(cls, status: Mapping[str, Any]) -> ElasticMemory:
        """Read from the cluster's status as the status writer left it."""
        rows = [WorkerGroupStatus.model_validate(row) for row in status.get("workers") or ()]
        return cls({f.node: f for row in rows for f in row.resume_failures or ()})


def resume_backoff(group: WorkerGroup, failures: int) -> timedelta:
    """How long after Slurm set the node DOWN for the `failures`-th time in a row slurmctl resumes it."""
    assert group.autoscale is not None
    first = max(parse_duration(group.autoscale.resume_timeout), RESUME_BACKOFF_MIN)
    return min(first * (1 << min(failures - 1, 16)), max(first, RESUME_BACKOFF_CAP))


def count_failure(node: Node, before: ResumeFailure | None, now: datetime) -> ResumeFailure:
    """The node's count now that Slurm says it failed: the same failure as last pass when Slurm's timestamp of it is
    the one remembered, else one more. Slurm stamps the reason each time it sets it (node_mgr.c set_node_reason,
    also when it only appends to a reason kept from before); without a stamp, the failure is taken as of the
    remembered one, or of now."""
    at = node.reason_changed_at or (before.since if before else now)
    if before is None:
        return ResumeFailure(node=node.name, failures=1, since=at)
    if before.since == at:
        return before
    return ResumeFailure(node=node.name, failures=before.failures + 1, since=at)


def outdated(pod: Mapping[str, Any], template: str) -> bool:
    """The pod was made from another template than its group's now; one without the annotation (made before it
    existed) too."""
    return meta_of(pod).annotations.get(meta.TEMPLATE_HASH_ANNOTATION) != template


def replaceable(node: Node, pod: Mapping[str, Any], running: Mapping[str, tuple[int, ...]]) -> bool:
    """Up and doing nothing: ready, IDLE, no job listing it, not drained or powering: Slurm may power it down now
    without touching a job (and POWER_DOWN_ASAP would wait for one anyway)."""
    powering = node.state & {"POWERING_UP", "POWERING_DOWN", "POWER_DOWN", "POWERED_DOWN"}
    return (
        pod_ready(pod)
        and not deleting(pod)
        and node.base == "IDLE"
        and not node.drain
        and not node.busy
        and not powering
        and node.name not in running
    )


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
    *,
    now: datetime,
    templates: Mapping[str, str],
    memory: ElasticMemory = ElasticMemory(),
) -> ElasticPlan:
    """`pods`: the cluster's worker pods by name; `nodes`: Slurm's nodes by name; `running`: the active jobs by node
    (drain.jobs_by_node), all from the same pass; `now`: the observation's time; `templates`: each group's template
    hash (render/workers.py elastic_template_hash), by group name; `memory`: what the last pass remembered."""
    create: list[tuple[WorkerGroup, int]] = []
    delete: list[tuple[str, str]] = []
    power_up: list[str] = []
    resume: list[Retry] = []
    power_down: list[str] = []
    rows: list[WorkerGroupStatus] = []
    problems: list[str] = []
    waits: list[float] = []
    in_flight = False
    for group in groups:
        assert group.autoscale is not None
        wanted = ready = 0
        up: list[str] = []
        sleeping: list[str] = []
        failed: list[ResumeFailure] = []
        for index, name in enumerate(node_names(c, group)):
            node, pod = nodes.get(name), pods.get(name)
            if node is None:
                continue  # not in Slurm's config yet (the ConfigMap reaches slurmctld with a reconfigure)
            before = memory.failures.get(name)
            if resume_failed(node):
                failure = count_failure(node, before, now)
                failed.append(failure)
                due = failure.since + resume_backoff(group, failure.failures)
                if now >= due:
                    resume.append(Retry(name, failure.failures))
                else:
                    waits.append((due - now).total_seconds())
                    problems.append(
                        f"worker group {group.name}: node {name} was not up within its resumeTimeout, so Slurm set it "
                        f"DOWN ({node.reason}) and requeued its jobs (failure {failure.failures} in a row); slurmctl "
                        f"resumes it at {due.isoformat(timespec='seconds')}, or now: scontrol update "
                        f"nodename={name} state=resume"
                    )
            elif before is not None and (node.powered_down or node.powering_up):
                failed.append(before)  # resumed, not up yet: the next failure is one more in a row
            if node.powered_down or resume_failed(node):
                if "POWERED_DOWN" in node.state and node.base == "IDLE" and not node.drain:
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
                if outdated(pod, templates[group.name]) and replaceable(node, pod, running):
                    power_down.append(name)
                    in_flight = True
            else:
                in_flight = True
                if why := why_not_running(pod):
                    problems.append(f"worker group {group.name}: pod {name} {why}")
        missing = group.autoscale.min - len(up)
        if missing > 0:
            power_up.extend(sleeping[:missing])
        rows.append(WorkerGroupStatus(name=group.name, desired=wanted, ready=ready, resume_failures=failed or None))
    return ElasticPlan(
        create=tuple(create),
        delete=tuple(delete),
        power_up=tuple(power_up),
        resume=tuple(resume),
        power_down=tuple(power_down),
        rows=tuple(rows),
        problems=tuple(problems),
        in_flight=in_flight or bool(power_up) or bool(resume),
        retry_in=min(waits, default=None),
    )


def stray_elastic_pods(
    c: str, groups: Sequence[WorkerGroup], pods: Iterable[WorkerPod], *, going: bool = False
) -> list[tuple[str, str]]:
    """Elastic pods (of `pods`: the cluster's, `PodRecord.elastic`) no elastic group of the spec has (a removed group,
    a group made fixed, an index at or past a lowered `max`): (pod, group) pairs. They leave through the drain gate,
    as a scale-in does; `going`: those already being deleted too (their nodes stay in nodes.conf until they are
    gone)."""
    wanted = {name for group in groups for name in node_names(c, group)}
    prefix = meta.worker_group(c, "")
    out = []
    for pod in pods:
        if pod.elastic and pod.name not in wanted and (going or not pod.terminating):
            out.append((pod.name, pod.name.removeprefix(prefix).rpartition("-")[0]))
    return out
