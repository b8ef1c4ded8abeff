"""Accounts, their users and QOS limits declared in `spec.accounting`: what the operator keeps in Slurm's accounting
database (through slurmrestd's /slurmdb endpoints), level-based, touching only what the SlurmCluster declares.

Names and limits use Slurm's own words (sacctmgr's MaxJobsPerUser, MaxTRESPerJob, GrpTRES) so that what
`sacctmgr show qos` prints can be found in the spec. A limit left out is no limit: removing it from the spec lifts
it in Slurm. Accounts and QOS created by hand (not named here) are never changed or deleted.
"""

from __future__ import annotations

from typing import Annotated, Final

from pydantic import ConfigDict, Field, StringConstraints

from .cel import Rule, validations
from .fields import LIST_SET
from .types import ApiModel

MAX_ACCOUNTS: Final = 256
MAX_QOS: Final = 64
MAX_USERS_PER_ACCOUNT: Final = 1024
# Slurm keeps account, QOS and user names lower-case and as given; these are what sacctmgr accepts without quoting.
SLURM_NAME_PATTERN: Final = r"^[a-z0-9_][a-z0-9_.-]*$"
# POSIX user names as useradd creates them (NAME_REGEX of Debian's adduser, without upper case).
USER_NAME_PATTERN: Final = r"^[a-z_][a-z0-9_-]*\$?$"
# A TRES as Slurm spells it: a type (cpu, mem, node, billing, energy, ...) or type/name (gres/gpu, gres/gpu:h100,
# license/matlab, fs/disk). Which ones exist is the cluster's to say; validation checks them against it.
TRES_PATTERN: Final = r"^[a-z]+(/[A-Za-z0-9_.:-]+)?$"
# Slurm keeps limits as 32-bit counts and 64-bit TRES counts; INFINITE (2**32 - 1) means "no limit" and is never a
# value a spec writes.
MAX_COUNT: Final = 2**32 - 2
MAX_TRES_COUNT: Final = 2**53

SlurmName = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=SLURM_NAME_PATTERN)]
UserName = Annotated[str, StringConstraints(min_length=1, max_length=32, pattern=USER_NAME_PATTERN)]
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
TresCount = Annotated[int, Field(ge=0, le=MAX_TRES_COUNT)]
Description = Annotated[str, StringConstraints(max_length=256, pattern=r"^[^\x00-\x1f\x7f]*$")]
# Keys are checked by validation (TRES_PATTERN, then against the TRES the cluster tracks): a CRD schema cannot
# constrain map keys (no patternProperties), so the operator reports them as SpecValid=False naming the key.
TresLimits = dict[str, TresCount]
_TRES_EXAMPLE = " per TRES, e.g. {cpu: 8, mem: 16384, gres/gpu: 2} (mem in MiB)."


class QosSpec(ApiModel):
    """A Slurm QOS kept at these limits (`sacctmgr show qos`). Jobs use it with --qos, or through an account."""

    name: SlurmName = Field(description="QOS name (lower case, as Slurm keeps it).")
    description: Description | None = Field(None, description="Free text shown by sacctmgr.")
    priority: Count | None = Field(None, description="Priority: added to the priority of jobs in this QOS.")
    max_jobs_per_user: Count | None = Field(
        None, alias="maxJobsPerUser", description="MaxJobsPerUser: running jobs a user may have in this QOS."
    )
    max_submit_jobs_per_user: Count | None = Field(
        None,
        alias="maxSubmitJobsPerUser",
        description="MaxSubmitJobsPerUser: jobs (pending or running) a user may have in this QOS.",
    )
    max_wall_minutes_per_job: Count | None = Field(
        None, alias="maxWallMinutesPerJob", description="MaxWall: minutes a job in this QOS may run."
    )
    max_tres_per_job: TresLimits = Field(
        default_factory=dict,
        max_length=32,
        alias="maxTRESPerJob",
        description="MaxTRESPerJob: what one job may allocate," + _TRES_EXAMPLE,
    )
    max_tres_per_user: TresLimits = Field(
        default_factory=dict,
        max_length=32,
        alias="maxTRESPerUser",
        description="MaxTRESPerUser: what one user's running jobs may allocate together," + _TRES_EXAMPLE,
    )
    grp_jobs: Count | None = Field(None, description="GrpJobs: running jobs in this QOS, all users together.")
    grp_tres: TresLimits = Field(
        default_factory=dict,
        max_length=32,
        alias="grpTRES",
        description="GrpTRES: what all running jobs in this QOS may allocate together," + _TRES_EXAMPLE,
    )


class AccountSpec(ApiModel):
    """A Slurm account and its users (their associations). Limits here apply to each user of the account (MaxJobs,
    MaxTRESPerJob) or to the account as a whole (GrpTRES, GrpJobs)."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            Rule(
                "self.name != 'root'",
                message="root is Slurm's own account: it cannot be declared",
                field_path=".name",
                reason="FieldValueForbidden",
            )
        )
    )

    name: SlurmName = Field(description="Account name (lower case, as Slurm keeps it).")
    description: Description | None = Field(None, description="Free text; empty means the account's name.")
    organization: Description | None = Field(None, description="Organization; empty means the account's name.")
    parent: SlurmName = Field("root", description="Parent account: root, or another account declared here.")
    users: list[UserName] = Field(
        default_factory=list,
        max_length=MAX_USERS_PER_ACCOUNT,
        description="Users of the account (jail user names). A user's default account is the first account, in spec "
        "order, that lists them.",
        json_schema_extra=LIST_SET,
    )
    qos: list[SlurmName] = Field(
        default_factory=list,
        max_length=MAX_QOS,
        description="QOS the account's jobs may use: QOS declared in spec.accounting.qos, or normal. Empty keeps "
        "Slurm's default (inherited from the parent).",
        json_schema_extra=LIST_SET,
    )
    default_qos: SlurmName | None = Field(None, description="QOS of jobs that ask for none; one of qos.")
    max_jobs_per_user: Count | None = Field(
        None, alias="maxJobsPerUser", description="MaxJobs of each user's association: running jobs per user."
    )
    max_submit_jobs_per_user: Count | None = Field(
        None,
        alias="maxSubmitJobsPerUser",
        description="MaxSubmitJobs of each user's association: pending and running jobs per user.",
    )
    max_tres_per_job: TresLimits = Field(
        default_factory=dict,
        max_length=32,
        alias="maxTRESPerJob",
        description="MaxTRESPerJob of each user's association: what one job may allocate," + _TRES_EXAMPLE,
    )
    grp_jobs: Count | None = Field(None, description="GrpJobs: running jobs of the account, all users together.")
    grp_tres: TresLimits = Field(
        default_factory=dict,
        max_length=32,
        alias="grpTRES",
        description="GrpTRES: what the account's running jobs may allocate together," + _TRES_EXAMPLE,
    )
