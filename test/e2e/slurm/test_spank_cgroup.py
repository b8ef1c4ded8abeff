"""The chroot plugin together with the cgroup plugins (ProctrackType=proctrack/cgroup, TaskPlugin=task/cgroup and
task/affinity), as the operator renders them, on this host's cgroup layout with CgroupPlugin=autodetect.

Slurm 24.11's autodetect picks cgroup/v1 on a legacy or hybrid host (/sys/fs/cgroup a tmpfs with v1 hierarchies) and
cgroup/v2 on a unified one; forcing cgroup/v2 on a hybrid host kills slurmd at start.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from test.e2e.slurm.local_slurm import LocalSlurm, ensure_test_user, local_slurm_instance

pytestmark = pytest.mark.slurm

CGROUP_CONF = "CgroupPlugin=autodetect\nIgnoreSystemd=yes\nConstrainCores=yes\n"


def fs_types() -> dict[str, str]:
    """Mount point -> filesystem type, from this process's mount table."""
    types = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields, _, tail = line.partition(" - ")
        types[fields.split()[4]] = tail.split()[0]
    return types


def expected_cgroup_plugin() -> str:
    """What autodetect must choose here (Slurm's own rule: cgroup2 at /sys/fs/cgroup, or at its systemd/ when that
    is a tmpfs, means v2)."""
    types = fs_types()
    top = types.get("/sys/fs/cgroup")
    if top == "cgroup2" or (top == "tmpfs" and types.get("/sys/fs/cgroup/systemd") == "cgroup2"):
        return "cgroup/v2"
    assert top == "tmpfs", f"no cgroup filesystem at /sys/fs/cgroup ({top})"
    return "cgroup/v1"


def job_cgroup_dirs(proc_cgroup: str, job_id: str) -> list[Path]:
    """The host directories of the job's cgroups named in a task's /proc/self/cgroup (freezer and cpuset on v1)."""
    dirs = []
    for line in proc_cgroup.splitlines():
        _, controllers, path = line.split(":", 2)
        if f"/job_{job_id}/" not in path:
            continue
        job_path = path[: path.index(f"/job_{job_id}/") + len(f"/job_{job_id}")]
        base = Path("/sys/fs/cgroup") if not controllers else Path("/sys/fs/cgroup") / controllers.split(",")[0]
        dirs.append(base / job_path.lstrip("/"))
    return dirs


@pytest.fixture(scope="module")
def cgroup_slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSlurm]:
    user = ensure_test_user()
    with local_slurm_instance(
        tmp_path_factory.mktemp("cgroup-slurm"),
        jail_users=(user,),
        proctrack="proctrack/cgroup",
        task_plugin="task/cgroup,task/affinity",
        cgroup_conf=CGROUP_CONF,
    ) as slurm:
        yield slurm


def test_autodetect_loads_the_cgroup_plugin_this_host_supports(cgroup_slurm: LocalSlurm) -> None:
    plugin = expected_cgroup_plugin()
    version = plugin.split("/")[1]
    assert f"{plugin}: init: Cgroup {version} plugin loaded" in cgroup_slurm.log("slurmd")
    assert "proctrack/cgroup" in cgroup_slurm.run("scontrol", "show", "config").stdout


def test_step_runs_in_the_jail_inside_its_job_cgroup_and_the_cgroup_goes_away(cgroup_slurm: LocalSlurm) -> None:
    out = cgroup_slurm.run(
        "srun", "sh", "-c", "echo $SLURM_JOB_ID; cat /etc/slurmctl-jail; cat /proc/self/cgroup", user=cgroup_slurm.user
    ).stdout
    job_id, jail_marker, proc_cgroup = out.split("\n", 2)
    assert jail_marker == "slurmctl test jail"
    assert f"/job_{job_id}/step_0" in proc_cgroup, proc_cgroup
    dirs = job_cgroup_dirs(proc_cgroup, job_id)
    assert dirs, proc_cgroup

    # slurmstepd removes them when the job ends; on a loaded 2-core machine that took over 30 s once (CI with a
    # benchmark beside it), while a leak would never end.
    def gone() -> bool:
        return not any(d.exists() for d in dirs)

    def left() -> list[str]:
        return sorted(str(c) for d in dirs if d.exists() for c in d.rglob("*") if c.is_dir())

    try:
        cgroup_slurm.wait_until(
            gone, timeout=90, what=f"the cgroups of job {job_id} to be removed: {[str(d) for d in dirs]}"
        )
    except AssertionError:
        # Slurm 24.11's own race, not the jail's: the extern step's slurmstepd shuts X11 forwarding down in a worker
        # thread as it ends, setting the whole process's effective uid to the user for a moment; its cgroup cleanup
        # meeting that moment cannot move itself out ("Unable to move pid ... to root cgroup"), and the extern step's
        # cgroup (never the jailed step's) stays. CI runs 46 and 47 met it. Anything else left is a failure.
        said = cgroup_slurm.job_log(job_id)
        upstream = f"[{job_id}.extern]" in said and "Unable to move pid" in said
        if not (upstream and left() and all("/step_extern" in c for c in left())):
            raise AssertionError(f"job {job_id}'s cgroups stay: {left()}\nslurmd on the job:\n{said}") from None
        warnings.warn(f"Slurm's extern-step cgroup race left {left()} (job {job_id})", stacklevel=1)


def test_task_affinity_binds_a_one_cpu_step_to_one_cpu(cgroup_slurm: LocalSlurm) -> None:
    out = cgroup_slurm.run("srun", "-n1", "-c1", "grep", "Cpus_allowed_list", "/proc/self/status").stdout
    allowed = out.split(":", 1)[1].strip()
    assert allowed.isdigit(), out


def test_scancel_kills_every_process_of_a_jailed_batch_job(cgroup_slurm: LocalSlurm) -> None:
    # An orphan (its parent, a subshell, has exited) that a parent-pid tracker loses: the cgroup holds it.
    name = uuid.uuid4().hex[:8]
    pid_file = cgroup_slurm.jail / "data" / f"{name}.pid"
    script = f"#!/bin/sh\n(sleep 300 & echo $! > /data/{name}.pid)\nsleep 300\n"
    job_id = cgroup_slurm.run("sbatch", "--parsable", "--output=/dev/null", input=script).stdout.strip()
    try:
        cgroup_slurm.wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), what="the job's child")
        pid = int(pid_file.read_text())
        assert Path(f"/proc/{pid}/root/etc/slurmctl-jail").exists(), "the child does not run in the jail"
        assert f"/job_{job_id}/step_batch" in Path(f"/proc/{pid}/cgroup").read_text()
    finally:
        cgroup_slurm.run("scancel", job_id, check=False)
    cgroup_slurm.wait_until(lambda: not Path(f"/proc/{pid}").exists(), timeout=30, what=f"pid {pid} to be killed")
    cgroup_slurm.wait_until(
        lambda: cgroup_slurm.node_state() == "idle", timeout=30, what="node idle after the cancelled job"
    )
