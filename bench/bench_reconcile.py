"""No-op reconciles per second, fed by informer events from a real API server (a control plane of its own).

Two figures: the initial list (N existing ConfigMaps listed, queued and reconciled), and live watch events
(every ConfigMap patched once while the manager runs; the rate there is bounded by how fast the API server takes
the writes, reported alongside).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from kubernetes_asyncio import config

from slurmctl.runtime import Client, Manager, ManagerOptions, Request

OBJECTS = 2_000
CONCURRENCY = 32
REPO = Path(__file__).resolve().parents[1]
NS = "bench-reconcile"


def _plane(command: str, state: Path) -> None:
    env = {**os.environ, "SLURMCTL_CLUSTER_DIR": str(state)}
    proc = subprocess.run(
        ["bash", str(REPO / "hack" / "control-plane.sh"), command],
        env=env, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"control-plane.sh {command} failed: {proc.stderr[-2000:]}")


async def _bounded(calls: list[Callable[[], Awaitable[object]]]) -> None:
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(call: Callable[[], Awaitable[object]]) -> None:
        async with gate:
            await call()

    await asyncio.gather(*(one(c) for c in calls))


async def _measure(kubeconfig: Path) -> list[tuple[str, float, str]]:
    api = await config.new_client_from_config(config_file=str(kubeconfig))
    try:
        rt = Client(api, timeout=30)
        await rt.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        await _bounded([
            (lambda i=i: rt.create({"apiVersion": "v1", "kind": "ConfigMap",
                                    "metadata": {"name": f"cm-{i}", "namespace": NS}, "data": {"k": "v"}}))
            for i in range(OBJECTS)
        ])  # fmt: skip

        reconciled: dict[str, int] = {}
        goal, reached = OBJECTS, asyncio.Event()

        async def noop(request: Request) -> None:
            reconciled[request.name] = reconciled.get(request.name, 0) + 1
            if sum(reconciled.values()) >= goal:
                reached.set()

        manager = Manager(
            rt,
            ManagerOptions(namespace=NS, metrics_bind_address="0", health_probe_bind_address="0", handle_signals=False),
        )
        manager.controller("bench-noop", noop, for_=("v1", "ConfigMap"))
        started = time.perf_counter()
        run = asyncio.create_task(manager.run())
        await asyncio.wait_for(reached.wait(), 300)
        initial = sum(reconciled.values()) / (time.perf_counter() - started)
        # kube-root-ca.crt also lives in the namespace: aim for every listed object to be updated once.
        goal, reached = sum(reconciled.values()) + OBJECTS, asyncio.Event()

        started = time.perf_counter()
        await _bounded([
            (lambda i=i: rt.merge_patch("v1", "ConfigMap", f"cm-{i}", {"data": {"k": "changed"}}, namespace=NS))
            for i in range(OBJECTS)
        ])  # fmt: skip
        writes_done = time.perf_counter() - started
        await asyncio.wait_for(reached.wait(), 300)
        watched = OBJECTS / (time.perf_counter() - started)
        manager.stop()
        await run
        await rt.delete("v1", "Namespace", NS)
        return [
            ("reconcile_noop_initial_list", initial, "reconciles/s"),
            ("reconcile_noop_watch_events", watched, "reconciles/s"),
            ("reconcile_bench_apiserver_patch_rate", OBJECTS / writes_done, "writes/s"),
        ]
    finally:
        await api.close()


def run() -> list[tuple[str, float, str]]:
    existing = os.environ.get("SLURMCTL_BENCH_KUBECONFIG")
    if existing:
        return asyncio.run(_measure(Path(existing)))
    with tempfile.TemporaryDirectory(prefix="bench-plane-") as tmp:
        state = Path(tmp) / "plane"
        try:
            _plane("up", state)
            return asyncio.run(_measure(state / "kubeconfig"))
        finally:
            _plane("down", state)
