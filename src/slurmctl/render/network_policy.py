"""The NetworkPolicies of a SlurmCluster: who may open a connection to its pods.

Slurm's daemons trust the network they run on: slurmctld, slurmd, slurmdbd and the ports `srun` opens take a
connection from anywhere and then check a munge credential, and slurmrestd takes JWTs. So, where the cluster's CNI
enforces NetworkPolicies, each SlurmCluster gets three (Ingress only; egress, DNS included, is left alone):

- `<c>-slurm`: every pod of the cluster but slurmrestd's takes connections, on any port, from the cluster's own pods
  only (slurmctld, slurmd, slurmdbd, srun's and MPI's ports between workers, munge is local). Another namespace's
  pods, or another pod of this namespace, reach none of them.
- `<c>-slurmrestd`: slurmrestd takes connections on its port from the operator's pods only (the operator's namespace and
  its pod labels: config/manager's Deployment, the chart's), not from the cluster's own pods: it is the operator's
  way in, with a token that may act as SlurmUser.
- `<c>-login-ssh`: login pods take SSH from where the cluster admin says (`--login-ssh-from`, CIDRs; default:
  anywhere, a login node being where users come in), besides the cluster's own pods.

Where the CNI implements no NetworkPolicies they are stored and change nothing. Kubelet probes come from the node
and are not subject to them on the common CNIs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from slurmctl.api.v1 import SlurmCluster
from slurmctl.render import meta
from slurmctl.render.login import COMPONENT as LOGIN
from slurmctl.render.rest import COMPONENT as REST

# The operator's pod labels (config/manager/manager.yaml, the chart's slurmctl.operatorLabels).
OPERATOR_POD_LABELS = {"app.kubernetes.io/name": "slurmctl", "app.kubernetes.io/component": "operator"}
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every namespace


@dataclass(frozen=True)
class NetworkSettings:
    """The cluster admin's install settings the policies follow (operator flags)."""

    operator_namespace: str = "slurmctl-system"  # --operator-namespace: where the operator's pods run
    ssh_from: tuple[str, ...] = ()  # --login-ssh-from: CIDRs that may reach the login pods' sshd; empty: anywhere


DEFAULT_NETWORK: Final = NetworkSettings()


def _cluster_pods(c: str) -> dict[str, str]:
    """The labels every pod of cluster `c` carries (meta.labels), and no other pod."""
    return {meta.LABEL_NAME: "slurmcluster", meta.LABEL_INSTANCE: c, meta.LABEL_MANAGED_BY: meta.MANAGED_BY}


def _policy(cluster: SlurmCluster, name: str, selector: dict[str, Any], ingress: list[Any]) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": meta.object_meta(cluster, name, "cluster"),
        "spec": {"podSelector": selector, "policyTypes": ["Ingress"], "ingress": ingress},
    }


def render_network_policies(cluster: SlurmCluster, settings: NetworkSettings) -> list[dict[str, Any]]:
    c = meta.cluster_name(cluster)
    own = {"podSelector": {"matchLabels": _cluster_pods(c)}}
    but_rest = {
        "matchLabels": _cluster_pods(c),
        "matchExpressions": [{"key": meta.LABEL_COMPONENT, "operator": "NotIn", "values": [REST]}],
    }
    operator = {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: settings.operator_namespace}},
        "podSelector": {"matchLabels": dict(OPERATOR_POD_LABELS)},
    }
    ssh: dict[str, Any] = {"ports": [{"protocol": "TCP", "port": meta.SSH_PORT}]}
    if settings.ssh_from:
        ssh["from"] = [{"ipBlock": {"cidr": cidr}} for cidr in settings.ssh_from]
    rest = {"matchLabels": {**_cluster_pods(c), meta.LABEL_COMPONENT: REST}}
    login = {"matchLabels": {**_cluster_pods(c), meta.LABEL_COMPONENT: LOGIN}}
    rest_port = {"protocol": "TCP", "port": meta.SLURMRESTD_PORT}
    return [
        _policy(cluster, meta.network_policy(c, "slurm"), but_rest, [{"from": [own]}]),
        _policy(cluster, meta.network_policy(c, "slurmrestd"), rest, [{"from": [operator], "ports": [rest_port]}]),
        _policy(cluster, meta.network_policy(c, "login-ssh"), login, [ssh]),
    ]
