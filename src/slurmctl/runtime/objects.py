"""Typed views of Kubernetes objects: what a reader declares it reads of an object, decoded from the object's JSON
(the plain dicts `wire.decode` makes) in one step, then read through attributes.

Why views and not digs: the runtime and the reconcilers pass objects on as those dicts (the caches keep them so,
and writes are built as dicts), and reading them key by key, each read guarding against an absent parent,
scattered the same defaults and the same guards over every module. A view says once what a field is and what its absence
means (the API's zero value: "", 0, empty; `None` where absent and zero differ), and mypy checks every read.

Why msgspec: it converts a dict to a struct in about a microsecond, skipping the fields the view does not declare
without looking into them (a Pod's spec, a StatefulSet's template), so a view costs little more than the digs did.
Views are read-only copies: nothing is ever written back through them.

`view` is the one place an object's JSON becomes a view. Objects from the API server never carry `null` where a
view expects a value (Go's encoder omits empty fields); objects built by hand (tests, the fake API server) may, and
a `null` reads as absent, as the digs read it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import msgspec

V = TypeVar("V")


def view(obj: Mapping[str, Any] | None, kind: type[V]) -> V:
    """The view `kind` of an object's JSON (`None`: the object does not exist, every field reads as absent). A field
    of another type than the view's raises `msgspec.ValidationError` (a `ValueError`). Of a cached object (`Shared`)
    each kind of view is decoded once."""
    if obj is None:
        return _convert(obj, kind)
    return derived(obj, kind, lambda o: _convert(o, kind))


def derived(obj: Mapping[str, Any], kind: type[V], make: Callable[[Mapping[str, Any]], V]) -> V:
    """`make(obj)`, made once of a cached object (`Shared`, kept beside its views under `kind`), anew of another: for
    what a reader builds of a view (e.g. the Slurm node loop's worker pod, read three times a pass)."""
    if isinstance(obj, Shared):
        found: V | None = obj.views.get(kind)
        if found is None:
            found = obj.views[kind] = make(obj)
        return found
    return make(obj)


def _convert(obj: Mapping[str, Any] | None, kind: type[V]) -> V:
    try:
        return msgspec.convert({} if obj is None else obj, kind)
    except msgspec.ValidationError:
        # Rare (see the module's docstring): decode again without the nulls, which read as absent.
        return msgspec.convert(_without_nulls(obj), kind)


class Shared(dict[str, Any]):
    """An object's JSON as a cache holds and hands it out (runtime/store.py), with the views decoded of it so far.

    Why: a pass over a cluster of 10,240 worker pods read each pod's metadata nine times and its status three
    (`meta_of`, readiness, revisions, elastic ownership: each reader decodes what it reads), most of the pass's CPU.
    A cached object is read-only (a changed object is a new one), so each view of it is decoded once and lives as long
    as the object. A copy is a plain dict, which may be changed: `copy.copy`, `copy.deepcopy`, `dict(obj)`."""

    __slots__ = ("views",)

    def __init__(self, obj: Mapping[str, Any]) -> None:
        super().__init__(obj)
        self.views: dict[type, Any] = {}

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return copy.deepcopy(dict(self), memo)

    def __reduce__(self) -> tuple[type, tuple[dict[str, Any]]]:
        return dict, (dict(self),)


def _without_nulls(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


class OwnerReference(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    api_version: str = ""
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool = False


class ManagedFieldsEntry(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    """Who owns which fields (only in answers to writes: the informers drop managedFields from what they keep)."""

    manager: str = ""
    operation: str = ""  # Apply or Update
    subresource: str = ""


class ObjectMeta(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    """An object's metadata, as far as the operator reads it."""

    name: str = ""
    generate_name: str = ""
    namespace: str = ""  # "" for cluster-scoped objects
    uid: str = ""
    resource_version: str = ""
    generation: int | None = None  # None: the kind has none (a Pod, a Secret) or the object is not stored yet
    creation_timestamp: str = ""  # RFC 3339, as the API wrote it
    deletion_timestamp: str = ""  # set once the object is being deleted
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    owner_references: tuple[OwnerReference, ...] = ()
    managed_fields: tuple[ManagedFieldsEntry, ...] = ()

    @property
    def key(self) -> str:
        """namespace/name, or the name alone for a cluster-scoped object: how stores and logs name the object."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


class _Object(msgspec.Struct, frozen=True, gc=False):
    metadata: ObjectMeta = ObjectMeta()


def meta_of(obj: Mapping[str, Any] | None) -> ObjectMeta:
    """The metadata of an object's JSON (an empty one for `None` or an object without any)."""
    return view(obj, _Object).metadata


class ListMeta(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    resource_version: str = ""
    continue_: str = msgspec.field(name="continue", default="")  # "" on the last page


class ListPage(msgspec.Struct, frozen=True, gc=False):
    """One page of a LIST: its items (the objects' JSON, kept as they came) and where the next page starts."""

    metadata: ListMeta = ListMeta()
    items: list[dict[str, Any]] = []
