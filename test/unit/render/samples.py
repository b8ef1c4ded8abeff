"""The clusters the renderer tests render: the samples in config/samples with fixed identities, and what the golden
files hold for each of them."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from slurmctl.api.v1 import SlurmCluster
from slurmctl.reconcilers.registry import desired_objects
from slurmctl.render import accounting
from slurmctl.render.cluster import render_jwt_key_secret, render_munge_secret, render_ssh_host_keys_secret
from slurmctl.render.login import sshd_configs_data
from slurmctl.render.manifests import Inputs
from slurmctl.render.slurm_conf import render_slurm_configs
from slurmctl.render.sshd import DEFAULT_HOST_KEY_TYPES
from test.unit.api.helpers import sample_clusters

GOLDEN = Path(__file__).resolve().parent / "golden"
NAMESPACE = "hpc"
UID = "6c0f4a53-2d1e-4f43-9d3b-6a1c2b7e9f10"
GENERATION = 3
MUNGE_KEY_ID = "munge-secret-uid"
JWT_KEY_ID = "jwt-key-secret-uid"
HOST_KEYS_ID = "host-keys-secret-uid"
DBD_PASSWORD = "golden-Db-passw0rd"
DBD_PASSWORD_ID = "accounting-db-secret-rv-42"
MARIADB_ROOT_PASSWORD = "golden-Root-passw0rd"
FAKE_MUNGE_KEY = bytes(range(32))
FAKE_JWT_KEY = bytes(range(32, 64))
FAKE_HOST_KEYS = {
    f"ssh_host_{kind}_key{suffix}": f"fake {kind} key{suffix}\n".encode()
    for kind in DEFAULT_HOST_KEY_TYPES
    for suffix in ("", ".pub")
}


def _research_mariadb(doc: dict[str, Any]) -> dict[str, Any]:
    """The research sample with its database through mariadb-operator instead of an external server."""
    accounting_spec = doc["spec"]["accounting"]
    del accounting_spec["external"]
    accounting_spec["mariadb"] = {"enabled": True, "storage": {"size": "50Gi", "storageClassName": "fast-ssd"}}
    return doc


# Golden directory -> (sample file, change applied to it).
VARIANTS: dict[str, tuple[str, Callable[[dict[str, Any]], dict[str, Any]]]] = {
    "minimal": ("slurmcluster_minimal.yaml", lambda doc: doc),
    "research": ("slurmcluster_research.yaml", lambda doc: doc),
    "research-mariadb": ("slurmcluster_research.yaml", _research_mariadb),
}


def sample_doc(variant: str) -> dict[str, Any]:
    """The variant's SlurmCluster as a live object would be: namespaced, with a uid (so owner references appear)."""
    file_name, change = VARIANTS[variant]
    doc = change(copy.deepcopy(sample_clusters()[file_name]))
    doc["metadata"].update(namespace=NAMESPACE, uid=UID, generation=GENERATION)
    return doc


def sample(variant: str) -> SlurmCluster:
    return SlurmCluster.model_validate(sample_doc(variant))


def manifests(cluster: SlurmCluster, **overrides: Any) -> list[dict[str, Any]]:
    """What the components apply, with every id and password a reconciler would pass, fixed."""
    kwargs: dict[str, Any] = {
        "munge_key_id": MUNGE_KEY_ID,
        "jwt_key_id": JWT_KEY_ID,
        "host_keys_id": HOST_KEYS_ID,
        "dbd_password": DBD_PASSWORD,
        "dbd_password_id": DBD_PASSWORD_ID,
    }
    return desired_objects(Inputs.offline(cluster, **{**kwargs, **overrides}))


def all_objects(cluster: SlurmCluster) -> list[dict[str, Any]]:
    """Every object any renderer produces for the cluster: the manifests and the Secrets created once."""
    objects = [
        *manifests(cluster),
        render_munge_secret(cluster, FAKE_MUNGE_KEY),
        render_jwt_key_secret(cluster, FAKE_JWT_KEY),
        render_ssh_host_keys_secret(cluster, FAKE_HOST_KEYS),
    ]
    if accounting.uses_mariadb(cluster):
        objects.append(
            accounting.render_mariadb_secret(cluster, password=DBD_PASSWORD, root_password=MARIADB_ROOT_PASSWORD)
        )
    return objects


def object_key(obj: dict[str, Any]) -> str:
    return f"{obj['kind'].lower()}-{obj['metadata']['name']}"


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the config files inside ConfigMaps) as literal blocks, so their diffs read like the files;
    no anchors, so every object reads in full."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


_Dumper.add_representer(str, _str_representer)


def to_yaml(obj: dict[str, Any]) -> str:
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120)


def golden_files(cluster: SlurmCluster) -> dict[str, str]:
    """File name -> text of everything golden for one cluster: one YAML per object and the raw config files."""
    files = {f"{object_key(obj)}.yaml": to_yaml(obj) for obj in all_objects(cluster)}
    files.update(render_slurm_configs(cluster))
    files.update(sshd_configs_data(cluster))
    if cluster.spec.accounting.enabled:
        files[accounting.SLURMDBD_CONF] = accounting.render_slurmdbd_conf(cluster, dbd_password=DBD_PASSWORD)
    return files
