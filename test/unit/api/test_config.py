"""The kustomize tree: what `kubectl apply -k config/default` installs is valid, least-privilege and consistent."""

from __future__ import annotations

import subprocess
from functools import cache
from typing import Any

import kubernetes_validate
import pytest
import yaml

import slurmctl
from slurmctl.render import rbac
from test.unit.api.helpers import REPO


@cache
def kustomize(directory: str) -> tuple[dict[str, Any], ...]:
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(REPO / "config" / directory)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return tuple(doc for doc in yaml.safe_load_all(rendered) if doc)


def by_kind(objects: tuple[dict[str, Any], ...], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]


def test_default_renders_the_expected_objects() -> None:
    names = {(obj["kind"], obj["metadata"]["name"], obj["metadata"].get("namespace")) for obj in kustomize("default")}
    assert names == {
        ("Namespace", "slurmctl-system", None),
        ("CustomResourceDefinition", "slurmclusters.slurm.slurmctl.io", None),
        ("ServiceAccount", "slurmctl-operator", "slurmctl-system"),
        ("Role", "slurmctl-operator", "default"),
        ("RoleBinding", "slurmctl-operator", "default"),
        ("ClusterRole", "slurmctl-operator-cluster-scoped", None),
        ("ClusterRoleBinding", "slurmctl-operator-cluster-scoped", None),
        ("Role", "slurmctl-leader-election", "slurmctl-system"),
        ("RoleBinding", "slurmctl-leader-election", "slurmctl-system"),
        ("ClusterRole", "slurmctl-slurmcluster-editor", None),
        ("ClusterRole", "slurmctl-slurmcluster-viewer", None),
        ("Deployment", "slurmctl-operator", "slurmctl-system"),
        ("Service", "slurmctl-operator-metrics", "slurmctl-system"),
    }


def test_the_crd_outlives_a_helm_uninstall() -> None:
    """Deleting the CRD deletes every SlurmCluster and, by garbage collection, their pods: Helm must keep it, and
    config/crd carries the same annotation so that both installs hold the same object (docs/helm.md)."""
    (crd,) = by_kind(kustomize("default"), "CustomResourceDefinition")
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}


def test_slurmcluster_editors_are_granted_by_an_administrator_not_by_the_edit_role() -> None:
    """Worker and login pods are privileged: editing a SlurmCluster is root on a node, which Kubernetes' `edit` and
    `admin` roles must not hand out to every namespace editor. Reading one is harmless: `view` gets it."""
    roles = {o["metadata"]["name"]: o for o in kustomize("default") if o["kind"] == "ClusterRole"}
    aggregated = {
        name: sorted(k.rsplit("-", 1)[1] for k in (role["metadata"].get("labels") or {}) if "aggregate-to-" in k)
        for name, role in roles.items()
    }
    assert aggregated["slurmctl-slurmcluster-editor"] == []
    assert aggregated["slurmctl-slurmcluster-viewer"] == ["view"]


def test_every_rendered_object_is_valid_for_kubernetes_1_30() -> None:
    checked = 0
    for obj in kustomize("default"):
        if obj["kind"] == "CustomResourceDefinition":
            continue
        kubernetes_validate.validate(obj, "1.30", strict=True)
        checked += 1
    assert checked >= 10


def test_strict_validation_would_catch_a_typo() -> None:
    deployment = dict(by_kind(kustomize("default"), "Deployment")[0])
    deployment["spec"] = {**deployment["spec"], "replica": 1}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, "1.30", strict=True)


def test_rbac_has_no_wildcards() -> None:
    roles = [obj for obj in kustomize("default") if obj["kind"] in ("ClusterRole", "Role")]
    assert len(roles) == 5
    for role in roles:
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
                assert "*" not in rule.get(field, []), f"{role['metadata']['name']}: {rule}"
                assert not any("*" in value for value in rule.get(field, [])), f"{role['metadata']['name']}: {rule}"


