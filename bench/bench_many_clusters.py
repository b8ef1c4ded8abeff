"""200 small SlurmClusters (3 worker groups of one node each) created at once, against a plain parallel server-side
apply loop of the same objects on the same control plane in the same run.

Figures (each operator figure printed beside the plain loop's where there is one):
- the plain loop: every object the operator creates for the 200 clusters (rendered offline, fixed key bytes),
  applied with 16 in flight; then deleted again (DELETE collection) so the operator starts on an empty plane;
- create -> all Available, and its ratio to the plain loop;
- API writes during the create as the API server counted them (`apiserver_request_total`), without the driver's own
  (status of StatefulSets/Deployments/Jobs, the SlurmCluster creates), per object created and per cluster; status
  writes and Event writes per cluster;
- `kubectl edit` size -> StatefulSet replicas: p50/p99 over 50 sequential edits, and the operator's writes per edit;
- the operator's peak RSS (create and edits) and CPU seconds per cluster created (key generation included);
- the operator's writes in a steady-state window (default 60 s) after a restart with `--resync-period 5` (it
  remembers nothing, so the relist is included), next to every write anyone made (the API server's own).

The operator runs as its own process (`slurmctl run`, defaults as a user gets them) so that its RSS and CPU are its
own. The control plane has no kube-controller-manager; this process
plays the kubelet and the workload controllers (see `bench_operator_create.register_readiness`). Environment:
BENCH_CLUSTERS (200), BENCH_STEADY_S (60), BENCH_EDITS (50), BENCH_DEADLINE_S (300), BENCH_OPERATOR_LOG.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import aiohttp
from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient
from test.e2e.apiserver_metrics import WRITE_VERBS, Counts, delta, request_counts

from bench import goal, versus
from bench.bench_operator_create import (
    _children,
    _in_namespace,
    control_plane,
    driver_options,
    register_readiness,
    started,
    wait_until,
)
from slurmctl.api.v1 import API_VERSION, KIND
from slurmctl.reconcilers.keys import new_munge_key, new_ssh_host_keys
from slurmctl.runtime import Client, Event, EventType, Manager

CLUSTERS = int(os.environ.get("BENCH_CLUSTERS", "200"))
STEADY_S = float(os.environ.get("BENCH_STEADY_S", "60"))
EDITS = int(os.environ.get("BENCH_EDITS", "50"))
DEADLINE = float(os.environ.get("BENCH_DEADLINE_S", "300"))
RESYNC_S = 5
NAMESPACES = 4
CREATE_CONCURRENCY = 16
PLAIN_CONCURRENCY = 16
GROUPS = ("a", "b", "c")
# Issue 26: 200 clusters within 1.5x the plain loop; 1,000 within 2x and 400 MB (381.5 MiB) of peak RSS.
RATIO_GOAL = "<= 1.5" if CLUSTERS <= 200 else "<= 2"
RSS_GOAL = "<= 400 MB (381.5 MiB)"
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKeyForBenchmarks bench@example"
# Writes that are not the operator's: this driver's (it plays the kubelet and the workload controllers, and creates
# the namespaces and clusters) and the API server's own endpoint reconciler (`POST endpoints` every 10 s).
DRIVER_RESOURCES = frozenset({"statefulsets/status", "deployments/status", "jobs/status", "namespaces", "endpoints"})
Figure = tuple[str, float, str]


def _cluster(i: int, *, sizes: Mapping[str, int] | None = None) -> dict[str, Any]:
    workers = [
        {"name": g, "size": (sizes or {}).get(g, 1), "resources": {"requests": {"cpu": 1, "memory": "1Gi"}}}
        for g in GROUPS
    ]
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": f"c{i}", "namespace": f"many-{i % NAMESPACES}"},
        "spec": {
            "jail": {"volume": {"claimName": "jail"}},
            "workers": workers,
            "login": {"sshRootPublicKeys": [SSH_KEY]},
        },
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _proc_status(pid: int, field: str) -> float:
    """A `/proc/<pid>/status` memory figure (kB there) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not in /proc/{pid}/status")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def operator_writes(before: Counts, after: Counts) -> Counter[str]:
    """The operator's writes between two snapshots, by resource: every write but the driver's."""
    found: Counter[str] = Counter()
    for (verb, resource), count in delta(before, after).items():
        if verb not in WRITE_VERBS or resource in DRIVER_RESOURCES:
            continue
        if verb == "POST" and resource == "slurmclusters":
            continue
        found[resource] += count
    return found


