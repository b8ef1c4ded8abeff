"""The drain gate: nodes that must go are drained in Slurm first and their pods go only once no job runs there
(or their drainTimeout passed); when Slurm cannot be asked nothing goes; a drain set by someone else is never undone.
Slurm is an in-memory fake here; the real-pods e2e runs the same with real slurmctld and jobs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from slurmctl.render import meta
from slurmctl.render.kinds import CONFIGMAP, POD, STATEFULSET
from slurmctl.runtime import Result
from test.unit.reconcilers.env import NAME, NS, Env, spec
from test.unit.reconcilers.fake_slurm import FakeSlurm, connect

CPU = f"{NAME}-worker-cpu"
REASON = "slurmctl: scale-in of worker group cpu to 1"


def node(i: int, group: str = "cpu") -> str:
    return f"{NAME}-worker-{group}-{i}"


async def cluster_with_nodes(env: Env, slurm: FakeSlurm, size: int, body: dict[str, Any] | None = None) -> None:
    await env.available(body or spec(size=size))
    for i in range(size):
        slurm.add_node(node(i))
    connect(env, slurm)
    await env.converge()


def replicas(env: Env) -> int:
    sts = env.get(STATEFULSET, CPU)
    assert sts is not None
    return int(sts["spec"]["replicas"])


def shrink(size: int) -> Any:
    return lambda s: s["workers"][0].update(size=size)


async def test_scale_in_drains_first_and_lets_each_pod_go_only_when_its_jobs_are_done() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        await cluster_with_nodes(env, slurm, 3)
        slurm.run_job(7, node(2))
        env.edit(shrink(1))
        results = await env.run("workers")
        assert slurm.calls == [("drain", (node(1), node(2)), REASON)]
        assert replicas(env) == 3, "no pod goes before Slurm says its node is drained"
        assert env.reason("WorkersReady") == ("False", "Draining")
        assert f"{node(2)} for job 7" in env.condition("WorkersReady")["message"]  # type: ignore[index]
        assert results["workers"] == Result(requeue_after=5.0)
        assert env.phase() != "Degraded"
        await env.run("workers")
        assert replicas(env) == 3, "node 1 is idle, but node 2 (the highest ordinal) still runs job 7"
        slurm.end_job(7)
        await env.run("workers")
        assert replicas(env) == 1
        assert ("Normal", "Scaled", "worker group cpu: 3 -> 1 nodes") in env.events()
        assert [c[0] for c in slurm.calls] == ["drain"], "each node is drained once"


async def test_an_idle_node_drained_this_pass_is_waited_for_so_a_job_that_started_meanwhile_degrades_nothing() -> None:
    """CI on f464d2f: the gate's snapshot showed the leaving node idle, a job started on it before the drain, and
    the status said "all 2 worker nodes are ready" at the new generation (phase Available) until the next pass saw
    the job: Draining at a generation that was Available reads as Degraded, with a Warning Event."""
    async with Env() as env:
        slurm = FakeSlurm()
        await cluster_with_nodes(env, slurm, 2)
        env.edit(shrink(1))
        await env.run("workers")
        assert slurm.calls == [("drain", (node(1),), REASON)]
        assert env.reason("WorkersReady") == ("False", "Draining"), "a drained node that has not gone yet is waited for"
        assert "drained now" in env.condition("WorkersReady")["message"]  # type: ignore[index]
        slurm.run_job(7, node(1))  # started between the gate's read and the drain
        await env.run("workers")
        assert replicas(env) == 2, "the job's node stays"
        assert f"{node(1)} for job 7" in env.condition("WorkersReady")["message"]  # type: ignore[index]
        assert env.phase() != "Degraded"
        slurm.end_job(7)
        await env.run("workers")
        assert replicas(env) == 1


async def test_a_scale_in_of_hundreds_of_nodes_names_a_few_in_the_condition_and_goes_through() -> None:
    """The 3,584-worker bench: a -500 edit never lowered the StatefulSet. WorkersReady named all 500 draining nodes,
    the message passed metav1.Condition's 32,768 characters, and building the condition failed every workers pass."""
    async with Env() as env:
        slurm = FakeSlurm()
        await cluster_with_nodes(env, slurm, 556)
        slurm.run_job(7, node(300))
        env.edit(shrink(56))
        await env.run("workers")
        assert [c[:2] for c in slurm.calls] == [("drain", tuple(node(i) for i in range(56, 556)))]
        message = env.condition("WorkersReady")["message"]  # type: ignore[index]
        assert message.startswith(f"draining, waiting for jobs to finish: {node(300)} for job 7; ")
        assert message.endswith("; and 490 more nodes")
        await env.run("workers")
        assert replicas(env) == 301, "every node above the one running job 7 goes"
        slurm.end_job(7)
        await env.run("workers")
        assert replicas(env) == 56
        assert env.reason("WorkersReady") == ("True", "Ready")


