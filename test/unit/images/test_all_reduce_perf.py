"""slurmctl's all_reduce_perf (native/all_reduce_perf), built here with its Makefile against stand-ins of the CUDA
runtime and NCCL (test/unit/images/fake_cuda: "device" memory is host memory, the all-reduce a host loop), and what
the benchmark driver makes of its output. What the stand-ins cannot show (NVIDIA's headers, a real GPU) is shown by
the nccl-benchmark image build (it compiles and links against NVIDIA's wheels) and by hack/gpu-device-check.sh."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from test.unit.images.conftest import ROOT
from test.unit.images.test_nccl_benchmark_parsing import nb

FAKES = Path(__file__).resolve().parent / "fake_cuda"
ROW = re.compile(r"^\s+(\d+)\s+(\d+)\s+float\s+sum\s+-1((?:\s+\S+){8})\s*$", re.MULTILINE)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    out = tmp_path_factory.mktemp("all_reduce_perf")
    libs = out / "fake-lib"
    libs.mkdir()
    for source, soname in (("fake_cudart.cc", "libcudart.so.12"), ("fake_nccl.cc", "libnccl.so.2")):
        subprocess.run(
            ["g++", "-shared", "-fPIC", "-O1", f"-I{FAKES / 'include'}", f"-Wl,-soname,{soname}", "-o",
             str(libs / soname), str(FAKES / source)],
            check=True,
        )  # fmt: skip
    subprocess.run(
        ["make", "-s", "-C", str(ROOT / "native" / "all_reduce_perf"), "bundle", f"INCLUDE_DIRS={FAKES / 'include'}",
         f"NCCL_LIB_DIR={libs}", f"CUDART_LIB_DIR={libs}", f"OUT={out}"],
        check=True,
    )  # fmt: skip
    yield out


def run(built: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The program as the benchmark step runs it: stdout and stderr together (srun merges them for the driver)."""
    return subprocess.run(
        [str(built / "bin" / "all_reduce_perf"), *args],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=60,
        check=False,
    )


def rows(output: str) -> list[tuple[int, int, list[float]]]:
    """(bytes, count, [time, algbw, busbw, wrong] out of place then in place) per table row."""
    return [(int(m.group(1)), int(m.group(2)), [float(v) for v in m.group(3).split()]) for m in ROW.finditer(output)]


def test_the_bundle_finds_its_libraries_through_its_rpath_and_names_its_version(built: Path) -> None:
    assert sorted(p.name for p in (built / "lib").iterdir()) == ["libcudart.so.12", "libnccl.so.2"]
    assert re.fullmatch(r"[0-9a-f]{16}\n", (built / "VERSION").read_text())
    dynamic = subprocess.run(
        ["readelf", "-d", str(built / "bin" / "all_reduce_perf")], capture_output=True, text=True, check=False
    )
    assert "Library rpath: [$ORIGIN/../lib]" in dynamic.stdout  # RPATH, not RUNPATH: before LD_LIBRARY_PATH
    assert "libstdc++" not in dynamic.stdout


def test_sizes_step_by_the_factor_and_busbw_is_algbw_times_2_n_minus_1_over_n(built: Path) -> None:
    done = run(built, "-b", "1M", "-e", "5M", "-f", "2", "-w", "1", "-n", "2", FAKE_GPUS="4")

    assert done.returncode == 0, done.stdout
    assert "# nThread 1 nGpus 4 minBytes 1048576 maxBytes 5242880 step: 2(factor)" in done.stdout
    table = rows(done.stdout)
    assert [(size, count) for size, count, _ in table] == [(1 << 20, 1 << 18), (2 << 20, 2 << 18), (4 << 20, 4 << 18)]
    busbws = []
    for size, _, (t_out, alg_out, bus_out, wrong_out, t_in, alg_in, bus_in, wrong_in) in table:
        for seconds_us, algbw, busbw in ((t_out, alg_out, bus_out), (t_in, alg_in, bus_in)):
            assert algbw == pytest.approx(size / (seconds_us * 1e-6) / 1e9, rel=0.05, abs=0.01)
            assert busbw == pytest.approx(algbw * 2 * 3 / 4, abs=0.011)
            busbws.append(busbw)
        assert (wrong_out, wrong_in) == (0, 0)
    assert "# Out of bounds values : 0 OK" in done.stdout
    avg = nb.parse_bus_bandwidth(done.stdout)
    assert avg == pytest.approx(sum(busbws) / len(busbws), abs=0.02)


def test_the_driver_applies_its_threshold_to_the_programs_average(built: Path) -> None:
    done = run(built, "-b", "1M", "-e", "2M", "-w", "0", "-n", "1")
    avg = nb.parse_bus_bandwidth(done.stdout)
    assert avg > 0

    below = nb.Settings.from_env({"NCCL_MIN_BUS_BANDWIDTH_GBPS": str(avg * 10 + 1)})
    verdict = nb.judge(below, "gpu-0", returncode=done.returncode, output=done.stdout)
    assert not verdict.passed and not verdict.not_run
    assert verdict.detail.startswith(f"avg bus bandwidth {avg:g} GB/s below required ")

    enough = nb.Settings.from_env({"NCCL_MIN_BUS_BANDWIDTH_GBPS": "0.001"})
    assert nb.judge(enough, "gpu-0", returncode=done.returncode, output=done.stdout).passed


