"""The specs of the Slurm daemons beside the workers: the controller (slurmctld and its state volume), the login
nodes (sshd and the Service users reach it through), accounting (slurmdbd and its database, external or through
mariadb-operator, with the accounts and QOS the operator keeps) and the REST API (slurmrestd).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StringConstraints

from .cel import Rule, validations
from .defaults import MAX_LOGIN_SIZE, MAX_SSH_KEY_LENGTH, MAX_SSH_KEYS
from .fields import LIST_MAP_BY_NAME, image_field
from .limits import MAX_ACCOUNTS, MAX_QOS, AccountSpec, QosSpec
from .types import NO_WHITESPACE_PATTERN, ApiModel, Quantity, ResourceRequirements, Scheduling, SecretKeyRef

ServiceType = Literal["ClusterIP", "NodePort", "LoadBalancer"]
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
    image: str | None = image_field("controller")
    resources: ResourceRequirements = Field(
        default_factory=ResourceRequirements, description="Compute resources of the slurmctld containers."
    )
    state_volume: StateVolume = Field(
        default_factory=StateVolume, description="Persistent volume claim for slurmctld's saved state."
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
    image: str | None = image_field("login")
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
    image: str | None = image_field("accounting")
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
        json_schema_extra=LIST_MAP_BY_NAME,
    )
    qos: list[QosSpec] = Field(
        default_factory=list,
        max_length=MAX_QOS,
        description="QOS and their limits, kept in Slurm by the operator; QOS not listed here are left alone.",
        json_schema_extra=LIST_MAP_BY_NAME,
    )

    @property
    def declares_limits(self) -> bool:
        """Whether the operator keeps accounts or QOS in Slurm, and so turns enforcement on."""
        return self.enabled and bool(self.accounts or self.qos)


class RestSpec(Scheduling):
    """slurmrestd, Slurm's REST API: one pod behind the Service <cluster>-rest (port 6820). Callers authenticate with
    a JWT (`scontrol token` on a login node, or one signed with the key in the Secret <cluster>-jwt-key)."""

    enabled: bool = Field(True, description="Run slurmrestd; false removes its Deployment and Service.")
    image: str | None = image_field("rest")
    resources: ResourceRequirements = Field(
        default_factory=ResourceRequirements, description="Compute resources of the slurmrestd container."
    )
