"""The scale harness: a control plane (hack/control-plane.sh) with KWOK's simulated nodes, the real kube-scheduler,
the operator in a process of its own, and a stand-in slurmrestd (test/fake_slurm/restd.py) that answers for the
cluster's Slurm. No pod runs anywhere: KWOK (hack/kwok.sh) reports the pods bound to its nodes Running, so a
thousand nodes cost an API object each. The control-plane suite's small version is test/e2e/test_scale_sim.py, the
full one bench/bench_scale_sim.py (docs/performance.md).

What is simulated and what is real:
- real: the API server, etcd, kube-controller-manager (StatefulSets, Jobs, the PV binder, node lifecycle), the
  kube-scheduler, and the operator, unchanged but for where it sends its Slurm requests;
- KWOK: each Node's status and Lease, each pod's status (Running and Ready at once, a Job's pod Succeeded);
- the stand-in: slurmctld and slurmrestd, on the unit tests' in-memory model of Slurm.

The operator reaches the stand-in because `python -m test.e2e.scale operator` builds its Slurm access (one per
operator, reconcilers/slurm_access.py) with a `connect` that sends every cluster's requests to the stand-in's URL,
as the unit tests route the same access to the model: the pods' addresses (KWOK's, which route nowhere) are never
dialled. Nothing in the operator itself changes for it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.rest import ApiException

from slurmctl.reconcilers import register
from slurmctl.reconcilers.slurm_access import TOKEN_USER, SlurmAccess
from slurmctl.runtime import Client, Manager, ManagerOptions
from slurmctl.slurm import SlurmClient, new_session
from test.e2e.harness import REPO, ControlPlane, audit_events, control_plane_script
from test.e2e.operator import POLICY
from test.fake_slurm.model import FakeSlurm

KWOK_SCRIPT = REPO / "hack" / "kwok.sh"
FAKE_ANNOTATION = "kwok.x-k8s.io/node"  # KWOK manages the Nodes annotated kwok.x-k8s.io/node=fake, and no other
RACK_LABEL = "topology.slurmctl.io/rack"
BLOCK_LABEL = "topology.slurmctl.io/block"
TAINT = {"key": "slurmctl.io/reserved", "value": "true", "effect": "NoSchedule"}
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
TIMEOUT = 30


def kwok_paths() -> tuple[str, str]:
    """The kwok binary and its Stage configuration, built first when not cached (hack/kwok.sh, once per version)."""
    built = subprocess.run(
        ["bash", str(KWOK_SCRIPT), "build"], capture_output=True, text=True, timeout=1800, check=False
    )
    if built.returncode != 0:
        raise RuntimeError(f"hack/kwok.sh build failed:\n{built.stderr[-3000:]}")
    found = []
    for what in ("bin", "config"):
        done = subprocess.run(["bash", str(KWOK_SCRIPT), what], capture_output=True, text=True, timeout=30, check=True)
        found.append(done.stdout.strip())
    return found[0], found[1]


def fake_node(index: int, *, racks: int, tainted_every: int) -> dict[str, Any]:
    """Simulated node `index`: its rack and block (four racks a block), and every `tainted_every`-th one reserved
    (tainted NoSchedule, so the scheduler keeps the cluster's pods off it)."""
    name = f"kwok-node-{index:04}"
    rack = index % racks
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {FAKE_ANNOTATION: "fake"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "type": "kwok",
                RACK_LABEL: f"rack-{rack:02}",
                BLOCK_LABEL: f"block-{rack // 4:02}",
            },
        },
        "spec": {},
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"},
            "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110"},
        },
    }
    if tainted_every and index % tainted_every == tainted_every - 1:
        node["spec"]["taints"] = [TAINT]
    return node


@dataclass
class Simulation:
    """kube-scheduler and KWOK on `plane`, and `nodes` simulated Nodes; `stop` ends both (by PID) and deletes the
    Nodes, so the control plane is as it was."""

    plane: ControlPlane
    workdir: Path
    nodes: int
    racks: int = 8
    tainted_every: int = 10
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def node_names(self) -> list[str]:
        return [f"kwok-node-{i:04}" for i in range(self.nodes)]

    @property
    def schedulable(self) -> int:
        return sum(
            1
            for i in range(self.nodes)
            if "taints" not in fake_node(i, racks=1, tainted_every=self.tainted_every)["spec"]
        )

    def _start(self, name: str, argv: Sequence[str]) -> None:
        log = (self.workdir / f"{name}.log").open("wb")
        self.processes[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def start_scheduler(self) -> None:
        """The real kube-scheduler of the control plane's version, next to its kubectl; a client rate that keeps
        up with thousands of pods (the default 50/s binds 10,240 pods in 3.5 minutes)."""
        bin_dir = control_plane_script("bin-dir").stdout.strip()
        scheduler = Path(bin_dir) / "kube-scheduler"
        if not scheduler.exists():
            raise RuntimeError(f"no kube-scheduler in {bin_dir}: run `hack/control-plane.sh build` (KUBE_BUILD=all)")
        settings = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(self.plane.kubeconfig), "qps": 500, "burst": 1000},
            "leaderElection": {"leaderElect": False},
        }
        path = self.workdir / "scheduler.yaml"
        path.write_text(yaml.safe_dump(settings))
        self._start("kube-scheduler", [str(scheduler), "--config", str(path), "--secure-port", "0"])

    def start_kwok(self) -> None:
        """`--cidr` and `--node-ip` are addresses KWOK writes into the simulated Pods' and Nodes' status only: no
        process listens there and nothing connects to them (the operator reaches the stand-in slurmrestd on
        127.0.0.1, and the API server never calls a simulated kubelet)."""
        binary, stages = kwok_paths()
        self._start(
            "kwok",
            [
                binary, "--kubeconfig", str(self.plane.kubeconfig), "--config", stages,
                "--manage-all-nodes=false", f"--manage-nodes-with-annotation-selector={FAKE_ANNOTATION}=fake",
                "--node-lease-duration-seconds", "40", "--cidr", "10.128.0.0/12", "--node-ip", "10.127.0.1",
            ],
        )  # fmt: skip

    async def create_nodes(self, api: client.ApiClient) -> None:
        core = client.CoreV1Api(api)
        semaphore = asyncio.Semaphore(32)

        async def one(i: int) -> None:
            async with semaphore:
                try:
                    await core.create_node(
                        fake_node(i, racks=self.racks, tainted_every=self.tainted_every), _request_timeout=TIMEOUT
                    )
                except ApiException as exc:
                    if exc.status != 409:
                        raise

        await asyncio.gather(*(one(i) for i in range(self.nodes)))

    async def ready_nodes(self, api: client.ApiClient) -> int:
        nodes = await client.CoreV1Api(api).list_node(label_selector="type=kwok", _request_timeout=TIMEOUT)
        return sum(
            1 for n in nodes.items if any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or []))
        )

    def check_alive(self) -> None:
        for name, proc in self.processes.items():
            if proc.poll() is not None:
                tail = (self.workdir / f"{name}.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{name} exited ({proc.returncode}):\n{tail}")

    async def stop(self, api: client.ApiClient | None) -> None:
        for proc in self.processes.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.processes.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)
        self.processes.clear()
        if api is not None:
            core = client.CoreV1Api(api)
            await core.delete_collection_node(label_selector="type=kwok", _request_timeout=TIMEOUT)


