"""An informer's store keeps objects encoded with only a few decoded: whatever it holds and however few stay decoded,
it answers exactly as a store of plain dicts does."""

from __future__ import annotations

import copy
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmctl.runtime.informer import UnionStore
from slurmctl.runtime.objects import ObjectMeta, meta_of
from slurmctl.runtime.store import CHANGE_LOG, LOGGED_LABELS, Store

NAMES = st.sampled_from(["a", "b", "c", "d", "e"])


def _obj(name: str, namespace: str, owner: str, label: str, value: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": namespace, "labels": {"component": label},
                     "ownerReferences": [{"uid": owner, "name": owner}], "resourceVersion": str(value)},
        "spec": {"replicas": value, "template": {"spec": {"containers": [{"name": "x", "args": ["é", 1.5, None]}]}}},
    }  # fmt: skip


OBJECTS = st.builds(
    _obj, NAMES, st.sampled_from(["ns", "other"]), st.sampled_from(["u1", "u2"]),
    st.sampled_from(["workers", "login"]), st.integers(0, 3),
)  # fmt: skip
OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), OBJECTS),
        st.tuples(st.just("remove"), st.tuples(st.sampled_from(["ns", "other"]), NAMES).map("/".join)),
    ),
    max_size=40,
)


def _answers(store: Store) -> list[Any]:
    keys = [f"{ns}/{name}" for ns in ("ns", "other") for name in "abcde"]
    return [
        len(store),
        sorted(store.keys()),
        [store.get(k) for k in keys],
        sorted((o["metadata"]["namespace"], o["metadata"]["name"]) for o in store),
        *(
            store.list(namespace=ns, labels=labels, owner_uid=owner)
            for ns in (None, "ns")
            for labels in (None, {"component": "workers"})
            for owner in (None, "u1")
        ),
    ]


@settings(max_examples=300, deadline=None)
@given(OPERATIONS)
def test_an_encoded_store_with_two_decoded_objects_answers_as_a_plain_store(operations: list[Any]) -> None:
    plain, encoded = Store(), Store(encoded=True, hot=2)
    for op, arg in operations:
        if op == "put":
            assert plain.put(arg) == encoded.put(arg)  # the previous object: what an update event carries
        else:
            assert plain.remove(arg) == encoded.remove(arg)
        assert _answers(plain) == _answers(encoded)


def test_what_a_pass_reads_again_is_the_same_decoded_object_and_a_cold_read_decodes_an_equal_one() -> None:
    store = Store(encoded=True, hot=1)
    first, second = _obj("a", "ns", "u1", "workers", 1), _obj("b", "ns", "u1", "workers", 1)
    store.put(first)
    assert store.get("ns/a") == first  # hot: no decode, the object the watch delivered
    store.put(second)  # pushes `a` out of the decoded ones
    cold = store.get("ns/a")
    assert cold == first and cold is not first
    assert store.get("ns/a") is cold


def _pod(name: str, node: str | None, label: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "x"}]}
    if node is not None:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "labels": {"component": label}}, "spec": spec}  # fmt: skip


