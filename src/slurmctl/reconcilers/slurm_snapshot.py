"""One read of a cluster's Slurm, shared by every reader: the Slurm node loop (pod conditions, evictable labels,
slurmctl's drains, lost and unhealthy nodes), the drain gate and the `slurm_*` metrics. (The accounting limits read
slurmdbd's records through /slurmdb/, which this does not hold: slurmctld's state says nothing about slurmdbd's.)

Readers used to ask slurmrestd the same questions each on its own timer; now each asks `SlurmAccess.snapshot` for a
snapshot no older than it allows, and the first one that needs a fresher one takes it for all (one read at a time
per cluster: readers that arrive during a read wait for it and share it). An outage is a snapshot too: every reader
within its allowance sees the same error instead of asking again. Whoever changes Slurm (a drain, a resume, a node
set DOWN or deleted) marks the snapshot stale, so the next reader sees the change.

Partitions change only when slurm.conf does (a reconfigure): they are read again once they are older than
`PARTITIONS_MAX_AGE`, not on every read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from slurmctl.slurm import Job, Node, Partition, SlurmError

# How old a snapshot each reader accepts (seconds). The node loop polls every 15 s and takes a snapshot another reader
# took in the last 5; the drain gate decides on one no older than 2 s (it polls every 5 s while nodes drain).
NODE_LOOP_MAX_AGE = 5.0
GATE_MAX_AGE = 2.0
PARTITIONS_MAX_AGE = 60.0


@dataclass(frozen=True)
class SlurmSnapshot:
    """What Slurm said at `taken_at` (the operator's monotonic clock), or why it could not be asked then (`error`)."""

    taken_at: float
    nodes: tuple[Node, ...] = ()
    jobs: tuple[Job, ...] = ()
    partitions: tuple[Partition, ...] = ()
    partitions_at: float | None = None  # when the partitions were read (an older read than the rest, often)
    error: SlurmError | None = None
    stale: bool = field(default=False, compare=False)  # someone changed Slurm since: the next reader reads again

    @property
    def up(self) -> bool:
        return self.error is None

    def age(self, now: float) -> float:
        return now - self.taken_at

    def fresh(self, now: float, max_age: float) -> bool:
        return not self.stale and self.age(now) <= max_age

    @cached_property
    def digest(self) -> int:
        """What the components that decide on a snapshot read of it, hashed: each node's state and reason, and which
        nodes each job that holds some occupies. Equal digests mean a reader would decide the same (a job's pending
        reason, a node's CPU count or a timestamp changing wakes nobody); only the hash is kept."""
        nodes = tuple((n.name, n.state, n.reason) for n in self.nodes)
        jobs = tuple((j.job_id, j.state, j.nodes) for j in self.jobs if j.nodes)
        return hash((nodes, jobs))

    @cached_property
    def by_name(self) -> Mapping[str, Node]:
        return {node.name: node for node in self.nodes}

    def check(self) -> SlurmSnapshot:
        """This snapshot, or its error raised: for readers that cannot decide anything without Slurm."""
        if self.error is not None:
            raise self.error.with_traceback(None)  # the same error for every reader, not a growing trace
        return self