# ---- the operator, in a process of its own ----------------------------------------------------------------------
@dataclass
class OperatorProcess:
    """`python -m test.e2e.scale operator`: CPU seconds and peak memory are its own (from /proc)."""

    kubeconfig: Path
    slurmrestd: str
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
        argv = [sys.executable, "-m", "test.e2e.scale", "operator", str(self.kubeconfig), self.slurmrestd]
        out = self.log.open("wb")
        self.proc = subprocess.Popen(
            argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )

    def cpu_seconds(self) -> float:
        assert self.proc is not None
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def peak_rss_bytes(self) -> int:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        return 0

    def check_alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(
                f"the operator exited ({self.proc.returncode}):\n{self.log.read_text(errors='replace')[-3000:]}"
            )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)


async def _run_operator(kubeconfig: str, slurmrestd: str) -> None:
    api = await config.new_client_from_config(config_file=kubeconfig)
    manager = Manager(Client(api), ManagerOptions(metrics_bind_address="0", health_probe_bind_address="0"))
    ctx = await register(manager, policy=POLICY)
    session = new_session()

    def connect(base_url: str, token: Any) -> SlurmClient:  # every cluster's slurmrestd is the stand-in
        return SlurmClient(session=session, base_url=slurmrestd, token=token, user=TOKEN_USER)

    access = SlurmAccess(manager.cache, connect=connect, registry=manager.metrics.registry)
    for listener in ctx.slurm.listeners:
        access.listen(listener)
    ctx.slurm = access
    try:
        await manager.run()
    finally:
        await session.close()
        await api.close()


# ---- what the API server says the operator wrote -------------------------------------------------------------------
def operator_writes(audit_log: Path, offset: int, user: str, *, detail: bool = False) -> tuple[dict[str, int], int]:
    """Writes by `user` in the audit log since byte `offset`, by resource (`detail`: by resource, verb and object);
    and the new offset."""
    counts: dict[str, int] = {}
    events, after = audit_events(audit_log, offset)
    for event in events:
        if event.get("user", {}).get("username") != user or event.get("verb") not in WRITE_VERBS:
            continue
        ref = event.get("objectRef", {})
        resource = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        resource += f" {event['verb']} {ref.get('name', '')}" if detail else ""
        counts[resource] = counts.get(resource, 0) + 1
    return counts, after


def audit_size(audit_log: Path) -> int:
    return audit_log.stat().st_size if audit_log.exists() else 0


def out_of_service(slurm: FakeSlurm, rolling: Iterable[str]) -> list[str]:
    """The nodes Slurm would not give a job now: drained or not responding, or (of the workers that roll) not
    registered, the pod re-created and its new slurmd not registered yet."""
    out = {n for n, node in slurm.table.items() if node.state & {"DRAIN", "NOT_RESPONDING"}}
    return sorted(out | (set(rolling) - slurm.table.keys()))


def slurm_state(pod: Any) -> str | None:
    """The reason of the pod's SlurmNodeState condition: the Slurm state the operator last wrote there."""
    found = [c.reason for c in pod.status.conditions or [] if c.type == "SlurmNodeState"]
    return found[0] if found else None


def groups(total: int, count: int) -> Iterator[tuple[str, int]]:
    """`total` workers in `count` groups as even as can be: (name, size)."""
    for g in range(count):
        yield f"g{g:02}", total // count + (1 if g < total % count else 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m test.e2e.scale")
    sub = parser.add_subparsers(dest="command", required=True)
    op = sub.add_parser("operator", help="run the operator with its Slurm requests sent to a stand-in slurmrestd")
    op.add_argument("kubeconfig")
    op.add_argument("slurmrestd", help="the stand-in's URL, e.g. http://127.0.0.1:40000")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(_run_operator(args.kubeconfig, args.slurmrestd))
    return 0


if __name__ == "__main__":
    sys.exit(main())
