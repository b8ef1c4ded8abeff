"""The `identity` component: the Job that writes spec.identity into the jail (render/identity.py), and IdentitySynced.

The Job runs once the jail is populated (its account files are the image's until then, and the copier would refuse a
volume someone else wrote first), and again whenever what it writes changes: a live Job whose hash annotation is not
the spec's is deleted and applied anew. A cluster that never declared anyone has neither Job nor condition; once
anything was declared the Job stays, even for an empty spec: removing every user must still lock them.

What it did is in its pod's termination message (images/scripts/sync-identity): one line per declared entry it
refused (the field path first: `spec.identity.users[2].uid: 2000 is already used by jailuser`), then a summary. The
operator reads it from the Job's pods, which its pod informer holds already (component label: no new permission).
Refused entries make IdentitySynced False (IdentityConflict) with one Warning Event and one log line while that is
news; every other entry was written. Nothing is retried in a loop: the fix is a spec change (another name or id),
which re-runs the Job, or removing the account made by hand and then the Job (`kubectl delete job`), which the
operator applies anew at once.
"""

from __future__ import annotations

from collections.abc import Iterable

from slurmctl.api.v1 import IDENTITY_SYNCED, Reason, SlurmClusterStatus
from slurmctl.reconcilers.base import ComponentReconciler
from slurmctl.reconcilers.component import component_is
from slurmctl.reconcilers.observation import Observation
from slurmctl.reconcilers.observed import JobState, Live, cluster_of_pod, owner_uids, uid
from slurmctl.reconcilers.plan import Delete, LogLine, Note, Plan
from slurmctl.reconcilers.views import Pod
from slurmctl.render import meta
from slurmctl.render.identity import (
    COMPONENT,
    IDENTITY_HASH_ANNOTATION,
    declares_anything,
    identity_hash,
    render_identity_job,
)
from slurmctl.render.kinds import JOB, POD
from slurmctl.runtime.handlers import enqueue_mapped
from slurmctl.runtime.manager import ControllerBuilder
from slurmctl.runtime.objects import meta_of

REFUSED_PREFIX = "spec.identity."
# A condition's message stays readable: the first refusals, then how many more.
MAX_REFUSALS_SHOWN = 10


class IdentityReconciler(ComponentReconciler):
    def watch(self, builder: ControllerBuilder) -> None:
        """The Job's pods: their termination message is what the condition reports."""
        builder.watches(*POD, enqueue_mapped(cluster_of_pod), predicates=[component_is(COMPONENT)])


def said(pods: Iterable[Live]) -> str | None:
    """The termination message of the newest of a Job's pods whose container ended with status 0; None while none
    has."""
    done: list[tuple[str, str]] = []
    for pod in map(Pod.of, pods):
        for container in pod.status.container_statuses:
            terminated = container.state.terminated
            if terminated is not None and terminated.exit_code == 0:
                done.append((pod.metadata.creation_timestamp, terminated.message))
    return max(done)[1] if done else None


def refusals(message: str) -> list[str]:
    """The lines of a termination message that name a refused entry."""
    return [line.strip() for line in message.splitlines() if line.strip().startswith(REFUSED_PREFIX)]


def plan(obs: Observation) -> Plan:
    loaded = obs.loaded
    cluster = loaded.cluster
    name = meta.identity(loaded.name)
    live = obs.owned(JOB).get(name)
    previous = loaded.condition(IDENTITY_SYNCED)
    if not declares_anything(cluster) and live is None and previous is None:
        return Plan(IDENTITY_SYNCED)  # nothing declared, ever: no Job, no condition
    if not obs.jail_open:
        return obs.report(
            IDENTITY_SYNCED,
            ok=False,
            reason=Reason.WAITING_FOR_JAIL,
            message="waiting for the jail to be populated (JailPopulated) before writing spec.identity into it",
        )
    wanted = identity_hash(cluster)
    deletes: tuple[Delete, ...] = ()
    if live is not None and meta_of(live).annotations.get(IDENTITY_HASH_ANNOTATION) != wanted:
        why = "spec.identity changed"
        note = Note("Normal", "RecreatingJob", f"re-running Job {name}: {why}")
        deletes = (Delete(JOB, name, why, uid=uid(live), event=note),)
        live = None
    if live is None:
        return Plan(
            IDENTITY_SYNCED,
            apply=(render_identity_job(cluster),),
            delete=deletes,
            status=_status(obs, False, Reason.SYNCING, f"Job {name} is writing spec.identity into the jail"),
        )
    job = JobState.of(live)
    return _outcome(obs, name, job, said(p for p in obs.pods.values() if uid(live) in owner_uids(p)))


def _outcome(obs: Observation, name: str, job: JobState, message: str | None) -> Plan:
    """What the live Job for the current spec did: failed, still running (or refused at admission), or done, with
    the entries it refused."""
    if job.failed:
        text = f"Job {name} failed: {job.failure}"
        return _plan(
            obs, False, Reason.JOB_FAILED, text, events=obs.warn_once(IDENTITY_SYNCED, Reason.JOB_FAILED, text)
        )
    if not job.succeeded or message is None:
        if (refused := obs.refusals.get(name)) is not None:
            events = obs.warn_once(IDENTITY_SYNCED, Reason.POD_REFUSED, refused)
            return _plan(obs, False, Reason.POD_REFUSED, refused, events=events)
        return _plan(obs, False, Reason.SYNCING, f"Job {name} is writing spec.identity into the jail")
    entries = refusals(message)
    if not entries:
        summary = next((line.strip() for line in message.splitlines() if line.strip()), "")
        text = f"Job {name} wrote spec.identity into the jail" + (f": {summary}" if summary else "")
        return _plan(obs, True, Reason.SYNCED, text)
    shown = "; ".join(entries[:MAX_REFUSALS_SHOWN])
    if len(entries) > MAX_REFUSALS_SHOWN:
        shown += f"; and {len(entries) - MAX_REFUSALS_SHOWN} more (the Job's log names them)"
    text = (
        f"{len(entries)} declared entries refused, their names or ids are accounts' not made by slurmctl (kept as "
        f"they are; every other entry was written): {shown}"
    )
    events = obs.warn_once(IDENTITY_SYNCED, Reason.IDENTITY_CONFLICT, text)
    warnings = (("identity entries refused", {"job": name, "refused": shown}),) if events else ()
    return _plan(obs, False, Reason.IDENTITY_CONFLICT, text, events=events, warnings=warnings)


def _plan(
    obs: Observation,
    ok: bool,
    reason: Reason,
    message: str,
    *,
    events: tuple[Note, ...] = (),
    warnings: tuple[LogLine, ...] = (),
) -> Plan:
    return Plan(IDENTITY_SYNCED, events=events, warnings=warnings, status=_status(obs, ok, reason, message))


def _status(obs: Observation, ok: bool, reason: Reason, message: str) -> SlurmClusterStatus:
    return SlurmClusterStatus(conditions=[obs.condition(IDENTITY_SYNCED, ok=ok, reason=reason, message=message)])
