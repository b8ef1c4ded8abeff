"""Helpers shared by the end-to-end tests: waiting on conditions with deadlines, kubectl, the control plane."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

REPO = Path(__file__).resolve().parents[2]
CONTROL_PLANE = REPO / "hack" / "control-plane.sh"
T = TypeVar("T")


async def eventually(
    probe: Callable[[], Awaitable[T | None]], *, timeout: float = 30.0, interval: float = 0.1, what: str = "condition"
) -> T:
    """Poll `probe` until it returns something truthy; fail with `what` and the last value when the deadline passes."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = await probe()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")
        await asyncio.sleep(interval)


def audit_events(log: Path, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """The API server's audit events in `log` after byte `offset`, and the offset after the last of them: whole lines
    only, as the server may be writing one (a test read a half-written event once, in CI)."""
    with log.open("rb") as f:
        f.seek(offset)
        data = f.read()
    whole = data[: data.rfind(b"\n") + 1]
    return [json.loads(line) for line in whole.splitlines() if line.strip()], offset + len(whole)


@dataclass(frozen=True)
class ControlPlane:
    """A running control plane: its kubeconfig, and its state directory when this test session started it."""

    kubeconfig: Path
    state_dir: Path | None

    def kubectl(self, *args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        proc = subprocess.run(
            ["kubectl", *args], env=env, input=input, capture_output=True, text=True, timeout=60, check=False
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc

    def apply_unvalidated(self, body: dict[str, object], *, namespace: str) -> subprocess.CompletedProcess[str]:
        """`kubectl apply --server-side` of `body` with client-side validation off, so the API server has the last
        word: what a user sees when it refuses."""
        return self.kubectl(
            "apply", "--server-side", "--validate=false", "-n", namespace, "-f", "-", input=yaml.safe_dump(body),
            check=False,
        )  # fmt: skip


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def control_plane_script(
    command: str, state_dir: Path | None = None, *, minor: str | None = None
) -> subprocess.CompletedProcess[str]:
    """hack/control-plane.sh COMMAND on the cluster in `state_dir` (none for `version` and `bin-dir`), for the
    Kubernetes `minor` when given (else the one KUBE_VERSION names)."""
    env = dict(os.environ)
    if state_dir is not None:
        env["SLURMCTL_CLUSTER_DIR"] = str(state_dir)
    if minor is not None:
        env["KUBE_VERSION"] = minor
    return subprocess.run(
        ["bash", str(CONTROL_PLANE), command], env=env, capture_output=True, text=True, timeout=180, check=False
    )


NODE_SCRIPT = REPO / "hack" / "node.sh"
NODE_NAME = "slurmctl-node"


def node_script(
    command: str, state_dir: Path, *args: str, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """hack/node.sh COMMAND on the cluster in `state_dir` (a node runs on top of that state's control plane)."""
    env = {**os.environ, **(env or {}), "SLURMCTL_CLUSTER_DIR": str(state_dir)}
    return subprocess.run(
        ["bash", str(NODE_SCRIPT), command, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@dataclass(frozen=True)
class Node(ControlPlane):
    """A control plane with a real node (kubelet, containerd, pod network and DNS) from hack/node.sh."""

    node_name: str = NODE_NAME

    def exec(self, namespace: str, pod: str, *command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.kubectl("exec", "-n", namespace, pod, "--", *command, check=check)


CHART = REPO / "charts" / "slurmctl"
HELM_SCRIPT = REPO / "hack" / "helm.sh"


@dataclass(frozen=True)
class Helm:
    """hack/helm.sh's Helm (the version hack/deps/helm pins, cached by setup: never one on PATH), with config, cache
    and data directories of its own, nothing of the user's; `kubeconfig` for the commands that reach a cluster."""

    binary: str
    env: dict[str, str]

    @classmethod
    def at(cls, home: Path, kubeconfig: Path | None = None) -> Helm:
        found = subprocess.run(
            ["bash", str(HELM_SCRIPT), "path"], capture_output=True, text=True, timeout=30, check=False
        )
        assert found.returncode == 0, found.stderr
        env = {**os.environ, **{f"HELM_{d}_HOME": str(home / d.lower()) for d in ("CONFIG", "CACHE", "DATA")}}
        if kubeconfig is not None:
            env["KUBECONFIG"] = str(kubeconfig)
        return cls(found.stdout.strip(), env)

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.binary, *args], env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )

    def check(self, *args: str, timeout: float = 300) -> str:
        """Run, failing with what Helm said when it exits non-zero; its output."""
        done = self.run(*args, timeout=timeout)
        assert done.returncode == 0, f"helm {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}"
        return done.stdout
