"""gpu-healthcheck against the real local slurmctld/slurmd (Slurm 24.11), with stub nvidia-smi programs (no GPUs here).

The script runs where slurmd runs it: inside the instance's Slurm root filesystem, with its scontrol."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from test.e2e.slurm.local_slurm import LocalSlurm

pytestmark = pytest.mark.slurm

SCRIPT = Path(__file__).resolve().parents[3] / "images" / "scripts" / "gpu-healthcheck"

# What `nvidia-smi --query-gpu=index,uuid,ecc.errors.uncorrected.volatile.total,retired_pages.pending,
# remapped_rows.failure --format=csv,noheader,nounits` prints; H100s report retired pages as [N/A].
GPU0 = "0, GPU-5e9b6f2a-8c1d-4d0e-9a51-0c6d3e1f7a10, 0, [N/A], No\n"
GPU1 = "1, GPU-a41f0c77-1b2e-43c9-8f6d-2b7e9c0d5e21, 0, [N/A], No\n"
HEALTHY = GPU0 + GPU1
ONE_GPU = GPU0
ECC = GPU0 + GPU1.replace(", 0, ", ", 3, ")


def stub_nvidia_smi(bin_dir: Path, output: str | None = None, *, hang: bool = False) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    if hang:
        # A wedged driver: the process and its child never answer (the child's command line names bin_dir).
        body = f'sh -c "sleep 300; echo {bin_dir}"\necho never\n'
    else:
        (bin_dir / "smi-output").write_text(output or "")
        body = f'case "$*" in *--query-gpu=*) cat {bin_dir / "smi-output"} ;; *) exit 9 ;; esac\n'
    smi.write_text("#!/bin/sh\n" + body)
    smi.chmod(0o755)


def healthcheck(slurm: LocalSlurm, bin_dir: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {
        **slurm.env,
        "PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin",
        "SLURMD_NODENAME": slurm.node,
        "GPU_HEALTHCHECK_EXPECTED_GPUS": "2",
        **extra,
    }
    return subprocess.run(slurm.command(str(SCRIPT)), env=env, capture_output=True, text=True, timeout=30, check=False)


def drain_reasons(slurm: LocalSlurm) -> list[str]:
    """`sinfo -R` for our node: the reasons of drained/down nodes, as an administrator reads them."""
    out = slurm.run("sinfo", "-R", "--noheader", "--nodes", slurm.node, "--format", "%E").stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


@pytest.fixture
def slurm(local_slurm: LocalSlurm) -> Iterator[LocalSlurm]:
    """The shared instance, with the node resumed afterwards so other tests find it idle."""
    local_slurm.wait_until(lambda: local_slurm.node_state() == "idle", timeout=30, what="node idle before the test")
    yield local_slurm
    if local_slurm.node_state() != "idle":
        local_slurm.run("scontrol", "update", f"NodeName={local_slurm.node}", "State=RESUME", check=False)
    local_slurm.wait_until(lambda: local_slurm.node_state() == "idle", timeout=60, what="node resumed after the test")


def test_healthy_node_stays_up(slurm: LocalSlurm, tmp_path: Path) -> None:
    stub_nvidia_smi(tmp_path, HEALTHY)

    done = healthcheck(slurm, tmp_path)

    assert done.returncode == 0, done.stderr
    assert slurm.node_state() == "idle"
    assert drain_reasons(slurm) == []


def test_missing_gpu_drains_and_recovery_resumes(slurm: LocalSlurm, tmp_path: Path) -> None:
    stub_nvidia_smi(tmp_path, ONE_GPU)

    bad = healthcheck(slurm, tmp_path)

    assert bad.returncode == 1, bad.stderr
    assert drain_reasons(slurm) == ["slurmctl-gpu: 1 of 2 GPUs visible"]
    assert slurm.node_state() == "drained"

    stub_nvidia_smi(tmp_path, HEALTHY)
    good = healthcheck(slurm, tmp_path)

    assert good.returncode == 0, good.stderr
    assert "resumed" in good.stderr
    assert drain_reasons(slurm) == []
    # Right after a resume slurmctld may list the node as not responding ("idle*") until its next ping.
    slurm.wait_until(lambda: slurm.node_state() == "idle", timeout=30, what="node idle after resume")


def test_uncorrectable_ecc_errors_drain(slurm: LocalSlurm, tmp_path: Path) -> None:
    stub_nvidia_smi(tmp_path, ECC)

    done = healthcheck(slurm, tmp_path)

    assert done.returncode == 1
    assert drain_reasons(slurm) == ["slurmctl-gpu: GPU 1 has 3 uncorrectable ECC errors"]


def test_failed_row_remapping_and_garbage_output_drain(slurm: LocalSlurm, tmp_path: Path) -> None:
    stub_nvidia_smi(tmp_path, HEALTHY.replace("[N/A], No\n", "[N/A], Yes\n", 1))
    assert healthcheck(slurm, tmp_path).returncode == 1
    assert drain_reasons(slurm) == ["slurmctl-gpu: GPU 0 has failed row remapping"]

    stub_nvidia_smi(tmp_path, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")
    assert healthcheck(slurm, tmp_path).returncode == 1
    # Our own drain is updated with the latest finding.
    assert drain_reasons(slurm) == [
        "slurmctl-gpu: unexpected nvidia-smi output: NVIDIA-SMI has failed because it"
        " couldn't communicate with the NVIDIA driver."
    ]


def test_hanging_nvidia_smi_is_cut_off_in_time(slurm: LocalSlurm, tmp_path: Path) -> None:
    stub_nvidia_smi(tmp_path, hang=True)

    started = time.monotonic()
    done = healthcheck(slurm, tmp_path)
    elapsed = time.monotonic() - started

    assert elapsed < 10, f"health check took {elapsed:.1f}s"
    assert done.returncode == 1
    assert drain_reasons(slurm) == ["slurmctl-gpu: nvidia-smi did not answer within 4s"]
    # The wedged nvidia-smi and its child were killed, not left behind.
    leftover = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True, check=False)
    assert leftover.returncode == 1, leftover.stdout


def test_missing_nvidia_smi_is_a_check_that_could_not_run_and_drains_nothing(slurm: LocalSlurm, tmp_path: Path) -> None:
    """A check that cannot run never punishes the node: no nvidia-smi is "could not run" (exit 2), not "unhealthy"."""
    tmp_path.mkdir(exist_ok=True)
    done = healthcheck(slurm, tmp_path)

    assert done.returncode == 2, done.stderr
    assert "could not run" in done.stderr
    assert drain_reasons(slurm) == []
    assert slurm.node_state() == "idle"


def test_admin_drain_is_never_undone(slurm: LocalSlurm, tmp_path: Path) -> None:
    slurm.run("scontrol", "update", f"NodeName={slurm.node}", "State=DRAIN", "Reason=disk replacement (ticket 42)")

    stub_nvidia_smi(tmp_path, HEALTHY)
    healthy = healthcheck(slurm, tmp_path)
    stub_nvidia_smi(tmp_path, ONE_GPU)
    unhealthy = healthcheck(slurm, tmp_path)

    assert healthy.returncode == 0
    assert unhealthy.returncode == 1
    assert "already drained by someone else" in unhealthy.stderr
    assert drain_reasons(slurm) == ["disk replacement (ticket 42)"]
    assert slurm.node_state() == "drained"


def test_cpu_node_without_gpus_has_nothing_to_check(slurm: LocalSlurm, tmp_path: Path) -> None:
    # The local node declares no GPU in its Gres: without an override the check passes without calling nvidia-smi.
    stub_nvidia_smi(tmp_path, hang=True)

    done = healthcheck(slurm, tmp_path, GPU_HEALTHCHECK_EXPECTED_GPUS="")

    assert done.returncode == 0, done.stderr
    assert "0 GPUs checked" in done.stderr
    assert slurm.node_state() == "idle"


def test_unknown_node_is_an_error_not_a_drain(slurm: LocalSlurm, tmp_path: Path) -> None:
    stub_nvidia_smi(tmp_path, ONE_GPU)

    done = healthcheck(slurm, tmp_path, SLURMD_NODENAME="no-such-node")

    assert done.returncode == 2
    assert "cannot read node no-such-node" in done.stderr
    assert slurm.node_state() == "idle"