POD_OPERATIONS = st.lists(
    st.one_of(
        st.tuples(
            st.just("put"), st.builds(_pod, NAMES, st.sampled_from([None, "n1", "n2"]), st.sampled_from(["w", "l"]))
        ),
        st.tuples(st.just("remove"), NAMES.map("ns/{}".format)),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(POD_OPERATIONS)
def test_the_pods_on_a_kubernetes_node_are_those_a_scan_finds_however_pods_come_move_and_go(
    operations: list[Any],
) -> None:
    """A Node's event asks for the pods bound there (runtime/store.py: a scan per event was minutes of backlog at
    thousands of pods); the index must follow a pod that is bound, re-created elsewhere or deleted."""
    store = Store(encoded=True, hot=2)
    for op, arg in operations:
        if op == "put":
            store.put(arg)
        else:
            store.remove(arg)
        for node in ("n1", "n2", "n3"):
            for labels in (None, {"component": "w"}):
                scanned = [o for o in store.list(labels=labels) if o["spec"].get("nodeName") == node]
                assert store.list(node_name=node, labels=labels) == scanned


def test_a_list_larger_than_the_decoded_set_stays_decoded_for_the_next_read() -> None:
    """A pass lists a large cluster's pods several times: the second list must not decode them all again."""
    store = Store(encoded=True, hot=2)
    for name in "abcde":
        store.put(_obj(name, "ns", "u1", "workers", 1))
    first = store.list(namespace="ns")
    again = store.list(namespace="ns")
    assert len(again) == 5
    assert all(a is b for a, b in zip(first, again, strict=True))


@settings(max_examples=300, deadline=None)
@given(OPERATIONS)
def test_a_view_of_a_held_object_is_decoded_once_and_a_changed_one_reads_anew(operations: list[Any]) -> None:
    """A pass over 10,240 worker pods decoded each pod's metadata nine times (runtime/objects.Shared): a held
    object's views are decoded once, a replaced object's views are its own, and a copy is a plain dict to change."""
    for store in (Store(), Store(encoded=True, hot=2)):
        for op, arg in operations:
            store.put(arg) if op == "put" else store.remove(arg)
            for obj in store:
                md = meta_of(obj)
                assert md == msgspec.convert(obj["metadata"], ObjectMeta)  # never an older object's view
                assert meta_of(obj) is md  # decoded once
                changed = copy.deepcopy(obj)
                changed["metadata"]["name"] = "changed"
                assert meta_of(changed).name == "changed"
                assert type(changed) is dict and type(copy.copy(obj)) is dict


@settings(max_examples=300, deadline=None)
@given(OPERATIONS, OPERATIONS)
def test_what_is_derived_of_some_objects_is_derived_again_exactly_of_those_that_changed(
    before: list[Any], after: list[Any]
) -> None:
    """A reader keeps what it derived of the objects under a label by `changed` (a pass over 10,240 worker pods
    after every spec edit, and after every change of one of them): whenever those objects differ, the version moved,
    and reading again only the keys it names gives what a list gives; nothing a reader asked of is missed."""
    store = Store(encoded=True, hot=2)
    union = UnionStore([Store(), store])  # an informer per watched namespace
    selectors = [("ns", ("component", "workers")), ("other", ("component", "login"))]
    for op, arg in before:
        store.put(arg) if op == "put" else store.remove(arg)
    readers = [(reader, ns, label) for reader in (store, union) for ns, label in selectors]
    kept = [(reader.changed(ns, label, None)[0], _listed(reader, ns, label)) for reader, ns, label in readers]
    for op, arg in after:
        store.put(arg) if op == "put" else store.remove(arg)
        for k, ((reader, ns, label), (version, listed)) in enumerate(zip(readers, kept, strict=True)):
            now, changed = reader.changed(ns, label, version)
            assert changed is not None  # well within what a store recalls
            for key in changed:
                listed.pop(key, None)
                obj = reader.get(key)
                if obj is not None and obj["metadata"]["labels"].get(label[0]) == label[1]:
                    listed[key] = obj
            assert dict(sorted(listed.items())) == _listed(reader, ns, label)
            assert changed or now == version
            kept[k] = (now, listed)


def _listed(store: Store, namespace: str, label: tuple[str, str]) -> dict[str, Any]:
    return {f"{namespace}/{o['metadata']['name']}": o for o in store.list(namespace=namespace, labels=dict([label]))}


def test_a_reader_further_behind_than_the_store_recalls_reads_everything_again() -> None:
    """The store recalls CHANGE_LOG changes of the LOGGED_LABELS labels asked of last: beyond that, or asked with
    another store's version, `changed` says nothing (None) rather than too little."""
    store = Store()
    label = ("component", "workers")
    first, _ = store.changed("ns", label, None)
    for n in range(CHANGE_LOG + 1):
        store.put(_obj("abcde"[n % 5], "ns", "u1", "workers", n))
    assert store.changed("ns", label, first)[1] is None
    now, _ = store.changed("ns", label, first)
    assert store.changed("ns", label, now) == (now, frozenset())
    assert Store().changed("ns", label, now)[1] is None, "another store's version"
    for n in range(LOGGED_LABELS):
        store.changed("ns", ("other", str(n)), None)
    store.put(_obj("a", "ns", "u1", "workers", 9))
    assert store.changed("ns", label, now)[1] is None
