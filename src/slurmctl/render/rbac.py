"""The operator's permissions, declared once: every install (config/default and its opt-ins, the Helm chart, `slurmctl
rbac`) renders them from `RULES` and `NODE_CORDON` here, so they cannot drift apart.

Restricted by default: the operator gets the namespaced rules as a Role in each namespace it watches
(`--watch-namespace`; config/default watches `default`), so it reads no Secret and creates no pod anywhere else.
Granting them cluster-wide (a ClusterRole, `config/cluster-wide`, the chart's `rbac.namespaced: false`) is the cluster
admin's opt-in. Nodes are cluster-scoped, which no Role can grant: reading them is a small ClusterRole of its own in
every mode, and patching them (to cordon the node of an unhealthy worker) is a second one, granted only with the
admin's node-cordon opt-in (`config/components/node-cordon`, the chart's `rbac.nodeCordon`, which also pass the
operator `--allow-node-cordon`).

Every rule is used by a reconciler; nothing is granted with `*`. Notably absent: `update` (every write is a
server-side apply, a PATCH; only the leader Lease is PUT, and that Role is separate), PersistentVolumeClaims (nothing
reads them), CustomResourceDefinitions (optional kinds are found through discovery, which every
authenticated client may read), `bind` and `escalate` (the one Role the operator creates, a cluster's resume signal,
grants a subset of its own rights: render/power.py). Secrets need list/watch because the operator watches its own
(label-selected: the API server sends no other Secret, but RBAC cannot express a selector) and get for the user's
password Secret.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

# The operator's own labels and the part-of label every install object carries (config/default's kustomize `labels`,
# the chart's commonLabels), so that `slurmctl rbac`, config/ and the chart render the same objects.
OPERATOR_LABELS: Final = {
    "app.kubernetes.io/name": "slurmctl",
    "app.kubernetes.io/component": "operator",
    "app.kubernetes.io/part-of": "slurmctl",
}
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
    Rule("The populate-jail Job, the NCCL benchmark CronJob and the accounting database's backup Job of a Slurm "
         "upgrade (batch/v1).", ("batch",), ("jobs", "cronjobs"), READ + WRITE),
    Rule("The claim a Slurm upgrade's database backup is written to (created by server-side apply, never deleted: "
         "the backup stays).", ("",), ("persistentvolumeclaims",), ("get", "create", "patch")),
    Rule("Each SlurmCluster's resume-signal ServiceAccount <c>-power (render/power.py), whose token only the "
         "controller pods of a cluster with an elastic group mount: created and patched by server-side apply, read by "
         "name (never listed or watched), never deleted (it goes with its SlurmCluster).", ("",), ("serviceaccounts",),
         ("get", "create", "patch")),
    Rule("Its Role, which allows only patching the ConfigMap <c>-power (Kubernetes lets the operator grant that "
         "because it holds it), and the RoleBinding to the ServiceAccount: the same verbs. No bind or escalate.",
         ("rbac.authorization.k8s.io",), ("roles", "rolebindings"), ("get", "create", "patch")),
    Rule("The workers' PodDisruptionBudget (policy/v1): evictions wait for jobs. Always rendered, so never deleted "
         "(it goes with its SlurmCluster).", ("policy",), ("poddisruptionbudgets",), (*READ, "create", "patch")),
    Rule("Each SlurmCluster's NetworkPolicies (render/network_policy.py): who may connect to its pods.",
         ("networking.k8s.io",), ("networkpolicies",), READ + WRITE),
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
         "past --node-lost-after) drains its Slurm node. Cluster-scoped: a ClusterRole of its own in every mode.",
         ("",), ("nodes",), READ, cluster_scoped=True),
)  # fmt: skip

# Only with the cluster admin's node-cordon opt-in (the operator's --allow-node-cordon): a ClusterRole of its own.
NODE_CORDON: Final = Rule(
    "Nodes: patched only to cordon (spec.unschedulable, the slurm.slurmctl.io/unhealthy label and its reason "
    "annotation) the node of a worker that slurmctl's GPU or NCCL health check drained, in a group with "
    "replaceUnhealthy: never a control-plane node, never uncordoned, never another field.",
    ("",),
    ("nodes",),
    ("patch",),
    cluster_scoped=True,
)


def _metadata(name: str, namespace: str | None = None) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name}
    if namespace is not None:
        md["namespace"] = namespace
    md["labels"] = dict(OPERATOR_LABELS)
    return md


@dataclass(frozen=True)
class Grantee:
    """Whom the bindings name and how the objects are called. `namespace` None leaves the subject's namespace to
    kustomize (config/default's namespace transformer), which also prefixes `name`."""

    service_account: str = "slurmctl-operator"
    namespace: str | None = "slurmctl-system"
    name: str = "slurmctl-operator"

    def subject(self) -> dict[str, Any]:
        subject = {"kind": "ServiceAccount", "name": self.service_account}
        return subject if self.namespace is None else {**subject, "namespace": self.namespace}


def _role(kind: str, name: str, rules: Sequence[Rule], namespace: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": _metadata(name, namespace),
        "rules": [rule.manifest() for rule in rules],
    }


def _binding(kind: str, role: dict[str, Any], who: Grantee) -> dict[str, Any]:
    namespace = role["metadata"].get("namespace")
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": _metadata(role["metadata"]["name"], namespace),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role["kind"], "name": role["metadata"]["name"]},
        "subjects": [who.subject()],
    }


