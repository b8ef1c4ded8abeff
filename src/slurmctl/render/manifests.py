"""Everything the operator applies for one SlurmCluster, for `slurmctl render` and the golden tests.

Secrets whose contents are random and created once by the operator (munge key, SSH host keys, MariaDB passwords) are
left out; so is the slurmdbd Secret unless the database password is given, because a rendering must never print it
from a guess. Keyword parameters carry what only a reconciler knows (ids of live Secrets, discovery results).
"""

from __future__ import annotations

from typing import Any

from slurmctl.api.v1 import SlurmCluster
from slurmctl.render.accounting import render_accounting
from slurmctl.render.benchmark import render_benchmark_cronjob
from slurmctl.render.cluster import render_slurm_configs_map
from slurmctl.render.controller import render_controller
from slurmctl.render.login import render_login
from slurmctl.render.populate_jail import render_populate_jail_job
from slurmctl.render.workers import render_worker_statefulset, render_workers_service


def render_manifests(
    cluster: SlurmCluster,
    *,
    munge_key_id: str = "",
    host_keys_id: str = "",
    dbd_password: str | None = None,
    dbd_password_id: str = "",
    cronjob_api_version: str = "batch/v1",
) -> list[dict[str, Any]]:
    spec = cluster.spec
    groups = sorted(spec.workers, key=lambda g: g.name)
    out = [
        render_slurm_configs_map(cluster),
        render_populate_jail_job(cluster),
        *render_controller(cluster, munge_key_id=munge_key_id),
        render_workers_service(cluster),
        *(render_worker_statefulset(cluster, g, replicas=g.size, munge_key_id=munge_key_id) for g in groups),
        *render_login(cluster, munge_key_id=munge_key_id, host_keys_id=host_keys_id),
    ]
    if spec.accounting.enabled:
        out += render_accounting(
            cluster, dbd_password=dbd_password, munge_key_id=munge_key_id, dbd_password_id=dbd_password_id
        )
    if spec.gpu_groups:
        out.append(render_benchmark_cronjob(cluster, api_version=cronjob_api_version))
    return out
