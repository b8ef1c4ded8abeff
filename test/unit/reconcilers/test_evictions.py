"""Evictions wait for jobs: the workers' PodDisruptionBudget protects every worker pod not labelled evictable, and the
Slurm node loop labels a pod evictable only while Slurm says no job can run on its node; a cordoned Kubernetes node
drains its workers in Slurm (so `kubectl drain` ends once their jobs have), and uncordoning resumes exactly the
drains it caused."""

from __future__ import annotations

from typing import Any

import pytest

from slurmctl.reconcilers.drain import evictable
from slurmctl.reconcilers.observed import WorkerPod, node_ready, ready_since, trimmed_node, unschedulable
from slurmctl.reconcilers.preemption import DEFAULT_PREEMPTION_TAINTS
from slurmctl.reconcilers.slurm_nodes import SlurmNodesReconciler, cordon_changed, taints_changed, worker_pod_changed
from slurmctl.render import meta
from slurmctl.render.kinds import NODE, PDB, POD, STATEFULSET
from slurmctl.runtime import Event, EventType, Result
from slurmctl.slurm import Node
from test.unit.reconcilers.env import NAME, NS, Env, spec
from test.unit.reconcilers.fake_slurm import FakeSlurm, connect, rest_pod

EVICTABLE = meta.LABEL_EVICTABLE
CPU = f"{NAME}-worker-cpu"
P0, P1 = f"{CPU}-0", f"{CPU}-1"
CORDONED_A = "slurmctl: Kubernetes node node-a is cordoned"


async def running(env: Env, slurm: FakeSlurm, *, size: int = 2) -> None:
    """An Available cluster whose worker pods run on node-a (node-b is free) and are registered in Slurm, idle."""
    await env.available(spec(size=size))
    env.k8s_node("node-a")
    env.k8s_node("node-b")
    for pod in env.worker_pods():
        slurm.add_node(pod)
    connect(env, slurm)
    await env.poll_slurm()


async def on_two_nodes(env: Env, slurm: FakeSlurm) -> None:
    """`running`, with P1 moved to node-b: a cordon (or a taint) of node-a concerns P0 only."""
    await running(env, slurm)
    env.pod_runs(P1)
    pod1 = env.get(POD, P1)
    assert pod1 is not None
    env.fake.put({**pod1, "spec": {"nodeName": "node-b"}})


def is_evictable(env: Env, pod: str) -> bool:
    return env.labels(pod).get(EVICTABLE) == "true"


def label_writes(env: Env, mark: int) -> list[str]:
    return [w.name for w in env.writes_since(mark) if w.kind == "Pod" and not w.subresource]


async def test_a_worker_pod_is_evictable_only_while_its_node_is_drained_and_runs_no_job() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        await running(env, slurm)
        assert not is_evictable(env, P0) and not is_evictable(env, P1), "idle but not drained: a job may land"
        slurm.run_job(7, P0)
        await slurm.drain([P0], reason="bad DIMM")  # an administrator's drain counts too
        await env.poll_slurm()
        assert not is_evictable(env, P0), "drained, but job 7 still runs"
        slurm.end_job(7)
        mark = env.mark()
        await env.poll_slurm()
        assert is_evictable(env, P0) and not is_evictable(env, P1)
        assert label_writes(env, mark) == [P0]
        mark = env.mark()
        for _ in range(3):
            await env.poll_slurm()
        assert env.writes_since(mark) == [], "nothing changed in Slurm: no write"
        await slurm.resume([P0])
        await env.poll_slurm()
        assert not is_evictable(env, P0), "resumed: a job may land again"


@pytest.mark.parametrize(
    "outage",
    ["slurmrestd down", "slurmrestd disabled", "no ready slurmrestd pod"],
)
async def test_when_slurm_cannot_be_asked_no_pod_stays_evictable(outage: str) -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        await running(env, slurm)
        await slurm.drain([P0], reason="bad DIMM")
        await env.poll_slurm()
        assert is_evictable(env, P0)
        if outage == "slurmrestd down":
            slurm.down = "slurmrestd: connection refused"
        elif outage == "slurmrestd disabled":
            env.edit(lambda s: s.update(rest={"enabled": False}))
        else:
            await env.fake.delete(*POD, rest_pod(), namespace=NS)
        mark = env.mark()
        await env.poll_slurm()
        assert not is_evictable(env, P0), "a stale evictable could let an eviction kill a job"
        assert label_writes(env, mark) == [P0]
        mark = env.mark()
        await env.poll_slurm()
        assert label_writes(env, mark) == [], "taken off once"


def node(name: str, *state: str) -> Node:
    return Node(name, frozenset(state), "", "", None, (), (), 2, 0)


def pod(*, ready: bool = False, slurmd: bool = False) -> WorkerPod:
    return WorkerPod(P0, "node-a", True, ready, slurmd, terminating=False, evictable=False)


