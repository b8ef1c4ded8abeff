"""Slurm upgrades (spec.slurm.version moved to a newer line): which line each component may run now.

Slurm's order (https://slurm.schedmd.com/upgrades.html): the database daemon first, then the controller, then the
compute nodes, then the commands. Here: a backup of the accounting database (a Job, api/v1 render/accounting.py
`render_backup_job`, into a volume claim that stays), slurmdbd (it migrates the schema when it starts), slurmctld
(its state claim carries the jobs over), the workers (their StatefulSets roll one drained node at a time: the same
roll as any template change, reconcilers/workers/plan.py), then login and slurmrestd. A stage starts once every
earlier stage's pods are ready on the new line; a component whose pods already run the new line keeps it (an
upgrade never goes back half-way).

`decide` is pure (what each component runs, read from its pods' images, is its input); `observe` reads those pods
and the backup Job from the cache. Every component's reconciler renders with `Decision.target(component)` as
spec.slurm.version (base.ComponentReconciler), so no component needs to know another: they share this decision.
A downgrade, or a skip Slurm does not support (api/v1/slurm_version.py), is refused: every component stays on the
line it runs, and the cluster's SlurmVersion condition says why.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from slurmctl.api.v1 import (
    DEFAULT_SLURM_VERSION,
    SLURM_RELEASES,
    SLURM_VERSIONS,
    SlurmCluster,
    SlurmClusterSpec,
    UpgradePhase,
    upgrade_refusal,
)
from slurmctl.api.v1.defaults import Component as ImageName
from slurmctl.reconcilers.loading import Loaded
from slurmctl.reconcilers.observed import JobOutcome, job_outcome
from slurmctl.reconcilers.pod_record import PodRecord
from slurmctl.reconcilers.views import Pod
from slurmctl.render import meta
from slurmctl.render.kinds import JOB, POD
from slurmctl.runtime import Cache, Event, EventType
from slurmctl.runtime.objects import derived, meta_of

# The stages, in Slurm's order; each is the names of the components (reconcilers/registry.py) it moves.
STAGES: Final[tuple[tuple[str, ...], ...]] = (("accounting",), ("controller",), ("workers",), ("login", "rest"))
STAGED: Final = frozenset(c for stage in STAGES for c in stage)
# The image each staged component's pods run (api/v1/defaults.py `Component`).
IMAGES: Final[Mapping[str, ImageName]] = {
    "accounting": "accounting",
    "controller": "controller",
    "workers": "worker",
    "login": "login",
    "rest": "rest",
}

Phase = UpgradePhase
_STAGE_PHASES: Final[tuple[Phase, ...]] = ("Accounting", "Controller", "Workers", "LoginAndRest")
Backup = JobOutcome


@dataclass(frozen=True)
class PodLine:
    """One pod of a staged component: the Slurm line its image is (None: not a default image, so unknown) and
    whether it is ready."""

    line: str | None
    ready: bool


@dataclass(frozen=True)
class Decision:
    """What spec.slurm.version asks for (`wanted`), which line each staged component renders now (`targets`), the
    line each one's pods run (`running`, the oldest where they differ), the upgrade's phase, and why it is refused."""

    wanted: str
    targets: Mapping[str, str] = field(default_factory=dict)
    running: Mapping[str, str] = field(default_factory=dict)
    phase: Phase = "Current"
    from_: str | None = None
    refusal: str | None = None
    backup: Backup = "missing"

    def target(self, component: str) -> str:
        return self.targets.get(component, self.wanted)

    @property
    def upgrading(self) -> bool:
        return self.phase not in ("Current", "Refused")

    @property
    def message(self) -> str:
        if self.refusal is not None:
            return f"spec.slurm.version {self.wanted} is refused: {self.refusal}"
        if not self.upgrading:
            return f"every component runs Slurm {self.wanted}"
        failed = " (the backup Job failed: kubectl logs on its pods, then delete the Job to try again)"
        waiting = {
            "BackingUp": "backing up the accounting database" + (failed if self.backup == "failed" else ""),
            "Accounting": "slurmdbd is moving (it migrates the database when it starts)",
            "Controller": "slurmctld is moving (its state is kept in its state volume)",
            "Workers": "the workers move one drained node at a time (running jobs finish first)",
            "LoginAndRest": "the login nodes and slurmrestd are moving",
        }[self.phase]
        return f"upgrading Slurm {self.from_} to {self.wanted}: {waiting}"


def _index(line: str) -> int:
    return SLURM_RELEASES.index(line) if line in SLURM_RELEASES else -1


def decide(
    wanted: str,
    pods: Mapping[str, Counter[PodLine]],
    desired: Mapping[str, int],
    *,
    backup: Backup = "missing",
) -> Decision:
    """The line each staged component renders, from the lines its pods run (`pods`, by component: how many pods run
    each line, ready or not) and how many pods each should have (`desired`). With no pod of a known line (a new
    cluster) or every one on `wanted`, everything renders `wanted`. `backup`: the state of the accounting database's
    backup for this upgrade (the accounting stage starts only once it is done; a cluster without slurmdbd pods needs
    none)."""
    running: dict[str, str] = {}
    for component, found in pods.items():
        lines = sorted({p.line for p in found if p.line is not None}, key=_index)
        if lines:
            running[component] = lines[0]
    newest: dict[str, str] = {
        c: max((p.line for p in found if p.line is not None), key=_index) for c, found in pods.items() if c in running
    }
    if not running:
        return Decision(wanted)
    from_ = min(running.values(), key=_index)
    top = max(newest.values(), key=_index)
    refusal = upgrade_refusal(top, wanted) if _index(top) > _index(wanted) else upgrade_refusal(from_, wanted)
    if refusal is not None:
        kept = {c: newest.get(c, from_) for c in STAGED}
        return Decision(wanted, kept, running, "Refused", from_, refusal, backup)
    if all(line == wanted for line in running.values()):
        return Decision(wanted, running=running)
    targets: dict[str, str] = {}
    phase: Phase | None = None
    earlier_done = True
    for number, stage in enumerate(STAGES):
        stage_done = True
        for component in stage:
            found = pods.get(component, Counter[PodLine]())
            started = any(p.line == wanted for p in found)
            needs_backup = component == "accounting" and bool(found) and backup != "succeeded"
            may_start = earlier_done and not needs_backup
            targets[component] = wanted if started or may_start else running.get(component, from_)
            ready_new = sum(n for p, n in found.items() if p.line == wanted and p.ready)
            old = any(p.line is not None and p.line != wanted for p in found)
            stage_done = stage_done and not old and ready_new >= desired.get(component, 0)
            if phase is None and needs_backup and not started:
                phase = "BackingUp"
        if phase is None and not stage_done:
            phase = _STAGE_PHASES[number]
        earlier_done = earlier_done and stage_done
    return Decision(wanted, targets, running, phase or "Current", from_, None, backup)


def desired_pods(spec: SlurmClusterSpec) -> dict[str, int]:
    """How many pods each staged component has once it is up: what a stage waits for before the next starts. Elastic
    worker groups count none (their pods come and go; an idle one moves when it is next powered up)."""
    return {
        "accounting": 1 if spec.accounting.enabled else 0,
        "controller": spec.controller.size + (1 if spec.controller.standby and spec.controller.size else 0),
        "workers": sum(group.size for group in spec.workers if group.autoscale is None),
        "login": spec.login.size,
        "rest": 1 if spec.rest.enabled else 0,
    }


def image_lines(spec: SlurmClusterSpec, image: ImageName) -> dict[str, str]:
    """The default image of a component for each Slurm line, mapped back to the line: empty when spec.slurm.imageTag
    names one tag for all lines (then an image says nothing of its line)."""
    by_image: dict[str, str] = {}
    for line in SLURM_VERSIONS:
        moved = spec.model_copy(update={"slurm": spec.slurm.model_copy(update={"version": line})})
        by_image.setdefault(moved.image_for(image), line)
    return by_image if len(by_image) == len(SLURM_VERSIONS) else {}


@dataclass(frozen=True)
class PodImages:
    """What the upgrade reads of a staged component's pod: its containers' images, in order, and whether it is ready
    and not going. Made once of a cached pod (runtime/objects.derived): the cluster pass reads every staged pod each
    time, 10,240 worker pods in the largest cluster measured (docs/performance.md)."""

    images: tuple[str, ...]
    ready: bool

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> PodImages:
        return derived(pod, cls, cls._made)

    @classmethod
    def _made(cls, pod: Mapping[str, Any]) -> PodImages:
        containers = (pod.get("spec") or {}).get("containers") or []
        seen = Pod.of(pod)
        return cls(tuple(str(c.get("image") or "") for c in containers), seen.ready and not seen.terminating)


def pod_line(pod: Mapping[str, Any], lines: Mapping[str, str]) -> PodLine:
    """The line of a pod's first container whose image is one of `lines`, and whether the pod is ready."""
    seen = PodImages.of(pod)
    return PodLine(next((lines[image] for image in seen.images if image in lines), None), seen.ready)


