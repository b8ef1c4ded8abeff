"""The chroot SPANK plugin loaded by a real slurmd: what jobs see, what they write, and what stays on the host."""

from __future__ import annotations

import getpass
import os
import pwd
import tempfile
import uuid
from collections import Counter
from pathlib import Path

import pytest

from test.e2e.slurm.local_slurm import REPO, LocalSlurm

pytestmark = pytest.mark.slurm


def marker(slurm: LocalSlurm) -> str:
    return (slurm.jail / "etc" / "slurmctl-jail").read_text()


def mounts(pid: int | str) -> Counter[tuple[str, str]]:
    """(mount point, filesystem type) of every mount the process sees."""
    table: Counter[tuple[str, str]] = Counter()
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        fields, _, tail = line.partition(" - ")
        table[(fields.split()[4], tail.split()[0])] += 1
    return table


def step_pids(slurm: LocalSlurm, job_id: str, step: str) -> list[int]:
    """PIDs of `step` ("extern", "batch", ...) of a running job, from `scontrol listpids` on the node."""
    out = slurm.run("scontrol", "listpids", job_id, check=False).stdout
    pids = []
    for line in out.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 3 and fields[2] == step and fields[0].isdigit() and int(fields[0]) > 0:
            pids.append(int(fields[0]))
    return pids


def test_srun_reads_the_jail_marker(local_slurm: LocalSlurm) -> None:
    assert not Path("/etc/slurmctl-jail").exists(), "the host must not have the marker, or this proves nothing"
    out = local_slurm.run("srun", "cat", "/etc/slurmctl-jail").stdout
    assert out == marker(local_slurm)


def test_srun_lists_the_jail_root_not_the_hosts(local_slurm: LocalSlurm) -> None:
    listed = set(local_slurm.run("srun", "ls", "/").stdout.split())
    jail_root = {p.name for p in local_slurm.jail.iterdir() if not p.name.startswith(".")}
    host_root = {name for name in os.listdir("/") if not name.startswith(".")}
    assert jail_root != host_root
    assert listed == jail_root


def jail_view(slurm: LocalSlurm) -> set[str]:
    """The mount points a process whose root is the jail can have: "/" and what complement-jail mounted inside it
    (as seen by slurmd), at their paths inside the jail."""
    jail = str(slurm.jail)
    points = {point for point, _ in mounts(slurm.pid("slurmd"))}
    return {"/"} | {point[len(jail) :] for point in points if point.startswith(jail + "/")}


def test_steps_see_the_jail_and_nothing_of_the_node(local_slurm: LocalSlurm) -> None:
    out = local_slurm.run("srun", "cat", "/proc/self/mountinfo").stdout
    seen: Counter[tuple[str, str]] = Counter()
    for line in out.splitlines():
        fields, _, tail = line.partition(" - ")
        seen[(fields.split()[4], tail.split()[0])] += 1
    points = {point for point, _ in seen}
    # The node's own mounts (here the repository, bound into Slurm's root filesystem) are not reachable ...
    node_only = {point for point, _ in mounts(local_slurm.pid("slurmd"))} - {str(local_slurm.jail)}
    assert str(REPO) in node_only, "slurmd sees the repository, or this proves nothing"
    assert str(REPO) not in points, out
    # ... only the jail and what complement-jail put into it, with a proc of this PID namespace at /proc.
    assert points <= jail_view(local_slurm), points - jail_view(local_slurm)
    assert ("/proc", "proc") in seen, out


def test_step_starts_in_its_working_directory_inside_the_jail(local_slurm: LocalSlurm) -> None:
    assert not Path("/data").exists(), "the host must not have /data, or this proves nothing"
    assert local_slurm.run("srun", "--chdir=/data", "pwd").stdout.strip() == "/data"


