"""The machine's one real-pods cluster, shared by every pods module of a test run, even across pytest-xdist workers.

Only one node cluster can run on a machine (the pod bridge and the DNS namespace are machine-wide), so the pods
modules of a run share it: a control plane, node 1 and nodes 2 and 3 (`hack/node.sh add`), which give the modules
running side by side six CPUs to request instead of two. Node 3 is tainted for test_faults: its cordon test cordons
its workers' node, and every operator with workers there would drain them in its Slurm, so nobody else's pods run
there (test_nodes, which runs alone, lifts the taint while it needs the node).

The first worker that needs the cluster brings it up under a file lock in the run's base temporary directory (shared
by the xdist workers) and records what the machine had before; the others find it there. Whoever owns the run tears
it down at its end and fails when anything of it is left behind: the package fixture in a plain run, the xdist
controller (`pytest_sessionfinish`, reported as an error of `test/e2e/pods`) in a distributed one.

Modules share the machine, each in a namespace of its own with an operator that watches only that namespace; a module
that changes something every cluster would notice (crashing nodes, a cluster-wide operator) is marked `alone` and
runs while no other pods module does (`Share`).
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pytest

from slurmctl.api.v1 import IMAGE_TAG, default_image
from test.e2e.harness import NODE_NAME, Node, control_plane_script, node_script
from test.e2e.pods.slurm import TEST_DB_IMAGE, UPGRADE_IMAGES, slurm_image
from test.waiting import until

BRIDGE = "slurmctl0"
EXTRA_NODES = ("2", "3")
FAULTS_NODE = f"{NODE_NAME}-3"
# The taint that keeps every pod but test_faults' workers off FAULTS_NODE, and the toleration that lets those on.
FAULTS_TAINT = "slurmctl.test/dedicated=faults:NoSchedule"
FAULTS_TOLERATION = {"key": "slurmctl.test/dedicated", "operator": "Equal", "value": "faults", "effect": "NoSchedule"}
TEST_IMAGE = "localhost/slurmctl-test/busybox:1"
# What the modules' pods run, which nodes 2 and 3 get a copy of (not the benchmark's or the jail's build image: on a
# fresh machine each copy is gigabytes, and no pod here runs them); the upgrade test's too (test_upgrade.py).
POD_IMAGES = (
    *(slurm_image(c) for c in ("controller", "worker", "login", "rest", "populate-jail", "accounting")),
    *UPGRADE_IMAGES,
    default_image("operator"),
    default_image("sssd"),  # the directory sidecar (test_identity_directory.py)
    "localhost/slurmctl-test/slapd:" + IMAGE_TAG,
    TEST_DB_IMAGE,
    TEST_IMAGE,
)
# Modules wait this long for their turn on the machine: the longest module holds it about twelve minutes.
TURN_TIMEOUT = 3600.0


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


@dataclass
class Before:
    """What the machine had before the cluster came up: the teardown's leftover check subtracts it."""

    netns: list[str]
    logs: list[str]
    host: list[str]


def cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def netns_names() -> set[str]:
    run = Path("/run/netns")
    return {p.name for p in run.iterdir()} if run.is_dir() else set()


def bridge_owner() -> str | None:
    try:
        return Path(f"/sys/class/net/{BRIDGE}/ifalias").read_text().strip()
    except OSError:
        return None


def owned_bridge(state: Path) -> list[str]:
    """The bridge, if it is there and ours (it carries its owner's state directory as its alias)."""
    return [BRIDGE] if bridge_owner() == str(state) else []


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
    state: Path, pids: dict[str, str], before: Before, volumes: list[str], deadline: float = 10.0
) -> Leftovers:
    """Everything of this cluster still present; polls briefly, since a killed process may take a moment to go."""
    found = Leftovers()

    def scanned_empty() -> bool:
        nonlocal found
        found = scan(state, pids, before, volumes)
        return found.empty()

    with contextlib.suppress(AssertionError):  # the caller reports what is left, item by item
        until(scanned_empty, timeout=deadline, interval=0.2, what=f"everything of {state} gone")
    return found


