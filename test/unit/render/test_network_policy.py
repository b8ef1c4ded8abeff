"""The NetworkPolicies of a SlurmCluster select what they say: evaluated (as a CNI would) against every pod template
the cluster's components render, and against another cluster's pods in the same namespace."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from slurmctl.api.v1 import SlurmCluster
from slurmctl.render import meta
from slurmctl.render.network_policy import NetworkSettings, render_network_policies
from test.unit.render.samples import NAMESPACE, manifests, sample, sample_doc

Labels = Mapping[str, str]


def selects(selector: Mapping[str, Any], labels: Labels) -> bool:
    """A Kubernetes label selector (matchLabels, matchExpressions with In/NotIn) on a set of labels."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        value = labels.get(expr["key"])
        if expr["operator"] == "In" and value not in expr["values"]:
            return False
        if expr["operator"] == "NotIn" and value in expr["values"]:
            return False
    return True


def pod_templates(objects: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(workload name, pod template) of every workload."""
    for obj in objects:
        spec = obj.get("spec") or {}
        if obj["kind"] == "CronJob":
            yield obj["metadata"]["name"], spec["jobTemplate"]["spec"]["template"]
        elif "template" in spec:
            yield obj["metadata"]["name"], spec["template"]


def admitted(
    policies: list[dict[str, Any]], pod: Labels, peer: Labels, peer_namespace: str, port: int, peer_ip: str = ""
) -> bool | None:
    """Whether a connection from `peer` to `pod` on `port` is allowed (None: no policy selects the pod, so it is)."""
    selecting = [p for p in policies if selects(p["spec"]["podSelector"], pod)]
    if not selecting:
        return None
    for policy in selecting:
        for rule in policy["spec"]["ingress"]:
            if "ports" in rule and port not in [p["port"] for p in rule["ports"]]:
                continue
            if "from" not in rule:
                return True
            for source in rule["from"]:
                if "ipBlock" in source:
                    if peer_ip and ipaddress.ip_address(peer_ip) in ipaddress.ip_network(source["ipBlock"]["cidr"]):
                        return True
                    continue
                namespaces = source.get("namespaceSelector")
                by_name = {"kubernetes.io/metadata.name": peer_namespace}
                ns_ok = selects(namespaces, by_name) if namespaces else peer_namespace == NAMESPACE
                if ns_ok and selects(source.get("podSelector") or {}, peer):
                    return True
    return False


OPERATOR = {"app.kubernetes.io/name": "slurmctl", "app.kubernetes.io/component": "operator"}


@pytest.fixture(scope="module")
def research() -> tuple[dict[str, Labels], list[dict[str, Any]]]:
    cluster = sample("research")
    objects = manifests(cluster)
    pods = {name: template["metadata"]["labels"] for name, template in pod_templates(objects)}
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    return pods, policies


def test_every_pod_of_the_cluster_is_selected_and_slurmrestd_only_takes_the_operator(
    research: tuple[dict[str, Labels], list[dict[str, Any]]],
) -> None:
    pods, policies = research
    c = sample("research").metadata.name
    assert sorted(p["metadata"]["name"] for p in policies) == [f"{c}-login-ssh", f"{c}-slurm", f"{c}-slurmrestd"]
    rest = next(labels for name, labels in pods.items() if labels[meta.LABEL_COMPONENT] == "rest")
    controller = next(labels for labels in pods.values() if labels[meta.LABEL_COMPONENT] == "controller")
    for name, labels in pods.items():
        if labels is rest:
            continue
        # slurmctld, slurmd, slurmdbd, srun's ports: from the cluster's own pods, any port; from nowhere else.
        assert admitted(policies, labels, controller, NAMESPACE, meta.SLURMCTLD_PORT), name
        assert admitted(policies, labels, rest, NAMESPACE, 40000), name  # srun from anywhere in the cluster
        assert not admitted(policies, labels, {"app": "other"}, NAMESPACE, meta.SLURMD_PORT), name
        assert not admitted(policies, labels, OPERATOR, "elsewhere", meta.SLURMCTLD_PORT), name
    assert admitted(policies, rest, OPERATOR, "slurmctl-system", meta.SLURMRESTD_PORT)
    assert not admitted(policies, rest, OPERATOR, "slurmctl-system", meta.SLURMCTLD_PORT)
    assert not admitted(policies, rest, OPERATOR, "team-b", meta.SLURMRESTD_PORT), "another namespace's slurmctl"
    assert not admitted(policies, rest, controller, NAMESPACE, meta.SLURMRESTD_PORT), "not even the cluster's own pods"


def test_another_cluster_in_the_namespace_is_neither_selected_nor_admitted(
    research: tuple[dict[str, Labels], list[dict[str, Any]]],
) -> None:
    pods, policies = research
    doc = sample_doc("minimal")
    doc["metadata"]["name"] = "other"
    other = {
        name: template["metadata"]["labels"]
        for name, template in pod_templates(manifests(SlurmCluster.model_validate(doc)))
    }
    for labels in other.values():
        assert admitted(policies, labels, labels, NAMESPACE, meta.SLURMD_PORT) is None, "not this cluster's policies"
    for name, labels in pods.items():
        for peer in other.values():
            assert not admitted(policies, labels, peer, NAMESPACE, meta.SLURMD_PORT), name


def test_login_ssh_from_anywhere_by_default_or_from_the_admin_s_networks() -> None:
    cluster = sample("minimal")
    login = next(
        template["metadata"]["labels"]
        for _name, template in pod_templates(manifests(cluster))
        if template["metadata"]["labels"][meta.LABEL_COMPONENT] == "login"
    )
    anywhere = render_network_policies(cluster, NetworkSettings())
    assert admitted(anywhere, login, {}, "elsewhere", meta.SSH_PORT)
    assert not admitted(anywhere, login, {}, "elsewhere", 8080)
    narrowed = render_network_policies(cluster, NetworkSettings(ssh_from=("10.1.0.0/16",)))
    (rule,) = next(p for p in narrowed if p["metadata"]["name"].endswith("-login-ssh"))["spec"]["ingress"]
    assert rule == {
        "ports": [{"protocol": "TCP", "port": meta.SSH_PORT}],
        "from": [{"ipBlock": {"cidr": "10.1.0.0/16"}}],
    }
    assert not admitted(narrowed, login, {}, "elsewhere", meta.SSH_PORT, peer_ip="192.168.1.2")
    assert admitted(narrowed, login, {}, "elsewhere", meta.SSH_PORT, peer_ip="10.1.2.3")
