"""The `workers` reconciler: the jail gate, one StatefulSet per group, scaling, pruning, WorkersReady, and the
re-creation of StatefulSets labelled by releases before the component was named `workers` (their pods leave through
the drain gate, one at a time)."""

from __future__ import annotations

import copy
from typing import Any

from slurmctl.render.kinds import POD, SERVICE, STATEFULSET
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


def old_labels(obj: dict[str, Any]) -> None:
    """What a release before the component rename put on a worker StatefulSet (or pod): component `worker`."""
    obj["metadata"]["labels"]["app.kubernetes.io/component"] = "worker"
    if "spec" in obj and "selector" in obj["spec"]:
        obj["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] = "worker"
        obj["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] = "worker"


async def test_a_statefulset_whose_selector_changed_is_re_created_and_its_pods_leave_one_drained_node_at_a_time() -> (
    None
):
    async with Env() as env:
        slurm = FakeSlurm()
        await ready_env(env, spec())
        connect(env, slurm)
        old = copy.deepcopy(env.get(STATEFULSET, CPU))
        assert old is not None
        old_labels(old)
        await env.fake.delete(*STATEFULSET, CPU, namespace=NS)
        env.fake.put(old)
        old_sts = env.get(STATEFULSET, CPU)
        assert old_sts is not None
        for i in range(2):  # the old StatefulSet's pods, running jobs
            labels = {**old["spec"]["template"]["metadata"]["labels"], "controller-revision-hash": "old"}
            owner = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": CPU, "uid": old_sts["metadata"]["uid"]}
            metadata = {"name": f"{CPU}-{i}", "namespace": NS, "labels": labels, "ownerReferences": [owner]}
            env.fake.put({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {"nodeName": "node-a"}})
            env.pod_runs(f"{CPU}-{i}")
            slurm.add_node(f"{CPU}-{i}")
            slurm.run_job(10 + i, f"{CPU}-{i}")

        mark = env.mark()
        await env.run("workers")
        writes = [(w.verb, w.kind, w.name, w.subresource) for w in env.writes_since(mark, events=False)]
        assert ("delete", "StatefulSet", CPU, "Orphan") in writes, "its pods, and their jobs, stay"
        assert not [w for w in writes if w[0] == "apply" and w[1] == "StatefulSet"], "never applied over the old"
        assert [env.get(POD, f"{CPU}-{i}") is not None for i in range(2)] == [True, True]
        await env.run("workers")  # woken by its deletion
        recreated = env.get(STATEFULSET, CPU)
        assert recreated is not None
        assert recreated["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "workers"

        # The pods it left behind leave like a roll: the highest ordinal first, drained, and only once idle.
        await env.run("workers")
        reason = f"slurmctl: left behind by the re-created StatefulSet {CPU}, which re-creates it"
        assert slurm.calls == [("drain", (f"{CPU}-1",), reason)]
        await env.run("workers")
        assert env.get(POD, f"{CPU}-1") is not None, "job 11 still runs there"
        assert env.reason("WorkersReady") == ("False", "Draining")
        slurm.end_job(11)
        slurm.down = "slurmrestd: connection refused"
        await env.run("workers")
        assert env.get(POD, f"{CPU}-1") is not None, "Slurm cannot say it is idle: it stays"
        assert env.reason("WorkersReady") == ("False", "SlurmUnreachable")
        slurm.down = ""
        await env.run("workers")
        assert env.get(POD, f"{CPU}-1") is None
        assert not slurm.table[f"{CPU}-0"].drain, "one node at a time"

        # The new StatefulSet creates the freed name from its own template; the next goes once that one is ready.
        del slurm.table[f"{CPU}-1"]
        (made,) = env.worker_pods()
        env.pod_runs(made, ready=False)
        slurm.add_node(made)
        await env.run("workers")
        assert not slurm.table[f"{CPU}-0"].drain, "not before the re-created pod is ready"
        env.pod_runs(made)
        await env.run("workers")
        assert slurm.table[f"{CPU}-0"].drain
        await env.run("workers")
        assert env.get(POD, f"{CPU}-0") is not None, "job 10 still runs there"
        slurm.end_job(10)
        await env.run("workers")
        assert env.get(POD, f"{CPU}-0") is None
        assert env.worker_pods() == [f"{CPU}-0"]
        mark = env.mark()
        await env.run("workers")
        assert env.writes_since(mark) == [], "migrated: nothing more to do"


async def test_a_statefulset_no_group_has_goes_only_once_its_nodes_are_drained() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        await ready_env(env, spec())
        connect(env, slurm)
        stray = copy.deepcopy(env.get(STATEFULSET, CPU))
        assert stray is not None
        stray["metadata"]["name"] = f"{NAME}-worker-old"
        old_labels(stray)
        env.fake.put(stray)
        slurm.add_node(f"{NAME}-worker-old-0")
        slurm.run_job(4, f"{NAME}-worker-old-0")
        await env.run("workers")
        assert f"{NAME}-worker-old" in env.names(STATEFULSET), "its node 0 runs job 4"
        assert slurm.calls == [("drain", (f"{NAME}-worker-old-0",), "slurmctl: worker group old removed")]
        slurm.end_job(4)
        await env.run("workers")
        assert f"{NAME}-worker-old" not in env.names(STATEFULSET)
        assert env.get(STATEFULSET, CPU) is not None
