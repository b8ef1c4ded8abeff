"""End-to-end fixtures: one real control plane per test session and Kubernetes minor, a fresh namespace per test.

The control-plane suite (the modules here, test/e2e/test_*.py) runs on every minor slurmctl claims at both ends: the
default one (KUBE_VERSION, else hack/lib.sh's) and, when `make test` names it, the oldest supported one
(OLDEST_KUBE_VERSION, built by `make oldest-kube-build` without a kubelet). Each test then runs once per minor, with
`[kube<minor>]` in its id; the real-pods modules (test/e2e/pods) and the host-level ones (test/e2e/slurm) run on the
default only.

Set SLURMCTL_E2E_KUBECONFIG to run against a control plane that is already up (it is then left running; one minor,
the one KUBE_VERSION names).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.rest import ApiException

from test.e2e.harness import REPO, ControlPlane, control_plane_script
from test.e2e.operator import RunningOperator, e2e_operator_kubeconfig
from test.nodeids import kube_id

TIMEOUT = 10
E2E = Path(__file__).parent
EXISTING = os.environ.get("SLURMCTL_E2E_KUBECONFIG")


def _script(command: str, minor: str | None = None) -> str:
    """What hack/control-plane.sh COMMAND prints (for `minor` when given); a usage error when it fails."""
    done = control_plane_script(command, minor=minor)
    if done.returncode != 0:
        raise pytest.UsageError(f"hack/control-plane.sh {command} (KUBE_VERSION={minor}): {done.stderr.strip()}")
    return done.stdout.strip()


def _kube_minors() -> tuple[str, ...]:
    """The default minor first, then the oldest when it is asked for and differs (not with a cluster from outside)."""
    default = _script("version").removeprefix("v").rsplit(".", 1)[0]
    oldest = os.environ.get("OLDEST_KUBE_VERSION", "")
    return (default,) if EXISTING or oldest in ("", default) else (default, oldest)


KUBE_MINORS = _kube_minors()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Each test of the control-plane modules once per minor in KUBE_MINORS. Session-scoped, so pytest runs all of a
    worker's tests on one minor before it moves on (and `control_planes` keeps each minor's control plane up). A module
    that sets DEFAULT_MINOR_ONLY = True runs on the default minor alone (the scale harness needs the kube-scheduler,
    which the oldest minor's control-plane build leaves out)."""
    if (
        len(KUBE_MINORS) > 1
        and metafunc.definition.path.parent == E2E
        and not getattr(metafunc.module, "DEFAULT_MINOR_ONLY", False)
    ):
        ids = [kube_id(minor) for minor in KUBE_MINORS]
        metafunc.parametrize("kube_minor", KUBE_MINORS, indirect=True, scope="session", ids=ids)


@pytest.fixture(scope="session", autouse=True)
def kube_minor(request: pytest.FixtureRequest) -> Iterator[str]:
    """The Kubernetes minor a test runs on. For another than the default, KUBE_VERSION and PATH name it while the test
    runs, so hack/control-plane.sh (started by a fixture or by the test itself) and every kubectl are that minor's."""
    minor: str = getattr(request, "param", KUBE_MINORS[0])
    if minor == KUBE_MINORS[0]:
        yield minor
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KUBE_VERSION", minor)
        patch.setenv("PATH", f"{_script('bin-dir', minor)}{os.pathsep}{os.environ['PATH']}")
        yield minor


@pytest.fixture(scope="session")
def control_planes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ControlPlane]]:
    """The control planes this session started, by minor: each starts when its first test asks and stops at the end,
    so moving between minors costs nothing after the first time."""
    planes: dict[str, ControlPlane] = {}
    try:
        yield planes
    finally:
        for plane in planes.values():
            assert plane.state_dir is not None
            down = control_plane_script("down", plane.state_dir)
            if down.returncode != 0:
                print(f"control plane teardown failed:\n{down.stderr}")


@pytest.fixture(scope="session")
def control_plane(
    kube_minor: str, control_planes: dict[str, ControlPlane], tmp_path_factory: pytest.TempPathFactory
) -> ControlPlane:
    if EXISTING:
        return ControlPlane(kubeconfig=Path(EXISTING), state_dir=None)
    if kube_minor not in control_planes:
        state = tmp_path_factory.mktemp(f"control-plane-{kube_minor}")
        up = control_plane_script("up", state)
        if up.returncode != 0:
            control_plane_script("down", state)
            pytest.fail(f"control plane {kube_minor} did not come up:\n{up.stdout}\n{up.stderr}", pytrace=False)
        control_planes[kube_minor] = ControlPlane(kubeconfig=state / "kubeconfig", state_dir=state)
    return control_planes[kube_minor]


@pytest.fixture
async def api(control_plane: ControlPlane) -> AsyncIterator[client.ApiClient]:
    api_client = await config.new_client_from_config(config_file=str(control_plane.kubeconfig))
    try:
        yield api_client
    finally:
        await api_client.close()


@pytest.fixture
async def namespace(api: client.ApiClient, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A namespace of the test's own, deleted afterwards (its contents go with it)."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    name = f"{base}-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(api)
    await core.create_namespace({"metadata": {"name": name}}, _request_timeout=TIMEOUT)
    try:
        yield name
    finally:
        try:
            await core.delete_namespace(name, _request_timeout=TIMEOUT)
        except ApiException as exc:
            if exc.status != 404:
                raise


CRD_NAME = "slurmclusters.slurm.slurmctl.io"


@pytest.fixture(scope="session")
def installed(control_plane: ControlPlane) -> ControlPlane:
    """config/default applied the way the README says (CRD, RBAC, operator Deployment), with the CRD established."""
    control_plane.kubectl("apply", "--server-side", "-k", str(REPO / "config" / "default"))
    control_plane.kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=30s")
    return control_plane


@pytest.fixture(scope="session")
def operator_kubeconfig(installed: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The in-process operators' account: every namespace (the tests make one each), by the admin's opt-in."""
    return e2e_operator_kubeconfig(installed, tmp_path_factory.mktemp("operator") / "kubeconfig")


@pytest.fixture
async def operator(operator_kubeconfig: Path) -> AsyncIterator[RunningOperator]:
    """The operator in-process, as its own ServiceAccount, resyncing every second (steady-state tests count resyncs)."""
    running = await RunningOperator(operator_kubeconfig, resync_period=1.0).start()
    try:
        yield running
    finally:
        await running.stop()
