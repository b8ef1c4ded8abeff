"""The `cluster` component: the key Secrets (created once, never rotated), the Slurm configs ConfigMap, the
`SpecValid` condition and the aggregate phase.

The phase is derived from the components' conditions only: `Degraded` means something that was ready at this
generation no longer is; a spec change that is still rolling out is `Reconciling`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from slurmctl.api.v1 import (
    API_VERSION,
    CONTROLLER_READY,
    KIND,
    LOGIN_READY,
    SPEC_VALID,
    WORKERS_READY,
    Phase,
    SlurmCluster,
    check_cluster,
)
from slurmctl.reconcilers.base import SECRET, ComponentReconciler, Loaded, build_condition
from slurmctl.reconcilers.keys import new_munge_key, new_ssh_host_keys
from slurmctl.render import meta
from slurmctl.render.cluster import render_munge_secret, render_slurm_configs_map, render_ssh_host_keys_secret
from slurmctl.runtime import Conflict, NotFound, Request
from slurmctl.runtime.logs import kv

log = logging.getLogger(__name__)

# The conditions that must all be True for the cluster to be Available (later components add theirs).
COMPONENT_CONDITIONS = (CONTROLLER_READY, WORKERS_READY, LOGIN_READY)


def aggregate_phase(cluster: SlurmCluster, *, previous: Phase | None, previous_generation: int | None) -> Phase:
    generation = cluster.metadata.generation or 0
    status = cluster.status
    conditions = [status.condition(t) if status else None for t in COMPONENT_CONDITIONS]
    if all(c is None for c in conditions):
        return "Pending"
    current = [c for c in conditions if c is not None and c.observed_generation == generation]
    if len(current) == len(conditions) and all(c.status == "True" for c in current):
        return "Available"
    was_available = previous in ("Available", "Degraded") and previous_generation == generation
    return "Degraded" if was_available else "Reconciling"


class ClusterReconciler(ComponentReconciler):
    component = "cluster"
    condition_type = SPEC_VALID

    async def __call__(self, req: Request) -> None:
        obj = self.cache.get(API_VERSION, KIND, req.name, namespace=req.namespace)
        if obj is None:
            return
        cluster, problems = check_cluster(obj)
        if cluster is None or problems:
            await self._report_invalid(obj, [str(p) for p in problems])
            return
        await self.reconcile_valid(Loaded(obj, cluster))

    async def _report_invalid(self, obj: Mapping[str, Any], problems: list[str]) -> None:
        """An invalid spec changes no child: only the status says what is wrong, naming each field."""
        md = obj.get("metadata") or {}
        message = "; ".join(problems) or "the spec could not be read"
        condition = build_condition(obj, SPEC_VALID, ok=False, reason="InvalidSpec", message=message)
        previous = [c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == SPEC_VALID]
        if not previous or previous[0].get("message") != message or previous[0].get("status") != "False":
            log.warning(
                "invalid spec %s",
                kv(
                    controller=self.component,
                    namespace=md.get("namespace", ""),
                    name=md.get("name", ""),
                    problems=message,
                ),
            )
            self.manager.recorder.record(obj, "Warning", "InvalidSpec", message)
        body = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": md.get("name"), "namespace": md.get("namespace")},
            "status": {"phase": "Failed", "observedGeneration": md.get("generation", 0), "conditions": [condition]},
        }
        await self.manager.apply_status(body, field_manager=self.field_manager)

    async def reconcile_valid(self, loaded: Loaded) -> None:
        cluster = loaded.cluster

        async def munge() -> dict[str, Any]:
            return render_munge_secret(cluster, new_munge_key())

        async def host_keys() -> dict[str, Any]:
            # RSA key generation takes a noticeable fraction of a second: keep it off the event loop.
            return render_ssh_host_keys_secret(cluster, await asyncio.to_thread(new_ssh_host_keys))

        await self._create_once(loaded, meta.munge_secret(loaded.name), munge)
        await self._create_once(loaded, meta.ssh_host_keys_secret(loaded.name), host_keys)
        await self.apply(loaded, [render_slurm_configs_map(loaded.cluster)])
        status = loaded.cluster.status
        phase = aggregate_phase(
            loaded.cluster,
            previous=status.phase if status else None,
            previous_generation=status.observed_generation if status else None,
        )
        await self.write_status(
            loaded,
            {
                "phase": phase,
                "observedGeneration": loaded.generation,
                "conditions": [self.condition(loaded, ok=True, reason="Valid", message="the spec is valid")],
            },
        )

    async def _create_once(self, loaded: Loaded, name: str, render: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        """Key material is created, never applied: POST fails on an existing Secret, so a stale cache can never
        make the operator overwrite (rotate) a key that pods already use."""
        if self.live(*SECRET, name, loaded.namespace) is not None:
            return
        try:
            await self.manager.client.get(*SECRET, name, namespace=loaded.namespace)
            return
        except NotFound:
            pass
        try:
            await self.manager.client.create(await render())
        except Conflict:
            return
        self.event(loaded, "Normal", "Created", f"created Secret {name}")
