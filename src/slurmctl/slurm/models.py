"""What the operator reads from Slurm, as small frozen values parsed from slurmrestd's answers.

Two layers on purpose: the private `_Wire*` pydantic models check the subset of the v0.0.42 JSON this client relies
on (extra fields ignored, so a newer Slurm adding fields does not break us; a missing or mistyped field is a
`SlurmProtocolError`), and the public dataclasses hold what callers need, in the form they need it (upper-case state
flags as a frozenset, host lists expanded to names).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

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


@dataclass(frozen=True)
class Node:
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
        found = sorted(self.state & NODE_BASE_STATES)
        return found[0] if found else "UNKNOWN"

    @property
    def drain(self) -> bool:
        """Drain was requested (by anyone): no new jobs start here."""
        return "DRAIN" in self.state

    @property
    def busy(self) -> bool:
        """Jobs are on the node: some CPUs allocated, or jobs still completing."""
        return self.base in ("ALLOCATED", "MIXED") or "COMPLETING" in self.state

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
        if self.drain:
            if self.busy:
                return "Draining"
            return "DownDrained" if self.base == "DOWN" else "Drained"
        if "FAIL" in self.state:
            return "Failing" if self.busy else "Fail"
        if "COMPLETING" in self.state:
            return "Completing"
        return self.base.capitalize()


@dataclass(frozen=True)
class ExitCode:
    """A job's exit: Slurm's status words ("SUCCESS", "ERROR", "SIGNALED", "PENDING", ...), the process' return
    code and the signal that ended it, each None when Slurm has none (yet)."""

    status: tuple[str, ...]
    return_code: int | None
    signal: int | None


@dataclass(frozen=True)
class Job:
    job_id: int
    name: str
    user: str
    # The base state: "PENDING", "RUNNING", "COMPLETED", "CANCELLED", "FAILED", ...
    state: str
    # Node names the job runs (or ran) on, expanded; () while pending.
    nodes: tuple[str, ...]
    exit_code: ExitCode
    # The rest of Slurm's job_state list: "COMPLETING", "REQUEUED", ...
    state_flags: frozenset[str] = frozenset()
    # Why it waits (Slurm's state_reason: "Resources", "Priority", "PartitionNodeLimit", ...); "" when Slurm says None.
    reason: str = ""
    partition: str = ""
    node_count: int | None = None  # nodes requested (pending) or allocated (running)


@dataclass(frozen=True)
class Partition:
    name: str
    nodes: tuple[str, ...]
    total_nodes: int
    total_cpus: int


# --- the wire format (OpenAPI v0.0.42), only the fields used -------------------------------------------------------


def _epoch(seconds: int | None) -> datetime | None:
    return None if not seconds else datetime.fromtimestamp(seconds, UTC)


def _expand_host_list(value: Any) -> Any:
    # A bad host list fails validation like any other bad field (HostlistError is a ValueError).
    return expand(value) if isinstance(value, str) else value


# A host list expression on the wire ("n[1-3]"), the names in the model.
_HostList = Annotated[tuple[str, ...], BeforeValidator(_expand_host_list)]


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class WireError(_Wire):
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


class WireEnvelope(_Wire):
    """The part every answer carries."""

    errors: list[WireError] = Field(default_factory=list)


class _NoVal(_Wire):
    """Slurm's optional number: {"set": bool, "infinite": bool, "number": int}."""

    set: bool = False
    infinite: bool = False
    number: int = 0

    def value(self) -> int | None:
        return self.number if self.set and not self.infinite else None


class _WireNode(_Wire):
    name: str
    state: list[str]
    reason: str = ""
    reason_set_by_user: str = ""
    reason_changed_at: _NoVal = Field(default_factory=_NoVal)
    features: list[str] = Field(default_factory=list)
    partitions: list[str] = Field(default_factory=list)
    cpus: int
    alloc_cpus: int = 0