def scan(state: Path, pids: dict[str, str], before: Before, volumes: list[str]) -> Leftovers:
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
    found.netns = sorted(netns_names() - set(before.netns))
    found.paths = [v for v in volumes if Path(v).exists()] + ([str(state)] if state.exists() else [])
    found.paths += sorted(pod_log_dirs() - set(before.logs)) + sorted(host_paths() - set(before.host))
    found.rules = service_rules(state)
    return found


def abandoned(state: Path) -> bool:
    """No recorded process of that cluster runs any more (its session was killed): `node.sh up` reclaims its node."""
    return not any(cmdline(pid) for pid in recorded_pids(state).values())


def wait_for_other_test_sessions(timeout: float = 240.0) -> None:
    """Another pytest session's live node (a parallel run on a shared machine) is waited for; an abandoned one is
    reclaimed by `up`, anything else fails there (naming whose node it is)."""

    def machine_free() -> bool:
        owner = bridge_owner()
        return not (owner and owner.startswith(tempfile.gettempdir() + "/pytest-of-")) or abandoned(Path(owner))

    with contextlib.suppress(AssertionError):  # `up` refuses and says whose node it is
        until(machine_free, timeout=timeout, what="another pytest session's node to go")


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


def prepare(node: Node) -> None:
    """What every pods module may count on besides node 1: the test image, nodes 2 and 3 up (with the images pods
    run) and node 3 tainted for test_faults. Each step does nothing when it is done already."""
    assert node.state_dir is not None
    ensure_test_image(node)
    for k in EXTRA_NODES:
        t0 = time.monotonic()
        added = node_script("add", node.state_dir, k, env={"NODE_IMAGES": " ".join(POD_IMAGES)}, timeout=900)
        assert added.returncode == 0, f"node {k} did not come up:\n{added.stderr}"
        print(f"node {k} up in {time.monotonic() - t0:.1f}s")
    node.kubectl("taint", "node", FAULTS_NODE, FAULTS_TAINT, "--overwrite")


def run_root(config: pytest.Config) -> Path:
    """The run's base temporary directory, which every xdist worker of the run sees (a worker's own is under it).
    `_tmp_path_factory` is what the tmp_path_factory fixture returns; xdist reads it the same way."""
    base: Path = config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    return base.parent if hasattr(config, "workerinput") else base


class SharedCluster:
    """The run's cluster, in `root` (the base temporary directory every xdist worker of the run sees)."""

    def __init__(self, root: Path) -> None:
        self.state = root / "pods-cluster"
        self._lock = root / "pods-cluster.lock"
        self._before = root / "pods-cluster.before.json"
        self._failed = root / "pods-cluster.failed"

    @property
    def node(self) -> Node:
        return Node(kubeconfig=self.state / "kubeconfig", state_dir=self.state)

    def attach(self) -> Node:
        """The cluster, brought up by the first caller (the others wait for it under the lock). A failed bring-up
        is remembered, so that every module fails with its message at once instead of trying again."""
        with _flock(self._lock, exclusive=True):
            if self._failed.exists():
                raise AssertionError(self._failed.read_text())
            if not self._before.exists():
                self._bring_up()
        return self.node

    def _bring_up(self) -> None:
        wait_for_other_test_sessions()
        before = Before(sorted(netns_names()), sorted(pod_log_dirs()), sorted(host_paths()))
        self.state.mkdir(parents=True, exist_ok=True)
        self._before.write_text(json.dumps(asdict(before)))
        try:
            t0 = time.monotonic()
            up = control_plane_script("up", self.state)
            assert up.returncode == 0, f"control plane did not come up:\n{up.stderr}"
            t1 = time.monotonic()
            nup = node_script("up", self.state)
            assert nup.returncode == 0, f"node did not come up:\n{nup.stderr}"
            print(f"cluster up: control-plane {t1 - t0:.1f}s, node {time.monotonic() - t1:.1f}s")
            prepare(self.node)
        except AssertionError as exc:
            self._failed.write_text(str(exc))
            raise

    def tear_down(self) -> list[str]:
        """Everything down (nodes 3 and 2, node 1, the control plane); the problems found, empty when all is gone.
        Nothing to do when no one brought the cluster up."""
        if not self._before.exists():
            return []
        before = Before(**json.loads(self._before.read_text()))
        node = self.node
        pids = recorded_pids(self.state)
        pv = node.kubectl("get", "pv", "-o", "jsonpath={.items[*].spec.hostPath.path}", check=False)
        volumes = pv.stdout.split() if pv.returncode == 0 else []
        problems = []
        t0 = time.monotonic()
        for k in reversed(EXTRA_NODES):
            removed = node_script("remove", self.state, k)
            if removed.returncode != 0:
                problems.append(f"node.sh remove {k} failed:\n{removed.stderr}")
        ndown = node_script("down", self.state)
        cdown = control_plane_script("down", self.state)
        print(f"cluster down: {time.monotonic() - t0:.1f}s")
        left = find_leftovers(self.state, pids, before, volumes)
        if ndown.returncode != 0:
            problems.append(f"node.sh down failed:\n{ndown.stderr}")
        if cdown.returncode != 0:
            problems.append(f"control-plane.sh down failed:\n{cdown.stderr}")
        if not left.empty():
            problems.append(f"left behind after down: {left}")
        self._before.unlink()
        return problems


