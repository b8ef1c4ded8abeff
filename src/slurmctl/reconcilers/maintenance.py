"""The `maintenance` component: MaintenancePending (which changes that restart a Slurm daemon's pod wait for a
maintenance window, and when that window is) and the Job that keeps Slurm's MAINT reservation over the next window
(render/maintenance.py), planned purely from the observation (`plan`).

The roll itself is held by each component's gate (reconcilers/maintenance_gate.py); this component only reads the
outcome: a workload whose pods are not all of its current template has a change pending. It reads the other
components' StatefulSets, Deployments and pods from the cache (their labels come from the registry's declarations),
never their modules.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from slurmctl.api.v1 import (
    MAINTENANCE_PENDING,
    Reason,
    SlurmClusterStatus,
    Span,
    current_window,
    next_window,
    rfc3339,
)
from slurmctl.reconcilers.base import ComponentReconciler
from slurmctl.reconcilers.component import owned
from slurmctl.reconcilers.loading import Loaded
from slurmctl.reconcilers.maintenance_gate import seconds_to_change
from slurmctl.reconcilers.observation import Observation
from slurmctl.reconcilers.observed import job_outcome, match_labels, uid
from slurmctl.reconcilers.plan import Create, Delete, Note, Obj, Plan
from slurmctl.render import meta
from slurmctl.render.kinds import DEPLOYMENT, JOB, POD, STATEFULSET
from slurmctl.render.maintenance import RESERVATION, render_reservation_job, reservation_job_name
from slurmctl.render.manifests import Inputs
from slurmctl.runtime.objects import meta_of

RESERVATION_WORDS = f"Slurm reservation {RESERVATION} (MAINT, IGNORE_JOBS, all nodes)"


@dataclass(frozen=True)
class MaintenanceObservation(Observation):
    """The component's observation, plus the other components' workloads (StatefulSets and Deployments, by
    "Kind/name") and the pods of those whose pods are not all of their current template, by name."""

    workloads: Mapping[str, Obj] = field(default_factory=dict)
    rolling_pods: Mapping[str, Obj] = field(default_factory=dict)

    @classmethod
    def of(cls, base: Observation, **facts: Any) -> MaintenanceObservation:
        return cls(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)}, **facts)


class MaintenanceReconciler(ComponentReconciler):
    async def observe(self, loaded: Loaded) -> MaintenanceObservation:
        """Pods only of the workloads being rolled, by their selectors: a pass is asked for by each workload status
        change, and reading all of a cluster's pods each time decoded 3,584 worker pods a pass, most of the operator's
        CPU while a large cluster came up (docs/performance.md)."""
        base = await super().observe(loaded)
        workloads: dict[str, Obj] = {}
        for component in self.ctx.components:
            if component.name == self.component:
                continue
            for kind in (STATEFULSET, DEPLOYMENT):
                if kind in component.owns:
                    for obj in owned(self.cache, loaded, kind, component.labels):
                        workloads[f"{kind.kind}/{obj['metadata']['name']}"] = obj
        found_pods: dict[str, Obj] = {}
        for key, workload in workloads.items():
            wanted = match_labels(workload)
            if wanted and _rolling(key, workload) is not None:
                for pod in self.cache.list(*POD, namespace=loaded.namespace, labels=wanted):
                    found_pods[pod["metadata"]["name"]] = pod
        return MaintenanceObservation.of(base, workloads=workloads, rolling_pods=found_pods)


def plan(obs: Observation) -> Plan:
    assert isinstance(obs, MaintenanceObservation), "MaintenanceReconciler.observe makes the maintenance observation"
    loaded, c = obs.loaded, obs.loaded.name
    windows = loaded.cluster.spec.maintenance.windows
    jobs = obs.owned(JOB)
    current = current_window(windows, obs.now) if windows else None
    upcoming = next_window(windows, obs.now) if windows else None
    covered = current or upcoming
    if covered is None:
        return _without_windows(obs, jobs, bool(windows))
    name = reservation_job_name(c, covered)
    creates: tuple[Create, ...] = ()
    # The Job's pod mounts the munge key: made once the cluster component has created it.
    if name not in jobs and meta.munge_secret(c) in obs.keys:
        creates = (Create(render_reservation_job(loaded.cluster, covered)),)
    # Older reservation Jobs: the new one replaces what they made.
    deletes = [Delete(JOB, old, "replaced by the Job for the next window", uid=uid(job)) for old, job in jobs.items()]
    deletes = [d for d in deletes if d.name != name]
    reservation, failed = _reservation(jobs.get(name), name, covered)
    changes = pending_changes(obs.workloads, obs.rolling_pods.values())
    if changes and current is None:
        reason = Reason.WAITING_FOR_WINDOW
        message = (
            f"waiting for the maintenance window from {rfc3339(covered.start)} to {rfc3339(covered.end)} "
            f"({covered.field}): {'; '.join(changes)}. {reservation}"
        )
    elif changes:
        reason = Reason.IN_WINDOW
        message = (
            f"applying in the maintenance window open until {rfc3339(covered.end)} ({covered.field}): "
            f"{'; '.join(changes)}. {reservation}"
        )
    else:
        reason = Reason.NOTHING_PENDING
        when = (
            f"the maintenance window {covered.field} is open until {rfc3339(covered.end)}"
            if current
            else f"the next maintenance window is {rfc3339(covered.start)} to {rfc3339(covered.end)} ({covered.field})"
        )
        message = f"no change that restarts a Slurm daemon's pod is pending; {when}. {reservation}"
    cond = obs.condition(MAINTENANCE_PENDING, ok=bool(changes), reason=reason, message=message)
    events: list[Note] = []
    if obs.is_news(MAINTENANCE_PENDING, reason, message) and changes:
        events.append(Note("Normal", reason.value, message))
    if failed and obs.is_news(MAINTENANCE_PENDING, reason, message):
        events.append(Note("Warning", "ReservationFailed", reservation))
    return Plan(
        MAINTENANCE_PENDING,
        create=creates,
        delete=tuple(deletes),
        events=tuple(events),
        status=SlurmClusterStatus(conditions=[cond]),
        requeue_after=seconds_to_change(loaded.cluster.spec, obs.now),
    )


def _without_windows(obs: MaintenanceObservation, jobs: Mapping[str, Obj], spec_has_windows: bool) -> Plan:
    """No window ahead (none in the spec, or only windows that are over): changes are applied at once, and a
    reservation an earlier Job made is removed by a Job of its own; once that one is done, every Job goes."""
    c = obs.loaded.name
    if spec_has_windows:
        message = "no maintenance window of spec.maintenance.windows opens again: changes are applied at once"
    else:
        message = "spec.maintenance.windows is empty: changes are applied at once"
    said = obs.loaded.condition(MAINTENANCE_PENDING)
    status = None
    if said is not None or spec_has_windows:
        cond = obs.condition(MAINTENANCE_PENDING, ok=False, reason=Reason.NO_WINDOWS, message=message)
        status = SlurmClusterStatus(conditions=[cond])
    removal = reservation_job_name(c, None)
    if not jobs:
        return Plan(MAINTENANCE_PENDING, status=status)
    if removal not in jobs:
        creates = (Create(render_reservation_job(obs.loaded.cluster, None)),)
        deletes = tuple(
            Delete(JOB, name, "replaced by the Job that removes the reservation", uid=uid(job))
            for name, job in jobs.items()
        )
        return Plan(MAINTENANCE_PENDING, create=creates, delete=deletes, status=status)
    if job_outcome(jobs[removal]) == "succeeded":
        deletes = tuple(
            Delete(JOB, name, f"reservation {RESERVATION} removed", uid=uid(job)) for name, job in jobs.items()
        )
        return Plan(MAINTENANCE_PENDING, delete=deletes, status=status)
    return Plan(MAINTENANCE_PENDING, status=status)


def _reservation(job: Obj | None, name: str, covered: Span) -> tuple[str, bool]:
    """What the condition says of the reservation, and whether its Job failed."""
    span = f"{rfc3339(covered.start)} to {rfc3339(covered.end)}"
    state = job_outcome(job)
    if state == "succeeded":
        return f"{RESERVATION_WORDS} covers {span}", False
    if state == "failed":
        return f"the Job {name} could not make {RESERVATION_WORDS} cover {span} (see its pod's log)", True
    return f"the Job {name} is making {RESERVATION_WORDS} cover {span}", False


def pending_changes(workloads: Mapping[str, Obj], pods: Iterable[Obj]) -> list[str]:
    """Each workload whose pods are not all of its current template, with what changed: the images where a pod runs
    another image than the template names, else "a new pod template"."""
    all_pods = list(pods)
    out = []
    for key in sorted(workloads):
        workload = workloads[key]
        rolling = _rolling(key, workload)
        if rolling is None:
            continue
        replicas, updated = rolling
        kind, _, name = key.partition("/")
        wanted = match_labels(workload)
        selected = [p for p in all_pods if wanted and all(meta_of(p).labels.get(k) == v for k, v in wanted.items())]
        out.append(f"{kind} {name} ({_what_changed(workload, selected)}; {replicas - updated} of {replicas} pods)")
    return out


def _rolling(key: str, workload: Obj) -> tuple[int, int] | None:
    """A workload ("Kind/name") whose pods are not all of its current template: its replicas and how many are of the
    template; None when all are (or its controller has not seen its template yet: its status says nothing of it)."""
    kind = key.partition("/")[0]
    spec, status = workload.get("spec") or {}, workload.get("status") or {}
    if status.get("observedGeneration", 0) < (meta_of(workload).generation or 0):
        return None
    replicas = int(spec.get("replicas", 1)) if kind == DEPLOYMENT.kind else int(status.get("replicas", 0))
    updated = int(status.get("updatedReplicas", 0))
    return None if replicas == 0 or updated >= replicas else (replicas, updated)


def _what_changed(workload: Obj, pods: list[Obj]) -> str:
    template = ((workload.get("spec") or {}).get("template") or {}).get("spec") or {}
    wanted = {c["name"]: c.get("image") for c in template.get("containers") or []}
    moves = set()
    for pod in pods:
        for container in (pod.get("spec") or {}).get("containers") or []:
            image, new = container.get("image"), wanted.get(container["name"])
            if new and image and image != new:
                moves.add(f"{container['name']} image {image} -> {new}")
    return ", ".join(sorted(moves)) if moves else "a new pod template"


def maintenance_objects(_: Inputs) -> list[Obj]:
    """`slurmctl render` prints no reservation Job: which window it covers depends on when it is made."""
    return []