class Operator:
    """`slurmctl run` as a child process, its log in a file; stopped by SIGTERM (then SIGKILL) on the way out."""

    def __init__(self, kubeconfig: Path, log: IO[bytes], *, resync: float | None = None) -> None:
        self.port = _free_port()
        self.log = log
        # --allow-root-logins: the clusters log in as root, the one opt-in of the operator's policy they need.
        command = [str(Path(sys.executable).with_name("slurmctl")), "run", "--kubeconfig", str(kubeconfig),
                   "--metrics-bind-address", "0", "--health-probe-bind-address", f"127.0.0.1:{self.port}",
                   "--allow-root-logins"]  # fmt: skip
        env = {**os.environ, **({"SLURMCTL_RESYNC_PERIOD": str(resync)} if resync else {})}
        self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)

    async def wait_ready(self) -> None:
        url = f"http://127.0.0.1:{self.port}/readyz"
        timeout = aiohttp.ClientTimeout(total=2)
        async with aiohttp.ClientSession(timeout=timeout) as session, asyncio.timeout(60):
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the operator exited with {self.proc.returncode}: {self.log_tail()}")
                try:
                    async with session.get(url) as resp:
                        if resp.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)

    def log_tail(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")[-2000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


class Watched:
    """What the driver's informers show: which clusters are Available, and when a StatefulSet reaches a size."""

    def __init__(self) -> None:
        self.available: set[tuple[str, str]] = set()
        self.changed = asyncio.Event()
        self.replicas_wanted: dict[tuple[str, str], tuple[int, asyncio.Future[float]]] = {}

    def cluster(self, event: Event) -> None:
        md = event.obj.get("metadata") or {}
        key = (md.get("namespace", ""), md.get("name", ""))
        status = event.obj.get("status") or {}
        current = status.get("observedGeneration") == md.get("generation")
        if event.type is not EventType.DELETED and current and status.get("phase") == "Available":
            self.available.add(key)
        else:
            self.available.discard(key)
        self.changed.set()

    def statefulset(self, event: Event) -> None:
        md = event.obj.get("metadata") or {}
        wanted = self.replicas_wanted.get((md.get("namespace", ""), md.get("name", "")))
        replicas = (event.obj.get("spec") or {}).get("replicas")
        if wanted is not None and replicas == wanted[0] and not wanted[1].done():
            wanted[1].set_result(time.perf_counter())


@dataclass(frozen=True)
class Plain:
    seconds: float
    objects: int
    writes: int  # as the API server counted them
    cpu_s: float  # of this process while it applied them (its informers' share included)


async def plain_loop(client: Client, api: ApiClient) -> Plain:
    """Apply every object the operator would create for the clusters (16 in flight) into namespaces of its own;
    returns what that took; then deletes them all."""
    munge, host_keys = new_munge_key(), new_ssh_host_keys()
    objects = []
    for i in range(CLUSTERS):
        doc = _in_namespace(_cluster(i), f"plain-{i % NAMESPACES}")
        objects += _children(doc, munge=munge, host_keys=host_keys)
    for n in range(NAMESPACES):
        await client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"plain-{n}"}})
    gate = asyncio.Semaphore(PLAIN_CONCURRENCY)

    async def apply(obj: dict[str, Any]) -> None:
        async with gate:
            await client.apply(obj, field_manager="bench-plain")

    counts_before = await request_counts(api)
    cpu_before = time.process_time()
    begun = time.perf_counter()
    await asyncio.gather(*(apply(o) for o in objects))
    elapsed = time.perf_counter() - begun
    cpu_s = time.process_time() - cpu_before
    writes = sum(operator_writes(counts_before, await request_counts(api)).values())
    await _delete_all(client, objects)
    return Plain(elapsed, len(objects), writes, cpu_s)