@contextmanager
def _flock(path: Path, *, exclusive: bool) -> Iterator[None]:
    """A lock held for the block (the bring-up, at most a few minutes: a plain blocking flock)."""
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class Turn(enum.Enum):
    """What a module asks of the machine while it runs (`Share.take`)."""

    BESIDE = "beside"  # a module outside the real-pods package: it runs unless a module needs the machine quiet
    SHARED = "shared"  # a real-pods module beside other real-pods modules
    ALONE = "alone"  # no other real-pods module (the rest of the run goes on beside it)
    QUIET = "quiet"  # no other module at all: a module whose bounds the machine's load would break


class Share:
    """A worker's turn on the machine while one of its modules runs. Two locks: `machine` (real-pods modules take it
    shared, exclusive to run alone) and `quiet` (every other module takes it shared, a module that needs the machine
    quiet takes both exclusive). Each acquisition passes a third lock, the turnstile, so that a module waiting for an
    exclusive turn is not starved by modules that keep a lock shared one after another (flock favours no one)."""

    def __init__(self, root: Path) -> None:
        self._paths = {"machine": root / "machine.lock", "quiet": root / "machine.quiet.lock"}
        self._turnstile_path = root / "machine.turnstile"
        self._fds: list[int] = []

    @property
    def held(self) -> bool:
        return bool(self._fds)

    def take(self, turn: Turn) -> float:
        """Wait for the turn; the seconds it waited."""
        assert not self._fds, "the machine is held already"
        wants = {
            Turn.BESIDE: [("quiet", fcntl.LOCK_SH)],
            Turn.SHARED: [("machine", fcntl.LOCK_SH)],
            Turn.ALONE: [("machine", fcntl.LOCK_EX)],
            Turn.QUIET: [("machine", fcntl.LOCK_EX), ("quiet", fcntl.LOCK_EX)],
        }[turn]
        t0 = time.monotonic()
        turnstile = os.open(self._turnstile_path, os.O_CREAT | os.O_RDWR, 0o600)
        try:
            _wait_lock(turnstile, fcntl.LOCK_EX, "the machine's turnstile")
            for name, operation in wants:
                fd = os.open(self._paths[name], os.O_CREAT | os.O_RDWR, 0o600)
                self._fds.append(fd)
                _wait_lock(fd, operation, f"the machine ({name})")
        except BaseException:
            self.release()
            raise
        finally:
            os.close(turnstile)  # closing a descriptor releases its lock
        return time.monotonic() - t0

    def release(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()


def _wait_lock(fd: int, operation: int, what: str) -> None:
    def locked() -> bool:
        try:
            fcntl.flock(fd, operation | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    until(locked, timeout=TURN_TIMEOUT, interval=0.5, what=f"a turn on {what}")
