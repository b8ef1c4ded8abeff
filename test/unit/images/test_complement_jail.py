"""complement-jail in a private mount namespace on a real directory tree: what gets mounted, idempotence, errors."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from test.unit.images.conftest import SCRIPTS, write_exe

MARK = "=====MOUNTINFO====="


def mount_points(mountinfo: str) -> list[tuple[str, str]]:
    """(mount point, fstype) per line of /proc/self/mountinfo, octal escapes decoded."""
    result = []
    for line in mountinfo.strip().splitlines():
        fields = line.split()
        sep = fields.index("-")
        point = fields[4].encode().decode("unicode_escape")
        result.append((point, fields[sep + 1]))
    return result


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A jail with the bare bones of a root filesystem, a sub-mount volume, configs and a munge socket dir."""
    jail = tmp_path / "jail"
    for name in ("etc", "usr/bin", "proc", "dev", "sys", "run", "tmp"):
        (jail / name).mkdir(parents=True)
    (tmp_path / "submounts" / "home").mkdir(parents=True)
    (tmp_path / "submounts" / "home" / "alice.txt").write_text("on the home volume")
    (tmp_path / "submounts" / "data").mkdir(parents=True)
    (tmp_path / "slurm-etc").mkdir()
    (tmp_path / "slurm-etc" / "slurm.conf").write_text("ClusterName=test\n")
    (tmp_path / "munge-run").mkdir()
    (tmp_path / "hooks").mkdir()
    write_exe(tmp_path / "hooks" / "10-mark", '#!/bin/sh\necho "hook saw $JAIL_DIR" >> "$HOOK_LOG"\n')
    return tmp_path


def env_for(tree: Path, **extra: str) -> dict[str, str]:
    return {
        "JAIL_DIR": str(tree / "jail"),
        "JAIL_SUBMOUNTS": "home:/home data:/srv/data",
        "JAIL_SUBMOUNTS_SOURCE": str(tree / "submounts"),
        "COMPLEMENT_JAIL_BINDS": "/usr/bin/env /usr/bin/does-not-exist-here",
        "COMPLEMENT_JAIL_HOOKS": str(tree / "hooks"),
        "HOOK_LOG": str(tree / "hook.log"),
        "COMPLEMENT_JAIL_REFUSED": str(tree / "refused"),
        "SLURM_CONF_DIR": str(tree / "slurm-etc"),
        "MUNGE_SOCKET": str(tree / "munge-run" / "munge.socket.2"),
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        **extra,
    }


