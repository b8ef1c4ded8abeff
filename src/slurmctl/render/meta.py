"""Names, labels, owner references and hashes shared by every renderer.

Object names are part of the user interface (DESIGN.md, "Objects per SlurmCluster"): they are built here only.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from slurmctl.api.v1 import API_VERSION, KIND, SlurmCluster

MANAGED_BY = "slurmctl"
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_WORKER_GROUP = "slurm.slurmctl.io/worker-group"
# "true" on a worker pod while Slurm says no job can run on its node (reconcilers/slurm_nodes.py): the workers'
# PodDisruptionBudget selects only pods without it, so evicting any other worker pod waits for its jobs.
LABEL_EVICTABLE = "slurm.slurmctl.io/evictable"
# "backup" on the standby slurmctld's pods (spec.controller.standby): its StatefulSet selects on it, so that it never
# selects the primary's pod (the primary's selector, older and immutable, does select the backup's pods, but a
# StatefulSet only counts and adopts pods named after itself).
LABEL_CONTROLLER_ROLE = "slurm.slurmctl.io/controller-role"
STATEFULSET_POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"  # set by the StatefulSet controller on each pod
# What every child carries and nothing else needs to: the operator lists and watches every kind it owns (and Pods)
# through this selector only, so it never lists (or caches) the cluster's other ConfigMaps, Secrets, Services...
OWNED_SELECTOR = f"{LABEL_NAME}=slurmcluster,{LABEL_MANAGED_BY}={MANAGED_BY}"
CONFIG_HASH_ANNOTATION = "slurm.slurmctl.io/config-hash"
# On the JWT key Secret: the spec.jwtKeyRotation value the key was made for. Written with the key, in the same create,
# so the record of a handled request can never be apart from the key that handled it.
JWT_KEY_ROTATION_ANNOTATION = "slurm.slurmctl.io/jwt-key-rotation"
# On an elastic group's pod: the hash of the group's pod template it was made from (render/workers.py).
TEMPLATE_HASH_ANNOTATION = "slurm.slurmctl.io/template-hash"

SLURMCTLD_PORT = 6817
SLURMD_PORT = 6818
SLURMDBD_PORT = 6819
SLURMRESTD_PORT = 6820
SSH_PORT = 22
# The kubelet's clusterDomain on most clusters; the operator's --cluster-domain names another.
DEFAULT_CLUSTER_DOMAIN = "cluster.local"


def cluster_name(cluster: SlurmCluster) -> str:
    return cluster.metadata.name or ""


def munge_secret(c: str) -> str:
    return f"{c}-munge"


def jwt_key_secret(c: str) -> str:
    """The HS256 key slurmctld (and slurmdbd) verify JWTs with, and the operator signs its own tokens with."""
    return f"{c}-jwt-key"


def ssh_host_keys_secret(c: str) -> str:
    return f"{c}-ssh-host-keys"


def slurm_configs(c: str) -> str:
    return f"{c}-slurm-configs"


def controller(c: str) -> str:
    return f"{c}-controller"


def controller_backup(c: str) -> str:
    """The standby slurmctld's StatefulSet; its pod `<c>-controller-backup-0` is the second SlurmctldHost."""
    return f"{c}-controller-backup"


def controller_state_claim(c: str) -> str:
    """The claim the primary's claim template `state` makes for its pod 0: slurmctld's StateSaveLocation."""
    return f"state-{controller(c)}-0"


def workers_service(c: str) -> str:
    return f"{c}-workers"


def service_domain(cluster: SlurmCluster, service: str, cluster_domain: str) -> str:
    """The fully qualified DNS name of a Service of the cluster's namespace."""
    return f"{service}.{cluster.metadata.namespace}.svc.{cluster_domain}"


def workers_domain(cluster: SlurmCluster, cluster_domain: str) -> str:
    """The DNS domain the workers' pods are named in (`<pod>.<c>-workers.<ns>.svc.<cluster domain>`, as their
    headless Service and `subdomain` make them): searched by every Slurm pod, so that a Slurm node name, which is its
    pod's name, resolves as it is to the address Slurm uses (srun -w, MASTER_ADDR, mpirun host lists)."""
    return service_domain(cluster, workers_service(cluster_name(cluster)), cluster_domain)


def workers_disruption_budget(c: str) -> str:
    return f"{c}-workers"


def worker_group(c: str, group: str) -> str:
    return f"{c}-worker-{group}"


def login(c: str) -> str:
    return f"{c}-login"


def login_headless(c: str) -> str:
    return f"{c}-login-headless"


def login_pod(c: str, index: int) -> str:
    """The name of login pod `index` (its StatefulSet's pod), also the name of the headless Service that makes that
    name resolve (render/login.py)."""
    return f"{login(c)}-{index}"


def sshd_configs(c: str) -> str:
    return f"{c}-sshd"


def populate_jail(c: str) -> str:
    return f"{c}-populate-jail"


