"""Per-job size limits on the private /tmp and /dev/shm (spec.workers[].jobTmp: SLURMCTL_JOB_TMP_SIZE and
SLURMCTL_JOB_SHM_SIZE in slurmd's environment, as a worker pod's has them), on a real slurmd: each job's /tmp and
/dev/shm is a tmpfs of that size shared by its steps; writing past it fails in the job alone with ENOSPC ("No space
left on device" in the job's own output), the node stays IDLE and the next job runs with an empty /tmp; the tmpfs is
unmounted and its directory removed when the job ends.

An instance of its own (its slurmd has the environment).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from test.e2e.slurm.local_slurm import LocalSlurm, ensure_test_user, local_slurm_instance

pytestmark = pytest.mark.slurm

MIB = 1024 * 1024
TMP_SIZE = 8 * MIB
SHM_SIZE = 4 * MIB


@pytest.fixture(scope="module")
def sized_slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSlurm]:
    state = tmp_path_factory.mktemp("job-tmp-size-slurm")
    for base in ("job-tmp", "job-shm"):
        (state / base).mkdir()
    env = {
        "SLURMCTL_JOB_TMP": str(state / "job-tmp"),
        "SLURMCTL_JOB_SHM": str(state / "job-shm"),
        "SLURMCTL_JOB_TMP_SIZE": str(TMP_SIZE),
        "SLURMCTL_JOB_SHM_SIZE": str(SHM_SIZE),
    }
    with local_slurm_instance(state, jail_users=(ensure_test_user(),), daemon_env=env) as slurm:
        yield slurm


def job_mounts(slurm: LocalSlurm, job_id: str) -> list[str]:
    """The job's tmpfs mounts in slurmd's mount namespace (where every slurmstepd of the node starts)."""
    info = Path(f"/proc/{slurm.pid('slurmd')}/mountinfo").read_text()
    return [line for line in info.splitlines() if f"/job-tmp/{job_id} " in line or f"/job-shm/{job_id} " in line]


def wait_for_job_gone(slurm: LocalSlurm, job_id: str) -> None:
    dirs = [slurm.state_dir / base / job_id for base in ("job-tmp", "job-shm")]
    slurm.wait_until(
        lambda: not job_mounts(slurm, job_id) and not any(d.exists() for d in dirs),
        what=f"job {job_id}'s tmpfs unmounted and its directories removed",
        explain=lambda: f"mounts: {job_mounts(slurm, job_id)}\nslurmd on the job:\n{slurm.job_log(job_id)}",
    )


def state_after_job(slurm: LocalSlurm) -> str:
    """The node's state once Slurm is done completing the job that ended: slurmctld hears of the end a moment after
    the job's tmpfs is gone, and the node said `completing` meanwhile (seen once in CI, on the 26.05 line)."""
    slurm.wait_until(lambda: slurm.node_state() != "completing", what="the node to finish completing the job")
    return slurm.node_state()


def run_batch(slurm: LocalSlurm, script: str, out: Path) -> tuple[str, str]:
    """Submit `script` as the test user, wait for it to end; its job id and state."""
    job_id = slurm.run(
        "sbatch", "--parsable", f"--uid={slurm.user}", "-N1", f"--output={out}", input=script
    ).stdout.strip()
    slurm.wait_until(
        lambda: not slurm.run("squeue", "-h", "-j", job_id, "-o", "%T").stdout.strip(),
        timeout=120,
        what=f"job {job_id} to end",
    )
    state = slurm.run("scontrol", "-o", "show", "job", job_id, check=False).stdout
    return job_id, state


