"""What the operator reads from Slurm, as small frozen values parsed from slurmrestd's answers.

Two layers on purpose: the `Wire*` msgspec structs check the subset of the v0.0.42 JSON this client relies on (extra
fields skipped, so a newer Slurm adding fields does not break us; a missing or mistyped field is a
`SlurmProtocolError`), and the public values (`Node`, `Job`, ...) hold what callers need, in the form they need it
(upper-case state flags as a frozenset, host lists expanded to names).

Why msgspec and not pydantic (which the API types use): an answer of 10,000 jobs is 66 MB of which the operator reads
a few fields. msgspec decodes the bytes straight into these structs and skips the rest without making objects of
it; pydantic-core built (or parsed into) the whole document first. bench_slurm_observation: 70 ms against 450-640 ms
for the jobs answer, and no parsed copy of the document in memory.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime

import msgspec

from .hostlist import expand

# Slurm's base node states (NODE_STATE_BASE in slurm.h); everything else in `state` is a flag.
NODE_BASE_STATES = frozenset({"UNKNOWN", "DOWN", "IDLE", "ALLOCATED", "ERROR", "MIXED", "FUTURE"})
# The states whose reason `sinfo -R` lists.
_STATES_WITH_A_REASON = frozenset({"DRAIN", "DOWN", "FAIL"})
# Slurm's base job states (JOB_STATE_BASE); the rest of `job_state` (COMPLETING, REQUEUED, ...) are flags.
JOB_BASE_STATES = frozenset(
    {
        "PENDING",
        "RUNNING",
        "SUSPENDED",
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
    }
)


class _Value(msgspec.Struct, frozen=True, gc=False):
    """What callers get: immutable values (msgspec structs, not dataclasses, for one reason: `gc=False`, which the
    subclasses inherit). They hold only strings, numbers, datetimes and each other, never a cycle, so the garbage
    collector need not track them: a snapshot of 10,000 jobs and 4,096 nodes kept by the operator made every full
    collection walk ~60,000 more objects (~100 ms a pass in bench_slurm_observation)."""


class Node(_Value, frozen=True):
    """A Slurm node as slurmctld sees it. `state` is Slurm's list of upper-case words: one base state (IDLE,
    ALLOCATED, MIXED, DOWN, ...) plus flags (DRAIN, COMPLETING, NOT_RESPONDING, DYNAMIC_NORM, ...)."""

    name: str
    state: frozenset[str]
    # Why the node is drained, down or failed, and who said so; "" otherwise, as `sinfo -R` shows it. Slurm 24.11
    # keeps the last reason on a node that was resumed (and reports "root" as its author when there is none): left
    # as it is, an idle node would read as drained "by slurmctl".
    reason: str
    reason_set_by: str
    # When `reason` was last set (None when there is none): how long a drain has been going on.
    reason_changed_at: datetime | None
    features: tuple[str, ...]
    partitions: tuple[str, ...]
    cpus: int
    alloc_cpus: int

    @property
    def base(self) -> str:
        """The base state: "IDLE", "ALLOCATED", "MIXED", "DOWN", "FUTURE", "ERROR" or "UNKNOWN"."""
        return _base(self.state)

    @property
    def drain(self) -> bool:
        """Drain was requested (by anyone): no new jobs start here."""
        return "DRAIN" in self.state

    @property
    def busy(self) -> bool:
        """Jobs are on the node: some CPUs allocated, or jobs still completing."""
        return _busy(self.state)

    @property
    def drained(self) -> bool:
        """Drain requested and no job left: the node can go."""
        return self.drain and not self.busy

    @property
    def powered_down(self) -> bool:
        """Slurm's power saving has the node down, or on its way down: it wants no machine (pod) for it now."""
        return bool(self.state & {"POWERED_DOWN", "POWERING_DOWN"})

    @property
    def powering_up(self) -> bool:
        return "POWERING_UP" in self.state

    @property
    def display(self) -> str:
        """Slurm's long state name as `sinfo -o %T` prints it, in CamelCase so that it is a valid Kubernetes condition
        reason (letters only, no "+"):

        DRAIN flag: busy -> "Draining", base DOWN -> "DownDrained", else "Drained".
        FAIL flag: busy -> "Failing", else "Fail".
        COMPLETING flag (not drained) -> "Completing".
        Otherwise the base state: "Idle", "Allocated", "Mixed", "Down", "Future", "Error", "Unknown".
        Flags that sinfo shows as a suffix (NOT_RESPONDING "*", POWERED_DOWN "~", ...) are left out: they are in
        `state`.
        """
        return _display(self.state)


