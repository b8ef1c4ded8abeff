"""What every component reconciler does, built from its declaration (reconcilers/component.py) on the cluster as
loaded (reconcilers/loading.py): applying the objects its renderer produces, pruning the children it no longer wants,
sending its Events, and handing its one condition (and its summary) to the status writer (`status.StatusWriter`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from slurmctl.api.v1 import Condition, Reason, SlurmClusterStatus
from slurmctl.reconcilers import conditions, upgrade
from slurmctl.reconcilers.component import Component, Obj, owned
from slurmctl.reconcilers.conditions import make_condition, now
from slurmctl.reconcilers.context import Context
from slurmctl.reconcilers.events import Events
from slurmctl.reconcilers.executor import execute
from slurmctl.reconcilers.jail_gate import jail_gate_open
from slurmctl.reconcilers.loading import Invalid, Loaded
from slurmctl.reconcilers.observation import Observation, key_secrets, read_keys
from slurmctl.reconcilers.observed import deleting
from slurmctl.reconcilers.plan import Note
from slurmctl.render import meta
from slurmctl.render.kinds import DEPLOYMENT, JOB, POD, ROLE_BINDING, SLURM_CLUSTER, STATEFULSET, Kind
from slurmctl.render.workers import COMPONENT as WORKERS
from slurmctl.runtime import ApiError, Conflict, Request, Result
from slurmctl.runtime.concurrency import bounded
from slurmctl.runtime.errors import rejection
from slurmctl.runtime.manager import ControllerBuilder

# Kept short in conditions and Events: the API server's messages can quote large parts of the object.
MAX_REJECTION_MESSAGE = 1024
# What a StatefulSet refuses to change after creation, and how the user gets out of it. API servers before 1.34 say
# "spec: Forbidden: updates to statefulset spec for fields other than ...", later ones name the field
# ("spec.volumeClaimTemplates: Invalid value: ...: field is immutable", quoting the whole field).
_STATEFULSET_IMMUTABLE = re.compile(
    r"updates to statefulset spec for fields other than"
    r"|spec\.(volumeClaimTemplates|selector): Invalid value: .*field is immutable",
    re.DOTALL,
)
_STATEFULSET_HINT = (
    " (a StatefulSet's volumeClaimTemplates, e.g. spec.controller.stateVolume, and its selector cannot change after"
    " creation: revert the field, or delete the StatefulSet to have it re-created; its claims are kept)"
)


class ApplyRejected(Exception):  # noqa: N818 - named after the condition reason it becomes
    """The API server refused an object this component rendered: retrying the same intent cannot help. Reported in
    the component's condition and an Event, then the reconcile ends without a retry until something changes."""

    def __init__(self, kind: str, name: str, detail: str) -> None:
        self.kind = kind
        self.name = name
        self.detail = detail
        hint = _STATEFULSET_HINT if kind == "StatefulSet" and _STATEFULSET_IMMUTABLE.search(detail) else ""
        message = f"the API server rejected {kind} {name}: {detail}"
        if len(message) + len(hint) > MAX_REJECTION_MESSAGE:  # the hint survives the cut: it says what to do
            message = message[: MAX_REJECTION_MESSAGE - len(hint) - 3] + "..."
        message += hint
        super().__init__(message)
        self.message = message


def status_part(status: SlurmClusterStatus) -> dict[str, Any]:
    """A component's part of the status: only the fields set in `status`, so it never overwrites another's."""
    return status.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_unset=True)


