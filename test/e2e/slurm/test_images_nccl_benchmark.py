"""nccl-benchmark through real srun on the local Slurm 24.11; only all_reduce_perf (it needs GPUs) is a jail stub.

The script runs inside the instance's Slurm root filesystem (its python3, srun and scontrol), as in the image."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from test.e2e.slurm.local_slurm import LocalSlurm

pytestmark = pytest.mark.slurm

SCRIPT = Path(__file__).resolve().parents[3] / "images" / "scripts" / "nccl_benchmark.py"

# A busybox-sh all_reduce_perf printing what nccl-tests prints (header, per-size table, summary). The mode and the
# bandwidth come from the environment, which srun propagates to the task.
STUB = r"""#!/bin/sh
echo "$@" > /data/all_reduce_perf.args
case "${STUB_NCCL_MODE:-good}" in
    hang) sleep 120; exit 0 ;;
    garbage) echo "cuda runtime says hello"; echo "bandwidth: excellent"; exit 0 ;;
    crash)
        echo "# nThread 1 nGpus 8 minBytes 1048576 maxBytes 67108864 step: 2(factor) warmup iters: 5 iters: 20"
        echo "vm: Test NCCL failure common.cu:958 'unhandled cuda error (run with NCCL_DEBUG=INFO for details)'"
        kill -SEGV $$ ;;