# A node's base state and display name depend on its state words alone, of which a cluster has a few sets: worked out
# once a set, not once for each of 10,240 nodes on every pass of the node loop (twice: condition and counts).
@functools.lru_cache(maxsize=256)
def _base(state: frozenset[str]) -> str:
    found = sorted(state & NODE_BASE_STATES)
    return found[0] if found else "UNKNOWN"


def _busy(state: frozenset[str]) -> bool:
    return _base(state) in ("ALLOCATED", "MIXED") or "COMPLETING" in state


@functools.lru_cache(maxsize=256)
def _display(state: frozenset[str]) -> str:
    busy = _busy(state)
    if "DRAIN" in state:
        if busy:
            return "Draining"
        return "DownDrained" if _base(state) == "DOWN" else "Drained"
    if "FAIL" in state:
        return "Failing" if busy else "Fail"
    if "COMPLETING" in state:
        return "Completing"
    return _base(state).capitalize()


class ExitCode(_Value, frozen=True):
    """A job's exit: Slurm's status words ("SUCCESS", "ERROR", "SIGNALED", "PENDING", ...), the process' return
    code and the signal that ended it, each None when Slurm has none (yet)."""

    status: tuple[str, ...]
    return_code: int | None
    signal: int | None


class Job(_Value, frozen=True):
    job_id: int
    name: str
    user: str
    # The base state: "PENDING", "RUNNING", "COMPLETED", "CANCELLED", "FAILED", ...
    state: str
    # Node names the job runs or ran on (a completing job: those still completing), expanded; () while pending.
    nodes: tuple[str, ...]
    exit_code: ExitCode
    # The rest of Slurm's job_state list: "COMPLETING", "REQUEUED", ...
    state_flags: frozenset[str] = frozenset()
    # Why it waits (Slurm's state_reason: "Resources", "Priority", "PartitionNodeLimit", ...); "" when Slurm says None.
    reason: str = ""
    partition: str = ""
    node_count: int | None = None  # nodes requested (pending) or allocated (running)


class Partition(_Value, frozen=True):
    name: str
    nodes: tuple[str, ...]
    total_nodes: int
    total_cpus: int


# --- the wire format (OpenAPI v0.0.42), only the fields used -------------------------------------------------------


def _epoch(seconds: int | None) -> datetime | None:
    return None if not seconds else datetime.fromtimestamp(seconds, UTC)


class HostList(tuple[str, ...]):
    """A host list expression on the wire ("n[1-3]"), its names in the model (`decode_hook` expands it)."""

    __slots__ = ()


def decode_hook(kind: type, value: object) -> object:
    """msgspec's hook for the one type it does not know: a host list. A bad one fails decoding like any other bad field
    (HostlistError is a ValueError; msgspec reports it with the field's path)."""
    if kind is HostList:
        if not isinstance(value, str):
            raise TypeError(f"Expected `str` (a host list), got `{type(value).__name__}`")
        return HostList(expand(value))
    raise NotImplementedError(kind)


