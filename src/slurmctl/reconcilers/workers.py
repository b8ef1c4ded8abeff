"""The `workers` component: one StatefulSet per worker group, the workers' headless Service, WorkersReady.

Scale-in goes through `replicas_after_gate`: the one place a drain gate (drain the Slurm nodes first, fail closed)
will hold a shrinking group at its current size.
"""

from __future__ import annotations

from typing import Any

from slurmctl.api.v1 import WORKERS_READY, WorkerGroup, WorkerGroupStatus, ready_summary
from slurmctl.reconcilers.base import ComponentReconciler, Loaded, statefulset_ready
from slurmctl.reconcilers.populate_jail import jail_gate_open
from slurmctl.render import meta
from slurmctl.render.workers import COMPONENT, render_worker_statefulset, render_workers_service

STATEFULSET = ("apps/v1", "StatefulSet")


def live_replicas(sts: dict[str, Any] | None) -> int | None:
    return None if sts is None else int((sts.get("spec") or {}).get("replicas") or 0)


def replicas_after_gate(group: WorkerGroup, live: int | None) -> int:
    """Replicas to apply for a group. Growing and creating are never held; shrinking is where a drain gate goes."""
    if live is None or group.size >= live:
        return group.size
    # Scale-in is allowed at once today (slurmctld marks the vanished nodes down). The drain gate goes here: it will
    # return `live` until the nodes that are going away are drained in Slurm, failing closed when it cannot tell.
    return group.size


class WorkersReconciler(ComponentReconciler):
    component = "workers"
    condition_type = WORKERS_READY

    async def reconcile_valid(self, loaded: Loaded) -> None:
        c, ns = loaded.name, loaded.namespace
        ids = await self.secret_ids(loaded, meta.munge_secret(c))
        if ids is None:
            return
        (munge_key_id,) = ids
        if not jail_gate_open(self, loaded) and not self.owned(loaded, *STATEFULSET, COMPONENT):
            await self.wait(loaded, reason="WaitingForJail", message="waiting for the populate-jail Job to succeed")
            return
        groups = sorted(loaded.cluster.spec.workers, key=lambda g: g.name)
        intents: list[dict[str, Any]] = [render_workers_service(loaded.cluster)]
        for group in groups:
            live = self.live(*STATEFULSET, meta.worker_group(c, group.name), ns)
            current = live_replicas(live)
            replicas = replicas_after_gate(group, current)
            if current is not None and replicas != current:
                self.event(loaded, "Normal", "Scaled", f"worker group {group.name}: {current} -> {replicas} nodes")
            intents.append(
                render_worker_statefulset(loaded.cluster, group, replicas=replicas, munge_key_id=munge_key_id)
            )
        await self.apply(loaded, intents)
        await self.prune(loaded, *STATEFULSET, component=COMPONENT, keep=[meta.worker_group(c, g.name) for g in groups])
        rows = [
            WorkerGroupStatus(
                name=group.name,
                desired=group.size,
                ready=min(group.size, statefulset_ready(self.live(*STATEFULSET, meta.worker_group(c, group.name), ns))),
            )
            for group in groups
        ]
        total_ready, total = sum(r.ready for r in rows), sum(r.desired for r in rows)
        waiting = [f"{r.name} {r.ready}/{r.desired}" for r in rows if r.ready < r.desired]
        if waiting:
            cond = self.condition(
                loaded, ok=False, reason="NotReady", message="worker groups not ready: " + ", ".join(waiting)
            )
        else:
            cond = self.condition(loaded, ok=True, reason="Ready", message=f"all {total} worker nodes are ready")
        await self.write_status(
            loaded,
            {
                "conditions": [cond],
                "workers": [r.to_dict() for r in rows],
                "workersReady": ready_summary(total_ready, total),
            },
        )
