"""Slurm's view on Kubernetes, from each cluster's Slurm snapshot (reconcilers/slurm_snapshot.py) every
`POLL_SECONDS`, `ELASTIC_POLL_SECONDS` with elastic groups (and when a worker pod's Kubernetes node is cordoned or
uncordoned, or a worker pod's readiness changes); a snapshot that says something new wakes the components that decide
on it (SlurmAccess.listen). This loop is what keeps each cluster's snapshot fresh while slurmrestd is ready: it takes
a new one when the last is older than NODE_LOOP_MAX_AGE (another reader, the drain gate, may have taken one just
before):

- each worker pod's `SlurmNodeState` condition (reason: the Slurm state, e.g. Idle, Allocated, Drained; message:
  Slurm's reason), applied to pods/status only when it differs from what the pod carries;
- each worker pod's evictable label (`slurm.slurmctl.io/evictable=true`), set while Slurm says no job can run on its
  node (drain.evictable) and taken off otherwise; the workers' PodDisruptionBudget protects every pod without it
  from evictions. When Slurm cannot be asked (slurmrestd disabled, not ready or failing), every such label is taken
  off: a stale "evictable" could let an eviction kill a job. Written only when it changes (both writes:
  reconcilers/slurm_marks.py);
- the node counts in the cluster status (the IDLE, ALLOC and DRAIN columns), written only when they change;
- the `slurm_*` metrics (reconcilers/slurm_metrics.py), set by every snapshot;
- slurmctl's drains outside the drain gate (drain.upkeep): a worker whose Kubernetes node is cordoned is drained
  (`slurmctl: Kubernetes node N is cordoned`) so that its jobs finish, no new one lands, and it becomes evictable;
  a node slurmctl drained for a reason that no longer holds (uncordoned, or the group grew back before it went) is
  resumed. A drain with another reason is an administrator's and is left alone;
- lost Kubernetes nodes (NotReady past `--node-lost-after`, reconcilers/lost_nodes.py): their workers are drained
  (`slurmctl: node N NotReady`); those whose slurmd Slurm cannot reach either are set DOWN, deleted from Slurm, and
  their pods force-deleted so that their StatefulSets re-create them on Ready nodes; a standby slurmctld there that
  Slurm cannot reach either is force-deleted too (it would stall every reconfigure of the primary);
- unhealthy workers (reconcilers/unhealthy.py): in a group with `replaceUnhealthy`, an idle worker drained by one of
  slurmctl's health checks (`slurmctl-gpu:`, `slurmctl-nccl:`) has its Kubernetes node cordoned and labelled, and its
  pod deleted so that its StatefulSet re-creates it on another node; one pod of a group at a time.

Draining the nodes that must go is the workers reconciler's (the drain gate); which they are, the loop reads from
reconcilers/worker_pods.py, as the drain gate does, and never asks the workers reconciler.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from slurmctl.api.v1 import SlurmClusterStatus, SlurmNodeCounts
from slurmctl.reconcilers.base import status_part
from slurmctl.reconcilers.context import Context
from slurmctl.reconcilers.drain import DRAIN_POLL_SECONDS, Upkeep, evictable, jobs_by_node, upkeep
from slurmctl.reconcilers.elastic import ELASTIC_POLL_SECONDS
from slurmctl.reconcilers.events import Events
from slurmctl.reconcilers.eviction_hold import EvictionHold
from slurmctl.reconcilers.loading import Invalid, Loaded
from slurmctl.reconcilers.lost_nodes import LostNodes
from slurmctl.reconcilers.observed import (
    WorkerPod,
    deleting,
    node_ready,
    ready_since,
    unschedulable,
)
from slurmctl.reconcilers.slurm_access import SlurmApi
from slurmctl.reconcilers.slurm_marks import write_conditions, write_evictable
from slurmctl.reconcilers.slurm_snapshot import NODE_LOOP_MAX_AGE
from slurmctl.reconcilers.unhealthy import UnhealthyReplacer
from slurmctl.reconcilers.worker_pods import WorkerPods
from slurmctl.render import meta
from slurmctl.render.kinds import NODE, POD, SLURM_CLUSTER
from slurmctl.runtime import Event, EventType, Request, Result
from slurmctl.runtime.logs import kv
from slurmctl.slurm import Node, SlurmError

log = logging.getLogger(__name__)

POLL_SECONDS = 15.0
NAME = "slurm-nodes"  # the controller's


def node_counts(nodes: list[Node]) -> SlurmNodeCounts:
    counts = {"idle": 0, "allocated": 0, "drained": 0, "down": 0}
    for node in nodes:
        if node.drain:
            counts["drained"] += 1
        elif node.display == "Idle":
            counts["idle"] += 1
        elif node.display in ("Allocated", "Mixed"):
            counts["allocated"] += 1
        elif node.display.startswith("Down") or "NOT_RESPONDING" in node.state:
            counts["down"] += 1
    return SlurmNodeCounts(total=len(nodes), **counts)


def cordon_changed(event: Event) -> bool:
    """A Kubernetes node cordoned or uncordoned (`kubectl cordon`, `kubectl drain`, `kubectl uncordon`)."""
    old = event.old
    return event.type is EventType.UPDATED and old is not None and unschedulable(old) != unschedulable(event.obj)


def ready_changed(event: Event) -> bool:
    """A Kubernetes node turning Ready or NotReady (or starting another NotReady spell): what makes it lost."""
    old = event.old
    if event.type is not EventType.UPDATED or old is None:
        return False
    return (node_ready(old), ready_since(old)) != (node_ready(event.obj), ready_since(event.obj))


def _drain_inputs(pod: Mapping[str, Any]) -> tuple[object, ...]:
    worker = WorkerPod.of(pod)
    return worker.ready, worker.slurmd_running, worker.terminating, worker.node_name, worker.has_address


def worker_pod_changed(event: Event) -> bool:
    """A new worker pod, or one whose readiness, slurmd container, deletion or Kubernetes node changed: what decides
    whether it is evictable or its node cordoned. An initial list or a resync is the poll's."""
    if event.type is EventType.DELETED or event.low_priority:
        return False
    return event.old is None or _drain_inputs(event.old) != _drain_inputs(event.obj)


