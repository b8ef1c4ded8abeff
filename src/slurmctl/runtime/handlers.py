"""Event handlers (which requests an event enqueues) and predicates (which events count), as in controller-runtime.

A handler maps an informer `Event` to the `Request`s to reconcile; a predicate filters events before that.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from slurmctl.runtime.informer import Event, EventType
from slurmctl.runtime.objects import ObjectMeta, meta_of

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True, order=True)
class Request:
    """What a reconciler is asked to reconcile: a namespace/name (namespace "" for cluster-scoped objects)."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @classmethod
    def for_object(cls, obj: Obj) -> Request:
        meta = meta_of(obj)
        return cls(meta.namespace, meta.name)


Handler = Callable[[Event], Iterable[Request]]
Predicate = Callable[[Event], bool]


def _objects(event: Event) -> Iterator[Obj]:
    yield event.obj
    if event.old is not None and event.old is not event.obj:
        yield event.old


def enqueue_object(event: Event) -> Iterable[Request]:
    """controller-runtime's EnqueueRequestForObject."""
    return (Request.for_object(event.obj),)


def enqueue_owner(owner_api_version: str, owner_kind: str) -> Handler:
    """EnqueueRequestForOwner with OnlyControllerOwner: the object's controller, when it has the given group/kind.

    Matching is by group, not version (an owner reference written at v1beta1 still names the v1 owner); old and new
    object are both consulted so a changed owner reference reaches both owners.
    """
    group = owner_api_version.rpartition("/")[0]

    def handler(event: Event) -> Iterable[Request]:
        found: set[Request] = set()
        for obj in _objects(event):
            meta = meta_of(obj)
            for ref in meta.owner_references:
                if ref.controller and ref.kind == owner_kind and ref.api_version.rpartition("/")[0] == group:
                    found.add(Request(meta.namespace, ref.name))
        return found

    return handler


def enqueue_mapped(mapper: Callable[[Obj], Iterable[Request]]) -> Handler:
    """EnqueueRequestsFromMapFunc: any requests a function derives from the object."""

    def handler(event: Event) -> Iterable[Request]:
        found: set[Request] = set()
        for obj in _objects(event):
            found.update(mapper(obj))
        return found

    return handler


def _meta_changed(field: Callable[[ObjectMeta], object]) -> Predicate:
    def predicate(event: Event) -> bool:
        if event.type is not EventType.UPDATED or event.old is None:
            return True
        return field(meta_of(event.old)) != field(meta_of(event.obj))

    return predicate


generation_changed: Predicate = _meta_changed(attrgetter("generation"))
"""Updates pass only when metadata.generation changed (spec edits, not status writes); adds and deletes pass."""
labels_changed: Predicate = _meta_changed(attrgetter("labels"))
annotations_changed: Predicate = _meta_changed(attrgetter("annotations"))
resource_version_changed: Predicate = _meta_changed(attrgetter("resource_version"))


def any_of(*predicates: Predicate) -> Predicate:
    return lambda event: any(p(event) for p in predicates)


def all_of(*predicates: Predicate) -> Predicate:
    return lambda event: all(p(event) for p in predicates)


def negate(predicate: Predicate) -> Predicate:
    return lambda event: not predicate(event)