def test_a_working_directory_only_the_node_has_is_not_entered(local_slurm: LocalSlurm) -> None:
    # The repository exists in Slurm's root filesystem, not in the jail: slurmstepd, already inside the jail, cannot
    # enter it and starts the step in the jail's /tmp instead (Slurm's own fallback, with its message).
    assert (REPO / "hack").is_dir()
    assert not REPO.is_relative_to("/tmp"), f"{REPO} is under /tmp, which the jail shares: this proves nothing"
    proc = local_slurm.run("srun", f"--chdir={REPO}", "sh", "-c", "pwd; cat /etc/slurmctl-jail; ls hack", check=False)
    assert proc.stdout.splitlines()[:2] == ["/tmp", marker(local_slurm).strip()], proc.stdout + proc.stderr
    assert f"couldn't chdir to `{REPO}'" in proc.stderr, proc.stderr
    assert proc.returncode != 0, "ls found the node's directory from inside the jail"


def test_sbatch_writes_land_in_the_jail_directory_on_the_host(local_slurm: LocalSlurm) -> None:
    name = f"sbatch-{uuid.uuid4().hex[:8]}"
    script = f"#!/bin/sh\necho written by job $SLURM_JOB_ID > /data/{name}\n"
    out = local_slurm.state_dir / f"{name}.out"
    job_id = local_slurm.run("sbatch", "--wait", "--parsable", f"--output={out}", input=script).stdout.strip()
    assert (local_slurm.jail / "data" / name).read_text() == f"written by job {job_id}\n", out.read_text()
    assert not Path("/data").exists()


def stepd_pids(job_id: str, step: str) -> list[int]:
    """PIDs of the slurmstepd of `step` of a job, by the title it gives itself (`slurmstepd: [JOB.STEP]`)."""
    title = f"slurmstepd: [{job_id}.{step}]".encode()
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if (proc / "cmdline").read_bytes().rstrip(b"\0") == title:
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def test_extern_step_stays_in_the_hosts_namespace(local_slurm: LocalSlurm) -> None:
    job_id = local_slurm.run("sbatch", "--parsable", "--output=/dev/null", "--wrap", "sleep 120").stdout.strip()
    try:
        found: dict[str, list[int]] = {}

        def both_steps_running() -> bool:
            # The extern step's slurmstepd itself, and its `sleep` child where Slurm starts one (24.11; 26.05's extern
            # step runs no process of its own, `scontrol listpids` shows it as -1).
            found.update(
                extern=stepd_pids(job_id, "extern") + step_pids(local_slurm, job_id, "extern"),
                batch=step_pids(local_slurm, job_id, "batch"),
            )
            return bool(found["extern"] and found["batch"])

        local_slurm.wait_until(both_steps_running, what=f"extern and batch steps of job {job_id}")
        host_ns = os.readlink(f"/proc/{local_slurm.pid('slurmd')}/ns/mnt")
        for pid in found["extern"]:
            assert os.readlink(f"/proc/{pid}/ns/mnt") == host_ns
            assert not Path(f"/proc/{pid}/root/etc/slurmctl-jail").exists()
        # The same probes tell a jailed process apart, so the extern result is not vacuous.
        for pid in found["batch"]:
            assert os.readlink(f"/proc/{pid}/ns/mnt") != host_ns
            assert Path(f"/proc/{pid}/root/etc/slurmctl-jail").exists()
    finally:
        local_slurm.run("scancel", job_id, check=False)


def test_hundred_sruns_leak_no_mounts_and_slurmd_stays_healthy(local_slurm: LocalSlurm) -> None:
    slurmd = local_slurm.pid("slurmd")
    # slurmd sees the machine's mounts: those of other test clusters running beside this one (a pods cluster's
    # sandboxes, another worker's local Slurm, all under pytest's temporary directories) come and go on their own.
    others = Path(tempfile.gettempdir()) / f"pytest-of-{getpass.getuser()}"

    def ours(mount: tuple[str, str]) -> bool:
        point = Path(mount[0])
        return not point.is_relative_to(others) or point.is_relative_to(local_slurm.state_dir)

    before = Counter({m: n for m, n in mounts(slurmd).items() if ours(m)})
    for i in range(100):
        local_slurm.run("srun", "--quiet", "--job-name", f"leak-{i}", "true")
    after = Counter({m: n for m, n in mounts(slurmd).items() if ours(m)})
    # Every step entered the jail in a namespace of its own: slurmd's mounts (the jail's completion included) are
    # exactly what they were.
    assert after == before, f"mounts added: {after - before}, removed: {before - after}"
    assert local_slurm.pid("slurmd") == slurmd and Path(f"/proc/{slurmd}").exists()
    local_slurm.wait_until(lambda: local_slurm.node_state() == "idle", what="node idle after 100 steps")
    assert local_slurm.run("srun", "cat", "/etc/slurmctl-jail").stdout == marker(local_slurm)


