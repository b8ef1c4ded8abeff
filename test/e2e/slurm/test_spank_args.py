"""The plugin's plugstack.conf argument parser and its reading of the per-job directories from the environment, under
AddressSanitizer and UBSan, fed odd and hostile inputs."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from test.e2e.slurm.local_slurm import REPO, in_rootfs

pytestmark = pytest.mark.slurm

PLUGIN_DIR = REPO / "native" / "spank_chroot"


def test_argument_parser_is_clean_under_asan_and_ubsan(tmp_path: Path) -> None:
    # Built and run with the toolchain of the Slurm root filesystem the plugin is built with (no host compiler).
    harness = tmp_path / "args_harness"
    build = subprocess.run(
        in_rootfs("make", "-C", str(PLUGIN_DIR), "harness", f"HARNESS={harness}", fresh=True),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert build.returncode == 0, build.stderr
    env = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:exitcode=86",
        "UBSAN_OPTIONS": "print_stacktrace=1",
    }
    # A deadline, not a bound: `make test` runs this module beside the image and Kubernetes builds, and there the
    # namespace set-up alone took over 60 s (the cold CI run on this machine, load 12).
    proc = subprocess.run(
        in_rootfs(str(harness), fresh=True), capture_output=True, text=True, timeout=300, env=env, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "AddressSanitizer" not in proc.stderr and "runtime error" not in proc.stderr, proc.stderr
    match = re.search(r"^ok (\d+) cases$", proc.stdout, re.MULTILINE)
    assert match and int(match.group(1)) >= 30, proc.stdout
    # Each hostile input got its own verdict, including the ones a sloppy parser crashes on.
    cases = ("very long jail", "very long unknown key", "bare equals", "jail without value", "unknown key")
    # ... and the per-job directories the worker pod names in slurmd's environment (jail.h).
    dirs = ("job dirs both", "job tmp alone", "job shm root", "job tmp too long")
    # ... and their sizes (spec.workers[].jobTmp, in bytes).
    sizes = ("sizes both", "size zero", "size with a unit", "size overflows", "size without its directory")
    for case in (*cases, *dirs, *sizes):
        assert f"ok {case}:" in proc.stdout
