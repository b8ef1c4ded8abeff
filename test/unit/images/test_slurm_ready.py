"""`slurm-ready login`, the login pod's readiness: its sshd listens and some slurmctld is up. Run in a network
namespace of its own (`unshare --net`), with a stand-in `scontrol` that says slurmctld is UP: a login pod that was
Ready before its sshd listened refused the first ssh of a user (test/e2e/pods/test_identity.py, under load)."""

from __future__ import annotations

import sys
from pathlib import Path

from test.unit.images.conftest import run_script, write_exe

# Listens on port 22 (every address) in the namespace the script then runs in, and exits with the script's status.
LISTENING = (
    "import socket, subprocess, sys\n"
    "s = socket.socket()\n"
    "s.bind(('', 22))\n"
    "s.listen()\n"
    "sys.exit(subprocess.run(sys.argv[1:]).returncode)\n"
)


def _env(tmp_path: Path) -> dict[str, str]:
    write_exe(tmp_path / "bin" / "scontrol", "#!/bin/sh\necho 'Slurmctld(primary) at c-controller-0 is UP'\n")
    return {"PATH": f"{tmp_path / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin"}


def test_a_login_pod_whose_sshd_does_not_listen_yet_is_not_ready(tmp_path: Path) -> None:
    done = run_script("slurm-ready", "login", env=_env(tmp_path), wrapper=("unshare", "--net"))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "sshd does not listen on port 22" in done.stdout


def test_a_login_pod_whose_sshd_listens_and_whose_slurmctld_is_up_is_ready(tmp_path: Path) -> None:
    wrapper = ("unshare", "--net", sys.executable, "-c", LISTENING)
    done = run_script("slurm-ready", "login", env=_env(tmp_path), wrapper=wrapper)
    assert done.returncode == 0, done.stdout + done.stderr
