"""The Helm chart (charts/slurmctl) installs what config/ does: with default values `helm template` gives
config/default's objects, every field equal (the Namespace excepted); `watchNamespaces` gives exactly what `slurmctl
rbac` prints; the admin's opt-ins `rbac.namespaced=false` and `rbac.nodeCordon` give config/cluster-wide and the
node-cordon component; `metrics.serviceMonitor.enabled` adds config/prometheus's ServiceMonitor; `helm lint --strict`
passes; and the API server accepts the render (server-side dry run) over a config/default install without a conflict.

Helm is the client hack/helm.sh pins and hack/setup.sh caches, never one on PATH; kubectl is the control plane's own
(test/conftest.py puts it first in PATH).
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

from test.e2e.harness import CHART, REPO, ControlPlane, Helm

pytestmark = pytest.mark.e2e
RELEASE = "slurmctl"
NAMESPACE = "slurmctl-system"
TEAMS = ("--set", "watchNamespaces={team-a,team-b}")
CLUSTER_WIDE = ("--set", "rbac.namespaced=false", "--set-json", "watchNamespaces=[]")
NODE_CORDON = ("--set", "rbac.nodeCordon=true")
Key = tuple[str, str, str, str]


class ChartHelm(Helm):
    def template(self, *args: str, namespace: str = NAMESPACE) -> str:
        done = self.run("template", RELEASE, str(CHART), "-n", namespace, *args)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def render(self, *args: str, namespace: str = NAMESPACE) -> dict[Key, dict[str, Any]]:
        return by_key(yaml.safe_load_all(self.template(*args, namespace=namespace)))


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> ChartHelm:
    base = Helm.at(tmp_path_factory.mktemp("helm"))
    return ChartHelm(base.binary, base.env)


def key(obj: dict[str, Any]) -> Key:
    meta = obj["metadata"]
    return (obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])


def by_key(objects: Iterable[Any]) -> dict[Key, dict[str, Any]]:
    found: dict[Key, dict[str, Any]] = {}
    for obj in objects:
        if obj:
            assert key(obj) not in found, f"rendered twice: {key(obj)}"
            found[key(obj)] = obj
    return found


def kustomize(directory: str | Path) -> list[dict[str, Any]]:
    done = subprocess.run(
        ["kubectl", "kustomize", str(REPO / "config" / directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def without_namespace(objects: Iterable[dict[str, Any]]) -> dict[Key, dict[str, Any]]:
    return by_key(o for o in objects if o["kind"] != "Namespace")


def test_default_values_render_config_default_but_its_namespace(helm: ChartHelm) -> None:
    config = kustomize("default")
    # A chart does not own its release's namespace: `helm install -n X --create-namespace` creates it (unlabelled),
    # and an uninstall that deleted it would delete everything in it. So config/default's Namespace, with its
    # pod-security label, is the one object the chart leaves out; docs/helm.md says to label the namespace first.
    (namespace,) = [o for o in config if o["kind"] == "Namespace"]
    assert namespace["metadata"]["name"] == NAMESPACE
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert helm.render() == without_namespace(config)


def test_the_crd_is_kept_at_uninstall_unless_the_values_say_otherwise(helm: ChartHelm) -> None:
    """In templates/ (so `helm upgrade` upgrades it) with Helm's keep policy, so that `helm uninstall` leaves every
    SlurmCluster and its pods alone; crds.install=false leaves the CRD to whoever manages it."""
    crd = ("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", "slurmclusters.slurm.slurmctl.io")
    assert helm.render()[crd]["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert "annotations" not in helm.render("--set", "crds.keep=false")[crd]["metadata"]
    assert crd not in helm.render("--set", "crds.install=false")


def test_watch_namespaces_get_exactly_what_slurmctl_rbac_prints_and_the_operator_watches_them(
    helm: ChartHelm,
) -> None:
    release_ns = "hpc-operator"  # not the default: the ServiceAccount's namespace must follow the release
    default = helm.render(namespace=release_ns)
    teams = helm.render(*TEAMS, namespace=release_ns)
    printed = subprocess.run(
        [sys.executable, "-m", "slurmctl.cli", "rbac", "--watch-namespace", "team-a,team-b",
         "--service-account", "slurmctl-operator", "--service-account-namespace", release_ns],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    rbac = by_key(yaml.safe_load_all(printed))
    assert {k[1:] for k in rbac} >= {("Role", "team-a", "slurmctl-operator"), ("Role", "team-b", "slurmctl-operator")}
    assert {k: teams[k] for k in rbac} == rbac
    # Instead of the Role in `default`: nothing else changes but the Deployment's flag.
    in_default = {k for k in default if k[2] == "default"}
    assert {k[1] for k in in_default} == {"Role", "RoleBinding"}
    assert set(teams) == (set(default) - in_default) | set(rbac)
    assert not [
        o for o in teams.values() if o["kind"] == "ClusterRoleBinding" and o["roleRef"]["name"] == "slurmctl-operator"
    ]
    deployment = ("apps/v1", "Deployment", release_ns, "slurmctl-operator")
    expected = copy.deepcopy(default[deployment])
    args = expected["spec"]["template"]["spec"]["containers"][0]["args"]
    args[args.index("--watch-namespace=default")] = "--watch-namespace=team-a,team-b"
    assert teams[deployment] == expected
    assert all(teams[k] == default[k] for k in set(default) - in_default - {deployment})


def test_the_cluster_wide_opt_in_renders_config_cluster_wide(helm: ChartHelm) -> None:
    cluster_wide = helm.render(*CLUSTER_WIDE)
    assert cluster_wide == without_namespace(kustomize("cluster-wide"))
    role = cluster_wide[("rbac.authorization.k8s.io/v1", "ClusterRole", "", "slurmctl-operator")]
    assert {"secrets"} in [set(rule["resources"]) for rule in role["rules"]], "what the admin opts into"
    assert not [k for k in cluster_wide if k[1] == "Role" and k[3] == "slurmctl-operator"]


def test_the_node_cordon_opt_in_renders_the_node_cordon_component(helm: ChartHelm, tmp_path: Path) -> None:
    """A kustomization of the admin's own, config/default with config/components/node-cordon, is the chart's
    rbac.nodeCordon: a ClusterRole that may patch Nodes, and --allow-node-cordon."""
    config = Path(os.path.relpath(REPO / "config", tmp_path))
    (tmp_path / "kustomization.yaml").write_text(
        f"resources: [{config / 'default'}]\ncomponents: [{config / 'components' / 'node-cordon'}]\n"
    )
    cordon = helm.render(*NODE_CORDON)
    assert cordon == without_namespace(kustomize(tmp_path))
    added = set(cordon) - set(helm.render())
    assert {k[1:] for k in added} == {("ClusterRole", "", "slurmctl-operator-node-cordon"),
                                      ("ClusterRoleBinding", "", "slurmctl-operator-node-cordon")}  # fmt: skip
    role = cordon[("rbac.authorization.k8s.io/v1", "ClusterRole", "", "slurmctl-operator-node-cordon")]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"]}]
    (container,) = cordon[("apps/v1", "Deployment", NAMESPACE, "slurmctl-operator")]["spec"]["template"]["spec"][
        "containers"
    ]
    assert "--allow-node-cordon" in container["args"]


def test_the_namespaced_mode_without_namespaces_fails_saying_why(helm: ChartHelm) -> None:
    done = helm.run("template", RELEASE, str(CHART), "--set-json", "watchNamespaces=[]")
    assert done.returncode != 0
    assert "rbac.namespaced=true grants the operator Roles only in watchNamespaces" in done.stderr


def test_the_service_monitor_value_adds_config_prometheus_s_service_monitor(helm: ChartHelm) -> None:
    plain = helm.render()
    monitored = helm.render("--set", "metrics.serviceMonitor.enabled=true")
    assert {k: v for k, v in monitored.items() if k not in plain} == by_key(kustomize("prometheus"))
    assert {k: monitored[k] for k in plain} == plain


def test_values_reach_the_operator_pod(helm: ChartHelm) -> None:
    deployment = helm.render(
        "--set", "image.tag=0.2.0", "--set", "replicas=3", "--set", "logLevel=debug", "--set", "logFormat=json",
        "--set", "extraArgs={--node-lost-after=120}", "--set", "nodeSelector.pool=system",
        "--set", "podAnnotations.team=hpc",
    )[("apps/v1", "Deployment", NAMESPACE, "slurmctl-operator")]  # fmt: skip
    pod = deployment["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert deployment["spec"]["replicas"] == 3
    assert container["image"] == "ghcr.io/slurmctl/operator:0.2.0"
    assert container["args"][-3:] == ["--log-level=debug", "--log-format=json", "--node-lost-after=120"]
    assert pod["spec"]["nodeSelector"] == {"pool": "system"}
    assert pod["metadata"]["annotations"] == {"team": "hpc"}


def test_the_policy_values_reach_the_operators_flags_and_default_to_none(helm: ChartHelm) -> None:
    """`policy` maps one value to one `slurmctl run` flag; the defaults add none (the operator's closed default), and
    an image prefix without a trailing '/' fails the install, as the operator itself would refuse it."""
    key = ("apps/v1", "Deployment", NAMESPACE, "slurmctl-operator")
    (plain,) = helm.render()[key]["spec"]["template"]["spec"]["containers"]
    assert not any("allow" in arg for arg in plain["args"]), plain["args"]
    (container,) = helm.render(
        "--set", "policy.allowHostPath=true", "--set", "policy.allowControlPlaneNodes=true",
        "--set", "policy.allowRootLogins=true", "--set", "policy.allowRootJobs=true",
        "--set", "policy.allowPrivilegedJobs=true",
        "--set", "policy.allowedImages={reg.example/a/,reg.example/b/}",
        "--set", "policy.allowedSlurmKeys={Prolog,PyxisPath}", "--set", "policy.allowedVolumeSources={nfs}",
    )[key]["spec"]["template"]["spec"]["containers"]  # fmt: skip
    assert [arg for arg in container["args"] if arg not in plain["args"]] == [
        "--allow-host-path",
        "--allow-control-plane-nodes",
        "--allow-root-logins",
        "--allow-root-jobs",
        "--allow-privileged-jobs",
        "--allowed-images=reg.example/a/,reg.example/b/",
        "--allowed-slurm-keys=Prolog,PyxisPath",
        "--allowed-volume-sources=nfs",
    ]
    done = helm.run("template", RELEASE, str(CHART), "--set", "policy.allowedImages={ghcr.io/slurmctl}")
    assert done.returncode != 0 and "allowedImages" in done.stderr


def test_a_misspelt_value_is_refused(helm: ChartHelm) -> None:
    """values.schema.json: a typo fails the install instead of being ignored."""
    done = helm.run("template", RELEASE, str(CHART), "--set", "replica=3")
    assert done.returncode != 0
    assert "replica" in done.stderr


@pytest.mark.parametrize(
    "values", [(), TEAMS, CLUSTER_WIDE, NODE_CORDON], ids=["default", "teams", "cluster-wide", "node-cordon"]
)
def test_helm_lint_strict_passes(helm: ChartHelm, values: tuple[str, ...]) -> None:
    done = helm.run("lint", "--strict", str(CHART), *values)
    assert done.returncode == 0, done.stdout + done.stderr


def server_dry_run(plane: ControlPlane, text: str, *extra: str) -> list[str]:
    """`kubectl apply --server-side --dry-run=server` as Helm's field manager: what kubectl printed per object."""
    done = plane.kubectl(
        "apply", "--server-side", "--dry-run=server", "--field-manager=helm", *extra, "-f", "-", input=text
    )
    return done.stdout.splitlines()


def test_the_api_server_accepts_the_default_render_over_a_config_default_install(
    installed: ControlPlane, helm: ChartHelm
) -> None:
    """`installed` applied config/default; the chart's objects are the same, so applying them as another field manager
    is accepted without a conflict (a field both set to different values would be one)."""
    text = helm.template()
    lines = server_dry_run(installed, text)
    assert len(lines) == len(by_key(yaml.safe_load_all(text))), lines
    assert all(line.endswith("(server dry run)") for line in lines), lines


async def test_the_api_server_accepts_the_namespaced_render(
    installed: ControlPlane, helm: ChartHelm, namespace: str
) -> None:
    """The Roles of an install watching a namespace that exists (`namespace`); --force-conflicts: the Deployment's
    args differ from config/default's, which is an update, not an error."""
    text = helm.template("--set", f"watchNamespaces={{{namespace}}}")
    lines = server_dry_run(installed, text, "--force-conflicts")
    assert "role.rbac.authorization.k8s.io/slurmctl-operator serverside-applied (server dry run)" in lines, lines
    assert len(lines) == len(by_key(yaml.safe_load_all(text))), lines
