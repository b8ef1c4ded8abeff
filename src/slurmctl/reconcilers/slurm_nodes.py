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

Each pass observes (reconcilers/node_observation.py), plans purely (reconcilers/node_plans.py: the repair, then the
status, or the status of an outage) and carries the plans out (reconcilers/node_executor.py); what it remembers of
a cluster between passes is that cluster's `NodeMemory`, passed into the plan and out of it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from slurmctl.reconcilers.context import Context
from slurmctl.reconcilers.events import Events
from slurmctl.reconcilers.loading import Invalid
from slurmctl.reconcilers.node_executor import NodeExecutor
from slurmctl.reconcilers.node_observation import NodeObserver
from slurmctl.reconcilers.node_plans import NodeMemory, StatusPlan, plan_outage, plan_repair, plan_status
from slurmctl.reconcilers.observed import Live, WorkerPod, deleting, node_ready, ready_since, unschedulable
from slurmctl.reconcilers.slurm_marks import evictable_intents
from slurmctl.render.kinds import SLURM_CLUSTER
from slurmctl.runtime import Event, EventType, Request, Result
from slurmctl.runtime.concurrency import pause

NAME = "slurm-nodes"  # the controller's


def cordon_changed(event: Event) -> bool:
    """A Kubernetes node cordoned or uncordoned (`kubectl cordon`, `kubectl drain`, `kubectl uncordon`)."""
    old = event.old
    return event.type is EventType.UPDATED and old is not None and unschedulable(old) != unschedulable(event.obj)


def taints_changed(event: Event) -> bool:
    """A Kubernetes node's taints changed: a preemption warning came or went (reconcilers/preemption.py)."""
    old = event.old
    return event.type is EventType.UPDATED and old is not None and _taints(old) != _taints(event.obj)


def _taints(node: Live) -> list[Any]:
    return list((node.get("spec") or {}).get("taints") or ())


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

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.cache = ctx.manager.cache
        self.workers = ctx.worker_pods
        self.observer = NodeObserver(ctx, self.workers)
        self.executor = NodeExecutor(ctx, Events(ctx.manager, NAME))
        self.memory: dict[tuple[str, str], NodeMemory] = {}  # by cluster (namespace, name)

    async def __call__(self, req: Request) -> Result | None:
        key = (req.namespace, req.name)
        obj = self.cache.get(*SLURM_CLUSTER, req.name, namespace=req.namespace)
        if obj is None or deleting(obj):
            self.ctx.slurm.forget(req.name, req.namespace)
            self.memory.pop(key, None)
            self.observer.forget(key)
            return None
        loaded = self.ctx.loader.load(obj)
        if isinstance(loaded, Invalid):  # Slurm was not asked: nothing is evictable
            pods = self.workers.record(req.name, req.namespace).seen
            await self.executor.write_marks(evictable_intents(req.namespace, pods, set()))
            return None
        memory = self.memory.get(key, NodeMemory())
        obs = await self.observer.observe(loaded, handled=memory.force_deleted)
        status: StatusPlan | None = None
        error = ""  # why Slurm could not be asked or refused ("": not asked at all)
        if obs.slurm is not None and obs.slurm.up:
            await pause()
            repair = plan_repair(obs, memory)
            done, refused = await self.executor.repair(loaded, repair)
            memory = repair.memory.after(done)
            if refused is None:
                await pause()
                status = plan_status(obs, repair, done.gone)
            else:  # a write failed, perhaps half-way: the next reader reads again
                self.ctx.slurm.changed(loaded.name, loaded.namespace)
                error = str(refused)
        elif obs.slurm is not None:
            error = str(obs.slurm.error)
        if status is None:
            # Nothing to ask (slurmrestd disabled or not ready: its enabling and its pod turning ready wake this loop),
            # or Slurm did not answer. Every reader sees the outage; only the eviction hold makes a pod evictable.
            held = self.observer.held(loaded, obs.workers)
            status, memory = plan_outage(dataclasses.replace(obs, held=held), memory, error)
        self.memory[key] = memory
        await self.executor.write_status(loaded, status)
        return None if status.requeue_after is None else Result(requeue_after=status.requeue_after)

    def clusters_on(self, node: Mapping[str, Any]) -> list[Request]:
        """The clusters with a worker pod on a Kubernetes node (from the pod cache): those a cordon concerns."""
        return self.workers.clusters_on(node)
