"""The workers component's decisions as data: an observation in, a plan out; no API server, no Slurm, no clock."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

from slurmctl.api.v1 import WORKERS_READY, Policy
from slurmctl.reconcilers.drain import DRAIN_POLL_SECONDS, Leaving
from slurmctl.reconcilers.loading import Loaded, Loader
from slurmctl.reconcilers.slurm_snapshot import SlurmSnapshot
from slurmctl.reconcilers.workers.plan import plan
from slurmctl.render import meta
from slurmctl.render.kinds import POD, STATEFULSET
from slurmctl.slurm import ExitCode, Job, Node, SlurmUnavailable
from test.unit.reconcilers.env import NAME, NS
from test.unit.reconcilers.plans import NOW, loaded, observe

STS = meta.worker_group(NAME, "cpu")
MUNGE = meta.munge_secret(NAME)
SELECTOR = meta.selector(NAME, "workers", **{meta.LABEL_WORKER_GROUP: "cpu"})


def statefulset(replicas: int, *, ready: int | None = None, uid: str = "sts-uid") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": STS, "namespace": NS, "uid": uid},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": SELECTOR},
        },
        "status": {"readyReplicas": replicas if ready is None else ready},
    }


def node(name: str, *state: str, reason: str = "", since: datetime | None = None) -> Node:
    return Node(
        name=name,
        state=frozenset(state or ("IDLE",)),
        reason=reason,
        reason_set_by="slurm" if reason else "",
        reason_changed_at=since,
        features=(),
        partitions=("main",),
        cpus=2,
        alloc_cpus=0,
    )


def running(job_id: int, *nodes: str) -> Job:
    exit_code = ExitCode(status=("PENDING",), return_code=None, signal=None)
    return Job(job_id=job_id, name="j", user="u", state="RUNNING", nodes=nodes, exit_code=exit_code)


def test_a_new_cluster_waits_for_its_jail_and_asks_for_nothing() -> None:
    p = plan(observe(loaded(), jail_open=False))
    assert not p.apply and not p.delete and not p.slurm
    assert p.status is not None
    (cond,) = p.status.conditions
    assert (cond.type, cond.reason, cond.message) == (
        WORKERS_READY,
        "WaitingForJail",
        "waiting for the populate-jail Job to succeed",
    )


def test_a_missing_key_is_said_and_nothing_is_applied() -> None:
    p = plan(observe(loaded(), keys={}))
    assert not p.apply
    assert p.status is not None and p.status.conditions[0].message == f"waiting for Secret {MUNGE}"


def test_a_growing_group_is_applied_at_its_size_with_an_event_and_slurm_is_not_needed() -> None:
    p = plan(observe(loaded(size=3), children={STATEFULSET: {STS: statefulset(2)}}))
    (sts,) = [o for o in p.apply if o["kind"] == "StatefulSet"]
    assert sts["spec"]["replicas"] == 3
    assert [(n.reason, n.message) for n in p.events] == [("Scaled", "worker group cpu: 2 -> 3 nodes")]
    assert not p.slurm and not p.delete and p.requeue_after is None


def test_scale_in_drains_the_leaving_node_and_keeps_its_replica_until_slurm_released_it() -> None:
    leaving = (Leaving(f"{STS}-1", "cpu", "scale-in of worker group cpu to 1"),)
    snapshot = SlurmSnapshot(
        0.0, nodes=(node(f"{STS}-0"), node(f"{STS}-1", "ALLOCATED")), jobs=(running(7, f"{STS}-1"),)
    )
    p = plan(observe(loaded(size=1), children={STATEFULSET: {STS: statefulset(2)}}, leaving=leaving, slurm=snapshot))
    (sts,) = [o for o in p.apply if o["kind"] == "StatefulSet"]
    assert sts["spec"]["replicas"] == 2  # held: job 7 runs there
    (drain,) = p.slurm
    assert (drain.verb, drain.nodes, drain.reason) == (
        "drain",
        (f"{STS}-1",),
        "slurmctl: scale-in of worker group cpu to 1",
    )
    assert p.status is not None and p.status.conditions[0].reason == "Draining"
    assert "job 7" in p.status.conditions[0].message
    assert p.requeue_after == DRAIN_POLL_SECONDS


def test_a_drained_idle_node_is_released_and_the_group_shrinks() -> None:
    leaving = (Leaving(f"{STS}-1", "cpu", "scale-in of worker group cpu to 1"),)
    drained = node(f"{STS}-1", "IDLE", "DRAIN", reason="slurmctl: scale-in of worker group cpu to 1", since=NOW)
    snapshot = SlurmSnapshot(0.0, nodes=(node(f"{STS}-0"), drained))
    p = plan(observe(loaded(size=1), children={STATEFULSET: {STS: statefulset(2)}}, leaving=leaving, slurm=snapshot))
    (sts,) = [o for o in p.apply if o["kind"] == "StatefulSet"]
    assert sts["spec"]["replicas"] == 1
    assert not p.slurm
    assert ("Scaled", "worker group cpu: 2 -> 1 nodes") in [(n.reason, n.message) for n in p.events]


def test_nothing_goes_while_slurm_cannot_be_asked_and_the_log_says_so_once() -> None:
    leaving = (Leaving(f"{STS}-1", "cpu", "scale-in of worker group cpu to 1"),)
    down = SlurmSnapshot(0.0, error=SlurmUnavailable("no ready slurmrestd pod"))
    obs = observe(loaded(size=1), children={STATEFULSET: {STS: statefulset(2)}}, leaving=leaving, slurm=down)
    p = plan(obs)
    (sts,) = [o for o in p.apply if o["kind"] == "StatefulSet"]
    assert sts["spec"]["replicas"] == 2
    assert p.status is not None
    cond = p.status.conditions[0]
    assert cond.reason == "SlurmUnreachable" and cond.message.endswith("no ready slurmrestd pod")
    assert [w[0] for w in p.warnings] == ["drain gate closed"]
    # Said already: the next pass says it again in the status, and logs nothing.
    said = {"conditions": [cond.model_dump(mode="json", by_alias=True, exclude_none=True)]}
    again = dataclasses.replace(obs, loaded=_with_status(obs.loaded, said), said=said)
    assert plan(again).warnings == ()


def test_a_pod_re_created_for_a_new_template_is_deleted_only_as_the_observed_incarnation() -> None:
    name = f"{STS}-1"
    leaving = (Leaving(name, "cpu", "re-created for a new pod template of worker group cpu", recreate=True),)
    drained = node(name, "IDLE", "DRAIN", reason="slurmctl: x", since=NOW)
    pod = {"metadata": {"name": name, "namespace": NS, "uid": "pod-uid-1"}}
    obs = observe(
        loaded(size=2),
        children={STATEFULSET: {STS: statefulset(2)}},
        leaving=leaving,
        slurm=SlurmSnapshot(0.0, nodes=(node(f"{STS}-0"), drained)),
        pods={name: pod},
    )
    (gone,) = plan(obs).delete
    assert (gone.kind, gone.name, gone.uid) == (POD, name, "pod-uid-1")
    assert gone.why.endswith("its node is drained and runs no job")


def test_a_roll_drains_its_next_node_only_once_the_node_it_re_created_is_resumed() -> None:
    """A re-created node is out of service until its new slurmd registered, and longer when it registered under a
    node its preStop could not delete (the roll's drain holds until the Slurm node loop resumes it): until then the
    next node stays in service (one out at a time)."""
    why = "re-created for a new pod template of worker group cpu"
    back, following = f"{STS}-2", f"{STS}-1"
    leaving = (Leaving(following, "cpu", why, recreate=True),)
    pods = {name: {"metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"}} for name in (back, following)}

    def roll(*nodes: Node) -> Any:
        snapshot = SlurmSnapshot(0.0, nodes=(node(f"{STS}-0"), *nodes))
        return plan(observe(loaded(size=3), children={STATEFULSET: {STS: statefulset(3)}}, leaving=leaving,
                            slurm=snapshot, pods=pods))  # fmt: skip

    still_drained = node(back, "IDLE", "DRAIN", reason=f"slurmctl: {why}", since=NOW)
    held = roll(still_drained, node(following))
    assert not held.slurm and not held.delete
    assert held.requeue_after == DRAIN_POLL_SECONDS
    not_registered_yet = roll(node(following))  # the snapshot was read before its new slurmd registered
    assert not not_registered_yet.slurm and not not_registered_yet.delete
    resumed = roll(node(back), node(following))
    assert [(a.verb, a.nodes) for a in resumed.slurm] == [("drain", (following,))]
    # Drained already (before the re-created node came back drained): it goes on as usual.
    drained_already = node(following, "IDLE", "DRAIN", reason=f"slurmctl: {why}", since=NOW)
    (gone,) = roll(still_drained, drained_already).delete
    assert gone.name == following
    # An administrator's drain, or a cordon's, is not the roll's: it holds nothing.
    admin = node(back, "IDLE", "DRAIN", reason="bad DIMM", since=NOW)
    assert [(a.verb, a.nodes) for a in roll(admin, node(following)).slurm] == [("drain", (following,))]


def test_a_roll_with_max_unavailable_drains_that_many_counting_those_still_out() -> None:
    """maxUnavailable 2: two of the roll's nodes drained at once; while a re-created node is not registered yet (or
    still drained by the roll) it takes a place, and a node drained already goes on as usual."""
    why = "re-created for a new pod template of worker group cpu"
    names = [f"{STS}-{i}" for i in range(5)]
    pods = {name: {"metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"}} for name in names}

    def roll(going: list[str], *nodes: Node) -> Any:
        leaving = tuple(Leaving(n, "cpu", why, recreate=True) for n in going)
        return plan(observe(loaded(size=5, maintenance={"maxUnavailable": 2}),
                            children={STATEFULSET: {STS: statefulset(5)}}, leaving=leaving,
                            slurm=SlurmSnapshot(0.0, nodes=nodes), pods=pods))  # fmt: skip

    everyone = [node(n) for n in names]
    first = roll(names[:0:-1], *everyone)  # the roll offers 4, 3, 2, 1
    assert [(a.verb, a.nodes) for a in first.slurm] == [("drain", (names[4], names[3]))]
    # Any worker Slurm does not list is out of service (the limit is the cluster's): one place left.
    unregistered = roll(names[:0:-1], *everyone[1:])
    assert [(a.verb, a.nodes) for a in unregistered.slurm] == [("drain", (names[4],))]
    # 4 was re-created and has not registered yet: one place left, so 2 waits beside 3 (drained, going on).
    drained_3 = node(names[3], "IDLE", "DRAIN", reason=f"slurmctl: {why}", since=NOW)
    second = roll(names[3:0:-1], everyone[0], everyone[1], everyone[2], drained_3)
    assert [g.name for g in second.delete] == [names[3]]
    assert not second.slurm
    # 4 is back: a place for 2.
    third = roll(names[3:0:-1], everyone[0], everyone[1], everyone[2], drained_3, everyone[4])
    assert [(a.verb, a.nodes) for a in third.slurm] == [("drain", (names[2],))]


def test_a_drain_timeout_releases_the_node_with_a_warning() -> None:
    name = f"{STS}-1"
    leaving = (Leaving(name, "cpu", "scale-in of worker group cpu to 1"),)
    busy = node(name, "ALLOCATED", "DRAIN", reason="slurmctl: x", since=NOW - timedelta(minutes=11))
    group = {"name": "cpu", "size": 1, "drainTimeout": "10m", "resources": {"requests": {"cpu": 2, "memory": "4Gi"}}}
    cluster = loaded(workers=[group])
    snapshot = SlurmSnapshot(0.0, nodes=(node(f"{STS}-0"), busy), jobs=(running(9, name),))
    p = plan(observe(cluster, children={STATEFULSET: {STS: statefulset(2)}}, leaving=leaving, slurm=snapshot))
    assert [(n.type, n.reason) for n in p.events if n.type == "Warning"] == [("Warning", "DrainTimedOut")]
    (sts,) = [o for o in p.apply if o["kind"] == "StatefulSet"]
    assert sts["spec"]["replicas"] == 1


def test_a_removed_groups_statefulset_stays_while_its_nodes_must_be_waited_for() -> None:
    old = meta.worker_group(NAME, "old")
    leaving = (Leaving(f"{old}-0", "old", "worker group old removed"),)
    snapshot = SlurmSnapshot(0.0, nodes=(node(f"{old}-0", "ALLOCATED"),), jobs=(running(3, f"{old}-0"),))
    statefulsets = {
        STS: statefulset(2),
        old: {**statefulset(1, uid="old-uid"), "metadata": {"name": old, "uid": "old-uid"}},
    }
    held = plan(observe(loaded(), children={STATEFULSET: statefulsets}, leaving=leaving, slurm=snapshot))
    assert not [d for d in held.delete if d.kind == STATEFULSET]
    gone = SlurmSnapshot(0.0)  # Slurm no longer knows the node: nothing runs there
    p = plan(observe(loaded(), children={STATEFULSET: statefulsets}, leaving=leaving, slurm=gone))
    (pruned,) = [d for d in p.delete if d.kind == STATEFULSET]
    assert (pruned.name, pruned.uid, pruned.why) == (old, "old-uid", "no longer in the spec")


def test_a_refused_statefulset_is_named_in_the_condition_while_its_group_is_short() -> None:
    message = "StatefulSet c-worker-cpu: pods refused: violates PodSecurity"
    obs = observe(loaded(), children={STATEFULSET: {STS: statefulset(2, ready=0)}}, refusals={STS: message})
    p = plan(obs)
    assert p.status is not None and p.status.conditions[0].reason == "PodRefused"
    assert [(n.type, n.message) for n in p.events] == [("Warning", message)]


ELASTIC_CPU = {"name": "cpu", "resources": {"requests": {"cpu": 2, "memory": "4Gi"}}, "autoscale": {"max": 2}}
FIXED_CPU = {"name": "cpu", "size": 2, "resources": {"requests": {"cpu": 2, "memory": "4Gi"}}}


def elastic_pod(name: str) -> dict[str, Any]:
    owner = {"apiVersion": "slurm.slurmctl.io/v1", "kind": "SlurmCluster", "name": NAME, "uid": "cluster-uid",
             "controller": True}  # fmt: skip
    labels = meta.labels(NAME, "workers", **{meta.LABEL_WORKER_GROUP: "cpu"})
    return {"metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "labels": labels,
                         "ownerReferences": [owner]}}  # fmt: skip


def test_a_group_made_elastic_keeps_its_statefulset_until_its_nodes_ran_their_jobs_and_makes_no_pod_meanwhile() -> None:
    """reconcilers/group_switch.py: the StatefulSet's nodes leave through the drain gate; the elastic plan leaves the
    group alone (a pod of the same name would not be created) until they are gone."""
    cluster = loaded(workers=[ELASTIC_CPU])
    leaving = tuple(Leaving(f"{STS}-{i}", "cpu", "worker group cpu becomes elastic") for i in range(2))
    pods = {f"{STS}-{i}": {"metadata": {"name": f"{STS}-{i}", "namespace": NS, "uid": f"u{i}",
                                        "labels": SELECTOR}} for i in range(2)}  # fmt: skip
    busy = SlurmSnapshot(0.0, nodes=(node(f"{STS}-0", "ALLOCATED"), node(f"{STS}-1")), jobs=(running(5, f"{STS}-0"),))
    children = {STATEFULSET: {STS: statefulset(2)}}
    p = plan(observe(cluster, children=children, leaving=leaving, slurm=busy, pods=pods))
    assert not p.delete and not p.create
    assert not [o for o in p.apply if o["kind"] == "StatefulSet"]
    (drain,) = p.slurm
    assert drain.verb == "drain" and drain.reason == "slurmctl: worker group cpu becomes elastic"
    assert p.status is not None and "job 5" in p.status.conditions[0].message

    idle = SlurmSnapshot(0.0)  # both nodes drained and gone from Slurm: the gate releases them
    (pruned,) = plan(observe(cluster, children=children, leaving=leaving, slurm=idle, pods=pods)).delete
    assert (pruned.kind, pruned.name) == (STATEFULSET, STS)

    still = plan(observe(cluster, leaving=(), slurm=idle, pods={f"{STS}-1": pods[f"{STS}-1"]}))
    assert not still.create, "a pod of the StatefulSet is still going: no elastic pod of its name yet"
    assert still.status is not None and "becomes elastic" in still.status.conditions[0].message


def test_a_group_made_fixed_gets_its_statefulset_once_its_elastic_pods_are_gone_and_slurm_forgot_its_cloud_nodes() -> (
    None
):
    cluster = loaded(workers=[FIXED_CPU])
    name = f"{STS}-0"
    leaving = (Leaving(name, "cpu", "worker group cpu becomes fixed", recreate=True),)
    busy = SlurmSnapshot(0.0, nodes=(node(name, "ALLOCATED", "CLOUD"),), jobs=(running(6, name),))
    p = plan(observe(cluster, leaving=leaving, slurm=busy, pods={name: elastic_pod(name)}))
    assert not [o for o in p.apply if o["kind"] == "StatefulSet"] and not p.delete
    assert [(a.verb, a.reason) for a in p.slurm] == [("drain", "slurmctl: worker group cpu becomes fixed")]

    drained = node(name, "IDLE", "CLOUD", "DRAIN", reason="slurmctl: worker group cpu becomes fixed", since=NOW)
    p = plan(
        observe(cluster, leaving=leaving, slurm=SlurmSnapshot(0.0, nodes=(drained,)), pods={name: elastic_pod(name)})
    )
    (gone,) = p.delete
    assert (gone.kind, gone.name) == (POD, name)
    assert not [o for o in p.apply if o["kind"] == "StatefulSet"]

    cloud = SlurmSnapshot(0.0, nodes=(node(name, "IDLE", "CLOUD", "POWERED_DOWN"),))
    p = plan(observe(cluster, slurm=cloud))  # the pod gone, slurmctld not reconfigured yet
    assert not [o for o in p.apply if o["kind"] == "StatefulSet"]
    assert p.status is not None and p.status.conditions[0].message == (
        "worker group cpu becomes fixed once the nodes of its elastic pods have left (drained, after their jobs)"
    )
    p = plan(observe(cluster, slurm=SlurmSnapshot(0.0)))
    (sts,) = [o for o in p.apply if o["kind"] == "StatefulSet"]
    assert sts["spec"]["replicas"] == 2


def _with_status(cluster: Loaded, status: dict[str, Any]) -> Loaded:
    obj = {**cluster.obj, "status": status, "metadata": {**cluster.obj["metadata"], "resourceVersion": "2"}}
    found = Loader(policy=Policy(allow_root_logins=True)).load(obj)
    assert isinstance(found, Loaded)
    return found
