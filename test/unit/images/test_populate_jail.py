"""populate-jail on real directories: what a user's jail must keep from the image, what it must keep from its users
(nothing is deleted, nothing a user changed is replaced), and when the copy is (re)done or refused."""

from __future__ import annotations

import os
import stat
import struct
import subprocess
from pathlib import Path

import pytest

from slurmctl.render.populate_jail import REFUSED_EXIT_CODE
from test.unit.images.conftest import SCRIPTS, run_script

SENTINEL = ".slurmctl-jail-populated"
IN_PROGRESS = ".slurmctl-jail-populating"
TEMP = ".slurmctl-jail-tmp"
RESERVED = ".slurmctl-jail-"  # the names at the jail root that are slurmctl's (markers, manifest, temporary files)
ACL_XATTR = "system.posix_acl_access"
OLD = 1_600_000_000  # a modification time no file written by the test has


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
    """Path -> (mode, uid, gid, link count, symlink target, xattrs) for every entry but slurmctl's own at the root."""
    result = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if rel.startswith(RESERVED):
                continue
            st = path.lstat()
            target = os.readlink(path) if path.is_symlink() else ""
            xattrs = {} if path.is_symlink() else {k: os.getxattr(path, k) for k in os.listxattr(path)}
            result[rel] = (st.st_mode, st.st_uid, st.st_gid, st.st_nlink, target, xattrs)
    return result


def copied(rootfs: Path) -> dict[str, tuple[int, int, int, int, str, dict[str, bytes]]]:
    """snapshot() of what populate-jail copies from `rootfs`: everything but device nodes."""
    return {
        path: entry
        for path, entry in snapshot(rootfs).items()
        if not (stat.S_ISCHR(entry[0]) or stat.S_ISBLK(entry[0]))
    }


Entry = tuple[int, int, int, int | None, bytes | str | None, dict[str, bytes]]


def tree(root: Path, *, dir_times: bool = True) -> dict[str, Entry]:
    """Path -> (mode, uid, gid, mtime in ns, content or symlink target, xattrs) for every entry, the root ("")
    included: what "untouched, byte for byte" compares. `dir_times=False` leaves out directories' mtimes (adding an
    entry to a directory changes its mtime, not anything in it)."""
    result = {}
    for path in [root, *sorted(root.rglob("*"))]:
        st = path.lstat()
        content: bytes | str | None = None
        if path.is_symlink():
            content = os.readlink(path)
        elif stat.S_ISREG(st.st_mode):
            content = path.read_bytes()
        mtime = None if stat.S_ISDIR(st.st_mode) and not dir_times else st.st_mtime_ns
        xattrs = {} if path.is_symlink() else {k: os.getxattr(path, k) for k in os.listxattr(path)}
        result[str(path.relative_to(root)) if path != root else ""] = (
            st.st_mode,
            st.st_uid,
            st.st_gid,
            mtime,
            content,
            xattrs,
        )
    return result