@pytest.mark.parametrize(
    ("slurm_node", "worker", "jobs", "expected"),
    [
        (node(P0, "IDLE", "DRAIN"), pod(ready=True, slurmd=True), {}, True),
        (node(P0, "IDLE", "DRAIN", "DOWN"), pod(), {}, True),
        (node(P0, "MIXED", "DRAIN"), pod(), {}, False),  # draining: jobs still run
        (node(P0, "IDLE", "DRAIN", "COMPLETING"), pod(), {}, False),  # a job's epilog still runs
        (node(P0, "IDLE", "DRAIN"), pod(), {P0: (3,)}, False),  # a job lists it
        (node(P0, "IDLE"), pod(), {}, False),  # not drained: a job may land
        (node(P0, "DOWN"), pod(), {}, False),  # down, not drained: it may come back
        (None, pod(ready=False, slurmd=False), {}, True),  # slurmd not running: it cannot register
        (None, pod(ready=False, slurmd=True), {}, False),  # slurmd runs: it may register at any moment
        (None, pod(ready=True, slurmd=True), {}, False),
        (None, pod(), {P0: (3,)}, False),  # Slurm lists a job there, not (yet) the node
    ],
)
def test_the_evictable_rule(slurm_node: Node | None, worker: WorkerPod, jobs: dict[str, Any], expected: bool) -> None:
    assert evictable(worker, slurm_node, jobs) is expected


async def test_an_unregistered_pod_whose_slurmd_cannot_start_is_evictable_until_it_runs() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        await running(env, slurm)
        del slurm.table[P1]
        env.pod_runs(P1, ready=False, slurmd="waiting")  # CrashLoopBackOff
        await env.poll_slurm()
        assert is_evictable(env, P1)
        env.pod_runs(P1, ready=False, slurmd="running")
        await env.poll_slurm()
        assert not is_evictable(env, P1), "its slurmd may register and take a job"


async def test_a_cordoned_node_drains_its_workers_which_become_evictable_once_idle_and_uncordon_resumes_them() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        await on_two_nodes(env, slurm)
        slurm.run_job(7, P0)
        env.k8s_node("node-a", unschedulable=True)  # kubectl cordon node-a (the first step of kubectl drain)
        assert await env.poll_slurm() == Result(requeue_after=5.0), "looks again soon: it may be idle at once"
        assert slurm.calls == [("drain", (P0,), CORDONED_A)]
        assert ("Normal", "Draining", f"draining {P0} in Slurm ({CORDONED_A})") in env.events()
        assert not is_evictable(env, P0), "job 7 still runs"
        await env.poll_slurm()
        assert len(slurm.calls) == 1, "drained once"
        slurm.end_job(7)
        assert await env.poll_slurm() == Result(requeue_after=15.0)
        assert is_evictable(env, P0), "kubectl drain's eviction of it now goes through"
        assert not is_evictable(env, P1) and not slurm.table[P1].drain, "node-b is not cordoned"

        env.k8s_node("node-a")  # kubectl uncordon node-a
        await env.poll_slurm()
        assert slurm.calls[1:] == [("resume", (P0,), "")]
        assert not slurm.table[P0].drain and not is_evictable(env, P0)
        message = f"resumed {P0} in Slurm: its drain (Kubernetes node node-a is cordoned) no longer holds"
        assert ("Normal", "Resumed", message) in env.events()


async def test_an_administrators_drain_is_neither_replaced_by_a_cordon_nor_resumed_by_the_uncordon() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        await running(env, slurm)
        await slurm.drain([P0], reason="bad DIMM")
        env.k8s_node("node-a", unschedulable=True)
        await env.poll_slurm()
        assert slurm.calls == [("drain", (P0,), "bad DIMM"), ("drain", (P1,), CORDONED_A)]
        env.k8s_node("node-a")
        await env.poll_slurm()
        assert slurm.calls[2:] == [("resume", (P1,), "")]
        assert slurm.table[P0].drain and slurm.table[P0].reason == "bad DIMM"


async def test_an_uncordon_does_not_resume_a_node_that_must_still_leave() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        await running(env, slurm)
        slurm.run_job(7, P1)
        env.k8s_node("node-a", unschedulable=True)
        await env.poll_slurm()
        assert slurm.table[P1].reason == CORDONED_A
        env.edit(lambda s: s["workers"][0].update(size=1))  # scale-in: P1 must go
        await env.run("workers")
        assert slurm.table[P1].drain and env.get(STATEFULSET, CPU)["spec"]["replicas"] == 2  # type: ignore[index]
        env.k8s_node("node-a")
        await env.poll_slurm()
        assert slurm.table[P1].drain, "it must still go: its drain holds"
        assert ("resume", (P0,), "") in slurm.calls, "P0 need not go: resumed"
        assert not [c for c in slurm.calls if c[0] == "resume" and P1 in c[1]]
        slurm.end_job(7)
        await env.run("workers")
        assert env.get(STATEFULSET, CPU)["spec"]["replicas"] == 1  # type: ignore[index]


