"""The observed state of a SlurmCluster, written by the operator under `status`.

Each component's reconciler owns one condition (server-side apply with its own field manager merges them, because
`conditions` is a list-map keyed by `type`), and the `cluster` reconciler owns the phase and the summaries.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Final, Literal, get_args

from pydantic import Field, SerializerFunctionWrapHandler, StringConstraints, model_serializer

from .types import ApiModel

Phase = Literal["Pending", "Reconciling", "Available", "Degraded", "Failed"]
PHASES: Final[tuple[Phase, ...]] = get_args(Phase)
ConditionStatus = Literal["True", "False", "Unknown"]

# Condition types the reconcilers set, one per component; the schema accepts any well-formed type.
SPEC_VALID: Final = "SpecValid"
CONTROLLER_READY: Final = "ControllerReady"
WORKERS_READY: Final = "WorkersReady"
LOGIN_READY: Final = "LoginReady"
JAIL_POPULATED: Final = "JailPopulated"
ACCOUNTING_READY: Final = "AccountingReady"
REST_READY: Final = "RestReady"
BENCHMARK_SCHEDULED: Final = "BenchmarkScheduled"
# The benchmark reconciler's second condition: what the NCCL benchmark's last finished Job found (read from its pod's
# termination message). Like the benchmark itself it does not count for the phase: a failed node is drained by the
# benchmark, a run that could not take place drains nothing; either way the cluster stays up.
BENCHMARK_PASSED: Final = "BenchmarkPassed"
# The cluster reconciler's second condition: which Slurm line the components run, an upgrade's progress (Upgrading,
# with the stage in the message) or why spec.slurm.version is refused (UpgradeRefused). Not counted for the phase: the
# components' own conditions say whether they are ready.
SLURM_VERSION: Final = "SlurmVersion"
# Not a component's: the accounting reconciler's second condition, whether Slurm holds the accounts and QOS that
# spec.accounting declares. It does not count for the phase (jobs run without it), it says why limits do not bite.
LIMITS_APPLIED: Final = "LimitsApplied"
# The maintenance component's: True while a change that restarts a Slurm daemon's pod waits for (or is being applied
# in) a maintenance window (spec.maintenance.windows). It does not count for the phase: the cluster runs as it was.
MAINTENANCE_PENDING: Final = "MaintenancePending"
# The identity component's: whether the jail holds the users and groups of spec.identity. False names each declared
# entry refused (its name or id is an existing account's). It does not count for the phase: Slurm runs without it.
IDENTITY_SYNCED: Final = "IdentitySynced"
# The directory component's (spec.identity.directory): whether the operator's own bind to the directory, over TLS with
# the given CA and bind DN, succeeds. It does not count for the phase: the jail's own users still log in and run jobs.
DIRECTORY_REACHABLE: Final = "DirectoryReachable"


class Reason(StrEnum):
    """Every reason a slurmctl condition can carry, and whether a False condition with it means "on its way".

    The phase aggregation reads `in_progress`: a False condition whose reason is not in progress is a failure that
    needs a person (Degraded at once). A reason string this operator does not know (written by a newer one) counts as
    a failure, the safe side.
    """

    VALID = "Valid"
    INVALID_SPEC = "InvalidSpec"
    READY = "Ready"
    NOT_READY = "NotReady"
    STOPPED = "Stopped"
    WAITING_FOR_KEYS = "WaitingForKeys"
    WAITING_FOR_JAIL = "WaitingForJail"
    POPULATING = "Populating"
    OVERWRITING = "Overwriting"
    POPULATED = "Populated"
    JOB_FAILED = "JobFailed"
    JAIL_NOT_EMPTY = "JailNotEmpty"  # populate-jail refused a volume holding files slurmctl did not put there
    SCHEDULED = "Scheduled"
    DISABLED = "Disabled"
    NO_GPU_WORKERS = "NoGpuWorkers"
    MARIADB_OPERATOR_MISSING = "MariaDBOperatorMissing"
    PASSWORD_SECRET_MISSING = "PasswordSecretMissing"  # noqa: S105 - a reason, not a password
    INVALID_PASSWORD = "InvalidPassword"  # noqa: S105
    APPLY_REJECTED = "ApplyRejected"  # the API server refused a child the spec renders (named in the message)
    DRAINING = "Draining"  # nodes that must go wait in Slurm for their jobs (named in the message)
    SLURM_UNREACHABLE = "SlurmUnreachable"  # Slurm cannot be asked whether nodes may go: nothing goes
    APPLIED = "Applied"  # Slurm holds what the spec declares (LimitsApplied)
    LIMITS_REFUSED = "LimitsRefused"  # Slurm refused a record of spec.accounting (the field is in the message)
    PASSED = "Passed"  # the last NCCL benchmark passed on every node it benchmarked (BenchmarkPassed)
    NODES_FAILED = "NodesFailed"  # the last NCCL benchmark failed on nodes (named in the message)
    COULD_NOT_RUN = "CouldNotRun"  # the last NCCL benchmark could not measure nodes (named, with why, in the message)
    UNSCHEDULABLE = "Unschedulable"  # an elastic group's pod cannot be placed or started, or its node did not resume
    CURRENT = "Current"  # every component runs spec.slurm.version (SlurmVersion)
    UPGRADING = "Upgrading"  # a Slurm upgrade is under way (SlurmVersion; the stage is in the message)
    UPGRADE_REFUSED = "UpgradeRefused"  # a downgrade or a skip Slurm does not support (SlurmVersion)
    POD_REFUSED = "PodRefused"  # the API server refuses a component's pods at admission (Pod Security, a quota)
    WAITING_FOR_WINDOW = "WaitingForWindow"  # restart-requiring changes wait for the next maintenance window
    IN_WINDOW = "InWindow"  # restart-requiring changes are being applied in the open maintenance window
    NOTHING_PENDING = "NothingPending"  # no restart-requiring change waits (MaintenancePending False)
    NO_WINDOWS = "NoWindows"  # spec.maintenance.windows is empty: changes are applied at once
    SYNCING = "Syncing"  # the identity Job is writing spec.identity into the jail
    SYNCED = "Synced"  # the jail holds every user and group of spec.identity
    IDENTITY_CONFLICT = "IdentityConflict"  # declared entries whose name or id an existing account has (named)
    REACHABLE = "Reachable"  # the operator's bind to the directory succeeded (DirectoryReachable)
    DIRECTORY_UNREACHABLE = "DirectoryUnreachable"  # no URI of spec.identity.directory answered in time
    DIRECTORY_CERTIFICATE_REFUSED = "DirectoryCertificateRefused"  # TLS failed: the CA did not sign it, or its name
    DIRECTORY_BIND_REFUSED = "DirectoryBindRefused"  # the directory refused the bind DN or its password
    # The bind password Secret or the CA is not there.
    DIRECTORY_SECRET_MISSING = "DirectorySecretMissing"  # noqa: S105 - a reason, not a secret

    @property
    def in_progress(self) -> bool:
        return self in _IN_PROGRESS

    @classmethod
    def means_progress(cls, reason: str) -> bool:
        """Whether a reason read back from the API (any string) means "on its way"."""
        return reason in cls._value2member_map_ and cls(reason).in_progress


_IN_PROGRESS: Final = frozenset(
    {
        Reason.NOT_READY,
        Reason.STOPPED,
        Reason.WAITING_FOR_KEYS,
        Reason.WAITING_FOR_JAIL,
        Reason.POPULATING,
        Reason.OVERWRITING,
        Reason.DRAINING,
        Reason.UPGRADING,
        Reason.SYNCING,
    }
)

# metav1.Condition's own validation, so conditions written here look like every other controller's.
_CONDITION_TYPE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
_READY_PATTERN = r"^[0-9]+/[0-9]+$"
MAX_CONDITION_MESSAGE = 32_768  # metav1.Condition's maxLength for message
ReadySummary = Annotated[str, StringConstraints(max_length=32, pattern=_READY_PATTERN)]


def ready_summary(ready: int, desired: int) -> str:
    """The "ready/desired" text the printer columns show, as `kubectl get deployment` shows READY."""
    return f"{ready}/{desired}"


class Condition(ApiModel):
    """One aspect of the cluster's state, as metav1.Condition."""

    type: str = Field(
        max_length=316,
        pattern=_CONDITION_TYPE_PATTERN,
        description="Type of the condition in CamelCase, e.g. WorkersReady.",
    )
    status: ConditionStatus = Field(description="Whether the condition holds: True, False or Unknown.")
    observed_generation: int | None = Field(
        None, ge=0, description="metadata.generation of the spec the condition was computed from."
    )
    last_transition_time: datetime = Field(
        strict=False, description="When the status last changed from one value to another."
    )
    reason: str = Field(
        min_length=1,
        max_length=1024,
        pattern=_REASON_PATTERN,
        description="Machine-readable CamelCase reason for the last transition.",
    )
    message: str = Field(
        max_length=MAX_CONDITION_MESSAGE, description="Human-readable details, naming the field when the spec is wrong."
    )