class ComponentReconciler:
    """The reconciler of a component, built from its `Component` declaration: each pass observes the cluster, has the
    declared `plan` decide and the executor carry the plan out (reconcilers/executor.py). A component that reads more
    extends `observe`; one that does not plan yet overrides `reconcile_valid`. An invalid spec is the cluster
    reconciler's to report, so the others leave everything as is.
    """

    def __init__(self, ctx: Context, component: Component) -> None:
        self.ctx = ctx
        self.decl = component
        self.component = component.name
        self.condition_type = component.condition
        self.manager = ctx.manager
        self.cache = ctx.manager.cache
        self.events = Events(ctx.manager, component.name)
        # The rejection last reported per cluster (namespace/name): the cached condition can lag the one just
        # written while another worker reconciles the same cluster again, and that must not repeat the Event.
        self._reported: dict[tuple[str, str], str] = {}
        # The Slurm upgrade decision of this pass, per cluster (one pass per cluster at a time): taken from the spec
        # as it is, before the component's loaded cluster is pinned to the line it renders (`upgrade.pinned`).
        self._upgrades: dict[tuple[str, str], upgrade.Decision] = {}

    def watch(self, builder: ControllerBuilder) -> None:
        """Watches beyond the declared children and dependencies (e.g. a Secret the user owns)."""

    def follows_slurm(self, c: str, namespace: str) -> bool:
        """Whether a new Slurm snapshot of the cluster may change what this component decides (a component declared
        `reads_slurm` is woken by one only then)."""
        return True

    async def __call__(self, req: Request) -> Result | None:
        obj = self.cache.get(*SLURM_CLUSTER, req.name, namespace=req.namespace)
        if obj is None or deleting(obj):
            self._upgrades.pop((req.namespace, req.name), None)
            self.ctx.status.forget(req.namespace, req.name)
            return None  # gone, or being deleted: the garbage collector's turn
        loaded = self.ctx.loader.load(obj)
        if isinstance(loaded, Invalid):
            await self.invalid(loaded)
            return None
        if self.decl.name in upgrade.STAGED or self.decl.name == "cluster":
            decision = self._upgrades[(req.namespace, req.name)] = self.upgrade(loaded, obj)
            # During a Slurm upgrade a component renders the line its stage has reached, not yet the spec's.
            loaded = upgrade.pinned(loaded, decision.target(self.decl.name))
        try:
            result = await self.reconcile_valid(loaded)
        except ApplyRejected as rejected:
            await self.rejected(req, loaded, rejected)
            return None  # no retry loop: the next change of the cluster or of a child reconciles again
        self._reported.pop((req.namespace, req.name), None)
        return result

    async def invalid(self, invalid: Invalid) -> None:
        """An invalid spec changes no child. Only the cluster reconciler reports it; the others leave all as is."""

    def upgrade(self, loaded: Loaded, obj: Mapping[str, Any]) -> upgrade.Decision:
        """Where a Slurm upgrade of the cluster is (reconcilers/upgrade.py), from the staged components' pods. A staged
        component does not look at them while the cached cluster (`obj`) says every component runs its spec's line
        (`upgrade.may_be_upgrading`, the test that already keeps their pods' events from waking it): listing every
        pod of the cluster on each pass of each staged component was half the CPU of a pass at 4,096 workers
        (bench_reconcile_pass). An upgrade starts with a spec change, which wakes every component; the cluster
        component observes on every pass, as it writes the status that says where the upgrade is."""
        if self.decl.name != "cluster" and not upgrade.may_be_upgrading(obj):
            return upgrade.Decision(loaded.cluster.spec.slurm.version)
        labels = {c.name: c.labels for c in self.ctx.components if c.name in upgrade.STAGED}
        workers = {WORKERS: self.ctx.worker_pods.record(loaded.name, loaded.namespace)}
        return upgrade.observe(self.cache, loaded.cluster, labels, loaded.namespace, workers)

    async def rejected(self, req: Request, loaded: Loaded, rejected: ApplyRejected) -> None:
        """Say in this component's condition which object the API server refused and why; the Warning Event (and
        its log line) only when that is news, so a retry of the same rejection records nothing more."""
        previous = loaded.condition(self.condition_type)
        news = previous is None or previous.reason != Reason.APPLY_REJECTED or previous.message != rejected.message
        if news and self._reported.get((req.namespace, req.name)) != rejected.message:
            self.warn(loaded, Reason.APPLY_REJECTED.value, rejected.message)
        self._reported[(req.namespace, req.name)] = rejected.message
        await self.write_status(loaded, self.rejected_status(loaded, rejected))

    def rejected_status(self, loaded: Loaded, rejected: ApplyRejected) -> SlurmClusterStatus:
        cond = self.condition(loaded, ok=False, reason=Reason.APPLY_REJECTED, message=rejected.message)
        return SlurmClusterStatus(conditions=[cond])

    async def reconcile_valid(self, loaded: Loaded) -> Result | None:
        if self.decl.plan is None:
            raise NotImplementedError(f"component {self.component} declares no plan and overrides no reconcile_valid")
        return await execute(self, loaded, self.decl.plan(await self.observe(loaded)))

    async def observe(self, loaded: Loaded) -> Observation:
        """The cluster as this component's plan reads it: the key Secrets, the jail gate, its own children, and the
        API server's refusals of the pods of its workloads (asked only of one short of pods, reconcilers/admission.py).
        """
        keys = read_keys(self.cache, loaded, key_secrets(loaded.name))
        children = {kind: {o["metadata"]["name"]: o for o in self.owned(loaded, kind)} for kind in self.decl.owns}
        refusals: dict[str, str] = {}
        for kind in (STATEFULSET, DEPLOYMENT, JOB):
            for name, workload in children.get(kind, {}).items():
                if (message := await self.ctx.admission.refusal(workload)) is not None:
                    refusals[name] = message
        return Observation(
            loaded,
            now(),
            self.ctx.status.view(loaded.obj),
            self.ctx.settings,
            keys=keys.ids,
            key_fields=keys.fields,
            foreign_keys=keys.foreign,
            key_rotations=keys.rotations,
            jail_open=jail_gate_open(self.cache, loaded),
            children=children,
            pods=self.read_pods(loaded),
            refusals=refusals,
            upgrade=self._upgrades.get((loaded.namespace, loaded.name)),
        )

    def read_pods(self, loaded: Loaded) -> Mapping[str, Obj]:
        """The component's pods (by its labels: pods are owned by the workloads, not the cluster), by name."""
        pods: dict[str, Obj] = {}
        lists = 0  # the cache lists each by name: only pods under two labels (releases before 0.2) need a sort
        for label in self.decl.labels:
            found = self.cache.list(*POD, namespace=loaded.namespace, labels=meta.selector(loaded.name, label))
            lists += bool(found)
            pods.update((pod["metadata"]["name"], pod) for pod in found)
        return pods if lists <= 1 else dict(sorted(pods.items()))

    # ---- children ---------------------------------------------------------------------------------------------
    async def apply(self, loaded: Loaded, intents: Iterable[Mapping[str, Any]]) -> None:
        """Apply the intents, up to `WRITES_IN_FLIGHT` at once: none waits for another (Kubernetes resolves the
        names they give each other when it needs them), and one at a time a pass took a round trip per object
        (the critical path of a thousand clusters created at once). Every apply ends before the first failure in
        rendered order is raised. No Event per child: creating the objects a spec asks for is the expected course
        (the conditions report progress); Events are for what a user must notice (a deletion, a scale, a failure)."""
        ordered = list(intents)
        # The one name Kubernetes resolves at once: a RoleBinding's role (RBAC's escalation check reads the Role when
        # the binding is created, and answers NotFound before it exists). Bindings go after the rest of the pass.
        later = [i for i in ordered if (i["apiVersion"], i["kind"]) == ROLE_BINDING]
        first = [i for i in ordered if (i["apiVersion"], i["kind"]) != ROLE_BINDING]
        done: dict[int, object] = {}
        for wave in (first, later):
            got = await bounded(self.manager.apply(intent) for intent in wave)
            done.update((id(intent), result) for intent, result in zip(wave, got, strict=True))
        results = [done[id(intent)] for intent in ordered]
        for intent, result in zip(ordered, results, strict=True):
            if isinstance(result, ApiError):
                detail = rejection(result)
                if detail is None:
                    raise result  # unavailable, conflicting, forbidden: the controller retries with backoff
                raise ApplyRejected(intent["kind"], intent["metadata"]["name"], detail) from result
            if isinstance(result, BaseException):
                raise result

    async def create(self, loaded: Loaded, intent: Mapping[str, Any]) -> bool:
        """Create an object that is never updated in place (an elastic worker's pod: its spec is immutable). False when
        one of that name exists (its predecessor still terminating, or the cache lags a create just made): the next
        pass looks again. A rejection becomes ApplyRejected, as for `apply`."""
        try:
            await self.manager.client.create(intent)
        except Conflict:
            return False
        except ApiError as exc:
            detail = rejection(exc)
            if detail is None:
                raise
            raise ApplyRejected(intent["kind"], intent["metadata"]["name"], detail) from exc
        return True

    async def delete(
        self,
        loaded: Loaded,
        kind: Kind,
        name: str,
        *,
        why: str,
        propagation: str = "Background",
        uid: str = "",
        event: Note | None = None,
    ) -> None:
        """Delete a child and say why in an Event (`event`, else "Deleted"); `uid`: only that incarnation of the name
        (Conflict otherwise)."""
        client = self.manager.client
        await client.delete(*kind, name, namespace=loaded.namespace, propagation=propagation, uid=uid or None)
        said = event or Note("Normal", "Deleted", f"deleted {kind.kind} {name}: {why}")
        self.events.record(loaded.obj, said.type, said.reason, said.message)

    def owned(self, loaded: Loaded, kind: Kind) -> list[Obj]:
        """This cluster's children of a kind that carry this component's label (or a label it had before)."""
        return owned(self.cache, loaded, kind, self.decl.labels)

    def event(self, loaded: Loaded | Invalid, type_: str, reason: str, message: str) -> None:
        self.events.record(loaded.obj, type_, reason, message)

    def warn(self, loaded: Loaded | Invalid, reason: str, message: str) -> None:
        self.events.warn(loaded.obj, reason, message)

    # ---- status -----------------------------------------------------------------------------------------------
    def condition(
        self, loaded: Loaded, *, ok: bool, reason: Reason, message: str, type_: str | None = None
    ) -> Condition:
        """This component's condition (or another it owns, `type_`), its transition time kept from the status as the
        writer will leave it (the cache can lag a write that is pending or just made)."""
        current = {**loaded.obj, "status": self.ctx.status.view(loaded.obj)}
        return make_condition(current, type_ or self.condition_type, ok=ok, reason=reason, message=message)

    async def write_status(self, loaded: Loaded | Invalid, status: SlurmClusterStatus) -> None:
        """Hand this component's part of the status to the writer: written with the other components' parts that
        come within a moment, and only where it differs from what the status says."""
        self.ctx.status.submit(loaded.obj, status_part(status))

    def is_news(self, loaded: Loaded, reason: Reason, message: str, *, type_: str | None = None) -> bool:
        """Whether this component's condition (or another it owns, `type_`) would say something new, compared with
        the status as the writer will leave it (the cache can lag a write just made, and a child's events come one
        right after another): what decides that a Warning Event is due, once per finding, not once per reconcile."""
        return conditions.is_news(self.ctx.status.view(loaded.obj), type_ or self.condition_type, reason, message)
