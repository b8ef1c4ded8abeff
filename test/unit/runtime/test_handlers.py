"""Which events enqueue which requests, and the cache's indexes that reconcilers read children through."""

from __future__ import annotations

from typing import Any

from slurmctl.runtime.handlers import (
    Request,
    enqueue_mapped,
    enqueue_object,
    enqueue_owner,
    generation_changed,
    labels_changed,
    negate,
)
from slurmctl.runtime.informer import Event, EventType
from slurmctl.runtime.store import Store

CLUSTER = ("slurm.slurmctl.io/v1", "SlurmCluster")


def child(name: str, *refs: dict[str, Any], generation: int = 1, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": "ns", "ownerReferences": list(refs), "generation": generation,
                     "labels": labels, "resourceVersion": str(generation)},
    }  # fmt: skip


def ref(name: str, *, api_version: str = "slurm.slurmctl.io/v1", kind: str = "SlurmCluster", controller: bool = True,
        uid: str = "uid-1") -> dict[str, Any]:  # fmt: skip
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": controller}


def test_enqueue_object_enqueues_the_object_itself() -> None:
    assert list(enqueue_object(Event(EventType.ADDED, child("c-worker")))) == [Request("ns", "c-worker")]


def test_enqueue_owner_finds_the_controller_owner_of_the_right_group_and_kind() -> None:
    handler = enqueue_owner(*CLUSTER)
    owned = child("c-worker", ref("c"), ref("other", controller=False), ref("x", kind="Deployment"))
    assert set(handler(Event(EventType.ADDED, owned))) == {Request("ns", "c")}
    # A reference written at another version of the same group still counts.
    assert set(handler(Event(EventType.ADDED, child("w", ref("c2", api_version="slurm.slurmctl.io/v2"))))) == {
        Request("ns", "c2")
    }
    assert set(handler(Event(EventType.ADDED, child("w", ref("c3", api_version="other.io/v1"))))) == set()
    assert set(handler(Event(EventType.ADDED, child("orphan")))) == set()


def test_enqueue_owner_on_update_reaches_old_and_new_owner() -> None:
    handler = enqueue_owner(*CLUSTER)
    event = Event(EventType.UPDATED, child("w", ref("new")), child("w", ref("old")))
    assert set(handler(event)) == {Request("ns", "new"), Request("ns", "old")}


def test_enqueue_mapped_uses_the_function() -> None:
    handler = enqueue_mapped(lambda obj: [Request("ns", obj["metadata"]["labels"]["cluster"])])
    assert set(handler(Event(EventType.DELETED, child("w", cluster="c")))) == {Request("ns", "c")}


def test_generation_changed_passes_spec_changes_adds_and_deletes_but_not_status_writes() -> None:
    assert generation_changed(Event(EventType.UPDATED, child("w", generation=2), child("w", generation=1)))
    assert not generation_changed(Event(EventType.UPDATED, child("w", generation=1), child("w", generation=1)))
    assert generation_changed(Event(EventType.ADDED, child("w")))
    assert generation_changed(Event(EventType.DELETED, child("w")))
    assert labels_changed(Event(EventType.UPDATED, child("w", a="1"), child("w", a="2")))
    assert negate(labels_changed)(Event(EventType.UPDATED, child("w", a="1"), child("w", a="1")))


def test_store_indexes_by_namespace_owner_and_labels_and_follows_changes() -> None:
    store = Store()
    store.put(child("a", ref("c", uid="u1"), component="workers"))
    store.put(child("b", ref("c", uid="u1"), component="login"))
    other = child("c", ref("d", uid="u2"), component="workers")
    other["metadata"]["namespace"] = "other"
    store.put(other)

    def names(**filters: Any) -> list[str]:
        return [o["metadata"]["name"] for o in store.list(**filters)]

    assert names(namespace="ns") == ["a", "b"]
    assert names(owner_uid="u1", labels={"component": "workers"}) == ["a"]
    assert names(labels={"component": "workers"}) == ["a", "c"]
    assert names(labels={"component": "workers", "missing": "x"}) == []
    store.put(child("a", ref("c", uid="u1"), component="login"))  # relabelled
    assert names(labels={"component": "workers"}) == ["c"]
    store.remove("ns/b")
    assert names(owner_uid="u1") == ["a"]
    assert store.get("other/c") == other