def backup_job_name(c: str, from_: str, to: str) -> str:
    """The backup Job of one upgrade of a cluster: `<c>-slurmdbd-backup-2411-2605`."""
    return f"{c}-slurmdbd-backup-{from_.replace('.', '')}-{to.replace('.', '')}"


def observe(
    cache: Cache,
    cluster: SlurmCluster,
    labels: Mapping[str, Iterable[str]],
    namespace: str,
    records: Mapping[str, PodRecord] | None = None,
) -> Decision:
    """The decision for a cluster from the cache: the pods of each staged component (`labels`: its component labels,
    from the registry; `records`: the components whose pods were read once already, pod_record.py) and, when an
    upgrade is on, its backup Job."""
    spec = cluster.spec
    c = meta.cluster_name(cluster)
    pods: dict[str, Counter[PodLine]] = {}
    for component, names in labels.items():
        if component not in STAGED:
            continue
        lines = image_lines(spec, IMAGES[component])
        if (record := (records or {}).get(component)) is not None:
            pods[component] = _summed(record, lines)
            continue
        found: dict[str, Mapping[str, Any]] = {}
        for label in names:
            for pod in cache.list(*POD, namespace=namespace, labels=meta.selector(c, label)):
                found[meta_of(pod).name] = pod
        pods[component] = _lines(found.values(), lines)
    wanted = spec.slurm.version
    first = decide(wanted, pods, desired_pods(spec))
    if first.from_ is None or first.from_ == wanted or first.refusal is not None:
        return first
    job = cache.get(*JOB, backup_job_name(c, first.from_, wanted), namespace=namespace)
    return decide(wanted, pods, desired_pods(spec), backup=job_outcome(job))


