"""Helpers for running the container scripts of images/scripts directly on this machine (no container engine)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPTS = ROOT / "images" / "scripts"

# The scripts need root (chown, mount); this project's machines run tests as root.
if os.geteuid() != 0:
    pytest.exit("the images tests need root (they chown, mount and unshare)", returncode=2)


def run_script(
    name: str,
    *args: str,
    env: Mapping[str, str] | None = None,
    timeout: float = 60,
    wrapper: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    """Runs a script with a clean environment plus `env`; never raises on a non-zero exit."""
    full_env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), "LC_ALL": "C.UTF-8"}
    full_env.update(env or {})
    return subprocess.run(
        [*wrapper, str(SCRIPTS / name), *args],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A temp dir other users can traverse (pytest's tmp_path is 0700 root), for daemons that drop privileges."""
    path = Path(tempfile.mkdtemp(prefix="slurmctl-images-", dir="/var/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def write_exe(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path