async def test_nothing_goes_while_slurm_cannot_be_asked_and_the_condition_says_why() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        await cluster_with_nodes(env, slurm, 2)
        slurm.down = "slurmrestd: connection refused"
        env.edit(shrink(1))
        for _ in range(3):
            await env.run("workers")
            assert replicas(env) == 2
        cond = env.condition("WorkersReady")
        assert cond is not None
        assert (cond["status"], cond["reason"]) == ("False", "SlurmUnreachable")
        assert "connection refused" in cond["message"]
        slurm.down = ""
        await env.run("workers")  # drains
        await env.run("workers")  # drained and idle: goes
        assert replicas(env) == 1


async def test_without_a_ready_slurmrestd_pod_scale_in_waits() -> None:
    async with Env() as env:
        env.create(spec(size=2))
        await env.converge()
        env.job_succeeds()
        await env.converge()
        env.edit(shrink(1))
        await env.run("workers")
        assert replicas(env) == 2
        assert "has no ready pod" in env.condition("WorkersReady")["message"]  # type: ignore[index]


async def test_with_slurmrestd_disabled_scale_in_waits_and_says_so() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        await cluster_with_nodes(env, slurm, 2)
        env.edit(lambda s: s.update(rest={"enabled": False}, workers=[{**s["workers"][0], "size": 1}]))
        await env.run("workers")
        assert replicas(env) == 2
        assert "spec.rest.enabled is false" in env.condition("WorkersReady")["message"]  # type: ignore[index]
        assert slurm.calls == []


async def test_growing_never_asks_slurm() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        await cluster_with_nodes(env, slurm, 1)
        slurm.down = "down"
        env.edit(shrink(3))
        await env.run("workers")
        assert replicas(env) == 3


async def test_a_drain_set_by_an_administrator_is_kept_and_its_node_goes_when_idle() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        await cluster_with_nodes(env, slurm, 2)
        slurm.add_node(node(1), "IDLE", "DRAIN", reason="bad DIMM")
        env.edit(shrink(1))
        await env.run("workers")
        assert slurm.calls == [], "not re-drained: the reason is the administrator's"
        assert replicas(env) == 1
        await env.poll_slurm()
        assert slurm.table[node(1)].reason == "bad DIMM"


async def test_nodes_drained_for_a_scale_in_that_was_undone_are_resumed_but_not_an_administrators() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        await cluster_with_nodes(env, slurm, 3)
        env.worker_pods()
        slurm.run_job(1, node(2))
        slurm.add_node(node(0), "IDLE", "DRAIN", reason="maintenance")
        env.edit(shrink(1))
        await env.run("workers")
        assert slurm.table[node(2)].drain
        env.edit(shrink(3))
        await env.run("workers")
        await env.poll_slurm()
        assert not slurm.table[node(1)].drain and not slurm.table[node(2)].drain
        assert slurm.table[node(0)].reason == "maintenance"
        assert ("resume", (node(1), node(2)), "") in slurm.calls
        assert any(e[1] == "Resumed" for e in env.events())


async def test_a_removed_group_keeps_its_statefulset_until_its_nodes_are_drained() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        body = spec(size=1)
        body["workers"].append({"name": "gpu", "size": 1, "gpus": 1})
        await cluster_with_nodes(env, slurm, 1, body)
        slurm.add_node(node(0, "gpu"))
        slurm.run_job(3, node(0, "gpu"))
        env.edit(lambda s: s.update(workers=s["workers"][:1]))
        await env.run("workers")
        assert f"{NAME}-worker-gpu" in env.names(STATEFULSET)
        assert slurm.calls == [("drain", (node(0, "gpu"),), "slurmctl: worker group gpu removed")]
        slurm.end_job(3)
        await env.run("workers")
        assert f"{NAME}-worker-gpu" not in env.names(STATEFULSET)


