"""A lost Kubernetes node: what the Slurm node loop (reconcilers/slurm_nodes.py) does about worker pods whose
Kubernetes node stopped working.

A worker pod's Kubernetes node is *lost* when its Ready condition has not been True (False: the kubelet says so;
Unknown: the node lifecycle controller says the kubelet stopped reporting) for at least the operator's threshold
(`slurmctl run --node-lost-after`, default 60 s; 0 switches all of this off). The time is the operator's own: it
counts from the first pass that saw this NotReady spell (one spell: the node's uid and its Ready condition's
lastTransitionTime, so a node that flapped back and forth starts anew), never from a timestamp it reads. An operator
that restarts starts every count anew, so it never acts at once on what it finds; a node merely slow to report is
not acted on before the threshold.

What is done about a lost node's workers, each pass, from what Slurm says now:

1. Drained in Slurm (reason `slurmctl: node <node> NotReady`), through the one drain rule (drain.upkeep): no new job
   lands there, and once the pod runs on a Ready node again the drain is resumed (an administrator's drain is
   never replaced nor resumed).
2. Only when Slurm agrees that the node's slurmd is gone (two witnesses: Kubernetes says the node is lost AND
   slurmctld cannot reach the slurmd: NOT_RESPONDING, DOWN or FUTURE, or the node is not in Slurm at all): the Slurm
   node is set DOWN with the same reason (slurmctld ends its jobs at once: a batch job that may be requeued is
   requeued, a job started with --no-kill runs on without the node, any other ends NODE_FAIL; they could not finish
   anyway), deleted from Slurm, and the pod is force-deleted (grace period 0, only this incarnation: a uid
   precondition), so that its StatefulSet re-creates it at once. The NotReady node carries the not-ready or
   unreachable NoSchedule taint, so the new pod lands on a Ready node, and its slurmd registers as a new dynamic
   node with its own address and hardware. A pod whose slurmd still answers (only the kubelet died) is drained and
   left alone: its jobs still run and finish there.

   Why the stale Slurm node is deleted first: slurmctld takes a dynamic node's address from every registration
   (validate_node_specs in slurmctld/node_mgr.c, 24.11), so a new slurmd would be reached at its new address
   either way, but it is validated against the old node's record (its CPUs, memory, GRES: a smaller host would be
   marked INVAL and drained for good) and would come back DOWN+DRAIN with the old reason. Deleted, it registers as
   new, as every re-created worker pod does (the preStop deletes the node of a pod that goes normally; a lost pod
   runs no preStop). When Slurm refuses the delete (a job still completing there), the pod goes anyway: its new
   slurmd then takes the old record over, which ReturnToService=2 brings back.
3. The standby slurmctld's pod on a lost node is judged the same way, its second witness slurmrestd's ping of it:
   force-deleted once that goes unanswered (`recover` says why), kept while it answers.

Fail-safe: nothing is acted on

- when Slurm cannot be asked (the pass ends before any of this: no drain, no DOWN, no delete);
- when every Kubernetes node that hosts the cluster's workers (or its standby slurmctld) is NotReady at once (as
  kube-controller-manager's full-disruption mode: far more likely the control plane or the network than every node;
  one WARNING); the counts start anew once it ends;
- when the API server does not confirm, in a read right before acting, that the node is still NotReady in the same
  spell (an API server outage: the cache is stale; one WARNING per pass);
- on a pod already force-deleted (its uid is remembered until it leaves the cache, which may lag the delete).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from slurmctl.reconcilers.drain import lost_reason
from slurmctl.reconcilers.node_steps import ForceDelete, SlurmWrite, Step
from slurmctl.reconcilers.observed import Live, WorkerPod, node_ready, ready_since, uid
from slurmctl.reconcilers.plan import Note
from slurmctl.runtime.clock import Clock
from slurmctl.slurm import Node

DEFAULT_NODE_LOST_AFTER = 60.0


def slurmd_unreachable(node: Node | None) -> bool:
    """Slurm's witness that a worker's slurmd is gone: slurmctld's ping of it went unanswered (NOT_RESPONDING), the
    node is DOWN (its jobs were ended) or FUTURE (no slurmd registered it), or Slurm does not know the node."""
    return node is None or "NOT_RESPONDING" in node.state or node.base in ("DOWN", "FUTURE")


class NotReadyClock:
    """How long the operator has seen each Kubernetes node NotReady, on its own monotonic clock (one per operator,
    shared by every cluster's pass)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._seen: dict[str, tuple[str, str, float]] = {}  # node name -> (uid, lastTransitionTime, first seen)

    def not_ready_for(self, name: str, node: Live | None) -> float | None:
        """Seconds since the first look at this node in its current NotReady spell (0 on that first look); None
        when it is Ready, has no Ready condition, or is not in the cache."""
        if node is None or node_ready(node) is not False:
            self._seen.pop(name, None)
            return None
        spell = (uid(node), ready_since(node))
        now = self._clock.monotonic()
        seen = self._seen.get(name)
        if seen is None or seen[:2] != spell:
            seen = self._seen[name] = (*spell, now)
        return now - seen[2]

    def forget(self, name: str) -> None:
        """Count this node's spell anew from the next look (after a full disruption)."""
        self._seen.pop(name, None)

    def same_spell(self, name: str, node: Live) -> bool:
        """Whether `node` (read just now from the API server) is NotReady in the spell this clock counts."""
        seen = self._seen.get(name)
        return seen is not None and node_ready(node) is False and seen[:2] == (uid(node), ready_since(node))


@dataclass(frozen=True)
class LostVerdict:
    """Which of a cluster's worker pods run on a lost Kubernetes node, from the cache (confirmed before acting)."""

    lost: Mapping[str, str] = field(default_factory=dict)  # pod name -> its Kubernetes node
    not_ready: Mapping[str, float] = field(default_factory=dict)  # Kubernetes node -> seconds seen NotReady
    next_check: float | None = None  # seconds until the next NotReady node reaches the threshold
    disrupted: bool = False  # every node hosting the cluster's workers is NotReady: nothing is acted on


def judge_lost(
    pods: Iterable[WorkerPod], nodes: Mapping[str, Live | None], clock: NotReadyClock, *, threshold: float
) -> LostVerdict:
    """`nodes`: the cached Kubernetes node of each pod's node name. A pod not scheduled yet is on no node. In a full
    disruption no count goes on: once it ends, every node still NotReady waits the whole threshold again."""
    placed = [pod for pod in pods if pod.node_name]
    hosts = sorted({pod.node_name for pod in placed})
    if hosts and all(node_ready(nodes.get(host)) is not True for host in hosts):
        for host in hosts:
            clock.forget(host)
        return LostVerdict(disrupted=True)
    seen = {host: clock.not_ready_for(host, nodes.get(host)) for host in hosts}
    not_ready = {host: t for host, t in seen.items() if t is not None}
    lost = {pod.name: pod.node_name for pod in placed if not_ready.get(pod.node_name, -1.0) >= threshold}
    waits = [threshold - t for t in not_ready.values() if t < threshold]
    return LostVerdict(lost, not_ready, min(waits) if waits else None)


def recover(
    workers: Iterable[WorkerPod],
    standby: Iterable[WorkerPod],
    lost: LostVerdict,
    nodes: Mapping[str, Node],
    answers: Mapping[str, bool],
    *,
    kept: Collection[str],
) -> tuple[list[Step], list[Note], frozenset[str]]:
    """Two witnesses. A worker on a lost Kubernetes node (`lost.lost`: those not already force-deleted) whose slurmd
    Slurm cannot reach either is set DOWN, deleted from Slurm and its pod force-deleted; one whose slurmd still
    answers is left drained. The standby slurmctld on a lost node (`answers`: whether it answers slurmrestd's ping)
    likewise: force-deleted once it does not answer. Returns the steps, the NodeLost Warnings of the pods kept (one
    per pod: `kept` holds the uids said before) and the uids kept now.

    Why the standby goes: out of reach it takes over nothing, and it stalls the primary: on each start, `scontrol
    reconfigure` and every SlurmctldTimeout seconds the primary asks every backup to yield control and waits for the
    answer, up to 30 s, holding the config read lock in its background loop (Slurm 24.11 controller.c
    _shutdown_backup_controller). The primary is left where it is: its standby takes over, and it takes control back
    when its node returns."""
    steps: list[Step] = []
    notes: list[Note] = []
    keep: set[str] = set()

    def seconds(host: str) -> int:
        return round(lost.not_ready.get(host, 0.0))

    def kept_pod(pod: WorkerPod, host: str, why: str) -> None:
        if pod.uid not in kept:
            notes.append(
                Note("Warning", "NodeLost", f"Kubernetes node {host} has been NotReady for {seconds(host)}s but {why}")
            )
        keep.add(pod.uid)

    def force_delete(pod: WorkerPod, host: str, why: str) -> ForceDelete:
        message = (
            f"force-deleted Pod {pod.name} (uid {pod.uid}): Kubernetes node {host} has been NotReady for "
            f"{seconds(host)}s and {why}; its StatefulSet re-creates it on a Ready node"
        )
        return ForceDelete(pod.name, pod.uid, host, Note("Normal", "Deleted", message))

    for worker in workers:
        host = lost.lost.get(worker.name)
        if host is None:
            continue
        node = nodes.get(worker.name)
        if not slurmd_unreachable(node):
            why = f"slurmd on {worker.name} still answers Slurm: {worker.name} is drained and its pod stays"
            kept_pod(worker, host, f"{why} (its jobs still run)")
            continue
        reason = lost_reason(host)
        if node is not None and node.base != "DOWN":
            message = (
                f"set {worker.name} DOWN in Slurm ({reason}): Kubernetes node {host} has been NotReady for "
                f"{seconds(host)}s and slurmctld cannot reach its slurmd; Slurm requeues or ends its jobs"
            )
            steps.append(SlurmWrite("set_down", (worker.name,), reason, notes=(Note("Warning", "NodeDown", message),)))
        if node is not None:
            message = f"deleted {worker.name} from Slurm ({reason}): its new pod registers it anew"
            refusal = "Slurm refused to delete the node of a lost pod; the pod goes anyway"
            deleted = Note("Normal", "SlurmNodeDeleted", message)
            steps.append(SlurmWrite("delete_node", (worker.name,), notes=(deleted,), refusal=refusal))
        steps.append(force_delete(worker, host, "Slurm cannot reach its slurmd"))
    for pod in standby:
        host = lost.lost.get(pod.name)
        if host is None:
            continue
        if answers.get(pod.name, False):
            kept_pod(pod, host, f"the standby slurmctld {pod.name} still answers Slurm: its pod stays")
            continue
        steps.append(force_delete(pod, host, "the standby slurmctld does not answer Slurm"))
    return steps, notes, frozenset(keep)