class WireNodes(WireEnvelope):
    nodes: list[_WireNode]

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
                    features=tuple(n.features),
                    partitions=tuple(n.partitions),
                    cpus=n.cpus,
                    alloc_cpus=n.alloc_cpus,
                )
            )
        return nodes


class _WireAllocation(_Wire):
    name: str


class _WireJobNodes(_Wire):
    allocation: list[_WireAllocation] = Field(default_factory=list)


class _WireJobResources(_Wire):
    nodes: _WireJobNodes | None = None


class _WireSignal(_Wire):
    id: _NoVal = Field(default_factory=_NoVal)


class _WireExitCode(_Wire):
    status: list[str] = Field(default_factory=list)
    return_code: _NoVal = Field(default_factory=_NoVal)
    signal: _WireSignal = Field(default_factory=_WireSignal)


class _WireJob(_Wire):
    job_id: int
    name: str = ""
    user_name: str = ""
    job_state: list[str]
    nodes: _HostList = ()
    job_resources: _WireJobResources | None = None
    exit_code: _WireExitCode = Field(default_factory=_WireExitCode)
    state_reason: str = ""
    partition: str = ""
    node_count: _NoVal = Field(default_factory=_NoVal)

    def node_names(self) -> tuple[str, ...]:
        """The allocation's names when Slurm gives them (running jobs), else the `nodes` host list."""
        if self.job_resources is not None and self.job_resources.nodes is not None:
            names = tuple(a.name for a in self.job_resources.nodes.allocation)
            if names:
                return names
        return self.nodes


class WireJobs(WireEnvelope):
    jobs: list[_WireJob]

    def parse(self) -> list[Job]:
        jobs = []
        for j in self.jobs:
            states = [s.upper() for s in j.job_state]
            base = next((s for s in states if s in JOB_BASE_STATES), states[0] if states else "UNKNOWN")
            jobs.append(
                Job(
                    job_id=j.job_id,
                    name=j.name,
                    user=j.user_name,
                    state=base,
                    state_flags=frozenset(s for s in states if s != base),
                    nodes=j.node_names(),
                    exit_code=ExitCode(
                        status=tuple(j.exit_code.status),
                        return_code=j.exit_code.return_code.value(),
                        signal=j.exit_code.signal.id.value(),
                    ),
                    reason="" if j.state_reason == "None" else j.state_reason,
                    partition=j.partition,
                    node_count=j.node_count.value(),
                )
            )
        return jobs


class _WirePartitionNodes(_Wire):
    configured: _HostList = ()
    total: int = 0


class _WirePartitionCpus(_Wire):
    total: int = 0


class _WirePartition(_Wire):
    name: str
    nodes: _WirePartitionNodes = Field(default_factory=_WirePartitionNodes)
    cpus: _WirePartitionCpus = Field(default_factory=_WirePartitionCpus)


class WirePartitions(WireEnvelope):
    partitions: list[_WirePartition]

    def parse(self) -> list[Partition]:
        return [
            Partition(
                name=p.name,
                nodes=p.nodes.configured,
                total_nodes=p.nodes.total,
                total_cpus=p.cpus.total,
            )
            for p in self.partitions
        ]


class _WirePing(_Wire):
    hostname: str = ""
    pinged: str = ""
    responding: bool = False


class WirePings(WireEnvelope):
    pings: list[_WirePing]

    def unreachable(self) -> list[str]:
        """Names of the controllers that do not answer; all of them when the list is empty."""
        if not self.pings:
            return ["(no controller listed)"]
        if any(p.responding for p in self.pings):
            return []
        return [p.hostname or "?" for p in self.pings]


def describe_validation(exc: ValidationError) -> str:
    """Why an answer did not fit the expected shape, in a few words: the first problem and where it is."""
    problems = exc.errors()
    if not problems:
        return "invalid"
    where = ".".join(str(p) for p in problems[0]["loc"])
    return f"{problems[0]['msg']} at {where or 'top level'}"
