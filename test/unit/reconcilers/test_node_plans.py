"""The Slurm node loop's plans (reconcilers/node_plans.py): an observation in, steps and marks out, no API server and
no Slurm. The loop's behaviour tests (test_lost_nodes, test_evictions, test_eviction_hold, test_unhealthy) run the
same plans through the executor against the fake API server."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

from slurmctl.api.v1 import Policy
from slurmctl.reconcilers.drain import DRAIN_POLL_SECONDS, cordon_reason, lost_reason, preempted_reason
from slurmctl.reconcilers.lost_nodes import LostVerdict
from slurmctl.reconcilers.node_observation import Held, NodeObservation
from slurmctl.reconcilers.node_plans import (
    MARKS_AGAIN_SECONDS,
    MAX_MARKS_PER_PASS,
    POLL_SECONDS,
    Done,
    NodeMemory,
    plan_outage,
    plan_repair,
    plan_status,
)
from slurmctl.reconcilers.node_steps import ForceDelete, Replace, SlurmWrite
from slurmctl.reconcilers.observed import WorkerPod, trimmed_node
from slurmctl.reconcilers.preemption import DEFAULT_PREEMPTION_TAINTS, preemption_taint
from slurmctl.reconcilers.slurm_snapshot import NODE_LOOP_MAX_AGE, SlurmSnapshot
from slurmctl.render import meta
from slurmctl.slurm import ExitCode, Job, Node
from test.unit.reconcilers.env import NAME, NS
from test.unit.reconcilers.plans import NOW, loaded

CPU = meta.worker_group(NAME, "cpu")
P0, P1 = f"{CPU}-0", f"{CPU}-1"
SINCE = datetime(2026, 1, 1, tzinfo=UTC)
GPU_REASON = "slurmctl-gpu: XID 79 on GPU 0"


def worker(name: str, host: str = "node-a", *, ready: bool = True) -> WorkerPod:
    return WorkerPod(name, host, True, ready, True, False, False, f"uid-{name}", SINCE)


def node(name: str, *state: str, reason: str = "") -> Node:
    return Node(name, frozenset(state or ("IDLE",)), reason, "root", SINCE if reason else None, (), (), 2, 0)


def observe(*nodes: Node, workers: tuple[WorkerPod, ...] | None = None, **facts: Any) -> NodeObservation:
    found = workers if workers is not None else (worker(P0), worker(P1, "node-b"))
    base = NodeObservation(
        loaded(size=2),
        NOW,
        found,
        slurm=SlurmSnapshot(0.0, nodes=nodes or (node(P0), node(P1))),
    )
    return dataclasses.replace(base, **facts)


def test_a_cordoned_worker_is_drained_for_its_cordon_and_judged_again_next_pass() -> None:
    repair = plan_repair(observe(cordoned=frozenset({P0})), NodeMemory())
    assert repair.steps[0] == SlurmWrite(
        "drain",
        (P0,),
        cordon_reason("node-a"),
        notes=repair.steps[0].notes,  # type: ignore[union-attr]
    )
    assert repair.changed == {P0} and repair.draining
    status = plan_status(observe(cordoned=frozenset({P0})), repair, gone=())
    assert status.requeue_after == DRAIN_POLL_SECONDS
    assert status.evictable == (), "drained just now: not evictable before Slurm says it runs nothing"


def test_slurmctls_drain_is_resumed_once_its_reason_is_gone_and_an_administrators_is_not() -> None:
    ours = node(P0, "IDLE", "DRAIN", reason=cordon_reason("node-a"))
    admins = node(P1, "IDLE", "DRAIN", reason="disk check")
    repair = plan_repair(observe(ours, admins), NodeMemory())
    assert [(s.verb, s.nodes) for s in repair.steps if isinstance(s, SlurmWrite)] == [("resume", (P0,))]


def test_a_lost_worker_slurm_cannot_reach_goes_down_out_of_slurm_and_its_pod_is_force_deleted_once() -> None:
    lost = LostVerdict({P0: "node-a"}, {"node-a": 61.0})
    obs = observe(node(P0, "IDLE", "NOT_RESPONDING"), node(P1), lost=lost)
    repair = plan_repair(obs, NodeMemory())
    kinds = [(type(s).__name__, getattr(s, "verb", "")) for s in repair.steps]
    assert kinds == [
        ("SlurmWrite", "drain"),
        ("SlurmWrite", "set_down"),
        ("SlurmWrite", "delete_node"),
        ("ForceDelete", ""),
    ]
    assert repair.steps[1].reason == lost_reason("node-a")  # type: ignore[union-attr]
    assert repair.steps[2].refusal, "a refused delete in Slurm does not hold the pod"  # type: ignore[union-attr]
    force = repair.steps[3]
    assert isinstance(force, ForceDelete) and (force.pod, force.uid, force.host) == (P0, f"uid-{P0}", "node-a")
    assert force.note.reason == "Deleted"
    memory = repair.memory.after(Done(frozenset({P0}), frozenset({f"uid-{P0}"})))
    again = plan_repair(obs, memory)
    assert not any(isinstance(s, ForceDelete) for s in again.steps), "never twice, while the cache still shows it"
    gone = plan_repair(observe(workers=(worker(P1, "node-b"),)), memory)
    assert gone.memory.force_deleted == frozenset(), "forgotten once it left the cache"


def test_a_lost_worker_whose_slurmd_answers_stays_drained_and_is_said_once() -> None:
    obs = observe(lost=LostVerdict({P0: "node-a"}, {"node-a": 61.0}))
    first = plan_repair(obs, NodeMemory())
    assert [(n.type, n.reason) for n in first.events] == [("Warning", "NodeLost")]
    assert not any(isinstance(s, ForceDelete) for s in first.steps)
    assert plan_repair(obs, first.memory).events == ()


def test_a_full_disruption_is_logged_once_and_acts_on_nothing() -> None:
    obs = observe(lost=LostVerdict(disrupted=True))
    first = plan_repair(obs, NodeMemory())
    assert [w[0] for w in first.warnings] == [
        "every Kubernetes node with workers of the cluster is NotReady: acting on none"
    ]
    assert first.steps == ()
    assert plan_repair(obs, first.memory).warnings == ()


def test_an_unhealthy_worker_is_replaced_once_for_its_drain() -> None:
    cordons = Policy(allow_root_logins=True, allow_node_cordon=True)
    cluster = loaded(policy=cordons, workers=[{"name": "cpu", "size": 2, "replaceUnhealthy": True}])
    sick = node(P0, "IDLE", "DRAIN", reason=GPU_REASON)
    obs = dataclasses.replace(observe(sick, node(P1)), loaded=cluster)
    repair = plan_repair(obs, NodeMemory())
    replaces = [s for s in repair.steps if isinstance(s, Replace)]
    assert [r.replacement.pod for r in replaces] == [P0] and replaces[0].note.reason == "Replacing"
    memory = repair.memory.after(Done(frozenset({P0}), replaced=(replaces[0].replacement,)))
    new_pod = dataclasses.replace(worker(P0), uid="uid-new", created=datetime(2025, 1, 1, tzinfo=UTC))
    carried = dataclasses.replace(obs, workers=(new_pod, worker(P1, "node-b")))
    assert not any(isinstance(s, Replace) for s in plan_repair(carried, memory).steps), "the old pod's drain"


def test_status_marks_evictable_only_what_slurm_says_runs_nothing_and_skips_pods_just_deleted() -> None:
    drained = node(P0, "IDLE", "DRAIN", reason="disk check")
    obs = observe(drained, node(P1))
    status = plan_status(obs, plan_repair(obs, NodeMemory()), gone=())
    assert [b["metadata"]["name"] for b in status.evictable] == [P0]
    assert status.counts is not None and (status.counts.drained, status.counts.idle) == (1, 1)
    assert status.requeue_after == POLL_SECONDS
    after_delete = plan_status(obs, plan_repair(obs, NodeMemory()), gone=(P0,))
    assert after_delete.evictable == () and [b["metadata"]["name"] for b in after_delete.conditions] == [P1]


def test_a_pass_woken_on_a_shared_read_looks_again_once_that_read_is_too_old() -> None:
    obs = observe(shared=True)
    assert plan_status(obs, plan_repair(obs, NodeMemory()), gone=()).requeue_after == NODE_LOOP_MAX_AGE


def test_an_outage_takes_every_evictable_label_off_but_the_holds_and_logs_each_error_once() -> None:
    labelled = tuple(dataclasses.replace(worker(name), evictable=True) for name in (P0, P1))
    obs = dataclasses.replace(observe(), workers=labelled, held=Held(frozenset({P1}), frozenset({P1})), hold=30.0)
    status, memory = plan_outage(obs, NodeMemory(), "slurmrestd: connection refused")
    assert [b["metadata"] for b in status.evictable] == [{"name": P0, "namespace": NS}], "P1 is held: stays"
    assert [(n.reason, n.type) for n in status.events] == [("EvictionHoldExpired", "Warning")]
    assert [w[0] for w in status.warnings] == ["cannot read Slurm"] and status.requeue_after == POLL_SECONDS
    again, _ = plan_outage(obs, memory, "slurmrestd: connection refused")
    assert again.warnings == ()
    unasked, _ = plan_outage(dataclasses.replace(obs, hold=0.0), NodeMemory(), "")
    assert unasked.requeue_after is None, "Slurm's return wakes the loop; nothing counts meanwhile"


def test_a_worker_whose_node_is_going_away_is_drained_and_set_down_at_once_so_its_jobs_are_requeued() -> None:
    """A preemption taint: the busy worker is drained and set DOWN in the same pass (Slurm requeues its jobs, a Warning
    names them), the idle one only drained; a node DOWN already is not set DOWN again."""
    taint = "cloud.google.com/impending-node-termination"
    job = Job(7, "train", "alice", "RUNNING", (P0,), ExitCode(("PENDING",), None, None))
    running = SlurmSnapshot(0.0, nodes=(node(P0, "ALLOCATED"), node(P1)), jobs=(job,))
    preempted = {P0: taint, P1: taint}
    repair = plan_repair(observe(slurm=running, preempted=preempted), NodeMemory())
    reason_a, reason_b = preempted_reason("node-a", taint), preempted_reason("node-b", taint)
    assert [(s.verb, s.nodes, s.reason) for s in repair.steps if isinstance(s, SlurmWrite)] == [
        ("drain", (P0,), reason_a),
        ("drain", (P1,), reason_b),
        ("set_down", (P0,), reason_a),
    ]
    (warning,) = repair.steps[2].notes  # type: ignore[union-attr]
    assert (warning.type, warning.reason) == ("Warning", "Preempted")
    assert "going away (taint cloud.google.com/impending-node-termination)" in warning.message
    assert "requeues jobs 7" in warning.message
    down = SlurmSnapshot(0.0, nodes=(node(P0, "DOWN", "DRAIN", reason=reason_a), node(P1)), jobs=(job,))
    again = plan_repair(observe(slurm=down, preempted={P0: taint}), NodeMemory())
    assert again.steps == ()


def test_a_worker_drained_for_a_withdrawn_preemption_is_resumed() -> None:
    """The taint went and the machine stayed (a warning withdrawn): slurmctl's drain and DOWN are resumed."""
    reason = preempted_reason("node-a", "aws-node-termination-handler/spot-itn")
    gone = SlurmSnapshot(0.0, nodes=(node(P0, "DOWN", "DRAIN", reason=reason), node(P1)))
    repair = plan_repair(observe(slurm=gone), NodeMemory())
    assert [(s.verb, s.nodes) for s in repair.steps if isinstance(s, SlurmWrite)] == [("resume", (P0,))]
    still = plan_repair(observe(slurm=gone, preempted={P0: "aws-node-termination-handler/spot-itn"}), NodeMemory())
    assert still.steps == ()