def _lines(pods: Iterable[Mapping[str, Any]], lines: Mapping[str, str]) -> Counter[PodLine]:
    return Counter(pod_line(pod, lines) for pod in pods) if lines else Counter()


def _summed(record: PodRecord, lines: Mapping[str, str]) -> Counter[PodLine]:
    """The lines of a record's pods: the sum of each group's, counted again only for the groups whose pods changed
    since the record before (pod_record.py)."""
    key = ("lines", frozenset(lines.items()))

    def summed() -> Counter[PodLine]:
        by_group = record.derive_each(key, lambda group: _lines(group.pods, lines))
        return sum(by_group.values(), Counter[PodLine]())

    return record.derive(key, summed)


def pinned(loaded: Loaded, line: str) -> Loaded:
    """The cluster as a component renders it on `line` (itself when that is the spec's)."""
    slurm = loaded.cluster.spec.slurm
    if slurm.version == line:
        return loaded
    spec = loaded.cluster.spec.model_copy(update={"slurm": slurm.model_copy(update={"version": line})})
    return dataclasses.replace(loaded, cluster=loaded.cluster.model_copy(update={"spec": spec}))


def may_be_upgrading(obj: Mapping[str, Any]) -> bool:
    """Whether a SlurmCluster (as cached) may be in an upgrade: its status does not say that every component runs
    its spec's line. Only such clusters' pods wake the staged components (registry.register)."""
    spec_line = ((obj.get("spec") or {}).get("slurm") or {}).get("version") or DEFAULT_SLURM_VERSION
    said = (obj.get("status") or {}).get("slurm") or {}
    return said.get("phase", "Current") != "Current" or said.get("version") != spec_line


def pod_line_changed(event: Event) -> bool:
    """A staged component's pod came, went, or changed its images or readiness (not a resync)."""
    if event.low_priority:
        return False
    if event.type is not EventType.UPDATED or event.old is None:
        return True
    return PodImages.of(event.old) != PodImages.of(event.obj)
