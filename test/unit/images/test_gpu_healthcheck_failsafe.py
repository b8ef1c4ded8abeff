"""gpu-healthcheck drains a node only for what it saw on its GPUs, never because it could not look at them."""

from __future__ import annotations

from pathlib import Path

import pytest

from test.unit.images.conftest import run_script, write_exe

NODE_INFO = "NodeName=gpu-0 Arch=x86_64 CoresPerSocket=1\n   Gres={gres}\n   State=IDLE ThreadsPerCore=1\n"
HEALTHY_GPU = "{i}, GPU-{i}, 0, No, No\n"


def node(tmp_path: Path, *, smi: str | None, gres: str = "gpu:8") -> tuple[dict[str, str], Path]:
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    log.touch()
    write_exe(
        bin_dir / "scontrol",
        f'#!/bin/sh\necho "scontrol $*" >> {log}\ncase "$1" in show) printf "{NODE_INFO.format(gres=gres)}" ;; esac\n',
    )
    if smi is not None:
        write_exe(bin_dir / "nvidia-smi", f"#!/bin/sh\n{smi}\n")
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURMD_NODENAME": "gpu-0"}, log


def updates(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if line.startswith("scontrol update")]


@pytest.mark.parametrize(
    ("smi", "said"),
    [
        (None, "nvidia-smi not found"),
        ("echo 'No devices were found'; exit 6", "no GPU visible to this container"),
        ("exit 0", "no GPU visible to this container"),
    ],
)
def test_a_check_that_cannot_see_the_gpus_exits_2_and_drains_nothing(
    tmp_path: Path, smi: str | None, said: str
) -> None:
    env, log = node(tmp_path, smi=smi)

    done = run_script("gpu-healthcheck", env=env)

    assert done.returncode == 2, done.stderr
    assert updates(log) == []
    assert said in done.stderr and "nothing drained" in done.stderr


def test_missing_gpus_and_ecc_errors_still_drain(tmp_path: Path) -> None:
    seven = "".join(HEALTHY_GPU.format(i=i) for i in range(7))
    env, log = node(tmp_path, smi=f"printf '{seven}'")

    done = run_script("gpu-healthcheck", env=env)

    assert done.returncode == 1, done.stderr
    assert updates(log) == ["scontrol update NodeName=gpu-0 State=DRAIN Reason=slurmctl-gpu: 7 of 8 GPUs visible"]


@pytest.mark.parametrize("gres", ["gpu:8", "gpu:h100:8(S:0-1)", "shard:4,gpu:h100:8"])
def test_healthy_gpus_pass_and_the_count_comes_from_the_nodes_gres(tmp_path: Path, gres: str) -> None:
    eight = "".join(HEALTHY_GPU.format(i=i) for i in range(8))
    env, log = node(tmp_path, smi=f"printf '{eight}'", gres=gres)

    done = run_script("gpu-healthcheck", env=env)

    assert done.returncode == 0, done.stderr
    assert "healthy (8 GPUs checked)" in done.stderr
    assert updates(log) == []
