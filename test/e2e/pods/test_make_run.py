"""`make run`'s script (hack/run.sh) end to end, as a user runs it against a cluster they have (KUBECONFIG set: the
suite's control plane and node, images already imported): it installs the CRD and RBAC, runs the operator in the
foreground, applies the minimal sample and waits for it. When the sample does not become Available in time it says
why and exits non-zero; when it does, it shows `sinfo` from the login pod and keeps the operator running. Each run has
a namespace of its own (its kubeconfig's context namespace), deleted afterwards.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from test.e2e.harness import REPO, Node, free_port
from test.e2e.pods.conftest import SLURM_IMAGES, require_images
from test.waiting import until

pytestmark = pytest.mark.e2e

NAME = "minimal"  # config/samples/slurmcluster_minimal.yaml, which `make run` applies
KEEPS_RUNNING = "The operator keeps running"


@dataclass
class Run:
    """hack/run.sh in its own process group; its output (stdout and stderr) in a file."""

    proc: subprocess.Popen[bytes]
    log: Path
    namespace: str

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        """Ctrl-C, as a user stops it (the script passes it on to the operator)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


@pytest.fixture
def make_run(node: Node, tmp_path: Path) -> Iterator[Callable[[int], Run]]:
    """Start hack/run.sh (given its Available timeout) in a fresh namespace; stopped and its namespace deleted after."""
    require_images(node, SLURM_IMAGES)
    runs: list[Run] = []

    def start(available_timeout: int) -> Run:
        namespace = f"make-run-{uuid.uuid4().hex[:6]}"
        node.kubectl("create", "namespace", namespace)
        kubeconfig = tmp_path / f"kubeconfig-{namespace}"
        kubeconfig.write_text(node.kubeconfig.read_text())
        node.kubectl("--kubeconfig", str(kubeconfig), "config", "set-context", "--current", f"--namespace={namespace}")
        env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "SLURMCTL_AVAILABLE_TIMEOUT": str(available_timeout),
            # The operator watches the run's namespace only (a documented setting): other modules' clusters on the
            # machine are not its to reconcile.
            "SLURMCTL_WATCH_NAMESPACE": namespace,
            "SLURMCTL_HEALTH_PROBE_BIND_ADDRESS": f"127.0.0.1:{free_port()}",
            "SLURMCTL_METRICS_BIND_ADDRESS": f"127.0.0.1:{free_port()}",
        }
        log = tmp_path / f"{namespace}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [str(REPO / "hack" / "run.sh"), ".venv"],
                cwd=REPO,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        runs.append(Run(proc, log, namespace))
        return runs[-1]

    yield start
    for run in runs:
        run.stop()
        node.kubectl("delete", "namespace", run.namespace, "--wait=false", check=False)
    for run in runs:
        try:
            until(
                lambda ns=run.namespace: node.kubectl("get", "namespace", ns, check=False).returncode != 0,  # type: ignore[misc]
                timeout=180,
                what=f"namespace {run.namespace} deleted",
            )
        except AssertionError as exc:  # the next module still runs, with fewer CPUs free until it goes
            print(exc)


def test_not_available_in_time_exits_non_zero_and_says_why(make_run: Callable[[int], Run]) -> None:
    run = make_run(1)
    until(lambda: run.proc.poll() is not None, timeout=180, what="hack/run.sh to give up")
    out = run.output()
    print(out[-1500:])
    assert run.proc.returncode == 1, out[-3000:]
    assert f"failed: SlurmCluster {NAME} is not Available after 1s" in out, out[-3000:]


def test_make_run_ends_in_a_slurm_that_answers_and_keeps_the_operator_running(
    make_run: Callable[[int], Run],
) -> None:
    begun = time.monotonic()
    run = make_run(600)
    until(
        lambda: KEEPS_RUNNING in run.output() or run.proc.poll() is not None,
        timeout=720,
        interval=2,
        what="hack/run.sh to show the sample's Slurm",
    )
    out = run.output()
    print(f"make run: Slurm answered after {time.monotonic() - begun:.0f} s\n{out[-1500:]}")
    assert run.proc.poll() is None, f"hack/run.sh exited {run.proc.returncode}:\n{out[-3000:]}"
    sinfo = [line.split() for line in out.split("-- sinfo\n", 1)[-1].split("\nReach it:", 1)[0].splitlines()]
    sinfo = [fields for fields in sinfo if fields]
    assert sinfo and sinfo[0][:2] == ["PARTITION", "AVAIL"], out[-3000:]
    assert any(fields[0] == "main*" and "idle" in fields for fields in sinfo[1:]), sinfo
