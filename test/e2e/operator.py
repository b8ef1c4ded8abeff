"""Run the operator in-process against the real control plane, authenticated as a ServiceAccount, so every request it
makes is checked against the RBAC that src/slurmctl/render/rbac.py declares (an admin client would hide a missing
rule)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import yaml
from kubernetes_asyncio import client, config
from prometheus_client import REGISTRY

from slurmctl.api.v1 import Policy
from slurmctl.reconcilers import register
from slurmctl.render import rbac
from slurmctl.runtime import Client, Manager, ManagerOptions
from test.e2e.apiserver_metrics import Counts, writes
from test.e2e.harness import ControlPlane, eventually

NAMESPACE = "slurmctl-system"
SERVICE_ACCOUNT = "slurmctl-operator"
# The in-process operators of the tests: a ServiceAccount of their own with the cluster admin's opt-ins (every
# namespace, node cordon) as `slurmctl rbac --watch-namespace= --allow-node-cordon` prints them, so that the tests
# may make a namespace each, and the installed operator's account keeps exactly what its install grants.
E2E_SERVICE_ACCOUNT = "slurmctl-e2e-operator"
# The default policy, plus the one opt-in test/e2e/clusters.py's spec needs: it logs in as root (sshRootPublicKeys).
POLICY = Policy(allow_root_logins=True)


def service_account_kubeconfig(
    cp: ControlPlane, path: Path, *, timeout: float = 60, service_account: str = SERVICE_ACCOUNT
) -> Path:
    """A kubeconfig with a token of the operator's ServiceAccount, from the TokenRequest API (`kubectl create token`),
    as a pod's projected token is: Kubernetes makes no long-lived token Secrets since 1.24."""
    deadline = time.monotonic() + timeout
    while True:
        made = cp.kubectl("create", "token", service_account, "-n", NAMESPACE, "--duration=24h", check=False)
        if made.returncode == 0:
            token = made.stdout.strip()
            break
        if time.monotonic() > deadline:
            raise AssertionError(f"no token for ServiceAccount {NAMESPACE}/{service_account}: {made.stderr}")
        time.sleep(0.2)
    admin = yaml.safe_load(cp.kubeconfig.read_text())
    cluster = admin["clusters"][0]["cluster"]
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": cluster}],
        "users": [{"name": service_account, "user": {"token": token}}],
        "contexts": [{"name": "operator", "context": {"cluster": "local", "user": service_account}}],
        "current-context": "operator",
    }
    path.write_text(yaml.safe_dump(kubeconfig))
    path.chmod(0o600)
    return path


def e2e_operator_kubeconfig(cp: ControlPlane, path: Path) -> Path:
    """`service_account_kubeconfig` for E2E_SERVICE_ACCOUNT, granted the admin's opt-ins (idempotent)."""
    who = rbac.Grantee(service_account=E2E_SERVICE_ACCOUNT, namespace=NAMESPACE, name=E2E_SERVICE_ACCOUNT)
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": who.service_account, "namespace": NAMESPACE},
    }
    objects = [account, *rbac.for_install([], who, cordon=True)]
    cp.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(objects))
    return service_account_kubeconfig(cp, path, service_account=E2E_SERVICE_ACCOUNT)


class RunningOperator:
    """The manager with every reconciler registered, running as a task until `stop`."""

    def __init__(
        self,
        kubeconfig: Path,
        *,
        resync_period: float | None = None,
        namespaces: tuple[str, ...] = (),
        policy: Policy = POLICY,
    ) -> None:
        """`namespaces` and `policy` as `slurmctl run --watch-namespace` and the policy flags set them."""
        self.kubeconfig = kubeconfig
        self.resync_period = resync_period
        self.namespaces = namespaces
        self.policy = policy
        self.manager: Manager | None = None
        self._api: client.ApiClient | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> RunningOperator:
        self._api = await config.new_client_from_config(config_file=str(self.kubeconfig))
        options = ManagerOptions(
            metrics_bind_address="0",
            health_probe_bind_address="0",
            handle_signals=False,
            resync_period=self.resync_period,
            namespaces=self.namespaces,
        )
        self.manager = Manager(Client(self._api), options)
        await register(self.manager, policy=self.policy)
        self._task = asyncio.create_task(self.manager.run(), name="operator")
        return self

    async def stop(self) -> None:
        if self.manager is not None and self._task is not None:
            self.manager.stop()
            await asyncio.wait_for(self._task, timeout=60)
        if self._api is not None:
            await self._api.close()


def reconciles(controller: str) -> float:
    """How many reconciles a controller has finished in this process (any result)."""
    total = 0.0
    for metric in REGISTRY.collect():
        if metric.name == "controller_runtime_reconcile":
            for sample in metric.samples:
                if sample.name.endswith("_total") and sample.labels.get("controller") == controller:
                    total += sample.value
    return total


# Resources the operator writes. The apiserver counts every client's requests, and kube-controller-manager keeps
# writing pods, endpoints and Events, so steady-state checks count only these (and compare slurmctl's Events apart).
OPERATOR_RESOURCES = (
    "configmaps",
    "secrets",
    "services",
    "statefulsets",
    "deployments",
    "jobs",
    "cronjobs",
    "slurmclusters",
    "slurmclusters/status",
)


def operator_writes(before: Counts, after: Counts) -> dict[str, int]:
    """Write requests to the operator's resources between two `request_counts` snapshots; `{}` means none."""
    counted = {r: sum(writes(before, after, resource=r).values()) for r in OPERATOR_RESOURCES}
    return {r: n for r, n in counted.items() if n}


async def slurmctl_events(api: client.ApiClient, namespace: str) -> dict[str, tuple[int, str]]:
    """Events slurmctl reported in a namespace: name -> (count, last timestamp), so that any new one shows."""
    events = await client.CoreV1Api(api).list_namespaced_event(namespace, _request_timeout=10)
    return {
        e.metadata.name: (e.count or 1, str(e.last_timestamp))
        for e in events.items
        if e.source is not None and e.source.component == "slurmctl"
    }


async def no_namespace_terminating(api: client.ApiClient) -> None:
    """Earlier tests' namespace deletions write too: wait for them to finish before counting writes."""

    async def done() -> bool:
        namespaces = await client.CoreV1Api(api).list_namespace(_request_timeout=10)
        return all(n.status.phase != "Terminating" for n in namespaces.items)

    await eventually(done, timeout=120, interval=0.5, what="earlier test namespaces to be deleted")
