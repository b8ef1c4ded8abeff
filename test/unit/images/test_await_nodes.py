"""Slurm's PrologSlurmctld on elastic clusters (images/scripts/await-nodes): it returns at the first look when the
job's nodes are up, waits while one is POWERED_DOWN, POWERING_UP or NOT_RESPONDING, never longer than the largest
ResumeTimeout nor past PrologEpilogTimeout, and exits 0 whatever happens (a failing PrologSlurmctld requeues or holds
the job). The scontrol on PATH is a fake that answers from files the test writes, as Slurm's scontrol prints them."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from test.unit.images.conftest import SCRIPTS, run_script, write_exe
from test.waiting import until

# `scontrol -o show node LIST` prints $STATE/nodes (the test rewrites it while the script polls); each call is
# recorded. `show config` and `-o show partition` print their files; an absent file is scontrol failing.
FAKE_SCONTROL = """#!/bin/bash
echo "$*" >>"$STATE/calls"
case "$*" in
"-o show node "*) f=nodes ;;
"show config") f=config ;;
"-o show partition") f=partitions ;;
*) exit 9 ;;
esac
[ -f "$STATE/$f" ] || { echo "slurm_load failed" >&2; exit 1; }
cat "$STATE/$f"
"""
UP = (
    "NodeName=c-worker-cpu-0 Arch=x86_64 CoresPerSocket=1 State=ALLOCATED+CLOUD ThreadsPerCore=1 Weight=1\n"
    "NodeName=c-worker-cpu-1 Arch=x86_64 CoresPerSocket=1 State=ALLOCATED+CLOUD ThreadsPerCore=1 Weight=1\n"
)
POWERING_UP = UP.replace("State=ALLOCATED+CLOUD ", "State=ALLOCATED+CLOUD+POWERING_UP ", 1)
CONFIG = "ResumeTimeout           = 60 sec\nPrologEpilogTimeout     = 65534\n"
PARTITIONS = (
    "PartitionName=all AllowGroups=ALL ResumeTimeout=GLOBAL SuspendTimeout=GLOBAL SuspendTime=GLOBAL\n"
    "PartitionName=slurmctl-power-cpu Hidden=YES ResumeTimeout=3 SuspendTimeout=GLOBAL SuspendTime=300\n"
)


def setup(tmp_path: Path, nodes: str | None, *, config: str = CONFIG) -> dict[str, str]:
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    write_exe(bin_dir / "scontrol", FAKE_SCONTROL)
    state.mkdir()
    if nodes is not None:
        (state / "nodes").write_text(nodes)
    (state / "config").write_text(config)
    (state / "partitions").write_text(PARTITIONS)
    return {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "STATE": str(state),
        "SLURM_JOB_ID": "7",
        "SLURM_JOB_NODELIST": "c-worker-cpu-[0-1]",
        "AWAIT_NODES_POLL_SECONDS": "0.1",
    }


def calls(tmp_path: Path) -> list[str]:
    record = tmp_path / "state" / "calls"
    return record.read_text().splitlines() if record.exists() else []


def test_a_job_on_nodes_that_are_up_returns_at_the_first_look(tmp_path: Path) -> None:
    env = setup(tmp_path, UP)
    done = run_script("await-nodes", env=env)
    assert done.returncode == 0, done.stderr
    assert calls(tmp_path) == ["-o show node c-worker-cpu-[0-1]"], "one scontrol call, nothing else"


def test_it_returns_once_the_nodes_powering_up_have_registered(tmp_path: Path) -> None:
    env = setup(tmp_path, POWERING_UP, config=CONFIG.replace("60 sec", "600 sec"))
    (tmp_path / "state" / "partitions").write_text(PARTITIONS.replace("ResumeTimeout=3 ", "ResumeTimeout=600 "))
    # The script is started, then the node registers (its state file changes) while it polls.
    started = time.monotonic()
    proc = subprocess.Popen([str(SCRIPTS / "await-nodes")], env=env, stderr=subprocess.PIPE, text=True)
    try:
        until(lambda: len(calls(tmp_path)) >= 4, timeout=10, what="a few polls", interval=0.05)
        assert proc.poll() is None, "still waiting while a node is POWERING_UP"
        (tmp_path / "state" / "nodes").write_text(UP)
        _, stderr = proc.communicate(timeout=10)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, stderr
    assert time.monotonic() - started < 5, "it returned soon after the nodes were up, not at the 600 s deadline"
    assert "nodes c-worker-cpu-[0-1] up after" in stderr


def test_powered_down_and_not_responding_nodes_are_waited_for_up_to_the_largest_resume_timeout(
    tmp_path: Path,
) -> None:
    for state in ("IDLE+CLOUD+POWERED_DOWN", "ALLOCATED*+CLOUD+NOT_RESPONDING"):
        env = setup(tmp_path / state, UP.replace("State=ALLOCATED+CLOUD ", f"State={state} "))
        started = time.monotonic()
        done = run_script("await-nodes", env=env)
        waited = time.monotonic() - started
        assert done.returncode == 0, done.stderr
        assert 2 <= waited < 6, (state, waited, "ResumeTimeout=3 of the power partition, not 60 (GLOBAL)")
        assert "not all up within 3s (not up: c-worker-cpu-0" in done.stderr


def test_the_wait_stays_under_prolog_epilog_timeout(tmp_path: Path) -> None:
    """slurmctld kills a PrologSlurmctld at PrologEpilogTimeout and counts it as failed: the script stops first,
    by more than one scontrol call's deadline (5 s)."""
    line_26_05 = "ResumeTimeout = 60 sec\nEpilogTimeout = 65534\nPrologTimeout = 9\n"
    for name, config in (("24.11", CONFIG.replace("65534", "9")), ("26.05", line_26_05)):
        env = setup(tmp_path / name, POWERING_UP, config=config)
        (tmp_path / name / "state" / "partitions").write_text(PARTITIONS.replace("=3 ", "=600 "))
        started = time.monotonic()
        done = run_script("await-nodes", env=env)
        assert done.returncode == 0, done.stderr
        assert time.monotonic() - started < 4, name
        assert "within 2s" in done.stderr, name


def test_whatever_fails_it_exits_0_so_slurm_never_requeues_or_holds_the_job(tmp_path: Path) -> None:
    # scontrol cannot answer at all: no node states, no config.
    env = setup(tmp_path, None)
    (tmp_path / "state" / "config").unlink()
    started = time.monotonic()
    done = run_script("await-nodes", env=env)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 3, "no deadline known: nothing is waited for"
    # No node list at all.
    env = setup(tmp_path / "empty", UP)
    del env["SLURM_JOB_NODELIST"]
    assert run_script("await-nodes", env=env).returncode == 0
