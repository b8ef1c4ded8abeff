"""How long an eviction may wait for jobs: the cluster admin's `--max-eviction-hold` (0, the default: for ever).

Cordoning a worker pod's Kubernetes node (`kubectl drain`'s first step) drains its Slurm node, and the pod becomes
evictable once Slurm says no job runs there (reconcilers/drain.py). A job that never ends would pin the node for
ever, and so would a cluster whose Slurm cannot be asked. With a hold of H seconds:

- Slurm answers: a worker drained for its cordon (`cordon_reason`) H seconds ago by Slurm's clock that still runs
  jobs is set DOWN (`hold_reason`): Slurm requeues its batch jobs (a requeued job starts again elsewhere; interactive
  steps end), the node then runs none, and the next pass finds the pod evictable. A Warning Event
  `EvictionHoldExpired` names the node and the jobs.
- Slurm cannot be asked (slurmrestd unreachable, or spec.rest.enabled false): nothing says whether jobs run. A worker
  pod seen on a cordoned Kubernetes node for H seconds by this operator's clock (counted from when this operator
  first saw it so: a restart counts again) becomes evictable; its preStop (images/scripts/worker-prestop) sets its
  node DOWN when jobs still run, so Slurm requeues them then.

Either way a job Slurm accepted is requeued, not lost, and only ever after the admin's bound.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from datetime import datetime

from slurmctl.reconcilers.drain import DRAIN_PREFIX, cordon_reason
from slurmctl.reconcilers.observed import WorkerPod
from slurmctl.runtime.clock import Clock
from slurmctl.slurm import Node


def hold_reason(hold: float) -> str:
    """The DOWN reason of a worker whose eviction waited the whole hold."""
    return f"{DRAIN_PREFIX} eviction held {hold:g}s, jobs requeued"


def expired(
    workers: Iterable[WorkerPod],
    nodes: Mapping[str, Node],
    running: Mapping[str, tuple[int, ...]],
    *,
    cordoned: Collection[str],
    now: datetime,
    hold: float,
) -> list[str]:
    """The workers to set DOWN now: on a cordoned Kubernetes node, drained for that cordon at least `hold` seconds
    ago, and still running jobs (`running`: drain.jobs_by_node of the same read)."""
    if hold <= 0:
        return []
    out = []
    for worker in workers:
        node = nodes.get(worker.name)
        if worker.name not in cordoned or node is None or not node.drain or node.reason_changed_at is None:
            continue
        if node.reason != cordon_reason(worker.node_name):
            continue  # an administrator's drain, or another of slurmctl's: not an eviction's
        if worker.name not in running and not node.busy:
            continue  # evictable already
        if (now - node.reason_changed_at).total_seconds() >= hold:
            out.append(worker.name)
    return sorted(out)


class CordonedSince:
    """When this operator first saw each worker pod on a cordoned Kubernetes node (its monotonic clock), per
    cluster: the hold's count while Slurm cannot be asked."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._since: dict[tuple[str, str], dict[str, float]] = {}
        self._told: dict[tuple[str, str], set[str]] = {}

    def held(self, key: tuple[str, str], cordoned: Collection[str], hold: float) -> tuple[set[str], set[str]]:
        """The pods of `cordoned` seen cordoned for at least `hold` seconds (none when `hold` is 0), and those of
        them not returned before (to say so once); forgets the pods no longer cordoned."""
        now = self.clock.monotonic()
        seen = self._since.setdefault(key, {})
        told = self._told.setdefault(key, set())
        for name in set(seen) - set(cordoned):
            del seen[name]
            told.discard(name)
        for name in cordoned:
            seen.setdefault(name, now)
        held = {name for name, since in seen.items() if hold > 0 and now - since >= hold}
        new = held - told
        told |= new
        return held, new

    def forget(self, key: tuple[str, str]) -> None:
        self._since.pop(key, None)
        self._told.pop(key, None)


def expired_message(name: str, hold: float, jobs: tuple[int, ...]) -> str:
    listed = ", ".join(map(str, jobs)) or "none listed"
    waited = f"its eviction waited {hold:g}s (--max-eviction-hold)"
    return f"set {name} DOWN in Slurm: {waited} for jobs {listed}, which Slurm requeues"


def held_message(name: str, hold: float) -> str:
    """Slurm cannot be asked: a pod on a cordoned Kubernetes node that waited the whole hold becomes evictable; its
    preStop sets its node DOWN, so that Slurm requeues what still runs."""
    return (
        f"{name} evictable: its Kubernetes node has been cordoned for {hold:g}s (--max-eviction-hold) "
        "and Slurm cannot be asked; its preStop sets it DOWN if jobs still run"
    )
