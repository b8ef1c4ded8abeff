"""Which Slurm nodes must go, and whether each may go yet: the one decision behind scale-in, group removal and the
re-creation of a worker pod.

A node leaves Slurm when its pod goes (the pod's preStop deletes it). Before that, the node is drained in Slurm (no
new jobs, running ones finish) with a reason starting with `slurmctl:`, and the pod may go only once the node runs
no job, or once the group's `drainTimeout` has passed since the drain began. Everything here is decided from what
Slurm says now (level-based): nothing is remembered between passes, so an operator restart resumes where it was.
A node drained by someone else (another reason) is never re-drained or resumed: its reason is theirs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from slurmctl.api.v1 import WorkerGroup
from slurmctl.render import meta
from slurmctl.slurm import Job, Node

DRAIN_PREFIX = "slurmctl:"
# Job states that still occupy a node (Slurm's base states; flags such as COMPLETING are separate).
_ACTIVE_JOB_STATES = frozenset({"RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "STOPPED"})


@dataclass(frozen=True)
class Leaving:
    """A node whose pod must go, and why (the why becomes the drain reason, after the prefix)."""

    node: str
    group: str
    why: str
    recreate: bool = False  # the pod is re-created (new template), not removed: the operator deletes it

    @property
    def reason(self) -> str:
        return f"{DRAIN_PREFIX} {self.why}"


def leaving_nodes(c: str, groups: Sequence[WorkerGroup], live_replicas: Mapping[str, int]) -> list[Leaving]:
    """The nodes of each shrinking group above its new size, and every node of a group that left the spec.

    `live_replicas` is each live worker StatefulSet's replicas, by group name (removed groups included)."""
    sizes = {g.name: g.size for g in groups}
    out: list[Leaving] = []
    for group, live in sorted(live_replicas.items()):
        size = sizes.get(group)
        why = f"worker group {group} removed" if size is None else f"scale-in of worker group {group} to {size}"
        out.extend(Leaving(f"{meta.worker_group(c, group)}-{i}", group, why) for i in range(size or 0, live))
    return out


def drained_by_us(node: Node) -> bool:
    return node.drain and node.reason.startswith(DRAIN_PREFIX)


@dataclass(frozen=True)
class Verdict:
    """What to do about the leaving nodes this pass."""

    released: frozenset[str]  # may go now: idle and drained, timed out, or unknown to Slurm
    to_drain: tuple[Leaving, ...]  # not drained yet: drain them now
    waiting: Mapping[str, tuple[int, ...]]  # drained (or being drained) but still running these jobs
    timed_out: Mapping[str, tuple[int, ...]]  # released with these jobs still running: drainTimeout passed

    def describe_waiting(self) -> str:
        return "; ".join(
            f"{node} for job{'s' if len(jobs) > 1 else ''} {', '.join(map(str, jobs))}"
            for node, jobs in sorted(self.waiting.items())
        )


def jobs_by_node(jobs: Iterable[Job]) -> dict[str, tuple[int, ...]]:
    found: dict[str, list[int]] = {}
    for job in jobs:
        if job.state in _ACTIVE_JOB_STATES:
            for node in job.nodes:
                found.setdefault(node, []).append(job.job_id)
    return {node: tuple(sorted(ids)) for node, ids in found.items()}


def judge(
    leaving: Iterable[Leaving],
    *,
    nodes: Mapping[str, Node],
    jobs: Iterable[Job],
    now: datetime,
    timeout: Mapping[str, timedelta | None],
) -> Verdict:
    """`timeout` is the drainTimeout of each leaving node (None: wait for its jobs forever)."""
    running = jobs_by_node(jobs)
    released: set[str] = set()
    timed_out: dict[str, tuple[int, ...]] = {}
    to_drain: list[Leaving] = []
    waiting: dict[str, tuple[int, ...]] = {}
    for going in leaving:
        node = nodes.get(going.node)
        if node is None and going.node not in running:
            released.add(going.node)  # never registered, or already deleted: nothing runs there
            continue
        if node is None:
            waiting[going.node] = running[going.node]  # Slurm lists the job, not (yet) the node: wait
            continue
        busy = going.node in running or node.busy
        if not busy and (node.drain or "DOWN" in node.state):
            released.add(going.node)
            continue
        if not node.drain:
            # Released on a later pass, from what Slurm says then: a job may start between this read and the drain.
            to_drain.append(going)
            if busy:
                waiting[going.node] = running.get(going.node, ())
            continue
        limit = timeout.get(going.node)
        since = node.reason_changed_at
        if limit is not None and since is not None and now - since >= limit:
            released.add(going.node)
            timed_out[going.node] = running.get(going.node, ())
            continue
        waiting[going.node] = running.get(going.node, ())
    return Verdict(frozenset(released), tuple(to_drain), waiting, timed_out)


def replicas_after(size: int, live: int, *, c: str, group: str, released: frozenset[str]) -> int:
    """How far a shrinking group may go now: StatefulSets remove the highest ordinals first, so the replicas drop
    past each released node from the top and stop at the first node that must stay a while."""
    replicas = live
    while replicas > size and f"{meta.worker_group(c, group)}-{replicas - 1}" in released:
        replicas -= 1
    return replicas
