"""Real-pods fixtures: one control plane + one node (kubelet, containerd, CNI bridge, pod DNS) for this package.

The cluster lives in a temporary state directory and is torn down at the end of the package; the teardown fails if
any process, mount, bridge or network namespace of it is left behind. Only one node can run on a machine (the pod
bridge and DNS namespace are machine-wide): with `make cluster-up` running, these tests fail and say so; set
SLURMCTL_E2E_CLUSTER_DIR to that cluster's state directory (e.g. .cluster) to run them on it instead (it is left
running).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from test.e2e.harness import REPO, Node, control_plane_script, node_script
from test.e2e.operator import service_account_kubeconfig
from test.e2e.pods.slurm import Kube, OperatorProcess, operator_process, slurm_image
from test.waiting import until

TEST_IMAGE = "localhost/slurmctl-test/busybox:1"
# What every SlurmCluster of these tests runs; a module that needs more checks them itself (require_images).
SLURM_IMAGES = tuple(slurm_image(c) for c in ("controller", "worker", "login", "rest", "populate-jail"))
BRIDGE = "slurmctl0"


@dataclass
class Leftovers:
    """What a torn-down cluster left behind, found by recorded PID, by command line, in mountinfo and in netlink."""

    processes: list[str] = field(default_factory=list)
    mounts: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    netns: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    rules: list[str] = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.processes or self.mounts or self.links or self.netns or self.paths or self.rules)


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


def cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def netns_names() -> set[str]:
    run = Path("/run/netns")
    return {p.name for p in run.iterdir()} if run.is_dir() else set()


def owned_bridge(state: Path) -> list[str]:
    """The bridge, if it is there and ours (it carries its owner's state directory as its alias)."""
    try:
        return [BRIDGE] if Path(f"/sys/class/net/{BRIDGE}/ifalias").read_text().strip() == str(state) else []
    except OSError:
        return []


def service_rules(state: Path) -> list[str]:
    """The node's iptables rules for Service routing (hack/node.sh tags them with its state directory), and its chain
    while no bridge claims the machine (with one, the chain is the next node's)."""
    found = []
    for table in ("nat", "filter"):
        command = ["iptables", "-w", "10", "-t", table, "-S"]
        listed = subprocess.run(command, capture_output=True, text=True, check=False)
        for line in listed.stdout.splitlines():
            chain = line.startswith("-N SLURMCTL-SVC-") and bridge_owner() is None
            if f"slurmctl-node:{state}" in line or chain:
                found.append(f"{table}: {line}")
    return found


def host_paths() -> set[str]:
    """Fixed host paths a kubelet/containerd/CNI/runc create outside the state directory, where they exist now."""
    fixed = ["/var/lib/kubelet", "/var/log/pods", "/var/log/containers", "/var/lib/cni", "/run/containerd"]
    cgroups = [f"{c}/k8s.io" for c in Path("/sys/fs/cgroup").glob("*")]
    return {p for p in fixed + cgroups if Path(p).exists()}


def pod_log_dirs() -> set[str]:
    logs = Path("/var/log/pods")
    return {str(p) for p in logs.iterdir()} if logs.is_dir() else set()


def recorded_pids(state: Path) -> dict[str, str]:
    pids = state / "pids"
    return {p.name: p.read_text().strip() for p in pids.iterdir()} if pids.is_dir() else {}


def find_leftovers(
    state: Path,
    pids: dict[str, str],
    netns_before: set[str],
    logs_before: set[str],
    host_before: set[str],
    volumes: list[str],
    deadline: float = 10.0,
) -> Leftovers:
    """Everything of this cluster still present; polls briefly, since a killed process may take a moment to go."""
    end = time.monotonic() + deadline
    while True:
        found = Leftovers()
        for name, pid in pids.items():
            line = cmdline(pid)
            if line and (name.split("-")[-1] in line or str(state) in line):
                found.processes.append(f"{name} pid {pid}: {line}")
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit() and str(state) in cmdline(proc.name) and proc.name != str(os.getpid()):
                found.processes.append(f"pid {proc.name}: {cmdline(proc.name)}")
        found.mounts = [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if str(state) in line]
        found.links = owned_bridge(state)
        found.netns = sorted(netns_names() - netns_before)
        found.paths = [v for v in volumes if Path(v).exists()] + ([str(state)] if state.exists() else [])
        found.paths += sorted(pod_log_dirs() - logs_before) + sorted(host_paths() - host_before)
        found.rules = service_rules(state)
        if found.empty() or time.monotonic() >= end:
            return found
        time.sleep(0.2)


def bridge_owner() -> str | None:
    try:
        return Path(f"/sys/class/net/{BRIDGE}/ifalias").read_text().strip()
    except OSError:
        return None


def abandoned(state: Path) -> bool:
    """No recorded process of that cluster runs any more (its session was killed): `node.sh up` reclaims its node."""
    return not any(cmdline(pid) for pid in recorded_pids(state).values())


def wait_for_other_test_sessions(timeout: float = 240.0) -> None:
    """Another pytest session's live node (a parallel run on a shared machine) is waited for; an abandoned one is
    reclaimed by `up`, anything else fails there."""
    end = time.monotonic() + timeout
    while (owner := bridge_owner()) and owner.startswith(tempfile.gettempdir() + "/pytest-of-"):
        if abandoned(Path(owner)) or time.monotonic() >= end:
            return
        time.sleep(1)


def ensure_test_image(node: Node) -> None:
    """A scratch image with the host's static busybox, built with buildah and imported once (the store persists)."""
    assert node.state_dir is not None
    images = node_script("images", node.state_dir)
    assert images.returncode == 0, images.stderr
    if TEST_IMAGE in images.stdout.split():
        return
    busybox = shutil.which("busybox") or "/bin/busybox"
    context = node.state_dir / "test-image"
    context.mkdir(exist_ok=True)
    shutil.copy(busybox, context / "busybox")
    (context / "Dockerfile").write_text(
        'FROM scratch\nCOPY busybox /bin/busybox\nRUN ["/bin/busybox", "--install", "-s", "/bin"]\nCMD ["/bin/sh"]\n'
    )
    built = node_script("build-image", node.state_dir, TEST_IMAGE, str(context))
    assert built.returncode == 0, f"building {TEST_IMAGE} failed:\n{built.stderr}"
    shutil.rmtree(context)


@pytest.fixture(scope="package")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    existing = os.environ.get("SLURMCTL_E2E_CLUSTER_DIR")
    if existing:
        cluster = Node(kubeconfig=Path(existing).resolve() / "kubeconfig", state_dir=Path(existing).resolve())
        ensure_test_image(cluster)
        yield cluster
        return
    state = tmp_path_factory.mktemp("pods-cluster")
    netns_before = netns_names()
    logs_before = pod_log_dirs()
    host_before = host_paths()
    up_seconds: dict[str, float] = {}
    cluster = Node(kubeconfig=state / "kubeconfig", state_dir=state)
    volumes: list[str] = []
    try:
        wait_for_other_test_sessions()
        t0 = time.monotonic()
        up = control_plane_script("up", state)
        if up.returncode != 0:
            pytest.fail(f"control plane did not come up:\n{up.stderr}", pytrace=False)
        up_seconds["control-plane"] = time.monotonic() - t0
        t0 = time.monotonic()
        nup = node_script("up", state)
        if nup.returncode != 0:
            pytest.fail(f"node did not come up:\n{nup.stderr}", pytrace=False)
        up_seconds["node"] = time.monotonic() - t0
        print(f"cluster up: {', '.join(f'{k} {v:.1f}s' for k, v in up_seconds.items())}")
        ensure_test_image(cluster)
        yield cluster
    finally:
        pids = recorded_pids(state)
        pv = cluster.kubectl("get", "pv", "-o", "jsonpath={.items[*].spec.hostPath.path}", check=False)
        volumes = pv.stdout.split() if pv.returncode == 0 else []
        t0 = time.monotonic()
        ndown = node_script("down", state)
        cdown = control_plane_script("down", state)
        print(f"cluster down: {time.monotonic() - t0:.1f}s")
        left = find_leftovers(state, pids, netns_before, logs_before, host_before, volumes)
        problems = []
        if ndown.returncode != 0:
            problems.append(f"node.sh down failed:\n{ndown.stderr}")
        if cdown.returncode != 0:
            problems.append(f"control-plane.sh down failed:\n{cdown.stderr}")
        if not left.empty():
            problems.append(f"left behind after down: {left}")
        if problems:
            pytest.fail("\n".join(problems), pytrace=False)


def require_images(node: Node, refs: tuple[str, ...] | list[str]) -> None:
    """Fail (not skip) when `make images` has not imported an image the tests run."""
    assert node.state_dir is not None
    listed = node_script("images", node.state_dir)
    present = {line.split()[0] for line in listed.stdout.splitlines() if line.strip()}
    missing = [ref for ref in refs if ref not in present]
    assert not missing, f"images missing in the node's containerd (run `make images`): {missing}"


@pytest.fixture(scope="module")
def operator_process_of_module(
    node: Node, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[OperatorProcess]:
    """CRD and RBAC as config/default installs them (minus the operator Deployment: the module runs the operator as
    `slurmctl run`, with its ServiceAccount's token, and the module's OPERATOR_ARGS); the running operator, which
    tests of operator faults may kill and start again. It must be running when the module ends."""
    require_images(node, SLURM_IMAGES)
    manifests = node.kubectl("kustomize", str(REPO / "config" / "default")).stdout
    docs = [d for d in yaml.safe_load_all(manifests) if d and d.get("kind") != "Deployment"]
    node.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(docs))
    node.kubectl("wait", "--for=condition=Established", "crd/slurmclusters.slurm.slurmctl.io", "--timeout=60s")
    work = tmp_path_factory.mktemp("operator")
    kubeconfig = service_account_kubeconfig(node, work / "kubeconfig")
    args = tuple(getattr(request.module, "OPERATOR_ARGS", ()))
    with operator_process(kubeconfig, work / "operator.log", args) as proc:
        yield proc
        assert proc.running(), f"the operator exited:\n{proc.log.read_text()[-4000:]}"


@pytest.fixture(scope="module")
def operator(operator_process_of_module: OperatorProcess) -> Path:
    """The module's operator log."""
    return operator_process_of_module.log


@pytest.fixture(scope="module")
def kube(node: Node, operator: Path) -> Iterator[Kube]:
    """A namespace of the module's own; deleted at the end, waited for, so that the next module has the node's CPUs."""
    ns = f"slurm-{uuid.uuid4().hex[:6]}"
    node.kubectl("create", "namespace", ns)
    kube = Kube(node, ns)
    yield kube
    node.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    try:
        until(lambda: node.kubectl("get", "namespace", ns, check=False).returncode != 0, timeout=180, what=ns)
    except AssertionError as exc:  # the next module still runs, with fewer CPUs free until it goes
        print(f"namespace {ns} not deleted yet: {exc}")
