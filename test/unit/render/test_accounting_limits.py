"""spec.accounting's accounts and QOS as slurmrestd bodies, and the level-based comparison with what Slurm holds:
nothing to send when converged, a dropped limit sent as "no limit", records the spec does not name never touched."""

from __future__ import annotations

import copy
from typing import Any

from slurmctl.api.v1 import SlurmCluster
from slurmctl.render.accounting_limits import changes, desired_state

EXTERNAL = {"host": "db", "user": "slurm", "passwordSecretRef": {"name": "db", "key": "password"}}


def cluster(**accounting: Any) -> SlurmCluster:
    return SlurmCluster.model_validate(
        {
            "apiVersion": "slurm.slurmctl.io/v1",
            "kind": "SlurmCluster",
            "metadata": {"name": "hpc", "namespace": "ns"},
            "spec": {
                "jail": {"volume": {"claimName": "jail"}},
                "workers": [{"name": "cpu"}],
                "accounting": {"enabled": True, "external": EXTERNAL, **accounting},
            },
        }
    )


SPEC = {
    "qos": [{"name": "small", "maxJobsPerUser": 1, "maxTRESPerJob": {"cpu": 2, "mem": 1024}}],
    "accounts": [
        {"name": "physics", "users": ["bob", "alice"], "maxJobsPerUser": 1, "qos": ["small", "normal"]},
        {"name": "theory", "parent": "physics", "users": ["alice"], "grpTRES": {"cpu": 8}},
    ],
}


def test_desired_records_follow_slurms_v0_0_42_shapes() -> None:
    state = desired_state(cluster(**SPEC))
    (small,) = state["qos"]
    assert small["limits"]["max"]["jobs"]["active_jobs"]["per"]["user"] == {"set": True, "infinite": False, "number": 1}
    assert small["limits"]["max"]["tres"]["per"]["job"] == [
        {"type": "cpu", "name": "", "count": 2},
        {"type": "mem", "name": "", "count": 1024},
    ]
    # Limits the spec does not set are "no limit", so that dropping one from the spec lifts it.
    assert small["limits"]["max"]["active_jobs"]["count"] == {"set": True, "infinite": True, "number": 0}
    assert [a["name"] for a in state["accounts"]] == ["physics", "theory"]
    # A user's default account is the first account in spec order that lists them.
    assert state["users"] == [
        {"name": "alice", "default": {"account": "physics"}},
        {"name": "bob", "default": {"account": "physics"}},
    ]
    keys = [(a["account"], a["user"]) for a in state["associations"]]
    assert keys == [("physics", ""), ("physics", "alice"), ("physics", "bob"), ("theory", ""), ("theory", "alice")]
    physics, alice = state["associations"][0], state["associations"][1]
    assert physics["parent_account"] == "root" and physics["qos"] == ["normal", "small"]
    assert alice["max"]["jobs"]["active"] == {"set": True, "infinite": False, "number": 1}
    assert state["associations"][3]["max"]["tres"]["total"] == [{"type": "cpu", "name": "", "count": 8}]


def test_parents_are_created_before_their_children_whatever_the_spec_order() -> None:
    spec = {"accounts": [{"name": "child", "parent": "mid"}, {"name": "mid", "parent": "top"}, {"name": "top"}]}
    order = [a["account"] for a in desired_state(cluster(**spec))["associations"]]
    assert order == ["top", "mid", "child"]


def live_from(desired: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What slurmrestd would return for records already applied: the same fields plus ones Slurm adds."""
    live = copy.deepcopy(desired)
    for record in live:
        record["id"] = 7
        record["flags"] = []
    return live


def test_nothing_to_send_when_slurm_already_holds_the_spec() -> None:
    state = desired_state(cluster(**SPEC))
    for endpoint, records in state.items():
        assert changes(endpoint, records, live_from(records)) == [], endpoint
        # ... and everything when Slurm holds none of it.
        assert changes(endpoint, records, []) == records, endpoint


def test_a_changed_limit_is_sent_and_a_dropped_tres_is_cleared() -> None:
    before = desired_state(cluster(**SPEC))
    live = live_from(before["qos"])
    spec = copy.deepcopy(SPEC)
    spec["qos"][0]["maxJobsPerUser"] = 3
    spec["qos"][0]["maxTRESPerJob"] = {"cpu": 2}
    (update,) = changes("qos", desired_state(cluster(**spec))["qos"], live)
    assert update["limits"]["max"]["jobs"]["active_jobs"]["per"]["user"]["number"] == 3
    assert update["limits"]["max"]["tres"]["per"]["job"] == [
        {"type": "cpu", "name": "", "count": 2},
        {"type": "mem", "name": "", "count": -1},
    ]


def test_removing_a_limit_from_the_spec_lifts_it() -> None:
    live = live_from(desired_state(cluster(**SPEC))["qos"])
    spec = copy.deepcopy(SPEC)
    del spec["qos"][0]["maxJobsPerUser"]
    (update,) = changes("qos", desired_state(cluster(**spec))["qos"], live)
    assert update["limits"]["max"]["jobs"]["active_jobs"]["per"]["user"] == {"set": True, "infinite": True, "number": 0}
    # Slurm shows a lifted limit as unset or infinite: both match "no limit".
    live[0]["limits"]["max"]["jobs"]["active_jobs"]["per"]["user"] = {"set": False, "infinite": False, "number": 0}
    assert changes("qos", desired_state(cluster(**spec))["qos"], live) == []


def test_records_the_spec_does_not_name_are_never_sent() -> None:
    state = desired_state(cluster(**SPEC))
    by_hand = {"name": "admins", "description": "made with sacctmgr", "organization": "it"}
    assert changes("accounts", state["accounts"], [*live_from(state["accounts"]), by_hand]) == []
