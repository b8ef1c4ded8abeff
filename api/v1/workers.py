"""`spec.workers` and `spec.partitions`: the groups of identical worker nodes (one StatefulSet each), an elastic
group's Autoscale, and the Slurm partitions that gather groups for jobs.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field, StringConstraints

from .cel import Rule, validations
from .defaults import (
    MAX_GPUS_PER_WORKER,
    MAX_GROUP_NAME_LENGTH,
    MAX_GROUP_SIZE,
    MAX_PARTITION_OPTIONS,
    MAX_WORKER_GROUPS,
)
from .fields import LIST_SET, OptionValue, image_field
from .jail import JobTmp
from .types import DNS_LABEL_PATTERN, ApiModel, Duration, Quantity, ResourceRequirements, Scheduling

Feature = Annotated[str, StringConstraints(max_length=63, pattern=r"^[A-Za-z0-9_.-]+$")]
GroupName = Annotated[str, StringConstraints(max_length=MAX_GROUP_NAME_LENGTH, pattern=DNS_LABEL_PATTERN)]


class Autoscale(ApiModel):
    """An elastic group: Slurm knows `max` nodes, and a node has a pod only while Slurm's power saving has it up."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            Rule(
                "self.min <= self.max",
                message="min is more than max",
                field_path=".min",
            )
        )
    )

    min: int = Field(
        0,
        ge=0,
        le=MAX_GROUP_SIZE,
        description="Nodes kept up whether or not Slurm has work for them (Slurm's SuspendExcNodes with a count); "
        "slurmctl asks Slurm to power up that many when fewer are up.",
    )
    max: int = Field(
        ge=1,
        le=MAX_GROUP_SIZE,
        description="Nodes Slurm knows: <cluster>-worker-<group>-0 to -<max-1>. Those without a pod are powered down "
        "in Slurm (sinfo shows idle~) and can be allocated: Slurm powers them up for a job, and slurmctl creates their "
        "pods.",
    )
    idle_time: Duration = Field(
        "10m",
        description="How long a node stays idle before Slurm powers it down (its partitions' SuspendTime) and "
        "slurmctl removes its pod. A node that runs a job is never powered down.",
    )
    resume_timeout: Duration = Field(
        "5m",
        description="How long Slurm waits for a powered-up node's slurmd (its partitions' ResumeTimeout). A pod that "
        "cannot be placed or started in that time leaves its node DOWN with reason 'ResumeTimeout reached' (its jobs "
        "requeued) and is removed; WorkersReady names the group and the scheduler's reason, and slurmctl resumes the "
        "node after max(resumeTimeout, 60s), doubled for each failure in a row (at most an hour).",
    )


class WorkerGroup(Scheduling):
    """A group of identical worker nodes (slurmd), one StatefulSet <cluster>-worker-<name>."""

    name: str = Field(
        max_length=MAX_GROUP_NAME_LENGTH,
        pattern=DNS_LABEL_PATTERN,
        description=f"Group name: a DNS label of at most {MAX_GROUP_NAME_LENGTH} characters; pods are "
        "<cluster>-worker-<name>-<ordinal>.",
    )
    size: int = Field(
        1,
        ge=0,
        le=MAX_GROUP_SIZE,
        description=f"Number of worker nodes in the group (0 to {MAX_GROUP_SIZE}); edit it to scale.",
    )
    image: str | None = image_field("worker")
    resources: ResourceRequirements = Field(
        default_factory=ResourceRequirements,
        description="Compute resources of each slurmd container; CPUs and memory become the Slurm node's size.",
    )
    gpus: int = Field(
        0,
        ge=0,
        le=MAX_GPUS_PER_WORKER,
        description="NVIDIA GPUs per node (nvidia.com/gpu); 0 means a CPU-only group.",
    )
    features: list[Feature] = Field(
        default_factory=list,
        max_length=32,
        description="Slurm node features of the group's nodes, usable in --constraint (e.g. h100).",
        json_schema_extra=LIST_SET,
    )
    shared_memory_size: Quantity | None = Field(
        None, description="Size limit of /dev/shm on these nodes; empty means spec.jail.sharedMemorySize."
    )
    job_tmp: JobTmp = Field(
        default_factory=JobTmp,
        description="Size limits of each job's private /tmp and /dev/shm on these nodes; an empty field means "
        "spec.jail.jobTmp's.",
    )
    drain_timeout: Duration | None = Field(
        None,
        description="How long a node that must go (scale-in, group removal, pod re-creation) stays drained while "
        "jobs still run on it, e.g. 2h; after that its pod goes and the jobs are killed. Empty means wait for the "
        "jobs forever.",
    )
    replace_unhealthy: bool = Field(
        False,
        description="Move a worker drained by one of slurmctl's own health checks (reason starting slurmctl-gpu: or "
        "slurmctl-nccl:, never an administrator's drain) off its Kubernetes node once it runs no job: the node is "
        "cordoned and labelled slurm.slurmctl.io/unhealthy=gpu or nccl (with the Slurm reason in the "
        "slurm.slurmctl.io/unhealthy-reason annotation; it stays cordoned until an administrator uncordons it) and "
        "the pod is deleted, so that its StatefulSet re-creates it on another node. One pod of the group at a time, "
        "and none while another pod of the group is not Ready; nothing while Slurm cannot be asked.",
    )

    autoscale: Autoscale | None = Field(
        None,
        description="Make the group elastic: its pods exist only while Slurm has work for them (Slurm's power saving, "
        "see Autoscale). `size` is then ignored. Without it the group has exactly `size` nodes, as always.",
    )

    @property
    def is_gpu(self) -> bool:
        return self.gpus > 0

    @property
    def node_count(self) -> int:
        """The nodes Slurm knows for this group: its size, or an elastic group's maximum."""
        return self.autoscale.max if self.autoscale else self.size


class Partition(ApiModel):
    """A Slurm partition: a named set of worker groups that jobs are submitted to."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            Rule(
                "self.name != 'default'",
                message='Slurm reserves "default" (PartitionName=DEFAULT sets defaults for every partition); '
                "choose another name",
                field_path=".name",
                reason="FieldValueForbidden",
            )
        )
    )

    name: str = Field(
        max_length=40, pattern=DNS_LABEL_PATTERN, description="Partition name (DNS label, at most 40 characters)."
    )
    workers: list[GroupName] = Field(
        default_factory=list,
        max_length=MAX_WORKER_GROUPS,
        description="Names of the worker groups in the partition; empty means every group.",
        json_schema_extra=LIST_SET,
    )
    default: bool = Field(False, description="Jobs that name no partition go here; exactly one partition is default.")
    options: dict[str, OptionValue] = Field(
        default_factory=dict,
        max_length=MAX_PARTITION_OPTIONS,
        description="Further partition options as Slurm spells them, e.g. {MaxTime: '24:00:00'}; not the keys "
        "slurmctl writes itself (PartitionName, Nodes, Default) nor node keywords such as NodeName.",
    )
