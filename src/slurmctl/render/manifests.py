"""What each component applies, as one pure function per component from the same typed inputs.

The components' plans call these functions, online and for `slurmctl render` (which prints the plans' objects for
an offline observation, reconcilers/offline.py), so what `render` prints and what the operator applies cannot drift.
`Inputs` carries everything a renderer needs beyond the spec: the config set rendered once, the ids of live Secrets,
the replicas the scale-in gate allows, where the scheduled workers run (their Kubernetes nodes' labels, for
topology.conf) and the cluster's DNS domain. `Inputs.offline` fills them as that offline observation does: the
renderers' tests render from it.

Secrets whose contents are random and created once by the operator (munge and JWT keys, SSH host keys, MariaDB
passwords) are not rendered here; neither is the slurmdbd Secret unless the database password is given, because a
rendering must never print it from a guess.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from slurmctl.api.v1 import SlurmCluster
from slurmctl.render import meta
from slurmctl.render.accounting import render_accounting
from slurmctl.render.benchmark import render_benchmark_cronjob
from slurmctl.render.cluster import render_slurm_configs_map
from slurmctl.render.controller import render_controller
from slurmctl.render.disruption import render_workers_disruption_budget
from slurmctl.render.identity import declares_anything, render_identity_job
from slurmctl.render.login import render_login
from slurmctl.render.network_policy import DEFAULT_NETWORK, NetworkSettings, render_network_policies
from slurmctl.render.populate_jail import render_populate_jail_job
from slurmctl.render.power import render_power_objects
from slurmctl.render.rest import render_rest
from slurmctl.render.slurm_conf import render_slurm_configs
from slurmctl.render.sshd import DEFAULT_HOST_KEY_TYPES
from slurmctl.render.topology import TOPOLOGY_CONF, Placement, render_topology_conf
from slurmctl.render.workers import render_worker_statefulset, render_workers_service

Obj = dict[str, Any]


@dataclass(frozen=True)
class Inputs:
    """Everything a component renderer reads. Built by a component's plan from its observation (online from the
    cache, or offline for `slurmctl render`), or by `offline` without one; renderers never look anywhere else."""

    cluster: SlurmCluster
    configs: Mapping[str, str]  # render_slurm_configs(cluster): the ConfigMap's data and every config hash
    munge_key_id: str = ""
    jwt_key_id: str = ""
    host_keys_id: str = ""
    host_keys: tuple[str, ...] = DEFAULT_HOST_KEY_TYPES  # key types in the host keys Secret
    dbd_password: str | None = None
    dbd_password_id: str = ""
    replicas: Mapping[str, int] = field(default_factory=dict)  # worker group -> replicas after the scale-in gate
    # Slurm node -> labels of the Kubernetes node its ready pod runs on (spec.topology); offline: none is ready.
    placement: Placement = field(default_factory=dict)
    cluster_domain: str = meta.DEFAULT_CLUSTER_DOMAIN  # the operator's --cluster-domain
    network: NetworkSettings = DEFAULT_NETWORK  # the operator's --operator-namespace and --login-ssh-from
    privileged_jobs: bool = False  # the operator's --allow-privileged-jobs (render/workers.py confine_env)

    @classmethod
    def offline(cls, cluster: SlurmCluster, *, root_jobs: bool = True, **known: Any) -> Inputs:
        """Inputs without a cluster to read: empty ids, no password, every group at its size. `root_jobs`: the
        operator's policy on jobs of root (render_slurm_conf)."""
        return cls(cluster=cluster, configs=render_slurm_configs(cluster, root_jobs=root_jobs), **known)

    def group_replicas(self, group: str, size: int) -> int:
        return self.replicas.get(group, size)


Renderer = Callable[[Inputs], list[Obj]]


def cluster_objects(i: Inputs) -> list[Obj]:
    """The Slurm configs ConfigMap (the key Secrets are created once by the reconciler, never rendered), with
    topology.conf from where the workers run: it changes when pods move, the spec's configs do not (and so neither
    does any config hash: the daemons take a new topology with a reconfigure); the cluster's NetworkPolicies; and the
    resume signal's ServiceAccount, Role, RoleBinding and ConfigMap (render/power.py)."""
    configs = dict(i.configs)
    topology = render_topology_conf(i.cluster, i.placement)
    if topology is not None:
        configs[TOPOLOGY_CONF] = topology
    return [
        render_slurm_configs_map(i.cluster, configs=configs),
        *render_network_policies(i.cluster, i.network),
        *render_power_objects(i.cluster),
    ]


def populate_jail_objects(i: Inputs) -> list[Obj]:
    return [render_populate_jail_job(i.cluster)]


def identity_objects(i: Inputs) -> list[Obj]:
    """The Job that writes spec.identity into the jail; none while nothing is declared (reconcilers/identity.py runs
    it then too when something was declared before: removed users are locked)."""
    return [render_identity_job(i.cluster)] if declares_anything(i.cluster) else []


def controller_objects(i: Inputs) -> list[Obj]:
    return render_controller(
        i.cluster,
        configs=i.configs,
        munge_key_id=i.munge_key_id,
        jwt_key_id=i.jwt_key_id,
        cluster_domain=i.cluster_domain,
    )


def workers_objects(i: Inputs) -> list[Obj]:
    groups = sorted(i.cluster.spec.workers, key=lambda g: g.name)
    return [
        render_workers_service(i.cluster),
        render_workers_disruption_budget(i.cluster),
        *(
            render_worker_statefulset(
                i.cluster,
                g,
                replicas=i.group_replicas(g.name, g.size),
                configs=i.configs,
                munge_key_id=i.munge_key_id,
                cluster_domain=i.cluster_domain,
                privileged_jobs=i.privileged_jobs,
            )
            for g in groups
            if g.autoscale is None  # an elastic group's pods are the reconciler's (render_elastic_worker_pod)
        ),
    ]


def login_objects(i: Inputs) -> list[Obj]:
    return render_login(
        i.cluster,
        munge_key_id=i.munge_key_id,
        host_keys_id=i.host_keys_id,
        host_keys=i.host_keys,
        cluster_domain=i.cluster_domain,
    )


def accounting_objects(i: Inputs) -> list[Obj]:
    if not i.cluster.spec.accounting.enabled:
        return []
    return render_accounting(
        i.cluster,
        dbd_password=i.dbd_password,
        munge_key_id=i.munge_key_id,
        jwt_key_id=i.jwt_key_id,
        dbd_password_id=i.dbd_password_id,
    )


def rest_objects(i: Inputs) -> list[Obj]:
    if not i.cluster.spec.rest.enabled:
        return []
    return render_rest(i.cluster, configs=i.configs)


def directory_objects(i: Inputs) -> list[Obj]:
    """None: the directory component only reports (its sidecars are the login, worker and controller pods')."""
    return []


def benchmark_objects(i: Inputs) -> list[Obj]:
    """Rendered whenever the cluster has GPU groups (suspended while disabled), so enabling it is one field."""
    if not i.cluster.spec.gpu_groups:
        return []
    return [render_benchmark_cronjob(i.cluster)]