def test_a_job_writing_past_its_tmp_size_fails_alone_with_enospc_and_the_next_job_runs(sized_slurm: LocalSlurm) -> None:
    slurm = sized_slurm
    home = slurm.jail / "home" / slurm.user
    tag = uuid.uuid4().hex[:8]
    # A batch job: `df` says the sizes it sees; 10 MiB do not fit in its 8 MiB /tmp, 6 MiB not in its 4 MiB /dev/shm.
    script = """#!/bin/sh
df -k /tmp /dev/shm | awk 'NR > 1 {print "size", $6, $2}'
dd if=/dev/zero of=/tmp/fill bs=1M count=10 || echo "tmp: failed"
dd if=/dev/zero of=/dev/shm/fill bs=1M count=6 || echo "shm: failed"
dd if=/dev/zero of=/tmp/fill bs=1M count=10
"""
    job_id, state = run_batch(slurm, script, Path("/home") / slurm.user / f"{tag}.out")
    output = (home / f"{tag}.out").read_text()
    assert "JobState=FAILED" in state, f"{state}\n{output}"
    assert f"size /tmp {TMP_SIZE // 1024}" in output, output
    assert f"size /dev/shm {SHM_SIZE // 1024}" in output, output
    assert "dd: error writing '/tmp/fill': No space left on device" in output, output
    assert "dd: error writing '/dev/shm/fill': No space left on device" in output, output
    assert "tmp: failed" in output and "shm: failed" in output, output
    # The node did not fail with the job: it takes the next one at once.
    assert state_after_job(slurm) == "idle", slurm.log_tail("slurmd")
    wait_for_job_gone(slurm, job_id)

    # The next job has the whole size again, in a new empty /tmp.
    after = f"{tag}-after"
    script = """#!/bin/sh
ls -A /tmp | wc -l | sed 's/^ */entries /'
dd if=/dev/zero of=/tmp/fill bs=1M count=7 2>&1 | grep -c 'records out' | sed 's/^/fits /'
"""
    next_id, state = run_batch(slurm, script, Path("/home") / slurm.user / f"{after}.out")
    output = (home / f"{after}.out").read_text()
    assert "JobState=COMPLETED" in state, f"{state}\n{output}"
    assert output.split() == ["entries", "0", "fits", "1"], output
    wait_for_job_gone(slurm, next_id)
    assert state_after_job(slurm) == "idle"


def test_the_steps_of_a_job_share_one_tmp_size(sized_slurm: LocalSlurm) -> None:
    """The limit is the job's, not each step's: 6 MiB written by one step leave 2 of the 8 for the next."""
    slurm = sized_slurm
    script = """echo "job $SLURM_JOB_ID"
srun -n1 dd if=/dev/zero of=/tmp/first bs=1M count=6 2>&1 | grep -c 'records out' | sed 's/^/first-step-ok /'
srun -n1 dd if=/dev/zero of=/tmp/second bs=1M count=6
echo "second step: $?"
srun -n1 ls /tmp
"""
    proc = slurm.run("salloc", "-N1", "sh", "-c", script, user=slurm.user, check=False)
    output = proc.stdout + proc.stderr
    assert "first-step-ok 1" in output, output
    assert "dd: error writing '/tmp/second': No space left on device" in output, output
    assert "second step: 0" not in output, output
    assert "first\nsecond" in proc.stdout, output
    job_id = proc.stdout.split("job ", 1)[1].split()[0]
    wait_for_job_gone(slurm, job_id)
    assert state_after_job(slurm) == "idle"


def test_the_jobs_tmpfs_is_on_the_node_side_while_it_runs_and_gone_after(sized_slurm: LocalSlurm) -> None:
    """Mounted once per job in slurmd's mount namespace (where each step and sbcast's writer find it), of the sizes
    slurmd's environment gives, nosuid and nodev; unmounted when the job ends."""
    slurm = sized_slurm
    home = slurm.jail / "home" / slurm.user
    tag = uuid.uuid4().hex[:8]
    script = f"""#!/bin/sh
touch /home/{slurm.user}/{tag}.ready
i=0; while [ ! -e /home/{slurm.user}/{tag}.go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
"""
    job_id = slurm.run(
        "sbatch", "--parsable", f"--uid={slurm.user}", "-N1", f"--output=/home/{slurm.user}/{tag}.out", input=script
    ).stdout.strip()
    try:
        slurm.wait_until((home / f"{tag}.ready").exists, timeout=60, what=f"job {job_id} to start")
        mounts = job_mounts(slurm, job_id)
        assert len(mounts) == 2, mounts
        for line in mounts:
            options, _, fs = line.partition(" - ")
            kind, _, super_options = fs.split(" ", 2)
            assert kind == "tmpfs" and {"nosuid", "nodev"} <= set(options.split()[5].split(",")), line
            size = TMP_SIZE if "/job-tmp/" in options else SHM_SIZE
            assert f"size={size // 1024}k" in super_options.split(","), line
    finally:
        (home / f"{tag}.go").touch()
    wait_for_job_gone(slurm, job_id)
