"""The `rest` component: slurmrestd's Deployment and Service, and RestReady, planned purely from the observation
(`plan`).

slurmrestd needs no key of its own (slurmctld verifies the callers' tokens) and mounts only the configs ConfigMap, so
nothing gates it; disabling it removes both objects (the JWT key stays: slurmctld still verifies users' tokens).
"""

from __future__ import annotations

from slurmctl.api.v1 import REST_READY, Reason, SlurmClusterStatus
from slurmctl.reconcilers.observation import Observation
from slurmctl.reconcilers.observed import available_replicas
from slurmctl.reconcilers.plan import Note, Plan
from slurmctl.render import meta
from slurmctl.render.kinds import DEPLOYMENT, SERVICE
from slurmctl.render.manifests import rest_objects


def plan(obs: Observation) -> Plan:
    if not obs.loaded.cluster.spec.rest.enabled:
        removed = (*obs.prune(DEPLOYMENT, keep=()), *obs.prune(SERVICE, keep=()))
        if obs.loaded.condition(REST_READY) is None:  # never enabled: nothing to say
            return Plan(REST_READY, delete=removed)
        said = obs.report(REST_READY, ok=False, reason=Reason.DISABLED, message="spec.rest.enabled is false")
        return Plan(REST_READY, delete=removed, status=said.status)
    name = meta.rest(obs.loaded.name)
    events: tuple[Note, ...] = ()
    if available_replicas(obs.owned(DEPLOYMENT).get(name)) >= 1:
        cond = obs.condition(REST_READY, ok=True, reason=Reason.READY, message="slurmrestd is ready")
    elif (refused := obs.refusals.get(name)) is not None:
        events = obs.warn_once(REST_READY, Reason.POD_REFUSED, refused)
        cond = obs.condition(REST_READY, ok=False, reason=Reason.POD_REFUSED, message=refused)
    else:
        cond = obs.condition(REST_READY, ok=False, reason=Reason.NOT_READY, message="slurmrestd is not ready yet")
    intents = rest_objects(obs.inputs())
    return Plan(REST_READY, apply=tuple(intents), events=events, status=SlurmClusterStatus(conditions=[cond]))
