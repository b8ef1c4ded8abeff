"""Default values and limits of the SlurmCluster API, each in one place.

The image tag equals the operator's version (`slurmctl.__version__`, checked by a unit test) so a cluster that leaves
its images unset always runs the images built with the operator that manages it. The tag is deliberately *not* a
schema default: a default stored in the object would pin old images across operator upgrades.
"""

from __future__ import annotations

from typing import Final, Literal

IMAGE_REGISTRY: Final = "ghcr.io/slurmctl"
IMAGE_TAG: Final = "0.1.0"

Component = Literal[
    "controller", "worker", "login", "accounting", "rest", "jail", "populate-jail", "nccl-benchmark", "operator", "sssd"
]
COMPONENTS: Final[tuple[Component, ...]] = (
    "controller",
    "worker",
    "login",
    "accounting",
    "rest",
    "jail",
    "populate-jail",
    "nccl-benchmark",
    "operator",
)

DEFAULT_PARTITION: Final = "main"

# Name budget: the StatefulSet `<cluster>-worker-<group>` must stay within 52 characters (its pods carry the label
# controller-revision-hash=<statefulset>-<10 char hash>, at most 63), and pods `<...>-<ordinal>` within 63.
MAX_CLUSTER_NAME_LENGTH: Final = 24
MAX_GROUP_NAME_LENGTH: Final = 20
# spec.jwtKeyRotation: a request value (a date, a ticket id), copied onto the key Secret as an annotation.
MAX_JWT_KEY_ROTATION_LENGTH: Final = 63
MAX_GROUP_SIZE: Final = 1000  # ordinals stay within three digits
# Worker nodes of one cluster, summed over its groups: slurm.conf's MaxNodeCount (render/slurm_conf.py), the size of
# slurmctld's node table. The 10,240-worker scale bench (docs/performance.md) runs under it with room for its edits.
MAX_TOTAL_WORKERS: Final = 16_384
MAX_WORKER_GROUPS: Final = 64
MAX_PARTITIONS: Final = 64
MAX_LOGIN_SIZE: Final = 16
MAX_GPUS_PER_WORKER: Final = 16
MAX_PARTITION_OPTIONS: Final = 64
MAX_EXTRA_CONFIG_LENGTH: Final = 65_536
MAX_OPTION_NAME_LENGTH: Final = 64
# authorized_keys lands in the <c>-sshd ConfigMap: 64 keys of 8 KiB (an RSA-16384 key is under 3 KiB) stay far below
# the 1 MiB a ConfigMap holds.
MAX_SSH_KEYS: Final = 64
MAX_SSH_KEY_LENGTH: Final = 8192
# Levels of spec.topology.tree (Slurm itself refuses a switch tree deeper than 20).
MAX_TOPOLOGY_LEVELS: Final = 8
# Switches topology.conf names at most (the root and the catch-all aside): nodes that would add more go to the
# catch-all, so that topology.conf stays within its ConfigMap however the nodes are labelled.
MAX_TOPOLOGY_SWITCHES: Final = 1024


def default_image(component: Component, *, registry: str = IMAGE_REGISTRY, tag: str = IMAGE_TAG) -> str:
    """`<registry>/<component>:<tag>`, the image a component runs when the spec names none."""
    return f"{registry.rstrip('/')}/{component}:{tag}"


# slurm.conf keys whose values are slurmctl's contract with its own pods (names, ports, users, paths in the images, the
# munge and chroot plugins) or that would switch its guarantees off (PlugStackConfig=/dev/null turns the jail off,
# another JobContainerType lets sbcast write outside it;
# Include and node or partition records bypass the generated ones). spec.slurm.extraConfig may not set them unless
# spec.slurm.allowOperatorOwnedKeys is true. Spelled as render/slurm_conf.py writes them; Slurm compares keys
# without regard to case.
OPERATOR_OWNED_SLURM_KEYS: Final = (
    "ClusterName",
    "SlurmctldHost",
    "ControlMachine",
    "ControlAddr",
    "BackupController",
    "BackupAddr",
    "SlurmctldAddr",
    "SlurmctldPort",
    "SlurmdPort",
    "AuthType",
    "AuthAltTypes",
    "AuthAltParameters",
    "AuthInfo",
    "CredType",
    "SlurmUser",
    "SlurmdUser",
    "StateSaveLocation",
    "SlurmdSpoolDir",
    "SlurmctldPidFile",
    "SlurmdPidFile",
    "PlugStackConfig",
    "JobContainerType",
    "ProctrackType",
    "Include",
    "NodeName",
    "NodeSet",
    "PartitionName",
    "DownNodes",
    "FrontendName",
)
# Owned only while the feature that writes them is on (accounting; the GPU health check on GPU groups).
ACCOUNTING_SLURM_KEYS: Final = ("AccountingStorageType", "AccountingStorageHost", "AccountingStoragePort")
GPU_HEALTH_CHECK_SLURM_KEYS: Final = ("HealthCheckProgram",)
# Owned while spec.accounting declares accounts or QOS: the operator keeps limits, so enforcement is its to turn on.
LIMITS_SLURM_KEYS: Final = ("AccountingStorageEnforce",)
# Owned while spec.topology is set: another plugin would not read the topology.conf slurmctl renders (topology/block
# even stops slurmctld and slurmd on Slurm 24.11 with dynamic nodes).
TOPOLOGY_SLURM_KEYS: Final = ("TopologyPlugin",)
# Owned while a worker group is elastic (spec.workers[].autoscale): Slurm's power saving is what starts and stops
# those nodes' pods, and cloud nodes take their address from their registration (render/slurm_conf.py).
# Shortest idleTime and resumeTimeout: Slurm's power saving looks at nodes about every 10 s.
MIN_POWER_SAVE_SECONDS: Final = 20
POWER_SAVE_SLURM_KEYS: Final = (
    "SuspendProgram",
    "ResumeProgram",
    "SuspendTime",
    "SuspendTimeout",
    "ResumeTimeout",
    "SuspendExcNodes",
    "SuspendExcParts",
    "SuspendExcStates",
    "SlurmctldParameters",
)
# The TRES Slurm tracks whatever slurm.conf says (AccountingStorageTRES can only add to them).
DEFAULT_TRES: Final = ("billing", "cpu", "energy", "fs/disk", "mem", "node", "pages", "vmem")
