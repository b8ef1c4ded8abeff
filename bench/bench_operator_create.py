"""Create -> every child applied, for the realistic sample, against a plain loop of server-side applies.

The plain loop applies exactly the objects the operator creates (rendered with fixed key bytes), one after another,
into a fresh namespace. The operator path is the SlurmCluster created with the operator (in this process, already
synced) doing everything: reading its cache, generating the munge and SSH host keys, rendering, applying, writing
status. Both run against one control plane of their own started without kube-controller-manager, so nothing but the
two contenders writes: a small driver plays the kubelet and the workload controllers (every Job succeeds at once,
every StatefulSet and Deployment reports its replicas ready), which opens the populate-jail gate (so the operator's
figure includes one round trip through the driver) and lets each round end Available before the next begins.
Round 0 warms up discovery and connections and is not counted; figures are medians.

The helpers `control_plane`, `register_readiness`, `driver_options`, `started` and `wait_until` are shared with
bench_many_clusters.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import config
from test.e2e.clusters import terminal_status

from bench import goal, versus
from slurmctl.api.v1 import API_VERSION, KIND, OPEN_POLICY, check_cluster
from slurmctl.cli import default_workers
from slurmctl.reconcilers import desired_objects, register
from slurmctl.reconcilers.keys import new_munge_key, new_ssh_host_keys
from slurmctl.render.cluster import render_jwt_key_secret, render_munge_secret, render_ssh_host_keys_secret
from slurmctl.render.manifests import Inputs
from slurmctl.runtime import Client, Event, EventType, Manager, ManagerOptions, Request, drop_nones

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "config" / "samples" / "slurmcluster_research.yaml"
CRD_NAME = "slurmclusters.slurm.slurmctl.io"
ROUNDS = 5  # counted rounds, after one warm-up round
KEYGEN_ROUNDS = 5
STATEFULSET = ("apps/v1", "StatefulSet")
DEPLOYMENT = ("apps/v1", "Deployment")
JOB = ("batch/v1", "Job")
MERGE_PATCH = "application/merge-patch+json"
DB_PASSWORD = "bench-password-not-secret"
JWT_KEY = bytes(32)  # fixed bytes: the plain loop applies what the operator would, without generating keys
TIMEOUT = 60.0
Figure = tuple[str, float, str]
Key = tuple[str, str, str]  # namespace, kind, name


# ---- shared with bench_many_clusters -----------------------------------------------------------------------------
def _plane(command: str, state: Path) -> None:
    env = {**os.environ, "SLURMCTL_CLUSTER_DIR": str(state), "CONTROL_PLANE_NO_CONTROLLER_MANAGER": "1"}
    proc = subprocess.run(
        ["bash", str(REPO / "hack" / "control-plane.sh"), command],
        env=env, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"control-plane.sh {command} failed: {proc.stderr[-2000:]}")


def _kubectl(kubeconfig: Path, *args: str) -> None:
    proc = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed: {proc.stderr[-2000:]}")


@contextlib.contextmanager
def control_plane() -> Iterator[Path]:
    """A control plane without kube-controller-manager, with the SlurmCluster CRD established; always torn down."""
    with tempfile.TemporaryDirectory(prefix="bench-plane-") as tmp:
        state = Path(tmp) / "plane"
        try:
            _plane("up", state)
            kubeconfig = state / "kubeconfig"
            _kubectl(kubeconfig, "apply", "--server-side", "-k", "config/crd")
            for attempt in range(5):  # `kubectl wait` fails while the new CRD has no conditions at all yet
                try:
                    _kubectl(
                        kubeconfig, "wait", "--for", "condition=established", "--timeout", "60s", f"crd/{CRD_NAME}"
                    )
                    break
                except RuntimeError:
                    if attempt == 4:
                        raise
                    time.sleep(1)
            yield kubeconfig
        finally:
            _plane("down", state)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def register_readiness(manager: Manager, *, workers: int = 8) -> None:
    """Play the kubelet and the workload controllers this control plane lacks: every StatefulSet and Deployment
    reports all its replicas ready for its current generation, every Job reports success (written to `/status`)."""
    client, cache = manager.client, manager.cache

    async def write_status(api_version: str, kind: str, req: Request, status: Mapping[str, Any]) -> None:
        res = await client.resource(api_version, kind)
        path = res.path(req.namespace, req.name, "status")
        await client.request("PATCH", path, body={"status": status}, content_type=MERGE_PATCH)

    def workload(kind: tuple[str, str], counters: tuple[str, ...]) -> Callable[[Request], Awaitable[None]]:
        async def reconcile(req: Request) -> None:
            obj = cache.get(*kind, req.name, namespace=req.namespace)
            if obj is None:
                return
            n = int((obj.get("spec") or {}).get("replicas") or 0)
            want = {"observedGeneration": obj["metadata"].get("generation", 0), **dict.fromkeys(counters, n)}
            have = obj.get("status") or {}
            if any((have.get(k) or 0) != v for k, v in want.items()):
                await write_status(*kind, req, want)

        return reconcile

    async def job(req: Request) -> None:
        obj = cache.get(*JOB, req.name, namespace=req.namespace)
        if obj is None or int((obj.get("status") or {}).get("succeeded") or 0) >= 1:
            return
        now = _now()
        complete = {"type": "Complete", "status": "True", "lastProbeTime": now, "lastTransitionTime": now}
        # As the Job controller writes it: Kubernetes 1.31+ refuses Complete without SuccessCriteriaMet before it.
        status = terminal_status({"succeeded": 1, "startTime": now, "conditions": [complete]})
        await write_status(*JOB, req, status)

    sts = workload(STATEFULSET, ("replicas", "readyReplicas", "currentReplicas", "updatedReplicas"))
    deployment = workload(DEPLOYMENT, ("replicas", "readyReplicas", "availableReplicas", "updatedReplicas"))
    manager.controller("bench-statefulsets", sts, for_=STATEFULSET, max_concurrent_reconciles=workers)
    manager.controller("bench-deployments", deployment, for_=DEPLOYMENT, max_concurrent_reconciles=workers)
    manager.controller("bench-jobs", job, for_=JOB, max_concurrent_reconciles=workers)


def driver_options() -> ManagerOptions:
    return ManagerOptions(
        metrics_bind_address="0", health_probe_bind_address="0", handle_signals=False, field_manager="bench"
    )


async def wait_until(predicate: Callable[[], bool], changed: asyncio.Event, *, deadline: float, what: str) -> None:
    """Wait, woken by `changed`, until `predicate` holds; fail naming `what` after `deadline` seconds."""
    try:
        async with asyncio.timeout(deadline):
            while not predicate():
                changed.clear()
                await changed.wait()
    except TimeoutError:
        raise RuntimeError(f"timed out after {deadline}s waiting for {what}") from None


# ---- this benchmark ----------------------------------------------------------------------------------------------
class Observed:
    """What the driver's informers have seen: when each child first appeared, and each SlurmCluster's phase."""

    def __init__(self) -> None:
        self.first_seen: dict[Key, float] = {}
        self.phase: dict[tuple[str, str], str] = {}
        self.changed = asyncio.Event()

    def child_listener(self, kind: str) -> Callable[[Event], None]:
        def listen(event: Event) -> None:
            md = event.obj.get("metadata") or {}
            if event.type is not EventType.DELETED:
                self.first_seen.setdefault((md.get("namespace", ""), kind, md.get("name", "")), time.perf_counter())
                self.changed.set()

        return listen

    def cluster_listener(self, event: Event) -> None:
        md = event.obj.get("metadata") or {}
        self.phase[(md.get("namespace", ""), md.get("name", ""))] = (event.obj.get("status") or {}).get("phase", "")
        self.changed.set()


def _sample() -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(SAMPLE.read_text()) if isinstance(d, dict) and d.get("kind") == KIND]
    return docs[0]


def _children(doc: Mapping[str, Any], *, munge: bytes, host_keys: Mapping[str, bytes]) -> list[dict[str, Any]]:
    """Everything the operator applies for `doc`, as the operator sends it (no `None`s), key Secrets with fixed bytes;
    ownerReferences need a uid."""
    body = copy.deepcopy(dict(doc))
    body["metadata"]["uid"] = "00000000-0000-0000-0000-000000000001"
    cluster, problems = check_cluster(body, policy=OPEN_POLICY)
    if cluster is None or problems:
        raise RuntimeError(f"the sample is not valid: {problems}")
    objects = [
        *desired_objects(Inputs.offline(cluster, dbd_password=DB_PASSWORD)),
        render_munge_secret(cluster, munge),
        render_jwt_key_secret(cluster, JWT_KEY),
        render_ssh_host_keys_secret(cluster, host_keys),
    ]
    return [drop_nones(o) for o in objects]


def _in_namespace(doc: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    body = copy.deepcopy(dict(doc))
    body["metadata"]["namespace"] = namespace
    return body


def _password_secret(doc: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    """The external database's password Secret the sample tells its user to create first."""
    ref = doc["spec"]["accounting"]["external"]["passwordSecretRef"]
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": ref["name"], "namespace": namespace},
            "stringData": {ref["key"]: DB_PASSWORD}}  # fmt: skip


