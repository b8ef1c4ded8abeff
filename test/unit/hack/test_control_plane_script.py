"""hack/control-plane.sh's binary cache as `make test` fills it: the oldest minor is built for the control plane alone
(KUBE_BUILD=control-plane), which is what `up` and the suite's kubectl need. Against a stand-in cache of empty
executables: nothing is built or started."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
CONTROL_PLANE_BINARIES = ("kube-apiserver", "kube-controller-manager", "kubectl")


def script(command: str, cache: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(REPO / "hack" / "control-plane.sh"), command],
        env={**os.environ, "SLURMCTL_CACHE": str(cache), "KUBE_VERSION": "1.32", **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """A cache holding what `make oldest-kube-build` leaves for 1.32: the control plane's binaries, no node's."""
    version = script("version", tmp_path).stdout.strip()
    assert version.startswith("v1.32."), version
    patchset = re.search(r"^PATCHSET=(\S+)$", (REPO / "hack" / "control-plane.sh").read_text(), re.M)
    assert patchset, "hack/control-plane.sh sets no PATCHSET"
    bin_dir = tmp_path / f"kube-{version}-{patchset.group(1)}" / "bin"
    bin_dir.mkdir(parents=True)
    for name in CONTROL_PLANE_BINARIES:
        (bin_dir / name).touch(mode=0o755)
    return tmp_path


def test_a_control_plane_build_serves_the_control_plane_and_its_kubectl(cache: Path) -> None:
    found = script("bin-dir", cache)
    assert found.returncode == 0, found.stderr
    assert {p.name for p in Path(found.stdout.strip()).iterdir()} == set(CONTROL_PLANE_BINARIES)


def test_an_unknown_build_kind_is_refused_by_name(tmp_path: Path) -> None:
    done = script("version", tmp_path, KUBE_BUILD="node")
    assert done.returncode != 0
    assert "KUBE_BUILD=node: not all or control-plane" in done.stderr
