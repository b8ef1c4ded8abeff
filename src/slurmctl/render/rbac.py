"""The operator's permissions, declared once: the ClusterRole of `config/rbac/role.yaml` (written by `make manifests`)
and the per-namespace Roles of the namespaced mode (`slurmctl rbac --watch-namespace a,b`) are both rendered from
`RULES`, so the two modes cannot drift apart.

Every rule is used by a reconciler; nothing is granted with `*`. Notably absent: `update` (every write is a
server-side apply, a PATCH; only the leader Lease is PUT, and that Role is separate), PersistentVolumeClaims (nothing
reads them), CustomResourceDefinitions (optional kinds are found through discovery, which every
authenticated client may read). Secrets need list/watch because the operator watches its own (label-selected: the
API server sends no other Secret, but RBAC cannot express a selector) and get for the user's password Secret.

Nodes are cluster-scoped: a Role cannot grant them. The namespaced mode therefore renders the `cluster_scoped` rules
(Nodes: read, and patched only to cordon the node of an unhealthy worker) as one small ClusterRole and its binding
beside the Roles; nothing namespaced is granted there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

OPERATOR_LABELS: Final = {"app.kubernetes.io/name": "slurmctl", "app.kubernetes.io/component": "operator"}
READ = ("get", "list", "watch")
WRITE = ("create", "patch", "delete")


@dataclass(frozen=True)
class Rule:
    why: str  # the comment above the rule in the generated YAML
    groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    cluster_scoped: bool = False  # a cluster-scoped resource: granted by a ClusterRole in either mode

    def manifest(self) -> dict[str, Any]:
        return {"apiGroups": list(self.groups), "resources": list(self.resources), "verbs": list(self.verbs)}


RULES: Final[tuple[Rule, ...]] = (
    Rule("The SlurmClusters themselves: read the spec.", ("slurm.slurmctl.io",), ("slurmclusters",), READ),
    Rule("Status conditions and the phase (server-side apply on /status).", ("slurm.slurmctl.io",),
         ("slurmclusters/status",), ("get", "patch")),
    Rule("Children carry owner references with blockOwnerDeletion, which OwnerReferencesPermissionEnforcement "
         "checks against this subresource.", ("slurm.slurmctl.io",), ("slurmclusters/finalizers",), ("update",)),
    Rule("Slurm configs and sshd ConfigMaps; controller, worker, login, accounting and slurmrestd Services.", ("",),
         ("configmaps", "services"), READ + WRITE),
    Rule("Secrets: the munge, JWT and SSH host keys (created once), slurmdbd.conf (applied, deleted when accounting is "
         "switched off). Listed and watched only through a label selector; the user's password Secret is read by "
         "name.", ("",), ("secrets",), READ + WRITE),
    Rule("Controller, worker and login StatefulSets; the slurmdbd and slurmrestd Deployments.", ("apps",),
         ("statefulsets", "deployments"), READ + WRITE),
    Rule("The populate-jail Job and the NCCL benchmark CronJob (batch/v1).", ("batch",), ("jobs", "cronjobs"),
         READ + WRITE),
    Rule("The workers' PodDisruptionBudget (policy/v1): evictions wait for jobs. Always rendered, so never deleted "
         "(it goes with its SlurmCluster).", ("policy",), ("poddisruptionbudgets",), (*READ, "create", "patch")),
    Rule("Pods: the slurmrestd pod's address; each worker pod's SlurmNodeState condition and its evictable label "
         "(server-side apply); a worker pod deleted (once its node is drained) to re-create it from a new template or "
         "a new StatefulSet, or force-deleted (grace period 0, uid precondition) when its Kubernetes node is lost "
         "and Slurm cannot reach its slurmd; an elastic group's worker pod created when Slurm powers its node up and "
         "deleted when Slurm powers it down; a dry-run create (nothing stored) of the pod a StatefulSet or Job "
         "short of pods would make, to learn why admission refuses it (Pod Security, a quota). Listed and watched "
         "only through the owned-children label selector.",
         ("",), ("pods",),
         (*READ, "create", "patch", "delete")),
    Rule("The SlurmNodeState condition on worker pods (server-side apply on /status).", ("",), ("pods/status",),
         ("patch",)),
    Rule("Events on SlurmClusters, through either Events API.", ("", "events.k8s.io"), ("events",),
         ("create", "patch")),
    Rule("Accounting through mariadb-operator, when its CRD is installed.", ("k8s.mariadb.com",), ("mariadbs",),
         READ + WRITE),
    Rule("Nodes: read, as a worker pod's Kubernetes node being cordoned (spec.unschedulable) or lost (NotReady "
         "past --node-lost-after) drains its Slurm node; patched only to cordon (spec.unschedulable, the "
         "slurm.slurmctl.io/unhealthy label and its reason annotation) the node of a worker that slurmctl's GPU or "
         "NCCL health check drained, in a group with replaceUnhealthy: never uncordoned, never another field. "
         "Cluster-scoped: the namespaced mode grants it with a ClusterRole of its own.", ("",), ("nodes",),
         (*READ, "patch"), cluster_scoped=True),
)  # fmt: skip


def _metadata(name: str, namespace: str | None = None) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name}
    if namespace is not None:
        md["namespace"] = namespace
    md["labels"] = dict(OPERATOR_LABELS)
    return md


def cluster_role(name: str = "operator") -> dict[str, Any]:
    """The ClusterRole of the default, cluster-wide mode (kustomize adds the `slurmctl-` prefix)."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": _metadata(name),
        "rules": [rule.manifest() for rule in RULES],
    }


def namespaced(
    namespaces: Sequence[str],
    *,
    service_account: str = "slurmctl-operator",
    service_account_namespace: str = "slurmctl-system",
    name: str = "slurmctl-operator",
) -> list[dict[str, Any]]:
    """A Role and a RoleBinding in each watched namespace, granting the operator's ServiceAccount the namespaced
    `RULES` there and nowhere else (for `slurmctl run --watch-namespace` with the same list), and a ClusterRole
    `<name>-cluster-scoped` with its ClusterRoleBinding for the cluster-scoped rules (reading Nodes, cordoning an
    unhealthy worker's), which no Role can grant."""
    objects: list[dict[str, Any]] = []
    subject = {"kind": "ServiceAccount", "name": service_account, "namespace": service_account_namespace}
    for namespace in namespaces:
        objects.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": _metadata(name, namespace),
                "rules": [rule.manifest() for rule in RULES if not rule.cluster_scoped],
            }
        )
        objects.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": _metadata(name, namespace),
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": [subject],
            }
        )
    cluster_wide = f"{name}-cluster-scoped"
    objects.append(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": _metadata(cluster_wide),
            "rules": [rule.manifest() for rule in RULES if rule.cluster_scoped],
        }
    )
    objects.append(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": _metadata(cluster_wide),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_wide},
            "subjects": [subject],
        }
    )
    return objects


def cluster_role_yaml(dump: Any) -> str:
    """role.yaml as `make manifests` writes it: each rule preceded by why it is there. `dump` is yaml.safe_dump
    (passed in: the renderers do not import a YAML library)."""
    role = cluster_role()
    head = {k: v for k, v in role.items() if k != "rules"}
    text = str(dump(head, sort_keys=False)) + "rules:\n"
    for rule in RULES:
        text += "".join(f"# {line}\n" for line in _wrap(rule.why))
        text += str(dump([rule.manifest()], sort_keys=False, default_flow_style=None))
    return text


def _wrap(text: str, width: int = 116) -> list[str]:
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return [*lines, line] if line else lines
