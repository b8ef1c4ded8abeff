"""The desired state of a SlurmCluster: what a user writes under `spec`.

Every field carries a one-line description: it is what `kubectl explain slurmcluster.spec...` prints.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StringConstraints
from pydantic.config import JsonDict

from .cel import Rule, validations
from .defaults import (
    ACCOUNTING_SLURM_KEYS,
    DEFAULT_PARTITION,
    GPU_HEALTH_CHECK_SLURM_KEYS,
    IMAGE_REGISTRY,
    IMAGE_TAG,
    MAX_EXTRA_CONFIG_LENGTH,
    MAX_GPUS_PER_WORKER,
    MAX_GROUP_NAME_LENGTH,
    MAX_GROUP_SIZE,
    MAX_LOGIN_SIZE,
    MAX_PARTITION_OPTIONS,
    MAX_PARTITIONS,
    MAX_SSH_KEY_LENGTH,
    MAX_SSH_KEYS,
    MAX_TOPOLOGY_LEVELS,
    MAX_TOTAL_WORKERS,
    MAX_WORKER_GROUPS,
    OPERATOR_OWNED_SLURM_KEYS,
    TOPOLOGY_SLURM_KEYS,
    Component,
    default_image,
)
from .limits import MAX_ACCOUNTS, MAX_QOS, AccountSpec, QosSpec
from .types import (
    ABSOLUTE_PATH_PATTERN,
    DNS_LABEL_PATTERN,
    NO_WHITESPACE_PATTERN,
    ApiModel,
    Duration,
    Quantity,
    ResourceRequirements,
    Scheduling,
    SecretKeyRef,
    VolumeRef,
)

DebugLevel = Literal["quiet", "fatal", "error", "info", "verbose", "debug", "debug2", "debug3", "debug4", "debug5"]
SelectTypeParameters = Literal["CR_CPU", "CR_CPU_Memory", "CR_Core", "CR_Core_Memory", "CR_Socket", "CR_Socket_Memory"]
ServiceType = Literal["ClusterIP", "NodePort", "LoadBalancer"]

Feature = Annotated[str, StringConstraints(max_length=63, pattern=r"^[A-Za-z0-9_.-]+$")]
GroupName = Annotated[str, StringConstraints(max_length=MAX_GROUP_NAME_LENGTH, pattern=DNS_LABEL_PATTERN)]
# One token of a slurm.conf line: whitespace would start the next option, `#` a comment, control characters (NUL
# included) end or corrupt the line.
OptionValue = Annotated[str, StringConstraints(max_length=1024, pattern=r"^[^\s#\x00-\x1f\x7f]+$")]
Cidr = Annotated[str, StringConstraints(max_length=64, pattern=r"^[0-9a-fA-F:.]+/[0-9]{1,3}$")]
# One key per line: a newline inside would smuggle extra lines into authorized_keys.
SshPublicKey = Annotated[
    str,
    StringConstraints(
        max_length=MAX_SSH_KEY_LENGTH,
        pattern=r"^(ssh-(ed25519|rsa|dss)|ecdsa-sha2-nistp(256|384|521)|sk-(ssh-ed25519|ecdsa-sha2-nistp256)@openssh\.com)"
        r" [A-Za-z0-9+/=]+( [^\r\n]*)?$",
    ),
]
# A Kubernetes label key: an optional DNS-subdomain prefix and "/", then a name of at most 63 characters.
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LabelKey = Annotated[str, StringConstraints(max_length=317, pattern=LABEL_KEY_PATTERN)]
_LIST_MAP_BY_NAME: JsonDict = {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}
_LIST_SET: JsonDict = {"x-kubernetes-list-type": "set"}


def _image_field(component: Component) -> Any:
    return Field(
        None,
        max_length=512,
        pattern=NO_WHITESPACE_PATTERN,
        description=f"Container image; empty means {IMAGE_REGISTRY}/{component}:<operator version>"
        " (registry and tag from spec.slurm).",
    )


class SlurmConfig(ApiModel):
    """Common slurm.conf keys with types; unset keys keep slurmctl's (or Slurm's) defaults."""

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
        "primary before it takes control (slurmctl's default 120).",
    )
    slurmctld_debug: DebugLevel | None = Field(None, description="SlurmctldDebug: slurmctld's log level.")
    slurmd_debug: DebugLevel | None = Field(None, description="SlurmdDebug: slurmd's log level.")

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
            "slurmctld_debug": "SlurmctldDebug",
            "slurmd_debug": "SlurmdDebug",
        }
        values = ((key, getattr(self, field)) for field, key in names.items())
        return {key: str(value) for key, value in values if value is not None}


class SlurmSpec(ApiModel):
    """Slurm itself: where images come from, and slurm.conf overrides. The Slurm version is the one the images carry
    (24.11 for slurmctl's own); the rendered configuration targets it, so there is no separate version field."""

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
        description="Tag of the default images; empty means the operator's own version, so upgrades roll images.",
    )
    cgroup_version: Literal["auto", "v1", "v2"] = Field(
        "auto",
        description=(
            "cgroup version of the worker nodes' kernels, for cgroup.conf: auto lets slurmd detect it on each node "
            "(CgroupPlugin=autodetect), which suits clusters that mix kernels; v1 or v2 force a plugin."
        ),
    )
    config: SlurmConfig = Field(
        default_factory=SlurmConfig, description="Typed slurm.conf keys that override slurmctl's defaults."
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


class JailSpec(ApiModel):
    """The jail: one root filesystem on a shared volume that every worker and login node uses for user jobs."""

    image: str | None = _image_field("jail")
    volume: VolumeRef = Field(description="Shared (ReadWriteMany) volume holding the jail: a claim or a volume source.")
    sub_mounts: list[SubMount] = Field(
        default_factory=list,
        max_length=32,
        description="Further volumes mounted inside the jail on every worker and login node.",
        json_schema_extra={
            **_LIST_MAP_BY_NAME,
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


class PopulateJailSpec(Scheduling):
    """The one-off Job that copies the jail image's root filesystem into the jail volume."""

    image: str | None = _image_field("populate-jail")
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


class StateVolume(ApiModel):
    """The claim holding slurmctld's StateSaveLocation; it outlives the cluster (slurmctl never deletes it)."""

    size: Quantity = Field("1Gi", description="Requested capacity of the state volume claim.")
    storage_class_name: str | None = Field(
        None, max_length=253, description="Storage class of the claim; empty means the cluster's default class."
    )
    access_mode: Literal["ReadWriteOnce", "ReadWriteMany"] = Field(
        "ReadWriteOnce",
        description="Access mode of the claim, fixed when the claim is created (a StatefulSet's claim template and a "
        "claim's access modes cannot change). A standby controller (spec.controller.standby) mounts the same claim "
        "from another node: choose ReadWriteMany, on a storage class that provides it (NFS, CephFS, ...).",
    )


class ControllerSpec(Scheduling):
    """slurmctld, the Slurm controller."""

    size: int = Field(
        1, ge=0, le=1, description="Number of slurmctld pods: 1, or 0 to stop the controller for maintenance."
    )
    standby: bool = Field(
        False,
        description="Run a second slurmctld, Slurm's backup controller, in the pod <cluster>-controller-backup-0 "
        "(StatefulSet <cluster>-controller-backup, preferably on another Kubernetes node). It mounts the primary's "
        "state claim (state-<cluster>-controller-0) and takes control when the primary has not answered for "
        "SlurmctldTimeout (spec.slurm.config.slurmctldTimeout); the primary takes control back when it returns. The "
        "claim must be mountable from two nodes at once (ReadWriteMany, see stateVolume.accessMode). Turning it on "
        "or off restarts slurmctld once (its state saved first).",
    )
    image: str | None = _image_field("controller")
    resources: ResourceRequirements = Field(
        default_factory=ResourceRequirements, description="Compute resources of the slurmctld containers."
    )
    state_volume: StateVolume = Field(
        default_factory=StateVolume, description="Persistent volume claim for slurmctld's saved state."
    )


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
        "requeued) and is removed; the WorkersScheduled condition names the group and the scheduler's reason.",
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
    image: str | None = _image_field("worker")
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
        json_schema_extra=_LIST_SET,
    )
    shared_memory_size: Quantity | None = Field(
        None, description="Size limit of /dev/shm on these nodes; empty means spec.jail.sharedMemorySize."
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
        json_schema_extra=_LIST_SET,
    )
    default: bool = Field(False, description="Jobs that name no partition go here; exactly one partition is default.")
    options: dict[str, OptionValue] = Field(
        default_factory=dict,
        max_length=MAX_PARTITION_OPTIONS,
        description="Further partition options as Slurm spells them, e.g. {MaxTime: '24:00:00'}; not the keys "
        "slurmctl writes itself (PartitionName, Nodes, Default) nor node keywords such as NodeName.",
    )


class LoginService(ApiModel):
    """The Service users reach the login nodes' sshd through."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            Rule(
                "!has(self.nodePort) || self.type != 'ClusterIP'",
                message="needs type NodePort or LoadBalancer",
                field_path=".nodePort",
                reason="FieldValueForbidden",
            ),
            Rule(
                "!has(self.loadBalancerIP) || self.type == 'LoadBalancer'",
                message="needs type LoadBalancer",
                field_path=".loadBalancerIP",
                reason="FieldValueForbidden",
            ),
            Rule(
                "!has(self.loadBalancerSourceRanges) || size(self.loadBalancerSourceRanges) == 0"
                " || self.type == 'LoadBalancer'",
                message="needs type LoadBalancer",
                field_path=".loadBalancerSourceRanges",
                reason="FieldValueForbidden",
            ),
        )
    )

    type: ServiceType = Field(
        "ClusterIP",
        description="Service type; ClusterIP by default so that sshd is exposed outside only when asked for.",
    )
    port: int = Field(22, ge=1, le=65_535, description="Port the Service listens on for SSH.")
    annotations: dict[str, str] = Field(
        default_factory=dict, description="Annotations of the Service, e.g. for a cloud load balancer."
    )
    load_balancer_ip: str | None = Field(
        None,
        alias="loadBalancerIP",
        max_length=64,
        pattern=NO_WHITESPACE_PATTERN,
        description="Requested load balancer IP address (type LoadBalancer only).",
    )
    load_balancer_source_ranges: list[Cidr] = Field(
        default_factory=list,
        max_length=64,
        description="CIDRs allowed to reach the load balancer (type LoadBalancer only).",
    )
    node_port: int | None = Field(
        None, ge=30_000, le=32_767, description="Fixed node port for SSH (types NodePort and LoadBalancer only)."
    )


class LoginSpec(Scheduling):
    """Login nodes: sshd whose sessions run inside the jail."""

    size: int = Field(1, ge=0, le=MAX_LOGIN_SIZE, description=f"Number of login nodes (0 to {MAX_LOGIN_SIZE}).")
    image: str | None = _image_field("login")
    resources: ResourceRequirements = Field(
        default_factory=ResourceRequirements, description="Compute resources of each sshd container."
    )
    service: LoginService = Field(default_factory=LoginService, description="How users reach the login nodes.")
    ssh_root_public_keys: list[SshPublicKey] = Field(
        default_factory=list,
        max_length=MAX_SSH_KEYS,
        description="OpenSSH public keys (one line each) allowed to log in as root.",
    )
    ssh_to_job_nodes: bool = Field(
        False,
        description="Run sshd on every worker too, reachable from the login nodes only, admitting a user only while "
        "they have a job on that worker (pam_slurm_adopt: the session joins the job's cgroup and ends with it). "
        "Sessions land in the jail, with the login nodes' sshd settings, keys and host keys. Off by default: it "
        "mounts the login nodes' host keys into every worker.",
    )


class ExternalDatabase(ApiModel):
    """A MySQL/MariaDB server run outside this SlurmCluster."""

    host: str = Field(
        min_length=1, max_length=253, pattern=NO_WHITESPACE_PATTERN, description="Host name or address of the server."
    )
    port: int = Field(3306, ge=1, le=65_535, description="TCP port of the server.")
    user: str = Field(
        min_length=1, max_length=80, pattern=NO_WHITESPACE_PATTERN, description="Database user slurmdbd logs in as."
    )
    database: str = Field(
        "slurm_acct_db",
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_$]+$",
        description="Database slurmdbd keeps accounting data in.",
    )
    password_secret_ref: SecretKeyRef = Field(description="Secret key holding the database user's password.")


class MariaDBStorage(ApiModel):
    """The volume of the MariaDB server created through mariadb-operator."""

    size: Quantity = Field("10Gi", description="Requested capacity of the database volume.")
    storage_class_name: str | None = Field(
        None, max_length=253, description="Storage class of the volume; empty means the cluster's default class."
    )


class MariaDBSpec(ApiModel):
    """A MariaDB server created through mariadb-operator (which must be installed in the cluster)."""

    enabled: bool = Field(False, description="Create a MariaDB resource for accounting through mariadb-operator.")
    image: str | None = Field(
        None,
        max_length=512,
        pattern=NO_WHITESPACE_PATTERN,
        description="MariaDB server image; empty lets mariadb-operator choose.",
    )
    storage: MariaDBStorage = Field(default_factory=MariaDBStorage, description="Volume of the database server.")
    resources: ResourceRequirements = Field(
        default_factory=ResourceRequirements, description="Compute resources of the database server."
    )


class AccountingSpec(Scheduling):
    """Slurm accounting (slurmdbd) and the database behind it: an external server or one through mariadb-operator."""

    # `.?enabled.orValue(false)`, not `.enabled`: the API server checks the schema's default for this node, `{}`,
    # against these rules as it stands, before the fields' own defaults would fill it in.
    model_config = ConfigDict(
        json_schema_extra=validations(
            Rule(
                "!self.?enabled.orValue(false) || has(self.external) || self.?mariadb.?enabled.orValue(false)",
                message="accounting is enabled but neither external nor mariadb.enabled is set",
                reason="FieldValueRequired",
            ),
            Rule(
                "!self.?enabled.orValue(false) || !has(self.external) || !self.?mariadb.?enabled.orValue(false)",
                message="set either external or mariadb.enabled, not both",
                reason="FieldValueForbidden",
            ),
            Rule(
                "self.?enabled.orValue(false) || ((!has(self.accounts) || size(self.accounts) == 0)"
                " && (!has(self.qos) || size(self.qos) == 0))",
                message="accounts and qos need accounting: set enabled: true",
                reason="FieldValueForbidden",
            ),
            Rule(
                "!has(self.accounts) || self.accounts.all(a, a.parent == 'root'"
                " || self.accounts.exists(b, b.name == a.parent))",
                message="unknown parent account (root or one declared here)",
                field_path=".accounts",
            ),
            # sets.contains, not `all` within `all` within `exists`: 256 accounts by 64 QOS by 64 declared QOS that
            # way is estimated at 3.5 times the cost the API server allows a rule.
            Rule(
                "!has(self.accounts) || self.accounts.all(a, !has(a.qos)"
                " || sets.contains(['normal'] + (has(self.qos) ? self.qos.map(q, q.name) : []), a.qos))",
                message="unknown QOS in accounts[].qos (normal or one declared here)",
                field_path=".accounts",
            ),
            Rule(
                "!has(self.accounts) || self.accounts.all(a, !has(a.defaultQos)"
                " || (has(a.qos) && size(a.qos) > 0 ? a.defaultQos in a.qos : a.defaultQos == 'normal'"
                " || (has(self.qos) && self.qos.exists(q, q.name == a.defaultQos))))",
                message="an account's defaultQos is one of its qos (normal or one declared here if it lists none)",
                field_path=".accounts",
            ),
        )
    )

    enabled: bool = Field(False, description="Run slurmdbd and record accounting; needs external or mariadb.")
    image: str | None = _image_field("accounting")
    resources: ResourceRequirements = Field(
        default_factory=ResourceRequirements, description="Compute resources of the slurmdbd container."
    )
    external: ExternalDatabase | None = Field(None, description="An existing database server to use.")
    mariadb: MariaDBSpec | None = Field(None, description="A database server created through mariadb-operator.")
    accounts: list[AccountSpec] = Field(
        default_factory=list,
        max_length=MAX_ACCOUNTS,
        description="Accounts, their users and limits, kept in Slurm by the operator. Declaring accounts or QOS "
        "turns enforcement on (AccountingStorageEnforce=associations,limits,qos): users then need an account to run "
        "jobs. Accounts not listed here (created with sacctmgr) are left alone.",
        json_schema_extra=_LIST_MAP_BY_NAME,
    )
    qos: list[QosSpec] = Field(
        default_factory=list,
        max_length=MAX_QOS,
        description="QOS and their limits, kept in Slurm by the operator; QOS not listed here are left alone.",
        json_schema_extra=_LIST_MAP_BY_NAME,
    )

    @property
    def declares_limits(self) -> bool:
        """Whether the operator keeps accounts or QOS in Slurm, and so turns enforcement on."""
        return self.enabled and bool(self.accounts or self.qos)


class RestSpec(Scheduling):
    """slurmrestd, Slurm's REST API: one pod behind the Service <cluster>-rest (port 6820). Callers authenticate with
    a JWT (`scontrol token` on a login node, or one signed with the key in the Secret <cluster>-jwt-key)."""

    enabled: bool = Field(True, description="Run slurmrestd; false removes its Deployment and Service.")
    image: str | None = _image_field("rest")
    resources: ResourceRequirements = Field(
        default_factory=ResourceRequirements, description="Compute resources of the slurmrestd container."
    )


class GpuHealthCheck(ApiModel):
    """The quick GPU check slurmd runs as HealthCheckProgram on GPU nodes."""

    enabled: bool = Field(True, description="Run the check on nodes of groups with GPUs; failing nodes are drained.")
    interval_seconds: int = Field(60, ge=10, le=86_400, description="HealthCheckInterval: seconds between checks.")


class NcclBenchmark(ApiModel):
    """A periodic NCCL all_reduce_perf run on every GPU node that drains nodes below a bandwidth threshold."""

    enabled: bool = Field(False, description="Create the benchmark CronJob (needs a worker group with GPUs).")
    schedule: str = Field(
        "0 */3 * * *",
        max_length=128,
        pattern=r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|\S+( +\S+){4})$",
        description="Cron schedule of the benchmark, e.g. '0 */3 * * *'.",
    )
    image: str | None = _image_field("nccl-benchmark")
    min_bus_bandwidth_gbps: float = Field(
        0.0,
        ge=0,
        alias="minBusBandwidthGBps",
        description="Required average bus bandwidth in GB/s; 0 only checks that the benchmark runs.",
    )
    drain_on_failure: bool = Field(True, description="Drain a node whose run fails or is below the threshold.")
    min_bytes: Quantity = Field("512Mi", description="Smallest message size of all_reduce_perf (-b).")
    max_bytes: Quantity = Field("8Gi", description="Largest message size of all_reduce_perf (-e).")
    step_factor: int = Field(2, ge=2, le=1024, description="Factor between message sizes (-f).")
    timeout_seconds: int = Field(
        1800, ge=60, le=86_400, description="Seconds a benchmark run may take before it counts as failed."
    )


class HealthChecks(ApiModel):
    """Checks that find broken GPU nodes and drain them."""

    gpu: GpuHealthCheck = Field(default_factory=GpuHealthCheck, description="Quick GPU check on every GPU node.")
    nccl_benchmark: NcclBenchmark = Field(
        default_factory=NcclBenchmark, description="Periodic NCCL bandwidth benchmark."
    )


class PyxisPlugin(ApiModel):
    """NVIDIA's pyxis SPANK plugin (`srun --container-image`, with enroot), for worker and jail images that bring it:
    slurmctl's own images do not (neither is packaged by Debian). Its plugstack.conf line comes after the jail's."""

    enabled: bool = Field(False, description="Load pyxis from plugstack.conf (the images must contain it).")
    path: str = Field(
        "spank_pyxis.so",
        max_length=1024,
        pattern=r"^[^\s#\x00-\x1f\x7f]+$",
        description="The plugin: an absolute path, or a file name in Slurm's PluginDir.",
    )
    required: bool = Field(
        True, description="required: a plugin that fails to load fails the job; optional: the job runs without it."
    )
    arguments: dict[str, OptionValue] = Field(
        default_factory=lambda: {"container_scope": "global", "execute_entrypoint": "0", "sbatch_support": "1"},
        max_length=32,
        description="Plugin arguments as key=value (pyxis: runtime_path, remap_root, execute_entrypoint, "
        "container_scope, sbatch_support, ...).",
    )


class ContainersSpec(ApiModel):
    """Container jobs. With `enabled`, Slurm's own OCI support runs `srun --container=<bundle>`: the bundle (an OCI
    runtime bundle, config.json + rootfs) lives in the jail, and crun from the jail runs it as the job's user, rootless
    (its own user namespace: container root is the user outside). Off by default."""

    enabled: bool = Field(False, description="Render oci.conf so that `srun --container=<bundle>` runs OCI bundles.")
    pyxis: PyxisPlugin = Field(
        default_factory=PyxisPlugin, description="The pyxis SPANK plugin, for images that bring pyxis and enroot."
    )


class TopologyTree(ApiModel):
    """A switch hierarchy read from node labels: one level per label, the topmost first."""

    levels: list[LabelKey] = Field(
        min_length=1,
        max_length=MAX_TOPOLOGY_LEVELS,
        description="Node label keys from the top of the network to the leaf switches, e.g. "
        "[topology.kubernetes.io/zone, example.com/switch]: nodes with the same values share a switch.",
        json_schema_extra=_LIST_SET,
    )


class TopologyBlock(ApiModel):
    """Blocks of nodes with a fast interconnect (e.g. NVLink domains) read from one node label."""

    label: LabelKey = Field(
        description="Node label key whose value names a node's block, e.g. nvidia.com/gpu.clique. On Slurm 24.11 "
        "it is rendered as a one-level topology/tree (a switch per block): topology/block cannot run with dynamic "
        "nodes there.",
    )


class TopologySpec(ApiModel):
    """Slurm's network topology (topology.conf), rendered from the labels of the Kubernetes nodes the workers run on
    and updated in place when pods move. Exactly one of tree and block."""

    model_config = ConfigDict(**ApiModel.model_config, json_schema_extra={"minProperties": 1, "maxProperties": 1})

    tree: TopologyTree | None = Field(None, description="A switch hierarchy (topology/tree) from node labels.")
    block: TopologyBlock | None = Field(None, description="Blocks of nodes from one node label.")

    @property
    def levels(self) -> tuple[str, ...]:
        """The label keys of the switch levels, top first (a block label is one level)."""
        if self.tree is not None:
            return tuple(self.tree.levels)
        return (self.block.label,) if self.block is not None else ()


def _default_partitions() -> list[Partition]:
    return [Partition(name=DEFAULT_PARTITION, default=True)]


# The nodes Slurm knows per group (WorkerGroup.node_count), summed.
_TOTAL_WORKERS = "self.map(g, has(g.autoscale) ? g.autoscale.max : g.size).sum()"


class SlurmClusterSpec(ApiModel):
    """The desired Slurm cluster: its controller, worker groups, partitions, login nodes, accounting and checks."""

    # Rules across top-level fields sit here, the lowest node that sees all they compare; the API server names the
    # list they point at (fieldPath), where validation.py names the item at fault, which no fieldPath can index.
    model_config = ConfigDict(
        json_schema_extra=validations(
            Rule(
                "self.rest.enabled || !self.workers.exists(g, has(g.autoscale))",
                message="an elastic group needs slurmrestd (spec.rest.enabled): it follows Slurm's power states",
                field_path=".workers",
            ),
            Rule(
                "!has(self.topology) || !self.workers.exists(g, has(g.autoscale))",
                message="an elastic group cannot be combined with spec.topology yet (its powered-down nodes have no "
                "place in topology.conf)",
                field_path=".workers",
            ),
            Rule(
                "self.partitions.all(p, !has(p.workers) || p.workers.all(w, self.workers.exists(g, g.name == w)))",
                message="unknown worker group in partitions[].workers: each is a group of spec.workers",
                field_path=".partitions",
            ),
            Rule(
                "!self.healthChecks.ncclBenchmark.enabled || self.workers.exists(g, g.gpus > 0)",
                message="the NCCL benchmark needs a worker group with gpus > 0",
                field_path=".healthChecks.ncclBenchmark.enabled",
            ),
        )
    )

    slurm: SlurmSpec = Field(default_factory=SlurmSpec, description="Slurm version, images and slurm.conf overrides.")
    jail: JailSpec = Field(description="The shared root filesystem user jobs and logins run in.")
    populate_jail: PopulateJailSpec = Field(
        default_factory=PopulateJailSpec, description="The Job that fills the jail volume."
    )
    controller: ControllerSpec = Field(default_factory=ControllerSpec, description="The Slurm controller (slurmctld).")
    workers: list[WorkerGroup] = Field(
        min_length=1,
        max_length=MAX_WORKER_GROUPS,
        description="Worker groups, one per kind of node; names are unique.",
        json_schema_extra={
            **_LIST_MAP_BY_NAME,
            **validations(
                Rule(
                    f"{_TOTAL_WORKERS} <= {MAX_TOTAL_WORKERS}",
                    message=f"worker nodes in total (size, or autoscale.max, of every group) exceed the maximum of "
                    f"{MAX_TOTAL_WORKERS}",
                )
            ),
        },
    )
    partitions: list[Partition] = Field(
        default_factory=_default_partitions,
        min_length=1,
        max_length=MAX_PARTITIONS,
        description=f"Slurm partitions; by default one partition {DEFAULT_PARTITION!r} with every worker group.",
        json_schema_extra={
            **_LIST_MAP_BY_NAME,
            **validations(
                Rule(
                    "self.exists_one(p, p.default)",
                    message="exactly one partition has default: true",
                    message_expression="self.exists(p, p.default) ? 'more than one default partition (exactly one "
                    "must)' : 'no partition has default: true (exactly one must)'",
                )
            ),
        },
    )
    login: LoginSpec = Field(default_factory=LoginSpec, description="Login nodes users reach over SSH.")
    accounting: AccountingSpec = Field(default_factory=AccountingSpec, description="Slurm accounting (slurmdbd).")
    rest: RestSpec = Field(default_factory=RestSpec, description="Slurm's REST API (slurmrestd).")
    containers: ContainersSpec = Field(
        default_factory=ContainersSpec, description="Container jobs (Slurm's OCI support; pyxis for images with it)."
    )
    health_checks: HealthChecks = Field(default_factory=HealthChecks, description="GPU health checks.")
    topology: TopologySpec | None = Field(
        None,
        description="Slurm's network topology from node labels (tree levels or a block label); empty means none.",
    )

    def image_for(self, component: Component, override: str | None = None) -> str:
        """The image a component runs: the spec's own choice, else the default from spec.slurm."""
        if override:
            return override
        return default_image(component, registry=self.slurm.image_registry, tag=self.slurm.image_tag or IMAGE_TAG)

    def worker_group(self, name: str) -> WorkerGroup | None:
        return next((group for group in self.workers if group.name == name), None)

    def partition_workers(self, partition: Partition) -> list[str]:
        """The worker groups of a partition, resolving the empty list to every group (in spec order)."""
        return list(partition.workers) if partition.workers else [group.name for group in self.workers]

    def shared_memory_size(self, group: WorkerGroup) -> Quantity:
        return group.shared_memory_size if group.shared_memory_size is not None else self.jail.shared_memory_size

    @property
    def gpu_groups(self) -> list[WorkerGroup]:
        return [group for group in self.workers if group.is_gpu]

    @property
    def elastic_groups(self) -> list[WorkerGroup]:
        return [group for group in self.workers if group.autoscale is not None]