def test_job_of_a_non_root_user_sees_the_jail_and_owns_its_files(local_slurm: LocalSlurm) -> None:
    user = pwd.getpwnam(local_slurm.user)
    assert user.pw_uid != 0
    home = Path("/home") / user.pw_name
    name = uuid.uuid4().hex[:8]
    script = f"#!/bin/sh\nid -u > {home}/{name}.id\nls / > {home}/{name}.ls\ncat /etc/slurmctl-jail > {home}/{name}.m\n"
    local_slurm.run("sbatch", "--wait", f"--uid={user.pw_name}", "--output=/dev/null", input=script)
    on_host = local_slurm.jail / "home" / user.pw_name
    for suffix in ("id", "ls", "m"):
        assert (on_host / f"{name}.{suffix}").stat().st_uid == user.pw_uid
    assert (on_host / f"{name}.id").read_text().strip() == str(user.pw_uid)
    assert set((on_host / f"{name}.ls").read_text().split()) == {
        p.name for p in local_slurm.jail.iterdir() if not p.name.startswith(".")
    }
    assert (on_host / f"{name}.m").read_text() == marker(local_slurm)


def test_srun_as_a_non_root_user_runs_in_the_jail_as_that_user(local_slurm: LocalSlurm) -> None:
    # srun has no --uid since Slurm 23.02: users submit as themselves (here with runuser, as sshd would log them in).
    user = pwd.getpwnam(local_slurm.user)
    assert user.pw_uid != 0
    name = uuid.uuid4().hex[:8]
    home = Path("/home") / user.pw_name
    out = local_slurm.run(
        "srun", "sh", "-c", f"id -u; cat /etc/slurmctl-jail; echo x > {home}/{name}", user=user.pw_name
    ).stdout
    assert out == f"{user.pw_uid}\n{marker(local_slurm)}"
    assert (local_slurm.jail / "home" / user.pw_name / name).stat().st_uid == user.pw_uid


def test_batch_output_files_and_working_directory_are_the_jails(local_slurm: LocalSlurm) -> None:
    """slurmstepd opens `sbatch -o/-e`, creates their directories and enters `--chdir` inside the jail: a directory
    only the jail has works, and nothing appears at those paths on the node."""
    user = pwd.getpwnam(local_slurm.user)
    name = uuid.uuid4().hex[:8]
    run = local_slurm.jail / "data" / name
    run.mkdir()
    os.chown(run, user.pw_uid, user.pw_gid)  # a directory the user made in the jail
    assert not Path("/data").exists(), "the node must not have /data, or this proves nothing"
    local_slurm.run(
        "sbatch", "--wait", f"--uid={user.pw_name}", f"--chdir=/data/{name}", f"--output=/data/{name}/out/%j.out",
        "--error=err.txt", input="#!/bin/sh\npwd; cat /etc/slurmctl-jail; echo oops >&2\n",
    )  # fmt: skip
    (out,) = (run / "out").iterdir()
    assert out.read_text() == f"/data/{name}\n{marker(local_slurm)}"
    assert out.stat().st_uid == user.pw_uid
    assert (run / "err.txt").read_text() == "oops\n"
    assert not Path("/data").exists()


def test_sbcast_writes_into_the_jail(local_slurm: LocalSlurm, tmp_path: Path) -> None:
    """sbcast's files are written by slurmd itself, outside any step: job_container/jail moves the writer into the
    jail, so the file is where the job will look for it."""
    name = uuid.uuid4().hex[:8]
    source = tmp_path / "payload"
    source.write_text(f"payload {name}\n")
    source.chmod(0o644)
    local_slurm.run("salloc", "-N1", "sbcast", str(source), f"/data/{name}.bcast")
    assert (local_slurm.jail / "data" / f"{name}.bcast").read_text() == f"payload {name}\n"
    assert not Path(f"/data/{name}.bcast").exists()
