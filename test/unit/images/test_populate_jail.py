"""populate-jail on real directories: what a user's jail must keep from the image, and when the copy is (re)done."""

from __future__ import annotations

import os
import stat
import struct
import subprocess
from pathlib import Path

import pytest

from test.unit.images.conftest import SCRIPTS, run_script

SENTINEL = ".slurmctl-jail-populated"
ACL_XATTR = "system.posix_acl_access"


def posix_acl(*, owner: int, named_user: int, named_perm: int, group: int, other: int) -> bytes:
    """The kernel's binary form of an access ACL (what setfacl writes), so no acl tools are needed."""
    undefined = 0xFFFFFFFF
    entries = [(0x01, owner, undefined), (0x02, named_perm, named_user), (0x04, group, undefined)]
    entries += [(0x10, named_perm | group, undefined), (0x20, other, undefined)]
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, perm, uid) for tag, perm, uid in entries)


def make_rootfs(root: Path) -> None:
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (root / "usr" / "bin").mkdir(parents=True)
    tool = root / "usr" / "bin" / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o4755)
    (root / "usr" / "bin" / "python3.11").write_text("interpreter")
    (root / "usr" / "bin" / "python3").symlink_to("python3.11")
    (root / "lib").symlink_to("/usr/lib")
    (root / "usr" / "lib").mkdir()
    (root / "usr" / "lib" / "libfoo.so.1").write_text("library")
    os.link(root / "usr" / "lib" / "libfoo.so.1", root / "usr" / "lib" / "libfoo-hardlink.so.1")
    home = root / "home" / "alice"
    home.mkdir(parents=True)
    (home / "notes").write_text("alice's file")
    for path in (home, home / "notes"):
        os.chown(path, 1234, 2345)
    home.chmod(0o700)
    (home / "notes").chmod(0o640)
    os.setxattr(root / "usr" / "bin" / "tool", "user.slurmctl", b"kept")
    shared = root / "srv" / "shared"
    shared.mkdir(parents=True)
    os.setxattr(shared, ACL_XATTR, posix_acl(owner=7, named_user=4321, named_perm=5, group=5, other=0))
    (root / "dev").mkdir()
    os.mknod(root / "dev" / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    os.mkfifo(root / "dev" / "fifo")
    root.chmod(0o700)  # the jail root must end up 0755 anyway


@pytest.fixture
def rootfs(tmp_path: Path) -> Path:
    root = tmp_path / "rootfs"
    make_rootfs(root)
    return root


@pytest.fixture
def jail(tmp_path: Path) -> Path:
    path = tmp_path / "jail"
    path.mkdir(mode=0o700)
    return path


def populate(jail: Path, rootfs: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return run_script("populate-jail", env={"JAIL_DIR": str(jail), "SOURCE_ROOT": str(rootfs), **extra})


def snapshot(root: Path) -> dict[str, tuple[int, int, int, int, str, dict[str, bytes]]]:
    """Path -> (mode, uid, gid, link count, symlink target, xattrs) for every entry but the sentinel."""
    result = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if rel == SENTINEL:
                continue
            st = path.lstat()
            target = os.readlink(path) if path.is_symlink() else ""
            xattrs = {} if path.is_symlink() else {k: os.getxattr(path, k) for k in os.listxattr(path)}
            result[rel] = (st.st_mode, st.st_uid, st.st_gid, st.st_nlink, target, xattrs)
    return result


def test_copy_preserves_owners_modes_links_xattrs_and_acls(jail: Path, rootfs: Path) -> None:
    done = populate(jail, rootfs)

    assert done.returncode == 0, done.stderr
    assert snapshot(jail) == snapshot(rootfs)
    assert (jail / "usr" / "bin" / "tool").stat().st_mode & 0o7777 == 0o4755
    assert (jail / "home" / "alice" / "notes").stat().st_uid == 1234
    lib = jail / "usr" / "lib"
    assert (lib / "libfoo.so.1").stat().st_ino == (lib / "libfoo-hardlink.so.1").stat().st_ino
    assert os.readlink(jail / "lib") == "/usr/lib"
    assert os.getxattr(jail / "usr" / "bin" / "tool", "user.slurmctl") == b"kept"
    assert os.getxattr(jail / "srv" / "shared", ACL_XATTR) == os.getxattr(rootfs / "srv" / "shared", ACL_XATTR)
    assert stat.S_ISCHR((jail / "dev" / "null").lstat().st_mode)
    assert stat.S_ISFIFO((jail / "dev" / "fifo").lstat().st_mode)
    # sshd's ChrootDirectory demands a root-owned 0755 jail root, whatever the source root had.
    assert jail.stat().st_mode & 0o7777 == 0o755
    assert (jail.stat().st_uid, jail.stat().st_gid) == (0, 0)
    assert "populated" in (jail / SENTINEL).read_text()


def test_populated_jail_is_left_alone_without_overwrite(jail: Path, rootfs: Path) -> None:
    assert populate(jail, rootfs).returncode == 0
    (jail / "opt").mkdir()
    (jail / "opt" / "user-software").write_text("installed by a user")
    (jail / "etc" / "passwd").write_text("changed by a user\n")

    again = populate(jail, rootfs)

    assert again.returncode == 0, again.stderr
    assert "already populated" in again.stderr
    assert (jail / "opt" / "user-software").read_text() == "installed by a user"
    assert (jail / "etc" / "passwd").read_text() == "changed by a user\n"


def test_overwrite_makes_the_jail_equal_to_the_image_again(jail: Path, rootfs: Path) -> None:
    assert populate(jail, rootfs).returncode == 0
    (jail / "opt").mkdir()
    (jail / "opt" / "user-software").write_text("installed by a user")
    (jail / "etc" / "passwd").write_text("changed by a user\n")

    again = populate(jail, rootfs, OVERWRITE="true")

    assert again.returncode == 0, again.stderr
    assert snapshot(jail) == snapshot(rootfs)
    assert (jail / SENTINEL).exists()
    assert "overwriting" in again.stderr


def test_jail_without_sentinel_is_copied_again(jail: Path, rootfs: Path) -> None:
    # What an interrupted earlier run leaves behind: part of the files, a stale one, no sentinel.
    (jail / "etc").mkdir()
    (jail / "etc" / "passwd").write_text("half-writ")
    (jail / "stale-partial-file").write_text("x")

    done = populate(jail, rootfs)

    assert done.returncode == 0, done.stderr
    assert "did not finish" in done.stderr
    assert snapshot(jail) == snapshot(rootfs)
    assert (jail / SENTINEL).exists()


def test_failed_copy_leaves_no_sentinel_and_the_next_run_finishes_it(tmp_path: Path, rootfs: Path) -> None:
    """A jail volume that fills up mid-copy (a real tmpfs, in a private mount namespace) is never marked complete."""
    (rootfs / "big").write_bytes(os.urandom(256 * 1024))
    jail = tmp_path / "small-jail"
    jail.mkdir()
    script = f"""
        mount -t tmpfs -o size=128k tmpfs {jail}
        JAIL_DIR={jail} SOURCE_ROOT={rootfs} {SCRIPTS}/populate-jail; echo "first=$?"
        test -e {jail}/{SENTINEL} && echo sentinel-after-failure
        mount -o remount,size=4m {jail}
        JAIL_DIR={jail} SOURCE_ROOT={rootfs} {SCRIPTS}/populate-jail; echo "second=$?"
        test -e {jail}/{SENTINEL} && echo sentinel-after-success
        cmp {rootfs}/big {jail}/big && echo copied
    """
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    lines = done.stdout.split()
    assert "first=1" in lines, done.stdout + done.stderr
    assert "sentinel-after-failure" not in lines
    assert "failed; the jail stays unmarked" in done.stderr
    assert "did not finish" in done.stderr  # the second run knew the first was incomplete
    assert {"second=0", "sentinel-after-success", "copied"} <= set(lines), done.stdout + done.stderr


def test_missing_jail_or_source_fails_clearly(tmp_path: Path, rootfs: Path) -> None:
    no_jail = populate(tmp_path / "absent", rootfs)
    assert no_jail.returncode == 1
    assert "jail volume" in no_jail.stderr
    assert "does not exist" in no_jail.stderr

    jail = tmp_path / "jail"
    jail.mkdir()
    no_source = populate(jail, tmp_path / "no-rootfs")
    assert no_source.returncode == 1
    assert "source root filesystem" in no_source.stderr
    assert not (jail / SENTINEL).exists()


def test_bad_overwrite_value_is_rejected(jail: Path, rootfs: Path) -> None:
    assert populate(jail, rootfs).returncode == 0
    done = populate(jail, rootfs, OVERWRITE="maybe")
    assert done.returncode == 1
    assert "expected true or false, got 'maybe'" in done.stderr