class _Wire(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Every wire struct is frozen and keyword-only (each says so: msgspec and mypy read the flags per class). Fields
    not declared are skipped while decoding: they never become Python objects. `gc=False` (inherited): a struct holds
    only strings, numbers and other structs, never a cycle, so the garbage collector need not track the ~100,000 made
    from 10,000 jobs (tracked, each allocation burst made it walk them again)."""


class WireError(_Wire, frozen=True, kw_only=True):
    description: str = ""
    error_number: int = 0
    error: str = ""
    source: str = ""

    def text(self) -> str:
        """Slurm's words for the error: its own description and the errno's text, without repeats."""
        parts = [p for p in (self.description, self.error) if p]
        if len(parts) == 2 and parts[0] == parts[1]:
            parts = parts[:1]
        return ": ".join(parts) or f"error {self.error_number}"


class WireEnvelope(_Wire, frozen=True, kw_only=True):
    """The part every answer carries."""

    errors: tuple[WireError, ...] = ()


class _NoVal(_Wire, frozen=True, kw_only=True):
    """Slurm's optional number: {"set": bool, "infinite": bool, "number": int}."""

    set: bool = False
    infinite: bool = False
    number: int = 0

    def value(self) -> int | None:
        return self.number if self.set and not self.infinite else None


_UNSET = _NoVal()


class _WireNode(_Wire, frozen=True, kw_only=True):
    name: str
    state: tuple[str, ...]
    cpus: int
    reason: str = ""
    reason_set_by_user: str = ""
    reason_changed_at: _NoVal = _UNSET
    features: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    alloc_cpus: int = 0


class WireNodes(WireEnvelope, frozen=True, kw_only=True):
    nodes: tuple[_WireNode, ...]

    def parse(self) -> list[Node]:
        nodes = []
        for n in self.nodes:
            state = frozenset(s.upper() for s in n.state)
            has_reason = bool(n.reason) and bool(state & _STATES_WITH_A_REASON)
            nodes.append(
                Node(
                    name=n.name,
                    state=state,
                    reason=n.reason if has_reason else "",
                    reason_set_by=n.reason_set_by_user if has_reason else "",
                    reason_changed_at=_epoch(n.reason_changed_at.value()) if has_reason else None,
                    features=n.features,
                    partitions=n.partitions,
                    cpus=n.cpus,
                    alloc_cpus=n.alloc_cpus,
                )
            )
        return nodes


class _WireSignal(_Wire, frozen=True, kw_only=True):
    id: _NoVal = _UNSET


class _WireExitCode(_Wire, frozen=True, kw_only=True):
    status: tuple[str, ...] = ()
    return_code: _NoVal = _UNSET
    signal: _WireSignal = _WireSignal()


class _WireJob(_Wire, frozen=True, kw_only=True):
    job_id: int
    job_state: tuple[str, ...]
    name: str = ""
    user_name: str = ""
    nodes: HostList = HostList()  # running: its nodes; completing: those still completing; pending: ""
    exit_code: _WireExitCode = _WireExitCode()
    state_reason: str = ""
    partition: str = ""
    node_count: _NoVal = _UNSET


class WireJobs(WireEnvelope, frozen=True, kw_only=True):
    jobs: tuple[_WireJob, ...]

    def parse(self) -> list[Job]:
        # Thousands of jobs share a handful of state lists and exit codes: each is worked out once per answer and the
        # (immutable) result shared.
        states: dict[tuple[str, ...], tuple[str, frozenset[str]]] = {}
        exits: dict[_WireExitCode, ExitCode] = {}
        jobs = []
        for j in self.jobs:
            if (state := states.get(j.job_state)) is None:
                state = states[j.job_state] = _job_state(j.job_state)
            if (exit_code := exits.get(j.exit_code)) is None:
                exit_code = exits[j.exit_code] = ExitCode(
                    status=j.exit_code.status,
                    return_code=j.exit_code.return_code.value(),
                    signal=j.exit_code.signal.id.value(),
                )
            jobs.append(
                Job(
                    job_id=j.job_id,
                    name=j.name,
                    user=j.user_name,
                    state=state[0],
                    state_flags=state[1],
                    nodes=tuple(j.nodes),
                    exit_code=exit_code,
                    reason="" if j.state_reason == "None" else j.state_reason,
                    partition=j.partition,
                    node_count=j.node_count.value(),
                )
            )
        return jobs


def _job_state(job_state: tuple[str, ...]) -> tuple[str, frozenset[str]]:
    """Slurm's job_state list as (the base state, the other words)."""
    words = [s.upper() for s in job_state]
    base = next((s for s in words if s in JOB_BASE_STATES), words[0] if words else "UNKNOWN")
    return base, frozenset(s for s in words if s != base)


class _WirePartitionNodes(_Wire, frozen=True, kw_only=True):
    configured: HostList = HostList()
    total: int = 0


class _WirePartitionCpus(_Wire, frozen=True, kw_only=True):
    total: int = 0


class _WirePartition(_Wire, frozen=True, kw_only=True):
    name: str
    nodes: _WirePartitionNodes = _WirePartitionNodes()
    cpus: _WirePartitionCpus = _WirePartitionCpus()


class WirePartitions(WireEnvelope, frozen=True, kw_only=True):
    partitions: tuple[_WirePartition, ...]

    def parse(self) -> list[Partition]:
        return [
            Partition(
                name=p.name,
                nodes=tuple(p.nodes.configured),
                total_nodes=p.nodes.total,
                total_cpus=p.cpus.total,
            )
            for p in self.partitions
        ]


class _WirePing(_Wire, frozen=True, kw_only=True):
    hostname: str = ""
    pinged: str = ""
    responding: bool = False


class WirePings(WireEnvelope, frozen=True, kw_only=True):
    pings: tuple[_WirePing, ...]

    def unreachable(self) -> list[str]:
        """Names of the controllers that do not answer; all of them when the list is empty."""
        if not self.pings:
            return ["(no controller listed)"]
        if any(p.responding for p in self.pings):
            return []
        return [p.hostname or "?" for p in self.pings]
