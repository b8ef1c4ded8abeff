"""The worker's preStop, run directly against a stand-in `scontrol` that keeps one node's state as slurmctld would:
it drains before it leaves, lets jobs finish within its bound, sets the node DOWN when they cannot (so Slurm requeues
them at once), removes the node, always within its deadline."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from test.unit.images.conftest import run_script, write_exe

NODE = "c-worker-cpu-1"
DRAIN = f"update nodename={NODE} state=DRAIN reason=slurmctl: pod {NODE} terminating"
DOWN = f"update nodename={NODE} state=DOWN reason=slurmctl: pod {NODE} terminating with jobs running"
SHOW = f"--oneliner show node {NODE}"
DELETE = f"delete nodename={NODE}"

# One node as slurmctld keeps it: `state` (absent: an unknown node), `jobs_for` (how many more `show`s its jobs keep
# running; "forever" never ends them), `refusals` (deletes refused while a job completes), `hang` (slurmctld does not
# answer). DRAIN adds the flag; DOWN ends the jobs.
SCONTROL = r"""#!/bin/bash
d={dir}
printf '%s\n' "$*" >> "$d/calls"
[ -e "$d/hang" ] && exec sleep 600
case "$*" in
*"show node"*)
    [ -f "$d/state" ] || {{ echo "Node $4 not found" >&2; exit 1; }}
    n=$(cat "$d/jobs_for" 2>/dev/null || echo 0)
    if [ "$n" != forever ] && [ "$n" -gt 0 ]; then
        echo $((n - 1)) > "$d/jobs_for"
    elif [ "$n" != forever ]; then
        sed -i 's/ALLOCATED/IDLE/; s/MIXED/IDLE/' "$d/state"
    fi
    addr=$(cat "$d/addr" 2>/dev/null)
    echo "NodeName=$4 Arch=x86_64 NodeAddr=$addr State=$(cat "$d/state") ThreadsPerCore=1 Reason=x"
    ;;
*state=DRAIN*) sed -i 's/$/+DRAIN/' "$d/state" ;;
*state=DOWN*) echo DOWN+DRAIN+DYNAMIC_NORM > "$d/state"; echo 0 > "$d/jobs_for" ;;
delete*)
    [ -f "$d/state" ] || {{ echo "Invalid node name specified" >&2; exit 1; }}
    case "+$(cat "$d/state")+" in *+ALLOCATED+*|*+MIXED+*) echo "Node has jobs" >&2; exit 1 ;; esac
    r=$(cat "$d/refusals" 2>/dev/null || echo 0)
    if [ "$r" -gt 0 ]; then echo $((r - 1)) > "$d/refusals"; echo "Node busy" >&2; exit 1; fi
    rm "$d/state"
    ;;