def _grants(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def named(objects: tuple[dict[str, Any], ...], kind: str, name: str) -> dict[str, Any]:
    (obj,) = [o for o in by_kind(objects, kind) if o["metadata"]["name"] == name]
    return obj


def test_operator_role_grants_what_the_reconcilers_need_and_nothing_else() -> None:
    objects = kustomize("default")
    grants = _grants(named(objects, "Role", "slurmctl-operator")) | _grants(
        named(objects, "ClusterRole", "slurmctl-operator-cluster-scoped")
    )
    crud = {"get", "list", "watch", "create", "patch", "delete"}  # every write is a server-side apply: no update
    for group, resource in [("", "configmaps"), ("", "secrets"), ("", "services"), ("apps", "statefulsets")]:
        assert {verb for g, r, verb in grants if (g, r) == (group, resource)} == crud
    for resource in ("jobs", "cronjobs"):
        assert {verb for g, r, verb in grants if (g, r) == ("batch", resource)} == crud
    assert {verb for g, r, verb in grants if (g, r) == ("policy", "poddisruptionbudgets")} == crud - {"delete"}
    unused = ("customresourcedefinitions", "namespaces")
    assert not [(g, r, v) for g, r, v in grants if r in unused], "nothing reads CRDs"
    # Claims hold user data: one is made (a Slurm upgrade's database backup, server-side apply), none listed or deleted.
    assert {v for g, r, v in grants if r == "persistentvolumeclaims"} == {"get", "create", "patch"}
    # Nodes are read (a cordon drains the Slurm node); patched only with the admin's node-cordon opt-in.
    assert {v for g, r, v in grants if r == "nodes"} == {"get", "list", "watch"}
    # Pods are read, created only for an elastic node Slurm powers up, deleted only to re-create a drained worker (or
    # when Slurm powered an elastic node down), patched (server-side apply) only for the evictable label, and only
    # their status is written (SlurmNodeState).
    assert {v for g, r, v in grants if r == "pods"} == {"get", "list", "watch", "create", "patch", "delete"}
    assert {v for g, r, v in grants if r == "pods/status"} == {"patch"}
    assert {v for g, r, v in grants if r == "slurmclusters"} == {"get", "list", "watch"}
    assert {v for g, r, v in grants if r == "slurmclusters/status"} == {"get", "patch"}
    assert {(g, v) for g, r, v in grants if r == "events"} == {
        ("", "create"),
        ("", "patch"),
        ("events.k8s.io", "create"),
        ("events.k8s.io", "patch"),
    }
    assert {v for g, r, v in grants if (g, r) == ("k8s.mariadb.com", "mariadbs")} == crud
    assert {v for g, r, v in grants if (g, r) == ("networking.k8s.io", "networkpolicies")} == crud


def test_the_default_install_grants_the_operator_nothing_outside_the_namespace_it_watches_but_reading_nodes() -> None:
    """Restricted by default: no Secret, pod or workload of another namespace (kube-system's included) is the
    operator's. The e2e test test_the_default_install_s_operator_account_may_read_no_secret_outside_default asks the
    API server the same (`kubectl auth can-i`)."""
    objects = kustomize("default")
    operator = {"kind": "ServiceAccount", "name": "slurmctl-operator", "namespace": "slurmctl-system"}
    bound = {b["roleRef"]["name"] for b in by_kind(objects, "ClusterRoleBinding") if operator in b["subjects"]}
    cluster_wide = set().union(*(_grants(named(objects, "ClusterRole", name)) for name in bound))
    assert cluster_wide == {("", "nodes", v) for v in ("get", "list", "watch")}
    (deployment,) = by_kind(objects, "Deployment")
    assert "--watch-namespace=default" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert {r["metadata"]["namespace"] for r in by_kind(objects, "Role")} == {"default", "slurmctl-system"}


def test_every_install_grants_the_same_rules_from_rbac_py() -> None:
    """One source of truth: config/default's Role, config/cluster-wide's ClusterRole, `slurmctl rbac`'s Roles and the
    node-cordon component's ClusterRole are rbac.py's rules."""
    role = named(kustomize("default"), "Role", "slurmctl-operator")
    wide = kustomize("cluster-wide")
    assert _grants(named(wide, "ClusterRole", "slurmctl-operator")) == _grants(role)
    assert not [o for o in wide if o["kind"] in ("Role", "RoleBinding") and o["metadata"]["namespace"] == "default"]
    (deployment,) = by_kind(wide, "Deployment")
    assert not [a for a in deployment["spec"]["template"]["spec"]["containers"][0]["args"] if "watch-namespace" in a]
    objects = rbac.for_install(["team-a", "team-b"])
    roles = [o for o in objects if o["kind"] == "Role"]
    assert [r["metadata"]["namespace"] for r in roles] == ["team-a", "team-b"]
    assert all(_grants(r) == _grants(role) for r in roles)
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "ClusterRole"] == [
        "slurmctl-operator-cluster-scoped"
    ]
    subject = [{"kind": "ServiceAccount", "name": "slurmctl-operator", "namespace": "slurmctl-system"}]
    assert [b["subjects"] for b in objects if b["kind"].endswith("Binding")] == [subject] * 3
    cordon = [o for o in rbac.for_install([], cordon=True) if o["kind"] == "ClusterRole"]
    assert {o["metadata"]["name"]: _grants(o) for o in cordon}["slurmctl-operator-node-cordon"] == {
        ("", "nodes", "patch")
    }


def test_leader_election_is_namespaced_and_bound_to_the_operator() -> None:
    objects = kustomize("default")
    role = named(objects, "Role", "slurmctl-leader-election")
    assert role["metadata"]["namespace"] == "slurmctl-system"
    assert _grants(role) >= {("coordination.k8s.io", "leases", v) for v in ("get", "create", "update")}
    for binding in by_kind(objects, "RoleBinding") + by_kind(objects, "ClusterRoleBinding"):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "slurmctl-operator", "namespace": "slurmctl-system"}
        ]


def test_operator_deployment() -> None:
    deployment = by_kind(kustomize("default"), "Deployment")[0]
    assert deployment["spec"]["replicas"] == 2, "two, with leader election: a standby takes the Lease over"
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "slurmctl-operator"
    (container,) = pod["containers"]
    assert container["image"] == f"ghcr.io/slurmctl/operator:{slurmctl.__version__}"
    assert container["command"] + container["args"] == [
        "slurmctl",
        "run",
        "--leader-elect",
        "--metrics-bind-address=:8080",
        "--health-probe-bind-address=:8081",
        "--watch-namespace=default",
    ]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"metrics": 8080, "health": 8081}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert set(container["resources"]["requests"]) == {"cpu", "memory"}


def test_metrics_service_and_service_monitor_find_the_operator() -> None:
    """config/default has the metrics Service; config/prometheus only the ServiceMonitor, which needs the Prometheus
    Operator's CRDs."""
    (service,) = by_kind(kustomize("default"), "Service")
    (monitor,) = kustomize("prometheus")
    assert monitor["kind"] == "ServiceMonitor"
    deployment = by_kind(kustomize("default"), "Deployment")[0]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["metadata"]["namespace"] == monitor["metadata"]["namespace"] == "slurmctl-system"
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "30s"}]


def test_samples_are_valid_kubernetes_objects() -> None:
    for path in sorted((REPO / "config" / "samples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc["kind"] != "SlurmCluster":
                kubernetes_validate.validate(doc, "1.30", strict=True)
