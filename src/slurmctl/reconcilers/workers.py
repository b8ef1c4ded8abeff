"""The `workers` component: one StatefulSet per worker group, the workers' headless Service, WorkersReady.

Scale-in goes through `replicas_after_gate`: the one place a drain gate (drain the Slurm nodes first, fail closed)
will hold a shrinking group at its current size.

A StatefulSet's selector is immutable. Releases before 0.2 labelled worker children `component: worker`; the
component is now `workers` everywhere (controller, label, field manager). A live StatefulSet whose selector differs
from the rendered one is therefore deleted with foreground propagation (its pods go first, so the new pods cannot
clash with old ones of the same name) and applied anew once it is gone: its deletion event wakes this reconciler.
"""

from __future__ import annotations

from slurmctl.api.v1 import Reason, SlurmClusterStatus, WorkerGroup, WorkerGroupStatus, ready_summary
from slurmctl.reconcilers.base import ComponentReconciler, Loaded, Obj
from slurmctl.reconcilers.observed import deleting, match_labels, ready_replicas, spec_replicas
from slurmctl.reconcilers.populate_jail import jail_gate_open
from slurmctl.render import meta
from slurmctl.render.kinds import STATEFULSET, Kind


def replicas_after_gate(group: WorkerGroup, live: int | None) -> int:
    """Replicas to apply for a group. Growing and creating are never held; shrinking is where a drain gate goes."""
    if live is None or group.size >= live:
        return group.size
    # Scale-in is allowed at once today (slurmctld marks the vanished nodes down). The drain gate goes here: it will
    # return `live` until the nodes that are going away are drained in Slurm, failing closed when it cannot tell.
    return group.size


class WorkersReconciler(ComponentReconciler):
    async def reconcile_valid(self, loaded: Loaded) -> None:
        c, ns = loaded.name, loaded.namespace
        ids = await self.secret_ids(loaded, meta.munge_secret(c))
        if ids is None:
            return
        (munge_key_id,) = ids
        if not jail_gate_open(self, loaded) and not self.owned(loaded, STATEFULSET):
            message = "waiting for the populate-jail Job to succeed"
            await self.report(loaded, ok=False, reason=Reason.WAITING_FOR_JAIL, message=message)
            return
        groups = sorted(loaded.cluster.spec.workers, key=lambda g: g.name)
        replicas: dict[str, int] = {}
        for group in groups:
            current = spec_replicas(self.live(STATEFULSET, meta.worker_group(c, group.name), ns))
            replicas[group.name] = replicas_after_gate(group, current)
            if current is not None and replicas[group.name] != current:
                message = f"worker group {group.name}: {current} -> {replicas[group.name]} nodes"
                self.event(loaded, "Normal", "Scaled", message)
        intents = [
            obj
            for obj in self.desired(self.inputs(loaded, munge_key_id=munge_key_id, replicas=replicas))
            if await self._selector_holds(loaded, obj)
        ]
        await self.apply(loaded, intents)
        await self.prune(loaded, STATEFULSET, keep=[meta.worker_group(c, g.name) for g in groups])
        rows = [
            WorkerGroupStatus(
                name=group.name,
                desired=group.size,
                ready=min(group.size, ready_replicas(self.live(STATEFULSET, meta.worker_group(c, group.name), ns))),
            )
            for group in groups
        ]
        total_ready, total = sum(r.ready for r in rows), sum(r.desired for r in rows)
        waiting = [f"{r.name} {r.ready}/{r.desired}" for r in rows if r.ready < r.desired]
        if waiting:
            message = "worker groups not ready: " + ", ".join(waiting)
            cond = self.condition(loaded, ok=False, reason=Reason.NOT_READY, message=message)
        else:
            message = f"all {total} worker nodes are ready"
            cond = self.condition(loaded, ok=True, reason=Reason.READY, message=message)
        await self.write_status(
            loaded,
            SlurmClusterStatus(conditions=[cond], workers=rows, workers_ready=ready_summary(total_ready, total)),
        )

    async def _selector_holds(self, loaded: Loaded, intent: Obj) -> bool:
        """False for a StatefulSet whose live selector differs from the intent's: it is being re-created (deleted
        here, once), and applying over it would be rejected (the selector is immutable)."""
        if Kind(intent["apiVersion"], intent["kind"]) != STATEFULSET:
            return True
        name = intent["metadata"]["name"]
        live = self.live(STATEFULSET, name, loaded.namespace)
        if live is None or match_labels(live) == intent["spec"]["selector"]["matchLabels"]:
            return True
        if not deleting(live):
            why = "its selector changed (renamed component label); it is re-created once its pods are gone"
            await self.delete(loaded, STATEFULSET, name, why=why, propagation="Foreground")
        return False
