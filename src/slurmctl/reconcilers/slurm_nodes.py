"""Slurm's view on Kubernetes, read from each cluster's slurmrestd every `POLL_SECONDS`:

- each worker pod's `SlurmNodeState` condition (reason: the Slurm state, e.g. Idle, Allocated, Drained; message:
  Slurm's reason), applied to pods/status only when it differs from what the pod carries;
- the node counts in the cluster status (the IDLE, ALLOC and DRAIN columns), written only when they change;
- the `slurm_*` metrics (reconcilers/slurm_metrics.py);
- nodes slurmctl drained that no longer must go (the group grew back before they went) are resumed. A drain with
  another reason is an administrator's and is left alone.

Draining itself is the workers reconciler's (the drain gate): this loop only reads, except for that resume.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from slurmctl.api.v1 import SlurmClusterStatus, SlurmNodeCounts
from slurmctl.reconcilers.base import Context, Invalid, Loaded, now, status_part
from slurmctl.reconcilers.drain import drained_by_us
from slurmctl.reconcilers.slurm_access import SlurmApi
from slurmctl.reconcilers.slurm_metrics import Snapshot, collector_for
from slurmctl.reconcilers.workers import WorkersReconciler
from slurmctl.render import meta
from slurmctl.render.kinds import POD, SLURM_CLUSTER
from slurmctl.runtime import Request, Result
from slurmctl.runtime.logs import kv
from slurmctl.slurm import Node, SlurmError

log = logging.getLogger(__name__)

POLL_SECONDS = 15.0
CONDITION = "SlurmNodeState"
FIELD_MANAGER = "slurmctl-slurm-nodes"
WORKERS = "workers"
_USABLE = frozenset({"Idle", "Allocated", "Mixed"})


def node_condition(node: Node | None, live: Mapping[str, Any] | None) -> dict[str, Any]:
    """The pod condition for a Slurm node; lastTransitionTime is kept while the status does not flip, so an unchanged
    state renders an identical intent (and no write)."""
    if node is None:
        status, reason, message = "False", "NotRegistered", "slurmd has not registered this node with slurmctld"
    else:
        status = "True" if node.display in _USABLE else "False"
        reason = node.display  # CamelCase letters: a valid condition reason
        message = node.reason
    since = live.get("lastTransitionTime") if live and live.get("status") == status else None
    return {
        "type": CONDITION,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since or now().isoformat().replace("+00:00", "Z"),
    }


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


class SlurmNodesReconciler:
    """Keyed by SlurmCluster; each pass reads Slurm once and requeues itself (Slurm sends no events)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.cache = ctx.manager.cache
        self.metrics = collector_for(ctx.manager.metrics.registry)
        self._warned: dict[tuple[str, str], str] = {}

    async def __call__(self, req: Request) -> Result | None:
        obj = self.cache.get(*SLURM_CLUSTER, req.name, namespace=req.namespace)
        if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
            self.metrics.forget(req.namespace, req.name)
            self.ctx.slurm.forget(req.name, req.namespace)
            self._warned.pop((req.namespace, req.name), None)
            return None
        loaded = self.ctx.loader.load(obj)
        if isinstance(loaded, Invalid):
            return None
        if not loaded.cluster.spec.rest.enabled or self.ctx.slurm.address(loaded.name, loaded.namespace) is None:
            # Nothing to ask: no polling until slurmrestd is enabled (a spec change) and its pod is ready (a pod
            # event); both wake this loop.
            self.metrics.set(req.namespace, req.name, Snapshot(up=False))
            return None
        try:
            api = self.ctx.slurm.client(loaded.name, loaded.namespace)
            nodes = await api.nodes()
            jobs = await api.jobs()
            partitions = await api.partitions()
        except SlurmError as exc:
            self.metrics.set(req.namespace, req.name, Snapshot(up=False))
            if self._warned.get((req.namespace, req.name)) != str(exc):
                log.warning("cannot read Slurm %s", kv(namespace=req.namespace, name=req.name, error=exc))
            self._warned[(req.namespace, req.name)] = str(exc)
            return Result(requeue_after=POLL_SECONDS)
        self._warned.pop((req.namespace, req.name), None)
        self.metrics.set(req.namespace, req.name, Snapshot(True, nodes, jobs, partitions))
        mine = [n for n in nodes if n.name.startswith(meta.worker_group(loaded.name, ""))]
        await self._resume(loaded, mine, api)
        await self._pod_conditions(loaded, {n.name: n for n in mine})
        counts = node_counts(mine)
        # Through the one status writer (it owns the whole status; it writes only a change).
        self.ctx.status.submit(loaded.obj, status_part(SlurmClusterStatus(slurm_nodes=counts)))
        return Result(requeue_after=POLL_SECONDS)

    async def _resume(self, loaded: Loaded, nodes: list[Node], api: SlurmApi) -> None:
        workers = self.ctx.reconcilers[WORKERS]
        assert isinstance(workers, WorkersReconciler)
        leaving = {going.node for going in workers.leaving(loaded)}
        ours = sorted(n.name for n in nodes if drained_by_us(n) and n.name not in leaving)
        if ours:
            await api.resume(ours)
            workers.event(loaded, "Normal", "Resumed", f"resumed {', '.join(ours)} in Slurm: they no longer must go")

    async def _pod_conditions(self, loaded: Loaded, nodes: Mapping[str, Node]) -> None:
        pods = self.cache.list(*POD, namespace=loaded.namespace, labels=meta.selector(loaded.name, WORKERS))
        for pod in pods:
            md = pod.get("metadata") or {}
            if md.get("deletionTimestamp") or not (pod.get("status") or {}).get("podIP"):
                continue
            live = next(
                (c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == CONDITION), None
            )
            cond = node_condition(nodes.get(md["name"]), live)
            if live is not None and all((live.get(k) or "") == v for k, v in cond.items()):
                continue
            body = {
                "apiVersion": POD.api_version,
                "kind": POD.kind,
                "metadata": {"name": md["name"], "namespace": loaded.namespace},
                "status": {"conditions": [cond]},
            }
            await self.ctx.manager.apply_status(body, field_manager=FIELD_MANAGER)
