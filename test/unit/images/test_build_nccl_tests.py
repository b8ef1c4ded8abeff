"""build-nccl-tests, run against a stand-in nccl-tests tree whose Makefile records how it was called and "links" a
script: the release cannot be downloaded here, so what is tested is the script's own logic (checks, the make call,
the install), not the compiler."""

from __future__ import annotations

import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from test.unit.images.conftest import run_script, write_exe

# The same pattern rule as nccl-tests' src/Makefile: $(BUILDDIR)/%_perf from %.cu, with NVCC from CUDA_HOME.
STUB_MAKEFILE = """\
BUILDDIR ?= ../build
NVCC = $(CUDA_HOME)/bin/nvcc
$(BUILDDIR)/%_perf: %.cu common.cu
\t@mkdir -p $(BUILDDIR)
\t@echo "target=$@ CUDA_HOME=$(CUDA_HOME) NCCL_HOME=$(NCCL_HOME) MPI=$(MPI) NVCC_GENCODE=$(NVCC_GENCODE)" > $(LOG)
\t@$(NVCC) $< && printf '#!/bin/sh\\necho "$*_perf built from $<"\\n' > $@ && chmod +x $@
"""


@pytest.fixture
def toolchain(tmp_path: Path) -> dict[str, Path]:
    source = tmp_path / "nccl-tests-2.13.11"
    (source / "src").mkdir(parents=True)
    (source / "src" / "Makefile").write_text(STUB_MAKEFILE)
    for name in ("common.cu", "all_reduce.cu", "all_gather.cu"):
        (source / "src" / name).write_text(f"// {name}\n")
    cuda = tmp_path / "cuda"
    write_exe(cuda / "bin" / "nvcc", '#!/bin/sh\ntest -f "$1"\n')
    nccl = tmp_path / "nccl"
    (nccl / "include").mkdir(parents=True)
    (nccl / "include" / "nccl.h").write_text("#define NCCL_MAJOR 2\n")
    return {"source": source, "cuda": cuda, "nccl": nccl, "dest": tmp_path / "dest", "log": tmp_path / "make.log"}


def build(paths: dict[str, Path], *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {"CUDA_HOME": str(paths["cuda"]), "NCCL_HOME": str(paths["nccl"]), "LOG": str(paths["log"]), **env}
    return run_script("build-nccl-tests", *(args or (str(paths["source"]), str(paths["dest"]))), env=full_env)


def test_builds_only_all_reduce_perf_out_of_tree_and_installs_it(toolchain: dict[str, Path]) -> None:
    done = build(toolchain, JOBS="2")

    assert done.returncode == 0, done.stderr
    binary = toolchain["dest"] / "all_reduce_perf"
    assert stat.S_IMODE(binary.stat().st_mode) == 0o755
    assert subprocess.run([binary], capture_output=True, text=True, check=True).stdout.strip() == (
        "all_reduce_perf built from all_reduce.cu"
    )
    assert sorted(p.name for p in toolchain["dest"].iterdir()) == ["all_reduce_perf"]
    assert sorted(p.name for p in (toolchain["source"] / "src").iterdir()) == [
        "Makefile", "all_gather.cu", "all_reduce.cu", "common.cu",
    ]  # fmt: skip
    recorded = toolchain["log"].read_text()
    assert f"CUDA_HOME={toolchain['cuda']} NCCL_HOME={toolchain['nccl']} MPI=0" in recorded
    assert "NVCC_GENCODE=-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90" in recorded


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda p: (p["source"] / "src" / "all_reduce.cu").unlink(), "is not an nccl-tests source tree"),
        (lambda p: (p["cuda"] / "bin" / "nvcc").unlink(), "no nvcc at"),
        (lambda p: (p["nccl"] / "include" / "nccl.h").unlink(), "no nccl.h in"),
    ],
)
def test_an_unusable_tree_or_toolchain_exits_2_naming_it(
    toolchain: dict[str, Path], change: Callable[[dict[str, Path]], object], message: str
) -> None:
    change(toolchain)

    done = build(toolchain)

    assert done.returncode == 2
    assert message in done.stderr
    assert not toolchain["dest"].exists()


def test_a_failed_compile_installs_nothing(toolchain: dict[str, Path]) -> None:
    write_exe(toolchain["cuda"] / "bin" / "nvcc", "#!/bin/sh\necho 'error: identifier undefined' >&2\nexit 1\n")

    done = build(toolchain)

    assert done.returncode == 1
    assert "the build failed; nothing installed" in done.stderr
    assert not toolchain["dest"].exists()


def test_wrong_arguments_print_the_usage(toolchain: dict[str, Path]) -> None:
    done = build(toolchain, "a", "b", "c")

    assert done.returncode == 2
    assert "usage: build-nccl-tests SOURCE_DIR [DEST_DIR]" in done.stderr