def in_namespace(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "bash", "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_mounts_appear_and_a_second_run_adds_none(tree: Path) -> None:
    jail = tree / "jail"
    script = f"""
        set -e
        {SCRIPTS}/complement-jail
        echo {MARK}; cat /proc/self/mountinfo
        {SCRIPTS}/complement-jail
        echo {MARK}; cat /proc/self/mountinfo
        echo {MARK}
        cat {jail}/home/alice.txt; echo
        cat {jail}/etc/slurm/slurm.conf
        cmp /etc/hosts {jail}/etc/hosts && echo hosts-same
        test -d {jail}/proc/self && echo proc-fresh
    """
    done = in_namespace(script, env_for(tree))

    assert done.returncode == 0, done.stderr
    _, first, second, checks = done.stdout.split(MARK)
    after_first = mount_points(first)
    points = {point: fstype for point, fstype in after_first}
    j = str(jail)
    expected = {
        j,
        f"{j}/proc",
        f"{j}/dev",
        f"{j}/sys",
        f"{j}/run",
        f"{j}/tmp",
        f"{j}/etc/hosts",
        f"{j}/etc/resolv.conf",
        f"{j}/run/munge",
        f"{j}/etc/slurm",
        f"{j}/home",
        f"{j}/srv/data",
        f"{j}/usr/bin/env",
    }
    assert expected <= set(points), sorted(expected - set(points))
    assert points[f"{j}/proc"] == "proc"
    assert f"{j}/dev/pts" in points  # /dev is bound recursively: its own sub-mounts come along
    assert not any(p.endswith("does-not-exist-here") for p in points)
    assert "skipping /usr/bin/does-not-exist-here" in done.stderr
    # Idempotent: the second run mounted nothing at all.
    assert mount_points(second) == after_first
    assert "on the home volume" in checks
    assert "ClusterName=test" in checks
    assert "hosts-same" in checks
    assert "proc-fresh" in checks
    assert (tree / "hook.log").read_text().splitlines() == [f"hook saw {jail}"] * 2


def test_missing_jail_fails_clearly(tree: Path) -> None:
    done = in_namespace(f"{SCRIPTS}/complement-jail", env_for(tree, JAIL_DIR=str(tree / "absent")))

    assert done.returncode == 1
    assert f"jail {tree / 'absent'} does not exist (is the jail volume mounted?)" in done.stderr


def test_empty_jail_is_rejected_before_mounting_anything(tree: Path) -> None:
    empty = tree / "empty-jail"
    empty.mkdir()
    done = in_namespace(
        f"{SCRIPTS}/complement-jail; echo rc=$?; grep -c {empty} /proc/self/mountinfo || true",
        env_for(tree, JAIL_DIR=str(empty)),
    )

    assert "holds no root filesystem" in done.stderr
    assert done.stdout.split() == ["rc=1", "0"]


def test_missing_submount_volume_fails_naming_it(tree: Path) -> None:
    done = in_namespace(f"{SCRIPTS}/complement-jail", env_for(tree, JAIL_SUBMOUNTS="scratch:/scratch"))

    assert done.returncode == 1
    assert "jail sub-mount 'scratch' is not mounted at" in done.stderr


@pytest.mark.parametrize("entry", ["no-colon", "Bad_Name:/x", "home:relative/path"])
def test_malformed_submount_entries_are_rejected(tree: Path, entry: str) -> None:
    (tree / "submounts" / "no-colon").mkdir()
    done = in_namespace(f"{SCRIPTS}/complement-jail", env_for(tree, JAIL_SUBMOUNTS=entry))

    assert done.returncode == 1
    assert "bad JAIL_SUBMOUNTS entry" in done.stderr or "must be absolute" in done.stderr


def test_symlink_in_the_jail_cannot_redirect_a_mount_to_the_host(tree: Path) -> None:
    # A user with root in the jail could plant this; following it would mount over a file of the node itself.
    victim = tree / "host-file"
    victim.write_text("node's own file")
    (tree / "jail" / "etc" / "resolv.conf").symlink_to(victim)
    done = in_namespace(f"{SCRIPTS}/complement-jail; grep -c {victim} /proc/self/mountinfo || true", env_for(tree))

    assert "leads outside the jail" in done.stderr
    assert done.stdout.split()[-1] == "0"
    assert victim.read_text() == "node's own file"


def test_mirror_is_read_only_and_inert_and_never_covers_a_system_directory(tree: Path) -> None:
    """COMPLEMENT_JAIL_READ_MIRROR (workers with container steps): the jail's directories appear outside it, but
    nothing a user wrote there can be written to, executed or used as a device by root in the container, and a jail
    path under the container's system directories (here a user-writable /usr/local/bin) is not mirrored at all."""
    (tree / "submounts" / "tools").mkdir()
    write_exe(tree / "submounts" / "data" / "run-me", "#!/bin/sh\necho ran\n")
    # Outside any system directory, and not under /tmp (world-writable: a sub-mount there is refused); on a tmpfs of
    # the test's own mount namespace, so nothing is made on the host.
    outside = Path("/mnt/slurmctl-mirror/data")
    env = env_for(
        tree,
        COMPLEMENT_JAIL_READ_MIRROR="yes",
        JAIL_SUBMOUNTS=f"home:/home data:{outside} tools:/usr/local/bin",
    )
    script = f"""
        set -e
        mount -t tmpfs slurmctl-test /mnt
        {SCRIPTS}/complement-jail
        findmnt -no OPTIONS {outside}
        {outside}/run-me && echo EXECUTED || echo refused
        touch {outside}/new 2>/dev/null && echo WRITTEN || echo refused
        findmnt --mountpoint /usr/local/bin >/dev/null && echo MIRRORED || echo not-mirrored
    """
    done = in_namespace(script, env)

    assert done.returncode == 0, done.stderr
    options, executed, written, system = done.stdout.split()
    assert {"ro", "nosuid", "nodev", "noexec"} <= set(options.split(",")), options
    assert (executed, written, system) == ("refused", "refused", "not-mirrored")
    # Not even mounted in the jail: under /usr, root in the jail (slurmstepd too) would run what users wrote.
    assert "refusing jail sub-mount 'tools' at /usr/local/bin: /usr/local/bin is a system directory" in done.stderr


def test_submounts_are_nosuid_and_nodev_unless_allowed_and_stay_read_only(tree: Path) -> None:
    """A volume users (or root on another NFS client) can write must not carry setuid programs or device nodes into
    the jail: bound nosuid,nodev, unless listed in JAIL_SUBMOUNTS_SETUID; a read-only volume stays read-only."""
    jail, data = tree / "jail", tree / "submounts" / "data"
    script = f"""
        set -e
        mount --bind {data} {data} && mount -o remount,bind,ro {data}   # as the pod mounts a readOnly volume
        {SCRIPTS}/complement-jail
        {SCRIPTS}/complement-jail   # idempotent: the flags stay as they are
        findmnt -no OPTIONS --mountpoint {jail}/srv/data
        findmnt -no OPTIONS --mountpoint {jail}/home
    """
    done = in_namespace(script, env_for(tree, JAIL_SUBMOUNTS_SETUID="home"))

    assert done.returncode == 0, done.stderr
    data_options, home_options = (set(line.split(",")) for line in done.stdout.split())
    assert {"ro", "nosuid", "nodev"} <= data_options, data_options
    assert not {"nosuid", "nodev", "ro"} & home_options, home_options


def refused_submounts(tree: Path, submounts: str, prepare: str = "") -> tuple[subprocess.CompletedProcess[str], str]:
    """Runs complement-jail with these sub-mounts after `prepare` (shell, in the jail's directory); returns the run and
    what it listed as refused. The run must succeed whatever it refused: a bad path never crash-loops a pod."""
    jail = tree / "jail"
    (tree / "submounts" / "ds").mkdir(exist_ok=True)
    (tree / "submounts" / "ds" / "on-ds").write_text("the dataset")
    (tree / "submounts" / "scratch").mkdir(exist_ok=True)
    script = f"cd {jail} && {prepare}\n{SCRIPTS}/complement-jail\necho {MARK}; cat /proc/self/mountinfo"
    done = in_namespace(script, env_for(tree, JAIL_SUBMOUNTS=submounts))
    assert done.returncode == 0, done.stderr
    return done, (tree / "refused").read_text()


def test_a_relative_symlink_cannot_lead_a_sub_mount_onto_the_jails_etc(tree: Path) -> None:
    done, refused = refused_submounts(
        tree, "home:/home ds:/scratch/ds", "mkdir -m 0755 scratch && ln -s ../etc scratch/ds"
    )
    points = {p for p, _ in mount_points(done.stdout.split(MARK)[1])}
    assert refused == "ds /scratch/ds /scratch/ds is a symlink (to ../etc)\n"
    assert f"{tree}/jail/etc" not in points and f"{tree}/jail/home" in points  # the others still mount
    assert not (tree / "jail" / "etc" / "on-ds").exists()


def test_an_absolute_symlink_is_refused_not_a_crash(tree: Path) -> None:
    _, refused = refused_submounts(tree, "ds:/scratch/ds", "mkdir -m 0755 scratch && ln -s /etc scratch/ds")
    assert refused == "ds /scratch/ds /scratch/ds is a symlink (to /etc)\n"


def test_a_symlink_higher_up_the_path_is_refused(tree: Path) -> None:
    _, refused = refused_submounts(tree, "ds:/scratch/ds", "ln -s etc scratch")
    assert refused == "ds /scratch/ds /scratch is a symlink (to etc)\n"


def test_a_parent_a_user_can_write_is_refused(tree: Path) -> None:
    # /scratch world-writable (1777, like /tmp): a user could swap ds for a symlink between the check and the mount.
    _, refused = refused_submounts(tree, "ds:/scratch/ds", "mkdir -m 1777 scratch")
    assert refused == "ds /scratch/ds /scratch/ is writable by someone other than root (owner 0, mode 1777)\n"


def test_a_system_directory_of_the_jail_is_refused(tree: Path) -> None:
    _, refused = refused_submounts(tree, "ds:/etc/ds")
    assert refused == "ds /etc/ds /etc/ds is a system directory of the jail\n"


def test_nested_sub_mounts_mount_parent_first_whatever_their_order(tree: Path) -> None:
    done, refused = refused_submounts(tree, "ds:/scratch/ds scratch:/scratch")
    points = [p for p, _ in mount_points(done.stdout.split(MARK)[1])]
    jail = tree / "jail"
    assert refused == ""
    assert points.index(f"{jail}/scratch") < points.index(f"{jail}/scratch/ds"), points
    assert (
        "the dataset"
        in in_namespace(
            f"{SCRIPTS}/complement-jail && cat {jail}/scratch/ds/on-ds",
            env_for(tree, JAIL_SUBMOUNTS="ds:/scratch/ds scratch:/scratch"),
        ).stdout
    )


def test_with_a_directory_the_jail_gets_sssd_s_sockets_its_nss_module_and_sss_in_nsswitch(tree: Path) -> None:
    """spec.identity.directory (SSSD_CLIENT_DIR): the sidecar's sockets and caches at their paths in the jail, its
    libnss_sss at the jail's multiarch path, and the jail's own nsswitch.conf with sss added, bound over it (the file
    in the volume unchanged); a second run mounts nothing more."""
    jail = tree / "jail"
    (jail / "etc" / "nsswitch.conf").write_text("passwd:         files\ngroup:          files\nshadow:         files\n")
    client = tree / "sssd-client"
    client.mkdir()
    (client / "libnss_sss.so.2").write_text("the sidecar's module")
    shared = [tree / "sss" / "pipes", tree / "sss" / "mc"]
    for directory in shared:
        directory.mkdir(parents=True)
    (shared[0] / "nss").write_text("a socket")
    where = "dirname $(readlink -f /usr/lib/*-linux-gnu/libc.so.6)"
    libdir = subprocess.run(["bash", "-c", where], capture_output=True, text=True, check=True).stdout.strip()
    env = env_for(
        tree,
        SSSD_CLIENT_DIR=str(client),
        SSSD_SHARED_DIRS=" ".join(map(str, shared)),
        SSSD_JAIL_NSSWITCH=str(tree / "generated" / "nsswitch.conf"),
    )
    script = f"""
        set -e
        {SCRIPTS}/complement-jail
        echo {MARK}; cat /proc/self/mountinfo
        {SCRIPTS}/complement-jail
        echo {MARK}; cat /proc/self/mountinfo
        echo {MARK}
        cat {jail}/etc/nsswitch.conf
        cat {jail}{libdir}/libnss_sss.so.2; echo
        cat {jail}{shared[0]}/nss; echo
    """
    done = in_namespace(script, env)

    assert done.returncode == 0, done.stderr
    _, first, second, checks = done.stdout.split(MARK)
    points = {point for point, _ in mount_points(first)}
    j = str(jail)
    assert {f"{j}{shared[0]}", f"{j}{shared[1]}", f"{j}{libdir}/libnss_sss.so.2", f"{j}/etc/nsswitch.conf"} <= points
    assert mount_points(second) == mount_points(first)
    lines = checks.strip().splitlines()
    assert lines[:3] == ["passwd:         files sss", "group:          files sss", "shadow:         files"], lines
    assert "the sidecar's module" in lines and "a socket" in lines
    # The jail's own file is as it was; without SSSD_CLIENT_DIR nothing of this happens (the first test's tree).
    assert (jail / "etc" / "nsswitch.conf").read_text().startswith("passwd:         files\n")
