"""The `cluster` component: the key Secrets (created once, never rotated), the Slurm configs ConfigMap, the
`SpecValid` condition and the aggregate phase.

The phase is derived from the conditions of the registered components only (each declares whether it counts for
Available): `Degraded` means something that was ready at this generation no longer is; a spec change that is still
rolling out is `Reconciling`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from slurmctl.api.v1 import Phase, Reason, SlurmCluster, SlurmClusterStatus
from slurmctl.reconcilers.base import ApplyRejected, ComponentReconciler, Invalid, Loaded, make_condition, status_body
from slurmctl.reconcilers.keys import new_jwt_key, new_munge_key, new_ssh_host_keys
from slurmctl.render import meta
from slurmctl.render.cluster import render_jwt_key_secret, render_munge_secret, render_ssh_host_keys_secret

log = logging.getLogger(__name__)


def aggregate_phase(
    cluster: SlurmCluster, *, required: Iterable[str], previous: Phase | None, previous_generation: int | None
) -> Phase:
    """The phase from the `required` condition types (those of the components that count for Available)."""
    generation = cluster.metadata.generation or 0
    status = cluster.status
    conditions = [status.condition(t) if status else None for t in required]
    if all(c is None for c in conditions):
        return "Pending"
    current = [c for c in conditions if c is not None and c.observed_generation == generation]
    if len(current) == len(conditions) and all(c.status == "True" for c in current):
        return "Available"
    if any(c.status == "False" and not Reason.means_progress(c.reason) for c in current):
        return "Degraded"
    was_available = previous in ("Available", "Degraded") and previous_generation == generation
    return "Degraded" if was_available else "Reconciling"


class ClusterReconciler(ComponentReconciler):
    async def invalid(self, invalid: Invalid) -> None:
        """An invalid spec changes no child: only the status says what is wrong, naming each field."""
        md = invalid.obj.get("metadata") or {}
        message = "; ".join(invalid.problems)
        cond = make_condition(invalid.obj, self.condition_type, ok=False, reason=Reason.INVALID_SPEC, message=message)
        conditions = (invalid.obj.get("status") or {}).get("conditions") or []
        previous = next((c for c in conditions if c.get("type") == self.condition_type), None)
        if previous is None or previous.get("message") != message or previous.get("status") != "False":
            self.warn(invalid, Reason.INVALID_SPEC.value, message)  # logged as a warning too
        status = SlurmClusterStatus(phase="Failed", observed_generation=md.get("generation", 0), conditions=[cond])
        body = status_body(md.get("name", ""), md.get("namespace", ""), status)
        await self.manager.apply_status(body, field_manager=self.field_manager)

    def rejected_status(self, loaded: Loaded, rejected: ApplyRejected) -> SlurmClusterStatus:
        """The shared configs or keys could not be applied: no component can run, as with an invalid spec."""
        cond = self.condition(loaded, ok=False, reason=Reason.APPLY_REJECTED, message=rejected.message)
        return SlurmClusterStatus(phase="Failed", observed_generation=loaded.generation, conditions=[cond])

    async def reconcile_valid(self, loaded: Loaded) -> None:
        cluster = loaded.cluster

        async def munge() -> dict[str, Any]:
            return render_munge_secret(cluster, new_munge_key())

        async def jwt() -> dict[str, Any]:
            return render_jwt_key_secret(cluster, new_jwt_key())

        async def host_keys() -> dict[str, Any]:
            types = self.ctx.host_key_types
            if "rsa" in types:  # RSA-3072 takes ~0.2 s of CPU: keep it off the event loop
                return render_ssh_host_keys_secret(cluster, await asyncio.to_thread(new_ssh_host_keys, types))
            return render_ssh_host_keys_secret(cluster, new_ssh_host_keys(types))  # well under a millisecond

        # Configs and the munge and JWT keys first: the controller needs only these. Host keys are for the login
        # nodes alone.
        await self.apply(loaded, self.desired(self.inputs(loaded)))
        await self.create_once(loaded, meta.munge_secret(loaded.name), munge)
        await self.create_once(loaded, meta.jwt_key_secret(loaded.name), jwt)
        await self.create_once(loaded, meta.ssh_host_keys_secret(loaded.name), host_keys)
        status = loaded.status
        phase = aggregate_phase(
            cluster,
            required=[c.condition for c in self.ctx.components if c.required(cluster)],
            previous=status.phase,
            previous_generation=status.observed_generation,
        )
        cond = self.condition(loaded, ok=True, reason=Reason.VALID, message="the spec is valid")
        await self.write_status(
            loaded, SlurmClusterStatus(phase=phase, observed_generation=loaded.generation, conditions=[cond])
        )