def test_wrong_results_are_counted_and_fail_the_node(built: Path) -> None:
    done = run(built, "-b", "1M", "-e", "2M", "-w", "0", "-n", "1", FAKE_CORRUPT="1")

    assert done.returncode == 1
    # One wrong element per rank's result, for each size and placement: 2 ranks x 2 sizes x 2 placements.
    assert [r[2][3] for r in rows(done.stdout)] == [2, 2] and [r[2][7] for r in rows(done.stdout)] == [2, 2]
    assert "# Out of bounds values : 8 FAILED" in done.stdout
    verdict = nb.judge(nb.Settings.from_env({}), "gpu-0", returncode=done.returncode, output=done.stdout)
    assert (verdict.passed, verdict.not_run) == (False, False)
    assert verdict.detail == "benchmark gave no result: 8 out-of-bounds values (results are wrong)"


def test_without_checking_there_is_no_wrong_column(built: Path) -> None:
    done = run(built, "-b", "1M", "-e", "1M", "-c", "0", FAKE_CORRUPT="1")

    assert done.returncode == 0
    assert " N/A" in done.stdout and "validation: 0" in done.stdout


def test_one_gpu_reports_no_bus_bandwidth_and_the_threshold_does_not_apply(built: Path) -> None:
    done = run(built, "-b", "1M", "-e", "1M", "-w", "0", "-n", "1", FAKE_GPUS="1")

    assert done.returncode == 0
    assert [r[2][2] for r in rows(done.stdout)] == [0.0] and [r[2][6] for r in rows(done.stdout)] == [0.0]
    assert "# One GPU: bus bandwidth is 0 by nccl-tests' definition" in done.stdout
    assert nb.parse_bus_bandwidth(done.stdout) == 0
    assert nb.parse_ranks(done.stdout) == 1
    verdict = nb.judge(nb.Settings.from_env({"NCCL_MIN_BUS_BANDWIDTH_GBPS": "100"}), "gpu-0", returncode=0,
                       output=done.stdout)  # fmt: skip
    assert verdict.passed and verdict.detail.startswith("one GPU: all-reduce results correct")


@pytest.mark.parametrize(
    ("env", "cause"),
    [
        ({"FAKE_GPUS": "0"}, "(no CUDA-capable device)"),
        ({"FAKE_CUDA": "nodriver"}, "(CUDA driver version is insufficient)"),
    ],
)
def test_no_gpu_or_no_driver_is_could_not_run(built: Path, env: dict[str, str], cause: str) -> None:
    done = run(built, **env)

    assert done.returncode == 2
    assert "could not run, no GPU to measure" in done.stdout
    verdict = nb.judge(nb.Settings.from_env({}), "gpu-0", returncode=done.returncode, output=done.stdout)
    assert verdict.not_run and not verdict.passed
    assert verdict.detail == f"could not run: no GPU visible to CUDA in the benchmark step {cause}"


def test_fewer_gpus_than_asked_for_is_the_nodes_fault(built: Path) -> None:
    done = run(built, "-g", "8", FAKE_GPUS="7")

    assert done.returncode == 1
    verdict = nb.judge(nb.Settings.from_env({}), "gpu-0", returncode=done.returncode, output=done.stdout)
    assert (verdict.passed, verdict.not_run) == (False, False)
    assert "8 GPUs requested (-g 8) but only 7 visible to CUDA" in verdict.detail


def test_missing_libraries_are_could_not_run(built: Path, tmp_path: Path) -> None:
    """A jail copy without its lib/ (the loader fails before main)."""
    shutil.copytree(built / "bin", tmp_path / "bin")

    done = subprocess.run(
        [str(tmp_path / "bin" / "all_reduce_perf")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={"PATH": "/usr/bin:/bin"}, check=False,
    )  # fmt: skip

    assert done.returncode == 127
    verdict = nb.judge(nb.Settings.from_env({}), "gpu-0", returncode=done.returncode, output=done.stdout)
    assert verdict.not_run
    assert verdict.detail.startswith("could not run: the benchmark binary cannot load its libraries in the jail")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("-b", "lots"), "bad value 'lots' for -b"),
        (("-b", "2G", "-e", "1G"), "-e (maximum size) is below -b"),
        (("-f", "1"), "bad value '1' for -f"),
        (("-t", "2"), "bad value '2' for -t"),
        (("extra",), "unexpected argument"),
    ],
)
def test_bad_arguments_exit_2_with_the_usage(built: Path, args: tuple[str, ...], message: str) -> None:
    done = run(built, *args)

    assert done.returncode == 2
    assert message in done.stdout and "usage: all_reduce_perf" in done.stdout


def test_sizes_read_like_nccl_tests(built: Path) -> None:
    done = run(built, "-b", "64KB", "-e", "1m", "-f", "4", "-w", "0", "-n", "1")

    assert done.returncode == 0, done.stdout
    assert [size for size, _, _ in rows(done.stdout)] == [64 << 10, 256 << 10, 1 << 20]