class ResumeFailure(ApiModel):
    """One elastic node Slurm gave up on (not up within its resumeTimeout): how many times in a row, and when Slurm
    said so last."""

    node: str = Field(max_length=253, description="Slurm node name.")
    failures: int = Field(ge=1, description="Consecutive ResumeTimeouts since the node was last up.")
    since: datetime = Field(
        strict=False, description="When Slurm set the node DOWN the last time (its reason's timestamp)."
    )


class WorkerGroupStatus(ApiModel):
    """Pod counts of one worker group."""

    name: str = Field(max_length=63, description="Name of the worker group.")
    desired: int = Field(ge=0, description="Worker pods the spec asks for.")
    ready: int = Field(ge=0, description="Worker pods that are ready.")
    resume_failures: list[ResumeFailure] | None = Field(
        None,
        max_length=4096,
        description=(
            "Elastic groups: nodes Slurm set DOWN after their resumeTimeout, until one comes up again. slurmctl "
            "resumes such a node itself after a backoff that doubles with each consecutive failure; this is where it "
            "keeps the count, so that an operator restart does not shorten it."
        ),
    )


class SlurmNodeCounts(ApiModel):
    """Nodes by Slurm state (the IDLE, ALLOC and DRAIN columns); a node counts once, drained before the rest."""

    total: int = Field(ge=0, description="Nodes Slurm knows.")
    idle: int = Field(ge=0, description="Idle, not drained.")
    allocated: int = Field(ge=0, description="Running jobs (allocated or mixed), not drained.")
    drained: int = Field(ge=0, description="Drained or draining (no new jobs).")
    down: int = Field(ge=0, description="Down or not responding, not drained.")