class SlurmNodesReconciler:
    """Keyed by SlurmCluster; each pass decides on one snapshot and requeues itself (Slurm sends no events)."""

    def __init__(self, ctx: Context, *, worker_labels: tuple[str, ...]) -> None:
        """`worker_labels`: the component labels worker pods carry (the workers component's `Component.labels`)."""
        self.ctx = ctx
        self.cache = ctx.manager.cache
        self.workers = WorkerPods(self.cache, worker_labels)
        self.events = Events(ctx.manager, NAME)
        self._warned: dict[tuple[str, str], str] = {}
        self.lost_nodes = LostNodes(ctx, self.events)  # reconcilers/lost_nodes.py
        self.unhealthy = UnhealthyReplacer(ctx.manager, self.events)  # reconcilers/unhealthy.py
        self.hold = EvictionHold(ctx, self.events)  # --max-eviction-hold

    async def __call__(self, req: Request) -> Result | None:
        obj = self.cache.get(*SLURM_CLUSTER, req.name, namespace=req.namespace)
        if obj is None or deleting(obj):
            self.ctx.slurm.forget(req.name, req.namespace)
            self._warned.pop((req.namespace, req.name), None)
            self.lost_nodes.forget((req.namespace, req.name))
            self.unhealthy.forget((req.namespace, req.name))
            self.hold.forget((req.namespace, req.name))
            return None
        pods = self.workers.pods(req.name, req.namespace)
        loaded = self.ctx.loader.load(obj)
        if isinstance(loaded, Invalid):
            await write_evictable(
                self.ctx.manager, req.namespace, pods, set()
            )  # Slurm was not asked: nothing is evictable
            return None
        c, ns = loaded.name, loaded.namespace
        if not loaded.cluster.spec.rest.enabled or self.ctx.slurm.address(c, ns) is None:
            # Nothing to ask: no polling until slurmrestd is enabled (a spec change) and its pod is ready (a pod
            # event); both wake this loop. Every reader sees the outage.
            why = "spec.rest.enabled is false" if not loaded.cluster.spec.rest.enabled else "no ready slurmrestd pod"
            self.ctx.slurm.unreachable(c, ns, why)
            await write_evictable(self.ctx.manager, req.namespace, pods, self._held(loaded, pods))
            return Result(requeue_after=POLL_SECONDS) if self.hold.seconds else None
        workers = [WorkerPod.of(pod) for pod in pods]
        standby = self._standby(loaded)
        lost = await self.lost_nodes.lost(loaded, [*workers, *standby])
        # Setting a lost node's worker DOWN and deleting it is decided on a read taken for that decision.
        before = self.ctx.slurm.latest(c, ns)
        snapshot = await self.ctx.slurm.snapshot(c, ns, max_age=0.0 if lost.lost else NODE_LOOP_MAX_AGE)
        try:
            nodes = snapshot.check().nodes
            self._warned.pop((req.namespace, req.name), None)
            mine = {n.name: n for n in nodes if n.name.startswith(meta.worker_group(c, ""))}
            cordoned = {pod.name for pod in workers if self._cordoned(pod)}
            leaving = {going.node for going in self.workers.leaving(loaded)}
            plan = upkeep(workers, mine, cordoned=cordoned, leaving=leaving, lost=lost.lost)
            api = self.ctx.slurm.client(c, ns)
            await self._upkeep(loaded, plan, mine, api)
            running = jobs_by_node(snapshot.jobs)
            await self.hold.end(loaded, workers, mine, running, cordoned=cordoned, api=api)
            gone = await self.lost_nodes.recover(loaded, workers, lost, mine, api)
            await self.lost_nodes.recover_standby(loaded, standby, lost, api)
            gone |= await self.unhealthy.replace(loaded, workers, mine, running, leaving=leaving, lost=lost.lost)
        except SlurmError as exc:
            if snapshot.up:  # a write failed, perhaps half-way: the next reader reads again
                self.ctx.slurm.changed(c, ns)
            if self._warned.get((req.namespace, req.name)) != str(exc):
                log.warning("cannot read Slurm %s", kv(namespace=req.namespace, name=req.name, error=exc))
            self._warned[(req.namespace, req.name)] = str(exc)
            await write_evictable(self.ctx.manager, req.namespace, pods, self._held(loaded, pods))
            return Result(requeue_after=POLL_SECONDS)
        if gone:
            pods = [pod for pod in pods if pod["metadata"]["name"] not in gone]
            workers = [worker for worker in workers if worker.name not in gone]
        await write_conditions(self.ctx.manager, loaded.namespace, pods, mine)
        # From this snapshot; a node drained or resumed just now is judged again on the next pass.
        changed = {*plan.resume, *(name for names in plan.drain.values() for name in names)}
        may_go = {w.name for w in workers if w.name not in changed and evictable(w, mine.get(w.name), running)}
        await write_evictable(self.ctx.manager, req.namespace, pods, may_go)
        # Through the one status writer (it owns the whole status; it writes only a change).
        counts = node_counts(list(mine.values()))
        self.ctx.status.submit(loaded.obj, status_part(SlurmClusterStatus(slurm_nodes=counts)))
        # A node drained for a cordon is often idle at once: look again soon, so that `kubectl drain` waits little.
        # A NotReady node is looked at again when it reaches the threshold.
        after = DRAIN_POLL_SECONDS if plan.drain else POLL_SECONDS
        if loaded.cluster.spec.elastic_groups:
            # Slurm powers elastic nodes up for jobs: a new power state wakes the workers (the snapshot is a source).
            after = min(after, ELASTIC_POLL_SECONDS)
        if snapshot is before:
            # Decided on an earlier read (a pod event woke this pass): what the event changed in Slurm (a slurmd
            # registering, or gone) is looked at once that read is too old to share.
            after = min(after, NODE_LOOP_MAX_AGE)
        if lost.next_check is not None:
            after = max(min(after, lost.next_check), 0.5)
        return Result(requeue_after=after)

    def clusters_on(self, node: Mapping[str, Any]) -> list[Request]:
        """The clusters with a worker pod on a Kubernetes node (from the pod cache): those a cordon concerns."""
        return self.workers.clusters_on(node)

    def _held(self, loaded: Loaded, pods: list[dict[str, Any]]) -> set[str]:
        """Slurm cannot be asked: the worker pods evictable by the hold alone."""
        workers = [WorkerPod.of(pod) for pod in pods]
        return self.hold.held(loaded, cordoned={w.name for w in workers if self._cordoned(w)})

    def _cordoned(self, pod: WorkerPod) -> bool:
        return bool(pod.node_name) and not pod.terminating and unschedulable(self.cache.get(*NODE, pod.node_name))

    async def _upkeep(self, loaded: Loaded, plan: Upkeep, nodes: Mapping[str, Node], api: SlurmApi) -> None:
        if plan.drain or plan.resume:
            self.ctx.slurm.changed(loaded.name, loaded.namespace)
        for reason, names in plan.drain.items():
            await api.drain(names, reason=reason)
            self.events.record(loaded.obj, "Normal", "Draining", f"draining {', '.join(names)} in Slurm ({reason})")
        if plan.resume:
            await api.resume(plan.resume)
            for name in plan.resume:
                why = nodes[name].reason.removeprefix("slurmctl:").strip()
                message = f"resumed {name} in Slurm: its drain ({why}) no longer holds"
                self.events.record(loaded.obj, "Normal", "Resumed", message)

    def _standby(self, loaded: Loaded) -> list[WorkerPod]:
        """The standby slurmctld's pod (spec.controller.standby), when there is one: a lost node concerns it too."""
        if not loaded.cluster.spec.controller.standby:
            return []
        pod = self.cache.get(*POD, f"{meta.controller_backup(loaded.name)}-0", namespace=loaded.namespace)
        return [WorkerPod.of(pod)] if pod is not None else []