esac
cat <<END
# nThread 1 nGpus 8 minBytes 1048576 maxBytes 67108864 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 \
validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid   6899 on         vm device  0 [0000:04:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   6899 on         vm device  1 [0000:05:00] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        262144     float     sum      -1    203.2    5.16    9.68      0    207.2    5.06    9.49      0
     2097152        524288     float     sum      -1    254.0    8.26   15.48      0    252.9    8.29   15.55      0
    67108864      16777216     float     sum      -1   1261.6   53.20   99.74      0   1270.2   52.83   99.06      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : ${STUB_BUSBW:-120.5}
#
END
"""


@pytest.fixture
def slurm(local_slurm: LocalSlurm) -> Iterator[LocalSlurm]:
    """The shared instance with the stub in its jail; the node is resumed afterwards so other tests find it idle."""
    stub = local_slurm.jail / "bin" / "all_reduce_perf"
    stub.write_text(STUB)
    stub.chmod(0o755)
    (local_slurm.jail / "data" / "all_reduce_perf.args").unlink(missing_ok=True)
    local_slurm.wait_until(lambda: local_slurm.node_state() == "idle", timeout=30, what="node idle before the test")
    yield local_slurm
    local_slurm.run("scancel", "--name=slurmctl-nccl-benchmark", check=False)
    if local_slurm.node_state() != "idle":
        local_slurm.run("scontrol", "update", f"NodeName={local_slurm.node}", "State=RESUME", check=False)
    local_slurm.wait_until(lambda: local_slurm.node_state() == "idle", timeout=60, what="node resumed after the test")
    stub.unlink()


def benchmark(slurm: LocalSlurm, **env: str) -> subprocess.CompletedProcess[str]:
    settings = {
        "NCCL_MIN_BYTES": "1M",
        "NCCL_MAX_BYTES": "64M",
        "NCCL_STEP_FACTOR": "2",
        "NCCL_MIN_BUS_BANDWIDTH_GBPS": "100",
        "NCCL_DRAIN_ON_FAILURE": "true",
        "NCCL_TIMEOUT_SECONDS": "60",
        "GPUS_PER_NODE": "8",
    }
    full_env = {**slurm.env, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **settings, **env}
    return subprocess.run(
        slurm.command(str(SCRIPT)), env=full_env, cwd="/", capture_output=True, text=True, timeout=90, check=False
    )


def drain_reasons(slurm: LocalSlurm) -> list[str]:
    out = slurm.run("sinfo", "-R", "--noheader", "--nodes", slurm.node, "--format", "%E").stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def stub_args(slurm: LocalSlurm) -> list[str]:
    return (slurm.jail / "data" / "all_reduce_perf.args").read_text().split()


def test_good_bandwidth_passes_and_leaves_the_node_up(slurm: LocalSlurm) -> None:
    done = benchmark(slurm, STUB_NCCL_MODE="good", STUB_BUSBW="120.5")

    assert done.returncode == 0, done.stderr
    assert f"node={slurm.node} passed: avg bus bandwidth 120.5 GB/s (required 100 GB/s)" in done.stderr
    assert stub_args(slurm) == ["-b", "1M", "-e", "64M", "-f", "2", "-g", "8"]
    assert drain_reasons(slurm) == []
    assert "drain" not in slurm.node_state()  # idle, or still completing the benchmark job


def test_below_threshold_drains_with_measured_and_required(slurm: LocalSlurm) -> None:
    done = benchmark(slurm, STUB_NCCL_MODE="good", STUB_BUSBW="42.125")

    assert done.returncode == 1
    assert drain_reasons(slurm) == ["slurmctl-nccl: avg bus bandwidth 42.125 GB/s below required 100 GB/s"]
    assert slurm.node_state() in ("drained", "draining")


def test_below_threshold_without_draining_only_fails(slurm: LocalSlurm) -> None:
    done = benchmark(slurm, STUB_NCCL_MODE="good", STUB_BUSBW="42.125", NCCL_DRAIN_ON_FAILURE="false")

    assert done.returncode == 1
    assert "below required 100 GB/s" in done.stderr
    assert drain_reasons(slurm) == []
    assert "drain" not in slurm.node_state()  # idle, or still completing the benchmark job


def test_crash_drains_as_crashed(slurm: LocalSlurm) -> None:
    done = benchmark(slurm, STUB_NCCL_MODE="crash")

    assert done.returncode == 1
    [reason] = drain_reasons(slurm)
    assert reason.startswith("slurmctl-nccl: benchmark crashed (exit "), reason


def test_garbage_output_counts_as_failed(slurm: LocalSlurm) -> None:
    done = benchmark(slurm, STUB_NCCL_MODE="garbage")

    assert done.returncode == 1
    assert drain_reasons(slurm) == ['slurmctl-nccl: benchmark gave no result: no "Avg bus bandwidth" in the output']


def test_timeout_cancels_the_job_and_drains(slurm: LocalSlurm) -> None:
    done = benchmark(slurm, STUB_NCCL_MODE="hang", NCCL_TIMEOUT_SECONDS="3")

    assert done.returncode == 1
    assert drain_reasons(slurm) == ["slurmctl-nccl: benchmark timed out after 3s"]
    slurm.wait_until(
        lambda: not slurm.run("squeue", "--noheader", "--name=slurmctl-nccl-benchmark").stdout.strip(),
        timeout=30,
        what="the timed-out benchmark job to be gone",
    )


def test_admin_drained_node_is_not_benchmarked(slurm: LocalSlurm) -> None:
    slurm.run("scontrol", "update", f"NodeName={slurm.node}", "State=DRAIN", "Reason=cable swap")

    done = benchmark(slurm, STUB_NCCL_MODE="good", STUB_BUSBW="1")

    assert done.returncode == 0, done.stderr
    assert "no idle node to benchmark" in done.stderr
    assert not (slurm.jail / "data" / "all_reduce_perf.args").exists()
    assert drain_reasons(slurm) == ["cable swap"]


def test_bad_settings_exit_2_without_running_anything(slurm: LocalSlurm) -> None:
    done = benchmark(slurm, NCCL_MIN_BUS_BANDWIDTH_GBPS="fast", STUB_BUSBW="1")

    assert done.returncode == 2
    assert "NCCL_MIN_BUS_BANDWIDTH_GBPS='fast' is not a float" in done.stderr
    assert not (slurm.jail / "data" / "all_reduce_perf.args").exists()
    assert drain_reasons(slurm) == []
