"""The worker children as the cache holds them (reconcilers/worker_pods.py): a cluster's worker pods, which nodes must
leave, and the clusters on a Kubernetes node. What the workers component and the Slurm node loop both read."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from slurmctl.reconcilers.loading import Loaded
from slurmctl.reconcilers.observed import ordinal
from slurmctl.reconcilers.worker_pods import WorkerPods
from slurmctl.render import meta
from slurmctl.render.kinds import POD, STATEFULSET
from slurmctl.runtime import Cache, Request
from slurmctl.runtime.store import Store
from test.unit.reconcilers.env import NAME, NS, Env, spec

CPU = f"{NAME}-worker-cpu"
LABELS = ("workers", "worker")  # the workers component's label and the one releases before 0.2 put on its children


async def with_pods(env: Env, body: dict[str, Any] | None = None) -> list[str]:
    """A cluster with a populated jail and its worker pods running on node-a; their names."""
    env.create(body or spec())
    await env.converge()
    env.job_succeeds()
    await env.converge()
    return env.worker_pods()


def loaded(env: Env) -> Loaded:
    found = env.ctx.loader.load(env.cluster())
    assert isinstance(found, Loaded)
    return found


def view(env: Env) -> WorkerPods:
    return WorkerPods(env.manager.cache, LABELS)


def pod(env: Env, name: str, labels: dict[str, str]) -> None:
    env.fake.put({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS, "labels": labels}})


async def test_pods_are_the_clusters_worker_pods_by_name_also_under_a_former_label() -> None:
    async with Env() as env:
        assert await with_pods(env) == [f"{CPU}-0", f"{CPU}-1"]
        pod(env, f"{NAME}-worker-old-0", meta.labels(NAME, "worker", **{meta.LABEL_WORKER_GROUP: "old"}))
        pod(env, "other-worker-cpu-0", meta.labels("other", "workers", **{meta.LABEL_WORKER_GROUP: "cpu"}))
        names = [p["metadata"]["name"] for p in view(env).pods(NAME, NS)]
        assert names == [f"{CPU}-0", f"{CPU}-1", f"{NAME}-worker-old-0"]
        assert [p.name for p in view(env).record(NAME, NS).by_group["old"]] == [f"{NAME}-worker-old-0"]
        assert view(env).pods(NAME, "elsewhere") == []


async def test_the_pods_are_read_once_until_one_of_them_changes() -> None:
    """A spec edit's pass reads the cluster's worker pods as the pass before it did (10,240 of them); a pod that
    comes, changes or goes is in the next pass's record, whoever else's pods do not matter."""
    async with Env() as env:
        await with_pods(env)
        pods = view(env)
        first = pods.record(NAME, NS)
        pod(env, "other-worker-cpu-0", meta.labels("other", "workers", **{meta.LABEL_WORKER_GROUP: "cpu"}))
        assert pods.record(NAME, NS) is first
        pod(env, f"{CPU}-2", meta.labels(NAME, "workers", **{meta.LABEL_WORKER_GROUP: "cpu"}))
        assert list(pods.record(NAME, NS).pods) == [f"{CPU}-0", f"{CPU}-1", f"{CPU}-2"]
        again = pods.record(NAME, NS)
        assert pods.record(NAME, NS) is again
        env.fake.set_status("v1", "Pod", f"{CPU}-2", {"phase": "Running", "podIP": "10.0.0.9"}, namespace=NS)
        assert not again.seen[2].has_address
        assert pods.record(NAME, NS).seen[2].has_address
        await env.fake.delete(*POD, f"{CPU}-0", namespace=NS)
        assert list(pods.record(NAME, NS).pods) == [f"{CPU}-1", f"{CPU}-2"]


class _OneStore(Cache):
    """A cache of one store (of pods): what a record reads, without a manager."""

    def __init__(self, store: Store) -> None:
        super().__init__({})
        self._store = store

    def store(self, api_version: str, kind: str) -> Store:
        return self._store


def _worker(name: str, cluster: str, component: str, group: str, ready: bool, elastic: bool) -> dict[str, Any]:
    labels = meta.labels(cluster, component, **{meta.LABEL_WORKER_GROUP: group})
    kind = "SlurmCluster" if elastic else "StatefulSet"  # an elastic pod's owner is its cluster
    owner = {"apiVersion": "v1", "kind": kind, "name": cluster, "uid": "u", "controller": True}
    metadata = {"name": name, "namespace": NS, "labels": labels, "uid": f"{name}-{ready}", "ownerReferences": [owner]}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "status": {"conditions": [{"type": "Ready", "status": str(ready)}]},
    }


POD_NAMES = st.sampled_from([f"{NAME}-worker-{g}-{i}" for g in ("a", "b", "b-x") for i in (0, 1, 2, 10)])
WORKER_OPERATIONS = st.lists(
    st.one_of(
        st.tuples(
            st.just("put"),
            st.builds(
                _worker, POD_NAMES, st.sampled_from([NAME, "other"]), st.sampled_from(["workers", "worker", "login"]),
                st.sampled_from(["a", "b", "b-x"]), st.booleans(), st.booleans(),
            ),
        ),
        st.tuples(st.just("remove"), POD_NAMES.map(lambda name: f"{NS}/{name}")),
    ),
    max_size=30,
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(WORKER_OPERATIONS, WORKER_OPERATIONS)
def test_a_record_made_of_the_pods_that_changed_is_the_record_read_anew(before: list[Any], after: list[Any]) -> None:
    """After a pod changes, the record is the one before with the changed pods read anew and their groups made again
    (the others carried over with what was derived of them): whatever comes, changes groups or goes, it answers as a
    record made of every pod would."""
    store = Store(encoded=True, hot=4)
    kept = WorkerPods(_OneStore(store), LABELS)
    for operations in (before, after):
        for op, arg in operations:
            store.put(arg) if op == "put" else store.remove(arg)
            record = kept.record(NAME, NS)
            fresh = WorkerPods(_OneStore(store), LABELS).record(NAME, NS)
            assert list(record.pods.items()) == list(fresh.pods.items())
            assert record.seen == fresh.seen
            assert record.by_group == fresh.by_group
            assert record.elastic == fresh.elastic
            assert record.groups_with(elastic=False) == fresh.groups_with(elastic=False)
            for group in ("a", "b", "b-x"):
                assert record.in_service(group, 2) == fresh.in_service(group, 2)
                wanted = meta.selector(NAME, "workers", **{meta.LABEL_WORKER_GROUP: group})
                assert record.selected(group, wanted) == fresh.selected(group, wanted)
            selectors = {f"{NAME}-worker-a": meta.selector(NAME, "workers", **{meta.LABEL_WORKER_GROUP: "a"})}
            assert record.unselected(selectors) == fresh.unselected(selectors)
        assert kept.record(NAME, NS) is kept.record(NAME, NS)  # nothing changed: the same record


async def test_statefulsets_are_the_clusters_own() -> None:
    async with Env() as env:
        await with_pods(env)
        labels = meta.labels(NAME, "workers", **{meta.LABEL_WORKER_GROUP: "gpu"})
        metadata = {"name": f"{NAME}-worker-gpu", "namespace": NS, "labels": labels}  # someone else's: no owner
        env.fake.put({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": metadata, "spec": {"replicas": 1}})
        assert [s["metadata"]["name"] for s in view(env).statefulsets(loaded(env))] == [CPU]
        assert [s["metadata"]["name"] for s in WorkerPods(env.manager.cache, ("login",)).statefulsets(loaded(env))] == [
            f"{NAME}-login"
        ]


async def test_nothing_leaves_a_cluster_at_its_size() -> None:
    async with Env() as env:
        await with_pods(env)
        assert view(env).leaving(loaded(env)) == []


async def test_a_shrinking_group_leaves_above_its_new_size_before_the_statefulset_shrinks() -> None:
    async with Env() as env:
        await with_pods(env, spec(size=3))
        env.edit(lambda s: s["workers"][0].update(size=1))
        going = view(env).leaving(loaded(env))
        assert [(g.node, g.group, g.recreate) for g in going] == [
            (f"{CPU}-1", "cpu", False),
            (f"{CPU}-2", "cpu", False),
        ]
        # What the caller read already is taken as it is: a StatefulSet at size 1 has nothing above it.
        assert view(env).leaving(loaded(env), {CPU: 1}) == []


def new_template(env: Env, statefulset: str = CPU) -> None:
    """The StatefulSet controller has seen a new pod template: every pod running now is outdated."""
    sts = env.get(STATEFULSET, statefulset)
    assert sts is not None
    status = {"observedGeneration": sts["metadata"]["generation"], "updateRevision": "rev-2", "readyReplicas": 2}
    env.fake.set_status(*STATEFULSET, statefulset, status, namespace=NS)


async def test_a_new_template_re_creates_the_highest_outdated_pod_while_the_others_are_in_service() -> None:
    async with Env() as env:
        await with_pods(env)
        new_template(env)
        (going,) = view(env).leaving(loaded(env))
        assert (going.node, going.group, going.recreate) == (f"{CPU}-1", "cpu", True)
        assert going.why == "re-created for a new pod template of worker group cpu"
        env.pod_runs(f"{CPU}-0", ready=False)
        assert [g.node for g in view(env).leaving(loaded(env))] == [f"{CPU}-0"], (
            "a node out already fills the one place: only it goes (re-creating it takes nothing more out)"
        )


async def test_max_unavailable_re_creates_that_many_nodes_at_once_counting_those_out_already() -> None:
    async with Env() as env:
        await with_pods(env, spec(size=4, maintenance={"maxUnavailable": "50%"}))
        new_template(env)
        assert [g.node for g in view(env).leaving(loaded(env))] == [f"{CPU}-3", f"{CPU}-2"]
        env.pod_runs(f"{CPU}-1", ready=False)  # out of service: one place of two left
        assert [g.node for g in view(env).leaving(loaded(env))] == [f"{CPU}-3", f"{CPU}-1"]
        env.edit(lambda s: s["maintenance"].update(maxUnavailable=3))
        assert [g.node for g in view(env).leaving(loaded(env))] == [f"{CPU}-3", f"{CPU}-2", f"{CPU}-1"]


async def test_a_roll_goes_from_the_highest_ordinal_by_number_not_by_name() -> None:
    async with Env() as env:
        await with_pods(env, spec(size=12, maintenance={"maxUnavailable": 2}))
        new_template(env)
        assert [g.node for g in view(env).leaving(loaded(env))] == [f"{CPU}-11", f"{CPU}-10"], "not -9 (as a name)"


async def test_a_worker_out_in_another_group_takes_the_place_as_a_deployment_counts_unavailable_pods() -> None:
    """The limit is the cluster's: a group whose roll is done, its last node not back yet, holds the next group's."""
    workers = [{"name": "cpu", "size": 2}, {"name": "mem", "size": 2}]
    async with Env() as env:
        await with_pods(env, spec(workers=workers))
        mem = f"{NAME}-worker-mem"
        new_template(env, mem)
        assert [g.node for g in view(env).leaving(loaded(env))] == [f"{mem}-1"]
        env.pod_runs(f"{CPU}-1", ready=False)
        assert view(env).leaving(loaded(env)) == []


async def test_clusters_on_a_kubernetes_node_are_those_with_a_worker_pod_there() -> None:
    async with Env() as env:
        await with_pods(env)
        node_a = {"metadata": {"name": "node-a"}}
        assert view(env).clusters_on(node_a) == [Request(NS, NAME)]
        assert view(env).clusters_on({"metadata": {"name": "node-b"}}) == []
        assert WorkerPods(env.manager.cache, ("login",)).clusters_on(node_a) == []


def test_ordinal_is_the_number_after_the_last_dash() -> None:
    assert ordinal(f"{CPU}-12") == 12
    assert ordinal(CPU) == -1
    assert ordinal("c-worker-cpu-x") == -1
