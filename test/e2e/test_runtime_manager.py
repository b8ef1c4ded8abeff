"""The manager end to end: probes and metrics, events, graceful SIGTERM, and leader election between processes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client

from slurmctl.runtime import Client, Manager, ManagerOptions, Request
from test.e2e.harness import REPO, ControlPlane, eventually, free_port

pytestmark = pytest.mark.e2e


async def http_get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as resp:
        return resp.status, await resp.text()


def cm(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}}


async def test_manager_serves_probes_metrics_events_and_stops_on_sigterm_within_the_grace_period(
    api: client.ApiClient, namespace: str
) -> None:
    metrics_port, health_port = free_port(), free_port()
    rt = Client(api, timeout=10)
    manager = Manager(
        rt,
        ManagerOptions(
            namespace=namespace,
            metrics_bind_address=f"127.0.0.1:{metrics_port}",
            health_probe_bind_address=f"127.0.0.1:{health_port}",
            grace_period=5,
        ),
    )
    reconciled: list[str] = []
    slow_started, slow_finished = asyncio.Event(), asyncio.Event()

    async def reconcile(request: Request) -> None:
        reconciled.append(request.name)
        if request.name == "slow":
            slow_started.set()
            await asyncio.sleep(1)  # a reconcile in flight at SIGTERM is allowed to finish
            slow_finished.set()

    manager.controller("e2e-cm", reconcile, for_=("v1", "ConfigMap"))
    await rt.create(cm("first", namespace))
    tasks_before = asyncio.all_tasks()
    run = asyncio.create_task(manager.run())

    await eventually(lambda: asyncio.sleep(0, "first" in reconciled), timeout=30, what="the first reconcile")
    assert await http_get(f"http://127.0.0.1:{health_port}/healthz") == (200, "ok")
    assert await http_get(f"http://127.0.0.1:{health_port}/readyz") == (200, "ok")
    status, text = await http_get(f"http://127.0.0.1:{metrics_port}/metrics")
    assert status == 200
    for series in (
        'controller_runtime_reconcile_total{controller="e2e-cm",result="success"}',
        'controller_runtime_max_concurrent_reconciles{controller="e2e-cm"} 1.0',
        'workqueue_depth{name="e2e-cm"}',
        "rest_client_requests_total{code=",
        "workqueue_work_duration_seconds_bucket",
    ):
        assert series in text, series
    assert "_created" not in text

    obj = await rt.get("v1", "ConfigMap", "first", namespace=namespace)
    for _ in range(3):
        manager.recorder.record(obj, "Warning", "Tested", "something happened")
    await asyncio.wait_for(manager.recorder.flush(), 10)
    events = await rt.list("v1", "Event", namespace=namespace)
    ours = [e for e in events["items"] if e["reason"] == "Tested"]
    assert len(ours) == 1  # repeats are aggregated into one Event
    assert ours[0]["count"] == 3
    assert ours[0]["involvedObject"]["name"] == "first" and ours[0]["type"] == "Warning"

    await rt.create(cm("slow", namespace))
    await asyncio.wait_for(slow_started.wait(), 30)
    started = time.monotonic()
    os.kill(os.getpid(), signal.SIGTERM)
    await asyncio.wait_for(run, 10)
    elapsed = time.monotonic() - started
    assert slow_finished.is_set()
    assert 0.5 < elapsed < 5
    await asyncio.sleep(0)
    left = {t for t in asyncio.all_tasks() - tasks_before if t is not asyncio.current_task() and not t.done()}
    assert left == set(), left
    with pytest.raises(aiohttp.ClientConnectionError):
        await http_get(f"http://127.0.0.1:{health_port}/healthz")


async def test_a_hung_reconcile_is_cancelled_at_the_end_of_the_grace_period(
    api: client.ApiClient, namespace: str
) -> None:
    manager = Manager(
        Client(api, timeout=10),
        ManagerOptions(namespace=namespace, metrics_bind_address="0", health_probe_bind_address="0", grace_period=1),
    )
    hung, cancelled = asyncio.Event(), asyncio.Event()

    async def reconcile(_: Request) -> None:
        hung.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    manager.controller("e2e-hung", reconcile, for_=("v1", "ConfigMap"))
    await Client(api, timeout=10).create(cm("hang", namespace))
    run = asyncio.create_task(manager.run())
    await asyncio.wait_for(hung.wait(), 30)
    started = time.monotonic()
    manager.stop()
    await asyncio.wait_for(run, 10)
    assert cancelled.is_set()
    assert 0.9 < time.monotonic() - started < 3


APP = """
import sys
from slurmctl.cli import main

