"""Unhealthy workers are replaced: in a group with replaceUnhealthy, an idle worker drained by slurmctl's GPU health
check or NCCL benchmark has its Kubernetes node cordoned, labelled and annotated, and its pod deleted (uid
precondition) once, with an Event; one pod of a group at a time; never for an administrator's drain, a busy node, a
group that did not opt in, or when Slurm cannot be asked."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

from slurmctl.api.v1 import Policy, WorkerGroup
from slurmctl.reconcilers.observed import WorkerPod
from slurmctl.reconcilers.unhealthy import CordonBudget, Replacement, health_check, judge_unhealthy
from slurmctl.render.kinds import NODE
from slurmctl.runtime.errors import ServerError
from slurmctl.slurm import Node
from test.unit.reconcilers.env import NAME, POLICY, Env, spec
from test.unit.reconcilers.fake_slurm import FakeSlurm
from test.unit.reconcilers.test_lost_nodes import k8s_node, pod_deletes, uid_of
from test.unit.reconcilers.test_lost_nodes import three_nodes as lost_nodes_three
from test.unit.runtime.fakes import FakeClock

# The cluster admin's node-cordon opt-in (--allow-node-cordon): replaceUnhealthy is refused without it.
CORDON = Policy(allow_root_logins=POLICY.allow_root_logins, allow_node_cordon=True)

CPU = f"{NAME}-worker-cpu"
P0, P1, P2 = f"{CPU}-0", f"{CPU}-1", f"{CPU}-2"
GPU_REASON = "slurmctl-gpu: XID 79 on GPU 0"
NCCL_REASON = "slurmctl-nccl: all_reduce busbw 12.0 GB/s below 150"
SINCE = datetime(2026, 1, 1, tzinfo=UTC)


def opted_in(*, replace: bool = True) -> dict[str, Any]:
    group = {"name": "cpu", "size": 3, "resources": {"requests": {"cpu": 2, "memory": "4Gi"}}}
    return spec(workers=[{**group, "replaceUnhealthy": replace}])


async def three_nodes(env: Env, slurm: FakeSlurm, *, replace: bool = True) -> None:
    """One worker on each of node-a, node-b and node-c, and a spare node-d (test_lost_nodes.three_nodes)."""
    await lost_nodes_three(env, slurm, cluster=opted_in(replace=replace), spare=True)


def node_of(env: Env, name: str) -> dict[str, Any]:
    found = env.get(NODE, name)
    assert found is not None
    return found


def cordoned(env: Env, name: str) -> bool:
    return bool(node_of(env, name).get("spec", {}).get("unschedulable"))


def replacing(env: Env) -> list[str]:
    return [message for _, reason, message in env.events() if reason == "Replacing"]


async def test_an_idle_worker_drained_by_the_gpu_check_moves_off_its_node_once() -> None:
    async with Env(policy=CORDON) as env:
        slurm = FakeSlurm()
        await three_nodes(env, slurm)
        slurm.add_node(P0, "ALLOCATED", "DRAIN", reason=GPU_REASON, since=SINCE)
        slurm.run_job(7, P0)
        for _ in range(2):
            await env.poll_slurm()
        assert not cordoned(env, "node-a") and pod_deletes(env) == [], "busy: its job finishes first"

        slurm.end_job(7)
        old_uid = uid_of(env, P0)
        await env.poll_slurm()
        node = node_of(env, "node-a")
        assert node["spec"]["unschedulable"] is True
        assert node["metadata"]["labels"]["slurm.slurmctl.io/unhealthy"] == "gpu"
        assert node["metadata"]["annotations"]["slurm.slurmctl.io/unhealthy-reason"] == GPU_REASON
        assert pod_deletes(env) == [(P0, None, old_uid)], "deleted with its grace period (its preStop runs), once"
        assert replacing(env) == [
            f"replacing Pod {P0} (uid {old_uid}): the GPU health check drained it in Slurm ({GPU_REASON}); cordoned "
            f"Kubernetes node node-a (slurm.slurmctl.io/unhealthy=gpu; uncordon it once repaired) and deleted the "
            "pod, which its StatefulSet re-creates on another node"
        ]
        assert ("Warning", "Replacing") in [e[:2] for e in env.events()]
        assert slurm.calls == [], "the health check's drain is neither resumed nor re-drained"

        # The StatefulSet re-creates the pod elsewhere; the preStop could not delete the Slurm node, so the new
        # slurmd took the old record (and its drain) over: not this pod's drain, not replaced again.
        env.worker_pods(on="node-d")
        for _ in range(2):
            await env.poll_slurm()
        assert len(pod_deletes(env)) == 1 and not cordoned(env, "node-d")
        assert slurm.calls == [] and len(replacing(env)) == 1

        # node-a stays cordoned (an administrator's to uncordon); a new drain of the new pod is acted on.
        assert cordoned(env, "node-a")
        slurm.add_node(P0, "IDLE", "DRAIN", reason=NCCL_REASON, since=datetime(2026, 1, 2, tzinfo=UTC))
        await env.poll_slurm()
        assert [d[0] for d in pod_deletes(env)] == [P0, P0] and cordoned(env, "node-d")
        assert node_of(env, "node-d")["metadata"]["labels"]["slurm.slurmctl.io/unhealthy"] == "nccl"
        assert "the NCCL benchmark drained it" in replacing(env)[-1]


async def test_nothing_for_a_group_that_did_not_opt_in_or_an_administrators_drain() -> None:
    async with Env(policy=CORDON) as env:
        slurm = FakeSlurm()
        await three_nodes(env, slurm, replace=False)
        slurm.add_node(P0, "IDLE", "DRAIN", reason=GPU_REASON, since=SINCE)
        for _ in range(2):
            await env.poll_slurm()
        assert not cordoned(env, "node-a") and pod_deletes(env) == [] and replacing(env) == []

    async with Env(policy=CORDON) as env:
        slurm = FakeSlurm()
        await three_nodes(env, slurm)
        slurm.add_node(P0, "IDLE", "DRAIN", reason="bad GPU, RMA pending", since=SINCE)
        slurm.add_node(P1, "IDLE", "DRAIN", reason="slurmctl: scale-in of worker group cpu to 1", since=SINCE)
        for _ in range(2):
            await env.poll_slurm()
        assert pod_deletes(env) == [] and replacing(env) == []
        assert not any(cordoned(env, n) for n in ("node-a", "node-b"))


async def test_one_pod_of_a_group_at_a_time() -> None:
    async with Env(policy=CORDON) as env:
        slurm = FakeSlurm()
        await three_nodes(env, slurm)
        slurm.add_node(P0, "IDLE", "DRAIN", reason=GPU_REASON, since=SINCE)
        slurm.add_node(P1, "IDLE", "DRAIN", reason=NCCL_REASON, since=SINCE)
        await env.poll_slurm()
        assert [d[0] for d in pod_deletes(env)] == [P0] and not cordoned(env, "node-b")
        await env.poll_slurm()
        assert len(pod_deletes(env)) == 1, "its pod is not back yet"

        del slurm.table[P0]  # the preStop deleted the Slurm node
        (made,) = env.worker_pods(on="node-d")
        env.pod_runs(made, ready=False)
        await env.poll_slurm()
        assert len(pod_deletes(env)) == 1, "the new pod is not Ready yet"

        env.pod_runs(made)
        await env.poll_slurm()
        assert [d[0] for d in pod_deletes(env)] == [P0, P1] and cordoned(env, "node-b")


async def test_nothing_when_slurm_cannot_be_asked_or_the_node_cannot_be_cordoned() -> None:
    async with Env(policy=CORDON) as env:
        slurm = FakeSlurm()
        await three_nodes(env, slurm)
        slurm.add_node(P0, "IDLE", "DRAIN", reason=GPU_REASON, since=SINCE)
        slurm.down = "slurmrestd: connection refused"
        for _ in range(2):
            await env.poll_slurm()
        assert not cordoned(env, "node-a") and pod_deletes(env) == [] and replacing(env) == []

        slurm.down = ""
        k8s_node(env, "node-a", ready="False")
        await env.poll_slurm()
        assert pod_deletes(env) == [] and replacing(env) == [], "its Kubernetes node is NotReady: the pod stays"

        k8s_node(env, "node-a")
        patch = env.fake.merge_patch

        async def refused(api_version: str, kind: str, name: str, body: Any, **kw: Any) -> Any:
            if kind == "Node":
                raise ServerError("nodes is forbidden", status=403, reason="Forbidden")
            return await patch(api_version, kind, name, body, **kw)

        env.fake.merge_patch = refused  # type: ignore[method-assign]
        await env.poll_slurm()
        assert pod_deletes(env) == [] and replacing(env) == [], "not cordoned: the pod stays"
        env.fake.merge_patch = patch  # type: ignore[method-assign]
        await env.poll_slurm()
        assert [d[0] for d in pod_deletes(env)] == [P0] and cordoned(env, "node-a")


def pod(name: str, *, ready: bool = True, created: datetime = SINCE) -> WorkerPod:
    return WorkerPod(name, "node-a", True, ready, True, False, False, f"uid-{name}", created)


def node(name: str, *state: str, reason: str = "") -> Node:
    return Node(name, frozenset(state or ("IDLE",)), reason, "root", SINCE, (), (), 2, 0)


def test_judge_picks_one_idle_member_of_each_opted_in_group() -> None:
    groups = [WorkerGroup.model_validate({"name": "cpu", "size": 3, "replaceUnhealthy": True})]
    pods = [pod(P0), pod(P1), pod(P2)]
    nodes = {P0: node(P0, "IDLE", "DRAIN", reason=GPU_REASON), P1: node(P1, "IDLE", "DRAIN", reason=GPU_REASON)}
    assert [r.pod for r in judge_unhealthy(NAME, groups, pods, nodes, {})] == [P0]
    assert [r.pod for r in judge_unhealthy(NAME, groups, pods, nodes, {P0: (7,)})] == [P1], "P0 busy"
    assert judge_unhealthy(NAME, groups, pods, nodes, {}, leaving={P2}) == []
    assert judge_unhealthy(NAME, groups, pods, nodes, {}, lost={P0}) == []
    assert judge_unhealthy(NAME, groups, [pod(P0), pod(P1), pod(P2, ready=False)], nodes, {}) == []
    assert judge_unhealthy(NAME, groups, [pod(P0), pod(P1)], nodes, {}) == [], "P2 missing"
    done = Replacement(P0, "uid-old", "cpu", "node-a", "gpu", GPU_REASON, SINCE)
    assert [r.pod for r in judge_unhealthy(NAME, groups, pods, nodes, {}, replaced={P0: done})] == [P1]
    deleting = {P2: dataclasses.replace(done, uid=f"uid-{P2}")}  # deleted, the cache does not show it yet
    assert judge_unhealthy(NAME, groups, pods, nodes, {}, replaced=deleting) == []
    later = datetime(2026, 1, 2, tzinfo=UTC)
    created_after = [pod(P0, created=later), pod(P1, created=later), pod(P2)]
    assert judge_unhealthy(NAME, groups, created_after, nodes, {}) == [], "drained before these pods were created"
    assert health_check(node(P0, "IDLE", reason=GPU_REASON)) is None, "resumed: not drained"
    assert health_check(node(P0, "MIXED", "DRAIN", reason=NCCL_REASON)) == "nccl"


def test_judge_leaves_a_worker_on_a_control_plane_node_alone() -> None:
    groups = [WorkerGroup.model_validate({"name": "cpu", "size": 1, "replaceUnhealthy": True})]
    pods = [pod(P0)]
    nodes = {P0: node(P0, "IDLE", "DRAIN", reason=GPU_REASON)}
    assert [r.pod for r in judge_unhealthy(NAME, groups, pods, nodes, {})] == [P0]
    assert judge_unhealthy(NAME, groups, pods, nodes, {}, protected={"node-a"}) == []


async def test_the_cordon_budget_allows_a_burst_per_window_for_the_whole_operator() -> None:
    clock = FakeClock()
    budget = CordonBudget(clock, burst=3, window=600)
    for _ in range(3):
        assert budget.allows()
        budget.spend()
    assert not budget.allows(), "a fourth node within the window waits"
    await clock.advance(599)
    assert not budget.allows()
    await clock.advance(1)
    assert budget.allows(), "the first cordon left the window"
