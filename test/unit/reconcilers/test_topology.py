"""spec.topology: the cluster reconciler renders topology.conf from where the scheduled workers run, and the watches
that re-render it when pods are scheduled, move or go, or their nodes are relabelled (not when readiness flips)."""

from __future__ import annotations

import copy
from typing import Any

from slurmctl.reconcilers.cluster import ClusterReconciler, node_labels_changed, placement_changed
from slurmctl.render.kinds import CONFIGMAP, NODE, POD
from slurmctl.runtime import Event, EventType, Request
from test.unit.reconcilers.env import NAME, NS, Env, spec

SWITCH = "example.com/switch"


def topology(env: Env) -> list[str] | None:
    configs = env.get(CONFIGMAP, f"{NAME}-slurm-configs")
    assert configs is not None
    text = configs["data"].get("topology.conf")
    return None if text is None else text.splitlines()[1:]


def label_node(env: Env, name: str, **labels: str) -> None:
    env.fake.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}, "spec": {}})


def move(env: Env, pod: str, node: str) -> None:
    """The pod re-created by its StatefulSet on another node (same name: same Slurm node)."""
    live = env.get(POD, pod)
    assert live is not None
    moved = copy.deepcopy(live)
    moved["spec"]["nodeName"] = node
    env.fake.put(moved)


async def started(env: Env, **extra: Any) -> list[str]:
    env.create(spec(size=4, **extra))
    await env.converge()
    env.job_succeeds()
    await env.converge()
    label_node(env, "node-a", **{SWITCH: "s1"})
    label_node(env, "node-b", **{SWITCH: "s2"})
    pods = env.worker_pods(on="node-a")
    for pod in pods[2:]:
        move(env, pod, "node-b")
    return pods


async def test_topology_follows_the_scheduled_workers_and_their_nodes_labels() -> None:
    async with Env() as env:
        pods = await started(env, topology={"tree": {"levels": [SWITCH]}})
        await env.run("cluster")
        assert topology(env) == [
            "SwitchName=s1 Nodes=c-worker-cpu-[0-1]",
            "SwitchName=s2 Nodes=c-worker-cpu-[2-3]",
            "SwitchName=root Switches=s1,s2",
        ]
        configs = env.get(CONFIGMAP, f"{NAME}-slurm-configs")
        assert configs is not None
        assert "TopologyPlugin=topology/tree" in configs["data"]["slurm.conf"].splitlines()

        # A pod whose readiness probe fails for a while (slurmctld reconfiguring or failing over, its node registered
        # anew) stays named: rewriting the file would reconfigure every daemon twice, a minute apart.
        mark = env.mark()
        env.pod_runs(pods[3], ready=False)
        await env.run("cluster")
        assert env.writes_since(mark) == [], "a readiness flip rewrites nothing"
        env.pod_runs(pods[3])

        # A pod that goes leaves the file.
        live = env.get(POD, pods[3])
        assert live is not None
        going = copy.deepcopy(live)
        going["metadata"]["deletionTimestamp"] = "2026-11-28T00:00:00Z"
        env.fake.put(going)
        await env.run("cluster")
        assert topology(env) == [
            "SwitchName=s1 Nodes=c-worker-cpu-[0-1]",
            "SwitchName=s2 Nodes=c-worker-cpu-2",
            "SwitchName=root Switches=s1,s2",
        ]
        env.fake.put(live)

        # A pod that moves to another node, and a node relabelled, change the file in place.
        move(env, pods[2], "node-a")
        label_node(env, "node-b", **{SWITCH: "s1"})
        await env.run("cluster")
        assert topology(env) == ["SwitchName=s1 Nodes=c-worker-cpu-[0-3]", "SwitchName=root Switches=s1"]

        # A node without the label: its workers stay schedulable, in the catch-all.
        label_node(env, "node-b")
        await env.run("cluster")
        assert topology(env) == [
            "SwitchName=s1 Nodes=c-worker-cpu-[0-2]",
            "SwitchName=unlabelled Nodes=c-worker-cpu-3",
            "SwitchName=root Switches=s1,unlabelled",
        ]
        mark = env.mark()
        await env.run("cluster")
        assert env.writes_since(mark) == [], "an unchanged placement writes nothing"

        env.edit(lambda s: s.pop("topology"))
        await env.run("cluster")
        assert topology(env) is None


async def test_a_cluster_without_topology_has_no_file() -> None:
    async with Env() as env:
        await started(env)
        await env.run("cluster")
        assert topology(env) is None


async def test_watches_enqueue_the_clusters_whose_topology_may_change() -> None:
    async with Env() as env:
        pods = await started(env, topology={"tree": {"levels": [SWITCH]}})
        env.create(spec(size=1), name="plain")  # no topology: never woken by its pods or nodes
        reconciler = env.ctx.reconcilers["cluster"]
        assert isinstance(reconciler, ClusterReconciler)
        node_b = env.get(NODE, "node-b")
        assert node_b is not None
        mapped = reconciler._with_topology(reconciler.clusters_on)
        assert mapped(node_b) == [Request(NS, NAME)]
        assert reconciler.clusters_on({"metadata": {"name": "node-z"}}) == []

        pod = env.get(POD, pods[0])
        assert pod is not None
        not_ready = copy.deepcopy(pod)
        not_ready["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
        moved = copy.deepcopy(pod)
        moved["spec"]["nodeName"] = "node-b"
        relabelled = copy.deepcopy(pod)
        relabelled["metadata"]["labels"]["x"] = "y"
        assert not placement_changed(Event(EventType.UPDATED, not_ready, pod))
        assert placement_changed(Event(EventType.UPDATED, moved, pod))
        assert not placement_changed(Event(EventType.UPDATED, relabelled, pod))
        assert placement_changed(Event(EventType.DELETED, pod))
        assert not placement_changed(Event(EventType.ADDED, pod, low_priority=True))

        other = copy.deepcopy(node_b)
        other["metadata"]["labels"] = {SWITCH: "s9"}
        assert node_labels_changed(Event(EventType.UPDATED, other, node_b))
        assert not node_labels_changed(Event(EventType.UPDATED, copy.deepcopy(node_b), node_b))