async def register(manager):
    async def reconcile(request):
        print("RECONCILED", request, flush=True)
    manager.controller("leader-e2e", reconcile, for_=("v1", "ConfigMap"))

sys.exit(main(sys.argv[1:], register=register))
"""


class Proc:
    def __init__(self, tmp: Path, name: str, kubeconfig: Path, namespace: str) -> None:
        self.out = tmp / f"{name}.out"
        self.err = tmp / f"{name}.err"
        script = tmp / "app.py"
        script.write_text(APP)
        args = [sys.executable, str(script), "run", "--kubeconfig", str(kubeconfig), "--namespace", namespace,
                "--leader-elect", "--leader-election-namespace", namespace, "--leader-election-id", "e2e-lock",
                "--metrics-bind-address", "0", "--health-probe-bind-address", "0",
                "--graceful-shutdown-timeout", "5"]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        with self.out.open("w") as out, self.err.open("w") as err:
            self.popen = subprocess.Popen(args, stdout=out, stderr=err, env=env)

    def stdout(self) -> str:
        return self.out.read_text()

    def stderr(self) -> str:
        return self.err.read_text()

    def reconciled(self) -> set[str]:
        # Complete lines only: the child may be half-way through writing one.
        lines = self.stdout().splitlines(keepends=True)
        return {line.split()[1] for line in lines if line.startswith("RECONCILED ") and line.endswith("\n")}

    async def logged(self, text: str, timeout: float) -> None:
        async def probe() -> bool:
            if self.popen.poll() is not None:
                raise AssertionError(f"exited {self.popen.returncode}: {self.stderr()}")
            return text in self.stderr()

        await eventually(probe, timeout=timeout, interval=0.05, what=f"{text!r} in {self.err.name}")

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(10)


async def test_only_the_leader_reconciles_and_killing_it_hands_over_within_20s(
    control_plane: ControlPlane, namespace: str, api: client.ApiClient, tmp_path: Path
) -> None:
    rt = Client(api, timeout=10)
    await rt.create(cm("one", namespace))
    a = Proc(tmp_path, "a", control_plane.kubeconfig, namespace)
    b: Proc | None = None
    c: Proc | None = None
    try:
        await a.logged("became leader", 30)
        b = Proc(tmp_path, "b", control_plane.kubeconfig, namespace)
        await b.logged("waiting for leadership", 30)
        await rt.create(cm("two", namespace))
        await eventually(lambda: asyncio.sleep(0, {f"{namespace}/one", f"{namespace}/two"} <= a.reconciled()),
                         timeout=30, what="the leader to reconcile")  # fmt: skip
        lease = await rt.get("coordination.k8s.io/v1", "Lease", "e2e-lock", namespace=namespace)
        holder = lease["spec"]["holderIdentity"]
        assert holder in a.stderr() and holder not in b.stderr()
        assert b.reconciled() == set()  # the follower's informers see the same events, but it does not reconcile

        killed = time.monotonic()
        a.popen.send_signal(signal.SIGKILL)
        await b.logged("became leader", 25)
        handover = time.monotonic() - killed
        print(f"leader handover after SIGKILL: {handover:.1f}s")
        assert handover < 20, handover
        await rt.create(cm("three", namespace))
        await eventually(lambda: asyncio.sleep(0, f"{namespace}/three" in b.reconciled()), timeout=30,
                         what="the new leader to reconcile")  # fmt: skip
        assert {f"{namespace}/one", f"{namespace}/two"} <= b.reconciled()  # its initial list is reconciled too

        # A clean shutdown releases the lease: the next candidate takes over without waiting for it to expire.
        c = Proc(tmp_path, "c", control_plane.kubeconfig, namespace)
        await c.logged("waiting for leadership", 30)
        stopped = time.monotonic()
        b.popen.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(b.popen.wait, 10) == 0
        await c.logged("became leader", 10)
        assert time.monotonic() - stopped < 6
        assert "released leadership" in b.stderr()
    finally:
        for proc in (a, b, c):
            if proc is not None:
                proc.kill()