def identity(c: str) -> str:
    return f"{c}-identity"


def slurmdbd_secret(c: str) -> str:
    return f"{c}-slurmdbd"


def accounting(c: str) -> str:
    """The slurmdbd Service and Deployment, and the pod's hostname (slurmdbd insists DbdHost is its own name)."""
    return f"{c}-accounting"


def rest(c: str) -> str:
    """slurmrestd's Service and Deployment."""
    return f"{c}-rest"


def mariadb(c: str) -> str:
    """The MariaDB resource; mariadb-operator names the database Service after it."""
    return f"{c}-mariadb"


def mariadb_passwords(c: str) -> str:
    return f"{c}-mariadb-passwords"


def network_policy(c: str, what: str) -> str:
    """The cluster's NetworkPolicies (render/network_policy.py): `slurm`, `slurmrestd`, `login-ssh`."""
    return f"{c}-{what}"


def nccl_benchmark(c: str) -> str:
    return f"{c}-nccl-benchmark"


def labels(c: str, component: str, **extra: str) -> dict[str, str]:
    """Labels every child carries; `component` is how each controller finds the children it owns."""
    return {
        LABEL_NAME: "slurmcluster",
        LABEL_INSTANCE: c,
        LABEL_COMPONENT: component,
        LABEL_MANAGED_BY: MANAGED_BY,
        **extra,
    }


def selector(c: str, component: str, **extra: str) -> dict[str, str]:
    """The immutable subset of `labels` that selects a workload's pods."""
    return {LABEL_INSTANCE: c, LABEL_COMPONENT: component, **extra}


def owner_references(cluster: SlurmCluster) -> list[dict[str, Any]]:
    """The SlurmCluster as controller owner, so the garbage collector deletes children with it.

    Offline rendering (`slurmctl render`) has no uid yet, and an owner reference without one is invalid: omit it.
    """
    if not cluster.metadata.uid:
        return []
    return [
        {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": cluster_name(cluster),
            "uid": cluster.metadata.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def object_meta(
    cluster: SlurmCluster, name: str, component: str, *, extra_labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": cluster.metadata.namespace or "default",
        "labels": labels(cluster_name(cluster), component, **(extra_labels or {})),
    }
    owners = owner_references(cluster)
    if owners:
        meta["ownerReferences"] = owners
    return meta


def configmap(cluster: SlurmCluster, name: str, component: str, data: Mapping[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(cluster, name, component),
        "data": dict(data),
    }


def secret(
    cluster: SlurmCluster,
    name: str,
    component: str,
    files: Mapping[str, bytes | str],
    *,
    immutable: bool = False,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """An Opaque Secret; text values are stored as UTF-8. `immutable`: its data can never change (key material)."""
    encoded = {k: base64.b64encode(v.encode() if isinstance(v, str) else v).decode() for k, v in sorted(files.items())}
    metadata = object_meta(cluster, name, component)
    if annotations:
        metadata["annotations"] = dict(annotations)
    out: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": "Opaque",
        "data": encoded,
    }
    if immutable:
        out["immutable"] = True
    return out


def controlled_by(obj: Mapping[str, Any], cluster: SlurmCluster) -> bool:
    """Whether this cluster (its uid) is the object's controller: what the operator created for it, not an object of
    the same name left by a deleted cluster of that name, nor one someone else made."""
    owners = (obj.get("metadata") or {}).get("ownerReferences") or []
    return bool(cluster.metadata.uid) and any(
        o.get("controller") and o.get("uid") == cluster.metadata.uid for o in owners
    )


def service(
    cluster: SlurmCluster,
    name: str,
    component: str,
    *,
    port_name: str,
    port: int,
    headless: bool = False,
    pod: str | None = None,
) -> dict[str, Any]:
    """A Service for one TCP port of a component's pods (`pod`: of that one StatefulSet pod only). Headless ones
    publish not-ready pods too: Slurm daemons must resolve each other (`<pod>.<service>`) before they pass their
    readiness probes."""
    spec: dict[str, Any] = {"clusterIP": "None", "publishNotReadyAddresses": True} if headless else {}
    spec["selector"] = selector(cluster_name(cluster), component)
    if pod is not None:
        spec["selector"][STATEFULSET_POD_NAME_LABEL] = pod
    spec["ports"] = [{"name": port_name, "port": port, "targetPort": port, "protocol": "TCP"}]
    return {"apiVersion": "v1", "kind": "Service", "metadata": object_meta(cluster, name, component), "spec": spec}


def content_hash(*parts: Any) -> str:
    """A short, stable hash of JSON-serialisable parts (dict order does not matter)."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(json.dumps(part, sort_keys=True, separators=(",", ":")).encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def subset(data: Mapping[str, str], keys: Iterable[str]) -> dict[str, str]:
    wanted = set(keys)
    return {k: v for k, v in data.items() if k in wanted}
