"""What every component reconciler shares: reading its SlurmCluster from the cache, applying children, pruning the
children it no longer wants, and writing its one condition with its own field manager.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from slurmctl.api.v1 import API_VERSION, KIND, SlurmCluster, check_cluster
from slurmctl.render import meta
from slurmctl.runtime import WARNING, Conflict, Manager, NotFound, NotWatched, Request, Result
from slurmctl.runtime.logs import kv

log = logging.getLogger(__name__)

Obj = dict[str, Any]
SECRET = ("v1", "Secret")


@dataclass(frozen=True)
class Loaded:
    """The live object (for status and events) and its parsed, valid model."""

    obj: Mapping[str, Any]
    cluster: SlurmCluster

    @property
    def name(self) -> str:
        return meta.cluster_name(self.cluster)

    @property
    def namespace(self) -> str:
        return self.cluster.metadata.namespace or ""

    @property
    def generation(self) -> int:
        return self.cluster.metadata.generation or 0


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ComponentReconciler:
    """Base of the per-component reconcilers. Subclasses set `component` and `condition_type` and implement
    `reconcile_valid`; an invalid spec is the cluster reconciler's to report, so the others leave everything as is.
    """

    component: str = ""
    condition_type: str = ""

    def __init__(self, manager: Manager) -> None:
        self.manager = manager
        self.cache = manager.cache
        self.field_manager = f"slurmctl-{self.component}"

    async def __call__(self, req: Request) -> Result | None:
        obj = self.cache.get(API_VERSION, KIND, req.name, namespace=req.namespace)
        if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
            return None  # gone, or being deleted: the garbage collector's turn
        cluster, problems = check_cluster(obj)
        if cluster is None or problems:
            await self.invalid(obj, [str(p) for p in problems])
            return None
        return await self.reconcile_valid(Loaded(obj, cluster))

    async def invalid(self, obj: Mapping[str, Any], problems: list[str]) -> None:
        """An invalid spec changes no child. Only the cluster reconciler reports it; the others leave all as is."""

    async def reconcile_valid(self, loaded: Loaded) -> Result | None:
        raise NotImplementedError

    # ---- children ---------------------------------------------------------------------------------------------
    def live(self, api_version: str, kind: str, name: str, namespace: str) -> Obj | None:
        return self.cache.get(api_version, kind, name, namespace=namespace)

    async def apply(self, loaded: Loaded, intents: Iterable[Mapping[str, Any]]) -> None:
        for intent in intents:
            md = intent["metadata"]
            try:
                created = self.live(intent["apiVersion"], intent["kind"], md["name"], md["namespace"]) is None
            except NotWatched:  # a kind installed after start (MariaDB): the applier reads it itself
                created = False
            await self.manager.apply(intent)
            if created:
                self.event(loaded, "Normal", "Created", f"created {intent['kind']} {md['name']}")

    async def prune(self, loaded: Loaded, api_version: str, kind: str, *, component: str, keep: Iterable[str]) -> None:
        """Delete this component's children of a kind that the spec no longer asks for (never claims: user data)."""
        wanted = set(keep)
        for child in self.owned(loaded, api_version, kind, component):
            name = child["metadata"]["name"]
            if name not in wanted:
                await self.manager.client.delete(api_version, kind, name, namespace=loaded.namespace)
                self.event(loaded, "Normal", "Deleted", f"deleted {kind} {name}: no longer in the spec")

    async def create_once(self, loaded: Loaded, name: str, render: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        """Key material is created, never applied: POST fails on an existing Secret, so a stale cache can never
        make the operator overwrite (rotate) a key that pods already use."""
        if self.live(*SECRET, name, loaded.namespace) is not None:
            return
        try:
            await self.manager.client.get(*SECRET, name, namespace=loaded.namespace)
            return
        except NotFound:
            pass
        try:
            await self.manager.client.create(await render())
        except Conflict:
            return
        self.event(loaded, "Normal", "Created", f"created Secret {name}")

    def event(self, loaded: Loaded, type_: str, reason: str, message: str) -> None:
        log.info(
            "event %s",
            kv(
                controller=self.component,
                namespace=loaded.namespace,
                name=loaded.name,
                type=type_,
                reason=reason,
                message=message,
            ),
        )
        self.manager.recorder.record(loaded.obj, type_, reason, message)

    def warn(self, loaded: Loaded, reason: str, message: str) -> None:
        self.event(loaded, WARNING, reason, message)

    # ---- status -----------------------------------------------------------------------------------------------
    def condition(self, loaded: Loaded, *, ok: bool, reason: str, message: str) -> dict[str, Any]:
        return build_condition(loaded.obj, self.condition_type, ok=ok, reason=reason, message=message)

    async def write_status(self, loaded: Loaded, status: Mapping[str, Any]) -> None:
        body = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": loaded.name, "namespace": loaded.namespace},
            "status": dict(status),
        }
        await self.manager.apply_status(body, field_manager=self.field_manager)

    def owned(self, loaded: Loaded, api_version: str, kind: str, component: str) -> list[Obj]:
        """This cluster's children of a kind that carry a component label."""
        labels = meta.selector(loaded.name, component)
        uid = loaded.cluster.metadata.uid
        return self.cache.list(api_version, kind, namespace=loaded.namespace, labels=labels, owner_uid=uid)

    async def wait(self, loaded: Loaded, *, reason: str, message: str) -> None:
        """Say in this component's condition what it waits for; the event that ends the wait wakes it again."""
        await self.write_status(
            loaded, {"conditions": [self.condition(loaded, ok=False, reason=reason, message=message)]}
        )

    async def secret_ids(self, loaded: Loaded, *names: str) -> list[str] | None:
        """The uids of key Secrets the pods mount (a new key means a new Secret, so its uid in the config hash rolls
        the pods), or None after saying in the condition which one is missing. The cluster reconciler creates them;
        their add events wake this reconciler again, so nothing polls."""
        ids = []
        for name in names:
            secret = self.live(*SECRET, name, loaded.namespace)
            if secret is None:
                await self.wait(loaded, reason="WaitingForKeys", message=f"waiting for Secret {name}")
                return None
            ids.append(str(secret["metadata"].get("uid", "")))
        return ids


def build_condition(obj: Mapping[str, Any], type_: str, *, ok: bool, reason: str, message: str) -> dict[str, Any]:
    """A condition for the live object `obj`; lastTransitionTime is kept verbatim while the status does not flip,
    so an unchanged condition renders an identical intent and its apply is skipped."""
    status = "True" if ok else "False"
    conditions = (obj.get("status") or {}).get("conditions") or []
    previous = next((c for c in conditions if c.get("type") == type_), None)
    since = previous.get("lastTransitionTime") if previous and previous.get("status") == status else None
    return {
        "type": type_,
        "status": status,
        "observedGeneration": (obj.get("metadata") or {}).get("generation", 0),
        "lastTransitionTime": since or now(),
        "reason": reason,
        "message": message,
    }


def statefulset_ready(sts: Mapping[str, Any] | None) -> int:
    return int(((sts or {}).get("status") or {}).get("readyReplicas") or 0)
