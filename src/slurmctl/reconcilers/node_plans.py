"""What the Slurm node loop decides on one observation of a cluster (reconcilers/node_observation.py), purely: the
*repair* (what changes in Slurm and Kubernetes because of what Slurm and the nodes say: slurmctl's drains and resumes,
nodes going away, expired eviction holds, lost nodes, unhealthy workers) and the *status* (what the worker pods and
the cluster status say: each pod's SlurmNodeState condition and evictable label, the node counts), or the status of a
pass in which Slurm could not be asked.

What the loop remembers of a cluster between passes is a `NodeMemory`, passed into the repair plan and out of it, and
updated with what the executor (reconcilers/node_executor.py) got done. No clock is read but the observation's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from slurmctl.api.v1 import SlurmNodeCounts
from slurmctl.reconcilers.drain import DRAIN_POLL_SECONDS, evictable, preempted_reason, upkeep
from slurmctl.reconcilers.elastic import ELASTIC_POLL_SECONDS
from slurmctl.reconcilers.eviction_hold import expired, expired_message, held_message, hold_reason
from slurmctl.reconcilers.lost_nodes import recover
from slurmctl.reconcilers.node_observation import NodeObservation
from slurmctl.reconcilers.node_steps import Replace, SlurmWrite, Step
from slurmctl.reconcilers.plan import LogLine, Note, Obj
from slurmctl.reconcilers.preemption import preempted_message, to_set_down
from slurmctl.reconcilers.slurm_marks import condition_intents, evictable_intents
from slurmctl.reconcilers.slurm_snapshot import NODE_LOOP_MAX_AGE
from slurmctl.reconcilers.unhealthy import Replacement, judge_unhealthy, replacing_message, still_remembered
from slurmctl.slurm import Node

POLL_SECONDS = 15.0
# The most pod marks (evictable labels first, then SlurmNodeState conditions) one pass writes; the rest on the next
# pass, half a second later. Why: at 10,240 workers marks are written at ~12 a second, and a pass that wrote a drain
# storm's thousands kept the nodes cordoned meanwhile from being drained until it ended (176 s until Slurm had drained
# every worker); a pass now ends within ~10 s and the next one drains what was cordoned since.
MAX_MARKS_PER_PASS = 128
# When the pass after one that left marks out runs (a requeue after 0 s is none at all, as in controller-runtime).
MARKS_AGAIN_SECONDS = 0.5


@dataclass(frozen=True)
class Done:
    """What the executor got done of a repair plan: the pods deleted (by name), the uids of those force-deleted for a
    lost node, and the unhealthy workers replaced."""

    gone: frozenset[str] = frozenset()
    force_deleted: frozenset[str] = frozenset()
    replaced: tuple[Replacement, ...] = ()


@dataclass(frozen=True)
class NodeMemory:
    """What the loop remembers of one cluster: the uids of pods force-deleted for a lost node (the cache may still show
    them for a moment: never twice), of pods on a lost node kept because Slurm still reaches them (one Event each),
    whether the full-disruption WARNING was logged, the unhealthy workers replaced by pod name (never twice for one
    drain), and the last Slurm error logged (one WARNING per new one)."""

    force_deleted: frozenset[str] = frozenset()
    kept: frozenset[str] = frozenset()
    disrupted: bool = False
    replaced: Mapping[str, Replacement] = field(default_factory=dict)
    warned: str = ""

    def after(self, done: Done) -> NodeMemory:
        replaced = {**self.replaced, **{r.pod: r for r in done.replaced}}
        return dataclasses.replace(self, force_deleted=self.force_deleted | done.force_deleted, replaced=replaced)


@dataclass(frozen=True)
class RepairPlan:
    """The repair of one pass: `events` at once (findings), then `steps` in order. `memory` is what to remember once
    they are carried out (with the executor's `Done`); `changed` are the nodes drained or resumed now (judged again on
    the next pass, not this one)."""

    steps: tuple[Step, ...] = ()
    events: tuple[Note, ...] = ()
    warnings: tuple[LogLine, ...] = ()
    memory: NodeMemory = NodeMemory()
    changed: frozenset[str] = frozenset()
    draining: bool = False


@dataclass(frozen=True)
class StatusPlan:
    """What the pods and the cluster status say after a pass: pod status intents (SlurmNodeState) and pod label
    intents (evictable), each only where it changes; the node counts (None: left as they are)."""

    conditions: tuple[Obj, ...] = ()
    evictable: tuple[Obj, ...] = ()
    counts: SlurmNodeCounts | None = None
    events: tuple[Note, ...] = ()
    warnings: tuple[LogLine, ...] = ()
    requeue_after: float | None = None


def plan_repair(obs: NodeObservation, memory: NodeMemory) -> RepairPlan:
    """Slurm answered (`obs.slurm` is up): the steps of this pass, in the order they are taken."""
    mine, running = obs.nodes, obs.running
    pods = (*obs.workers, *obs.standby)
    force_deleted = memory.force_deleted & {pod.uid for pod in pods}  # forget the pods that left the cache
    by_name = {pod.name: pod for pod in pods}
    lost_now = {name: host for name, host in obs.lost.lost.items() if by_name[name].uid not in force_deleted}
    lost = dataclasses.replace(obs.lost, lost=lost_now)
    warnings: list[LogLine] = []
    if obs.lost.disrupted and not memory.disrupted:
        hosts = ",".join(sorted({pod.node_name for pod in pods if pod.node_name}))
        warnings.append(
            ("every Kubernetes node with workers of the cluster is NotReady: acting on none", {"nodes": hosts})
        )
    if obs.unconfirmed:
        warnings.append(("cannot confirm that a Kubernetes node is lost: acting on none", obs.unconfirmed))

    workers = list(obs.workers)
    steps: list[Step] = []
    by_worker = {worker.name: worker for worker in workers}
    going_away = {name: preempted_reason(by_worker[name].node_name, taint) for name, taint in obs.preempted.items()}
    kept_up = upkeep(workers, mine, cordoned=obs.cordoned, leaving=obs.leaving, lost=lost_now, preempted=going_away)
    for reason, names in kept_up.drain.items():
        draining = Note("Normal", "Draining", f"draining {', '.join(names)} in Slurm ({reason})")
        steps.append(SlurmWrite("drain", names, reason, notes=(draining,)))
    if kept_up.resume:
        resumed = tuple(
            Note("Normal", "Resumed", f"resumed {name} in Slurm: its drain ({_why(mine[name])}) no longer holds")
            for name in kept_up.resume
        )
        steps.append(SlurmWrite("resume", kept_up.resume, notes=resumed))
    for name in to_set_down(workers, mine, running, preempted=obs.preempted):
        host, taint = by_worker[name].node_name, obs.preempted[name]
        warning = Note("Warning", "Preempted", preempted_message(name, host, taint, running.get(name, ())))
        steps.append(SlurmWrite("set_down", (name,), going_away[name], notes=(warning,)))
    if overdue := expired(workers, mine, running, cordoned=obs.cordoned, now=obs.now, hold=obs.hold):
        said = tuple(
            Note("Warning", "EvictionHoldExpired", expired_message(name, obs.hold, running.get(name, ())))
            for name in overdue
        )
        steps.append(SlurmWrite("set_down", tuple(overdue), hold_reason(obs.hold), notes=said))
    recovered, kept_notes, kept = recover(
        workers, obs.standby, lost, mine, obs.answers, kept=memory.kept & {by_name[n].uid for n in lost_now}
    )
    steps += recovered
    replaced = still_remembered(memory.replaced, workers, mine)
    # A pod on a Kubernetes node that is not Ready (or unknown) is not replaced, and holds its group back.
    verdict = judge_unhealthy(
        obs.loaded.name, obs.loaded.cluster.spec.workers, workers, mine, running, leaving=obs.leaving,
        lost={*lost_now, *obs.unsettled}, replaced=replaced, protected=obs.protected,
    )  # fmt: skip
    steps += [Replace(r, Note("Warning", "Replacing", replacing_message(r))) for r in verdict]
    remembered = NodeMemory(force_deleted, kept, obs.lost.disrupted, replaced)
    changed = frozenset({*kept_up.resume, *(name for names in kept_up.drain.values() for name in names)})
    return RepairPlan(
        tuple(steps), tuple(kept_notes), tuple(warnings), remembered, changed, draining=bool(kept_up.drain)
    )


def plan_status(obs: NodeObservation, repair: RepairPlan, gone: Iterable[str]) -> StatusPlan:
    """Slurm answered and the repair was carried out (`gone`: the pods it deleted): the marks from this snapshot."""
    mine, running = obs.nodes, obs.running
    left = set(gone)
    workers = [worker for worker in obs.workers if worker.name not in left]
    ns = obs.loaded.namespace
    # From this snapshot; a node drained or resumed just now is judged again on the next pass.
    may_go = {w.name for w in workers if w.name not in repair.changed and evictable(w, mine.get(w.name), running)}
    # A node drained for a cordon is often idle at once: look again soon, so that `kubectl drain` waits little.
    # A NotReady node is looked at again when it reaches the threshold.
    after = DRAIN_POLL_SECONDS if repair.draining else POLL_SECONDS
    if obs.loaded.cluster.spec.elastic_groups:
        # Slurm powers elastic nodes up for jobs: a new power state wakes the workers (the snapshot is a source).
        after = min(after, ELASTIC_POLL_SECONDS)
    if obs.shared:
        # Decided on an earlier read (a pod event woke this pass): what the event changed in Slurm (a slurmd
        # registering, or gone) is looked at once that read is too old to share.
        after = min(after, NODE_LOOP_MAX_AGE)
    if obs.lost.next_check is not None:
        after = max(min(after, obs.lost.next_check), 0.5)
    labels = evictable_intents(ns, workers, may_go)
    conditions = condition_intents(ns, workers, mine, obs.now)
    room = max(0, MAX_MARKS_PER_PASS - len(labels))
    if len(labels) + len(conditions) > MAX_MARKS_PER_PASS:
        after = MARKS_AGAIN_SECONDS
    return StatusPlan(
        conditions=tuple(conditions[:room]),
        evictable=tuple(labels[:MAX_MARKS_PER_PASS]),
        counts=node_counts(mine.values()),
        requeue_after=after,
    )


def plan_outage(obs: NodeObservation, memory: NodeMemory, error: str) -> tuple[StatusPlan, NodeMemory]:
    """Slurm could not be asked (`error`: its error; "" when it was not asked at all: slurmrestd disabled or not ready):
    no pod is evictable but by the eviction hold (`obs.held`), said once per pod; the error is logged once."""
    events = tuple(
        Note("Warning", "EvictionHoldExpired", held_message(name, obs.hold)) for name in sorted(obs.held.new)
    )
    marks = tuple(evictable_intents(obs.loaded.namespace, obs.workers, obs.held.pods))
    if not error:
        again = POLL_SECONDS if obs.hold else None  # the hold's count goes on; else Slurm's return wakes the loop
        return StatusPlan(evictable=marks, events=events, requeue_after=again), memory
    warnings = () if memory.warned == error else (("cannot read Slurm", {"error": error}),)
    status = StatusPlan(evictable=marks, events=events, warnings=warnings, requeue_after=POLL_SECONDS)
    return status, dataclasses.replace(memory, warned=error)


def node_counts(nodes: Iterable[Node]) -> SlurmNodeCounts:
    counts = {"idle": 0, "allocated": 0, "drained": 0, "down": 0}
    total = 0
    for node in nodes:
        total += 1
        if node.drain:
            counts["drained"] += 1
        elif node.display == "Idle":
            counts["idle"] += 1
        elif node.display in ("Allocated", "Mixed"):
            counts["allocated"] += 1
        elif node.display.startswith("Down") or "NOT_RESPONDING" in node.state:
            counts["down"] += 1
    return SlurmNodeCounts(total=total, **counts)


def _why(node: Node) -> str:
    return node.reason.removeprefix("slurmctl:").strip()
