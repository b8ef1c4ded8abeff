"""Real-pods fixtures: the machine's cluster (test/e2e/pods/machine.py: a control plane and three nodes, shared by
the package's modules, even across xdist workers), each module's turn on it, and each module's namespace with an
operator that watches only that namespace.

The teardown fails if any process, mount, bridge or network namespace of the cluster is left behind. Only one node
cluster can run on a machine (the pod bridge and DNS namespace are machine-wide): with `make cluster-up` running,
these tests fail and say so; set SLURMCTL_E2E_CLUSTER_DIR to that cluster's state directory (e.g. .cluster) to run
them on it instead (it is left running; nodes 2 and 3 are added to it).
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
import yaml

from test.e2e.harness import REPO, Node, node_script
from test.e2e.operator import e2e_operator_kubeconfig
from test.e2e.pods.machine import Share, SharedCluster, Turn, prepare, run_root
from test.e2e.pods.slurm import Kube, OperatorProcess, operator_process, slurm_image
from test.waiting import until

HERE = Path(__file__).parent  # the real-pods package
# What every SlurmCluster of these tests runs; a module that needs more checks them itself (require_images).
SLURM_IMAGES = tuple(slurm_image(c) for c in ("controller", "worker", "login", "rest", "populate-jail"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test that used a cluster's namespace (a `Kube` argument) reports what Slurm said at that moment: a
    job that never ran or a node Slurm drained on its own explains most timeouts, and the namespace is gone later.
    With SLURMCTL_E2E_FAILURE_LOGS=DIR, every container's whole log goes to DIR/<test name>/ too."""
    report: pytest.TestReport = yield
    if report.when == "call" and report.failed:
        for kube in {id(v): v for v in getattr(item, "funcargs", {}).values() if isinstance(v, Kube)}.values():
            try:
                report.sections.append((f"Slurm in {kube.ns} at the failure", kube.slurm_state()))
                if logs := os.environ.get("SLURMCTL_E2E_FAILURE_LOGS"):
                    into = Path(logs) / item.name
                    kube.save_logs(into)
                    report.sections.append((f"Logs of {kube.ns}", f"every container's log saved in {into}"))
            except (AssertionError, ValueError, subprocess.SubprocessError) as exc:  # the API server is gone, ...
                report.sections.append((f"Slurm in {kube.ns} at the failure", f"not readable: {exc}"))
    return report


@pytest.fixture(scope="package")
def node(request: pytest.FixtureRequest) -> Iterator[Node]:
    """The machine's cluster (test/e2e/pods/machine.py): brought up by the first module that needs it. A plain run
    tears it down when the package ends and fails on leftovers; a distributed one leaves that to the xdist
    controller (`pytest_sessionfinish` in test/conftest.py), since other workers may still use it."""
    existing = os.environ.get("SLURMCTL_E2E_CLUSTER_DIR")
    if existing:
        cluster = Node(kubeconfig=Path(existing).resolve() / "kubeconfig", state_dir=Path(existing).resolve())
        prepare(cluster)
        yield cluster
        return
    shared = SharedCluster(run_root(request.config))
    try:
        yield shared.attach()
    except AssertionError as exc:
        pytest.fail(str(exc), pytrace=False)
    finally:
        if not hasattr(request.config, "workerinput") and (problems := shared.tear_down()):
            pytest.fail("\n".join(problems), pytrace=False)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    """Each module takes its turn on the machine before its first test (outside that test's timeout: the wait may be
    long) and gives it back after its last (`turn`). pytest calls this hook for every test of the session, not only
    for those below this conftest, which is how the other modules keep out of a quiet module's way."""
    share = item.config.stash.setdefault(_SHARE, Share(run_root(item.config)))
    if not share.held:
        wanted = turn(item)
        waited = share.take(wanted)
        if waited >= 1:
            print(f"{item.nodeid}: waited {waited:.0f}s for a turn on the machine ({wanted.value})")
    try:
        return (yield)
    finally:
        if nextitem is None or nextitem.module is not item.module:
            share.release()


def turn(item: pytest.Item) -> Turn:
    """A real-pods module shares the machine with the others unless marked `alone` (test/conftest.py ALONE), then
    quiet if the mark says so; any other module (unit, control plane, host-level Slurm) runs beside them all, except
    a quiet one."""
    if not item.path.is_relative_to(HERE):
        return Turn.BESIDE
    alone = item.get_closest_marker("alone")
    if alone is None:
        return Turn.SHARED
    return Turn.QUIET if alone.kwargs.get("quiet") else Turn.ALONE


_SHARE = pytest.StashKey[Share]()


def require_images(node: Node, refs: tuple[str, ...] | list[str]) -> None:
    """Fail (not skip) when `make images` has not imported an image the tests run."""
    assert node.state_dir is not None
    listed = node_script("images", node.state_dir)
    present = {line.split()[0] for line in listed.stdout.splitlines() if line.strip()}
    missing = [ref for ref in refs if ref not in present]
    assert not missing, f"images missing in the node's containerd (run `make images`): {missing}"


@pytest.fixture(scope="module")
def namespace_of_module() -> str:
    """The name of the module's namespace, known before it exists: the module's operator watches only it, so that
    modules running side by side never reconcile each other's clusters."""
    return f"slurm-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def operator_process_of_module(
    node: Node, namespace_of_module: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[OperatorProcess]:
    """CRD and RBAC as config/default installs them (minus the operator Deployment: the module runs the operator as
    `slurmctl run`, with the tests' ServiceAccount's token (test/e2e/operator.py), watching the module's namespace,
    with the module's OPERATOR_ARGS); the running operator, which tests of operator faults may kill and start again.
    It must be running when the module ends."""
    require_images(node, SLURM_IMAGES)
    manifests = node.kubectl("kustomize", str(REPO / "config" / "default")).stdout
    docs = [d for d in yaml.safe_load_all(manifests) if d and d.get("kind") != "Deployment"]
    node.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(docs))
    node.kubectl("wait", "--for=condition=Established", "crd/slurmclusters.slurm.slurmctl.io", "--timeout=60s")
    work = tmp_path_factory.mktemp("operator")
    kubeconfig = e2e_operator_kubeconfig(node, work / "kubeconfig")
    args = ("--watch-namespace", namespace_of_module, *getattr(request.module, "OPERATOR_ARGS", ()))
    with operator_process(kubeconfig, work / "operator.log", args) as proc:
        yield proc
        assert proc.running(), f"the operator exited:\n{proc.log.read_text()[-4000:]}"


@pytest.fixture(scope="module")
def operator(operator_process_of_module: OperatorProcess) -> Path:
    """The module's operator log."""
    return operator_process_of_module.log


@pytest.fixture(scope="module")
def kube(node: Node, namespace_of_module: str, operator: Path) -> Iterator[Kube]:
    """The module's namespace; deleted at the end (its operator still running), waited for, so that the next module
    has the nodes' CPUs."""
    ns = namespace_of_module
    node.kubectl("create", "namespace", ns)
    kube = Kube(node, ns)
    yield kube
    node.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    try:
        until(lambda: node.kubectl("get", "namespace", ns, check=False).returncode != 0, timeout=180, what=ns)
    except AssertionError as exc:  # the next module still runs, with fewer CPUs free until it goes
        print(f"namespace {ns} not deleted yet: {exc}")
