"""Slurm's view on Kubernetes, from each cluster's Slurm snapshot (reconcilers/slurm_snapshot.py) every
`POLL_SECONDS` (and when a worker pod's Kubernetes node is cordoned or uncordoned, or a worker pod's readiness
changes). This loop is what keeps each cluster's snapshot fresh while slurmrestd is ready: it takes a new one when the
last is older than NODE_LOOP_MAX_AGE (another reader, the drain gate, may have taken one just before):

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
from collections.abc import Collection, Mapping
from typing import Any

from slurmctl.api.v1 import SlurmClusterStatus, SlurmNodeCounts
from slurmctl.reconcilers.base import status_part
from slurmctl.reconcilers.context import Context
from slurmctl.reconcilers.drain import DRAIN_POLL_SECONDS, Upkeep, evictable, jobs_by_node, lost_reason, upkeep
from slurmctl.reconcilers.events import Events
from slurmctl.reconcilers.eviction_hold import EvictionHold
from slurmctl.reconcilers.loading import Invalid, Loaded
from slurmctl.reconcilers.lost_nodes import LostVerdict, NotReadyClock, judge_lost, slurmd_unreachable
from slurmctl.reconcilers.observed import (
    WorkerPod,
    control_plane,
    deleting,
    node_ready,
    ready_since,
    unschedulable,
)
from slurmctl.reconcilers.slurm_access import SlurmApi
from slurmctl.reconcilers.slurm_marks import write_conditions, write_evictable
from slurmctl.reconcilers.slurm_snapshot import NODE_LOOP_MAX_AGE
from slurmctl.reconcilers.unhealthy import (
    ANNOTATION_UNHEALTHY_REASON,
    CHECK_NAMES,
    LABEL_UNHEALTHY,
    CordonBudget,
    Replacement,
    judge_unhealthy,
    still_remembered,
)
from slurmctl.reconcilers.worker_pods import WorkerPods
from slurmctl.render import meta
from slurmctl.render.kinds import NODE, POD, SLURM_CLUSTER
from slurmctl.runtime import ApiError, Conflict, Event, EventType, NotFound, Request, Result
from slurmctl.runtime.logs import kv
from slurmctl.slurm import Node, SlurmApiError, SlurmError

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
        self.not_ready = NotReadyClock(ctx.manager.clock)
        # By cluster (namespace, name): the uids of pods force-deleted for a lost node (the cache may still show them
        # for a moment: never twice), of pods on a lost node kept because Slurm still reaches them (one Event each),
        # and whether the full-disruption WARNING was logged.
        self._force_deleted: dict[tuple[str, str], set[str]] = {}
        self._kept: dict[tuple[str, str], set[str]] = {}
        self._disrupted: set[tuple[str, str]] = set()
        # By cluster: the unhealthy workers replaced, by pod name (never twice for one drain: reconcilers/unhealthy.py).
        self._replaced: dict[tuple[str, str], dict[str, Replacement]] = {}
        self.cordons = CordonBudget(ctx.manager.clock)  # every cluster's cordons together
        self.hold = EvictionHold(ctx, self.events)  # --max-eviction-hold

    async def __call__(self, req: Request) -> Result | None:
        obj = self.cache.get(*SLURM_CLUSTER, req.name, namespace=req.namespace)
        if obj is None or deleting(obj):
            self.ctx.slurm.forget(req.name, req.namespace)
            self._warned.pop((req.namespace, req.name), None)
            for memory in (self._force_deleted, self._kept):
                memory.pop((req.namespace, req.name), None)
            self._replaced.pop((req.namespace, req.name), None)
            self._disrupted.discard((req.namespace, req.name))
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
        lost = await self._lost(loaded, [*workers, *standby])
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
            gone = await self._recover(loaded, workers, lost, mine, api)
            await self._recover_standby(loaded, standby, lost, api)
            gone |= await self._replace_unhealthy(loaded, workers, mine, running, leaving=leaving, lost=lost.lost)
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

    async def _lost(self, loaded: Loaded, workers: list[WorkerPod]) -> LostVerdict:
        """The cluster's pods (its workers and its standby slurmctld) on lost Kubernetes nodes, each node confirmed
        NotReady (in the same spell) by a read from the API server just now; none when the threshold is 0, in a full
        disruption, or when the API server does not answer (its cache may be stale). Pods already force-deleted are
        left out."""
        key = (loaded.namespace, loaded.name)
        uids = {worker.uid for worker in workers}
        deleted = self._force_deleted.setdefault(key, set())
        deleted &= uids  # forget the pods that left the cache
        threshold = self.ctx.node_lost_after
        if threshold <= 0:
            return LostVerdict()
        hosts = {worker.node_name for worker in workers if worker.node_name}
        nodes = {host: self.cache.get(*NODE, host) for host in hosts}
        verdict = judge_lost(workers, nodes, self.not_ready, threshold=threshold)
        if verdict.disrupted:
            if key not in self._disrupted:
                log.warning(
                    "every Kubernetes node with workers of the cluster is NotReady: acting on none %s",
                    kv(namespace=loaded.namespace, name=loaded.name, nodes=",".join(sorted(hosts))),
                )
            self._disrupted.add(key)
            return verdict
        self._disrupted.discard(key)
        confirmed = set()
        for host in sorted(set(verdict.lost.values())):
            try:
                live = await self.ctx.manager.client.get(*NODE, host)
            except NotFound:
                continue  # deleted: the pod garbage collector removes its pods
            except ApiError as exc:
                log.warning(
                    "cannot confirm that a Kubernetes node is lost: acting on none %s",
                    kv(namespace=loaded.namespace, name=loaded.name, node=host, error=exc),
                )
                return LostVerdict(not_ready=verdict.not_ready, next_check=verdict.next_check)
            if self.not_ready.same_spell(host, live):
                confirmed.add(host)
        by_name = {worker.name: worker for worker in workers}
        lost = {
            pod: host
            for pod, host in verdict.lost.items()
            if host in confirmed and by_name[pod].uid and by_name[pod].uid not in deleted
        }
        reported = self._kept.setdefault(key, set())
        reported &= {by_name[pod].uid for pod in lost}
        return LostVerdict(lost, verdict.not_ready, verdict.next_check)

    async def _recover(
        self, loaded: Loaded, workers: list[WorkerPod], lost: LostVerdict, nodes: Mapping[str, Node], api: SlurmApi
    ) -> set[str]:
        """Two witnesses: a worker on a lost Kubernetes node whose slurmd Slurm cannot reach either is set DOWN,
        deleted from Slurm and its pod force-deleted; one whose slurmd still answers is left drained. Returns the pods
        deleted. A Slurm outage raises (nothing more is done); a refused delete in Slurm does not hold the pod."""
        gone: set[str] = set()
        for worker in workers:
            host = lost.lost.get(worker.name)
            if host is None:
                continue
            node = nodes.get(worker.name)
            seconds = round(lost.not_ready.get(host, 0.0))
            if not slurmd_unreachable(node):
                why = f"slurmd on {worker.name} still answers Slurm: {worker.name} is drained and its pod stays"
                self._keep(loaded, worker, f"{why} (its jobs still run)", host=host, seconds=seconds)
                continue
            reason = lost_reason(host)
            self.ctx.slurm.changed(loaded.name, loaded.namespace)
            if node is not None and node.base != "DOWN":
                await api.set_down([worker.name], reason=reason)
                message = (
                    f"set {worker.name} DOWN in Slurm ({reason}): Kubernetes node {host} has been NotReady for "
                    f"{seconds}s and slurmctld cannot reach its slurmd; Slurm requeues or ends its jobs"
                )
                self.events.warn(loaded.obj, "NodeDown", message)
            if node is not None:
                try:
                    await api.delete_node(worker.name)
                except SlurmApiError as exc:
                    log.warning(
                        "Slurm refused to delete the node of a lost pod; the pod goes anyway %s",
                        kv(namespace=loaded.namespace, name=loaded.name, node=worker.name, error=exc),
                    )
                else:
                    message = f"deleted {worker.name} from Slurm ({reason}): its new pod registers it anew"
                    self.events.record(loaded.obj, "Normal", "SlurmNodeDeleted", message)
            if await self._force_delete(loaded, worker, host, seconds, why="Slurm cannot reach its slurmd"):
                gone.add(worker.name)
        return gone

    async def _recover_standby(
        self, loaded: Loaded, standby: list[WorkerPod], lost: LostVerdict, api: SlurmApi
    ) -> None:
        """The standby slurmctld on a lost Kubernetes node that Slurm cannot reach either (slurmrestd's ping of it
        goes unanswered) is force-deleted, so that its StatefulSet starts it on a Ready node. Out of reach it takes
        over nothing, and it stalls the primary: on each start, `scontrol reconfigure` and every SlurmctldTimeout
        seconds the primary asks every backup to yield control and waits for the answer, up to 30 s, holding the
        config read lock in its background loop (Slurm 24.11 controller.c _shutdown_backup_controller). The primary
        is left where it is: its standby takes over, and it takes control back when its node returns."""
        for pod in standby:
            host = lost.lost.get(pod.name)
            if host is None:
                continue
            seconds = round(lost.not_ready.get(host, 0.0))
            if (await api.controllers()).get(pod.name, False):
                why = f"the standby slurmctld {pod.name} still answers Slurm: its pod stays"
                self._keep(loaded, pod, why, host=host, seconds=seconds)
                continue
            await self._force_delete(loaded, pod, host, seconds, why="the standby slurmctld does not answer Slurm")

    def _keep(self, loaded: Loaded, pod: WorkerPod, why: str, *, host: str, seconds: int) -> None:
        """A pod on a lost node that Slurm still reaches stays: one Warning `NodeLost` per pod (its uid) saying why."""
        kept = self._kept.setdefault((loaded.namespace, loaded.name), set())
        if pod.uid not in kept:
            self.events.warn(
                loaded.obj, "NodeLost", f"Kubernetes node {host} has been NotReady for {seconds}s but {why}"
            )
            kept.add(pod.uid)

    async def _force_delete(self, loaded: Loaded, worker: WorkerPod, host: str, seconds: int, *, why: str) -> bool:
        """Delete this incarnation of the pod (its uid) at once: its kubelet is gone and would never confirm."""
        deleted = self._force_deleted.setdefault((loaded.namespace, loaded.name), set())
        try:
            await self.ctx.manager.client.delete(
                *POD, worker.name, namespace=loaded.namespace, grace_period_seconds=0, uid=worker.uid
            )
        except Conflict as exc:  # the name holds another pod already: this one is gone
            log.info(
                "pod of a lost node already replaced %s",
                kv(namespace=loaded.namespace, pod=worker.name, uid=worker.uid, error=exc),
            )
            deleted.add(worker.uid)
            return True
        except ApiError as exc:
            log.warning(
                "cannot delete the pod of a lost node %s",
                kv(namespace=loaded.namespace, pod=worker.name, node=host, error=exc),
            )
            return False
        deleted.add(worker.uid)
        message = (
            f"force-deleted Pod {worker.name} (uid {worker.uid}): Kubernetes node {host} has been NotReady for "
            f"{seconds}s and {why}; its StatefulSet re-creates it on a Ready node"
        )
        self.events.record(loaded.obj, "Normal", "Deleted", message)
        return True

    async def _replace_unhealthy(
        self,
        loaded: Loaded,
        workers: list[WorkerPod],
        nodes: Mapping[str, Node],
        running: Mapping[str, tuple[int, ...]],
        *,
        leaving: Collection[str],
        lost: Collection[str],
    ) -> set[str]:
        """Move each opted-in group's idle worker drained by a health check (one per group) off its Kubernetes node:
        cordon and label the node, then delete the pod. Returns the pods deleted."""
        key = (loaded.namespace, loaded.name)
        replaced = self._replaced[key] = still_remembered(self._replaced.get(key, {}), workers, nodes)
        # A pod on a Kubernetes node that is not Ready (or unknown) is not replaced, and holds its group back.
        unsettled = {
            *lost,
            *(w.name for w in workers if not w.node_name or node_ready(self.cache.get(*NODE, w.node_name)) is not True),
        }
        protected = {w.node_name for w in workers if control_plane(self.cache.get(*NODE, w.node_name))}
        verdict = judge_unhealthy(
            loaded.name, loaded.cluster.spec.workers, workers, nodes, running, leaving=leaving, lost=unsettled,
            replaced=replaced, protected=protected,
        )  # fmt: skip
        gone: set[str] = set()
        for replacement in verdict:
            if await self._replace(loaded, replacement):
                replaced[replacement.pod] = replacement
                gone.add(replacement.pod)
        return gone

    async def _replace(self, loaded: Loaded, r: Replacement) -> bool:
        """Cordon (and label) the Kubernetes node first: a pod deleted from an uncordoned node could come back to it.
        Nothing is deleted when the cordon fails. The node is never uncordoned here: that is an administrator's."""
        patch = {
            "metadata": {"labels": {LABEL_UNHEALTHY: r.check}, "annotations": {ANNOTATION_UNHEALTHY_REASON: r.reason}},
            "spec": {"unschedulable": True},
        }
        where = {"namespace": loaded.namespace, "name": loaded.name, "pod": r.pod, "node": r.k8s_node}
        if not self.cordons.allows():
            log.info("unhealthy worker waits: the operator cordoned its most nodes for now %s", kv(**where))
            return False
        self.cordons.spend()
        try:
            await self.ctx.manager.client.merge_patch(NODE.api_version, NODE.kind, r.k8s_node, patch)
        except ApiError as exc:
            log.warning("cannot cordon the node of an unhealthy worker: its pod stays %s", kv(**where, error=exc))
            return False
        try:
            await self.ctx.manager.client.delete(*POD, r.pod, namespace=loaded.namespace, uid=r.uid)
        except Conflict:
            log.info("pod of an unhealthy worker already replaced %s", kv(**where))
            return True
        except ApiError as exc:
            log.warning("cannot delete the pod of an unhealthy worker %s", kv(**where, error=exc))
            return False
        message = (
            f"replacing Pod {r.pod} (uid {r.uid}): the {CHECK_NAMES[r.check]} drained it in Slurm ({r.reason}); "
            f"cordoned Kubernetes node {r.k8s_node} ({LABEL_UNHEALTHY}={r.check}; uncordon it once repaired) and "
            "deleted the pod, which its StatefulSet re-creates on another node"
        )
        self.events.warn(loaded.obj, "Replacing", message)
        return True
