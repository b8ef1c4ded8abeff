"""The fake API server behaves like server-side apply where reconciler tests depend on it."""

from __future__ import annotations

from typing import Any

import pytest

from slurmctl.runtime import Applier, NotFound
from slurmctl.runtime.fake import FakeClient


def cm(data: dict[str, str], *, labels: dict[str, str] | None = None) -> dict[str, Any]:
    md: dict[str, Any] = {"name": "x", "namespace": "ns"}
    if labels:
        md["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": data}


def sts(replicas: int, *, containers: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "s", "namespace": "ns"},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": c} for c in containers]}}},
    }


async def test_a_field_a_manager_stops_applying_is_removed_unless_another_manager_applied_it() -> None:
    fake = FakeClient()
    await fake.apply(cm({"a": "1", "b": "2"}), field_manager="me")
    await fake.apply(cm({"b": "2", "c": "3"}), field_manager="other")
    live = await fake.apply(cm({"a": "1"}), field_manager="me")
    assert live["data"] == {"a": "1", "b": "2", "c": "3"}  # b is still the other manager's
    live = await fake.apply(cm({"c": "3"}), field_manager="other")
    assert live["data"] == {"a": "1", "c": "3"}


async def test_list_items_with_names_merge_by_name_and_dropped_ones_go() -> None:
    fake = FakeClient()
    await fake.apply(sts(1, containers=["a", "b"]), field_manager="me")
    live = await fake.apply(sts(1, containers=["a"]), field_manager="me")
    assert [c["name"] for c in live["spec"]["template"]["spec"]["containers"]] == ["a"]


async def test_resource_version_and_generation_move_only_on_real_changes() -> None:
    fake = FakeClient()
    first = await fake.apply(sts(1, containers=["a"]), field_manager="me")
    same = await fake.apply(sts(1, containers=["a"]), field_manager="me")
    assert same["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    scaled = await fake.apply(sts(2, containers=["a"]), field_manager="me")
    assert int(scaled["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
    assert (first["metadata"]["generation"], scaled["metadata"]["generation"]) == (1, 2)
    relabelled = await fake.apply(
        {**sts(2, containers=["a"]), "metadata": {"name": "s", "namespace": "ns", "labels": {"x": "y"}}},
        field_manager="me",
    )
    assert relabelled["metadata"]["generation"] == 2
    assert len(fake.writes) == 4  # every request is logged, no-ops included


async def test_status_is_a_separate_subresource() -> None:
    fake = FakeClient()
    with pytest.raises(NotFound):
        await fake.apply({**cm({}), "status": {"phase": "x"}}, field_manager="s", subresource="status")
    await fake.apply({**cm({"a": "1"}), "status": {"ignored": True}}, field_manager="me")
    assert "status" not in (await fake.get("v1", "ConfigMap", "x", namespace="ns"))
    live = await fake.apply({**cm({"a": "2"}), "status": {"phase": "ok"}}, field_manager="s", subresource="status")
    assert (live["data"], live["status"]) == ({"a": "1"}, {"phase": "ok"})


async def test_unserved_kinds_cannot_be_written_and_deletes_collect_dependents() -> None:
    fake = FakeClient()
    with pytest.raises(NotFound):
        await fake.apply({"apiVersion": "x.io/v1", "kind": "Thing", "metadata": {"name": "t"}}, field_manager="me")
    owner = fake.put(cm({}))
    child = {**sts(1, containers=["a"])}
    child["metadata"]["ownerReferences"] = [{"uid": owner["metadata"]["uid"], "name": "x", "kind": "ConfigMap"}]
    fake.put(child)
    await fake.delete("v1", "ConfigMap", "x", namespace="ns")
    assert fake.objects == {}


async def test_the_real_applier_skips_a_converged_object_against_the_fake() -> None:
    fake = FakeClient()
    applier = Applier(fake)
    await applier.apply(cm({"a": "1"}), field_manager="me")
    await applier.apply(cm({"a": "1"}), field_manager="me")
    assert [w.verb for w in fake.writes] == ["apply"]