async def test_a_group_made_elastic_drains_and_keeps_its_statefulset_until_its_jobs_ended() -> None:
    """Its StatefulSet is no fixed group's any more, so its nodes leave like a removed group's (group_switch.py), with
    the drain saying why; no elastic pod is made while it is there."""
    async with Env() as env:
        slurm = FakeSlurm()
        await cluster_with_nodes(env, slurm, 1, spec(size=1))
        slurm.run_job(4, node(0))
        env.edit(lambda s: s["workers"][0].update(autoscale={"max": 2}))
        await env.run("workers")
        assert CPU in env.names(STATEFULSET) and not [p for p in env.names(POD) if p.startswith(CPU)]
        assert slurm.calls == [("drain", (node(0),), "slurmctl: worker group cpu becomes elastic")]
        slurm.end_job(4)
        await env.run("workers")
        assert CPU not in env.names(STATEFULSET)


async def test_after_the_drain_timeout_the_pod_goes_with_a_warning() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        body = spec(size=2)
        body["workers"][0]["drainTimeout"] = "1h"
        await cluster_with_nodes(env, slurm, 2, body)
        slurm.run_job(9, node(1))
        env.edit(shrink(1))
        await env.run("workers")
        assert replicas(env) == 2
        slurm.table[node(1)] = msgspec.structs.replace(
            slurm.table[node(1)], reason_changed_at=datetime.now(UTC) - timedelta(hours=2)
        )
        await env.run("workers")
        assert replicas(env) == 1
        assert any(e[1] == "DrainTimedOut" and "job" in e[2] and "9" in e[2] for e in env.events())


def worker_pod(env: Env, i: int, revision: str) -> None:
    labels = {**meta.labels(NAME, "workers", **{meta.LABEL_WORKER_GROUP: "cpu"}), "controller-revision-hash": revision}
    env.fake.put(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": node(i), "namespace": NS, "labels": labels},
            "status": {"podIP": f"127.0.0.{i + 10}", "conditions": [{"type": "Ready", "status": "True"}]},
        }
    )


def statefulset_controller(env: Env, *, update: str, ready: int) -> None:
    """What the StatefulSet controller reports once it has seen the latest template."""
    sts = env.get(STATEFULSET, CPU)
    assert sts is not None
    status = {"observedGeneration": sts["metadata"]["generation"], "updateRevision": update, "readyReplicas": ready}
    env.fake.set_status(*STATEFULSET, CPU, status, namespace=NS)


async def test_a_new_pod_template_re_creates_one_drained_node_at_a_time() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        await cluster_with_nodes(env, slurm, 2)
        for i in range(2):
            worker_pod(env, i, "old")
        slurm.run_job(5, node(1))
        env.edit(lambda s: s["workers"][0].update(image="registry.example/worker:2"))
        await env.run("workers")
        statefulset_controller(env, update="new", ready=2)
        await env.run("workers")
        assert slurm.calls == [("drain", (node(1),), "slurmctl: re-created for a new pod template of worker group cpu")]
        assert not slurm.table[node(0)].drain, "one node at a time"
        await env.poll_slurm()
        assert slurm.table[node(1)].drain, "the Slurm node loop does not resume a node being re-created"
        await env.run("workers")
        assert env.get(POD, node(1)) is not None, "its job still runs"
        slurm.end_job(5)
        await env.run("workers")
        assert env.get(POD, node(1)) is None
        assert any(e[1] == "Deleted" and node(1) in e[2] for e in env.events())
        # The StatefulSet controller re-creates it from the new template; the node registers afresh.
        worker_pod(env, 1, "new")
        pod = env.get(POD, node(1))
        assert pod is not None
        env.fake.set_status("v1", "Pod", node(1), {"podIP": "127.0.0.20", "conditions": []}, namespace=NS)
        del slurm.table[node(1)]
        slurm.add_node(node(1))
        await env.run("workers")
        assert not slurm.table[node(0)].drain, "not before the re-created node is ready"
        worker_pod(env, 1, "new")  # ready now
        await env.run("workers")
        assert slurm.table[node(0)].drain
        await env.run("workers")
        assert env.get(POD, node(0)) is None


async def test_a_partition_change_rolls_nothing() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        await cluster_with_nodes(env, slurm, 2)
        templates = {name: env.get(STATEFULSET, name)["spec"]["template"] for name in env.names(STATEFULSET)}  # type: ignore[index]
        env.edit(lambda s: s.update(partitions=[{"name": "main", "default": True, "options": {"MaxTime": "2:00:00"}}]))
        await env.converge()
        assert "MaxTime=2:00:00" in env.get(CONFIGMAP, f"{NAME}-slurm-configs")["data"]["nodes.conf"]  # type: ignore[index]
        after = {name: env.get(STATEFULSET, name)["spec"]["template"] for name in env.names(STATEFULSET)}  # type: ignore[index]
        assert after == templates, "controller, workers and login keep their pods; the containers reconfigure"