def _keygen() -> tuple[float, bytes, dict[str, bytes]]:
    times = []
    for _ in range(KEYGEN_ROUNDS):
        started = time.perf_counter()
        munge, host_keys = new_munge_key(), new_ssh_host_keys()
        times.append(time.perf_counter() - started)
    return statistics.median(times), munge, host_keys


async def started(manager: Manager) -> asyncio.Task[None]:
    """Run the manager as a task; return once its informers have synced and its workers run."""
    task = asyncio.create_task(manager.run())
    async with asyncio.timeout(TIMEOUT):
        while not manager.is_leading:
            if task.done():
                await task
            await asyncio.sleep(0.05)
    return task


class Rounds:
    """One plain loop and one operator create per round, each in a fresh namespace."""

    def __init__(
        self, client: Client, observed: Observed, *, sample: dict[str, Any], objects: list[dict[str, Any]]
    ) -> None:
        self.client, self.observed, self.sample, self.objects = client, observed, sample, objects

    async def namespace(self, name: str) -> None:
        await self.client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    async def plain(self, ns: str) -> float:
        await self.namespace(ns)
        objects = [_in_namespace(o, ns) for o in self.objects]
        begun = time.perf_counter()
        for obj in objects:
            await self.client.apply(obj, field_manager="bench-plain")
        return time.perf_counter() - begun

    async def operator_create(self, ns: str) -> tuple[float, float]:
        """Seconds from the create to the last child appearing, and to the cluster being Available."""
        await self.namespace(ns)
        await self.client.create(_password_secret(self.sample, ns))
        wanted = [(ns, o["kind"], o["metadata"]["name"]) for o in self.objects]
        name = (ns, self.sample["metadata"]["name"])
        observed = self.observed
        begun = time.perf_counter()
        await self.client.create(_in_namespace(self.sample, ns))
        try:
            await wait_until(lambda: all(k in observed.first_seen for k in wanted), observed.changed,
                             deadline=TIMEOUT, what=f"every child in {ns}")  # fmt: skip
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}; missing: {[k for k in wanted if k not in observed.first_seen]}") from None
        created = max(observed.first_seen[k] for k in wanted) - begun
        await wait_until(lambda: observed.phase.get(name) == "Available", observed.changed,
                         deadline=TIMEOUT, what=f"{ns}/{name[1]} Available")  # fmt: skip
        return created, time.perf_counter() - begun


