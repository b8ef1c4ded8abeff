"""The chroot plugin fails closed: a bad jail or plugstack.conf ends the step before slurmstepd opens any file or starts
a task, names the failed step in slurmd's log, and runs nothing.

These tests rewrite plugstack.conf, which slurmstepd reads afresh for every step, so they use an instance of their own.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

import pytest

from test.e2e.slurm.local_slurm import PLUGIN, LocalSlurm, local_slurm_instance

pytestmark = pytest.mark.slurm

# What srun says when a required plugin's slurm_spank_init fails, by Slurm line (26.05 reports the plugin's
# slurm_spank_init_failure_mode, ESPANK_NODE_FAILURE).
FAILED_INIT = {"24.11": "Plugin initialization failed", "26.05": "Spank plugin failure, node failed"}


class SetPlugstack(Protocol):
    def __call__(self, args: str, *, keyword: str = "required") -> None: ...


@pytest.fixture(scope="module")
def spare_slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSlurm]:
    with local_slurm_instance(tmp_path_factory.mktemp("spare-slurm")) as slurm:
        yield slurm


@pytest.fixture
def plugstack(spare_slurm: LocalSlurm) -> Iterator[SetPlugstack]:
    """Set the plugin's arguments for the next steps; the instance's own line comes back afterwards."""
    conf = spare_slurm.state_dir / "etc" / "plugstack.conf"
    original = conf.read_text()

    def set_args(args: str, *, keyword: str = "required") -> None:
        conf.write_text(f"{keyword} {PLUGIN} {args}\n")

    try:
        yield set_args
    finally:
        conf.write_text(original)


def missing(base: Path) -> Path:
    return base / "no-such-jail"


def plain_file(base: Path) -> Path:
    path = base / "jail-is-a-file"
    path.write_text("not a directory\n")
    return path


def without_shell(base: Path) -> Path:
    root = base / "jail-without-shell"
    for sub in ("bin", "etc", "proc", "tmp"):
        (root / sub).mkdir(parents=True)
    (root / "etc" / "slurmctl-jail").write_text("a jail with no /bin/sh\n")
    return root


@pytest.mark.parametrize(
    ("make_jail", "step", "reason"),
    [
        (missing, "check-jail", "No such file or directory"),
        (plain_file, "check-jail", "Not a directory"),
        (without_shell, "check-shell", "No such file or directory"),
    ],
    ids=["missing", "not-a-directory", "no-shell"],
)
def test_bad_jail_fails_the_step_and_runs_nothing(
    spare_slurm: LocalSlurm,
    plugstack: SetPlugstack,
    tmp_path: Path,
    make_jail: Callable[[Path], Path],
    step: str,
    reason: str,
) -> None:
    jail = make_jail(tmp_path)
    plugstack(f"jail={jail}")
    ran = tmp_path / "ran-on-the-host"
    proc = spare_slurm.run("srun", "/bin/touch", str(ran), check=False)
    assert proc.returncode != 0
    assert FAILED_INIT[spare_slurm.slurm_line] in proc.stderr, proc.stderr
    line = next((x for x in spare_slurm.log("slurmd").splitlines() if f"cannot enter jail {jail}:" in x), "")
    assert f"step '{step}' failed" in line and reason in line, spare_slurm.log_tail("slurmd")
    assert not ran.exists(), "the user's program ran on the host"


def test_batch_step_with_a_missing_jail_runs_nothing_and_slurm_requeues_it(
    spare_slurm: LocalSlurm, plugstack: SetPlugstack, tmp_path: Path
) -> None:
    """A batch step that cannot enter the jail is a launch failure of the node: Slurm drains the node and puts the job
    back in the queue (it is not lost), and nothing ran or was written on the node."""
    jail = tmp_path / "gone"
    plugstack(f"jail={jail}")
    ran = tmp_path / "ran-on-the-host"
    out = tmp_path / "job.out"
    job = spare_slurm.run("sbatch", "--parsable", f"--output={out}", input=f"#!/bin/sh\ntouch {ran}\n").stdout.strip()
    try:
        spare_slurm.wait_until(
            lambda: f"cannot enter jail {jail}: step 'check-jail' failed" in spare_slurm.log("slurmd"),
            what="the plugin's message in slurmd's log",
        )
        spare_slurm.wait_until(lambda: spare_slurm.node_state().startswith("drain"), what="the node drained by Slurm")
        # The requeue follows the job's cleanup on the node: it may still be COMPLETING when the drain shows (seen in
        # CI on c8d08b1, the machine busy), and must then come back PENDING, never end or go.
        seen: list[str] = []

        def back_in_queue() -> bool:
            seen.append(spare_slurm.run("squeue", "-h", "-j", job, "-o", "%T").stdout.strip())
            return seen[-1] == "PENDING"

        spare_slurm.wait_until(back_in_queue, what=f"job {job} back in the queue", explain=lambda: f"states: {seen}")
        assert set(seen) <= {"COMPLETING", "PENDING"}, f"job {job} went through {seen}"
        assert not ran.exists(), "the batch script ran on the host"
        assert not out.exists(), "slurmstepd opened the output file outside the jail"
    finally:
        spare_slurm.run("scancel", job, check=False)
        spare_slurm.run("scontrol", "update", f"NodeName={spare_slurm.node}", "State=RESUME", check=False)
    spare_slurm.wait_until(lambda: spare_slurm.node_state() == "idle", what="node idle after the resume")


def test_unknown_plugin_argument_fails_the_step(
    spare_slurm: LocalSlurm, plugstack: SetPlugstack, tmp_path: Path
) -> None:
    plugstack(f"jail={spare_slurm.jail} colour=blue")
    ran = tmp_path / f"ran-{uuid.uuid4().hex[:8]}"
    proc = spare_slurm.run("srun", "/bin/touch", str(ran), check=False)
    assert proc.returncode != 0
    assert "step 'parse-args' failed: plugstack.conf: unknown argument 'colour'" in spare_slurm.log("slurmd")
    assert not ran.exists()


def test_custom_old_root_directory_is_created_and_used(spare_slurm: LocalSlurm, plugstack: SetPlugstack) -> None:
    old_root = f".old-{uuid.uuid4().hex[:6]}"
    plugstack(f"jail={spare_slurm.jail} old_root={old_root}")
    assert spare_slurm.run("srun", "ls", "-a", "/").stdout.split().count(old_root) == 1
    assert (spare_slurm.jail / old_root).is_dir()
    # The old root was detached: nothing of the host is left under it.
    assert spare_slurm.run("srun", "ls", "-A", f"/{old_root}").stdout == ""


def test_plugin_marked_optional_still_fails_closed(
    spare_slurm: LocalSlurm, plugstack: SetPlugstack, tmp_path: Path
) -> None:
    # slurmstepd ignores errors of "optional" plugins: it goes on outside the jail, and job_container/jail (reading the
    # same line) and the plugin's task hook stop the task before the program runs.
    jail = tmp_path / "absent"
    plugstack(f"jail={jail}", keyword="optional")
    ran = tmp_path / "ran-on-the-host"
    proc = spare_slurm.run("srun", "/bin/touch", str(ran), check=False)
    assert proc.returncode != 0
    assert f"cannot enter jail {jail}: step 'check-jail' failed" in proc.stderr, proc.stderr
    assert not ran.exists(), "an optional plugin let the program run on the host"
