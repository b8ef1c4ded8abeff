"""The `login` component: the sshd ConfigMap, the login Services and StatefulSet, and LoginReady, planned purely from
the observation (`plan`)."""

from __future__ import annotations

from slurmctl.api.v1 import LOGIN_READY, Reason, SlurmClusterStatus, ready_summary
from slurmctl.reconcilers.observation import Observation
from slurmctl.reconcilers.observed import ready_replicas
from slurmctl.reconcilers.plan import Note, Plan
from slurmctl.render import meta
from slurmctl.render.kinds import SERVICE, STATEFULSET
from slurmctl.render.manifests import login_objects
from slurmctl.render.sshd import host_key_types


def plan(obs: Observation) -> Plan:
    c = obs.loaded.name
    munge, host_keys = meta.munge_secret(c), meta.ssh_host_keys_secret(c)
    if (waiting := obs.wait_for_keys(LOGIN_READY, munge, host_keys)) is not None:
        return waiting
    if not obs.jail_open and not obs.owned(STATEFULSET):
        message = "waiting for the populate-jail Job to succeed"
        return obs.report(LOGIN_READY, ok=False, reason=Reason.WAITING_FOR_JAIL, message=message)
    intents = login_objects(
        obs.inputs(
            munge_key_id=obs.keys[munge],
            host_keys_id=obs.keys[host_keys],
            host_keys=host_key_types(obs.key_fields[host_keys]),
        )
    )
    # A login pod's own Service (render/login.py) goes with the pod when the set shrinks.
    prune = obs.prune(SERVICE, keep=[o["metadata"]["name"] for o in intents if o["kind"] == SERVICE.kind])
    desired = obs.loaded.cluster.spec.login.size
    ready = min(desired, ready_replicas(obs.owned(STATEFULSET).get(meta.login(c))))
    events: tuple[Note, ...] = ()
    if ready == desired:
        message = "no login nodes requested" if desired == 0 else f"all {desired} login nodes are ready"
        cond = obs.condition(LOGIN_READY, ok=True, reason=Reason.READY, message=message)
    elif (refused := obs.refusals.get(meta.login(c))) is not None:
        events = obs.warn_once(LOGIN_READY, Reason.POD_REFUSED, refused)
        cond = obs.condition(LOGIN_READY, ok=False, reason=Reason.POD_REFUSED, message=refused)
    else:
        message = f"login nodes ready: {ready}/{desired}"
        cond = obs.condition(LOGIN_READY, ok=False, reason=Reason.NOT_READY, message=message)
    status = SlurmClusterStatus(conditions=[cond], login_ready=ready_summary(ready, desired))
    return Plan(LOGIN_READY, apply=tuple(intents), delete=tuple(prune), events=events, status=status)
