"""The single write path skips identical re-applies while the live object is the one the last apply produced."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest

from slurmctl.runtime.apply import Applier, Cached, covers
from slurmctl.runtime.errors import Conflict, NotFound

Obj = dict[str, Any]


class FakeApi:
    """SSA semantics that matter here: a changed object gets a new resourceVersion, an identical one does not."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], Obj] = {}
        self.applies: list[tuple[Obj, str, str | None]] = []
        self.gets = 0
        self.rv = 100
        self.fail_next: Exception | None = None

    async def apply(
        self, body: Mapping[str, Any], *, field_manager: str, subresource: str | None = None, force: bool = True
    ) -> Obj:
        self.applies.append((copy.deepcopy(dict(body)), field_manager, subresource))
        if self.fail_next:
            exc, self.fail_next = self.fail_next, None
            raise exc
        key = (body["metadata"].get("namespace", ""), body["metadata"]["name"])
        current = self.objects.get(key, {})
        merged = {**current, **copy.deepcopy(dict(body)), "metadata": {**current.get("metadata", {})}}
        merged["metadata"].update(body["metadata"])
        if merged != current:
            self.rv += 1
            merged["metadata"]["resourceVersion"] = str(self.rv)
            self.objects[key] = merged
        return copy.deepcopy(self.objects[key])

    async def get(self, api_version: str, kind: str, name: str, *, namespace: str | None = None) -> Obj:
        self.gets += 1
        try:
            return copy.deepcopy(self.objects[(namespace or "", name)])
        except KeyError:
            raise NotFound("missing") from None

    def touch(self, name: str) -> None:
        """Someone else changes the object (e.g. kubectl edit)."""
        self.rv += 1
        self.objects[("ns", name)]["metadata"]["resourceVersion"] = str(self.rv)


def intent(name: str = "cfg", **data: str | None) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "ns", "labels": {"app": "x"}, "annotations": None},
        "data": data or {"k": "v"},
    }


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def api() -> FakeApi:
    return FakeApi()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def applier(api: FakeApi, clock: Clock) -> Applier:
    """The informer cache is simulated by reading the fake API's state directly (a fully caught-up cache)."""
    return Applier(api, lookup=lambda av, kind, ns, name: api.objects.get((ns, name)), ttl=1800, timer=clock)


async def test_identical_reapplies_are_skipped_while_the_live_object_is_unchanged(
    api: FakeApi, applier: Applier
) -> None:
    first = await applier.apply(intent(), field_manager="slurmctl")
    for _ in range(20):
        again = await applier.apply(intent(), field_manager="slurmctl")
        assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    assert len(api.applies) == 1
    assert api.gets == 0  # the cache answered


async def test_the_body_never_contains_nulls(api: FakeApi, applier: Applier) -> None:
    await applier.apply(intent(k="v", dropped=None), field_manager="slurmctl")
    body, manager, subresource = api.applies[0]
    # The intent's `annotations: None` is dropped; the only annotation is the digest the applier stamps.
    assert list(body["metadata"]["annotations"]) == ["slurmctl.io/intent-digest"]
    assert body["data"] == {"k": "v"}
    assert (manager, subresource) == ("slurmctl", None)


async def test_a_changed_intent_is_applied(api: FakeApi, applier: Applier) -> None:
    await applier.apply(intent(k="v1"), field_manager="slurmctl")
    await applier.apply(intent(k="v2"), field_manager="slurmctl")
    await applier.apply(intent(k="v2"), field_manager="slurmctl")
    assert [a[0]["data"] for a in api.applies] == [{"k": "v1"}, {"k": "v2"}]


async def test_someone_else_changing_the_object_makes_the_next_apply_go_through(api: FakeApi, applier: Applier) -> None:
    await applier.apply(intent(), field_manager="slurmctl")
    api.objects[("ns", "cfg")]["data"] = {"k": "edited"}
    api.touch("cfg")
    await applier.apply(intent(), field_manager="slurmctl")
    await applier.apply(intent(), field_manager="slurmctl")
    assert len(api.applies) == 2


async def test_a_write_that_leaves_the_intent_in_place_costs_no_apply(api: FakeApi, applier: Applier) -> None:
    """E.g. the StatefulSet controller writing status: a new resourceVersion, every intended value still live."""
    await applier.apply(intent(), field_manager="slurmctl")
    api.objects[("ns", "cfg")]["status"] = {"observedGeneration": 2}
    api.touch("cfg")
    await applier.apply(intent(), field_manager="slurmctl")
    assert len(api.applies) == 1


async def test_after_a_write_that_left_the_intent_in_place_the_ttl_holds_and_drift_is_still_repaired(
    api: FakeApi, applier: Applier, clock: Clock
) -> None:
    """The object found to hold the intent at a new resourceVersion is remembered at that one, without restarting the
    entry's TTL; a later edit of an intended value (another resourceVersion) is re-applied."""
    await applier.apply(intent(), field_manager="slurmctl")
    for generation in (2, 3):  # the StatefulSet controller writing status, twice
        clock.now += 600
        api.objects[("ns", "cfg")]["status"] = {"observedGeneration": generation}
        api.touch("cfg")
        await applier.apply(intent(), field_manager="slurmctl")
        await applier.apply(intent(), field_manager="slurmctl")
    assert len(api.applies) == 1
    clock.now = 1801  # the first apply's entry expires: ownership is re-asserted
    await applier.apply(intent(), field_manager="slurmctl")
    assert len(api.applies) == 2
    api.objects[("ns", "cfg")]["data"] = {"k": "edited"}
    api.touch("cfg")
    await applier.apply(intent(), field_manager="slurmctl")
    assert [a[0]["data"] for a in api.applies] == [{"k": "v"}] * 3


