"""Pod Security Admission judges a SlurmCluster's pods (docs/pod-security.md): the same small cluster, with accounting
into a test database, in a namespace labelled `pod-security.kubernetes.io/enforce=baseline` and in one labelled
`restricted`, reconciled by one operator watching both.

Every component that meets the namespace's level runs; every one that cannot ends in its condition and a Warning
Event naming the pod, the level and the violation, as the API server words them (the operator asks it with a dry-run
create: reconcilers/admission.py), instead of a StatefulSet silently stuck at 0 pods. Under baseline: slurmctld,
slurmrestd, slurmdbd, the database and the populate-jail Job run; slurmd (privileged) and the login nodes' sshd
(SYS_ADMIN) are refused. Under restricted: slurmrestd, slurmdbd with its munge sidecar and the database run as
non-root users; slurmctld and populate-jail (root, capabilities) are refused, and the workers and login nodes wait for
the jail. The operator itself meets restricted where it is installed (test_operator_pod.py, test_helm.py).
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from test.e2e.harness import Node
from test.e2e.pods.conftest import require_images
from test.e2e.pods.slurm import TEST_DB_IMAGE, Kube, accounting_into, database, pod_ready, slurm_image, small_cluster
from test.waiting import until

pytestmark = pytest.mark.e2e
NAME = "psa"
DB = f"{NAME}-db"
LEVELS = ("baseline", "restricted")
# The pods a component makes, by its label.
COMPONENT = "app.kubernetes.io/component"


@pytest.fixture(scope="module")
def namespaces() -> dict[str, str]:
    tag = uuid.uuid4().hex[:6]
    return {level: f"psa-{tag}-{level}" for level in LEVELS}


@pytest.fixture(scope="module")
def namespace_of_module(namespaces: dict[str, str]) -> str:
    """The module's operator watches both namespaces (conftest's operator fixture passes this to --watch-namespace)."""
    return ",".join(namespaces.values())


@pytest.fixture(scope="module")
def clusters(node: Node, namespaces: dict[str, str], operator: Path) -> Iterator[dict[str, Kube]]:
    """Each namespace labelled with its level (enforced at the latest version), holding the test database (run as
    restricted allows) and the cluster; both created at once, deleted at the end."""
    require_images(node, [TEST_DB_IMAGE, slurm_image("accounting")])
    kubes = {}
    for level, ns in namespaces.items():
        node.kubectl("create", "namespace", ns)
        labels = [f"pod-security.kubernetes.io/enforce={level}", "pod-security.kubernetes.io/enforce-version=latest"]
        node.kubectl("label", "namespace", ns, *labels)
        kube = Kube(node, ns)
        db = database(DB, secrets.token_hex(12), restricted=True)
        kube.apply([*db, *small_cluster(NAME, accounting=accounting_into(DB))])
        kubes[level] = kube
    yield kubes
    for ns in namespaces.values():
        node.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    for ns in namespaces.values():
        until(lambda ns=ns: node.kubectl("get", "namespace", ns, check=False).returncode != 0, timeout=180, what=ns)


def conditions(kube: Kube) -> dict[str, dict[str, Any]]:
    status = kube.json("slurmcluster", NAME).get("status", {})
    return {c["type"]: c for c in status.get("conditions") or []}


def settled(kube: Kube, expected: dict[str, str], operator: Path) -> dict[str, dict[str, Any]]:
    """Wait until each condition has the expected reason; the conditions then."""
    seen: dict[str, dict[str, Any]] = {}

    def holds() -> bool:
        seen.clear()
        seen.update(conditions(kube))
        return all(seen.get(t, {}).get("reason") == reason for t, reason in expected.items())

    try:
        until(holds, timeout=360, interval=3, what=f"conditions {expected} in {kube.ns}")
    except AssertionError:
        print({t: (c.get("reason"), c.get("message")) for t, c in seen.items()})
        print(kube.run("get", "pods,statefulsets,deployments,jobs", "-o", "wide", check=False))
        print(operator.read_text()[-4000:])
        raise
    return seen


def refusal_events(kube: Kube) -> list[str]:
    events = kube.json("events", "--field-selector", "involvedObject.kind=SlurmCluster,reason=PodRefused")["items"]
    return [e["message"] for e in events if e["type"] == "Warning"]


def running_components(kube: Kube) -> set[str]:
    """The components (the database by its app label) with a ready pod."""
    ready = [p["metadata"].get("labels") or {} for p in kube.json("pods")["items"] if pod_ready(p)]
    return {labels.get(COMPONENT) or labels.get("app", "") for labels in ready}


def test_under_baseline_what_needs_no_privilege_runs_and_slurmd_and_sshd_are_refused_by_name(
    clusters: dict[str, Kube], operator: Path
) -> None:
    kube = clusters["baseline"]
    found = settled(
        kube,
        {
            "ControllerReady": "Ready",
            "RestReady": "Ready",
            "AccountingReady": "Ready",
            "JailPopulated": "Populated",
            "WorkersReady": "PodRefused",
            "LoginReady": "PodRefused",
        },
        operator,
    )
    workers, login = found["WorkersReady"]["message"], found["LoginReady"]["message"]
    assert f'pods "{NAME}-worker-cpu-0" is forbidden: violates PodSecurity "baseline:latest"' in workers, workers
    assert 'privileged (container "slurmd" must not set securityContext.privileged=true)' in workers, workers
    assert f'pods "{NAME}-login-0" is forbidden: violates PodSecurity "baseline:latest"' in login, login
    assert '"SYS_ADMIN"' in login, login
    assert kube.phase(NAME) == "Degraded"
    events = refusal_events(kube)
    assert any('violates PodSecurity "baseline:latest"' in e for e in events), events
    assert running_components(kube) >= {"controller", "rest", "accounting", DB}
    assert not kube.pods("app.kubernetes.io/component in (workers,login)"), "nothing the level refuses exists"


def test_under_restricted_slurmrestd_slurmdbd_and_the_database_run_without_root_and_the_rest_is_named(
    clusters: dict[str, Kube], operator: Path
) -> None:
    kube = clusters["restricted"]
    found = settled(
        kube,
        {
            "RestReady": "Ready",
            "AccountingReady": "Ready",
            "ControllerReady": "PodRefused",
            "JailPopulated": "PodRefused",
            "WorkersReady": "WaitingForJail",
            "LoginReady": "WaitingForJail",
        },
        operator,
    )
    controller, jail = found["ControllerReady"]["message"], found["JailPopulated"]["message"]
    assert f'pods "{NAME}-controller-0" is forbidden: violates PodSecurity "restricted:latest"' in controller
    assert "runAsNonRoot != true" in controller and '"slurmctld"' in controller, controller
    assert f"Job {NAME}-populate-jail" in jail and 'violates PodSecurity "restricted:latest"' in jail, jail
    events = refusal_events(kube)
    assert any('violates PodSecurity "restricted:latest"' in e for e in events), events
    assert running_components(kube) >= {"rest", "accounting", DB}
    (slurmdbd,) = kube.pods(f"{COMPONENT}=accounting")
    pod = slurmdbd["metadata"]["name"]
    assert kube.exec(pod, "slurmdbd", "id", "-u").strip() == "64030", "slurmdbd runs as SlurmUser from the start"
    assert kube.exec(pod, "munge", "id", "-u").strip() == "990", "munged runs as munge from the start"
    assert kube.exec(pod, "slurmdbd", "grep", "^CapEff", "/proc/1/status").split()[1] == "0" * 16
