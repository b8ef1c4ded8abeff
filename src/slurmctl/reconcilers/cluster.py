"""The `cluster` component: the key Secrets (created once, never rotated), the Slurm configs ConfigMap, the
`SpecValid` condition and the aggregate phase.

The phase is derived from the components' conditions only: `Degraded` means something that was ready at this
generation no longer is; a spec change that is still rolling out is `Reconciling`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from slurmctl.api.v1 import (
    ACCOUNTING_READY,
    API_VERSION,
    CONTROLLER_READY,
    JAIL_POPULATED,
    KIND,
    LOGIN_READY,
    SPEC_VALID,
    WORKERS_READY,
    Phase,
    SlurmCluster,
)
from slurmctl.reconcilers.base import ComponentReconciler, Loaded, build_condition
from slurmctl.reconcilers.keys import new_munge_key, new_ssh_host_keys
from slurmctl.render import meta
from slurmctl.render.cluster import render_munge_secret, render_slurm_configs_map, render_ssh_host_keys_secret
from slurmctl.runtime.logs import kv

log = logging.getLogger(__name__)

# Reasons of a False condition that mean "on its way"; any other reason is a failure that needs a person.
PROGRESS_REASONS = frozenset(
    {"Populating", "Overwriting", "NotReady", "WaitingForKeys", "WaitingForJail", "Stopped", "RecreatingJob"}
)


def required_conditions(cluster: SlurmCluster) -> tuple[str, ...]:
    """The conditions that must all be True for the cluster to be Available (the benchmark is not one of them)."""
    required = (JAIL_POPULATED, CONTROLLER_READY, WORKERS_READY, LOGIN_READY)
    return (*required, ACCOUNTING_READY) if cluster.spec.accounting.enabled else required


def aggregate_phase(cluster: SlurmCluster, *, previous: Phase | None, previous_generation: int | None) -> Phase:
    generation = cluster.metadata.generation or 0
    status = cluster.status
    conditions = [status.condition(t) if status else None for t in required_conditions(cluster)]
    if all(c is None for c in conditions):
        return "Pending"
    current = [c for c in conditions if c is not None and c.observed_generation == generation]
    if len(current) == len(conditions) and all(c.status == "True" for c in current):
        return "Available"
    if any(c.status == "False" and c.reason not in PROGRESS_REASONS for c in current):
        return "Degraded"
    was_available = previous in ("Available", "Degraded") and previous_generation == generation
    return "Degraded" if was_available else "Reconciling"


class ClusterReconciler(ComponentReconciler):
    component = "cluster"
    condition_type = SPEC_VALID

    async def invalid(self, obj: Mapping[str, Any], problems: list[str]) -> None:
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

        # Configs and the munge key first: controller and workers need only these. Host keys (the slow RSA key)
        # are for the login nodes alone.
        await self.apply(loaded, [render_slurm_configs_map(loaded.cluster)])
        await self.create_once(loaded, meta.munge_secret(loaded.name), munge)
        await self.create_once(loaded, meta.ssh_host_keys_secret(loaded.name), host_keys)
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