async def test_a_deleted_object_is_applied_again(api: FakeApi, applier: Applier) -> None:
    await applier.apply(intent(), field_manager="slurmctl")
    del api.objects[("ns", "cfg")]
    await applier.apply(intent(), field_manager="slurmctl")
    assert len(api.applies) == 2


async def test_entries_expire_so_ownership_is_reasserted(api: FakeApi, applier: Applier, clock: Clock) -> None:
    await applier.apply(intent(), field_manager="slurmctl")
    clock.now = 1799
    await applier.apply(intent(), field_manager="slurmctl")
    assert len(api.applies) == 1
    clock.now = 1801
    await applier.apply(intent(), field_manager="slurmctl")
    assert len(api.applies) == 2


async def test_field_managers_are_remembered_separately(api: FakeApi, applier: Applier) -> None:
    await applier.apply(intent(), field_manager="a")
    await applier.apply(intent(), field_manager="b")
    assert [m for _, m, _ in api.applies] == ["a", "b"]


async def test_a_failed_apply_is_not_remembered(api: FakeApi, applier: Applier) -> None:
    await applier.apply(intent(), field_manager="slurmctl")
    api.fail_next = Conflict("boom")
    with pytest.raises(Conflict):
        await applier.apply(intent(k="new"), field_manager="slurmctl")
    await applier.apply(intent(k="new"), field_manager="slurmctl")
    assert len(api.applies) == 3


async def test_unwatched_kinds_compare_against_a_get_never_a_write(api: FakeApi) -> None:
    applier = Applier(api, lookup=lambda *_: Cached.NOT_WATCHED)
    await applier.apply(intent(), field_manager="slurmctl")
    for _ in range(5):
        await applier.apply(intent(), field_manager="slurmctl")
    assert len(api.applies) == 1
    assert api.gets == 6  # the first apply looks first too: the object may already be in place (a restart)


async def test_status_goes_to_the_status_subresource_with_only_the_status(api: FakeApi, applier: Applier) -> None:
    live = {
        "apiVersion": "slurm.slurmctl.io/v1",
        "kind": "SlurmCluster",
        "metadata": {"name": "c", "namespace": "ns", "uid": "u", "resourceVersion": "7"},
        "spec": {"x": 1},
        "status": {"phase": "Available", "message": None},
    }
    await applier.apply_status(live, field_manager="slurmctl-workers")
    await applier.apply_status(live, field_manager="slurmctl-workers")
    assert len(api.applies) == 1
    body, manager, subresource = api.applies[0]
    assert body == {
        "apiVersion": "slurm.slurmctl.io/v1",
        "kind": "SlurmCluster",
        "metadata": {"name": "c", "namespace": "ns"},
        "status": {"phase": "Available"},
    }
    assert (manager, subresource) == ("slurmctl-workers", "status")


async def test_a_restarted_applier_writes_nothing_for_an_object_already_in_place(api: FakeApi) -> None:
    await Applier(api).apply(intent(), field_manager="slurmctl")
    restarted = Applier(api)
    for _ in range(3):
        await restarted.apply(intent(), field_manager="slurmctl")
    assert len(api.applies) == 1


async def test_a_restarted_applier_repairs_drift_and_drops_fields_removed_from_the_intent(api: FakeApi) -> None:
    await Applier(api).apply(intent(k="v", extra="x"), field_manager="slurmctl")
    api.objects[("ns", "cfg")]["data"]["k"] = "changed by hand"
    await Applier(api).apply(intent(k="v", extra="x"), field_manager="slurmctl")
    assert len(api.applies) == 2  # drift: a value of the intent is not in place
    await Applier(api).apply(intent(k="v"), field_manager="slurmctl")
    assert len(api.applies) == 3  # `extra` is still there but no longer intended: the digest differs


def test_covers_allows_server_defaults_and_other_managers_list_items() -> None:
    live = {
        "spec": {"replicas": 2, "ports": [{"name": "a", "port": 1, "protocol": "TCP"}], "args": ["x", "y"]},
        "status": {"conditions": [{"type": "A", "status": "True"}, {"type": "B", "status": "False"}]},
        "cpu": "2",
    }
    assert covers(live, {"spec": {"ports": [{"name": "a", "port": 1}], "args": ["x", "y"]}, "cpu": 2})
    assert covers(live, {"status": {"conditions": [{"type": "B", "status": "False"}]}})
    assert not covers(live, {"status": {"conditions": [{"type": "B", "status": "True"}]}})
    assert not covers(live, {"spec": {"args": ["y", "x"]}})
    assert not covers(live, {"spec": {"replicas": 3}})
    assert not covers(live, {"spec": {"missing": 1}})
    assert covers(live, {"spec": {"value": "", "readOnly": False, "items": []}})  # omitempty zero values
