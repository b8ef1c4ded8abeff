"""The benchmark's verdict on nccl-tests output and its settings, without Slurm (that part runs in test/e2e/slurm)."""

from __future__ import annotations

import json

import pytest

from test.loose_modules import load_module
from test.unit.images.conftest import SCRIPTS

nb = load_module(SCRIPTS / "nccl_benchmark.py")

# The tail of a real 16-GPU all_reduce_perf run (nccl-tests' own format, trailing blank included).
REAL_TAIL = """\
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
  4294967296    1073741824     float     sum      -1    24361  176.31  330.58      0    24365  176.27  330.51      0
  8589934592    2147483648     float     sum      -1    47535  180.71  338.82      0    47743  179.92  337.35      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 70.742 \n"""


def settings(**env: str) -> object:
    return nb.Settings.from_env({"NCCL_MIN_BUS_BANDWIDTH_GBPS": "100", **env})


def test_avg_bus_bandwidth_is_read_from_the_summary() -> None:
    assert nb.parse_bus_bandwidth(REAL_TAIL) == pytest.approx(70.742)


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ("", 'no "Avg bus bandwidth"'),
        ("Segmentation fault\n", 'no "Avg bus bandwidth"'),
        ("# Avg bus bandwidth    : nan\n", "unreadable"),
        ("# Avg bus bandwidth    : -nan\n", "unreadable"),
        ("# Avg bus bandwidth    : fast\n", "unreadable"),
        (REAL_TAIL.replace("0 OK", "12 FAILED"), "12 out-of-bounds values"),
    ],
)
def test_outputs_without_a_valid_result_are_rejected(output: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        nb.parse_bus_bandwidth(output)


def test_verdicts() -> None:
    s = settings()
    assert nb.judge(s, "n1", returncode=0, output=REAL_TAIL).detail == (
        "avg bus bandwidth 70.742 GB/s below required 100 GB/s"
    )
    assert nb.judge(settings(NCCL_MIN_BUS_BANDWIDTH_GBPS="70"), "n1", returncode=0, output=REAL_TAIL).passed
    crashed = nb.judge(s, "n1", returncode=139, output="srun: error: n1: task 0: Segmentation fault\n")
    assert not crashed.passed
    assert crashed.detail == "benchmark crashed (exit 139): srun: error: n1: task 0: Segmentation fault"
    busy = nb.judge(s, "n1", returncode=1, output="srun: error: Unable to allocate resources: Requested nodes are busy")
    assert busy.passed and busy.skipped


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"NCCL_MIN_BYTES": "lots"}, "NCCL_MIN_BYTES='lots' is not a size"),
        ({"NCCL_MIN_BYTES": "16G", "NCCL_MAX_BYTES": "8G"}, "is above NCCL_MAX_BYTES"),
        ({"NCCL_STEP_FACTOR": "1"}, "must be at least 2"),
        ({"NCCL_DRAIN_ON_FAILURE": "sometimes"}, "must be true or false"),
        ({"NCCL_TIMEOUT_SECONDS": "0"}, "must be at least 1"),
        ({"GPUS_PER_NODE": "eight"}, "'eight' is not a int"),
        ({"NCCL_MIN_BUS_BANDWIDTH_GBPS": "inf"}, "must be at least 0"),
    ],
)
def test_bad_settings_are_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(nb.SettingsError, match=message):
        settings(**env)


def test_defaults_and_sizes() -> None:
    s = nb.Settings.from_env({})
    assert (s.min_bytes, s.max_bytes, s.step_factor, s.gpus_per_node) == ("512M", "8G", 2, 8)
    assert s.min_bus_bandwidth_gbps == 0
    assert s.drain_on_failure is False
    assert nb.size_bytes("8G") == 8 * 1024**3
    assert nb.size_bytes("512") == 512
    argv = nb.srun_argv(s, "gpu-0", request_gpus=True)
    assert "--gpus-per-node=8" in argv
    assert argv[argv.index("all_reduce_perf") :] == ["all_reduce_perf", "-b", "512M", "-e", "8G", "-f", "2", "-g", "8"]
    assert "--time=30" in argv


