"""Objects the `cluster` component owns: the Slurm configs ConfigMap and the key Secrets created once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slurmctl.api.v1 import SlurmCluster
from slurmctl.render import meta

COMPONENT = "cluster"
MUNGE_KEY = "munge.key"
JWT_KEY = "jwt_hs256.key"


def render_slurm_configs_map(cluster: SlurmCluster, *, configs: Mapping[str, str]) -> dict[str, Any]:
    """`configs` is `render_slurm_configs(cluster)`, rendered once per reconcile and shared with every config hash."""
    c = meta.cluster_name(cluster)
    return meta.configmap(cluster, meta.slurm_configs(c), COMPONENT, configs)


def render_munge_secret(cluster: SlurmCluster, key: bytes) -> dict[str, Any]:
    return meta.secret(
        cluster, meta.munge_secret(meta.cluster_name(cluster)), COMPONENT, {MUNGE_KEY: key}, immutable=True
    )


def render_jwt_key_secret(cluster: SlurmCluster, key: bytes) -> dict[str, Any]:
    """Immutable like every key Secret: a new key (spec.jwtKeyRotation) is a new Secret, whose uid rolls the pods that
    load the key. It records the rotation request it was made for (meta.JWT_KEY_ROTATION_ANNOTATION)."""
    rotation = cluster.spec.jwt_key_rotation
    annotations = {meta.JWT_KEY_ROTATION_ANNOTATION: rotation} if rotation else None
    name = meta.jwt_key_secret(meta.cluster_name(cluster))
    return meta.secret(cluster, name, COMPONENT, {JWT_KEY: key}, immutable=True, annotations=annotations)


def render_ssh_host_keys_secret(cluster: SlurmCluster, files: Mapping[str, bytes]) -> dict[str, Any]:
    return meta.secret(cluster, meta.ssh_host_keys_secret(meta.cluster_name(cluster)), COMPONENT, files, immutable=True)