async def _delete_all(client: Client, objects: list[dict[str, Any]]) -> None:
    """DELETE on each collection (the plane has no namespace controller); Services allow no such thing."""
    gate = asyncio.Semaphore(PLAIN_CONCURRENCY)

    async def delete(obj: dict[str, Any]) -> None:
        async with gate:
            await client.delete(obj["apiVersion"], obj["kind"], obj["metadata"]["name"],
                                namespace=obj["metadata"]["namespace"])  # fmt: skip

    for api_version, kind in sorted({(o["apiVersion"], o["kind"]) for o in objects}):
        if kind == "Service":
            await asyncio.gather(*(delete(o) for o in objects if o["kind"] == kind))
            continue
        res = await client.resource(api_version, kind)
        for n in range(NAMESPACES):
            await client.request("DELETE", res.path(f"plain-{n}"), request_timeout=120)


async def _edit_latencies(driver: Manager, watched: Watched) -> list[float]:
    """`kubectl edit` the size of one group of EDITS clusters in turn; seconds until its StatefulSet asks for it."""
    latencies = []
    for k in range(EDITS):
        i = (k * 37) % CLUSTERS
        ns, name = f"many-{i % NAMESPACES}", f"c{i}"
        size = 2 if k % 2 == 0 else 3
        done: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        watched.replicas_wanted[(ns, f"{name}-worker-a")] = (size, done)
        begun = time.perf_counter()
        patch = {"spec": {"workers": _cluster(i, sizes={"a": size})["spec"]["workers"]}}
        await driver.client.merge_patch(API_VERSION, KIND, name, patch, namespace=ns)
        async with asyncio.timeout(30):
            latencies.append(await done - begun)
    return latencies


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _measure(kubeconfig: Path, log: IO[bytes]) -> list[Figure]:
    api = await config.new_client_from_config(config_file=str(kubeconfig))
    driver = Manager(Client(api), driver_options())
    watched = Watched()
    operator: Operator | None = None
    task: asyncio.Task[None] | None = None
    try:
        for i in range(NAMESPACES):
            await driver.client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"many-{i}"}})
        register_readiness(driver)
        driver.informer(API_VERSION, KIND).add_listener(watched.cluster)
        driver.informer("apps/v1", "StatefulSet").add_listener(watched.statefulset)
        task = await started(driver)

        plain = await plain_loop(driver.client, api)
        plain_s, objects = plain.seconds, plain.objects
        load = os.getloadavg()[0]

        operator = Operator(kubeconfig, log)
        await operator.wait_ready()
        idle_rss = _proc_status(operator.proc.pid, "VmRSS")
        cpu_before = _cpu_seconds(operator.proc.pid)
        counts_before = await request_counts(api)
        gate = asyncio.Semaphore(CREATE_CONCURRENCY)

        async def create(i: int) -> None:
            async with gate:
                await driver.client.create(_cluster(i))

        begun = time.perf_counter()
        await asyncio.gather(*(create(i) for i in range(CLUSTERS)))
        try:
            await wait_until(lambda: len(watched.available) >= CLUSTERS, watched.changed, deadline=DEADLINE,
                             what=f"{CLUSTERS} clusters Available")  # fmt: skip
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}: only {len(watched.available)} were") from None
        available_s = time.perf_counter() - begun
        cpu_s = _cpu_seconds(operator.proc.pid) - cpu_before
        await asyncio.sleep(2)  # writes still in flight at the moment the last cluster turned Available
        counts_created = await request_counts(api)
        created = operator_writes(counts_before, counts_created)

        latencies = await _edit_latencies(driver, watched)
        await asyncio.sleep(2)
        await wait_until(lambda: len(watched.available) >= CLUSTERS, watched.changed, deadline=DEADLINE,
                         what="every edited cluster Available again")  # fmt: skip
        counts_edited = await request_counts(api)
        edits = operator_writes(counts_created, counts_edited)
        peak_rss = _proc_status(operator.proc.pid, "VmHWM")

        # Steady state: a fresh operator (it remembers nothing) resyncing every RESYNC_S seconds.
        operator.stop()
        operator = Operator(kubeconfig, log, resync=RESYNC_S)
        counts_restart = await request_counts(api)
        await operator.wait_ready()
        await asyncio.sleep(STEADY_S)
        counts_steady = await request_counts(api)
        steady = operator_writes(counts_restart, counts_steady)
        others = {f"{verb} {resource}": n for (verb, resource), n in delta(counts_restart, counts_steady).items()
                  if verb in WRITE_VERBS}  # fmt: skip

        total = sum(created.values())
        return [
            ("many_clusters_count", float(CLUSTERS), "clusters"),
            ("many_clusters_objects", float(objects), "objects"),
            ("many_clusters_load_average_1m", load, ""),
            ("many_clusters_plain_apply_loop_s", plain_s, "s"),
            ("many_clusters_all_available_s", available_s, versus("s", available_s, plain_s, goal=RATIO_GOAL)),
            ("many_clusters_ratio", available_s / plain_s, goal("x", RATIO_GOAL)),
            ("many_clusters_plain_writes", float(plain.writes), "writes"),
            ("many_clusters_operator_writes", float(total), versus("writes", total, plain.writes)),
            ("many_clusters_operator_writes_by_resource", float(total), f"writes {dict(created.most_common())}"),
            (
                "many_clusters_writes_per_object",
                total / objects,
                versus("x", total / objects, plain.writes / objects, goal="<= 1.3"),
            ),
            (
                "many_clusters_status_writes_per_cluster",
                created["slurmclusters/status"] / CLUSTERS,
                goal("writes | plain loop 0", "<= 6"),
            ),
            ("many_clusters_event_writes_per_cluster", created["events"] / CLUSTERS, "writes | plain loop 0"),
            (
                "many_clusters_steady_writes",
                float(sum(steady.values())),
                goal(f"operator writes: restart + {STEADY_S:g} s, resync {RESYNC_S} s {dict(steady)}", "0"),
            ),
            ("many_clusters_steady_all_writes", float(sum(others.values())), f"writes by anyone {others}"),
            ("many_clusters_edit_p50_ms", 1000 * statistics.median(latencies), goal("ms", "< 100")),
            ("many_clusters_edit_p99_ms", 1000 * _percentile(latencies, 0.99), goal("ms", "< 500")),
            ("many_clusters_writes_per_edit", sum(edits.values()) / EDITS, "writes"),
            ("many_clusters_operator_peak_rss", peak_rss, goal("MiB", RSS_GOAL)),
            ("many_clusters_operator_idle_rss", idle_rss, "MiB"),
            ("many_clusters_operator_cpu_s", cpu_s, versus("s", cpu_s, plain.cpu_s)),
            (
                "many_clusters_operator_cpu_per_cluster_ms",
                1000 * cpu_s / CLUSTERS,
                versus(
                    "ms",
                    1000 * cpu_s / CLUSTERS,
                    1000 * plain.cpu_s / CLUSTERS,
                    goal="report it; halve the 294 ms of issue 14",
                ),
            ),
        ]
    finally:
        driver.stop()
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)
        if operator is not None:
            operator.stop()
        await api.close()


def run() -> list[Figure]:
    """BENCH_OPERATOR_LOG=FILE keeps the operator's log (e.g. with SLURMCTL_LOG_LEVEL=debug: every apply)."""
    kept = os.environ.get("BENCH_OPERATOR_LOG")
    with control_plane() as kubeconfig, tempfile.NamedTemporaryFile(prefix="bench-operator-", suffix=".log") as tmp:
        if not kept:
            return asyncio.run(_measure(kubeconfig, tmp))
        with open(kept, "wb") as log:
            return asyncio.run(_measure(kubeconfig, log))
