"""What the Slurm node loop (reconcilers/slurm_nodes.py) observes of one cluster before it decides: its worker pods
and the Kubernetes nodes under them, the standby slurmctld's pod, the nodes that must go, which Kubernetes nodes are
lost (confirmed by a read from the API server just now), and Slurm's snapshot. The plans (reconcilers/node_plans.py)
decide on this alone.

Two instruments of the operator count time here, by its monotonic clock, because they measure what the operator has
seen rather than decide anything: how long each Kubernetes node has been NotReady in its current spell
(lost_nodes.NotReadyClock) and how long each worker pod has been on a cordoned node while Slurm cannot be asked
(eviction_hold.CordonedSince).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property

from slurmctl.reconcilers.conditions import now
from slurmctl.reconcilers.context import Context
from slurmctl.reconcilers.drain import jobs_by_node
from slurmctl.reconcilers.eviction_hold import CordonedSince
from slurmctl.reconcilers.loading import Loaded
from slurmctl.reconcilers.lost_nodes import LostVerdict, NotReadyClock, judge_lost
from slurmctl.reconcilers.maintenance_gate import rolls_allowed
from slurmctl.reconcilers.observed import Live, WorkerPod, control_plane, node_ready, unschedulable
from slurmctl.reconcilers.preemption import preemption_taint
from slurmctl.reconcilers.slurm_snapshot import NODE_LOOP_MAX_AGE, SlurmSnapshot
from slurmctl.reconcilers.worker_pods import WorkerPods
from slurmctl.render import meta
from slurmctl.render.kinds import NODE, POD
from slurmctl.runtime import ApiError, NotFound
from slurmctl.runtime.concurrency import pause
from slurmctl.slurm import Node, SlurmError


@dataclass(frozen=True)
class Held:
    """The worker pods evictable by the eviction hold alone while Slurm cannot be asked, and those of them that
    became so in this pass (to say once)."""

    pods: frozenset[str] = frozenset()
    new: frozenset[str] = frozenset()


@dataclass(frozen=True)
class NodeObservation:
    """One cluster as the Slurm node loop saw it at `now`. `slurm` is None when Slurm could not be asked at all (the
    outage is SlurmAccess's to tell its readers); a snapshot may still carry the error of its read. `lost` holds the
    pods on lost Kubernetes nodes that the API server confirmed; `unconfirmed` the API server's error when it could not
    confirm them (nothing is acted on then). `answers`: whether each lost standby slurmctld still answers Slurm's
    ping."""

    loaded: Loaded
    now: datetime
    workers: tuple[
        WorkerPod, ...
    ]  # the worker pods, by name (their conditions and labels are compared with what is due)
    standby: tuple[WorkerPod, ...] = ()
    cordoned: frozenset[str] = frozenset()  # worker pods on a cordoned Kubernetes node
    preempted: Mapping[str, str] = field(default_factory=dict)  # worker pod -> the preemption taint of its node
    unsettled: frozenset[str] = frozenset()  # worker pods not placed, or on a Kubernetes node not Ready (or unknown)
    protected: frozenset[str] = frozenset()  # control-plane Kubernetes nodes: never cordoned by the operator
    leaving: frozenset[str] = frozenset()  # worker pods the drain gate is moving
    lost: LostVerdict = field(default_factory=LostVerdict)
    unconfirmed: Mapping[str, str] = field(default_factory=dict)  # the node and the API server's error
    slurm: SlurmSnapshot | None = None
    shared: bool = False  # the snapshot was taken before this pass (by another reader): a pod event woke it
    answers: Mapping[str, bool] = field(default_factory=dict)
    hold: float = 0.0  # --max-eviction-hold
    held: Held = Held()

    @cached_property
    def nodes(self) -> Mapping[str, Node]:
        """The cluster's worker nodes in Slurm, by name (the snapshot holds the controller's too); read only when
        Slurm answered."""
        assert self.slurm is not None
        prefix = meta.worker_group(self.loaded.name, "")
        return {n.name: n for n in self.slurm.nodes if n.name.startswith(prefix)}

    @cached_property
    def running(self) -> Mapping[str, tuple[int, ...]]:
        """The jobs on each worker node (drain.jobs_by_node of the same snapshot)."""
        assert self.slurm is not None
        return jobs_by_node(self.slurm.jobs)


@dataclass
class NodeObserver:
    """Reads what the node loop decides on; the operator's NotReady and cordon clocks live here (one per operator,
    shared by every cluster's pass)."""

    ctx: Context
    workers: WorkerPods

    def __post_init__(self) -> None:
        self.manager = self.ctx.manager
        self.not_ready = NotReadyClock(self.manager.clock)
        self.since = CordonedSince(self.manager.clock)

    def held(self, loaded: Loaded, workers: tuple[WorkerPod, ...]) -> Held:
        """Slurm cannot be asked: the pods evictable by the hold alone (counted from the first pass that saw them so
        while Slurm could not be asked)."""
        cordoned = _on_cordoned(workers, self._hosts(workers))
        held, new = self.since.held((loaded.namespace, loaded.name), cordoned, self.ctx.max_eviction_hold)
        return Held(frozenset(held), frozenset(new))

    def forget(self, key: tuple[str, str]) -> None:
        self.since.forget(key)

    async def observe(self, loaded: Loaded, *, handled: frozenset[str]) -> NodeObservation:
        """`handled`: the uids of pods already force-deleted for a lost node (they may linger in the cache): no reason
        to read Slurm afresh for them."""
        c, ns, slurm = loaded.name, loaded.namespace, self.ctx.slurm
        record = self.workers.record(c, ns)
        workers = record.seen
        base = NodeObservation(loaded, now(), workers, hold=self.ctx.max_eviction_hold)
        if not loaded.cluster.spec.rest.enabled or slurm.address(c, ns) is None:
            why = "spec.rest.enabled is false" if not loaded.cluster.spec.rest.enabled else "no ready slurmrestd pod"
            slurm.unreachable(c, ns, why)
            return base
        await pause()  # each pod read (a decode when it changed): a piece of the pass of its own
        standby = self._standby(loaded)
        lost, unconfirmed = await self._lost(loaded, [*workers, *standby])
        fresh_read = any(pod.uid not in handled for pod in (*workers, *standby) if pod.name in lost.lost)
        before = slurm.latest(c, ns)
        snapshot = await slurm.snapshot(c, ns, max_age=0.0 if fresh_read else NODE_LOOP_MAX_AGE)
        await pause()
        answers: dict[str, bool] = {}
        lost_standby = [pod for pod in standby if pod.name in lost.lost and pod.uid not in handled]
        if lost_standby and snapshot.up:
            try:
                controllers = await slurm.client(c, ns).controllers()
            except SlurmError as exc:
                snapshot = SlurmSnapshot(snapshot.taken_at, error=exc)
            else:
                answers = {pod.name: controllers.get(pod.name, False) for pod in lost_standby}
        hosts = self._hosts(workers)
        return dataclasses.replace(
            base,
            standby=tuple(standby),
            cordoned=_on_cordoned(workers, hosts),
            preempted={
                w.name: taint
                for w in workers
                if not w.terminating and (taint := hosts.get(w.node_name, _NO_HOST).preemption) is not None
            },
            unsettled=frozenset(w.name for w in workers if not hosts.get(w.node_name, _NO_HOST).ready),
            protected=frozenset(host for host, seen in hosts.items() if seen.control_plane),
            leaving=frozenset(
                going.node
                for going in self.workers.leaving(
                    loaded, record=record, rolls=rolls_allowed(loaded.cluster.spec, base.now)
                )
            ),
            lost=lost,
            unconfirmed=unconfirmed,
            slurm=snapshot,
            shared=snapshot is before,
            answers=answers,
        )

    async def _lost(self, loaded: Loaded, pods: list[WorkerPod]) -> tuple[LostVerdict, dict[str, str]]:
        """The pods on lost Kubernetes nodes, each node confirmed NotReady (in the same spell) by a read from the API
        server just now; none when the threshold is 0, in a full disruption, or when the API server does not answer
        (its cache may be stale: its error is the second value)."""
        threshold = self.ctx.node_lost_after
        if threshold <= 0:
            return LostVerdict(), {}
        hosts = {pod.node_name for pod in pods if pod.node_name}
        verdict = judge_lost(pods, {host: self._node(host) for host in hosts}, self.not_ready, threshold=threshold)
        if verdict.disrupted:
            return verdict, {}
        confirmed = set()
        for host in sorted(set(verdict.lost.values())):
            try:
                live = await self.manager.client.get(*NODE, host)
            except NotFound:
                continue  # deleted: the pod garbage collector removes its pods
            except ApiError as exc:
                return LostVerdict(not_ready=verdict.not_ready, next_check=verdict.next_check), {
                    "node": host,
                    "error": str(exc),
                }
            if self.not_ready.same_spell(host, live):
                confirmed.add(host)
        by_name = {pod.name: pod for pod in pods}
        lost = {pod: host for pod, host in verdict.lost.items() if host in confirmed and by_name[pod].uid}
        return LostVerdict(lost, verdict.not_ready, verdict.next_check), {}

    def _standby(self, loaded: Loaded) -> list[WorkerPod]:
        """The standby slurmctld's pod (spec.controller.standby), when there is one: a lost node concerns it too."""
        if not loaded.cluster.spec.controller.standby:
            return []
        pod = self.manager.cache.get(*POD, f"{meta.controller_backup(loaded.name)}-0", namespace=loaded.namespace)
        return [WorkerPod.of(pod)] if pod is not None else []

    def _node(self, name: str) -> Live | None:
        return self.manager.cache.get(*NODE, name) if name else None

    def _hosts(self, workers: Iterable[WorkerPod]) -> dict[str, _Host]:
        """What the pass reads of each Kubernetes node with workers, read once a node: 10,240 workers run on a
        thousand nodes, and reading each pod's node four times over was a third of the loop's pass."""
        out = {}
        for name in {w.node_name for w in workers if w.node_name}:
            node = self._node(name)
            out[name] = _Host(
                cordoned=unschedulable(node),
                preemption=preemption_taint(node, self.ctx.preemption_taints),
                ready=node_ready(node) is True,
                control_plane=control_plane(node),
            )
        return out


@dataclass(frozen=True)
class _Host:
    """A Kubernetes node as one pass reads it."""

    cordoned: bool
    preemption: str | None  # the preemption taint it carries, if any
    ready: bool
    control_plane: bool


_NO_HOST = _Host(cordoned=False, preemption=None, ready=False, control_plane=False)  # unscheduled, or unknown


def _on_cordoned(workers: Iterable[WorkerPod], hosts: Mapping[str, _Host]) -> frozenset[str]:
    """The worker pods on a cordoned Kubernetes node, but those going already."""
    return frozenset(w.name for w in workers if not w.terminating and hosts.get(w.node_name, _NO_HOST).cordoned)