NAMESPACED_RULES: Final = tuple(rule for rule in RULES if not rule.cluster_scoped)
CLUSTER_SCOPED_RULES: Final = tuple(rule for rule in RULES if rule.cluster_scoped)


def namespaced(namespaces: Sequence[str], who: Grantee = Grantee()) -> list[dict[str, Any]]:
    """The default: a Role and a RoleBinding in each watched namespace, granting the namespaced `RULES` there and
    nowhere else (for `slurmctl run --watch-namespace` with the same list)."""
    objects: list[dict[str, Any]] = []
    for namespace in namespaces:
        role = _role("Role", who.name, NAMESPACED_RULES, namespace)
        objects += [role, _binding("RoleBinding", role, who)]
    return objects


def cluster_wide(who: Grantee = Grantee()) -> list[dict[str, Any]]:
    """The cluster admin's opt-in instead of `namespaced`: the namespaced `RULES` in every namespace (a ClusterRole
    and its ClusterRoleBinding), for an operator that watches them all."""
    role = _role("ClusterRole", who.name, NAMESPACED_RULES)
    return [role, _binding("ClusterRoleBinding", role, who)]


def cluster_scoped(who: Grantee = Grantee()) -> list[dict[str, Any]]:
    """In every mode: reading Nodes (`<name>-cluster-scoped`), which no Role can grant."""
    role = _role("ClusterRole", f"{who.name}-cluster-scoped", CLUSTER_SCOPED_RULES)
    return [role, _binding("ClusterRoleBinding", role, who)]


def node_cordon(who: Grantee = Grantee()) -> list[dict[str, Any]]:
    """The cluster admin's node-cordon opt-in (`<name>-node-cordon`): patching Nodes, to cordon an unhealthy
    worker's (the operator also needs --allow-node-cordon)."""
    role = _role("ClusterRole", f"{who.name}-node-cordon", (NODE_CORDON,))
    return [role, _binding("ClusterRoleBinding", role, who)]


def for_install(namespaces: Sequence[str], who: Grantee = Grantee(), *, cordon: bool = False) -> list[dict[str, Any]]:
    """Everything the operator needs for `slurmctl run --watch-namespace <namespaces>` (all namespaces when empty:
    the cluster-wide opt-in) and, with `cordon`, `--allow-node-cordon`: what `slurmctl rbac` prints."""
    objects = namespaced(namespaces, who) if namespaces else cluster_wide(who)
    return objects + cluster_scoped(who) + (node_cordon(who) if cordon else [])


def manifests_yaml(objects: Sequence[dict[str, Any]], dump: Any) -> str:
    """Objects as a YAML stream, each rule preceded by why it is there (the checked-in manifests). `dump` is
    yaml.safe_dump (passed in: the renderers do not import a YAML library)."""
    why = {repr(rule.manifest()): rule.why for rule in (*RULES, NODE_CORDON)}
    docs = []
    for obj in objects:
        head = {k: v for k, v in obj.items() if k != "rules"}
        text = str(dump(head, sort_keys=False))
        if "rules" in obj:
            text += "rules:\n"
            for manifest in obj["rules"]:
                text += "".join(f"# {line}\n" for line in _wrap(why[repr(manifest)]))
                text += str(dump([manifest], sort_keys=False, default_flow_style=None))
        docs.append(text)
    return "---\n".join(docs)


def _wrap(text: str, width: int = 116) -> list[str]:
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return [*lines, line] if line else lines
