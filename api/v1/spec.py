"""The desired state of a SlurmCluster: what a user writes under `spec`.

Every field carries a one-line description: it is what `kubectl explain slurmcluster.spec...` prints.

This module holds the top of the tree, SlurmClusterSpec, and the rules that compare its parts; the parts live in
modules named for what they hold: slurm_spec.py (images and slurm.conf), jail.py, workers.py (worker groups,
autoscaling, partitions), components.py (controller, login, accounting, REST API), health_checks.py, containers.py
topology.py and identity.py, with the field helpers they share in fields.py.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field

from .cel import Rule, validations
from .components import AccountingSpec, ControllerSpec, LoginSpec, RestSpec
from .containers import ContainersSpec
from .defaults import (
    DEFAULT_PARTITION,
    IMAGE_TAG,
    MAX_JWT_KEY_ROTATION_LENGTH,
    MAX_PARTITIONS,
    MAX_TOTAL_WORKERS,
    MAX_WORKER_GROUPS,
    Component,
    default_image,
)
from .fields import LIST_MAP_BY_NAME
from .health_checks import HealthChecks
from .identity import Identity
from .jail import DEFAULT_JOB_TMP_SIZE, JailSpec, PopulateJailSpec
from .maintenance import MaintenanceSpec
from .slurm_spec import SlurmSpec
from .slurm_version import IMAGE_TAG_SUFFIX
from .topology import TopologySpec
from .types import ApiModel, Quantity, ResourceRequirements, Scheduling
from .workers import Partition, WorkerGroup


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
            **LIST_MAP_BY_NAME,
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
            **LIST_MAP_BY_NAME,
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
    # A request, kept in the spec rather than an annotation: changing it is a new generation, so the phase reads the
    # controller's restart as the rollout of a change (Reconciling), not as a failure of what was Available.
    jwt_key_rotation: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_JWT_KEY_ROTATION_LENGTH,
        description="Set to a value not used before (a date, a ticket) to replace the cluster's JWT key once for it: "
        "slurmctld and slurmdbd restart with the new key (running jobs go on) and every token signed with the old one "
        "is refused. status.jwtKeyRotation names the value the key in use was made for.",
    )
    containers: ContainersSpec = Field(
        default_factory=ContainersSpec, description="Container jobs (Slurm's OCI support; pyxis for images with it)."
    )
    health_checks: HealthChecks = Field(default_factory=HealthChecks, description="GPU health checks.")
    maintenance: MaintenanceSpec = Field(
        default_factory=MaintenanceSpec,
        description="Maintenance windows: when changes that restart Slurm daemons' pods are applied.",
    )
    topology: TopologySpec | None = Field(
        None,
        description="Slurm's network topology from node labels (tree levels or a block label); empty means none.",
    )
    identity: Identity = Field(
        default_factory=Identity,
        description="Users and groups the operator declares in the jail (beside those made there by hand), and an "
        "LDAP directory every node resolves users from.",
    )

    def image_for(self, component: Component, override: str | None = None) -> str:
        """The image a component runs: the spec's own choice, else the default from spec.slurm."""
        if override:
            return override
        tag = self.slurm.image_tag or IMAGE_TAG + IMAGE_TAG_SUFFIX[self.slurm.version]
        return default_image(component, registry=self.slurm.image_registry, tag=tag)

    def components_with_pods(self, path: str = "spec") -> list[tuple[str, Scheduling, ResourceRequirements]]:
        """(field, pod settings, resources) of every component that has pods: the one list the checks of placement,
        pod metadata and resources walk (api/v1/passthrough.py, api/v1/policy.py)."""
        return [
            (f"{path}.populateJail", self.populate_jail, self.populate_jail.resources),
            (f"{path}.controller", self.controller, self.controller.resources),
            *((f"{path}.workers[{i}]", group, group.resources) for i, group in enumerate(self.workers)),
            (f"{path}.login", self.login, self.login.resources),
            (f"{path}.accounting", self.accounting, self.accounting.resources),
            (f"{path}.rest", self.rest, self.rest.resources),
            (
                f"{path}.healthChecks.ncclBenchmark",
                self.health_checks.nccl_benchmark,
                self.health_checks.nccl_benchmark.resources,
            ),
        ]

    def worker_group(self, name: str) -> WorkerGroup | None:
        return next((group for group in self.workers if group.name == name), None)

    def partition_workers(self, partition: Partition) -> list[str]:
        """The worker groups of a partition, resolving the empty list to every group (in spec order)."""
        return list(partition.workers) if partition.workers else [group.name for group in self.workers]

    def shared_memory_size(self, group: WorkerGroup) -> Quantity:
        return group.shared_memory_size if group.shared_memory_size is not None else self.jail.shared_memory_size

    def job_tmp_sizes(self, group: WorkerGroup) -> tuple[Quantity, Quantity]:
        """The sizes of each job's /tmp and /dev/shm on the group's nodes: the group's, else the cluster's, else
        DEFAULT_JOB_TMP_SIZE and the group's /dev/shm size."""
        mine, cluster = group.job_tmp, self.jail.job_tmp
        tmp = next(s for s in (mine.tmp_size, cluster.tmp_size, DEFAULT_JOB_TMP_SIZE) if s is not None)
        shm = next(s for s in (mine.shm_size, cluster.shm_size, self.shared_memory_size(group)) if s is not None)
        return tmp, shm

    @property
    def gpu_groups(self) -> list[WorkerGroup]:
        return [group for group in self.workers if group.is_gpu]

    @property
    def elastic_groups(self) -> list[WorkerGroup]:
        return [group for group in self.workers if group.autoscale is not None]

    def roll_limit(self) -> int:
        """How many worker nodes a roll may have out of service at once (spec.maintenance.maxUnavailable)."""
        return self.maintenance.nodes_at_once(sum(group.size for group in self.workers if group.autoscale is None))
