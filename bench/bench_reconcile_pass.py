"""One reconcile pass of every component for one SlurmCluster of 64 groups x 64 nodes, after a one-group edit
(issue 26), and the same pass with nothing changed (steady state: no write at all).

The real registry and reconcilers on a Manager whose client and cache are the in-memory `FakeClient` (the unit tests'
bench, test/unit/reconcilers/env.py): the cluster is made Available first (the jail Job succeeds, every workload
reports ready, the 4,096 worker pods run, each as a kubelet reports it: `_as_kubelets_report`), then each figure is
the process CPU of one pass of every component (`Env.run`: cluster, populate-jail, controller, workers, login,
accounting, rest, benchmark) and the status write it submits; median of ROUNDS. The edit changes one group's memory
request (a new pod template for its StatefulSet).

What it leaves out: the API server's answers (the fake's server-side apply is timed separately and reported), and
the Slurm node loop (reads slurmrestd: bench_slurm_observation). Baseline beside each figure, from the same run:
rendering every component's objects for the same cluster (`desired_objects`), the least a pass can cost without
comparing anything. Growth with the nodes: the same at 16 and 32 groups of 64. Environment: BENCH_PASS_ROUNDS (5).
"""

from __future__ import annotations

import asyncio
import copy
import gc
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from test.unit.reconcilers.env import Env, spec

from bench import goal
from slurmctl.reconcilers.loading import Loaded
from slurmctl.reconcilers.registry import desired_objects
from slurmctl.render.kinds import POD, STATEFULSET
from slurmctl.render.manifests import Inputs

NODES_PER_GROUP = 64
SCALES = (16, 32, 64)  # groups
ROUNDS = int(os.environ.get("BENCH_PASS_ROUNDS", "5"))

Figure = tuple[str, float, str]


def _spec(groups: int) -> dict[str, Any]:
    body = spec()
    body["workers"] = [
        {"name": f"g{g:02}", "size": NODES_PER_GROUP, "resources": {"requests": {"cpu": 2, "memory": "4Gi"}}}
        for g in range(groups)
    ]
    body["rest"] = {"enabled": True}
    return body


class _Timed:
    """The fake API server's own CPU inside a pass (its server-side apply), to tell it from the operator's."""

    def __init__(self, env: Env) -> None:
        self.seconds = 0.0
        for verb in ("apply", "create", "delete", "merge_patch"):
            setattr(env.fake, verb, self._timed(getattr(env.fake, verb)))

    def _timed(self, call: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.process_time()
            try:
                return await call(*args, **kwargs)
            finally:
                self.seconds += time.process_time() - started

        return timed


async def _pass(env: Env, server: _Timed) -> tuple[float, float, int]:
    """One pass of every component: (operator CPU seconds, the fake server's CPU seconds, writes but Events)."""
    gc.collect()
    mark, served = env.mark(), server.seconds
    started = time.process_time()
    await env.run()
    spent, served = time.process_time() - started, server.seconds - served
    return spent - served, served, len(env.writes_since(mark, events=False))


def _as_kubelets_report(env: Env, pods: list[str]) -> None:
    """Each worker pod as the StatefulSet controller makes it and a kubelet reports it running: its template's spec
    and metadata, a status with every condition and container (the unit environment's pods carry a few fields, and a
    pass's cost is mostly reading pods: a real one is ~20 times the JSON)."""
    templates = {sts["metadata"]["name"]: sts["spec"]["template"] for sts in env.fake.of_kind(*STATEFULSET)}
    conditions = [
        {"type": t, "status": "True", "lastTransitionTime": "2024-05-01T12:00:00Z"}
        for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
    ]
    for name in pods:
        pod = copy.deepcopy(env.get(POD, name))
        assert pod is not None
        template = templates[pod["metadata"]["ownerReferences"][0]["name"]]
        pod["metadata"]["annotations"] = dict(template["metadata"].get("annotations") or {})
        pod["spec"] = {**copy.deepcopy(template["spec"]), "nodeName": pod["spec"]["nodeName"]}
        containers = [
            {
                "name": c["name"],
                "ready": True,
                "restartCount": 0,
                "image": c["image"],
                "started": True,
                "state": {"running": {"startedAt": "2024-05-01T12:00:00Z"}},
            }
            for c in pod["spec"]["containers"]
        ]
        pod["status"] = {
            "phase": "Running",
            "podIP": "127.0.0.30",
            "hostIP": "127.0.0.1",
            "qosClass": "Burstable",
            "conditions": conditions,
            "containerStatuses": containers,
        }
        env.fake.put(pod)  # fmt: skip


async def _scale(groups: int) -> dict[str, float]:
    async with Env() as env:
        await env.available(_spec(groups))
        _as_kubelets_report(env, env.worker_pods())
        await env.converge()
        assert env.phase() == "Available", env.phase()
        server = _Timed(env)
        steady, steady_writes, edits, edit_served, edit_writes, renders = [], [], [], [], [], []
        for k in range(ROUNDS):
            cpu, _, writes = await _pass(env, server)
            steady.append(cpu)
            steady_writes.append(writes)
            env.edit(lambda s, k=k: s["workers"][groups // 2]["resources"]["requests"].update(memory=f"{5 + k}Gi"))
            cpu, served, writes = await _pass(env, server)
            edits.append(cpu)
            edit_served.append(served)
            edit_writes.append(writes)
            await env.converge()
            loaded = env.ctx.loader.load(env.cluster())
            assert isinstance(loaded, Loaded)
            started = time.process_time()
            desired_objects(Inputs.offline(loaded.cluster))
            renders.append(time.process_time() - started)
    return {
        "steady_ms": statistics.median(steady) * 1000,
        "steady_writes": max(steady_writes),
        "edit_ms": statistics.median(edits) * 1000,
        "edit_server_ms": statistics.median(edit_served) * 1000,
        "edit_writes": statistics.median(edit_writes),
        "render_ms": statistics.median(renders) * 1000,
    }


async def _measure() -> list[Figure]:
    by_scale = {groups: await _scale(groups) for groups in SCALES}
    top = by_scale[SCALES[-1]]
    nodes = SCALES[-1] * NODES_PER_GROUP
    growth = " | ".join(
        f"{g * NODES_PER_GROUP:,} nodes {by_scale[g]['edit_ms']:.1f} ms ({by_scale[g]['edit_ms'] / g:.2f} ms/group)"
        for g in SCALES
    )
    render = f"rendering alone {top['render_ms']:.1f} ms"
    return [
        ("reconcile_pass_after_group_edit_cpu", top["edit_ms"],
         goal("ms", f"<= 100 ({SCALES[-1]} groups x {NODES_PER_GROUP}) | {render} | growth: {growth}")),
        ("reconcile_pass_after_group_edit_writes", top["edit_writes"],
         goal("writes", "reported (the edited group's StatefulSet, the status)")),
        ("reconcile_pass_after_group_edit_fake_server_cpu", top["edit_server_ms"],
         goal("ms", "reported (the fake API server's apply, not counted above)")),
        ("reconcile_pass_steady_cpu", top["steady_ms"], goal("ms", f"reported ({nodes:,} nodes) | {render}")),
        ("reconcile_pass_steady_writes", top["steady_writes"], goal("writes", "0")),
    ]  # fmt: skip


def run() -> list[Figure]:
    return asyncio.run(_measure())
