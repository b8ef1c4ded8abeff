"""Which Slurm nodes must go, and whether each may go yet: the one decision behind scale-in, group removal and the
re-creation of a worker pod.

A node leaves Slurm when its pod goes (the pod's preStop deletes it). Before that, the node is drained in Slurm (no
new jobs, running ones finish) with a reason starting with `slurmctl:`, and the pod may go only once the node runs
no job, or once the group's `drainTimeout` has passed since the drain began. Everything here is decided from what
Slurm says now (level-based): nothing is remembered between passes, so an operator restart resumes where it was.
A node drained by someone else (another reason) is never re-drained or resumed: its reason is theirs.

Three more drains are slurmctl's, all kept by the same rule as the gate's (`upkeep`): a worker pod's Kubernetes node
being cordoned drains its Slurm node (running jobs finish, no new job lands) until it is uncordoned, a worker pod's
Kubernetes node lost (NotReady past the operator's threshold, reconcilers/lost_nodes.py) drains it until the pod runs
on a Ready node, and a worker pod's preStop (images/scripts/worker-prestop) drains its node before it leaves
Slurm. And one question is answered
here for evictions (`evictable`): whether Slurm says no job can run on a worker pod's node.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from slurmctl.api.v1 import WorkerGroup
from slurmctl.reconcilers.observed import WorkerPod
from slurmctl.render import meta
from slurmctl.slurm import Job, Node

DRAIN_PREFIX = "slurmctl:"
# While nodes drain, Slurm is asked again this often (no Kubernetes event says a job ended): by the drain gate while
# a node must go, and by the Slurm node loop after it drained a worker of a cordoned node.
DRAIN_POLL_SECONDS = 5.0
# How many waiting nodes WorkersReady names (a condition is read by people, and its message has a size limit).
MAX_NAMED_WAITING = 10
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


def leaving_nodes(
    c: str, groups: Sequence[WorkerGroup], live_replicas: Mapping[str, int], elastic: Collection[str] = ()
) -> list[Leaving]:
    """The nodes of each shrinking group above its new size, and every node of a StatefulSet no group of the spec
    has (a removed group's, or that of a group now `elastic`: reconcilers/group_switch.py).

    `live_replicas` is each live worker StatefulSet's replicas, by its name (`<c>-worker-<group>` for a group's)."""
    sizes = {meta.worker_group(c, g.name): (g.name, g.size) for g in groups}
    prefix = meta.worker_group(c, "")
    out: list[Leaving] = []
    for statefulset, live in sorted(live_replicas.items()):
        group, size = sizes.get(statefulset, (statefulset.removeprefix(prefix), 0))
        if statefulset in sizes:
            why = f"scale-in of worker group {group} to {size}"
        elif group in elastic:
            why = f"worker group {group} becomes elastic"
        else:
            why = f"worker group {group} removed"
        out.extend(Leaving(f"{statefulset}-{i}", group, why) for i in range(size, live))
    return out


def statefulset_of(node: str) -> str:
    """The StatefulSet a worker pod (and its Slurm node, which has the pod's name) belongs to: `<sts>-<ordinal>`."""
    return node.rpartition("-")[0]


def drained_by_us(node: Node) -> bool:
    return node.drain and node.reason.startswith(DRAIN_PREFIX)


@dataclass(frozen=True)
class Verdict:
    """What to do about the leaving nodes this pass."""

    released: frozenset[str]  # may go now: idle and drained, timed out, or unknown to Slurm
    to_drain: tuple[Leaving, ...]  # not drained yet: drain them now
    waiting: Mapping[str, tuple[int, ...]]  # drained (or being drained) and not released: the jobs it still runs
    timed_out: Mapping[str, tuple[int, ...]]  # released with these jobs still running: drainTimeout passed

    def describe_waiting(self) -> str:
        """The waiting nodes for a condition, those running jobs first; past MAX_NAMED_WAITING, how many more (a
        scale-in of hundreds of nodes names a few, not all)."""
        ordered = sorted(self.waiting.items(), key=lambda item: (not item[1], item[0]))
        named = [
            f"{node} for job{'s' if len(jobs) > 1 else ''} {', '.join(map(str, jobs))}"
            if jobs
            else f"{node} (drained now: it goes once Slurm says it runs no job)"
            for node, jobs in ordered[:MAX_NAMED_WAITING]
        ]
        if len(ordered) > MAX_NAMED_WAITING:
            named.append(f"and {len(ordered) - MAX_NAMED_WAITING} more nodes")
        return "; ".join(named)


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
            # Until then it is waited for like a busy node, so that the status does not say the group is done (a
            # Ready at this generation, then Draining once that job shows, read as Degraded).
            to_drain.append(going)
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


def cordon_reason(k8s_node: str) -> str:
    return f"{DRAIN_PREFIX} Kubernetes node {k8s_node} is cordoned"


def preempted_reason(k8s_node: str, taint: str) -> str:
    """The drain (and DOWN) reason of a worker whose Kubernetes node is going away (reconcilers/preemption.py)."""
    return f"{DRAIN_PREFIX} Kubernetes node {k8s_node} is going away ({taint})"


def lost_reason(k8s_node: str) -> str:
    """The drain (and DOWN) reason of a worker whose Kubernetes node is lost (reconcilers/lost_nodes.py)."""
    return f"{DRAIN_PREFIX} node {k8s_node} NotReady"


@dataclass(frozen=True)
class Upkeep:
    """What the Slurm node loop changes in Slurm this pass (the drain gate drains the nodes that must go)."""

    drain: Mapping[str, tuple[str, ...]]  # reason -> nodes to drain now: their Kubernetes node is cordoned, lost or
    # going away
    resume: tuple[str, ...]  # nodes slurmctl drained for a reason that no longer holds


def upkeep(
    pods: Iterable[WorkerPod],
    nodes: Mapping[str, Node],
    *,
    cordoned: Collection[str],
    leaving: Collection[str],
    lost: Mapping[str, str] | None = None,
    preempted: Mapping[str, str] | None = None,
) -> Upkeep:
    """The one rule for slurmctl's drains. A drain with a `slurmctl:` reason holds while its node must go
    (`leaving`: the gate's), its pod is terminating (the preStop's), its pod's Kubernetes node is cordoned
    (`cordoned`: pod names), lost (`lost`: pod name -> its Kubernetes node, NotReady past the threshold) or going away
    (`preempted`: pod name -> the drain reason, reconcilers/preemption.py); once none
    holds it is resumed, whichever of them set it. A node whose pod is gone is left as it is (nothing would run
    there). A lost node is drained unless it is drained already (any reason), even when it must go: a pod on a lost
    node runs no preStop. A cordoned node is drained unless it is drained already (an administrator's drain stays
    theirs, and is never resumed) or must go (the gate drains it, with that reason). Nodes Slurm does not know are
    neither drained nor resumed. A node going away is drained like a cordoned one, with its own reason."""
    lost, preempted = lost or {}, preempted or {}
    drain: dict[str, list[str]] = defaultdict(list)
    resume: list[str] = []
    for pod in pods:
        node = nodes.get(pod.name)
        if node is None:
            continue
        must_go = pod.name in leaving or pod.terminating
        if pod.name in lost and not node.drain:
            drain[lost_reason(lost[pod.name])].append(pod.name)
        elif pod.name in preempted and not must_go and not node.drain:
            drain[preempted[pod.name]].append(pod.name)
        elif pod.name in cordoned and not must_go and not node.drain:
            drain[cordon_reason(pod.node_name)].append(pod.name)
        elif not must_go and not {pod.name} & {*cordoned, *lost, *preempted} and drained_by_us(node):
            resume.append(pod.name)
    return Upkeep({reason: tuple(names) for reason, names in sorted(drain.items())}, tuple(sorted(resume)))


def evictable(pod: WorkerPod, node: Node | None, running: Mapping[str, tuple[int, ...]]) -> bool:
    """Whether Slurm says no job can run on this worker pod's node now, so an eviction of the pod kills nothing.

    - Slurm knows the node: it is drained (the DRAIN flag, whoever set it) and runs no job (not ALLOCATED, MIXED or
      COMPLETING, and no active job lists it). A drained node takes no new job until someone resumes it.
    - Slurm does not know the node: no active job lists it, the pod is not ready and its slurmd container is not
      running (crash-looping, or not started). slurmd registers only after its container starts, and a container
      start is a pod update that wakes the Slurm node loop, which then reads Slurm again.
    `running` is `jobs_by_node` of the same read of Slurm. Whoever asks must have asked Slurm just now: when Slurm
    cannot be asked, no pod is evictable."""
    if pod.name in running:
        return False
    if node is None:
        return not pod.ready and not pod.slurmd_running
    return node.drain and not node.busy
