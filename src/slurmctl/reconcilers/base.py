"""What every component reconciler shares: the component declaration it is built from, reading its SlurmCluster once
per change (`Loader`), applying the objects its renderer produces, pruning the children it no longer wants, and
handing its one condition (and its summary) to the status writer (`status.StatusWriter`).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError

from slurmctl.api.v1 import (
    SPEC_VALID,
    Condition,
    ObjectMeta,
    Policy,
    Reason,
    SlurmCluster,
    SlurmClusterStatus,
    check_cluster,
)
from slurmctl.api.v1 import Component as Image
from slurmctl.reconcilers.admission import Admission
from slurmctl.reconcilers.lost_nodes import DEFAULT_NODE_LOST_AFTER
from slurmctl.reconcilers.observed import uid
from slurmctl.reconcilers.slurm_access import SlurmAccess
from slurmctl.reconcilers.status import StatusWriter
from slurmctl.render import meta
from slurmctl.render.kinds import SECRET, SLURM_CLUSTER, Kind
from slurmctl.render.manifests import Inputs, Renderer
from slurmctl.render.slurm_conf import render_slurm_configs
from slurmctl.render.sshd import DEFAULT_HOST_KEY_TYPES
from slurmctl.runtime import WARNING, ApiError, Conflict, Event, Manager, Request, Result
from slurmctl.runtime.errors import rejection
from slurmctl.runtime.handlers import Predicate
from slurmctl.runtime.logs import kv
from slurmctl.runtime.manager import ControllerBuilder
from slurmctl.slurm import DEFAULT_MAX_ANSWER_BYTES

log = logging.getLogger(__name__)

Obj = dict[str, Any]


def always(cluster: SlurmCluster) -> bool:
    return True


def never(cluster: SlurmCluster) -> bool:
    return False


@dataclass(frozen=True)
class Component:
    """One component, declared once: everything registration, `slurmctl render` and the phase need to know about it.

    `name` is the controller's name and the value of the component label on every child alike.
    """

    name: str
    condition: str  # the one status condition this component owns
    _: KW_ONLY
    reconciler: type[ComponentReconciler]
    render: Renderer  # the objects it applies, from the same inputs online and offline
    owns: tuple[Kind, ...] = ()  # kinds of its children, found and watched by its component label
    image: Image | None = None  # the default image its pods run (`<registry>/<image>:<tag>`)
    required: Callable[[SlurmCluster], bool] = always  # whether its condition must be True for Available
    after: tuple[str, ...] = ()  # components whose children's events wake it (keys, the jail gate)
    watch_status: bool = False  # wake on every change of the SlurmCluster, status included (the phase)
    former_names: tuple[str, ...] = ()  # labels older releases put on its children, still recognised

    @property
    def labels(self) -> tuple[str, ...]:
        return (self.name, *self.former_names)


@dataclass(frozen=True)
class Loaded:
    """A valid SlurmCluster as read from the cache: the live object (for status and events), its parsed model and its
    Slurm config set, rendered once and shared by every config hash."""

    obj: Mapping[str, Any]
    cluster: SlurmCluster
    configs: Mapping[str, str]

    @property
    def name(self) -> str:
        return meta.cluster_name(self.cluster)

    @property
    def namespace(self) -> str:
        return self.cluster.metadata.namespace or ""

    @property
    def generation(self) -> int:
        return self.cluster.metadata.generation or 0

    @property
    def status(self) -> SlurmClusterStatus:
        return self.cluster.status or SlurmClusterStatus()

    def condition(self, type_: str) -> Condition | None:
        return self.status.condition(type_)


@dataclass(frozen=True)
class Invalid:
    """A SlurmCluster whose spec cannot be used, and why (each problem names its field)."""

    obj: Mapping[str, Any]
    problems: tuple[str, ...]


class Loader:
    """Parses, validates and renders the configs of a SlurmCluster once per spec (uid, generation): every component
    controller reconciles the same object after each change, and they share this work. A new resourceVersion of the
    same generation (a status write, a label) costs only its metadata and status, and shares the rest."""

    def __init__(self, maxsize: int = 1024, *, policy: Policy | None = None) -> None:
        self._maxsize = maxsize
        self.policy = policy or Policy()  # the operator's policy (its flags): what it refuses, and DisableRootJobs
        self._memo: OrderedDict[tuple[str, str], Loaded | Invalid] = OrderedDict()
        self.parsed = 0  # how many times an object was actually parsed (tests check the memo works)

    def load(self, obj: Mapping[str, Any]) -> Loaded | Invalid:
        md = obj.get("metadata") or {}
        key = (str(md.get("uid", "")), str(md.get("generation", "")))
        known = self._memo.get(key) if key[1] else None
        if known is not None:
            self._memo.move_to_end(key)
            rv = (known.obj.get("metadata") or {}).get("resourceVersion")
            if known.obj is obj or (rv and rv == md.get("resourceVersion")):
                return known
            renewed = _renewed(known, obj)
            if renewed is not None:
                self._memo[key] = renewed
                return renewed
        self.parsed += 1
        cluster, problems = check_cluster(obj, policy=self.policy)
        result: Loaded | Invalid
        if cluster is None or problems:
            result = Invalid(obj, tuple(str(p) for p in problems) or ("the spec could not be read",))
        else:
            result = Loaded(
                obj, cluster, MappingProxyType(render_slurm_configs(cluster, root_jobs=self.policy.allow_root_jobs))
            )
        if key[1]:
            self._memo[key] = result
            while len(self._memo) > self._maxsize:
                self._memo.popitem(last=False)
        return result


def _renewed(known: Loaded | Invalid, obj: Mapping[str, Any]) -> Loaded | Invalid | None:
    """`known` for a newer resourceVersion of the same spec: its metadata and status read anew, the parsed spec and
    its configs shared. None when they do not parse (the whole object is checked again then)."""
    if isinstance(known, Invalid):
        return Invalid(obj, known.problems)
    try:
        update = {
            "metadata": ObjectMeta.model_validate(obj.get("metadata") or {}),
            "status": SlurmClusterStatus.model_validate(obj["status"]) if obj.get("status") is not None else None,
        }
    except ValidationError:
        return None
    return Loaded(obj, known.cluster.model_copy(update=update), known.configs)


# Kept short in conditions and Events: the API server's messages can quote large parts of the object.
MAX_REJECTION_MESSAGE = 1024
# Applies one pass of a component has in flight at once (64 worker groups render ~130 objects).
APPLY_CONCURRENCY = 8
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


@dataclass
class Context:
    """What the component reconcilers of one manager share: the registry they were built from and the loader."""

    manager: Manager
    components: tuple[Component, ...]
    loader: Loader = field(default_factory=Loader)
    reconcilers: dict[str, ComponentReconciler] = field(default_factory=dict)  # by component name
    loops: dict[str, Callable[[Request], Awaitable[Result | None]]] = field(default_factory=dict)  # the others
    host_key_types: tuple[str, ...] = DEFAULT_HOST_KEY_TYPES  # SSH host keys new clusters get
    node_lost_after: float = DEFAULT_NODE_LOST_AFTER  # seconds NotReady before a node is lost (0: never)
    cluster_domain: str = meta.DEFAULT_CLUSTER_DOMAIN  # the DNS domain Services are named in (--cluster-domain)
    slurm_max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES  # --slurm-max-answer-size, in bytes
    slurm: SlurmAccess = field(init=False)  # how reconcilers reach each cluster's slurmrestd
    status: StatusWriter = field(init=False)  # every component's status goes through it
    admission: Admission = field(init=False)  # whether the API server admits a workload's pods

    def __post_init__(self) -> None:
        self.slurm = SlurmAccess(
            self.manager.cache,
            max_answer_bytes=self.slurm_max_answer_bytes,
            clock=self.manager.clock,
            registry=self.manager.metrics.registry,
        )
        self.admission = Admission(self.manager.client, self.manager.clock)
        self.status = StatusWriter(self.manager)
        self.manager.add_runnable("status-writer", self.status.run)


def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def make_condition(obj: Mapping[str, Any], type_: str, *, ok: bool, reason: Reason, message: str) -> Condition:
    """A condition for the live object `obj`; lastTransitionTime is kept verbatim while the status does not flip,
    so an unchanged condition renders an identical intent and its apply is skipped."""
    status = "True" if ok else "False"
    conditions = (obj.get("status") or {}).get("conditions") or []
    previous = next((c for c in conditions if c.get("type") == type_), None)
    since = previous.get("lastTransitionTime") if previous and previous.get("status") == status else None
    return Condition.model_validate(
        {
            "type": type_,
            "status": status,
            "observedGeneration": (obj.get("metadata") or {}).get("generation", 0),
            "lastTransitionTime": since or now(),
            "reason": reason.value,
            "message": message,
        }
    )


def status_part(status: SlurmClusterStatus) -> dict[str, Any]:
    """A component's part of the status: only the fields set in `status`, so it never overwrites another's."""
    return status.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_unset=True)


class ComponentReconciler:
    """Base of the per-component reconcilers, built from a `Component` declaration. Subclasses implement
    `reconcile_valid`; an invalid spec is the cluster reconciler's to report, so the others leave everything as is.
    """

    def __init__(self, ctx: Context, component: Component) -> None:
        self.ctx = ctx
        self.decl = component
        self.component = component.name
        self.condition_type = component.condition
        self.manager = ctx.manager
        self.cache = ctx.manager.cache
        # The rejection last reported per cluster (namespace/name): the cached condition can lag the one just
        # written while another worker reconciles the same cluster again, and that must not repeat the Event.
        self._reported: dict[tuple[str, str], str] = {}

    def watch(self, builder: ControllerBuilder) -> None:
        """Watches beyond the declared children and dependencies (e.g. a Secret the user owns)."""

    async def __call__(self, req: Request) -> Result | None:
        obj = self.cache.get(*SLURM_CLUSTER, req.name, namespace=req.namespace)
        if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
            self.ctx.status.forget(req.namespace, req.name)
            return None  # gone, or being deleted: the garbage collector's turn
        loaded = self.ctx.loader.load(obj)
        if isinstance(loaded, Invalid):
            await self.invalid(loaded)
            return None
        try:
            result = await self.reconcile_valid(loaded)
        except ApplyRejected as rejected:
            await self.rejected(req, loaded, rejected)
            return None  # no retry loop: the next change of the cluster or of a child reconciles again
        self._reported.pop((req.namespace, req.name), None)
        return result

    async def invalid(self, invalid: Invalid) -> None:
        """An invalid spec changes no child. Only the cluster reconciler reports it; the others leave all as is."""

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
        raise NotImplementedError

    # ---- desired state ----------------------------------------------------------------------------------------
    def inputs(self, loaded: Loaded, **known: Any) -> Inputs:
        """The renderer's inputs: the loaded cluster and its configs, what this reconcile read (`known`), and the
        operator's cluster domain."""
        return Inputs(
            cluster=loaded.cluster,
            configs=loaded.configs,
            cluster_domain=self.ctx.cluster_domain,
            **known,
        )

    def desired(self, inputs: Inputs) -> list[Obj]:
        """This component's objects: the very renderer `slurmctl render` calls."""
        return self.decl.render(inputs)

    # ---- children ---------------------------------------------------------------------------------------------
    def live(self, kind: Kind, name: str, namespace: str) -> Obj | None:
        return self.cache.get(*kind, name, namespace=namespace)

    async def apply(self, loaded: Loaded, intents: Iterable[Mapping[str, Any]]) -> None:
        """Apply the intents, up to `APPLY_CONCURRENCY` at once: none waits for another (Kubernetes resolves the
        names they give each other when it needs them), and one at a time a pass took a round trip per object
        (the critical path of a thousand clusters created at once). Every apply ends before the first failure in
        rendered order is raised. No Event per child: creating the objects a spec asks for is the expected course
        (the conditions report progress); Events are for what a user must notice (a deletion, a scale, a failure)."""
        gate = asyncio.Semaphore(APPLY_CONCURRENCY)

        async def one(intent: Mapping[str, Any]) -> None:
            async with gate:
                await self.manager.apply(intent)

        ordered = list(intents)
        results = await asyncio.gather(*(one(intent) for intent in ordered), return_exceptions=True)
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

    async def delete(self, loaded: Loaded, kind: Kind, name: str, *, why: str, propagation: str = "Background") -> None:
        await self.manager.client.delete(*kind, name, namespace=loaded.namespace, propagation=propagation)
        self.event(loaded, "Normal", "Deleted", f"deleted {kind.kind} {name}: {why}")

    async def prune(self, loaded: Loaded, kind: Kind, *, keep: Iterable[str]) -> None:
        """Delete this component's children of a kind that the spec no longer asks for (never claims: user data)."""
        wanted = set(keep)
        for child in self.owned(loaded, kind):
            name = child["metadata"]["name"]
            if name not in wanted:
                await self.delete(loaded, kind, name, why="no longer in the spec")

    def owned(self, loaded: Loaded, kind: Kind) -> list[Obj]:
        """This cluster's children of a kind that carry this component's label (or a label it had before)."""
        found: dict[str, Obj] = {}
        for label in self.decl.labels:
            for child in self.cache.list(
                *kind,
                namespace=loaded.namespace,
                labels=meta.selector(loaded.name, label),
                owner_uid=loaded.cluster.metadata.uid,
            ):
                found[child["metadata"]["name"]] = child
        return [found[name] for name in sorted(found)]

    async def create_once(self, loaded: Loaded, name: str, render: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        """Key material is created, never applied: POST fails on an existing Secret (409, which means "it
        exists"), so a stale cache can never make the operator overwrite (rotate) a key that pods already use."""
        if self.live(SECRET, name, loaded.namespace) is not None:
            return
        try:
            await self.manager.client.create(await render())
        except Conflict:
            return

    def event(self, loaded: Loaded | Invalid, type_: str, reason: str, message: str) -> None:
        md = loaded.obj.get("metadata") or {}
        log.log(
            logging.WARNING if type_ == WARNING else logging.INFO,
            "event %s",
            kv(
                controller=self.component,
                namespace=md.get("namespace", ""),
                name=md.get("name", ""),
                type=type_,
                reason=reason,
                message=message,
            ),
        )
        self.manager.recorder.record(loaded.obj, type_, reason, message)

    def warn(self, loaded: Loaded | Invalid, reason: str, message: str) -> None:
        self.event(loaded, WARNING, reason, message)

    # ---- status -----------------------------------------------------------------------------------------------
    def condition(
        self, loaded: Loaded, *, ok: bool, reason: Reason, message: str, type_: str | None = None
    ) -> Condition:
        """This component's condition (or another it owns, `type_`), its transition time kept from the status as the
        writer will leave it (the cache can lag a write that is pending or just made)."""
        current = {"metadata": loaded.obj.get("metadata") or {}, "status": self.ctx.status.view(loaded.obj)}
        return make_condition(current, type_ or self.condition_type, ok=ok, reason=reason, message=message)

    async def write_status(self, loaded: Loaded | Invalid, status: SlurmClusterStatus) -> None:
        """Hand this component's part of the status to the writer: written with the other components' parts that
        come within a moment, and only where it differs from what the status says."""
        self.ctx.status.submit(loaded.obj, status_part(status))

    async def report(self, loaded: Loaded, *, ok: bool, reason: Reason, message: str) -> None:
        """Write only this component's condition (what it waits for, or why it failed)."""
        cond = self.condition(loaded, ok=ok, reason=reason, message=message)
        await self.write_status(loaded, SlurmClusterStatus(conditions=[cond]))

    def is_news(self, loaded: Loaded, reason: Reason, message: str, *, type_: str | None = None) -> bool:
        """Whether this component's condition (or another it owns, `type_`) would say something new, compared with
        the status as the writer will leave it (the cache can lag a write just made, and a child's events come one
        right after another): what decides that a Warning Event is due, once per finding, not once per reconcile."""
        conditions = self.ctx.status.view(loaded.obj).get("conditions") or []
        said = next((c for c in conditions if c.get("type") == (type_ or self.condition_type)), None)
        return said is None or said.get("reason") != reason.value or said.get("message") != message

    async def pods_refused(self, loaded: Loaded, *workloads: Obj | None) -> Condition | None:
        """A PodRefused condition when the API server refuses the pods of one of these live workloads at admission
        (reconcilers/admission.py: the pod, the Pod Security level and each violation named), with one Warning Event
        when that is news; None when none is refused."""
        for workload in workloads:
            message = await self.ctx.admission.refusal(workload)
            if message is None:
                continue
            if self.is_news(loaded, Reason.POD_REFUSED, message):
                self.warn(loaded, Reason.POD_REFUSED.value, message)
            return self.condition(loaded, ok=False, reason=Reason.POD_REFUSED, message=message)
        return None

    async def secret_ids(self, loaded: Loaded, *names: str) -> list[str] | None:
        """The uids of key Secrets the pods mount (a new key means a new Secret, so its uid in the config hash rolls
        the pods), or None after saying in the condition which one is missing. The cluster reconciler creates them;
        their add events wake this reconciler again, so nothing polls."""
        ids = []
        for name in names:
            secret = self.live(SECRET, name, loaded.namespace)
            if secret is None or not meta.controlled_by(secret, loaded.cluster):
                if secret is not None:
                    # A deleted cluster's of the same name that the garbage collector has not removed yet, or one
                    # someone else made: never adopted (its key would change under running pods when it goes, or be
                    # known to whoever planted it). Its deletion wakes the cluster reconciler, which makes ours.
                    message = (
                        f"waiting for Secret {name} to be deleted: this cluster (uid {loaded.cluster.metadata.uid}) "
                        "did not create it, and slurmctl uses only key material it created for the cluster"
                    )
                    await self.report(loaded, ok=False, reason=Reason.WAITING_FOR_KEYS, message=message)
                elif self._keys_due(loaded):
                    await self.report(
                        loaded, ok=False, reason=Reason.WAITING_FOR_KEYS, message=f"waiting for Secret {name}"
                    )
                return None
            ids.append(uid(secret))
        return ids

    @staticmethod
    def _keys_due(loaded: Loaded) -> bool:
        """Whether a missing key Secret is news: the cluster component has passed over this generation (it creates the
        keys before it reports SpecValid). Before that, every component of a new cluster would otherwise write a
        "waiting" condition that the cluster's first pass makes stale a few milliseconds later."""
        valid = loaded.condition(SPEC_VALID)
        return valid is not None and valid.observed_generation == loaded.generation


def component_is(*components: str) -> Predicate:
    """Only children carrying one of these component labels (a worker StatefulSet does not wake the login)."""

    def predicate(event: Event) -> bool:
        labels = (event.obj.get("metadata") or {}).get("labels") or {}
        return labels.get(meta.LABEL_COMPONENT) in components

    return predicate
