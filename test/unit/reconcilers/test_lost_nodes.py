"""A lost Kubernetes node: past the threshold (the operator's own clock) its workers are drained in Slurm; those
whose slurmd Slurm cannot reach either are set DOWN, deleted from Slurm and their pods force-deleted once (grace 0,
uid precondition); a slurmd that still answers keeps its pod; nothing is acted on when Slurm cannot be asked, when
the API server does not confirm, or when every node with workers is NotReady; a node Ready again resumes its drain."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from slurmctl.reconcilers.lost_nodes import NotReadyClock, judge_lost, slurmd_unreachable
from slurmctl.reconcilers.observed import WorkerPod
from slurmctl.reconcilers.slurm_nodes import ready_changed
from slurmctl.render.kinds import NODE, POD, STATEFULSET
from slurmctl.runtime import Event, EventType
from slurmctl.runtime.errors import ServerError
from slurmctl.slurm import Node, SlurmApiError
from test.unit.reconcilers.env import NAME, NS, Env, spec
from test.unit.reconcilers.fake_slurm import FakeSlurm, connect
from test.unit.runtime.fakes import FakeClock

CPU = f"{NAME}-worker-cpu"
P0, P1, P2 = f"{CPU}-0", f"{CPU}-1", f"{CPU}-2"
LOST_A = "slurmctl: node node-a NotReady"
LONG_AGO = "2020-01-01T00:00:00Z"  # a NotReady spell that began long before the operator looked


def k8s_node(env: Env, name: str, *, ready: str = "True", since: str = LONG_AGO) -> None:
    """A Kubernetes node as the kubelet and the node lifecycle controller report it (Ready: True, False, Unknown)."""
    cond = {"type": "Ready", "status": ready, "lastTransitionTime": since, "lastHeartbeatTime": since}
    live = env.get(NODE, name)
    md = live["metadata"] if live else {"name": name}
    env.fake.put({"apiVersion": "v1", "kind": "Node", "metadata": md, "status": {"conditions": [cond]}})


def move(env: Env, pod: str, node: str) -> None:
    live = env.get(POD, pod)
    assert live is not None
    env.fake.put({**live, "spec": {**live.get("spec", {}), "nodeName": node}})


async def three_nodes(
    env: Env, slurm: FakeSlurm, *, cluster: dict[str, Any] | None = None, spare: bool = False
) -> None:
    """An Available cluster (`cluster`: its spec, default three workers) with one worker on each of node-a, node-b
    and node-c (and an empty node-d when `spare`), each registered in Slurm, idle."""
    await env.available(cluster or spec(size=3))
    for node in ("node-a", "node-b", "node-c", *(["node-d"] if spare else [])):
        k8s_node(env, node)
    for pod, node in zip(env.worker_pods(), ("node-a", "node-b", "node-c"), strict=True):
        move(env, pod, node)
        slurm.add_node(pod)
    connect(env, slurm)
    await env.poll_slurm()


def uid_of(env: Env, pod: str) -> str:
    live = env.get(POD, pod)
    assert live is not None
    return str(live["metadata"]["uid"])


def pod_deletes(env: Env) -> list[tuple[str, int | None, str | None]]:
    return [(name, grace, uid) for _, kind, _, name, grace, uid in env.fake.delete_options if kind == "Pod"]


def slurm_changes(slurm: FakeSlurm) -> list[tuple[str, tuple[str, ...], str]]:
    return list(slurm.calls)


async def test_a_lost_node_is_drained_after_the_threshold_and_its_pod_replaced_once_slurm_agrees() -> None:
    clock = FakeClock()
    async with Env(clock=clock) as env:
        slurm = FakeSlurm()
        await three_nodes(env, slurm)
        slurm.run_job(7, P0)
        k8s_node(env, "node-a", ready="Unknown")  # the kubelet stopped reporting, long ago as far as the API says
        result = await env.poll_slurm()
        assert slurm.calls == [], "first seen NotReady now: the operator's own count starts, whatever the API says"
        assert result is not None and result.requeue_after == 15.0
        await clock.advance(50)
        result = await env.poll_slurm()
        assert slurm.calls == [] and result is not None and result.requeue_after == pytest.approx(10.0)
        await clock.advance(10)

        await env.poll_slurm()  # lost; slurmd still answers Slurm (it may be only the kubelet)
        assert slurm.calls == [("drain", (P0,), LOST_A)]
        assert ("Normal", "Draining", f"draining {P0} in Slurm ({LOST_A})") in env.events()
        assert [e for e in env.events() if e[1] == "NodeLost"] == [
            ("Warning", "NodeLost", f"Kubernetes node node-a has been NotReady for 60s but slurmd on {P0} still "
             f"answers Slurm: {P0} is drained and its pod stays (its jobs still run)")
        ]  # fmt: skip
        await env.poll_slurm()
        assert len(slurm.calls) == 1 and pod_deletes(env) == [], "drained once, the pod stays"
        assert len([e for e in env.events() if e[1] == "NodeLost"]) == 1, "said once"

        old_uid = uid_of(env, P0)
        slurm.not_responding(P0)  # slurmctld's ping went unanswered: the second witness
        await env.poll_slurm()
        assert slurm.calls[1:] == [("down", (P0,), LOST_A), ("delete", (P0,), "")]
        assert slurm.queue == [], "Slurm ended (requeued) job 7 when the node went DOWN"
        assert pod_deletes(env) == [(P0, 0, old_uid)], "force-deleted, only this incarnation"
        assert env.get(POD, P0) is None
        reasons = [e[1] for e in env.events()]
        assert reasons[-3:] == ["NodeDown", "SlurmNodeDeleted", "Deleted"]

        # The StatefulSet re-creates the pod on a Ready node; its slurmd registers anew.
        env.worker_pods(on="node-b")
        assert uid_of(env, P0) != old_uid
        slurm.add_node(P0)
        mark = len(slurm.calls)
        for _ in range(2):
            await env.poll_slurm()
        assert slurm.calls[mark:] == [] and len(pod_deletes(env)) == 1, "nothing more: the new pod is not on node-a"

        # node-a comes back: nothing runs there any more, nothing is duplicated.
        k8s_node(env, "node-a", since="2026-01-01T00:05:00Z")
        await env.poll_slurm()
        assert slurm.calls[mark:] == [] and len(pod_deletes(env)) == 1


def controller_pod(env: Env, statefulset: str, node: str) -> str:
    """A slurmctld StatefulSet (the primary's or the standby's) made its pod, running on `node`."""
    sts = env.get(STATEFULSET, statefulset)
    assert sts is not None, statefulset
    pod = f"{statefulset}-0"
    owner = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "name": sts["metadata"]["name"],
        "uid": sts["metadata"]["uid"],
    }
    labels = sts["spec"]["template"]["metadata"]["labels"]
    metadata = {"name": pod, "namespace": NS, "labels": labels, "ownerReferences": [owner]}
    env.fake.put({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {"nodeName": node}})
    env.pod_runs(pod)
    return pod


async def test_a_standby_slurmctld_on_a_lost_node_is_moved_once_slurm_cannot_reach_it_either() -> None:
    """Out of reach, a standby fails over nothing and stalls each reconfigure of the primary: it is force-deleted
    (its StatefulSet starts it on a Ready node) once slurmrestd's ping of it goes unanswered; one that still answers
    stays, said once."""
    clock = FakeClock()
    async with Env(clock=clock) as env:
        slurm = FakeSlurm()
        await three_nodes(env, slurm, cluster=spec(size=3, controller={"standby": True}))
        standby = controller_pod(env, f"{NAME}-controller-backup", "node-d")  # no worker there
        primary = controller_pod(env, f"{NAME}-controller", "node-b")
        slurm.pings = {primary: True, standby: True}
        k8s_node(env, "node-d", ready="Unknown")
        await env.poll_slurm()
        await clock.advance(60)
        await env.poll_slurm()
        await env.poll_slurm()
        assert pod_deletes(env) == [] and slurm.calls == [], "it still answers Slurm: only the kubelet is gone"
        lost = [e for e in env.events() if e[1] == "NodeLost"]
        assert lost == [
            ("Warning", "NodeLost", f"Kubernetes node node-d has been NotReady for 60s but the standby slurmctld "
             f"{standby} still answers Slurm: its pod stays")
        ]  # fmt: skip

        old_uid = uid_of(env, standby)
        slurm.pings[standby] = False
        await env.poll_slurm()
        assert pod_deletes(env) == [(standby, 0, old_uid)], "force-deleted, only this incarnation"
        assert slurm.calls == [], "nothing of the workers' Slurm nodes changes"
        assert env.events()[-1][1:] == (
            "Deleted",
            f"force-deleted Pod {standby} (uid {old_uid}): Kubernetes node node-d has been NotReady for 60s and the "
            "standby slurmctld does not answer Slurm; its StatefulSet re-creates it on a Ready node",
        )
        await env.poll_slurm()
        assert len(pod_deletes(env)) == 1, "once"

        # A primary on a lost node is left to Slurm's failover (its standby takes over).
        k8s_node(env, "node-b", ready="Unknown")
        slurm.pings[primary] = False
        slurm.not_responding(P1)
        await env.poll_slurm()
        await clock.advance(60)
        await env.poll_slurm()
        assert [name for name, _, _ in pod_deletes(env)] == [standby, P1]


async def test_a_node_slow_to_report_is_not_acted_on_before_the_threshold_and_a_flap_starts_the_count_anew() -> None:
    clock = FakeClock()
    async with Env(clock=clock) as env:
        slurm = FakeSlurm()
        await three_nodes(env, slurm)
        slurm.not_responding(P0)
        k8s_node(env, "node-a", ready="Unknown", since="2026-01-01T00:00:00Z")
        await env.poll_slurm()
        await clock.advance(40)
        k8s_node(env, "node-a", since="2026-01-01T00:00:40Z")  # Ready again for a moment, between two passes
        k8s_node(env, "node-a", ready="Unknown", since="2026-01-01T00:00:41Z")
        await env.poll_slurm()
        await clock.advance(40)
        await env.poll_slurm()
        assert slurm.calls == [] and pod_deletes(env) == [], "80 s NotReady, but only 40 s in this spell"
        await clock.advance(20)
        await env.poll_slurm()
        assert [c[0] for c in slurm.calls] == ["drain", "down", "delete"] and len(pod_deletes(env)) == 1


@pytest.mark.parametrize("slurm_view", ["NOT_RESPONDING", "DOWN", "unknown"])
async def test_both_witnesses_agree_whatever_slurm_says_of_an_unreachable_slurmd(slurm_view: str) -> None:
    clock = FakeClock()
    async with Env(clock=clock) as env:
        slurm = FakeSlurm()
        await three_nodes(env, slurm)
        if slurm_view == "NOT_RESPONDING":
            slurm.not_responding(P0)
        elif slurm_view == "DOWN":
            slurm.add_node(P0, "DOWN", "NOT_RESPONDING", reason="Not responding")  # SlurmdTimeout passed
        else:
            del slurm.table[P0]  # never registered, or deleted already
        k8s_node(env, "node-a", ready="False")
        await env.poll_slurm()
        await clock.advance(60)
        await env.poll_slurm()
        expected = {
            "NOT_RESPONDING": [("drain", (P0,), LOST_A), ("down", (P0,), LOST_A), ("delete", (P0,), "")],
            "DOWN": [("drain", (P0,), LOST_A), ("delete", (P0,), "")],  # Slurm ended its jobs already
            "unknown": [],
        }[slurm_view]
        assert slurm.calls == expected
        assert [name for name, _, _ in pod_deletes(env)] == [P0]


async def test_when_slurm_cannot_be_asked_nothing_is_acted_on() -> None:
    clock = FakeClock()
    async with Env(clock=clock) as env:
        slurm = FakeSlurm()
        await three_nodes(env, slurm)
        slurm.not_responding(P0)
        k8s_node(env, "node-a", ready="Unknown")
        await env.poll_slurm()
        await clock.advance(120)
        slurm.down = "slurmrestd: connection refused"
        await env.poll_slurm()
        assert slurm.calls == [] and pod_deletes(env) == []
        slurm.down = ""
        await env.poll_slurm()
        assert [c[0] for c in slurm.calls] == ["drain", "down", "delete"], "Slurm answers again: acted on at once"


async def test_a_refused_delete_in_slurm_does_not_hold_the_pod() -> None:
    clock = FakeClock()
    async with Env(clock=clock) as env:
        slurm = FakeSlurm()
        await three_nodes(env, slurm)
        slurm.not_responding(P0)
        k8s_node(env, "node-a", ready="Unknown")
        await env.poll_slurm()
        await clock.advance(60)

        async def refused(name: str) -> None:
            raise SlurmApiError("Slurm refused (HTTP 500): Node has jobs", status=500, errors=["busy"])

        slurm.delete_node = refused  # type: ignore[method-assign]
        await env.poll_slurm()
        assert [c[0] for c in slurm.calls] == ["drain", "down"]
        assert [name for name, _, _ in pod_deletes(env)] == [P0], "its new slurmd takes the old record over"


async def test_every_node_with_workers_not_ready_is_a_full_disruption_nothing_is_acted_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    async with Env(clock=clock) as env:
        slurm = FakeSlurm()
        await three_nodes(env, slurm)
        for pod in (P0, P1, P2):
            slurm.not_responding(pod)
        for node in ("node-a", "node-b", "node-c"):
            k8s_node(env, node, ready="Unknown")
        caplog.set_level(logging.WARNING)
        for _ in range(3):
            await env.poll_slurm()
            await clock.advance(60)
        assert slurm.calls == [] and pod_deletes(env) == []
        warnings = [r for r in caplog.records if "acting on none" in r.getMessage()]
        assert len(warnings) == 1, "one WARNING while it lasts"
        assert "nodes=node-a,node-b,node-c" in warnings[0].getMessage()

        k8s_node(env, "node-b", since="2026-01-01T00:10:00Z")  # one comes back: the others are lost
        await env.poll_slurm()
        assert sorted(name for name, _, _ in pod_deletes(env)) == [], "the count of node-a and node-c starts now"
        await clock.advance(60)
        await env.poll_slurm()
        assert sorted(name for name, _, _ in pod_deletes(env)) == [P0, P2]


async def test_an_api_server_that_does_not_confirm_acts_on_nothing(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    async with Env(clock=clock) as env:
        slurm = FakeSlurm()
        await three_nodes(env, slurm)
        slurm.not_responding(P0)
        k8s_node(env, "node-a", ready="Unknown")
        await env.poll_slurm()
        await clock.advance(60)

        async def unavailable(*args: Any, **kwargs: Any) -> Any:
            raise ServerError("GET node-a: connection refused", status=503, reason="ServiceUnavailable")

        monkeypatch.setattr(env.fake, "get", unavailable)
        caplog.set_level(logging.WARNING)
        await env.poll_slurm()
        assert slurm.calls == [] and pod_deletes(env) == [], "the cache may be stale: no drain, no DOWN, no delete"
        assert any("cannot confirm that a Kubernetes node is lost" in r.getMessage() for r in caplog.records)
        monkeypatch.undo()

        # The API server says node-a came back (the cache has not seen it yet): nothing either.
        live = env.get(NODE, "node-a")
        assert live is not None
        fresh = {**live, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}

        async def ready_now(*args: Any, **kwargs: Any) -> Any:
            return fresh

        monkeypatch.setattr(env.fake, "get", ready_now)
        await env.poll_slurm()
        assert slurm.calls == [] and pod_deletes(env) == []


async def test_a_node_ready_again_resumes_the_drain_of_a_worker_whose_slurmd_answered() -> None:
    clock = FakeClock()
    async with Env(clock=clock) as env:
        slurm = FakeSlurm()
        await three_nodes(env, slurm)
        slurm.run_job(7, P0)
        k8s_node(env, "node-a", ready="False")
        await env.poll_slurm()
        await clock.advance(60)
        await env.poll_slurm()
        assert slurm.calls == [("drain", (P0,), LOST_A)] and slurm.queue, "job 7 runs on"
        k8s_node(env, "node-a", since="2026-01-01T00:03:00Z")  # the kubelet is back
        await env.poll_slurm()
        assert slurm.calls[1:] == [("resume", (P0,), "")] and pod_deletes(env) == []
        assert ("Normal", "Resumed", f"resumed {P0} in Slurm: its drain (node node-a NotReady) no longer holds") in (
            env.events()
        )


async def test_an_administrators_drain_is_kept_and_a_pod_already_terminating_is_force_deleted() -> None:
    clock = FakeClock()
    async with Env(clock=clock) as env:
        slurm = FakeSlurm()
        await three_nodes(env, slurm)
        await slurm.drain([P0], reason="bad DIMM")
        slurm.not_responding(P0)
        live = env.get(POD, P0)
        assert live is not None  # the taint manager evicted it: Terminating for ever, its kubelet is gone
        env.fake.put({**live, "metadata": {**live["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}})
        k8s_node(env, "node-a", ready="Unknown")
        await env.poll_slurm()
        await clock.advance(60)
        await env.poll_slurm()
        assert slurm.calls[1:] == [("down", (P0,), LOST_A), ("delete", (P0,), "")], "no drain over bad DIMM"
        assert [name for name, _, _ in pod_deletes(env)] == [P0]


async def test_the_pod_is_deleted_once_and_never_its_replacement(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    async with Env(clock=clock) as env:
        slurm = FakeSlurm()
        await three_nodes(env, slurm)
        slurm.not_responding(P0)
        k8s_node(env, "node-a", ready="Unknown")
        await env.poll_slurm()
        await clock.advance(60)
        old = env.get(POD, P0)
        assert old is not None
        delete = env.fake.delete

        async def raced(*args: Any, **kwargs: Any) -> None:
            # The StatefulSet controller re-created the pod between the operator's read and its delete.
            env.fake.put({**old, "metadata": {**old["metadata"], "uid": "uid-replacement"}})
            await delete(*args, **kwargs)

        monkeypatch.setattr(env.fake, "delete", raced)
        await env.poll_slurm()
        assert uid_of(env, P0) == "uid-replacement", "the uid precondition kept the new pod"
        monkeypatch.undo()

        # The cache still shows the old pod (a lagging watch): it is not deleted again, nor its node touched.
        env.fake.put(old)
        mark = len(slurm.calls)
        await env.poll_slurm()
        assert len(pod_deletes(env)) == 0 and [c[0] for c in slurm.calls[mark:]] == []


async def test_a_threshold_of_zero_never_acts() -> None:
    clock = FakeClock()
    async with Env(clock=clock) as env:
        slurm = FakeSlurm()
        await three_nodes(env, slurm)
        env.ctx.node_lost_after = 0
        slurm.not_responding(P0)
        k8s_node(env, "node-a", ready="Unknown")
        for _ in range(2):
            await env.poll_slurm()
            await clock.advance(3600)
        assert slurm.calls == [] and pod_deletes(env) == []


def test_a_ready_change_wakes_the_loop_and_a_heartbeat_does_not() -> None:
    def node(status: str, since: str, beat: str = "t0") -> dict[str, Any]:
        cond = {"type": "Ready", "status": status, "lastTransitionTime": since, "lastHeartbeatTime": beat}
        return {"metadata": {"name": "node-a"}, "status": {"conditions": [cond]}}

    assert ready_changed(Event(EventType.UPDATED, node("Unknown", "t1"), node("True", "t0")))
    assert ready_changed(Event(EventType.UPDATED, node("False", "t2"), node("False", "t1"))), "another spell"
    assert not ready_changed(Event(EventType.UPDATED, node("True", "t0", "t9"), node("True", "t0")))
    assert not ready_changed(Event(EventType.ADDED, node("False", "t0")))


def slurm_node(*state: str) -> Node:
    return Node(P0, frozenset(state), "", "", None, (), (), 2, 0)


@pytest.mark.parametrize(
    ("node", "unreachable"),
    [
        (None, True),
        (slurm_node("IDLE", "NOT_RESPONDING"), True),
        (slurm_node("ALLOCATED", "NOT_RESPONDING", "DRAIN"), True),
        (slurm_node("DOWN", "DRAIN"), True),
        (slurm_node("FUTURE"), True),
        (slurm_node("IDLE", "DRAIN"), False),
        (slurm_node("ALLOCATED"), False),
        (slurm_node("MIXED", "COMPLETING"), False),
    ],
)
def test_slurms_witness(node: Node | None, unreachable: bool) -> None:
    assert slurmd_unreachable(node) is unreachable


async def test_judge_lost_counts_each_node_on_the_operators_clock() -> None:
    clock = FakeClock()
    timers = NotReadyClock(clock)

    def pod(name: str, node: str) -> WorkerPod:
        return WorkerPod(name, node, True, True, True, terminating=False, evictable=False, uid=f"u-{name}")

    def k8s(ready: str) -> dict[str, Any]:
        return {"metadata": {"uid": "n"}, "status": {"conditions": [{"type": "Ready", "status": ready}]}}

    pods = [pod(P0, "node-a"), pod(P1, "node-b"), pod(P2, "")]
    nodes = {"node-a": k8s("False"), "node-b": k8s("True")}
    first = judge_lost(pods, nodes, timers, threshold=30)
    assert (first.lost, first.next_check, first.disrupted) == ({}, 30, False)
    await clock.advance(30)
    later = judge_lost(pods, nodes, timers, threshold=30)
    assert later.lost == {P0: "node-a"} and later.next_check is None
    nodes["node-b"] = {"metadata": {"uid": "n"}}  # no Ready condition yet: not lost, but not Ready either
    assert judge_lost(pods, nodes, timers, threshold=30).disrupted
    assert judge_lost([pod(P2, "")], {}, timers, threshold=30) == judge_lost([], {}, timers, threshold=30)
