"""What the controllers of one manager share: the registry they were built from, the loader, the Slurm access, the
status writer, admission checks and the operator's settings."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from slurmctl.reconcilers.admission import Admission
from slurmctl.reconcilers.component import Component, Reconciler
from slurmctl.reconcilers.loading import Loader
from slurmctl.reconcilers.lost_nodes import DEFAULT_NODE_LOST_AFTER
from slurmctl.reconcilers.observation import Settings
from slurmctl.reconcilers.preemption import DEFAULT_PREEMPTION_TAINTS
from slurmctl.reconcilers.slurm_access import SlurmAccess
from slurmctl.reconcilers.status import StatusWriter
from slurmctl.reconcilers.worker_pods import WorkerPods
from slurmctl.render import meta
from slurmctl.render.network_policy import DEFAULT_NETWORK, NetworkSettings
from slurmctl.render.sshd import DEFAULT_HOST_KEY_TYPES
from slurmctl.runtime import Manager, Request, Result
from slurmctl.slurm import DEFAULT_MAX_ANSWER_BYTES


@dataclass
class Context:
    """What the component reconcilers of one manager share: the registry they were built from and the loader."""

    manager: Manager
    components: tuple[Component, ...]
    loader: Loader = field(default_factory=Loader)
    reconcilers: dict[str, Reconciler] = field(default_factory=dict)  # by component name
    loops: dict[str, Callable[[Request], Awaitable[Result | None]]] = field(default_factory=dict)  # the others
    host_key_types: tuple[str, ...] = DEFAULT_HOST_KEY_TYPES  # SSH host keys new clusters get
    node_lost_after: float = DEFAULT_NODE_LOST_AFTER  # seconds NotReady before a node is lost (0: never)
    max_eviction_hold: float = 0.0  # seconds an eviction waits for jobs (--max-eviction-hold; 0: for ever)
    preemption_taints: tuple[str, ...] = DEFAULT_PREEMPTION_TAINTS  # --preemption-taints (reconcilers/preemption)
    cluster_domain: str = meta.DEFAULT_CLUSTER_DOMAIN  # the DNS domain Services are named in (--cluster-domain)
    network: NetworkSettings = DEFAULT_NETWORK  # what the clusters' NetworkPolicies admit (render/network_policy)
    slurm_max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES  # --slurm-max-answer-size, in bytes
    slurm: SlurmAccess = field(init=False)  # how reconcilers reach each cluster's slurmrestd
    status: StatusWriter = field(init=False)  # every component's status goes through it
    admission: Admission = field(init=False)  # whether the API server admits a workload's pods
    worker_pods: WorkerPods = field(init=False)  # each cluster's worker pods, read once (reconcilers/pod_record.py)

    @property
    def settings(self) -> Settings:
        """The operator's settings that plans read."""
        return Settings(
            self.cluster_domain, self.network, self.loader.policy.allow_privileged_jobs, self.host_key_types
        )

    def __post_init__(self) -> None:
        self.slurm = SlurmAccess(
            self.manager.cache,
            max_answer_bytes=self.slurm_max_answer_bytes,
            clock=self.manager.clock,
            registry=self.manager.metrics.registry,
        )
        self.admission = Admission(self.manager.client, self.manager.clock)
        self.worker_pods = WorkerPods(self.manager.cache)
        self.status = StatusWriter(self.manager)
        self.manager.add_runnable("status-writer", self.status.run)