esac
"""


class Slurm:
    def __init__(self, root: Path) -> None:
        self.dir = root / "slurm"
        self.dir.mkdir()
        write_exe(root / "bin" / "scontrol", SCONTROL.format(dir=self.dir))
        self.bin = root / "bin"

    def node(self, state: str, *, jobs_for: int | str = 0, refusals: int = 0) -> None:
        (self.dir / "state").write_text(state + "\n")
        (self.dir / "jobs_for").write_text(f"{jobs_for}\n")
        (self.dir / "refusals").write_text(f"{refusals}\n")

    def registered_from(self, addr: str) -> None:
        (self.dir / "addr").write_text(addr + "\n")

    def hang(self) -> None:
        (self.dir / "hang").touch()

    @property
    def calls(self) -> list[str]:
        path = self.dir / "calls"
        return path.read_text().splitlines() if path.exists() else []

    @property
    def registered(self) -> bool:
        return (self.dir / "state").exists()

    @property
    def state(self) -> str:
        return (self.dir / "state").read_text().strip()


@pytest.fixture
def slurm(tmp_path: Path) -> Slurm:
    return Slurm(tmp_path)


def prestop(slurm: Slurm, tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], float]:
    full = {
        "PATH": f"{slurm.bin}:/usr/sbin:/usr/bin:/sbin:/bin",
        "SLURMD_NODENAME": NODE,
        "WORKER_LEAVING": str(tmp_path / "leaving"),  # not the host's /run
        **env,
    }
    started = time.monotonic()
    hook = run_script("worker-prestop", env=full, timeout=60)
    elapsed = time.monotonic() - started
    assert hook.returncode == 0, hook.stderr
    return hook, elapsed


def test_an_idle_node_is_drained_then_removed_at_once(slurm: Slurm, tmp_path: Path) -> None:
    slurm.node("IDLE+DYNAMIC_NORM")
    hook, elapsed = prestop(slurm, tmp_path)
    assert slurm.calls == [SHOW, DRAIN, DELETE]
    assert not slurm.registered
    assert f"node {NODE} removed from Slurm" in hook.stderr
    assert elapsed < 5


def test_a_drained_node_keeps_its_reason(slurm: Slurm, tmp_path: Path) -> None:
    """The operator drained it before deleting the pod (or an administrator did): not drained again."""
    slurm.node("IDLE+DRAIN+DYNAMIC_NORM")
    prestop(slurm, tmp_path)
    assert slurm.calls == [SHOW, DELETE]


def test_jobs_that_end_within_the_bound_finish_and_the_node_is_never_set_down(slurm: Slurm, tmp_path: Path) -> None:
    slurm.node("ALLOCATED+DYNAMIC_NORM", jobs_for=2)
    _, elapsed = prestop(slurm, tmp_path)
    assert slurm.calls[:2] == [SHOW, DRAIN]
    assert DOWN not in slurm.calls
    assert slurm.calls[-1] == DELETE and not slurm.registered
    assert elapsed >= 1, "it waited for the jobs"


def test_jobs_still_running_at_the_bound_are_handed_back_to_slurm_by_setting_the_node_down(
    slurm: Slurm, tmp_path: Path
) -> None:
    slurm.node("MIXED+DYNAMIC_NORM", jobs_for="forever")
    hook, elapsed = prestop(slurm, tmp_path, WORKER_PRESTOP_JOBS_WAIT="2", WORKER_PRESTOP_WAIT="6")
    calls = slurm.calls
    assert calls[:2] == [SHOW, DRAIN]
    assert calls.index(DOWN) < calls.index(DELETE), "DOWN first: Slurm requeues at once, then lets the node go"
    assert not slurm.registered
    assert "set DOWN" in hook.stderr
    # bash's SECONDS counts whole seconds of the wall clock since the hook started, so its 2 s wait for the jobs ends
    # between 1 and 2 s in (never beyond its bound).
    assert 1 <= elapsed < 8


def test_a_node_still_completing_is_removed_once_slurm_lets_it(slurm: Slurm, tmp_path: Path) -> None:
    slurm.node("IDLE+DRAIN+DYNAMIC_NORM", refusals=2)
    hook, _ = prestop(slurm, tmp_path)
    assert slurm.calls == [SHOW, DELETE, DELETE, DELETE]
    assert f"node {NODE} removed from Slurm" in hook.stderr


def test_a_node_slurm_does_not_know_needs_nothing(slurm: Slurm, tmp_path: Path) -> None:
    _, elapsed = prestop(slurm, tmp_path)
    assert slurm.calls == [SHOW]
    assert elapsed < 5


def test_a_slurmctld_that_does_not_answer_cannot_hold_the_pod(slurm: Slurm, tmp_path: Path) -> None:
    slurm.node("ALLOCATED")
    slurm.hang()
    hook, elapsed = prestop(slurm, tmp_path, WORKER_PRESTOP_WAIT="3")
    assert elapsed < 3 + 4, "every call is cut at the deadline"
    assert "could not remove node" in hook.stderr
    assert slurm.registered, "nothing could be done, and nothing failed"


def test_a_node_registered_from_another_pods_address_is_left_alone(slurm: Slurm, tmp_path: Path) -> None:
    """This pod's Kubernetes node was lost and the operator replaced the pod: the node of that name is the new pod's
    now, and the old pod's kubelet, back, runs this hook as it stops what was left."""
    slurm.node("ALLOCATED+DYNAMIC_NORM", jobs_for="forever")
    slurm.registered_from("10.244.2.7")
    hook, elapsed = prestop(slurm, tmp_path, WORKER_POD_ADDRESSES="10.244.1.5")
    assert slurm.calls == [SHOW] and slurm.registered
    assert "another pod has its name now" in hook.stderr
    assert elapsed < 5


def test_a_node_registered_from_this_pods_address_leaves_as_before(slurm: Slurm, tmp_path: Path) -> None:
    slurm.node("IDLE+DYNAMIC_NORM")
    slurm.registered_from("10.244.1.5")
    prestop(slurm, tmp_path, WORKER_POD_ADDRESSES="fd00::5 10.244.1.5")
    assert slurm.calls == [SHOW, DRAIN, DELETE]


POWER_DOWN = f"update nodename={NODE} state=POWER_DOWN"


def test_an_elastic_node_is_drained_then_powered_down_not_deleted(slurm: Slurm, tmp_path: Path) -> None:
    """An elastic group's CLOUD node stays in Slurm: powered down, so that Slurm powers it up when a job needs it."""
    slurm.node("IDLE+CLOUD")
    hook, _ = prestop(slurm, tmp_path, SLURMD_CLOUD="true")
    assert slurm.calls == [SHOW, DRAIN, POWER_DOWN]
    assert slurm.registered
    assert "powered down in Slurm" in hook.stderr


@pytest.mark.parametrize("power", ["POWERING_DOWN", "POWERED_DOWN"])
def test_an_elastic_node_slurm_powers_down_is_left_alone(slurm: Slurm, tmp_path: Path, power: str) -> None:
    """The pod goes because Slurm powered its node down: a drain now would outlast the power-down and keep the node
    from ever being powered up again."""
    slurm.node(f"IDLE+CLOUD+{power}")
    prestop(slurm, tmp_path, SLURMD_CLOUD="true")
    assert slurm.calls == [SHOW]


def test_the_workers_sshd_gets_its_sigterm(slurm: Slurm, tmp_path: Path) -> None:
    """spec.login.sshToJobNodes: the sshd entrypoint-worker started beside slurmd is stopped with SIGTERM, not left
    to the SIGKILL at the end of the grace period."""
    slurm.node("IDLE+DYNAMIC_NORM")
    sshd = subprocess.Popen(["sleep", "300"])
    pid_file = tmp_path / "job-sshd.pid"
    pid_file.write_text(f"{sshd.pid}\n")
    try:
        prestop(slurm, tmp_path, JOB_SSHD_PID=str(pid_file))
        assert sshd.wait(timeout=10) == -15
    finally:
        sshd.kill()
