"""Elastic worker groups: pods follow Slurm's power states (powering up: created; powered down: deleted), `min` nodes
are powered up, a pod that cannot be placed and a node Slurm gave up on are reported, and nothing happens while Slurm
cannot be asked or while a job lists the node. Slurm is an in-memory fake; test/e2e/pods/test_elastic.py runs the same
with real slurmctld power saving."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from slurmctl.reconcilers.elastic import ELASTIC_POLL_SECONDS
from slurmctl.render import meta
from slurmctl.render.kinds import CONFIGMAP, POD, STATEFULSET
from slurmctl.render.power import AT_KEY, NODES_KEY, power_name
from slurmctl.runtime import Result
from test.unit.reconcilers.env import NAME, NS, Env, spec
from test.unit.reconcilers.fake_slurm import FakeSlurm, connect
from test.unit.runtime.fakes import FakeClock


def node(i: int) -> str:
    return f"{NAME}-worker-cpu-{i}"


def elastic(**autoscale: Any) -> dict[str, Any]:
    body = spec()
    body["workers"][0]["autoscale"] = {"max": 3, **autoscale}
    return body


async def elastic_cluster(env: Env, slurm: FakeSlurm, **autoscale: Any) -> None:
    await env.available(elastic(**autoscale))
    for i in range(3):
        slurm.add_node(node(i), "IDLE", "CLOUD", "POWERED_DOWN")
    connect(env, slurm)
    await env.converge()


def pods(env: Env) -> list[str]:
    return [name for name in env.names(POD) if name.startswith(f"{NAME}-worker-")]


async def test_no_pod_and_no_statefulset_while_slurm_has_every_node_powered_down() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        await elastic_cluster(env, slurm)
        assert pods(env) == []
        assert not [n for n in env.names(STATEFULSET) if "worker" in n]
        assert env.reason("WorkersReady") == ("True", "Ready")
        assert slurm.calls == [], "nothing is asked of Slurm for a group at min 0"
        status = env.cluster()["status"]
        assert status["workers"] == [{"name": "cpu", "desired": 0, "ready": 0}]


async def test_a_node_slurm_powers_up_gets_its_pod_and_one_it_powers_down_loses_it() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        await elastic_cluster(env, slurm)
        slurm.add_node(node(2), "IDLE", "CLOUD", "POWERING_UP", "NOT_RESPONDING")  # Slurm chose node 2 for a job
        results = await env.run("workers")
        assert pods(env) == [node(2)], "the pod of the node Slurm powers up, whatever its index"
        pod = env.get(POD, node(2))
        assert pod is not None
        assert pod["spec"]["hostname"] == node(2) and pod["spec"]["subdomain"] == f"{NAME}-workers"
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "SlurmCluster"
        env_names = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"] if "name" in e}
        assert env_names.get("SLURMD_CLOUD") == "true" and "SLURMD_CONF" not in env_names
        assert results["workers"] == Result(requeue_after=5.0), "a node on its way is looked at again soon"
        assert env.reason("WorkersReady") == ("True", "Ready"), "a node coming up for a job is not unreadiness"
        slurm.run_job(7, node(2))
        slurm.add_node(node(2), "ALLOCATED", "CLOUD", "POWERED_DOWN")  # a stale power flag while a job runs
        await env.run("workers")
        assert pods(env) == [node(2)], "a node a job lists keeps its pod"
        slurm.end_job(7)
        slurm.add_node(node(2), "IDLE", "CLOUD", "POWERING_DOWN")  # idle for idleTime
        await env.run("workers")
        assert pods(env) == []
        assert any(r == "Deleted" and "powered its node down" in m for _, r, m in env.events())


async def test_nothing_is_created_or_deleted_while_slurm_cannot_be_asked() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        await elastic_cluster(env, slurm)
        slurm.add_node(node(0), "IDLE", "CLOUD", "POWERING_UP")
        await env.run("workers")
        assert pods(env) == [node(0)]
        slurm.add_node(node(0), "IDLE", "CLOUD", "POWERED_DOWN")
        slurm.down = "slurmrestd: connection refused"
        await env.run("workers")
        assert pods(env) == [node(0)], "a Slurm outage removes nothing"
        cond = env.condition("WorkersReady")
        assert cond is not None and "connection refused" in cond["message"]


async def test_min_nodes_are_powered_up_through_slurm() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        await elastic_cluster(env, slurm, min=2)
        assert ("power_up", (node(0), node(1)), "") in slurm.calls
        assert pods(env) == [node(0), node(1)], "the pods follow the nodes Slurm powers up"
        configs = env.get(CONFIGMAP, f"{NAME}-slurm-configs")
        assert configs is not None
        conf = configs["data"]["slurm.conf"]
        assert f"SuspendExcNodes={NAME}-worker-cpu-[0-2]:2" in conf


async def test_a_pod_that_cannot_be_placed_and_a_node_slurm_gave_up_on_are_reported() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        await elastic_cluster(env, slurm)
        slurm.add_node(node(1), "IDLE", "CLOUD", "POWERING_UP")
        await env.run("workers")
        pod = env.get(POD, node(1))
        assert pod is not None
        message = "0/1 nodes are available: 1 Insufficient cpu."
        status = {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}],
        }
        env.fake.set_status(*POD, node(1), status, namespace=NS)
        await env.run("workers")
        cond = env.condition("WorkersReady")
        assert cond is not None and (cond["status"], cond["reason"]) == ("False", "Unschedulable")
        assert "worker group cpu" in cond["message"] and message in cond["message"]
        assert any(t == "Warning" and r == "Unschedulable" for t, r, _ in env.events())
        assert env.phase() == "Degraded"
        slurm.add_node(node(1), "DOWN", "CLOUD", "POWERED_DOWN", reason="ResumeTimeout reached")
        await env.run("workers")
        assert pods(env) == []
        cond = env.condition("WorkersReady")
        assert cond is not None and cond["reason"] == "Unschedulable" and "resumeTimeout" in cond["message"]
        assert f"scontrol update nodename={node(1)} state=resume" in cond["message"]


async def test_the_node_loop_looks_at_the_power_states_every_ten_seconds_and_a_new_one_wakes_the_workers() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        await elastic_cluster(env, slurm)
        told: list[str] = []
        env.ctx.slurm.listen(lambda c, ns: told.append(c))
        assert await env.poll_slurm() == Result(requeue_after=ELASTIC_POLL_SECONDS)
        assert told == [], "nothing new since the workers' last read"
        slurm.add_node(node(1), "IDLE", "CLOUD", "POWERING_UP", "NOT_RESPONDING")  # Slurm chose node 1 for a job
        await env.poll_slurm()
        assert told == [NAME], "the node loop's read of a new power state wakes the workers"
        await env.run("workers")
        assert pods(env) == [node(1)]


async def test_a_node_slurm_gave_up_on_is_resumed_after_its_backoff_and_a_second_failure_waits_twice_as_long() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        await elastic_cluster(env, slurm, resumeTimeout="30s")
        first = datetime.now(UTC) - timedelta(minutes=2)  # Slurm's clock: the backoff (60 s) is over
        slurm.add_node(node(1), "DOWN", "CLOUD", "POWERED_DOWN", reason="ResumeTimeout reached", since=first)
        await env.run("workers")
        assert ("resume", (node(1),), "") in slurm.calls
        assert "IDLE" in slurm.table[node(1)].state, "Slurm may power it up again for the requeued job"
        assert any(r == "ResumeRetried" and node(1) in m and "retry 1" in m for _, r, m in env.events())
        (row,) = env.cluster()["status"]["workers"]
        assert [(f["node"], f["failures"]) for f in row["resumeFailures"]] == [(node(1), 1)], "the count, kept"
        assert env.reason("WorkersReady") == ("True", "Ready")
        again = datetime.now(UTC)  # powered up for the job, not up within resumeTimeout again
        slurm.add_node(node(1), "DOWN", "CLOUD", "POWERED_DOWN", reason="ResumeTimeout reached", since=again)
        results = await env.run("workers")
        assert [c for c in slurm.calls if c[0] == "resume"] == [("resume", (node(1),), "")], "not yet: 2 minutes"
        cond = env.condition("WorkersReady")
        assert cond is not None and cond["reason"] == "Unschedulable"
        assert "failure 2 in a row" in cond["message"] and "slurmctl resumes it at" in cond["message"]
        result = results["workers"]
        assert result is not None and result.requeue_after is not None and 100 < result.requeue_after < 125


async def test_an_idle_node_whose_pod_is_of_an_older_template_is_powered_down_and_comes_back_with_the_new_one() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        await elastic_cluster(env, slurm, min=1)
        (up,) = pods(env)
        env.pod_runs(up)
        slurm.add_node(up, "IDLE", "CLOUD")  # registered
        await env.run("workers")
        assert [c for c in slurm.calls if c[0] == "power_down"] == [], "its group's template: kept"
        env.edit(lambda s: s["workers"][0].update(image="example.org/worker:2"))
        await env.run("workers")
        assert ("power_down", (up,), "") in slurm.calls
        assert any(r == "PoweringDown" and up in m for _, r, m in env.events())
        assert {"DRAIN", "POWER_DOWN"} <= slurm.table[up].state, "no job starts there; powered down once idle"
        await env.run("workers")
        assert len([c for c in slurm.calls if c[0] == "power_down"]) == 1, "asked once"
        slurm.add_node(up, "IDLE", "CLOUD", "POWERING_DOWN")
        await env.run("workers")
        assert pods(env) == []
        slurm.add_node(up, "IDLE", "CLOUD", "POWERING_UP", "NOT_RESPONDING")  # min: powered up again
        await env.run("workers")
        pod = env.get(POD, up)
        assert pod is not None and pod["spec"]["containers"][0]["image"] == "example.org/worker:2"
        assert meta.TEMPLATE_HASH_ANNOTATION in pod["metadata"]["annotations"]


def resume_signal(env: Env, nodes: str, at: str) -> None:
    """What Slurm's ResumeProgram (images/scripts/resume-nodes) writes: the power ConfigMap's `nodes` and `at`."""
    live = env.get(CONFIGMAP, power_name(NAME))
    assert live is not None, "the operator made the power ConfigMap"
    env.fake.put({**live, "data": {NODES_KEY: nodes, AT_KEY: at}})


async def test_the_resume_signal_makes_the_workers_read_slurm_afresh_and_create_the_pod_at_once() -> None:
    """The poll's snapshot is up to NODE_LOOP_MAX_AGE old; ResumeProgram's write says it may predate a power-up."""
    async with Env() as env:
        slurm = FakeSlurm()
        await elastic_cluster(env, slurm)
        connect(env, slurm, clock=FakeClock())  # snapshots age only when the test says so
        await env.poll_slurm()  # a snapshot taken a moment ago, still within what the workers accept
        slurm.add_node(node(1), "IDLE", "CLOUD", "POWERING_UP", "NOT_RESPONDING")  # Slurm chose node 1 for a job
        await env.run("workers")
        assert pods(env) == [], "without the signal the workers take the snapshot from before the power-up"
        resume_signal(env, node(1), "2026-12-03T10:00:00.000000001Z")
        reads = slurm.reads["nodes"]
        await env.run("workers")
        assert slurm.reads["nodes"] == reads + 1, "the signal costs one fresh read"
        assert pods(env) == [node(1)], "and the pod of the node Slurm powers up is created in the same pass"
        await env.run("workers")
        assert slurm.reads["nodes"] == reads + 1, "a signal already followed asks nothing more"


async def test_a_forged_resume_signal_creates_nothing_slurm_does_not_say() -> None:
    """The ConfigMap is only a wake-up: the pods follow Slurm's power states, whatever it names."""
    async with Env() as env:
        slurm = FakeSlurm()
        await elastic_cluster(env, slurm)
        resume_signal(env, f"{node(0)},{node(2)}", "2026-12-03T10:00:00.000000001Z")
        await env.run("workers")
        assert pods(env) == [], "every node is still powered down in Slurm"
        assert slurm.calls == [], "and nothing was asked of Slurm but a read"