async def _measure(kubeconfig: Path) -> list[Figure]:
    keygen, munge, host_keys = _keygen()
    sample = _sample()
    operator_api = await config.new_client_from_config(config_file=str(kubeconfig))
    driver_api = await config.new_client_from_config(config_file=str(kubeconfig))
    operator_options = ManagerOptions(
        metrics_bind_address="0",
        health_probe_bind_address="0",
        handle_signals=False,
        max_concurrent_reconciles=default_workers(),  # what `slurmctl run` gets by default
    )
    operator = Manager(Client(operator_api), operator_options)
    driver = Manager(Client(driver_api), driver_options())
    observed = Observed()
    tasks: list[asyncio.Task[None]] = []
    try:
        await register(operator, policy=OPEN_POLICY)  # the research sample mounts hostPath and NFS, logs in as root
        objects = _children(sample, munge=munge, host_keys=host_keys)
        register_readiness(driver)
        for api_version, kind in {(o["apiVersion"], o["kind"]) for o in objects}:
            driver.informer(api_version, kind).add_listener(observed.child_listener(kind))
        driver.informer(API_VERSION, KIND).add_listener(observed.cluster_listener)
        tasks = [await started(operator), await started(driver)]
        rounds = Rounds(driver.client, observed, sample=sample, objects=objects)
        plain_times, create_times, available_times = [], [], []
        for i in range(ROUNDS + 1):
            plain = await rounds.plain(f"plain-{i}")
            created, available = await rounds.operator_create(f"operator-{i}")
            if i > 0:  # round 0 warms up discovery, connections and the API server's first use of each kind
                plain_times.append(plain)
                create_times.append(created)
                available_times.append(available)
        plain_s, create_s = statistics.median(plain_times), statistics.median(create_times)
        return [
            ("operator_create_objects", float(len(objects)), "objects"),
            ("operator_create_plain_apply_loop_s", plain_s, "s"),
            ("operator_create_all_children_s", create_s, versus("s", create_s, plain_s, goal="ratio <= 1.5")),
            ("operator_create_ratio", create_s / plain_s, goal("x", "<= 1.5")),
            ("operator_create_keygen_s", keygen, "s"),
            ("operator_create_ratio_without_keygen", (create_s - keygen) / plain_s, "x"),
            ("operator_create_to_available_s", statistics.median(available_times), "s"),
        ]
    finally:
        operator.stop()
        driver.stop()
        await asyncio.gather(*tasks, return_exceptions=True)
        await operator_api.close()
        await driver_api.close()


def run() -> list[Figure]:
    with control_plane() as kubeconfig:
        return asyncio.run(_measure(kubeconfig))