def test_slurmctls_benchmark_directory_comes_last_on_the_steps_path() -> None:
    s = nb.Settings.from_env({"NCCL_BENCHMARK_PATH": "/usr/lib/slurmctl/all-reduce-perf/v1/bin"})
    env = nb.step_env(s, {"PATH": "/usr/bin:/bin", "SLURM_CONF": "/etc/slurm/slurm.conf"})
    assert env == {
        "PATH": "/usr/bin:/bin:/usr/lib/slurmctl/all-reduce-perf/v1/bin",
        "SLURM_CONF": "/etc/slurm/slurm.conf",
    }
    assert nb.step_env(nb.Settings.from_env({}), {"PATH": "/usr/bin"}) == {"PATH": "/usr/bin"}
    with pytest.raises(nb.SettingsError, match="must be one absolute directory"):
        nb.Settings.from_env({"NCCL_BENCHMARK_PATH": "/a:/b"})


def outcome(node: str, detail: str, *, passed: bool = False, not_run: bool = False, skipped: bool = False) -> object:
    return nb.Outcome(node, passed=passed, detail=detail, not_run=not_run, skipped=skipped)


def test_the_report_groups_nodes_by_finding() -> None:
    no_gpu = "could not run: no GPU visible to CUDA in the benchmark step (no CUDA-capable device)"
    run = nb.Run(
        1,
        (
            outcome("gpu-0", "avg bus bandwidth 70.7 GB/s (required 50 GB/s)", passed=True),
            outcome("gpu-1", "avg bus bandwidth 12 GB/s below required 50 GB/s"),
            outcome("gpu-2", no_gpu, not_run=True),
            outcome("gpu-3", no_gpu, not_run=True),
            outcome("gpu-4", "node became busy; not benchmarked", passed=True, skipped=True),
        ),
        drained=1,
    )

    report = json.loads(nb.report(run))

    assert report == {
        "exit": 1,
        "nodes": 5,
        "passed": 1,
        "skipped": 1,
        "drained": 1,
        "failed": [{"detail": "avg bus bandwidth 12 GB/s below required 50 GB/s", "nodes": ["gpu-1"], "count": 1}],
        "not_run": [{"detail": no_gpu, "nodes": ["gpu-2", "gpu-3"], "count": 2}],
    }


def test_a_run_that_could_not_start_says_why() -> None:
    report = json.loads(nb.report(nb.Run(2, error="cannot list nodes: sinfo did not answer within 30s")))
    assert report == {
        "exit": 2, "nodes": 0, "passed": 0, "skipped": 0, "drained": 0,
        "error": "cannot list nodes: sinfo did not answer within 30s",
    }  # fmt: skip


def test_the_report_fits_a_termination_message_however_many_nodes() -> None:
    same = tuple(
        outcome(f"gpu-{i:04d}", "could not run: Slurm refused the allocation", not_run=True) for i in range(900)
    )
    text = nb.report(nb.Run(2, same))
    report = json.loads(text)
    assert len(text) <= nb.REPORT_LIMIT
    (group,) = report["not_run"]
    assert group["count"] == 900 and group["nodes"] == [f"gpu-{i:04d}" for i in range(8)]

    different = tuple(outcome(f"gpu-{i}", f"benchmark crashed (exit 1): gpu-{i}: {'x' * 400}") for i in range(40))
    text = nb.report(nb.Run(1, different))
    report = json.loads(text)
    assert len(text) <= nb.REPORT_LIMIT
    assert report["nodes"] == 40
    assert len(report["failed"]) + report["omitted"] == 40
    assert all(len(g["detail"]) <= nb.REPORT_DETAIL_LIMIT for g in report["failed"])
