"""A benchmark that cannot run never drains a node: it exits 2 ("could not run") and calls no `scontrol update`.

The Slurm client commands are stand-ins on PATH (the real ones run in test/e2e/slurm); each records how it was called,
so a drain is visible as a recorded `scontrol update ... State=DRAIN`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test.unit.images.conftest import SCRIPTS, write_exe

NODES = "gpu-0|idle|gpu:8\ngpu-1|idle|gpu:8\n"
# What srun prints for each way a step can end, as Slurm 22.05 and nccl-tests print it.
SRUN_OUTPUTS = {
    "missing-binary": (
        "slurmstepd: error: execve(): all_reduce_perf: No such file or directory\n"
        "srun: error: $node: task 0: Exited with exit code 2\n",
        2,
    ),
    "no-gpu": (
        "# nThread 1 nGpus 8 minBytes 536870912 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20\n"
        "$node: Test CUDA failure common.cu:891 'no CUDA-capable device is detected'\n"
        " .. $node pid 42: Test failure common.cu:844\n"
        "srun: error: $node: task 0: Exited with exit code 1\n",
        1,
    ),
    "slurmctl-no-gpu": (
        "# slurmctl all_reduce_perf (nccl-tests compatible): NCCL 2.32.3 (built with 2.32.3), CUDA runtime 12.9, driver"
        " 0.0\n"
        "$node: Test CUDA failure all_reduce_perf.cc:263 'no CUDA-capable device is detected' (cudaErrorNoDevice):"
        " could not run, no GPU to measure\n"
        "srun: error: $node: task 0: Exited with exit code 2\n",
        2,
    ),
    "no-libraries": (
        "all_reduce_perf: error while loading shared libraries: libnccl.so.2: cannot open shared object file: No such"
        " file or directory\n"
        "srun: error: $node: task 0: Exited with exit code 127\n",
        127,
    ),
    "slurm-away": (
        "srun: error: Unable to allocate resources: Unable to contact slurm controller (connect failure)\n",
        1,
    ),
    "crash": ("srun: error: $node: task 0: Segmentation fault\n", 139),
}


def stub_slurm(bin_dir: Path, log: Path, *, srun: str | None, sinfo_fails: bool = False) -> None:
    record = f'echo "$(basename "$0") $*" >> {log}\n'
    if sinfo_fails:
        write_exe(
            bin_dir / "sinfo",
            f"#!/bin/sh\n{record}echo 'slurm_load_node: Unable to contact slurm controller' >&2\nexit 1\n",
        )
    else:
        write_exe(
            bin_dir / "sinfo",
            f'#!/bin/sh\n{record}case "$*" in *--nodes=*) echo "idle|none" ;; *) printf "{NODES}" ;; esac\n',
        )
    write_exe(bin_dir / "squeue", f"#!/bin/sh\n{record}")
    write_exe(bin_dir / "scontrol", f"#!/bin/sh\n{record}")
    write_exe(bin_dir / "scancel", f"#!/bin/sh\n{record}")
    if srun is not None:
        output, code = SRUN_OUTPUTS[srun]
        write_exe(
            bin_dir / "srun",
            f'#!/bin/sh\n{record}node=$(echo "$*" | sed -n "s/.*--nodelist=\\([^ ]*\\).*/\\1/p")\n'
            f"cat <<OUT\n{output}OUT\nexit {code}\n",
        )


def run_benchmark(
    tmp_path: Path, *, srun: str | None, sinfo_fails: bool = False, **extra: str
) -> tuple[int, list[str], str]:
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    log.touch()
    stub_slurm(bin_dir, log, srun=srun, sinfo_fails=sinfo_fails)
    # Only the stubs and the few tools they use: a real srun on this machine must not stand in for a missing one.
    tools = tmp_path / "tools"
    tools.mkdir()
    for tool in ("basename", "cat", "sed"):
        (tools / tool).symlink_to(shutil.which(tool) or f"/usr/bin/{tool}")
    env = {"PATH": f"{bin_dir}:{tools}", "NCCL_DRAIN_ON_FAILURE": "true", "NCCL_TIMEOUT_SECONDS": "60", **extra}
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / "nccl_benchmark.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, log.read_text().splitlines(), done.stderr


def drains(calls: list[str]) -> list[str]:
    return [call for call in calls if call.startswith("scontrol update")]


@pytest.mark.parametrize(
    ("srun", "reason"),
    [
        ("missing-binary", "the benchmark binary is missing from the jail"),
        ("no-gpu", "no GPU visible to CUDA"),
        ("slurmctl-no-gpu", "no GPU visible to CUDA"),
        ("no-libraries", "cannot load its libraries in the jail"),
        ("slurm-away", "Slurm did not answer"),
        (None, "cannot start srun"),
    ],
)
def test_a_benchmark_that_cannot_run_exits_2_and_drains_nothing(tmp_path: Path, srun: str | None, reason: str) -> None:
    code, calls, stderr = run_benchmark(tmp_path, srun=srun)

    assert code == 2, stderr
    assert drains(calls) == []
    assert stderr.count("not benchmarked, not drained") == 2  # both idle nodes, each said once
    assert reason in stderr


def test_slurm_unreachable_before_the_run_exits_2_and_drains_nothing(tmp_path: Path) -> None:
    code, calls, stderr = run_benchmark(tmp_path, srun="crash", sinfo_fails=True)

    assert code == 2
    assert drains(calls) == [] and not any(call.startswith("srun") for call in calls)
    assert "cannot list nodes" in stderr


def test_a_node_that_ran_and_crashed_is_still_drained(tmp_path: Path) -> None:
    """The control case: the stand-ins do let a real finding through to a drain."""
    code, calls, stderr = run_benchmark(tmp_path, srun="crash")

    assert code == 1, stderr
    assert sorted(call.split()[2] for call in drains(calls)) == ["NodeName=gpu-0", "NodeName=gpu-1"]
    assert all("State=DRAIN" in call for call in drains(calls))


def test_the_report_names_each_node_and_what_kept_it_from_being_benchmarked(tmp_path: Path) -> None:
    report = tmp_path / "report.json"

    code, calls, stderr = run_benchmark(tmp_path, srun="slurmctl-no-gpu", NCCL_BENCHMARK_REPORT=str(report))

    assert code == 2, stderr
    assert drains(calls) == []
    assert json.loads(report.read_text()) == {
        "exit": 2,
        "nodes": 2,
        "passed": 0,
        "skipped": 0,
        "drained": 0,
        "not_run": [
            {
                "detail": "could not run: no GPU visible to CUDA in the benchmark step (no CUDA-capable device)",
                "nodes": ["gpu-0", "gpu-1"],
                "count": 2,
            }
        ],
    }


def test_the_report_of_a_run_that_could_not_list_nodes_and_of_drained_nodes(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    code, _, _ = run_benchmark(tmp_path, srun="crash", sinfo_fails=True, NCCL_BENCHMARK_REPORT=str(report))
    assert code == 2
    said = json.loads(report.read_text())
    assert said["exit"] == 2 and said["error"].startswith("cannot list nodes: sinfo --noheader --Node failed")

    (tmp_path / "again").mkdir()
    code, _, _ = run_benchmark(tmp_path / "again", srun="crash", NCCL_BENCHMARK_REPORT=str(report))
    assert code == 1
    said = json.loads(report.read_text())
    assert (said["exit"], said["drained"], [g["nodes"] for g in said["failed"]]) == (1, 2, [["gpu-0"], ["gpu-1"]])