UpgradePhase = Literal["Current", "Refused", "BackingUp", "Accounting", "Controller", "Workers", "LoginAndRest"]


class SlurmVersionStatus(ApiModel):
    """The Slurm line each component's pods run, and where an upgrade is."""

    version: str | None = Field(
        None, max_length=16, description="The line every component runs; absent while they differ (an upgrade)."
    )
    components: dict[str, str] = Field(
        default_factory=dict,
        max_length=16,
        description="The line the pods of each component run (accounting, controller, workers, login, rest): the "
        "oldest where its pods differ.",
    )
    phase: UpgradePhase | None = Field(
        None,
        description="Current, or the stage an upgrade is at (BackingUp, Accounting, Controller, Workers, "
        "LoginAndRest), or Refused (SlurmVersion condition says why).",
    )
    upgrade_from: str | None = Field(
        None, max_length=16, description="The line an upgrade under way (or refused) starts from."
    )
    backup_claim: str | None = Field(
        None,
        max_length=253,
        description="The PersistentVolumeClaim holding the accounting database's backups taken before upgrades.",
    )

    @model_serializer(mode="wrap")
    def _no_empty_components(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        """An empty `components` is left out, not written: server-side apply turns a map its manager emptied into
        null, which the schema (an object) refuses, and the whole status write with it (every staged pod gone at
        once). Left out, the apply removes the field its manager owned, and a reader sees the default, empty."""
        data: dict[str, object] = handler(self)
        if not data.get("components"):
            data.pop("components", None)
        return data


class SlurmClusterStatus(ApiModel):
    """What the operator last observed of the cluster."""

    phase: Phase | None = Field(
        None, description="Summary: Pending, Reconciling, Available, Degraded, or Failed (invalid spec)."
    )
    observed_generation: int | None = Field(
        None, ge=0, description="metadata.generation of the spec the status describes."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="One condition per component (ControllerReady, WorkersReady, LoginReady, ...).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    workers: list[WorkerGroupStatus] = Field(
        default_factory=list,
        description="Desired and ready pods per worker group.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    controller_ready: ReadySummary | None = Field(
        None, description="Ready/desired slurmctld pods, e.g. 1/1 (the CONTROLLER column)."
    )
    workers_ready: ReadySummary | None = Field(
        None, description="Ready/desired worker pods over all groups, e.g. 6/8 (the WORKERS column)."
    )
    login_ready: ReadySummary | None = Field(None, description="Ready/desired login pods, e.g. 2/2 (the LOGIN column).")

    slurm_nodes: SlurmNodeCounts | None = Field(
        None, description="Worker nodes by Slurm state, as the operator last read them from slurmrestd."
    )
    jwt_key_rotation: str | None = Field(
        None,
        description="The spec.jwtKeyRotation value the JWT key in use was made for (absent: the cluster's first key).",
    )
    slurm: SlurmVersionStatus | None = Field(
        None, description="The Slurm line the components run, and a Slurm upgrade's progress."
    )

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)
