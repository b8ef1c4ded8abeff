"""The observation `slurmctl render` plans on: a cluster as the operator would see it without an API server.

`slurmctl render` prints the objects of every component's plan for this observation (registry.planned_objects), so
what it prints is what the same plans apply online, not a second path that could drift from them.
"""

from __future__ import annotations

from slurmctl.api.v1 import Policy, SlurmCluster
from slurmctl.reconcilers.conditions import now
from slurmctl.reconcilers.loading import Loaded
from slurmctl.reconcilers.observation import Observation, Settings, key_secrets
from slurmctl.render import meta
from slurmctl.render.sshd import host_key_file


def observation(
    cluster: SlurmCluster, *, policy: Policy | None = None, cluster_domain: str = meta.DEFAULT_CLUSTER_DOMAIN
) -> Observation:
    """What a new cluster's components would observe once its key Secrets exist and its jail gate is open: every
    component then plans all it applies. The keys are there with empty ids (no Secret exists to have one: the
    renderers' placeholders, as `Inputs.offline` leaves them) and with the host key types of the operator's settings;
    no child, no pod, no Slurm (an elastic group's pods are created only for what Slurm powers up: none), no status
    (a status in the file, e.g. from `kubectl get -o yaml`, is not the new cluster's: a populated jail would
    leave out its Job). `policy` and `cluster_domain` are the operator's flags (default: the default flags)."""
    policy = policy or Policy()
    fresh = cluster.model_copy(update={"status": None})
    settings = Settings(cluster_domain=cluster_domain, privileged_jobs=policy.allow_privileged_jobs)
    c = meta.cluster_name(fresh)
    host_keys = [f"{host_key_file(kind)}{half}" for kind in settings.host_key_types for half in ("", ".pub")]
    return Observation(
        Loaded.of(fresh.model_dump(mode="json", by_alias=True, exclude_none=True), fresh, policy),
        now(),
        {},
        settings,
        keys=dict.fromkeys(key_secrets(c), ""),
        key_fields={meta.ssh_host_keys_secret(c): tuple(host_keys)},
        jail_open=True,
    )
