"""Slurm's view on Kubernetes: each worker pod's SlurmNodeState condition follows Slurm's state with a write only
when it changes, the node counts reach the status (the IDLE/ALLOC/DRAIN columns), and the slurm_* series."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prometheus_client import generate_latest

from slurmctl.reconcilers.drain import cordon_reason
from slurmctl.reconcilers.slurm_marks import only_marks_changed, write_marks
from slurmctl.render import meta
from slurmctl.render.kinds import SLURM_CLUSTER
from slurmctl.runtime import Event, EventType, NotFound, Result
from test.unit.reconcilers.env import NAME, NS, Env, spec
from test.unit.reconcilers.fake_slurm import FakeSlurm, connect

POD = f"{NAME}-worker-cpu-0"


def worker_pod(env: Env, name: str) -> None:
    env.fake.put(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": meta.labels(NAME, "workers")},
            "status": {"podIP": "127.0.0.3", "conditions": [{"type": "Ready", "status": "True"}]},
        }
    )


def node_state(env: Env, name: str = POD) -> dict[str, Any] | None:
    pod = env.fake.find("v1", "Pod", name, namespace=NS)
    assert pod is not None
    return next((c for c in pod["status"]["conditions"] if c["type"] == "SlurmNodeState"), None)


async def started(env: Env, slurm: FakeSlurm) -> None:
    env.create(spec(size=2))
    await env.converge()
    for i in range(2):
        worker_pod(env, f"{NAME}-worker-cpu-{i}")
    slurm.add_node(POD)
    connect(env, slurm)


async def test_pod_condition_follows_slurm_and_an_idle_cluster_writes_nothing() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        await started(env, slurm)
        assert await env.poll_slurm() == Result(requeue_after=15.0)
        cond = node_state(env)
        assert cond is not None
        assert (cond["status"], cond["reason"]) == ("True", "Idle")
        missing = node_state(env, f"{NAME}-worker-cpu-1")
        assert missing is not None and (missing["status"], missing["reason"]) == ("False", "NotRegistered")
        assert env.cluster()["status"]["slurmNodes"] == {"total": 1, "idle": 1, "allocated": 0, "drained": 0, "down": 0}
        # Ready, set by the kubelet, is untouched.
        pod = env.fake.find("v1", "Pod", POD, namespace=NS)
        assert pod is not None and {"type": "Ready", "status": "True"} in pod["status"]["conditions"]

        mark = env.mark()
        for _ in range(3):
            await env.poll_slurm()
        assert env.writes_since(mark) == [], "nothing changed in Slurm: no write"

        await slurm.drain([POD], reason="bad DIMM")
        await env.poll_slurm()
        cond = node_state(env)
        assert cond is not None
        assert (cond["status"], cond["reason"], cond["message"]) == ("False", "Drained", "bad DIMM")
        assert env.cluster()["status"]["slurmNodes"]["drained"] == 1
        writes = [(w.kind, w.subresource) for w in env.writes_since(mark)]
        # The condition, the evictable label (drained and idle: no job can run there), the counts.
        assert writes == [("Pod", "status"), ("Pod", ""), ("SlurmCluster", "status")]
        assert env.labels(POD)["slurm.slurmctl.io/evictable"] == "true"

        await slurm.resume([POD])
        await env.poll_slurm()
        assert node_state(env)["reason"] == "Idle"  # type: ignore[index]
        assert "slurm.slurmctl.io/evictable" not in env.labels(POD)


async def test_slurm_unreachable_writes_nothing_and_reports_down_in_metrics() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        await started(env, slurm)
        await env.poll_slurm()
        slurm.down = "slurmrestd: timed out"
        mark = env.mark()
        assert await env.poll_slurm() == Result(requeue_after=15.0)
        assert env.writes_since(mark) == []
        text = generate_latest(env.manager.metrics.registry).decode()
        assert f'slurm_up{{cluster="{NAME}",namespace="{NS}"}} 0.0' in text


async def test_metrics_show_nodes_and_jobs_by_state() -> None:
    async with Env() as env:
        slurm = FakeSlurm()
        await started(env, slurm)
        slurm.add_node(f"{NAME}-worker-cpu-1")
        slurm.run_job(4, f"{NAME}-worker-cpu-1")
        await env.poll_slurm()
        text = generate_latest(env.manager.metrics.registry).decode()
        labels = f'cluster="{NAME}",namespace="{NS}"'
        assert f"slurm_up{{{labels}}} 1.0" in text
        assert f'slurm_nodes{{{labels},state="idle"}} 1.0' in text
        assert f'slurm_nodes{{{labels},state="allocated"}} 1.0' in text
        assert f'slurm_jobs{{{labels},state="running"}} 1.0' in text
        await env.fake.delete(*SLURM_CLUSTER, NAME, namespace=NS)
        await env.poll_slurm()
        text = generate_latest(env.manager.metrics.registry).decode()
        assert f"slurm_up{{{labels}}}" not in text, "gone with the cluster"


class _PodsGoing:
    """A manager whose pods are gone by the time their marks are written (a scale-in or a roll deleted them)."""

    def __init__(self, gone: set[str]) -> None:
        self.gone = gone
        self.written: list[str] = []

    async def apply_status(self, body: dict[str, Any], *, field_manager: str) -> dict[str, Any]:
        return self._write(body)

    async def apply(self, body: dict[str, Any], *, field_manager: str) -> dict[str, Any]:
        return self._write(body)

    def _write(self, body: dict[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        if name in self.gone:
            raise NotFound(f'pods "{name}" not found')
        self.written.append(name)
        return body


async def test_a_pod_deleted_before_its_condition_is_written_fails_nothing() -> None:
    """The 3,584-worker bench: the node loop's pass failed with a traceback (and was retried) for each condition it
    wrote to a pod the -500 edit had just deleted; the other pods' conditions are still written."""
    conditions = [
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}, "status": {"conditions": []}}
        for name in ("w-0", "w-1")
    ]
    labels = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w-0", "namespace": NS}}]
    manager = _PodsGoing({"w-0"})
    await write_marks(manager, conditions, labels)  # type: ignore[arg-type]
    assert manager.written == ["w-1"]


