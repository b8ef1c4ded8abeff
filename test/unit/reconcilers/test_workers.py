"""The `workers` reconciler: the jail gate, one StatefulSet per group, scaling, pruning, WorkersReady, and the
re-creation of StatefulSets labelled by releases before the component was named `workers`."""

from __future__ import annotations

import copy
from typing import Any

from slurmctl.render.kinds import SERVICE, STATEFULSET
from test.unit.reconcilers.env import NAME, NS, Env, spec
from test.unit.reconcilers.fake_slurm import FakeSlurm, connect

CPU = f"{NAME}-worker-cpu"
GPU = f"{NAME}-worker-gpu"


async def ready_env(env: Env, body: dict[str, Any]) -> None:
    env.create(body)
    await env.converge()
    env.job_succeeds()
    await env.converge()


async def test_no_worker_starts_before_the_jail_is_populated() -> None:
    async with Env() as env:
        env.create(spec())
        await env.converge()
        assert env.reason("WorkersReady") == ("False", "WaitingForJail")
        assert CPU not in env.names(STATEFULSET)
        env.job_succeeds()
        await env.run("workers")
        assert CPU in env.names(STATEFULSET)
        assert f"{NAME}-workers" in env.names(SERVICE)


async def test_groups_scale_report_per_group_and_removed_groups_are_pruned() -> None:
    async with Env() as env:
        body = spec()
        body["workers"].append({"name": "gpu", "size": 1, "gpus": 1})
        await ready_env(env, body)
        assert {CPU, GPU} <= set(env.names(STATEFULSET))
        env.pods_ready()
        await env.run("workers")
        assert env.reason("WorkersReady") == ("True", "Ready")
        assert env.cluster()["status"]["workers"] == [
            {"name": "cpu", "desired": 2, "ready": 2},
            {"name": "gpu", "desired": 1, "ready": 1},
        ]
        env.edit(lambda s: s["workers"][0].update(size=4))
        await env.run("workers")
        assert env.get(STATEFULSET, CPU)["spec"]["replicas"] == 4  # type: ignore[index]
        assert env.reason("WorkersReady") == ("False", "NotReady")
        assert "cpu 2/4" in env.condition("WorkersReady")["message"]  # type: ignore[index]
        assert env.cluster()["status"]["workersReady"] == "3/5"
        connect(env, FakeSlurm())  # Slurm knows no gpu node (none registered): nothing to drain
        env.edit(lambda s: s.update(workers=s["workers"][:1]))
        await env.run("workers")
        assert GPU not in env.names(STATEFULSET)
        assert ("Normal", "Deleted", f"deleted StatefulSet {GPU}: no longer in the spec") in env.events()


async def test_a_statefulset_with_the_old_component_label_is_recreated_and_nothing_else_is_touched() -> None:
    async with Env() as env:
        await ready_env(env, spec())
        current = env.get(STATEFULSET, CPU)
        assert current is not None
        assert current["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "workers"
        # What a release before the rename left behind: selector and labels say `worker`.
        old = copy.deepcopy(current)
        old["metadata"]["labels"]["app.kubernetes.io/component"] = "worker"
        old["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] = "worker"
        old["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] = "worker"
        await env.fake.delete(*STATEFULSET, CPU, namespace=NS)
        env.fake.put(old)
        mark = env.mark()
        await env.run("workers")
        writes = [(w.verb, w.kind, w.name, w.subresource) for w in env.writes_since(mark, events=False)]
        assert ("delete", "StatefulSet", CPU, "Foreground") in writes
        assert not [w for w in writes if w[0] == "apply" and w[1] == "StatefulSet"], "never applied over the old"
        await env.run("workers")  # woken by its deletion
        recreated = env.get(STATEFULSET, CPU)
        assert recreated is not None
        assert recreated["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "workers"
        mark = env.mark()
        await env.run("workers")
        assert env.writes_since(mark) == []


async def test_a_group_removed_while_still_labelled_the_old_way_is_pruned() -> None:
    async with Env() as env:
        await ready_env(env, spec())
        stray = copy.deepcopy(env.get(STATEFULSET, CPU))
        assert stray is not None
        stray["metadata"]["name"] = f"{NAME}-worker-old"
        stray["metadata"]["labels"]["app.kubernetes.io/component"] = "worker"
        env.fake.put(stray)
        await env.run("workers")
        assert f"{NAME}-worker-old" not in env.names(STATEFULSET)
