"""An in-memory API server for unit tests of reconcilers: a `Client` with server-side-apply-lite semantics and a
`Cache` that reads from it, so a reconciler runs unchanged, without an API server, in milliseconds.

What it keeps of the real thing:
- server-side apply: each field manager owns the fields it applied; a field it stops applying is removed unless
  another manager also applied it; `force` takes fields over. Lists of objects with a `name` or `type` are merged
  by that key (containers, conditions, ...), other lists are atomic. Applying to a missing object creates it.
- `/status` is a separate subresource: a main-resource apply ignores `status`, a status apply touches only `status`
  (and needs the object to exist).
- every write that changes an object bumps its resourceVersion; one that changes anything outside metadata and
  status bumps its generation; create fails on an existing object, delete removes dependents (garbage collection,
  at once) unless told to orphan them.
- only served kinds can be written (`serve`), and discovery answers from the same set.

Every write through the client is logged in `writes` (a converged reconciler writes nothing); what the rest of the
world does (a user creating an object, the Job controller marking a Job succeeded) goes through `put` and
`set_status`, which are not logged.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from slurmctl.runtime.cache import Cache
from slurmctl.runtime.client import KNOWN, Client, Obj, Resource, drop_nones
from slurmctl.runtime.errors import ApiError, Conflict, Invalid, NotFound
from slurmctl.runtime.informer import Informer
from slurmctl.runtime.objects import meta_of
from slurmctl.runtime.store import Label, Store, Version, object_key

Key = tuple[str, str, str, str]  # apiVersion, kind, namespace, name
Segment = str | tuple[str, Any]  # a map key, or a list-map item as (key field, value)
Path = tuple[Segment, ...]
_LIST_MAP_KEYS = ("name", "type")
_IDENTITY = {("metadata", "name"), ("metadata", "namespace")}


@dataclass(frozen=True)
class Write:
    verb: str  # apply, create, delete, patch, replace
    api_version: str
    kind: str
    namespace: str
    name: str
    field_manager: str = ""
    subresource: str = ""


def _key(api_version: str, kind: str, namespace: str | None, name: str) -> Key:
    return (api_version, kind, namespace or "", name)


def _list_map_key(items: list[Any]) -> str | None:
    """The key field of a list of objects that all carry it (a list-map); None for an atomic list."""
    if not items or not all(isinstance(i, Mapping) for i in items):
        return None
    return next((k for k in _LIST_MAP_KEYS if all(k in i for i in items)), None)


def field_paths(obj: Mapping[str, Any], prefix: Path = ()) -> set[Path]:
    """The leaf fields of an apply body, as a manager would own them."""
    paths: set[Path] = set()
    for k, v in obj.items():
        here = (*prefix, k)
        if isinstance(v, Mapping) and v:
            paths |= field_paths(v, here)
        elif isinstance(v, list) and (key := _list_map_key(v)) is not None:
            for item in v:
                paths |= field_paths(item, (*here, (key, item[key])))
        else:
            paths.add(here)
    return paths


def _merge(target: dict[str, Any], part: Mapping[str, Any]) -> None:
    for k, v in part.items():
        if isinstance(v, Mapping) and isinstance(target.get(k), dict):
            _merge(target[k], v)
        elif isinstance(v, list) and (key := _list_map_key(v)) is not None and isinstance(target.get(k), list):
            live: list[Any] = target[k]
            for item in v:
                match = next((i for i in live if isinstance(i, dict) and i.get(key) == item[key]), None)
                if match is None:
                    live.append(copy.deepcopy(dict(item)))
                else:
                    _merge(match, item)
        else:
            target[k] = copy.deepcopy(v)


def _remove(target: dict[str, Any], path: Path) -> None:
    """Remove one leaf, then every map or list-map item the removal left empty."""
    trail: list[tuple[Any, Segment, Any]] = []  # (parent, segment, child)
    node: Any = target
    for segment in path[:-1]:
        if isinstance(segment, tuple):
            if not isinstance(node, list):
                return
            node_next = next((i for i in node if isinstance(i, dict) and i.get(segment[0]) == segment[1]), None)
        else:
            node_next = node.get(segment) if isinstance(node, dict) else None
        if node_next is None:
            return
        trail.append((node, segment, node_next))
        node = node_next
    if isinstance(node, dict):
        node.pop(path[-1], None)
    for parent, segment, child in reversed(trail):
        if child:  # not empty
            return
        if isinstance(segment, tuple):
            parent[:] = [i for i in parent if i is not child]
        else:
            parent.pop(segment, None)


def _is_item_key(path: Path) -> bool:
    return len(path) > 1 and isinstance(path[-2], tuple) and path[-2][0] == path[-1]


def _spec_part(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


class FakeClient(Client):
    """The `Client` surface reconcilers and the applier use, over in-memory objects (see the module docstring)."""

    def __init__(self, *, served: Iterable[tuple[str, str]] = KNOWN) -> None:  # no API client to wrap
        self.timeout = 30.0
        self.host = "fake"
        self.objects: dict[Key, Obj] = {}
        self._stores: dict[tuple[str, str], Store] = {}  # the same objects, indexed as an informer's store is
        self.writes: list[Write] = []
        # Every delete's options: (apiVersion, kind, namespace, name, gracePeriodSeconds, uid precondition).
        self.delete_options: list[tuple[str, str, str, str, int | None, str | None]] = []
        self._served = set(served)
        # What `server_version` answers, as a real API server spells it; a test sets another to play an older one.
        self.version: Obj = {"major": "1", "minor": "37", "gitVersion": "v1.37.0", "platform": "linux/amd64"}
        self._managed: dict[Key, dict[tuple[str, str], set[Path]]] = {}
        self._rv = itertools.count(1)
        self._uid = itertools.count(1)
        # Admission as the real server does it: each check sees (the apply or create body, the live object or None)
        # and returns the error the server would answer (422 for an immutable field, 500 for a body it cannot
        # convert, 403 for a pod Pod Security refuses) or None. Dry-run creates pass through it too and are logged in
        # `dry_runs`, not `writes` (they change nothing).
        self.dry_runs: list[Write] = []
        self.admission: list[Callable[[Mapping[str, Any], Mapping[str, Any] | None], ApiError | None]] = []

    # ---- the world ---------------------------------------------------------------------------------------------
    def serve(self, api_version: str, kind: str) -> None:
        """Install a kind (a CRD): discovery shows it and it can be written."""
        self._served.add((api_version, kind))

    def put(self, obj: Mapping[str, Any]) -> Obj:
        """Create or replace an object as someone else would (a user, another controller); not logged in `writes`."""
        body = copy.deepcopy(dict(obj))
        md = body.setdefault("metadata", {})
        key = _key(body["apiVersion"], body["kind"], md.get("namespace"), md["name"])
        live = self.objects.get(key)
        if live is not None:
            md.setdefault("uid", live["metadata"]["uid"])
            md.setdefault("generation", live["metadata"].get("generation", 1))
            if _spec_part(live) != _spec_part(body):
                md["generation"] = int(md["generation"]) + 1
        return self._store(key, body)

    def set_status(self, api_version: str, kind: str, name: str, status: Mapping[str, Any], *, namespace: str) -> Obj:
        """Replace an object's status as its controller (or a kubelet) would; not logged in `writes`."""
        key = _key(api_version, kind, namespace, name)
        live = self._live(key)
        return self._store(key, {**copy.deepcopy(live), "status": copy.deepcopy(dict(status))})

    def find(self, api_version: str, kind: str, name: str, *, namespace: str = "") -> Obj | None:
        return self.objects.get(_key(api_version, kind, namespace, name))

    def of_kind(self, api_version: str, kind: str) -> list[Obj]:
        return self.store(api_version, kind).list()

    def store(self, api_version: str, kind: str) -> Store:
        """The objects of one kind, indexed as an informer's store is (what `FakeCache` reads)."""
        store = self._stores.get((api_version, kind))
        if store is None:
            store = self._stores[(api_version, kind)] = Store()
        return store

    def managers(self, api_version: str, kind: str, name: str, *, namespace: str) -> dict[tuple[str, str], set[Path]]:
        """Field manager (and subresource) -> the fields it owns."""
        return self._managed.get(_key(api_version, kind, namespace, name), {})

    def cache_factory(
        self, informers: Mapping[tuple[str, str], Informer], *, namespace: str | Collection[str] | None = None
    ) -> Cache:
        """For `Manager(client, cache=fake.cache_factory)`: the manager's cache reads this fake, always up to date."""
        return FakeCache(self, informers, namespace=namespace)

    # ---- the Client surface ------------------------------------------------------------------------------------
    async def server_version(self) -> Obj:
        return copy.deepcopy(self.version)

    async def is_served(self, api_version: str, kind: str) -> bool:
        return (api_version, kind) in self._served

    def forget_discovery(self) -> None:
        """Discovery reads `_served` every time: nothing to forget."""

    async def resource(self, api_version: str, kind: str) -> Resource:
        self._check_served(api_version, kind)
        return Resource(api_version, kind, kind.lower() + "s", namespaced=True)

    async def request(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("FakeClient serves the typed methods only")

    async def get(self, api_version: str, kind: str, name: str, *, namespace: str | None = None) -> Obj:
        return copy.deepcopy(self._live(_key(api_version, kind, namespace, name)))

    def watch(self, *args: Any, **kwargs: Any) -> AsyncIterator[Obj]:
        raise NotImplementedError("FakeClient has no watches: its FakeCache reads the objects directly")

    async def apply(
        self, body: Mapping[str, Any], *, field_manager: str, subresource: str | None = None, force: bool = True
    ) -> Obj:
        body = drop_nones(body)
        api_version, kind, md = body["apiVersion"], body["kind"], body["metadata"]
        self._check_served(api_version, kind)
        key = _key(api_version, kind, md.get("namespace"), md["name"])
        live = self.objects.get(key)
        if subresource == "status":
            if live is None:
                raise NotFound(f"{kind} {md['name']} not found", status=404)
            part = {"status": body.get("status") or {}}
        elif subresource is None:
            part = {k: v for k, v in body.items() if k not in ("apiVersion", "kind", "status")}
        else:
            raise Invalid(f"unknown subresource {subresource}", status=422)
        for check in self.admission if subresource is None else ():
            if (error := check(body, live)) is not None:
                raise error
        self.writes.append(Write("apply", api_version, kind, key[2], key[3], field_manager, subresource or ""))
        new: Obj = copy.deepcopy(live) if live is not None else {"apiVersion": api_version, "kind": kind}
        owned = self._managed.setdefault(key, {})
        me = (field_manager, subresource or "")
        paths = field_paths(part) - _IDENTITY
        others: set[Path] = set().union(*(p for m, p in owned.items() if m != me))
        # A list-map item's key field goes last: the item is found by it while its other fields are removed.
        for path in sorted(owned.get(me, set()) - paths - others, key=_is_item_key):
            _remove(new, path)
        _merge(new, part)
        owned[me] = paths
        for manager in owned:
            if manager != me:
                owned[manager] = owned[manager] - paths  # force: the fields change hands
        if live is not None and new == live:
            return copy.deepcopy(live)
        if live is not None and _spec_part(new) != _spec_part(live):
            new["metadata"]["generation"] = int(live["metadata"].get("generation", 1)) + 1
        return copy.deepcopy(self._store(key, new))

    async def create(self, body: Mapping[str, Any], *, dry_run: bool = False) -> Obj:
        md = body.get("metadata") or {}
        self._check_served(body["apiVersion"], body["kind"])
        name = md.get("name") or f"{md.get('generateName', '')}{next(self._uid)}"
        key = _key(body["apiVersion"], body["kind"], md.get("namespace"), name)
        if key in self.objects:
            raise Conflict(f"{body['kind']} {name} already exists", status=409, reason="AlreadyExists")
        if dry_run:
            self.dry_runs.append(Write("create", *key))
        for check in self.admission:
            if (error := check({**body, "metadata": {**md, "name": name}}, None)) is not None:
                raise error
        if dry_run:
            return copy.deepcopy(dict(body))
        self.writes.append(Write("create", *key))
        return copy.deepcopy(self._store(key, copy.deepcopy(dict(body))))

    async def replace(self, body: Mapping[str, Any]) -> Obj:
        md = body["metadata"]
        key = _key(body["apiVersion"], body["kind"], md.get("namespace"), md["name"])
        live = self._live(key)
        if md.get("resourceVersion") != live["metadata"]["resourceVersion"]:
            raise Conflict(f"{body['kind']} {md['name']} was modified", status=409)
        self.writes.append(Write("replace", *key))
        return copy.deepcopy(self._store(key, copy.deepcopy(dict(body))))

    async def merge_patch(
        self, api_version: str, kind: str, name: str, patch: Mapping[str, Any], *, namespace: str | None = None
    ) -> Obj:
        key = _key(api_version, kind, namespace, name)
        new = copy.deepcopy(self._live(key))
        _merge_patch(new, patch)
        self.writes.append(Write("patch", *key))
        return copy.deepcopy(self._store(key, new))

    async def delete(
        self,
        api_version: str,
        kind: str,
        name: str,
        *,
        namespace: str | None = None,
        propagation: str = "Background",
        grace_period_seconds: int | None = None,
        uid: str | None = None,
    ) -> None:
        key = _key(api_version, kind, namespace, name)
        live = self.objects.get(key)
        if uid and live is not None and live["metadata"].get("uid") != uid:
            raise Conflict(f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                           f"{live['metadata'].get('uid')}", status=409)  # fmt: skip
        self.writes.append(Write("delete", *key, subresource=propagation))
        self.delete_options.append((*key, grace_period_seconds, uid))
        gone = self._forget(key)
        if gone is None or propagation == "Orphan":
            return
        uid = gone["metadata"]["uid"]
        for dependent in [k for k, o in self.objects.items() if _owned_by(o, uid)]:
            self._forget(dependent)  # the garbage collector, at once

    # ---- internals ---------------------------------------------------------------------------------------------
    def _check_served(self, api_version: str, kind: str) -> None:
        if (api_version, kind) not in self._served:
            raise NotFound(f"the server could not find the requested resource ({kind}.{api_version})", status=404)

    def _live(self, key: Key) -> Obj:
        live = self.objects.get(key)
        if live is None:
            raise NotFound(f"{key[1]} {key[3]} not found", status=404)
        return live

    def _store(self, key: Key, obj: Obj) -> Obj:
        md = obj.setdefault("metadata", {})
        md.update(name=key[3], resourceVersion=str(next(self._rv)))
        if key[2]:
            md["namespace"] = key[2]
        md.setdefault("uid", f"uid-{next(self._uid)}")
        md.setdefault("generation", 1)
        md.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        obj.setdefault("apiVersion", key[0])
        obj.setdefault("kind", key[1])
        self.objects[key] = obj
        self.store(key[0], key[1]).put(obj)
        return obj

    def _forget(self, key: Key) -> Obj | None:
        self._managed.pop(key, None)
        gone = self.objects.pop(key, None)
        if gone is not None:
            self.store(key[0], key[1]).remove(object_key(gone))
        return gone


def _owned_by(obj: Mapping[str, Any], uid: str) -> bool:
    return any(ref.uid == uid for ref in meta_of(obj).owner_references)


def _merge_patch(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    """RFC 7386: maps merge, `null` removes, everything else replaces."""
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        elif isinstance(v, Mapping) and isinstance(target.get(k), dict):
            _merge_patch(target[k], v)
        else:
            target[k] = copy.deepcopy(v)


class SelectedView(Store):
    """What a label-selected informer would hold of a store: only the objects carrying every `wanted` label. A
    read-only view, not a copy, so that a read costs what it costs on the real cache (a copy per read made each pass
    of a 4,096-node cluster's workers reconciler quadratic in its pods)."""

    def __init__(self, store: Store, wanted: Mapping[str, str]) -> None:
        super().__init__()
        self._store = store
        self._wanted = dict(wanted)

    def _selected(self, obj: Obj) -> bool:
        labels = meta_of(obj).labels
        return all(labels.get(k) == v for k, v in self._wanted.items())

    def __len__(self) -> int:
        return len(self.list())

    def __iter__(self) -> Iterator[Obj]:
        return iter(self.list())

    def get(self, key: str) -> Obj | None:
        obj = self._store.get(key)
        return obj if obj is not None and self._selected(obj) else None

    def keys(self) -> set[str]:
        return {object_key(o) for o in self.list()}

    def changed(self, namespace: str, label: Label, since: Version | None) -> tuple[Version, frozenset[str] | None]:
        return self._store.changed(namespace, label, since)  # its objects are the viewed store's: theirs move with them

    def put(self, obj: Obj) -> Obj | None:
        raise TypeError("a SelectedView is read-only; write the store it views")

    def remove(self, key: str) -> Obj | None:
        raise TypeError("a SelectedView is read-only; write the store it views")

    def list(
        self,
        *,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        owner_uid: str | None = None,
        node_name: str | None = None,
    ) -> list[Obj]:
        asked = dict(labels or {})
        if any(k in asked and asked[k] != v for k, v in self._wanted.items()):
            return []  # a label the selector pins to another value: nothing selected carries it
        return self._store.list(
            namespace=namespace, labels={**asked, **self._wanted}, owner_uid=owner_uid, node_name=node_name
        )


class FakeCache(Cache):
    """The manager's read side over a `FakeClient`: always current (no informer lag); a kind no controller watches
    raises `NotWatched` as the real cache does."""

    def __init__(
        self,
        fake: FakeClient,
        informers: Mapping[tuple[str, str], Informer],
        *,
        namespace: str | Collection[str] | None = None,
    ) -> None:
        super().__init__(informers, namespace=namespace)
        self._fake = fake

    def store(self, api_version: str, kind: str) -> Store:
        informer = self._informers.get((api_version, kind))
        super().store(api_version, kind)  # NotWatched unless a controller watches the kind
        store = self._fake.store(api_version, kind)
        selector = informer.label_selector if informer is not None else None
        if not selector:
            return store
        # As the server would: a label-selected informer never sees the other objects (equality selectors only).
        return SelectedView(store, dict(part.split("=", 1) for part in selector.split(",")))

    def synced(self, api_version: str, kind: str, namespace: str) -> bool:
        return (api_version, kind) in self._informers