class _DeletedBeforeTheWrite(FakeSlurm):
    """A node deleted from Slurm (its pod's preStop, a scale-in) between the snapshot the pass planned on and its
    resume, as in the 3,584-worker roll."""

    def __init__(self, gone: str) -> None:
        super().__init__()
        self.gone = gone

    async def resume(self, names: Sequence[str]) -> None:
        self.table.pop(self.gone, None)
        await super().resume(names)


async def test_a_resume_naming_a_node_gone_from_slurm_resumes_the_others_and_the_pass_goes_on() -> None:
    """slurmctld refuses a whole node update that names a node it does not know: the roll's resumes failed while it
    deleted nodes, the pass wrote no condition and logged "cannot read Slurm". Now the rest are resumed one by one."""
    other = f"{NAME}-worker-cpu-1"
    async with Env() as env:
        slurm = _DeletedBeforeTheWrite(gone=other)
        await started(env, slurm)
        slurm.add_node(other)
        await slurm.drain([POD, other], reason=cordon_reason("node-a"))  # a cordon since lifted
        mark = env.mark()

        assert await env.poll_slurm() == Result(requeue_after=15.0)

        assert slurm.table[POD].state == {"IDLE"}, "the node Slurm knows is resumed"
        resumes = [names for verb, names, _ in slurm.calls if verb == "resume"]
        assert resumes == [(POD, other), (POD,), (other,)]
        # The pass wrote the pods' conditions, from the snapshot it planned on; the next one sees the resume.
        assert ("Pod", "status") in [(w.kind, w.subresource) for w in env.writes_since(mark)], "no condition written"
        await env.poll_slurm()
        assert node_state(env)["reason"] == "Idle"  # type: ignore[index]


def _pod(version: str, *, slurm: str = "Idle", ready: str = "True", evictable: bool = False) -> dict[str, Any]:
    labels = {**meta.labels(NAME, "workers"), **({meta.LABEL_EVICTABLE: "true"} if evictable else {})}
    conditions = [{"type": "Ready", "status": ready}, {"type": "SlurmNodeState", "status": "True", "reason": slurm}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": POD, "namespace": NS, "resourceVersion": version, "labels": labels},
        "status": {"phase": "Running", "conditions": conditions},
    }


def test_the_node_loops_own_writes_wake_no_other_component() -> None:
    """At 10,240 workers each condition the node loop wrote woke the workers component for a pass over every pod."""
    old = _pod("1")
    assert only_marks_changed(Event(EventType.UPDATED, _pod("2", slurm="Allocated"), old=old))
    assert only_marks_changed(Event(EventType.UPDATED, _pod("2", evictable=True), old=old))
    # What the workers component reads still wakes it: readiness, a new pod, a resync.
    assert not only_marks_changed(Event(EventType.UPDATED, _pod("2", slurm="Allocated", ready="False"), old=old))
    assert not only_marks_changed(Event(EventType.ADDED, old))
    assert not only_marks_changed(Event(EventType.UPDATED, _pod("2", slurm="Allocated"), old=old, low_priority=True))
