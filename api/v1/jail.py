"""`spec.jail` and `spec.populateJail`: the shared root filesystem user jobs and logins run in, the volumes mounted
inside it, and the one-off Job that fills it from the jail image. The checks on where a sub-mount may go are in
jail_paths.py.
"""

from __future__ import annotations

from pydantic import Field

from .cel import Rule, validations
from .fields import LIST_MAP_BY_NAME, image_field
from .types import (
    ABSOLUTE_PATH_PATTERN,
    DNS_LABEL_PATTERN,
    ApiModel,
    Quantity,
    ResourceRequirements,
    Scheduling,
    VolumeRef,
)


class SubMount(ApiModel):
    """A volume mounted inside the jail at a path, e.g. a fast scratch disk or a shared dataset."""

    name: str = Field(
        max_length=40, pattern=DNS_LABEL_PATTERN, description="Name of the sub-mount (DNS label, at most 40)."
    )
    mount_path: str = Field(
        max_length=4096, pattern=ABSOLUTE_PATH_PATTERN, description="Absolute path inside the jail to mount at."
    )
    volume: VolumeRef = Field(description="The volume to mount: an existing claim or a volume source.")
    read_only: bool = Field(False, description="Mount the volume read-only.")
    allow_setuid: bool = Field(
        False,
        description="Honour setuid programs and device nodes on this volume. Off, it is mounted nosuid and nodev: "
        "whoever can write the volume from elsewhere (an NFS client where they are root) cannot plant a way to root "
        "in the jail. Turn it on only for a volume only the cluster's administrators can write, from anywhere.",
    )


# spec.jail.jobTmp.tmpSize when neither the cluster nor the group sets it.
DEFAULT_JOB_TMP_SIZE = "10Gi"
# The smallest size either may have: below it no real program's scratch fits (and a tmpfs of 0 has no limit at all).
MIN_JOB_TMP_SIZE = 1024 * 1024


class JobTmp(ApiModel):
    """Size limits of each job's private /tmp and /dev/shm (spec.jail.privateTmp): on each worker, every job gets a
    tmpfs of its own of this size for each, shared by its steps. A write past the size fails in that job alone with
    "No space left on device" (ENOSPC); nothing reaches the node's disk. Their pages are memory and count against the
    job's memory limit (Slurm's cgroup, --mem), as /dev/shm always does: a job that fills them beyond its memory is
    ended by Slurm's out-of-memory handling, alone. A group's field left empty takes spec.jail.jobTmp's."""

    tmp_size: Quantity | None = Field(
        None,
        description=f"Size of each job's /tmp (at least 1Mi); empty means spec.jail.jobTmp.tmpSize, and there "
        f"{DEFAULT_JOB_TMP_SIZE}.",
    )
    shm_size: Quantity | None = Field(
        None,
        description="Size of each job's /dev/shm (at least 1Mi); empty means spec.jail.jobTmp.shmSize, and there the "
        "group's sharedMemorySize.",
    )


class JailSpec(ApiModel):
    """The jail: one root filesystem on a shared volume that every worker and login node uses for user jobs."""

    image: str | None = image_field("jail")
    volume: VolumeRef = Field(description="Shared (ReadWriteMany) volume holding the jail: a claim or a volume source.")
    sub_mounts: list[SubMount] = Field(
        default_factory=list,
        max_length=32,
        description="Further volumes mounted inside the jail on every worker and login node.",
        json_schema_extra={
            **LIST_MAP_BY_NAME,
            **validations(
                Rule(
                    "self.all(m, self.exists_one(n, n.mountPath == m.mountPath))",
                    message="a mountPath is mounted twice (by two sub-mounts)",
                )
            ),
        },
    )
    shared_memory_size: Quantity = Field(
        "64Gi", description="Size limit of /dev/shm (memory-backed) on every node; a worker group may override it."
    )
    private_tmp: bool = Field(
        True,
        description="Every job gets a /tmp and /dev/shm of its own on each worker, which no other job (of the same "
        "user or another) can see, shared by the job's steps and removed with all it holds when the job ends; a step "
        "that cannot have them does not run. False: all jobs on a worker share the jail's /tmp and /dev/shm.",
    )
    job_tmp: JobTmp = Field(
        default_factory=JobTmp,
        description="Size limits of each job's private /tmp and /dev/shm on every worker (with privateTmp); a worker "
        "group's jobTmp overrides them field by field.",
    )


class PopulateJailSpec(Scheduling):
    """The one-off Job that copies the jail image's root filesystem into the jail volume."""

    image: str | None = image_field("populate-jail")
    overwrite: bool = Field(
        False,
        description="Copy the image again into the populated jail, once for this generation: files still as the last "
        "populate left them are replaced by the image's and new ones added; files users changed or added, /home, /root "
        "and the account files (/etc/passwd, group, shadow, gshadow, subuid, subgid) are kept, and nothing is deleted. "
        "Safe while nodes run: each file is replaced whole (jobs may meanwhile see old and new files side by side).",
    )
    adopt: bool = Field(
        False,
        description="Populate a jail volume that already holds files but no slurmctl marker (/.slurmctl-jail-populated "
        "or /.slurmctl-jail-populating): the image's missing files are added, every file there is kept as it is, "
        "nothing is deleted. Without it such a volume is refused and left untouched (JailPopulated=False, reason "
        "JailNotEmpty).",
    )
    resources: ResourceRequirements = Field(
        default_factory=ResourceRequirements, description="Compute resources of the copying container."
    )
