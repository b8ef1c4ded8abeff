"""End-to-end fixtures: one real control plane per test session, a fresh namespace per test.

Set SLURMCTL_E2E_KUBECONFIG to run against a control plane that is already up (it is then left running).
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
from test.e2e.operator import RunningOperator, service_account_kubeconfig

TIMEOUT = 10


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    existing = os.environ.get("SLURMCTL_E2E_KUBECONFIG")
    if existing:
        yield ControlPlane(kubeconfig=Path(existing), state_dir=None)
        return
    state = tmp_path_factory.mktemp("control-plane")
    up = control_plane_script("up", state)
    try:
        if up.returncode != 0:
            pytest.fail(f"control plane did not come up:\n{up.stdout}\n{up.stderr}", pytrace=False)
        yield ControlPlane(kubeconfig=state / "kubeconfig", state_dir=state)
    finally:
        down = control_plane_script("down", state)
        if down.returncode != 0:
            print(f"control plane teardown failed:\n{down.stderr}")


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
    return service_account_kubeconfig(installed, tmp_path_factory.mktemp("operator") / "kubeconfig")


@pytest.fixture
async def operator(operator_kubeconfig: Path) -> AsyncIterator[RunningOperator]:
    """The operator in-process, as its own ServiceAccount, resyncing every second (steady-state tests count resyncs)."""
    running = await RunningOperator(operator_kubeconfig, resync_period=1.0).start()
    try:
        yield running
    finally:
        await running.stop()
