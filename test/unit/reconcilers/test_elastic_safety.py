"""Elastic safety (issue 39), decided purely: a node Slurm set DOWN after its resumeTimeout is resumed after a backoff
on Slurm's clock that doubles with each failure in a row (the count kept in the status rows), and an idle node whose
pod is of an older template is powered down through Slurm (POWER_DOWN_ASAP) so that its next pod is of the new one.
The clock is the observation's: every `now` here is made up."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from slurmctl.api.v1 import ResumeFailure, SlurmCluster, WorkerGroup
from slurmctl.reconcilers.elastic import ElasticMemory, ElasticPlan, Retry, plan_elastic, resume_backoff
from slurmctl.render import meta
from slurmctl.render.workers import elastic_template_hash, render_elastic_worker_pod
from slurmctl.slurm import Node
from test.unit.reconcilers.env import spec

C = "c"
T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
HASH = "current"
NOTHING = ElasticMemory()  # a first pass: nothing remembered


def group(**autoscale: Any) -> WorkerGroup:
    return WorkerGroup.model_validate({"name": "cpu", "autoscale": {"max": 2, **autoscale}})


def name(i: int) -> str:
    return f"{C}-worker-cpu-{i}"


def node(i: int, *state: str, reason: str = "", since: datetime | None = None) -> Node:
    return Node(
        name=name(i),
        state=frozenset(state),
        reason=reason,
        reason_set_by="slurm" if reason else "",
        reason_changed_at=since,
        features=("cpu",),
        partitions=("main",),
        cpus=2,
        alloc_cpus=0,
    )


def timed_out(i: int, since: datetime | None) -> Node:
    return node(i, "DOWN", "CLOUD", "POWERED_DOWN", reason="ResumeTimeout reached", since=since)


def asleep(i: int) -> Node:
    return node(i, "IDLE", "CLOUD", "POWERED_DOWN")


def pod(i: int, *, template: str | None = HASH, ready: bool = True) -> dict[str, Any]:
    annotations = {meta.TEMPLATE_HASH_ANNOTATION: template} if template is not None else {}
    status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    return {"metadata": {"name": name(i), "annotations": annotations}, "status": status}


def plan(
    nodes: list[Node],
    *,
    now: datetime,
    pods: Sequence[dict[str, Any]] = (),
    running: dict[str, tuple[int, ...]] | None = None,
    memory: ElasticMemory = NOTHING,
    **autoscale: Any,
) -> ElasticPlan:
    return plan_elastic(
        C,
        [group(**autoscale)],
        {p["metadata"]["name"]: p for p in pods},
        {n.name: n for n in nodes},
        running or {},
        now=now,
        templates={"cpu": HASH},
        memory=memory,
    )


def remembered(found: ElasticPlan) -> ElasticMemory:
    """What the next pass reads back: the rows' resumeFailures, as the status writer leaves them."""
    status = {"workers": [row.to_dict() for row in found.rows]}
    return ElasticMemory.of(status)


# ---- a node Slurm gave up on --------------------------------------------------------------------------------------


def test_a_failed_node_is_resumed_once_its_backoff_on_slurms_clock_is_over() -> None:
    nodes = [timed_out(0, T0), asleep(1)]
    early = plan(nodes, now=T0 + timedelta(seconds=59), resumeTimeout="30s")
    assert early.resume == (), "the first wait is max(resumeTimeout, 60 s)"
    assert early.retry_in == 1.0, "the plan says when to look again: Slurm says nothing new then"
    (problem,) = early.problems
    assert name(0) in problem and "resumes it at 2026-01-01T12:01:00+00:00" in problem
    assert "failure 1 in a row" in problem
    assert f"scontrol update nodename={name(0)} state=resume" in problem, "a person may still do it sooner"
    assert early.rows[0].resume_failures == [ResumeFailure(node=name(0), failures=1, since=T0)]
    due = plan(nodes, now=T0 + timedelta(seconds=60), resumeTimeout="30s", memory=remembered(early))
    assert due.resume == (Retry(name(0), 1),)
    assert due.problems == () and due.in_flight


def test_each_failure_in_a_row_doubles_the_wait_and_the_count_survives_in_the_status_rows() -> None:
    first = plan([timed_out(0, T0)], now=T0 + timedelta(minutes=5), resumeTimeout="5m")
    assert first.resume == (Retry(name(0), 1),), "resumeTimeout 5m: the first wait is 5 minutes"
    # Resumed: IDLE and powered down until Slurm powers it up for the requeued job; the count is kept meanwhile.
    waiting = plan([asleep(0)], now=T0 + timedelta(minutes=6), resumeTimeout="5m", memory=remembered(first))
    assert waiting.rows[0].resume_failures == [ResumeFailure(node=name(0), failures=1, since=T0)]
    powering = plan(
        [node(0, "IDLE", "CLOUD", "POWERING_UP", "NOT_RESPONDING")],
        now=T0 + timedelta(minutes=7),
        resumeTimeout="5m",
        memory=remembered(waiting),
    )
    assert powering.rows[0].resume_failures is not None
    t1 = T0 + timedelta(minutes=12)  # not up within resumeTimeout again: Slurm stamps its reason anew
    again = plan([timed_out(0, t1)], now=t1 + timedelta(minutes=9), resumeTimeout="5m", memory=remembered(powering))
    assert again.resume == ()
    assert again.rows[0].resume_failures == [ResumeFailure(node=name(0), failures=2, since=t1)]
    assert "failure 2 in a row" in again.problems[0]
    same = plan([timed_out(0, t1)], now=t1 + timedelta(minutes=10), resumeTimeout="5m", memory=remembered(again))
    assert same.resume == (Retry(name(0), 2),), "the same failure is not counted twice: 10 minutes after it"


