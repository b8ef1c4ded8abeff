"""200 small SlurmClusters (3 worker groups of one node each) created at once: time until all are Available, and the
operator's peak RSS.

The operator runs as its own process (`slurmctl run`, defaults as a user gets them) so that its peak RSS (`VmHWM`)
is its own. The control plane has no kube-controller-manager; this process plays the kubelet and the workload
controllers (see `bench_operator_create.register_readiness`): every populate-jail Job succeeds and every
StatefulSet reports its replicas ready as soon as it appears. The clock starts before the first create and stops when
the last cluster reports phase Available; the driver's own status writes share the machine's cores with the operator,
the API server and etcd.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

import aiohttp
from kubernetes_asyncio import config

from bench.bench_operator_create import control_plane, driver_options, register_readiness, started, wait_until
from slurmctl.api.v1 import API_VERSION, KIND
from slurmctl.runtime import Client, Event, EventType, Manager

CLUSTERS = 200
NAMESPACES = 4
CREATE_CONCURRENCY = 16
GROUPS = ("a", "b", "c")
DEADLINE = 150.0
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKeyForBenchmarks bench@example"
Figure = tuple[str, float, str]


def _cluster(i: int) -> dict[str, Any]:
    workers = [{"name": g, "size": 1, "resources": {"requests": {"cpu": 1, "memory": "1Gi"}}} for g in GROUPS]
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


class Operator:
    """`slurmctl run` as a child process, its log in a file; stopped by SIGTERM (then SIGKILL) on the way out."""

    def __init__(self, kubeconfig: Path, log: IO[bytes]) -> None:
        self.port = _free_port()
        self.log = log
        command = [str(Path(sys.executable).with_name("slurmctl")), "run", "--kubeconfig", str(kubeconfig),
                   "--metrics-bind-address", "0", "--health-probe-bind-address", f"127.0.0.1:{self.port}"]  # fmt: skip
        self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

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


async def _measure(kubeconfig: Path, operator: Operator) -> list[Figure]:
    api = await config.new_client_from_config(config_file=str(kubeconfig))
    driver = Manager(Client(api), driver_options())
    available: set[tuple[str, str]] = set()
    changed = asyncio.Event()

    def phase(event: Event) -> None:
        md = event.obj.get("metadata") or {}
        key = (md.get("namespace", ""), md.get("name", ""))
        if event.type is not EventType.DELETED and (event.obj.get("status") or {}).get("phase") == "Available":
            available.add(key)
        else:
            available.discard(key)
        changed.set()

    task: asyncio.Task[None] | None = None
    try:
        for i in range(NAMESPACES):
            await driver.client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"many-{i}"}})
        register_readiness(driver)
        driver.informer(API_VERSION, KIND).add_listener(phase)
        task = await started(driver)
        await operator.wait_ready()
        idle_rss = _proc_status(operator.proc.pid, "VmRSS")
        cpu_before = _cpu_seconds(operator.proc.pid)

        gate = asyncio.Semaphore(CREATE_CONCURRENCY)

        async def create(i: int) -> None:
            async with gate:
                await driver.client.create(_cluster(i))

        begun = time.perf_counter()
        await asyncio.gather(*(create(i) for i in range(CLUSTERS)))
        created = time.perf_counter() - begun
        try:
            await wait_until(lambda: len(available) >= CLUSTERS, changed, deadline=DEADLINE,
                             what=f"{CLUSTERS} clusters Available")  # fmt: skip
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}: only {len(available)} were") from None
        all_available = time.perf_counter() - begun
        return [
            ("many_clusters_count", float(CLUSTERS), "clusters"),
            ("many_clusters_create_requests_s", created, "s"),
            ("many_clusters_all_available_s", all_available, "s"),
            ("many_clusters_operator_peak_rss", _proc_status(operator.proc.pid, "VmHWM"), "MiB"),
            ("many_clusters_operator_idle_rss", idle_rss, "MiB"),
            ("many_clusters_operator_cpu_s", _cpu_seconds(operator.proc.pid) - cpu_before, "s"),
        ]
    finally:
        driver.stop()
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)
        await api.close()


def run() -> list[Figure]:
    with control_plane() as kubeconfig, tempfile.NamedTemporaryFile(prefix="bench-operator-", suffix=".log") as log:
        operator = Operator(kubeconfig, log)
        try:
            return asyncio.run(_measure(kubeconfig, operator))
        finally:
            operator.stop()
