"""Per-job private /tmp and /dev/shm (spec.jail.privateTmp: chroot.so and job_container/jail, with the directories
slurmd's environment names, as a worker pod's does), on a real slurmd: each job sees only its own, every step and
sbcast of one job the same, and both are gone when the job ends.

An instance of its own (its slurmd has the environment; the fail-closed test swaps a base for a symlink).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from test.e2e.slurm.local_slurm import LocalSlurm, ensure_test_user, local_slurm_instance

pytestmark = pytest.mark.slurm

OTHER_USER = "slurmctl-e2e2"


@pytest.fixture(scope="module")
def job_dirs_slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSlurm]:
    state = tmp_path_factory.mktemp("job-dirs-slurm")
    for base in ("job-tmp", "job-shm"):
        (state / base).mkdir()
    users = (ensure_test_user(), ensure_test_user(OTHER_USER))
    env = {"SLURMCTL_JOB_TMP": str(state / "job-tmp"), "SLURMCTL_JOB_SHM": str(state / "job-shm")}
    with local_slurm_instance(state, jail_users=users, daemon_env=env) as slurm:
        yield slurm


def job_dirs(slurm: LocalSlurm, job_id: str) -> list[Path]:
    return [slurm.state_dir / base / job_id for base in ("job-tmp", "job-shm")]


def wait_for_job_dirs_removed(slurm: LocalSlurm, job_id: str) -> None:
    """The extern step removes both as it ends; when they stay, what is left and what slurmd and the job's
    slurmstepds said about the job (seen once in a full CI run, never alone)."""
    slurm.wait_until(
        lambda: not any(d.exists() for d in job_dirs(slurm, job_id)),
        what=f"job {job_id}'s private directories removed",
        explain=lambda: (
            f"left: {[str(d) for d in job_dirs(slurm, job_id) if d.exists()]}\n"
            f"slurmd on the job:\n{slurm.job_log(job_id)}"
        ),
    )


def test_concurrent_jobs_of_two_users_each_see_only_their_own_tmp_and_shm(job_dirs_slurm: LocalSlurm) -> None:
    slurm = job_dirs_slurm
    # What every job on the node shared before: the jail's own /tmp (here the node's /tmp, bound into the jail).
    shared = Path("/tmp") / f"shared-{uuid.uuid4().hex[:8]}"
    shared.write_text("anyone can see this\n")
    tag = uuid.uuid4().hex[:8]
    jobs: dict[str, str] = {}
    users = (slurm.user, OTHER_USER)
    try:
        for me, other in (users, users[::-1]):
            home = Path("/home") / me
            # Each job leaves its secret, says so, and looks only once the other job has left its own: both run
            # at once (the waits have a deadline, so a job that never meets the other ends and the test says why).
            script = f"""#!/bin/sh
echo {me} > /tmp/secret-{me}; echo {me} > /dev/shm/secret-{me}; chmod 644 /tmp/secret-{me} /dev/shm/secret-{me}
touch {home}/{tag}.ready
i=0; while [ ! -e /home/{other}/{tag}.ready ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done
[ -e /home/{other}/{tag}.ready ] || {{ echo "never ran beside {other}'s job"; exit 3; }}
ls -A /tmp > {home}/{tag}.tmp; ls -A /dev/shm > {home}/{tag}.shm
cat /tmp/secret-{me} /dev/shm/secret-{me} > {home}/{tag}.mine
grep nosuid /proc/self/mountinfo | grep nodev | awk '{{print $5}}' > {home}/{tag}.mounts
touch {home}/{tag}.looked
i=0; while [ ! -e /home/{other}/{tag}.looked ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done
"""
            jobs[me] = slurm.run(
                "sbatch", "--parsable", f"--uid={me}", "-n1", f"--output={home}/{tag}.out", input=script
            ).stdout.strip()
            # Neither ends before the other has looked, so each looked while the other ran.
        for me in users:
            slurm.wait_until(
                lambda me=me: not slurm.run("squeue", "-h", "-j", jobs[me], "-o", "%T").stdout.strip(),
                timeout=240,
                what=f"{me}'s job {jobs[me]} to end",
            )
        for me in users:
            home = slurm.jail / "home" / me
            out = (home / f"{tag}.out").read_text()
            assert out == "", out
            assert (home / f"{tag}.tmp").read_text().split() == [f"secret-{me}"]
            assert (home / f"{tag}.shm").read_text().split() == [f"secret-{me}"]
            assert (home / f"{tag}.mine").read_text() == f"{me}\n{me}\n"
            assert {"/tmp", "/dev/shm"} <= set((home / f"{tag}.mounts").read_text().split())
        # Gone with the job: the extern step removes both directories as it ends.
        for job_id in jobs.values():
            wait_for_job_dirs_removed(slurm, job_id)
        assert shared.read_text() == "anyone can see this\n"
    finally:
        for job_id in jobs.values():
            slurm.run("scancel", job_id, check=False)
        shared.unlink(missing_ok=True)


def test_steps_and_sbcast_of_one_job_share_its_tmp(job_dirs_slurm: LocalSlurm, tmp_path: Path) -> None:
    """A job's /tmp is the job's, not the step's: what one step writes there, the next step reads, and sbcast (written
    by slurmd through job_container/jail) lands there too."""
    slurm = job_dirs_slurm
    payload = tmp_path / "payload"
    payload.write_text("broadcast\n")
    script = f"""set -e
echo "$SLURM_JOB_ID" > {tmp_path}/job-id
srun -n1 sh -c 'echo from-step-0 > /tmp/note'
srun -n1 cat /tmp/note
sbcast {payload} /tmp/bcast
srun -n1 cat /tmp/bcast
"""
    out = slurm.run("salloc", "-N1", "sh", "-c", script).stdout
    assert out.split() == ["from-step-0", "broadcast"], out
    assert not (slurm.jail / "tmp" / "note").exists() and not Path("/tmp/note").exists()
    job_id = (tmp_path / "job-id").read_text().strip()
    wait_for_job_dirs_removed(slurm, job_id)


def test_a_job_directory_base_that_is_a_symlink_fails_the_step(job_dirs_slurm: LocalSlurm, tmp_path: Path) -> None:
    """Fail closed: when the job's /dev/shm cannot be made private (its base replaced by a symlink), the step does not
    run at all, rather than run with the node's shared /dev/shm."""
    slurm = job_dirs_slurm
    base = slurm.state_dir / "job-shm"
    aside = slurm.state_dir / "job-shm.aside"
    ran = tmp_path / f"ran-{uuid.uuid4().hex[:8]}"
    base.rename(aside)
    try:
        base.symlink_to(tmp_path)
        proc = slurm.run("srun", "/bin/touch", str(ran), check=False)
        assert proc.returncode != 0, proc.stdout
        assert not ran.exists(), "the step ran without its private /dev/shm"
        assert f"step 'job-dirs' failed: {base}: Not a directory" in slurm.log("slurmd"), slurm.log_tail("slurmd")
    finally:
        base.unlink(missing_ok=True)
        aside.rename(base)
    assert slurm.run("srun", "/bin/true", check=False).returncode == 0, slurm.log_tail("slurmd")