def make_foreign_volume(jail: Path) -> None:
    """Someone else's data on the volume: an older root filesystem with users, a home, software of their own."""
    (jail / "etc").mkdir()
    (jail / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\ncarol:x:1000:1000::/home/carol:/bin/bash\n")
    home = jail / "home" / "carol"
    home.mkdir(parents=True)
    (home / "thesis.tex").write_text("\\chapter{One}")
    os.link(home / "thesis.tex", home / "thesis-link.tex")
    for path in (home, home / "thesis.tex"):
        os.chown(path, 1000, 1000)
    home.chmod(0o700)
    (home / "data").symlink_to("/scratch/carol")
    (jail / "usr" / "bin").mkdir(parents=True)
    (jail / "usr").chmod(0o750)
    (jail / "usr" / "bin" / "tool").write_text("carol's own tool")
    os.setxattr(jail / "usr" / "bin" / "tool", "user.owner", b"carol")
    os.utime(jail / "usr" / "bin" / "tool", ns=(OLD * 10**9, OLD * 10**9))


def make_newer_image(tmp_path: Path, rootfs: Path, tag: str = "v2") -> Path:
    """A newer release of the image: every file it shares with `rootfs` changed (content and time), one file added,
    one symlink removed."""
    newer = tmp_path / f"rootfs-{tag}"
    subprocess.run(["cp", "-a", str(rootfs), str(newer)], check=True)
    changed = ["etc/passwd", "usr/bin/tool", "usr/bin/python3.11", "usr/lib/libfoo.so.1", "home/alice/notes"]
    for rel in changed:
        path = newer / rel
        mode = path.stat().st_mode
        path.write_text(f"{rel} of {tag}")
        path.chmod(mode & 0o7777)
        os.utime(path, ns=(OLD * 10**9 + len(tag), OLD * 10**9 + len(tag)))
    (newer / "usr" / "bin" / "newtool").write_text(f"new in {tag}")
    (newer / "usr" / "bin" / "python3").unlink()
    return newer


def paths(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def in_own_mount_namespace(script: str) -> subprocess.CompletedProcess[str]:
    """A bash script in a private mount namespace: it may mount a small tmpfs as the jail to fill it up."""
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_copy_preserves_owners_modes_links_xattrs_and_acls_but_copies_no_device_node(jail: Path, rootfs: Path) -> None:
    done = populate(jail, rootfs)

    assert done.returncode == 0, done.stderr
    assert snapshot(jail) == copied(rootfs)
    assert (jail / "usr" / "bin" / "tool").stat().st_mode & 0o7777 == 0o4755
    assert (jail / "home" / "alice" / "notes").stat().st_uid == 1234
    lib = jail / "usr" / "lib"
    assert (lib / "libfoo.so.1").stat().st_ino == (lib / "libfoo-hardlink.so.1").stat().st_ino
    assert os.readlink(jail / "lib") == "/usr/lib"
    assert os.getxattr(jail / "usr" / "bin" / "tool", "user.slurmctl") == b"kept"
    assert os.getxattr(jail / "srv" / "shared", ACL_XATTR) == os.getxattr(rootfs / "srv" / "shared", ACL_XATTR)
    # A device node in the jail would be a way out: every node mounts a minimal /dev of its own over the jail's.
    assert stat.S_ISCHR((rootfs / "dev" / "null").lstat().st_mode)
    assert not (jail / "dev" / "null").exists()
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


def test_a_foreign_volume_is_refused_and_left_untouched(tmp_path: Path, jail: Path, rootfs: Path) -> None:
    make_foreign_volume(jail)
    before = tree(jail)
    termination_log = tmp_path / "termination-log"
    termination_log.touch()

    for extra in ({}, {"OVERWRITE": "true"}):
        done = populate(
            jail, rootfs, TERMINATION_LOG=str(termination_log), JAIL_VOLUME="PersistentVolumeClaim jail", **extra
        )

        assert done.returncode == REFUSED_EXIT_CODE, done.stderr
        assert tree(jail) == before, "a refused volume is not touched at all"
        message = termination_log.read_text().strip()
        assert f"jail volume {jail} (PersistentVolumeClaim jail)" in message
        assert "set spec.populateJail.adopt: true" in message
        assert "point spec.jail.volume at an empty volume" in message
        assert "etc home usr" in message  # what the volume holds
        assert message in done.stderr


def test_an_empty_volume_with_lost_and_found_is_populated(jail: Path, rootfs: Path) -> None:
    (jail / "lost+found").mkdir()

    done = populate(jail, rootfs)

    assert done.returncode == 0, done.stderr
    assert (jail / SENTINEL).exists()
    assert (jail / "lost+found").is_dir()


def test_adopt_keeps_every_file_of_the_volume_and_adds_the_images(tmp_path: Path, jail: Path, rootfs: Path) -> None:
    make_foreign_volume(jail)
    before = tree(jail, dir_times=False)

    done = populate(jail, rootfs, ADOPT="true")

    assert done.returncode == 0, done.stderr
    assert "adopting" in done.stderr
    after = tree(jail, dir_times=False)
    changed = {path for path, entry in before.items() if after.get(path) != entry}
    assert changed == {""}, "only the jail root changes (sshd demands a root-owned 0755 root)"
    image = copied(rootfs)
    added = set(image) - set(before)
    assert added and {path: snapshot(jail)[path] for path in added} == {path: image[path] for path in added}
    assert (jail / SENTINEL).exists()

    # The adopted files stay the volume's: a later overwrite keeps them too, and updates what the image brought.
    newer = make_newer_image(tmp_path, rootfs)
    again = populate(jail, newer, OVERWRITE="true")

    assert again.returncode == 0, again.stderr
    assert (jail / "usr" / "bin" / "tool").read_text() == "carol's own tool"
    assert "carol" in (jail / "etc" / "passwd").read_text()
    assert (jail / "usr" / "lib" / "libfoo.so.1").read_text() == "usr/lib/libfoo.so.1 of v2"


def test_an_interrupted_copy_of_ours_is_resumed(jail: Path, rootfs: Path) -> None:
    # What a run stopped mid-copy leaves: its marker, part of the image copied exactly, a temporary file.
    (jail / IN_PROGRESS).write_text("populate started 2026-01-01T00:00:00Z from /jail-rootfs\n")
    partial = ["rsync", "-aHAX", "--numeric-ids", f"{rootfs}/etc", f"{rootfs}/srv", f"{jail}/"]
    subprocess.run(partial, check=True)
    (jail / TEMP).mkdir()
    (jail / TEMP / ".libfoo.so.1.Xa81Qz").write_text("libr")

    done = populate(jail, rootfs)

    assert done.returncode == 0, done.stderr
    assert "did not finish" in done.stderr
    assert snapshot(jail) == copied(rootfs)
    assert (jail / SENTINEL).exists()
    assert not (jail / IN_PROGRESS).exists()
    assert not (jail / TEMP).exists()


def test_an_interrupted_adoption_resumes_as_one_without_adopt(jail: Path, rootfs: Path) -> None:
    make_foreign_volume(jail)
    (jail / IN_PROGRESS).write_text("adopt started 2026-01-01T00:00:00Z from /jail-rootfs\n")
    before = tree(jail, dir_times=False)

    done = populate(jail, rootfs)

    assert done.returncode == 0, done.stderr
    after = tree(jail, dir_times=False)
    assert {path for path, entry in before.items() if after.get(path) != entry} == {"", IN_PROGRESS}
    assert (jail / "usr" / "bin" / "tool").read_text() == "carol's own tool"
    assert (jail / "usr" / "lib" / "libfoo.so.1").read_text() == "library"


def test_overwrite_keeps_what_users_changed_and_replaces_what_they_did_not(
    tmp_path: Path, jail: Path, rootfs: Path
) -> None:
    assert populate(jail, rootfs).returncode == 0
    (jail / "home" / "bob").mkdir()
    (jail / "home" / "bob" / "thesis.tex").write_text("bob's thesis")
    with (jail / "etc" / "passwd").open("a") as passwd:
        passwd.write("bob:x:1001:1001::/home/bob:/bin/bash\n")
    (jail / "usr" / "bin" / "python3.11").write_text("patched by a user")
    (jail / "opt").mkdir()
    (jail / "opt" / "user-software").write_text("installed by a user")
    before = paths(jail)
    newer = make_newer_image(tmp_path, rootfs)

    again = populate(jail, newer, OVERWRITE="true")

    assert again.returncode == 0, again.stderr
    assert "overwriting" in again.stderr
    # Kept: a user's file, a user added to passwd, an image file a user changed, and /home whatever the image says.
    assert (jail / "home" / "bob" / "thesis.tex").read_text() == "bob's thesis"
    assert (jail / "etc" / "passwd").read_text().endswith("bob:x:1001:1001::/home/bob:/bin/bash\n")
    assert (jail / "usr" / "bin" / "python3.11").read_text() == "patched by a user"
    assert (jail / "opt" / "user-software").read_text() == "installed by a user"
    assert (jail / "home" / "alice" / "notes").read_text() == "alice's file"
    kept = next(line for line in again.stderr.splitlines() if "kept as users left them" in line)
    assert "3 entries kept" in kept
    assert all(name in kept for name in ("etc/passwd", "usr/bin/python3.11", "home/alice/notes"))
    # Replaced: the image files nobody touched, exactly as the newer image has them (hard link, setuid, xattr).
    lib = jail / "usr" / "lib"
    assert (lib / "libfoo.so.1").read_text() == "usr/lib/libfoo.so.1 of v2"
    assert (lib / "libfoo.so.1").stat().st_ino == (lib / "libfoo-hardlink.so.1").stat().st_ino
    tool = jail / "usr" / "bin" / "tool"
    assert tool.read_text() == "usr/bin/tool of v2"
    assert tool.stat().st_mode & 0o7777 == 0o4755
    assert os.getxattr(tool, "user.slurmctl") == b"kept"
    assert (jail / "usr" / "bin" / "newtool").read_text() == "new in v2"
    # Nothing deleted: what the image dropped stays (it may be in use).
    assert before <= paths(jail)
    assert os.readlink(jail / "usr" / "bin" / "python3") == "python3.11"
    assert (jail / SENTINEL).exists()
    assert not (jail / IN_PROGRESS).exists()


def test_nothing_is_written_through_a_users_symlink(tmp_path: Path, jail: Path, rootfs: Path) -> None:
    assert populate(jail, rootfs).returncode == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (jail / "srv" / "shared").rmdir()
    (jail / "srv" / "shared").symlink_to(elsewhere)
    newer = make_newer_image(tmp_path, rootfs)
    (newer / "srv" / "shared" / "dataset").write_text("from the image")

    again = populate(jail, newer, OVERWRITE="true")

    assert again.returncode == 0, again.stderr
    assert list(elsewhere.iterdir()) == []
    assert os.readlink(jail / "srv" / "shared") == str(elsewhere)
    assert "srv/shared/dataset" in again.stderr  # named as not copied


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
    done = in_own_mount_namespace(script)

    lines = done.stdout.split()
    assert "first=1" in lines, done.stdout + done.stderr
    assert "sentinel-after-failure" not in lines
    assert "failed; the jail stays unmarked" in done.stderr
    assert "did not finish" in done.stderr  # the second run knew the first was incomplete
    assert {"second=0", "sentinel-after-success", "copied"} <= set(lines), done.stdout + done.stderr


def test_an_interrupted_overwrite_leaves_the_jail_populated_and_the_next_one_finishes(
    tmp_path: Path, rootfs: Path
) -> None:
    """An overwrite that fills the volume after replacing some files: the jail stays populated, and the next overwrite
    (of a newer image still) replaces those files again instead of taking them for a user's."""
    v2 = make_newer_image(tmp_path, rootfs, "v2")
    (v2 / "big").write_bytes(os.urandom(256 * 1024))
    v3 = make_newer_image(tmp_path, rootfs, "v3-final")
    jail = tmp_path / "small-jail"
    jail.mkdir()
    run = f"JAIL_DIR={jail} {SCRIPTS}/populate-jail"
    script = f"""
        mount -t tmpfs -o size=128k tmpfs {jail}
        SOURCE_ROOT={rootfs} {run}; echo "first=$?"
        SOURCE_ROOT={v2} OVERWRITE=true {run}; echo "second=$?"
        test -e {jail}/{SENTINEL} && echo sentinel-after-failure
        SOURCE_ROOT={v3} OVERWRITE=true {run}; echo "third=$?"
        cat {jail}/usr/lib/libfoo.so.1; echo
        cat {jail}/usr/bin/python3.11; echo
    """
    done = in_own_mount_namespace(script)

    lines = done.stdout.split()
    assert {"first=0", "second=1", "sentinel-after-failure", "third=0"} <= set(lines), done.stdout + done.stderr
    assert "the next overwrite resumes" in done.stderr
    assert "usr/lib/libfoo.so.1 of v3-final" in done.stdout
    assert "usr/bin/python3.11 of v3-final" in done.stdout
    kept = [line for line in done.stderr.splitlines() if "kept as users left them" in line]
    assert len(kept) == 1, done.stderr  # the third run's: only what is never replaced (no user changed anything)
    assert "2 entries kept" in kept[0] and "etc/passwd" in kept[0] and "home/alice/notes" in kept[0]


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
    bad_adopt = populate(jail, rootfs, ADOPT="perhaps")
    assert bad_adopt.returncode == 1
    assert "expected true or false, got 'perhaps'" in bad_adopt.stderr
