"""The resume signal of the elastic groups: how Slurm tells the operator at once that it powers nodes up.

Slurm allocates a job to powered-down CLOUD nodes, marks them POWERING_UP and runs ResumeProgram with their names on
the controller (its power-save thread acts within a second of a node state change, an allocation included:
power_save.c runs its work when `last_node_update` moved, however long `power_save_interval` is). ResumeProgram
(`RESUME_PROGRAM`, images/scripts/resume-nodes) patches the cluster's `<c>-power` ConfigMap: `nodes` (the hostlist
Slurm passed) and `at` (when). That change wakes the workers component, which then reads a fresh Slurm snapshot
(reconcilers/workers/reconciler.py) and creates the pods of the nodes Slurm says are POWERING_UP, instead of finding
them on the node loop's next poll (reconcilers/elastic.py ELASTIC_POLL_SECONDS), which stays as the fallback: a lost
patch, or an API server the controller cannot reach, costs the old delay and nothing more.

The ConfigMap is only a wake-up: nothing is decided from what it says. A forged patch can at worst cause one more
snapshot of Slurm.

This is the one place a Slurm process talks to the Kubernetes API (docs/security.md, "The resume signal"). Its
identity is narrow on purpose:

- the ServiceAccount `<c>-power`, whose Role allows `patch` of the ConfigMap `<c>-power` (by `resourceNames`) and
  nothing else: no read, no other object;
- its token reaches the controller pods only (slurmctld, primary and standby), and only while the cluster has an
  elastic group: a projected token of `TOKEN_SECONDS` (the shortest the API server issues; the kubelet renews it),
  with the API server's CA and the namespace, under `TOKEN_MOUNT`. `automountServiceAccountToken` stays false in
  every pod, the controller's included, so no other container and no worker (where users' jobs run) sees a token.

The ServiceAccount, Role, RoleBinding and ConfigMap are rendered for every cluster (they grant nothing while no pod
mounts the token), so that a group made elastic later needs nothing created, and nothing needs deleting (the operator
may create and patch these kinds, never delete them: they go with their SlurmCluster).
"""

from __future__ import annotations

from typing import Any

from slurmctl.api.v1 import SlurmCluster
from slurmctl.render import meta
from slurmctl.render.kinds import CONFIGMAP, ROLE, ROLE_BINDING, SERVICE_ACCOUNT

COMPONENT = "cluster"  # rendered by the cluster component: its ConfigMaps' changes wake the workers component
RESUME_PROGRAM = "/usr/lib/slurmctl/resume-nodes"
# PrologSlurmctld of a cluster with an elastic group (images/scripts/await-nodes): it returns once the job's nodes are
# up, and its end is what makes slurmctld start a job that waited for its nodes to power up (job_scheduler.c
# prolog_running_decr), instead of slurmctld's periodic pass up to 30 s later.
AWAIT_NODES_PROGRAM = "/usr/lib/slurmctl/await-nodes"
TOKEN_MOUNT = "/mnt/power-token"  # noqa: S105 - a path
TOKEN_VOLUME = "power-token"  # noqa: S105 - a volume name
TOKEN_SECONDS = 600  # the API server refuses a shorter expirationSeconds
# The controller container's environment: the ConfigMap the entrypoint points ResumeProgram at (Slurm runs
# ResumeProgram with an environment of its own, so the entrypoint writes the address into a file, POWER_URL_FILE).
CONFIGMAP_ENV = "SLURMCTL_POWER_CONFIGMAP"
NODES_KEY = "nodes"  # the ConfigMap's keys ResumeProgram writes
AT_KEY = "at"


def power_name(c: str) -> str:
    """The ServiceAccount, Role, RoleBinding and ConfigMap of the resume signal share this name."""
    return f"{c}-power"


def render_power_configmap(cluster: SlurmCluster) -> dict[str, Any]:
    """Created empty; its data is ResumeProgram's (a merge patch under another field manager), never the operator's:
    the operator's apply leaves it alone."""
    c = meta.cluster_name(cluster)
    return {
        "apiVersion": CONFIGMAP.api_version,
        "kind": CONFIGMAP.kind,
        "metadata": meta.object_meta(cluster, power_name(c), COMPONENT),
    }


def render_power_service_account(cluster: SlurmCluster) -> dict[str, Any]:
    """Its tokens are mounted nowhere automatically: only the controller pods project one, explicitly."""
    c = meta.cluster_name(cluster)
    return {
        "apiVersion": SERVICE_ACCOUNT.api_version,
        "kind": SERVICE_ACCOUNT.kind,
        "metadata": meta.object_meta(cluster, power_name(c), COMPONENT),
        "automountServiceAccountToken": False,
    }


def render_power_role(cluster: SlurmCluster) -> dict[str, Any]:
    """`patch` of the one ConfigMap, by name: a stolen token can write a wake-up and nothing else."""
    c = meta.cluster_name(cluster)
    return {
        "apiVersion": ROLE.api_version,
        "kind": ROLE.kind,
        "metadata": meta.object_meta(cluster, power_name(c), COMPONENT),
        "rules": [
            {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [power_name(c)], "verbs": ["patch"]}
        ],
    }


def render_power_role_binding(cluster: SlurmCluster) -> dict[str, Any]:
    c = meta.cluster_name(cluster)
    return {
        "apiVersion": ROLE_BINDING.api_version,
        "kind": ROLE_BINDING.kind,
        "metadata": meta.object_meta(cluster, power_name(c), COMPONENT),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": ROLE.kind, "name": power_name(c)},
        "subjects": [
            {"kind": SERVICE_ACCOUNT.kind, "name": power_name(c), "namespace": cluster.metadata.namespace or "default"}
        ],
    }


def render_power_objects(cluster: SlurmCluster) -> list[dict[str, Any]]:
    """In the order they depend on each other (the pods need the ServiceAccount, the binding its Role)."""
    return [
        render_power_service_account(cluster),
        render_power_role(cluster),
        render_power_role_binding(cluster),
        render_power_configmap(cluster),
    ]


def token_volume() -> dict[str, Any]:
    """The ServiceAccount's token (default audience: the API server's), the API server's CA (the `kube-root-ca.crt`
    ConfigMap every namespace has) and the namespace. Readable by SlurmUser, which runs ResumeProgram: 0444 (the
    container has no other user)."""
    return {
        "name": TOKEN_VOLUME,
        "projected": {
            "defaultMode": 0o444,
            "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": TOKEN_SECONDS}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
            ],
        },
    }


def token_mount() -> dict[str, Any]:
    return {"name": TOKEN_VOLUME, "mountPath": TOKEN_MOUNT, "readOnly": True}


def configmap_env(c: str) -> dict[str, str]:
    return {"name": CONFIGMAP_ENV, "value": power_name(c)}
