"""The `controller` component: slurmctld's StatefulSet and Service (and the standby's StatefulSet), and the
ControllerReady condition, planned purely from the observation (`plan`)."""

from __future__ import annotations

from slurmctl.api.v1 import CONTROLLER_READY, Condition, Reason, SlurmClusterStatus, ready_summary
from slurmctl.reconcilers.observation import Observation
from slurmctl.reconcilers.observed import ready_replicas
from slurmctl.reconcilers.plan import Note, Plan
from slurmctl.render import meta
from slurmctl.render.controller import controller_statefulset_names
from slurmctl.render.kinds import STATEFULSET
from slurmctl.render.manifests import controller_objects


def plan(obs: Observation) -> Plan:
    c = obs.loaded.name
    munge, jwt = meta.munge_secret(c), meta.jwt_key_secret(c)
    if (waiting := obs.wait_for_keys(CONTROLLER_READY, munge, jwt)) is not None:
        return waiting
    intents = controller_objects(obs.inputs(munge_key_id=obs.keys[munge], jwt_key_id=obs.keys[jwt]))
    # The standby's StatefulSet once spec.controller.standby is off (its pod goes; the state claim is the primary's,
    # and claims are never deleted).
    prune = obs.prune(STATEFULSET, keep=controller_statefulset_names(obs.loaded.cluster))
    ctl = obs.loaded.cluster.spec.controller
    statefulsets = obs.owned(STATEFULSET)
    primary = min(ctl.size, ready_replicas(statefulsets.get(meta.controller(c))))
    backup = min(ctl.size, ready_replicas(statefulsets.get(meta.controller_backup(c)))) if ctl.standby else 0
    desired = ctl.size * (2 if ctl.standby else 1)
    ready = primary + backup
    cond = _condition(obs, primary=primary, backup=backup)
    events: tuple[Note, ...] = ()
    names = (meta.controller(c), meta.controller_backup(c)) if ctl.standby else (meta.controller(c),)
    refused = next((obs.refusals[name] for name in names if name in obs.refusals), None)
    if ready < desired and refused is not None:
        events = obs.warn_once(CONTROLLER_READY, Reason.POD_REFUSED, refused)
        cond = obs.condition(CONTROLLER_READY, ok=False, reason=Reason.POD_REFUSED, message=refused)
    status = SlurmClusterStatus(conditions=[cond], controller_ready=ready_summary(ready, desired))
    return Plan(CONTROLLER_READY, apply=tuple(intents), delete=tuple(prune), events=events, status=status)


def _condition(obs: Observation, *, primary: int, backup: int) -> Condition:
    ctl = obs.loaded.cluster.spec.controller

    def cond(ok: bool, reason: Reason, message: str) -> Condition:
        return obs.condition(CONTROLLER_READY, ok=ok, reason=reason, message=message)

    if ctl.size == 0:
        return cond(False, Reason.STOPPED, "spec.controller.size is 0")
    if not ctl.standby:
        if primary:
            return cond(True, Reason.READY, "slurmctld is ready")
        return cond(False, Reason.NOT_READY, "slurmctld is not ready yet")
    primary_pod = f"{meta.controller(obs.loaded.name)}-0"
    backup_pod = f"{meta.controller_backup(obs.loaded.name)}-0"
    if primary and backup:
        return cond(True, Reason.READY, f"slurmctld ({primary_pod}) and its standby ({backup_pod}) are ready")
    if primary:
        message = f"slurmctld ({primary_pod}) is ready, its standby ({backup_pod}) is not: no failover until it is"
    elif backup:
        message = (
            f"the primary slurmctld ({primary_pod}) is not ready; its standby ({backup_pod}) is, and takes "
            "control once the primary has not answered for SlurmctldTimeout"
        )
    else:
        message = f"neither slurmctld ({primary_pod}) nor its standby ({backup_pod}) is ready yet"
    return cond(False, Reason.NOT_READY, message)
