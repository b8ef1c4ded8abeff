"""Typed views of an object's JSON read what the key-by-key reads did: the API's zero value for what is absent, a
`null` read as absent, and nothing of the object changed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
import pytest

from slurmctl.runtime.objects import ListPage, ObjectMeta, Shared, derived, meta_of, view


def test_metadata_is_read_through_attributes() -> None:
    obj = {
        "metadata": {
            "name": "a",
            "namespace": "ns",
            "uid": "u1",
            "resourceVersion": "7",
            "generation": 3,
            "labels": {"app": "x"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "u0", "controller": True}
            ],
            "managedFields": [{"manager": "m", "operation": "Apply", "subresource": "status", "fieldsV1": {"f:x": {}}}],
        },
        "spec": {"ignored": True},
    }
    md = meta_of(obj)
    assert (md.key, md.uid, md.resource_version, md.generation, md.labels) == ("ns/a", "u1", "7", 3, {"app": "x"})
    assert md.owner_references[0].controller and md.owner_references[0].api_version == "apps/v1"
    assert md.managed_fields[0].manager == "m"
    md.labels["b"] = "2"
    assert obj["metadata"]["labels"] == {"app": "x"}, "a view is a copy"


@pytest.mark.parametrize(
    "obj",
    [None, {}, {"metadata": None}, {"metadata": {"labels": None, "generation": None, "ownerReferences": None}}],
)
def test_absent_and_null_read_as_the_zero_value(obj: dict[str, Any] | None) -> None:
    assert meta_of(obj) == ObjectMeta()
    assert meta_of(obj).key == ""
    assert meta_of(obj).generation is None, "absent, unlike 0"


def test_a_cluster_scoped_object_is_keyed_by_its_name() -> None:
    assert meta_of({"metadata": {"name": "node-1"}}).key == "node-1"


def test_a_field_of_another_type_is_an_error() -> None:
    with pytest.raises(ValueError):
        meta_of({"metadata": {"labels": ["not", "a", "map"]}})
    assert issubclass(msgspec.ValidationError, ValueError)


def test_a_list_page_keeps_its_items_as_json() -> None:
    page = view({"metadata": {"continue": "t", "resourceVersion": "9"}, "items": [{"a": [None, 1]}]}, ListPage)
    assert (page.metadata.continue_, page.metadata.resource_version) == ("t", "9")
    assert page.items == [{"a": [None, 1]}], "nulls inside an item's JSON are the item's"
    assert view({"items": None}, ListPage) == ListPage()


def test_what_a_reader_derives_of_a_cached_object_is_made_once_and_of_a_plain_dict_each_time() -> None:
    made: list[str] = []

    def name(obj: Mapping[str, Any]) -> str:
        made.append(obj["metadata"]["name"])
        return str(obj["metadata"]["name"])

    cached, plain = Shared({"metadata": {"name": "a"}}), {"metadata": {"name": "b"}}
    assert [derived(cached, str, name) for _ in range(3)] == ["a"] * 3
    assert [derived(plain, str, name) for _ in range(2)] == ["b"] * 2
    assert made == ["a", "b", "b"]
