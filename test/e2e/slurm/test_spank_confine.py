"""What a job task of a real slurmd runs with (native/spank_chroot/confine.c and images/scripts/complement-jail): root
inside the jail is not root of the node. The worker container is privileged, so without these a root job, or a user
who reaches a setuid program, would hold the node."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from test.e2e.slurm.local_slurm import LocalSlurm, local_slurm_instance

pytestmark = pytest.mark.slurm

# Each row: (attempt, shell command that exits 0 only if the attempt worked). Run as root inside a job.
ROOT_ROWS = (
    ("mount a filesystem", "mkdir -p /tmp/m.$$ && mount -t tmpfs x /tmp/m.$$"),
    ("create a device node", "mknod /tmp/d.$$ b 7 0"),
    ("write to /sys", "echo 1 > /sys/kernel/mm/ksm/run"),
    ("create a cgroup", "mkdir /sys/fs/cgroup/slurmctl-escape.$$ || mkdir /sys/fs/cgroup/*/slurmctl-escape.$$"),
    ("become root of a new user namespace", "unshare -U true"),
    ("leave the jail with chroot", "mkdir -p /tmp/c.$$ && chroot /tmp/c.$$ /bin/true"),
    ("open a raw disk", "ls /dev/sd? /dev/vd? /dev/nvme?n1 /dev/mem /dev/kmsg"),
)


def attempts(slurm: LocalSlurm, rows: tuple[tuple[str, str], ...], user: str | None = None) -> dict[str, str]:
    """attempt -> "refused" or "OPEN: <output>", each row in one job step."""
    script = "\n".join(
        f"if out=$( ({command}) 2>&1 </dev/null); then echo 'ROW|{attempt}|OPEN|'$out; "
        f"else echo 'ROW|{attempt}|refused|'; fi"
        for attempt, command in rows
    )
    out = slurm.run("srun", "sh", "-c", script, user=user).stdout
    seen = {}
    for line in out.splitlines():
        if line.startswith("ROW|"):
            _, attempt, verdict, detail = line.split("|", 3)
            seen[attempt] = verdict if verdict == "refused" else f"{verdict}: {detail}"
    assert list(seen) == [attempt for attempt, _ in rows], out
    return seen


def status(slurm: LocalSlurm, user: str | None = None) -> dict[str, str]:
    """The task's /proc/self/status lines of interest."""
    out = slurm.run("srun", "cat", "/proc/self/status", user=user).stdout
    return dict(re.findall(r"^(NoNewPrivs|Cap\w+|Seccomp):\s*(\S+)$", out, re.MULTILINE))


def test_a_root_task_has_no_new_privileges_and_no_capability(local_slurm: LocalSlurm) -> None:
    seen = status(local_slurm)
    assert seen["NoNewPrivs"] == "1", seen
    assert {seen[k] for k in ("CapBnd", "CapEff", "CapPrm", "CapInh", "CapAmb")} == {"0000000000000000"}, seen
    assert seen["Seccomp"] == "2", seen  # the filter refusing new user namespaces


def test_a_users_task_has_no_new_privileges(local_slurm: LocalSlurm) -> None:
    seen = status(local_slurm, user=local_slurm.user)
    assert (seen["NoNewPrivs"], seen["CapBnd"], seen["Seccomp"]) == ("1", "0000000000000000", "2"), seen


def test_root_in_a_job_is_refused_every_way_to_the_node(local_slurm: LocalSlurm) -> None:
    seen = attempts(local_slurm, ROOT_ROWS)
    print("\n" + "\n".join(f"root job | {attempt:40} | refused | {verdict}" for attempt, verdict in seen.items()))
    assert set(seen.values()) == {"refused"}, seen


def test_the_jail_has_a_minimal_dev_and_users_see_only_their_own_processes(local_slurm: LocalSlurm) -> None:
    dev = set(local_slurm.run("srun", "ls", "/dev").stdout.split())
    assert {"null", "zero", "urandom", "tty", "pts", "ptmx", "shm", "fd"} <= dev, dev
    assert not dev & {"mem", "kmsg", "port", "loop0", "sda", "vda", "nvme0n1"}, dev
    # pid 1 (the node's init, root's) is invisible to a user: hidepid=invisible on the jail's /proc.
    out = local_slurm.run("srun", "sh", "-c", "test -e /proc/1 && echo seen || echo hidden", user=local_slurm.user)
    assert out.stdout.strip() == "hidden"
    assert local_slurm.run("srun", "sh", "-c", "test -e /proc/1 && echo seen").stdout.strip() == "seen"


@pytest.fixture(scope="module")
def privileged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSlurm]:
    """The admin's opt-ins, which the worker pod names to slurmd: privileged jobs, user namespaces (container steps)."""
    env = {"SLURMCTL_PRIVILEGED_JOBS": "yes", "SLURMCTL_USER_NAMESPACES": "yes"}
    with local_slurm_instance(tmp_path_factory.mktemp("local-slurm-privileged"), daemon_env=env) as slurm:
        yield slurm


def test_the_admins_opt_ins_keep_privileges_and_lift_the_filter_but_sys_stays_read_only(privileged: LocalSlurm) -> None:
    seen = status(privileged)
    assert (seen["NoNewPrivs"], seen["Seccomp"]) == ("0", "0") and seen["CapBnd"] != "0000000000000000", seen
    assert attempts(privileged, (("write to /sys", dict(ROOT_ROWS)["write to /sys"]),)) == {"write to /sys": "refused"}


def test_a_misspelt_opt_in_fails_the_step_naming_it(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Neither loosened nor tightened silently: the step fails, and slurmd's log names the variable."""
    env = {"SLURMCTL_PRIVILEGED_JOBS": "true"}
    with local_slurm_instance(tmp_path_factory.mktemp("local-slurm-typo"), daemon_env=env) as slurm:
        done = slurm.run("srun", "true", check=False)
        assert done.returncode != 0
        log = "".join(p.read_text(errors="replace") for p in slurm.state_dir.rglob("slurmd*.log"))
        assert "SLURMCTL_PRIVILEGED_JOBS=true must be yes or no" in log, log[-2000:]