def test_the_count_is_forgotten_once_the_node_is_up() -> None:
    memory = ElasticMemory({name(0): ResumeFailure(node=name(0), failures=3, since=T0)})
    up = plan([node(0, "IDLE", "CLOUD")], now=T0 + timedelta(hours=1), pods=[pod(0)], memory=memory)
    assert up.rows[0].resume_failures is None
    assert up.rows[0].to_dict() == {"name": "cpu", "desired": 1, "ready": 1}, "the status row is as before"


def test_the_backoff_doubles_up_to_an_hour() -> None:
    g = group(resumeTimeout="30s")
    waits = [resume_backoff(g, n) for n in (1, 2, 3, 7, 8, 40)]
    minute = timedelta(minutes=1)
    assert waits == [minute, 2 * minute, 4 * minute, 60 * minute, 60 * minute, 60 * minute]
    assert resume_backoff(group(resumeTimeout="2h"), 3) == timedelta(hours=2), "never less than the first wait"


def test_a_failure_without_slurms_timestamp_waits_from_when_it_was_first_seen() -> None:
    first = plan([timed_out(0, None)], now=T0)
    assert first.resume == () and first.rows[0].resume_failures == [ResumeFailure(node=name(0), failures=1, since=T0)]
    later = plan([timed_out(0, None)], now=T0 + timedelta(minutes=5), memory=remembered(first))
    assert later.resume == (Retry(name(0), 1),), "resumeTimeout 5m by default"


# ---- a pod of an older template -----------------------------------------------------------------------------------


def test_an_idle_node_whose_pod_is_of_an_older_template_is_powered_down_asap() -> None:
    idle = node(0, "IDLE", "CLOUD")
    assert plan([idle], now=T0, pods=[pod(0, template="old")]).power_down == (name(0),)
    assert plan([idle], now=T0, pods=[pod(0, template=None)]).power_down == (name(0),), "made by an older operator"
    assert plan([idle], now=T0, pods=[pod(0)]).power_down == (), "the group's template: kept"


def test_a_node_that_is_busy_drained_powering_or_not_ready_keeps_its_older_pod_for_now() -> None:
    old = [pod(0, template="old")]
    kept = {
        "a job runs": plan([node(0, "ALLOCATED", "CLOUD")], now=T0, pods=old),
        "a job lists it": plan([node(0, "IDLE", "CLOUD")], now=T0, pods=old, running={name(0): (7,)}),
        "completing": plan([node(0, "IDLE", "COMPLETING", "CLOUD")], now=T0, pods=old),
        "drained": plan([node(0, "IDLE", "DRAIN", "CLOUD")], now=T0, pods=old),
        "asked already": plan([node(0, "IDLE", "CLOUD", "POWER_DOWN")], now=T0, pods=old),
        "powering up": plan([node(0, "IDLE", "CLOUD", "POWERING_UP")], now=T0, pods=old),
        "pod not ready": plan([node(0, "IDLE", "CLOUD")], now=T0, pods=[pod(0, template="old", ready=False)]),
    }
    assert {why: found.power_down for why, found in kept.items()} == dict.fromkeys(kept, ())


# ---- the hash -----------------------------------------------------------------------------------------------------


def cluster(**group_fields: Any) -> SlurmCluster:
    body = spec()
    body["workers"][0].update(autoscale={"max": 3}, **group_fields)
    return SlurmCluster.model_validate({"metadata": {"name": C, "namespace": "hpc", "uid": "u"}, "spec": body})


def test_every_pod_of_a_group_carries_the_groups_template_hash_and_a_new_image_changes_it() -> None:
    sc = cluster()
    g = sc.spec.workers[0]
    pods = [render_elastic_worker_pod(sc, g, i, configs={}, munge_key_id="k") for i in range(3)]
    hashes = {p["metadata"]["annotations"][meta.TEMPLATE_HASH_ANNOTATION] for p in pods}
    assert hashes == {elastic_template_hash(sc, g, configs={}, munge_key_id="k")}, "not the pod's name or hostname"
    newer = cluster(image="example.org/worker:2")
    assert elastic_template_hash(newer, newer.spec.workers[0], configs={}, munge_key_id="k") not in hashes
    assert elastic_template_hash(sc, g, configs={}, munge_key_id="other") not in hashes, "a new munge key too"