async def test_the_drain_of_a_terminating_pods_node_is_kept() -> None:
    """The worker's preStop drains its node before it leaves Slurm: that drain is not undone meanwhile."""
    async with Env() as env:
        slurm = FakeSlurm()
        await running(env, slurm)
        slurm.run_job(7, P0)
        await slurm.drain([P0], reason=f"slurmctl: pod {P0} terminating")
        pod0 = env.get(POD, P0)
        assert pod0 is not None
        env.fake.put({**pod0, "metadata": {**pod0["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}})
        await env.poll_slurm()
        assert slurm.table[P0].drain and [c for c in slurm.calls if c[0] == "resume"] == []


async def test_a_preemption_warning_requeues_the_jobs_of_its_node_at_once_and_its_withdrawal_resumes_it() -> None:
    """The cloud taints node-a before it takes the machine: its worker is drained and set DOWN in that pass (Slurm
    requeues job 7 and a Warning names it), its pod becomes evictable; node-b's worker is untouched. The taint
    withdrawn, the node is resumed."""
    taint = DEFAULT_PREEMPTION_TAINTS[1]
    reason = f"slurmctl: Kubernetes node node-a is going away ({taint})"
    async with Env() as env:
        slurm = FakeSlurm()
        await on_two_nodes(env, slurm)
        slurm.run_job(7, P0)
        before = env.get(NODE, "node-a")
        env.k8s_node("node-a", taints=(taint,))
        after = env.get(NODE, "node-a")
        assert before is not None and after is not None
        assert taints_changed(Event(EventType.UPDATED, after, before)), "the taint wakes the loop"
        await env.poll_slurm()
        assert slurm.calls == [("drain", (P0,), reason), ("down", (P0,), reason)]
        message = (
            f"set {P0} DOWN in Slurm: its Kubernetes node node-a is going away (taint {taint}); Slurm requeues jobs 7"
        )
        assert ("Warning", "Preempted", message) in env.events()
        await env.poll_slurm()
        assert is_evictable(env, P0) and not is_evictable(env, P1)
        assert len(slurm.calls) == 2, "set DOWN once"
        env.k8s_node("node-a")
        await env.poll_slurm()
        assert slurm.calls[2:] == [("resume", (P0,), "")]


async def test_a_cordon_wakes_exactly_the_clusters_with_workers_on_that_node() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        await running(env, slurm)
        loop = env.ctx.loops["slurm-nodes"]
        assert isinstance(loop, SlurmNodesReconciler)
        assert [str(r) for r in loop.clusters_on({"metadata": {"name": "node-a"}})] == [f"{NS}/{NAME}"]
        assert loop.clusters_on({"metadata": {"name": "node-b"}}) == []
        before, after = env.get(NODE, "node-a"), {"metadata": {"name": "node-a"}, "spec": {"unschedulable": True}}
        assert before is not None
        assert cordon_changed(Event(EventType.UPDATED, after, before))
        assert not cordon_changed(Event(EventType.UPDATED, before, before)), "a status update of the node"
        pod0 = env.get(POD, P0)
        assert pod0 is not None
        assert not worker_pod_changed(Event(EventType.UPDATED, pod0, pod0))
        env.pod_runs(P0, ready=False)
        assert worker_pod_changed(Event(EventType.UPDATED, env.get(POD, P0), pod0)), "readiness wakes the loop"  # type: ignore[arg-type]


async def test_the_disruption_budget_is_applied_as_policy_v1() -> None:
    async with Env() as env:
        env.create(spec())
        await env.converge()
        env.job_succeeds()
        await env.converge()
        (budget,) = env.fake.of_kind(*PDB)
        assert budget["apiVersion"] == "policy/v1"
        assert budget["metadata"]["name"] == f"{NAME}-workers"
        assert budget["spec"]["maxUnavailable"] == 0


def test_of_a_node_the_operator_keeps_its_identity_labels_cordon_and_ready_condition() -> None:
    """Nodes are watched cluster-wide; their status (image lists, heartbeats) is most of their size and changes
    often: only the Ready condition's status and lastTransitionTime are kept."""
    ready = {"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "node-a", "uid": "u1", "resourceVersion": "7", "labels": {"zone": "a"}},
        "spec": {"unschedulable": True, "podCIDR": "10.244.0.0/24"},
        "status": {
            "images": [{"names": ["x"], "sizeBytes": 1}] * 50,
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": "2026-01-01T00:01:00Z"},
                {**ready, "reason": "KubeletNotReady", "lastHeartbeatTime": "2026-01-01T00:01:00Z"},
            ],
        },
    }
    kept = trimmed_node(node)
    assert kept == {
        "metadata": {"name": "node-a", "uid": "u1", "resourceVersion": "7", "labels": {"zone": "a"}},
        "spec": {"unschedulable": True},
        "status": {"conditions": [ready]},
    }
    assert unschedulable(kept) and not unschedulable(trimmed_node({"metadata": {"name": "node-b"}}))
    assert node_ready(kept) is False and ready_since(kept) == "2026-01-01T00:00:00Z"
    bare = trimmed_node({"metadata": {"name": "node-b"}})
    assert bare == {"metadata": {"name": "node-b"}, "spec": {"unschedulable": False}}
    assert node_ready(bare) is None, "no Ready condition: unknown"