def test_the_cached_node_keeps_its_taints_and_the_preemption_taint_is_found_among_them() -> None:
    live = {
        "metadata": {"name": "node-a"},
        "spec": {
            "taints": [
                {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
                {
                    "key": "aws-node-termination-handler/spot-itn",
                    "value": "x",
                    "effect": "NoSchedule",
                    "timeAdded": "t",
                },
            ]
        },
    }
    kept = trimmed_node(live)
    assert kept["spec"]["taints"][1] == {"key": "aws-node-termination-handler/spot-itn", "effect": "NoSchedule"}
    assert preemption_taint(kept, DEFAULT_PREEMPTION_TAINTS) == "aws-node-termination-handler/spot-itn"
    assert preemption_taint(kept, ()) is None
    assert preemption_taint(None, DEFAULT_PREEMPTION_TAINTS) is None


def test_a_pass_writes_at_most_its_share_of_marks_labels_first_and_asks_for_the_next_pass_at_once() -> None:
    """At 10,240 workers a pass that wrote a drain storm's thousands of marks (~12 a second) kept the nodes cordoned
    meanwhile from being drained until it ended: a pass writes MAX_MARKS_PER_PASS, the next one the rest."""
    names = [f"{CPU}-{i}" for i in range(MAX_MARKS_PER_PASS + 40)]
    workers = tuple(worker(name) for name in names)
    drained = [node(name, "IDLE", "DRAIN", reason="disk check") for name in names[:50]]
    obs = observe(*drained, *(node(name) for name in names[50:]), workers=workers)
    status = plan_status(obs, plan_repair(obs, NodeMemory()), gone=())
    assert len(status.evictable) == 50, "every drained idle node's label: what `kubectl drain` waits for"
    assert len(status.conditions) == MAX_MARKS_PER_PASS - 50
    # The rest soon, after the next pass's repair (a requeue after 0 s would be none: the bench's first run stalled so).
    assert status.requeue_after == MARKS_AGAIN_SECONDS and MARKS_AGAIN_SECONDS > 0
    written = {c["metadata"]["name"] for c in status.conditions}
    assert written == set(names[: MAX_MARKS_PER_PASS - 50])

    few = observe(*(node(name) for name in names[:3]), workers=workers[:3])
    assert plan_status(few, plan_repair(few, NodeMemory()), gone=()).requeue_after == POLL_SECONDS
