"""install-all-reduce-perf: the nccl-benchmark image's bundle goes into the jail once per version, atomically, never
into a jail populate-jail has not finished, never outside the jail."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from test.unit.images.conftest import run_script

INSIDE = "usr/lib/slurmctl/all-reduce-perf"


def bundle(root: Path, version: str = "0123456789abcdef", nccl: bytes = b"nccl" * 100) -> Path:
    b = root / "bundle"
    (b / "bin").mkdir(parents=True, exist_ok=True)
    (b / "lib").mkdir(exist_ok=True)
    (b / "bin" / "all_reduce_perf").write_text("#!/bin/sh\necho all_reduce_perf\n")
    (b / "lib" / "libnccl.so.2").write_bytes(nccl)
    (b / "lib" / "libcudart.so.12").write_bytes(b"cudart")
    (b / "VERSION").write_text(version + "\n")
    return b


@pytest.fixture
def jail(tmp_path: Path) -> Path:
    j = tmp_path / "jail"
    (j / "usr" / "lib" / "slurmctl").mkdir(parents=True)
    (j / "etc").mkdir()
    (j / ".slurmctl-jail-populated").write_text("populated\n")
    return j


def install(b: Path, jail: Path) -> tuple[int, str, str]:
    done = run_script("install-all-reduce-perf", str(b), env={"JAIL_DIR": str(jail)})
    return done.returncode, done.stdout.strip(), done.stderr


def test_installs_the_bundle_and_prints_the_directory_to_put_on_path(tmp_path: Path, jail: Path) -> None:
    code, printed, stderr = install(bundle(tmp_path), jail)

    assert code == 0, stderr
    assert printed == f"/{INSIDE}/0123456789abcdef/bin"
    target = jail / INSIDE / "0123456789abcdef"
    assert sorted(str(p.relative_to(target)) for p in target.rglob("*")) == [
        ".slurmctl-all-reduce-perf", "bin", "bin/all_reduce_perf", "lib", "lib/libcudart.so.12", "lib/libnccl.so.2",
    ]  # fmt: skip
    assert stat.S_IMODE((target / "bin" / "all_reduce_perf").stat().st_mode) == 0o755
    assert (target / "lib" / "libnccl.so.2").read_bytes() == b"nccl" * 100
    assert [p.name for p in (jail / INSIDE).iterdir()] == ["0123456789abcdef"], "no temporary copy left"


def test_a_second_run_copies_nothing_and_a_changed_file_is_installed_again(tmp_path: Path, jail: Path) -> None:
    b = bundle(tmp_path)
    assert install(b, jail)[0] == 0
    lib = jail / INSIDE / "0123456789abcdef" / "lib" / "libnccl.so.2"
    inode = lib.stat().st_ino

    code, _, stderr = install(b, jail)
    assert code == 0 and "is installed in the jail" in stderr
    assert lib.stat().st_ino == inode

    lib.write_bytes(b"truncated")  # a copy someone damaged
    code, _, stderr = install(b, jail)
    assert code == 0 and "installing all_reduce_perf" in stderr
    assert lib.read_bytes() == b"nccl" * 100


def test_a_new_version_replaces_ours_and_leaves_everything_else(tmp_path: Path, jail: Path) -> None:
    assert install(bundle(tmp_path, "aaaa"), jail)[0] == 0
    mine = jail / INSIDE / "users-own"
    mine.mkdir()
    (jail / INSIDE / ".tmp-aaaa.XyZ").mkdir()  # what a killed run left

    code, printed, stderr = install(bundle(tmp_path, "bbbb"), jail)

    assert code == 0, stderr
    assert printed == f"/{INSIDE}/bbbb/bin"
    assert sorted(p.name for p in (jail / INSIDE).iterdir()) == ["bbbb", "users-own"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda j: (j / ".slurmctl-jail-populated").unlink(), "is not populated (yet)"),
        (lambda j: (j / ".slurmctl-jail-populating").write_text(""), "is not populated (yet)"),
        (lambda j: os.rename(j, j.with_name("elsewhere")), "no jail at"),
    ],
)
def test_nothing_is_written_into_a_jail_not_populated_or_absent(
    tmp_path: Path, jail: Path, change: object, message: str
) -> None:
    change(jail)  # type: ignore[operator]

    code, printed, stderr = install(bundle(tmp_path), jail)

    assert (code, printed) == (2, "")
    assert message in stderr
    assert not (jail / INSIDE).exists()


def test_no_bundle_in_the_image_is_nothing_to_do(tmp_path: Path, jail: Path) -> None:
    code, printed, stderr = install(tmp_path / "nothing", jail)

    assert (code, printed) == (2, "")
    assert "no bundle at" in stderr


def test_a_symlink_in_the_jail_cannot_lead_the_copy_outside(tmp_path: Path, jail: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (jail / INSIDE).symlink_to(outside)

    code, printed, stderr = install(bundle(tmp_path), jail)

    assert (code, printed) == (1, "")
    assert "refusing to install there" in stderr
    assert list(outside.iterdir()) == []
