"""`spec.slurm`: where the default images come from and what slurm.conf says beyond slurmctl's defaults, as typed
keys (SlurmConfig) or raw extra lines, and the escape hatch that lets those lines set the keys slurmctl owns.
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import Field

from .cel import Rule, validations
from .defaults import (
    ACCOUNTING_SLURM_KEYS,
    GPU_HEALTH_CHECK_SLURM_KEYS,
    IMAGE_REGISTRY,
    MAX_EXTRA_CONFIG_LENGTH,
    OPERATOR_OWNED_SLURM_KEYS,
    TOPOLOGY_SLURM_KEYS,
)
from .slurm_version import DEFAULT_SLURM_VERSION, SlurmVersion
from .types import NO_WHITESPACE_PATTERN, ApiModel, LocalObjectReference

# Slurm's own level for every daemon when its config says none: nothing is written for it.
DEFAULT_LOG_LEVEL: Final = "info"
DebugLevel = Literal["quiet", "fatal", "error", "info", "verbose", "debug", "debug2", "debug3", "debug4", "debug5"]
SelectTypeParameters = Literal["CR_CPU", "CR_CPU_Memory", "CR_Core", "CR_Core_Memory", "CR_Socket", "CR_Socket_Memory"]


class SlurmConfig(ApiModel):
    """Common slurm.conf keys with types; unset keys keep what docs/slurm-settings.md lists (Slurm's defaults but
    for its reasons)."""

    max_job_count: int | None = Field(
        None, ge=1, le=10_000_000, description="MaxJobCount: jobs slurmctld keeps in memory at once."
    )
    min_job_age: int | None = Field(
        None, ge=0, le=86_400 * 30, description="MinJobAge: seconds a finished job stays visible in squeue."
    )
    message_timeout: int | None = Field(
        None, ge=1, le=100, description="MessageTimeout: seconds to wait for a reply between Slurm daemons."
    )
    complete_wait: int | None = Field(
        None, ge=0, le=65_535, description="CompleteWait: seconds to wait for completing jobs before scheduling."
    )
    def_mem_per_cpu: int | None = Field(
        None,
        ge=1,
        alias="defMemPerCPU",
        description="DefMemPerCPU: default memory in MiB per allocated CPU when a job asks for none.",
    )
    select_type_parameters: SelectTypeParameters | None = Field(
        None, description="SelectTypeParameters of select/cons_tres: what a job allocation consumes."
    )
    slurmctld_timeout: int | None = Field(
        None,
        ge=10,
        le=65_535,
        description="SlurmctldTimeout: seconds a standby slurmctld (spec.controller.standby) waits for an unresponsive "
        "primary before it takes control (Slurm's default 120).",
    )
    slurmctld_debug: DebugLevel | None = Field(
        None, description="Deprecated: spec.slurm.logLevel.slurmctld, which wins when both are set."
    )
    slurmd_debug: DebugLevel | None = Field(
        None, description="Deprecated: spec.slurm.logLevel.slurmd, which wins when both are set."
    )

    def slurm_conf(self) -> dict[str, str]:
        """The keys that are set, spelled as slurm.conf spells them, in a stable order."""
        names = {
            "max_job_count": "MaxJobCount",
            "min_job_age": "MinJobAge",
            "message_timeout": "MessageTimeout",
            "complete_wait": "CompleteWait",
            "def_mem_per_cpu": "DefMemPerCPU",
            "select_type_parameters": "SelectTypeParameters",
            "slurmctld_timeout": "SlurmctldTimeout",
        }
        values = ((key, getattr(self, field)) for field, key in names.items())
        return {key: str(value) for key, value in values if value is not None}


SlurmDaemon = Literal["slurmctld", "slurmd", "slurmdbd"]


class LogLevels(ApiModel):
    """How much each Slurm daemon logs, in Slurm's level names; unset is Slurm's own default, info. Each daemon logs to
    its container's log (`kubectl logs`); slurmd's level is its step daemons' (slurmstepd) too. Not slurmrestd: Slurm
    24.11's slurmrestd logs to a standard error that is not a terminal at info whatever it is told (SLURMRESTD_DEBUG
    and -v move only its syslog level, which nothing reads in a pod)."""

    slurmctld: DebugLevel | None = Field(
        None, description="SlurmctldDebug (slurm.conf); applied in place by a reconfigure, no restart. Default info."
    )
    slurmd: DebugLevel | None = Field(
        None,
        description="SlurmdDebug (slurm.conf), slurmd's and its step daemons' (slurmstepd); applied in place by a "
        "reconfigure, no restart. Default info.",
    )
    slurmdbd: DebugLevel | None = Field(
        None,
        description="DebugLevel (slurmdbd.conf); slurmdbd is restarted to apply it (slurmctld keeps its records "
        "meanwhile). Default info.",
    )


class SlurmSpec(ApiModel):
    """Slurm itself: which Slurm line runs, where images come from, and slurm.conf overrides."""

    version: SlurmVersion = Field(
        DEFAULT_SLURM_VERSION,
        description="The Slurm line the cluster runs: 24.11 or 26.05. With imageTag unset it picks the default "
        "images' tag (<operator version>, or <operator version>-slurm26.05). Changing it on a running cluster "
        "upgrades in Slurm's order: a backup of the accounting database, slurmdbd, slurmctld, the workers one drained "
        'node at a time (running jobs finish first), then login and slurmrestd (docs/operations.md, "Upgrading '
        'Slurm"). A downgrade is refused.',
        json_schema_extra=validations(
            Rule(
                "self >= oldSelf",
                message="spec.slurm.version cannot go back to an older Slurm line (a downgrade): Slurm cannot read "
                "the state and database records a newer release wrote",
                reason="FieldValueForbidden",
            )
        ),
    )

    image_registry: str = Field(
        IMAGE_REGISTRY,
        max_length=512,
        pattern=NO_WHITESPACE_PATTERN,
        description="Registry and path prefix of the default images, <registry>/<component>:<tag>.",
    )
    image_tag: str | None = Field(
        None,
        max_length=128,
        pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$",
        description="Tag of the default images; empty means the operator's own version with the suffix of "
        "spec.slurm.version's line, so operator upgrades roll images. Set, it names every Slurm component's image for "
        "whatever version says: a Slurm upgrade then has no older images to keep components on while others move.",
    )
    image_pull_secrets: list[LocalObjectReference] = Field(
        default_factory=list,
        max_length=16,
        description="Secrets (in the SlurmCluster's namespace) the kubelet uses to pull every image of the cluster's "
        "pods, for a private registry: the imagePullSecrets of each pod slurmctl makes.",
    )
    cgroup_version: Literal["auto", "v1", "v2"] = Field(
        "auto",
        description=(
            "cgroup version of the worker nodes' kernels, for cgroup.conf: auto lets slurmd detect it on each node "
            "(CgroupPlugin=autodetect), which suits clusters that mix kernels; v1 or v2 force a plugin."
        ),
    )
    log_level: LogLevels = Field(
        default_factory=LogLevels, description="Log levels of the Slurm daemons (Slurm's default: info)."
    )
    config: SlurmConfig = Field(
        default_factory=SlurmConfig,
        description="Typed slurm.conf keys that override what slurmctl writes (docs/slurm-settings.md).",
    )
    extra_config: str | None = Field(
        None,
        max_length=MAX_EXTRA_CONFIG_LENGTH,
        description="Raw lines appended to slurm.conf after the generated ones (Slurm takes the last value). Keys "
        "slurmctl owns are refused unless allowOperatorOwnedKeys is true: "
        + ", ".join(OPERATOR_OWNED_SLURM_KEYS)
        + "; with accounting enabled also "
        + ", ".join(ACCOUNTING_SLURM_KEYS)
        + "; with the GPU health check also "
        + ", ".join(GPU_HEALTH_CHECK_SLURM_KEYS)
        + "; with spec.topology also "
        + ", ".join(TOPOLOGY_SLURM_KEYS)
        + ".",
    )
    allow_operator_owned_keys: bool = Field(
        False,
        description="Escape hatch: let extraConfig set the keys slurmctl owns (see extraConfig). These carry "
        "slurmctl's contract with its pods (controller address, ports, munge auth, users, state paths, the jail's "
        "chroot plugin, the generated node and partition records); overriding them can break the cluster or switch "
        "the jail off, and is unsupported.",
    )

    def log_levels(self) -> dict[SlurmDaemon, DebugLevel]:
        """The daemons whose level the spec sets: logLevel, else the deprecated config.slurmctldDebug/slurmdDebug."""
        levels: dict[SlurmDaemon, DebugLevel | None] = {
            "slurmctld": self.log_level.slurmctld or self.config.slurmctld_debug,
            "slurmd": self.log_level.slurmd or self.config.slurmd_debug,
            "slurmdbd": self.log_level.slurmdbd,
        }
        return {daemon: level for daemon, level in levels.items() if level is not None}
