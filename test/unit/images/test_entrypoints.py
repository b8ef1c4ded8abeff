"""The container entrypoints run directly: configs and secrets put in place with the right owners and modes, the
munge wait bounded, and the daemon exec'd as the right user. Daemons other than munged are stand-ins recording how
they were started (starting a second real slurmctld/slurmd here is the Slurm e2e suite's job)."""

from __future__ import annotations

import grp
import os
import pwd
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from test.unit.images.conftest import SCRIPTS, run_script, write_exe
from test.waiting import holds, until

RECORDER = '#!/bin/sh\necho "$(basename "$0") uid=$(id -u) args=$*" >> {log}\n'


@pytest.fixture
def pod(shared_tmp: Path) -> Iterator[dict[str, str]]:
    """Mounted ConfigMap/Secret stand-ins, a listening munge socket, and recording daemons first on PATH."""
    configs = shared_tmp / "mnt" / "slurm-configs"
    configs.mkdir(parents=True)
    # ConfigMap volumes present keys as symlinks into a ..data directory.
    data = configs / "..data"
    data.mkdir()
    (data / "slurm.conf").write_text(
        f"SlurmUser=slurm\nStateSaveLocation={shared_tmp}/state  # comment\n"
        # As rendered: jwt_key= first among AuthAltParameters' comma-separated options.
        f"AuthAltTypes=auth/jwt\nAuthAltParameters=jwt_key={shared_tmp}/etc/slurm/jwt_hs256.key,max_token_lifespan=86400\n"
    )
    (data / "cgroup.conf").write_text("CgroupPlugin=cgroup/v2\n")
    (configs / "slurm.conf").symlink_to("..data/slurm.conf")
    (configs / "cgroup.conf").symlink_to("..data/cgroup.conf")
    (shared_tmp / "mnt" / "munge-key").mkdir()
    (shared_tmp / "mnt" / "munge-key" / "munge.key").write_bytes(os.urandom(1024))
    (shared_tmp / "mnt" / "jwt-key").mkdir()
    (shared_tmp / "mnt" / "jwt-key" / "jwt_hs256.key").write_bytes(os.urandom(32))
    (shared_tmp / "run").mkdir()
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(shared_tmp / "run" / "munge.socket.2"))
    sock.listen()
    bin_dir = shared_tmp / "bin"
    log = shared_tmp / "daemons.log"
    log.touch()
    log.chmod(0o666)
    for daemon in ("slurmctld", "slurmd", "slurmdbd", "sshd"):
        write_exe(bin_dir / daemon, RECORDER.format(log=log))
    env = {
        "PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin",
        "SLURM_CONFIGS_SOURCE": str(configs),
        "SLURM_CONF_DIR": str(shared_tmp / "etc" / "slurm"),
        "MUNGE_KEY_SOURCE": str(shared_tmp / "mnt" / "munge-key" / "munge.key"),
        "MUNGE_KEY_FILE": str(shared_tmp / "etc" / "munge" / "munge.key"),
        "JWT_KEY_SOURCE": str(shared_tmp / "mnt" / "jwt-key" / "jwt_hs256.key"),
        "MUNGE_SOCKET": str(shared_tmp / "run" / "munge.socket.2"),
        "MUNGE_WAIT_SECONDS": "5",
        "EXTRAUSERS_DIR": str(shared_tmp / "var" / "lib" / "extrausers"),
        "ROOT": str(shared_tmp),
        "LOG": str(log),
        "SLURM_CONFIGS_POLL_SECONDS": "0.2",
        "SLURMD_LOG_PIPE": str(shared_tmp / "run" / "slurmctl" / "slurmd-log"),
    }
    yield env
    sock.close()


def assert_configs_installed(env: dict[str, str]) -> None:
    etc = Path(env["SLURM_CONF_DIR"])
    assert sorted(p.name for p in etc.iterdir() if p.name != "jwt_hs256.key") == ["cgroup.conf", "slurm.conf"]
    assert (etc / "cgroup.conf").read_text() == "CgroupPlugin=cgroup/v2\n"
    assert not (etc / "slurm.conf").is_symlink()
    assert stat.S_IMODE((etc / "slurm.conf").stat().st_mode) == 0o644
    key = Path(env["MUNGE_KEY_FILE"])
    assert key.read_bytes() == Path(env["MUNGE_KEY_SOURCE"]).read_bytes()
    st = key.stat()
    assert (stat.S_IMODE(st.st_mode), pwd.getpwuid(st.st_uid).pw_name) == (0o400, "munge")


def test_controller_runs_slurmctld_as_slurm_user_with_its_state_dir(pod: dict[str, str]) -> None:
    done = run_script("entrypoint-controller", "-vv", env=pod)

    assert done.returncode == 0, done.stderr
    assert_configs_installed(pod)
    state = Path(pod["ROOT"]) / "state"
    assert (stat.S_IMODE(state.stat().st_mode), state.stat().st_uid) == (0o700, pwd.getpwnam("slurm").pw_uid)
    assert Path(pod["LOG"]).read_text() == f"slurmctld uid={pwd.getpwnam('slurm').pw_uid} args=-D -vv\n"
    assert "munge.key" in done.stderr
    assert Path(pod["MUNGE_KEY_SOURCE"]).read_bytes().hex()[:16] not in done.stderr + done.stdout
    assert_jwt_key_installed(pod)
    assert Path(pod["JWT_KEY_SOURCE"]).read_bytes().hex()[:16] not in done.stderr + done.stdout


def assert_jwt_key_installed(env: dict[str, str]) -> None:
    """Where AuthAltParameters' jwt_key= says, owned by SlurmUser with mode 0600 (Slurm's JWT guide)."""
    key = Path(env["SLURM_CONF_DIR"]) / "jwt_hs256.key"
    assert key.read_bytes() == Path(env["JWT_KEY_SOURCE"]).read_bytes()
    st = key.stat()
    assert (stat.S_IMODE(st.st_mode), pwd.getpwuid(st.st_uid).pw_name) == (0o600, "slurm")


def test_controller_without_the_jwt_key_secret_fails_before_starting_slurmctld(pod: dict[str, str]) -> None:
    done = run_script("entrypoint-controller", env={**pod, "JWT_KEY_SOURCE": pod["ROOT"] + "/nothing/jwt.key"})

    assert done.returncode == 1
    assert "is the JWT key Secret mounted?" in done.stderr
    assert Path(pod["LOG"]).read_text() == ""


def test_a_config_without_jwt_key_installs_none(pod: dict[str, str]) -> None:
    conf = Path(pod["SLURM_CONFIGS_SOURCE"]) / "..data" / "slurm.conf"
    conf.write_text(
        f"SlurmUser=slurm\nStateSaveLocation={pod['ROOT']}/state\n"
        "AuthAltTypes=auth/jwt\nAuthAltParameters=disable_token_creation\n"
    )
    done = run_script("entrypoint-controller", env=pod)

    assert done.returncode == 0, done.stderr
    assert not (Path(pod["SLURM_CONF_DIR"]) / "jwt_hs256.key").exists()
    assert "names no jwt_key" in done.stderr


def swap_configmap(configs: Path, slurm_conf: str) -> None:
    """What the kubelet does when the ConfigMap changes: a new ..data directory, and the ..data symlink swapped."""
    new = configs / "..data_new"
    new.mkdir()
    (new / "slurm.conf").write_text(slurm_conf)
    (new / "cgroup.conf").write_text((configs / "cgroup.conf").read_text())
    (configs / "..data").rename(configs / "..data_old")
    (configs / "..data").symlink_to("..data_new")


@dataclass
class RunningController:
    """entrypoint-controller with a slurmctld that runs until told to stop and a recording scontrol; `output` is the
    entrypoint's own once it ended."""

    proc: subprocess.Popen[bytes]
    installed: Path
    output: str = ""


@contextmanager
def running_controller(pod: dict[str, str], scontrol: str = "", **env: str) -> Iterator[RunningController]:
    """`scontrol` is shell run by the recording stand-in after it recorded its arguments."""
    root, log = Path(pod["ROOT"]), Path(pod["LOG"])
    stop = root / "stop"
    write_exe(root / "bin" / "slurmctld", RECORDER.format(log=log) + f"while [ ! -e {stop} ]; do sleep 0.05; done\n")
    write_exe(root / "bin" / "scontrol", RECORDER.format(log=log) + scontrol)
    proc = subprocess.Popen(
        [str(SCRIPTS / "entrypoint-controller")],
        env={"LC_ALL": "C.UTF-8", **pod, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    running = RunningController(proc, Path(pod["SLURM_CONF_DIR"]) / "slurm.conf")
    try:
        until(lambda: "slurmctld" in log.read_text(), timeout=30, interval=0.1, what="slurmctld to start")
        yield running
    finally:
        stop.touch()
        out, _ = proc.communicate(timeout=30)
        running.output = out.decode()


def test_a_changed_configmap_is_installed_and_reconfigures_the_running_controller(pod: dict[str, str]) -> None:
    """The kubelet swaps the mounted ConfigMap's ..data; the controller installs the new files and runs
    `scontrol reconfigure`, without restarting slurmctld, with a slurm.conf that names only the primary's
    SlurmctldHost: a reconfigure reaching the standby while it hands control back would leave both in control."""
    log = Path(pod["LOG"])
    conf = Path(pod["SLURM_CONFIGS_SOURCE"]) / "..data" / "slurm.conf"
    conf.write_text(conf.read_text() + "SlurmctldHost=c-controller-0(a)\nSlurmctldHost=c-controller-backup-0(b)\n")
    # What the stand-in scontrol was told to read: its SlurmctldHost lines.
    hosts = 'grep -i "^SlurmctldHost" "${SLURM_CONF:-/dev/null}" >> ' + str(log) + "\n"
    with running_controller(pod, scontrol=hosts) as ctl:
        before = ctl.installed.read_text()
        swap_configmap(Path(pod["SLURM_CONFIGS_SOURCE"]), before + "MaxJobCount=5000\n")
        until(
            lambda: "MaxJobCount=5000" in ctl.installed.read_text(), timeout=30, interval=0.1, what="the new slurm.conf"
        )
        reconfigured = "scontrol uid=0 args=reconfigure\nSlurmctldHost=c-controller-0(a)\n"
        until(lambda: reconfigured in log.read_text(), timeout=30, interval=0.1, what="reconfigure")
        assert "backup" not in log.read_text()
        assert log.read_text().count("slurmctld uid=") == 1, "slurmctld was not restarted"
    assert ctl.proc.returncode == 0


def test_a_reconfigure_that_fails_is_retried_until_slurmctld_takes_it(pod: dict[str, str]) -> None:
    """slurmctld not answering when a change arrives (starting, or a standby taking over): the installed files would
    never differ again, so the follower runs `scontrol reconfigure` at each poll until it succeeds, then stops."""
    root, log = Path(pod["ROOT"]), Path(pod["LOG"])
    down = root / "slurmctld-down"
    down.touch()
    refuse = f'if [ -e {down} ]; then echo "Unable to contact slurm controller" >&2; exit 1; fi\n'
    reconfigured = "scontrol uid=0 args=reconfigure"
    with running_controller(pod, scontrol=refuse) as ctl:
        swap_configmap(Path(pod["SLURM_CONFIGS_SOURCE"]), ctl.installed.read_text() + "MaxJobCount=5000\n")
        until(lambda: log.read_text().count(reconfigured) >= 3, timeout=30, interval=0.1, what="three tries")
        down.unlink()
        tries = until(lambda: _settled(log, reconfigured), timeout=30, interval=0.1, what="the tries to stop")
        assert "MaxJobCount=5000" in ctl.installed.read_text()
    assert ctl.output.count("'reconfigure_topology' failed: Unable to contact slurm controller") == 1, ctl.output
    assert ctl.output.count("configs changed; ran: reconfigure_topology") == 1, ctl.output
    assert tries >= 4


def _settled(log: Path, line: str) -> int:
    """How often `line` was logged, once that number held for a second (ten of the follower's polls); 0 before."""
    count = log.read_text().count(line)
    try:
        holds(lambda: log.read_text().count(line) == count, seconds=1, what=line)
    except AssertionError:
        return 0
    return count


# scontrol's answers for a cluster whose topology.conf puts c-0 and c-2 in sw1. `known` holds the nodes slurmctld
# knows ("NAME ADDRESS" lines); `show topology` prints the file's names, as Slurm 24.11 does whether or not a node
# is in the switch's bitmap, so it tells the follower nothing; `show config` names the last build, which a
# reconfigure renews. Hostlists are plain comma lists.
TOPOLOGY_SCONTROL = """case "$*" in
"show hostnames "*) echo "$3" | tr , '\\n' ;;
"show topology") echo "SwitchName=sw1 Level=0 LinkSpeed=1 Nodes=c-0,c-2" ;;
"-o show nodes") [ -s {root}/known ] || {{ echo "No nodes in the system"; exit 0; }}
    while read -r name addr; do echo "NodeName=$name Arch=x86_64 NodeAddr=$addr Reason=a b"; done <{root}/known ;;
"show config") echo "Configuration data as of $(cat {root}/built 2>/dev/null || echo start)" ;;
reconfigure) date +%s.%N > {root}/built ;;
esac
"""
RECONFIGURED = "scontrol uid=0 args=reconfigure"


def _with_topology(pod: dict[str, str], known: str) -> Path:
    """topology.conf naming c-0 and c-2 installed, slurmctld knowing `known`; the file to change what it knows."""
    root = Path(pod["ROOT"])
    configs = Path(pod["SLURM_CONFIGS_SOURCE"])
    (configs / "..data" / "topology.conf").write_text("SwitchName=sw1 Nodes=c-0,c-2\nSwitchName=root Switches=sw1\n")
    (configs / "topology.conf").symlink_to("..data/topology.conf")
    (root / "known").write_text(known)
    return root / "known"


def _topology_controller(pod: dict[str, str]) -> AbstractContextManager[RunningController]:
    return running_controller(
        pod, scontrol=TOPOLOGY_SCONTROL.format(root=pod["ROOT"]), SLURM_CONFIGS_VERIFY_SECONDS="0"
    )


def test_a_started_controller_rebuilds_its_topology_once_for_the_nodes_it_knows(pod: dict[str, str]) -> None:
    """slurmctld built its topology as it started, while nodes were registering: the follower cannot tell which it
    placed (`show topology` names what the file names), so it reconfigures once, then not again while nothing
    changes."""
    _with_topology(pod, known="c-0 10.0.0.1\nc-2 10.0.0.3\n")
    log = Path(pod["LOG"])
    with _topology_controller(pod) as ctl:
        until(lambda: _settled(log, RECONFIGURED), timeout=30, interval=0.1, what="one reconfigure")
        assert log.read_text().count(RECONFIGURED) == 1
    assert "slurmctld knows c-0 c-2, named in topology.conf, since its last topology build" in ctl.output


def test_a_node_registered_anew_after_the_last_build_gets_a_reconfigure(pod: dict[str, str]) -> None:
    """c-2's pod was re-created (a lost node, a replaced worker): deleted from Slurm and registered again at a new
    address, after the last build. The file is unchanged and `show topology` still names c-2, yet the node is in no
    switch: the follower sees a node it did not know at its last reconfigure and reconfigures once more. A node the
    file does not name (c-9) is no reason."""
    known = _with_topology(pod, known="c-0 10.0.0.1\nc-2 10.0.0.3\n")
    log = Path(pod["LOG"])
    with _topology_controller(pod) as ctl:
        until(lambda: _settled(log, RECONFIGURED) == 1, timeout=30, interval=0.1, what="the start-up reconfigure")
        known.write_text("c-0 10.0.0.1\nc-9 10.0.0.9\n")  # c-2 deleted; c-9 registered (not in topology.conf)
        holds(lambda: log.read_text().count(RECONFIGURED) == 1, seconds=1, what="no reconfigure for c-9")
        known.write_text("c-0 10.0.0.1\nc-2 10.0.0.7\nc-9 10.0.0.9\n")
        until(lambda: _settled(log, RECONFIGURED) == 2, timeout=30, interval=0.1, what="a second reconfigure")
    assert "slurmctld knows c-2, named in topology.conf, since its last topology build" in ctl.output


def test_a_node_slurmctld_does_not_know_yet_is_no_reason_to_reconfigure(pod: dict[str, str]) -> None:
    """c-2 is named in topology.conf but has not registered (yet, or any more): once the nodes slurmctld knows were
    built in, a reconfigure would not place c-2, so none runs."""
    _with_topology(pod, known="c-0 10.0.0.1\n")
    log = Path(pod["LOG"])
    with _topology_controller(pod):
        until(lambda: _settled(log, RECONFIGURED) == 1, timeout=30, interval=0.1, what="the start-up reconfigure")
        until(lambda: log.read_text().count("show nodes") >= 5, timeout=30, interval=0.1, what="several checks")
        assert log.read_text().count(RECONFIGURED) == 1


def test_a_build_the_follower_did_not_run_voids_what_it_knew(pod: dict[str, str]) -> None:
    """An administrator's `scontrol reconfigure` built the topology while c-2 was deleted; c-2 then registered again
    at the address the follower knew it by. Its own last build is no longer slurmctld's, so it takes every node for
    unplaced and reconfigures."""
    known = _with_topology(pod, known="c-0 10.0.0.1\nc-2 10.0.0.3\n")
    root, log = Path(pod["ROOT"]), Path(pod["LOG"])
    with _topology_controller(pod):
        until(lambda: _settled(log, RECONFIGURED) == 1, timeout=30, interval=0.1, what="the start-up reconfigure")
        until(lambda: log.read_text().count("show config") >= 3, timeout=30, interval=0.1, what="its build named")
        assert log.read_text().count(RECONFIGURED) == 1
        known.write_text("c-0 10.0.0.1\n")
        (root / "built").write_text("the administrator's\n")
        known.write_text("c-0 10.0.0.1\nc-2 10.0.0.3\n")
        until(lambda: _settled(log, RECONFIGURED) == 2, timeout=30, interval=0.1, what="a second reconfigure")


def test_a_failed_reconfigure_leaves_the_nodes_unplaced(pod: dict[str, str]) -> None:
    """slurmctld does not take the reconfigure (starting, busy): the nodes it knows are not taken as built in, and the
    reconfigure is tried again."""
    _with_topology(pod, known="c-0 10.0.0.1\n")
    root, log = Path(pod["ROOT"]), Path(pod["LOG"])
    failing = TOPOLOGY_SCONTROL.replace("reconfigure) ", f"reconfigure) [ -e {root}/accept ] || exit 1; ")
    with running_controller(pod, scontrol=failing.format(root=root), SLURM_CONFIGS_VERIFY_SECONDS="0"):
        until(lambda: log.read_text().count(RECONFIGURED) >= 2, timeout=30, interval=0.1, what="a retried reconfigure")
        (root / "accept").touch()
        count = until(lambda: _settled(log, RECONFIGURED), timeout=30, interval=0.1, what="reconfigures to stop")
        holds(lambda: log.read_text().count(RECONFIGURED) == count, seconds=1, what="no reconfigure once taken")


def test_the_standby_controller_installs_a_change_and_leaves_its_slurmctld_alone(pod: dict[str, str]) -> None:
    """The backup controller (SLURMCTLD_STANDBY) reads every file anew when it takes control; a reconfigure or SIGHUP
    reaching it while it hands control back would keep it in control beside the primary (Slurm 24.11, seen in the
    pods tests). So a change is installed and nothing is sent to slurmctld, not even through scontrol."""
    root, log = Path(pod["ROOT"]), Path(pod["LOG"])
    stop = root / "stop"
    write_exe(
        root / "bin" / "slurmctld",
        RECORDER.format(log=log)
        + f"trap 'echo slurmctld got HUP >> {log}' HUP\nwhile [ ! -e {stop} ]; do sleep 0.05; done\n",
    )
    write_exe(root / "bin" / "scontrol", RECORDER.format(log=log))
    proc = subprocess.Popen(
        [str(SCRIPTS / "entrypoint-controller")],
        env={"LC_ALL": "C.UTF-8", **pod, "SLURMCTLD_STANDBY": "true"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),  # noqa: PLW1509 - no threads fork here
    )
    try:
        until(lambda: "slurmctld uid=" in log.read_text(), timeout=30, interval=0.1, what="slurmctld to start")
        installed = Path(pod["SLURM_CONF_DIR"]) / "slurm.conf"
        swap_configmap(Path(pod["SLURM_CONFIGS_SOURCE"]), installed.read_text() + "MaxJobCount=5000\n")
        until(lambda: "MaxJobCount=5000" in installed.read_text(), timeout=30, interval=0.1, what="the new file")
        # Several polls of the follower (0.2 s each) after the install.
        holds(lambda: log.read_text().count("\n") == 1, seconds=1, what="nothing sent to slurmctld")
    finally:
        stop.touch()
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert "configs changed; ran: true" in out.decode()


def test_a_change_only_a_restart_applies_is_left_to_the_pod_s_re_creation(pod: dict[str, str]) -> None:
    """A restart-requiring setting (SLURMCTL_RESTART_KEYS, from the operator) is not installed into the running
    daemon and no reconfigure runs: it keeps the configs it started with until the operator re-creates its pod."""
    with running_controller(pod, SLURMCTL_RESTART_KEYS="SlurmctldPort,SlurmdPidFile") as ctl:
        before = ctl.installed.read_text()
        swap_configmap(Path(pod["SLURM_CONFIGS_SOURCE"]), before + "MaxJobCount=5000\nSlurmctldPort=7000\n")
        # Several polls of the follower (0.2 s each) pass without a change.
        holds(lambda: ctl.installed.read_text() == before, seconds=2, what="the running configs kept")
        assert "scontrol" not in Path(pod["LOG"]).read_text()
    assert "keeping the running ones until this pod is re-created" in ctl.output


def test_the_controller_passes_sigterm_to_slurmctld_and_exits_with_it(pod: dict[str, str]) -> None:
    """The kubelet's SIGTERM reaches slurmctld (which saves its state then); the container ends when slurmctld has
    exited, with its status, and says so: only then does the kubelet stop the munge sidecar."""
    root, log = Path(pod["ROOT"]), Path(pod["LOG"])
    write_exe(
        root / "bin" / "slurmctld",
        RECORDER.format(log=log)
        + f"trap 'echo saving-state >> {log}; sleep 0.3; echo saved >> {log}; exit 3' TERM\n"
        + "while :; do sleep 0.05; done\n",
    )
    proc = subprocess.Popen(
        [str(SCRIPTS / "entrypoint-controller")], env={"LC_ALL": "C.UTF-8", **pod}, stderr=subprocess.PIPE, text=True
    )
    until(lambda: "slurmctld uid=" in log.read_text(), timeout=30, interval=0.1, what="slurmctld to start")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 3, err
    assert log.read_text().splitlines()[-2:] == ["saving-state", "saved"]
    assert "slurmctld exited (3)" in err


def test_munge_wait_has_a_deadline_and_says_what_is_missing(pod: dict[str, str]) -> None:
    env = {**pod, "MUNGE_SOCKET": pod["ROOT"] + "/run/absent.socket", "MUNGE_WAIT_SECONDS": "1"}
    started = time.monotonic()
    done = run_script("entrypoint-controller", env=env)

    assert time.monotonic() - started < 5
    assert done.returncode == 1
    assert "munge socket " + env["MUNGE_SOCKET"] + " did not appear within 1s" in done.stderr
    assert Path(pod["LOG"]).read_text() == ""


def test_missing_config_or_key_fails_before_starting_anything(pod: dict[str, str]) -> None:
    no_conf = run_script("entrypoint-controller", env={**pod, "SLURM_CONFIGS_SOURCE": pod["ROOT"] + "/nothing"})
    no_key = run_script("entrypoint-controller", env={**pod, "MUNGE_KEY_SOURCE": pod["ROOT"] + "/nothing/munge.key"})

    assert no_conf.returncode == 1
    assert "no slurm.conf in" in no_conf.stderr
    assert no_key.returncode == 1
    assert "is the munge key Secret mounted?" in no_key.stderr
    assert Path(pod["LOG"]).read_text() == ""


def slurmdbd_conf(pod: dict[str, str], port: int) -> Path:
    secret = Path(pod["ROOT"]) / "mnt" / "slurmdbd-config"
    secret.mkdir(exist_ok=True)
    conf = secret / "slurmdbd.conf"
    conf.write_text(
        f"SlurmUser=slurm\nAuthAltParameters=jwt_key={pod['SLURM_CONF_DIR']}/jwt_hs256.key\n"
        f"StorageHost=127.0.0.1\nStoragePort={port}\nStoragePass=hunter2\n"
    )
    return conf


def test_accounting_installs_a_private_slurmdbd_conf_and_drops_to_slurm(pod: dict[str, str]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as database:
        port = database.getsockname()[1]
        done = run_script("entrypoint-accounting", env={**pod, "SLURMDBD_CONF_SOURCE": str(slurmdbd_conf(pod, port))})

    assert done.returncode == 0, done.stderr
    assert f"the database 127.0.0.1:{port} accepts connections" in done.stderr
    conf = Path(pod["SLURM_CONF_DIR"]) / "slurmdbd.conf"
    slurm_uid = pwd.getpwnam("slurm").pw_uid
    assert (stat.S_IMODE(conf.stat().st_mode), conf.stat().st_uid) == (0o600, slurm_uid)
    assert Path(pod["LOG"]).read_text() == f"slurmdbd uid={slurm_uid} args=-D\n"
    assert "hunter2" not in done.stderr + done.stdout
    assert_jwt_key_installed(pod)


def as_kubelet_with_fs_group(path: Path, group: str = "slurm") -> None:
    """A Secret's file as the kubelet leaves it with the pod's `fsGroup`: root's, group-readable by that group."""
    os.chown(path, 0, grp.getgrnam(group).gr_gid)
    path.chmod(0o440)


def without_root(user: str, group: str = "slurm") -> tuple[str, ...]:
    """Run as a container with runAsUser `user` and fsGroup `group` does: no root, no capability."""
    return (
        "setpriv",
        f"--reuid={user}",
        f"--regid={user}",
        f"--groups={grp.getgrnam(group).gr_gid}",
        "--inh-caps=-all",
    )


def test_accounting_runs_without_root_as_its_restricted_pod_does(pod: dict[str, str]) -> None:
    """The accounting pod has no root (Pod Security "restricted"): as SlurmUser the entrypoint still installs a
    slurmdbd.conf only SlurmUser reads and the JWT key, from Secrets readable through fsGroup, and starts slurmdbd."""
    etc = Path(pod["SLURM_CONF_DIR"])
    etc.mkdir(parents=True)
    os.chown(etc, pwd.getpwnam("slurm").pw_uid, -1)  # the accounting image's /etc/slurm
    with socket.create_server(("127.0.0.1", 0)) as database:
        conf = slurmdbd_conf(pod, database.getsockname()[1])
        for secret in (conf, Path(pod["JWT_KEY_SOURCE"])):
            as_kubelet_with_fs_group(secret)
        env = {**pod, "SLURMDBD_CONF_SOURCE": str(conf)}
        done = run_script("entrypoint-accounting", env=env, wrapper=without_root("slurm"))

    assert done.returncode == 0, done.stderr
    slurm_uid = pwd.getpwnam("slurm").pw_uid
    installed = etc / "slurmdbd.conf"
    assert (stat.S_IMODE(installed.stat().st_mode), installed.stat().st_uid) == (0o600, slurm_uid)
    assert Path(pod["LOG"]).read_text() == f"slurmdbd uid={slurm_uid} args=-D\n"
    assert_jwt_key_installed(pod)


def test_accounting_waits_for_its_database_and_names_it(pod: dict[str, str]) -> None:
    """slurmdbd exits when its database is unreachable at start; the entrypoint waits instead (no crash loop) and says
    which host it waits for, then starts slurmdbd once the database listens."""
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]  # free once closed: nothing listens there while the script starts
    conf = slurmdbd_conf(pod, port)
    env = {**pod, "SLURMDBD_CONF_SOURCE": str(conf), "DATABASE_WAIT_LOG_SECONDS": "1"}
    proc = subprocess.Popen(
        [str(SCRIPTS / "entrypoint-accounting")],
        env={"LC_ALL": "C.UTF-8", **env},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 30
        seen = ""
        while f"waiting for the database 127.0.0.1:{port}" not in seen:
            assert time.monotonic() < deadline, seen
            seen += proc.stderr.readline()
        assert proc.poll() is None
        assert Path(pod["LOG"]).read_text() == ""  # slurmdbd not started yet
        with socket.create_server(("127.0.0.1", port)):
            assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert Path(pod["LOG"]).read_text() == f"slurmdbd uid={pwd.getpwnam('slurm').pw_uid} args=-D\n"


def jail_env(pod: dict[str, str]) -> dict[str, str]:
    jail = Path(pod["ROOT"]) / "jail"
    for name in ("etc", "usr", "proc", "dev", "sys", "run", "tmp"):
        (jail / name).mkdir(parents=True, exist_ok=True)
    return {
        **pod,
        "JAIL_DIR": str(jail),
        "COMPLEMENT_JAIL_BINDS": "",
        "COMPLEMENT_JAIL_HOOKS": "/nonexistent",
        "COMPLEMENT_JAIL_REFUSED": str(Path(pod["ROOT"]) / "refused-submounts"),
    }


def test_worker_completes_the_jail_then_runs_slurmd(pod: dict[str, str]) -> None:
    env = jail_env(pod)
    done = run_script(
        "entrypoint-worker",
        env=env,
        wrapper=("unshare", "--mount", "--propagation", "private", "bash", "-c", '"$0" && findmnt -M "$JAIL_DIR/proc"'),
    )

    assert done.returncode == 0, done.stderr
    assert_configs_installed(pod)
    assert "jail " + env["JAIL_DIR"] + " is complete" in done.stderr
    assert Path(pod["LOG"]).read_text() == f"slurmd uid=0 args=-D -L {pod['SLURMD_LOG_PIPE']}\n"


def test_the_step_daemons_log_reaches_the_containers_output_once(pod: dict[str, str]) -> None:
    """slurmd gets a FIFO as its log file (-L), which it hands to every slurmstepd; the entrypoint copies the lines of
    the step daemons (they start with their step) to its standard output, and not slurmd's own, which slurmd in the
    foreground writes to its standard error as well. Stand-ins write what Slurm 24.11 writes (log.c: "[time] " then
    slurmstepd's "[job.step] " prefix) and exit; the copy ends after them with every line out."""
    root = Path(pod["ROOT"])
    write_exe(
        root / "bin" / "slurmd",
        "#!/bin/bash\n"
        'while [ "$1" != -L ]; do shift; done\n'
        'echo "slurmd: slurmd version 24.11.5 started" >&2\n'
        'echo "[2026-12-03T00:00:00.000] slurmd version 24.11.5 started" >> "$2"\n'
        "for step in 42.0 42.batch 7.extern; do\n"
        '    echo "[2026-12-03T00:00:01.000] [$step] error: execve(): /no/such/program: No such file" >> "$2"\n'
        "done\n",
    )
    wrapper = ("unshare", "--mount", "--propagation", "private")
    done = run_script("entrypoint-worker", env=jail_env(pod), wrapper=wrapper)

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"[2026-12-03T00:00:01.000] [{step}] error: execve(): /no/such/program: No such file"
        for step in ("42.0", "42.batch", "7.extern")
    ]
    assert done.stderr.count("slurmd version 24.11.5 started") == 1, done.stderr
    fifo = Path(pod["SLURMD_LOG_PIPE"])
    assert stat.S_ISFIFO(fifo.stat().st_mode) and stat.S_IMODE(fifo.stat().st_mode) == 0o600


def test_worker_registers_a_dynamic_node_knows_jail_users_and_puts_its_spool_in_the_jail(pod: dict[str, str]) -> None:
    env = {**jail_env(pod), "SLURMD_CONF": "Feature=cpu CPUs=1 RealMemory=1024", "SLURMD_NODENAME": "c-worker-cpu-0"}
    spool = Path(pod["ROOT"]) / "spool"
    conf = Path(pod["SLURM_CONFIGS_SOURCE"]) / "..data" / "slurm.conf"
    conf.write_text(conf.read_text() + f"SlurmdSpoolDir={spool}\n")
    jail = Path(env["JAIL_DIR"])
    (jail / "etc" / "passwd").write_text("alice:x:1500:1500::/home/alice:/bin/bash\n")
    (jail / "home" / "alice").mkdir(parents=True)
    # Inside the entrypoint's mount namespace: the spool directory (slurmstepd runs batch scripts from it once the
    # chroot plugin moved it into the jail) is the same directory at its own path in the jail, and nothing of the
    # jail is mounted outside it any more (no mirrored /home).
    probe = f'"$0" && touch {spool}/seen && ls {jail}{spool} && findmnt -n -o TARGET --target /home'
    done = run_script(
        "entrypoint-worker", env=env, wrapper=("unshare", "--mount", "--propagation", "private", "bash", "-c", probe)
    )

    assert done.returncode == 0, done.stderr
    listed, home_mount = done.stdout.split()
    assert listed == "seen"
    assert home_mount != "/home"
    assert Path(pod["LOG"]).read_text() == (
        f"slurmd uid=0 args=-D -L {pod['SLURMD_LOG_PIPE']} -Z --conf Feature=cpu CPUs=1 RealMemory=1024"
        " -N c-worker-cpu-0\n"
    )
    passwd = Path(env["EXTRAUSERS_DIR"]) / "passwd"
    assert passwd.is_symlink() and passwd.read_text() == "alice:x:1500:1500::/home/alice:/bin/bash\n"


def test_a_worker_whose_sub_mount_is_refused_drains_its_node_before_slurmd_starts(pod: dict[str, str]) -> None:
    """A symlink in the jail would lead the sub-mount onto the jail's /etc: complement-jail refuses it, the pod goes on
    (no crash loop), and the node, which Slurm knows (an elastic group's), is drained naming the sub-mount before
    slurmd can take a job."""
    root = Path(pod["ROOT"])
    env = {
        **jail_env(pod),
        "SLURMD_CLOUD": "true",
        "SLURMD_NODENAME": "c-worker-cpu-0",
        "JAIL_SUBMOUNTS": "ds:/scratch/ds",
        "JAIL_SUBMOUNTS_SOURCE": str(root / "submounts"),
    }
    (root / "submounts" / "ds").mkdir(parents=True)
    (Path(env["JAIL_DIR"]) / "scratch").mkdir()
    (Path(env["JAIL_DIR"]) / "scratch" / "ds").symlink_to("../etc")
    write_exe(root / "bin" / "scontrol", RECORDER.format(log=pod["LOG"]))
    wrapper = (
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "bash",
        "-c",
        '"$0" && findmnt -M "$JAIL_DIR/etc"; true',
    )
    done = run_script("entrypoint-worker", env=env, wrapper=wrapper)

    assert done.returncode == 0, done.stderr
    assert done.stdout == "", "nothing mounted over the jail's /etc"
    reason = "slurmctl-jail: sub-mount ds at /scratch/ds refused: /scratch/ds is a symlink (to ../etc)"
    assert Path(pod["LOG"]).read_text().splitlines() == [
        "scontrol uid=0 args=-o show node c-worker-cpu-0",
        f"scontrol uid=0 args=update NodeName=c-worker-cpu-0 State=DRAIN Reason={reason}",
        f"slurmd uid=0 args=-D -L {pod['SLURMD_LOG_PIPE']} -b -N c-worker-cpu-0",
    ]


def _run_dynamic_worker(pod: dict[str, str], *, leaving: bool) -> str:
    """entrypoint-worker for a dynamic node Slurm does not know (its registration was lost): a stand-in scontrol says
    "not found" until the stand-in slurmd got a SIGHUP (after which it registered). Returns the daemons' log once
    the follower had a second of polls (0.2 s each) after its first question to Slurm (after slurmd started, when
    the node is `leaving`)."""
    root, log = Path(pod["ROOT"]), Path(pod["LOG"])
    stop, registered = root / "stop", root / "registered"
    write_exe(
        root / "bin" / "slurmd",
        RECORDER.format(log=log)
        + f"trap 'echo slurmd got HUP >> {log}; touch {registered}' HUP\n"
        + f"while [ ! -e {stop} ]; do sleep 0.05; done\n",
    )
    write_exe(
        root / "bin" / "scontrol",
        RECORDER.format(log=log)
        + f'if [ -e {registered} ]; then echo "NodeName=$4 State=IDLE"; else echo "Node $4 not found"; exit 1; fi\n',
    )
    env = {
        **jail_env(pod),
        "SLURMD_CONF": "Feature=cpu CPUs=1 RealMemory=1024",
        "SLURMD_NODENAME": "c-worker-cpu-0",
        "SLURM_CONFIGS_VERIFY_SECONDS": "0",
        "WORKER_LEAVING": str(root / "leaving"),
        "LC_ALL": "C.UTF-8",
    }
    if leaving:
        (root / "leaving").touch()
    proc = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", str(SCRIPTS / "entrypoint-worker")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),  # noqa: PLW1509 - no threads fork here
    )
    try:
        until(lambda: "slurmd uid=0" in log.read_text(), timeout=30, interval=0.1, what="slurmd to start")
        if not leaving:
            asked = "scontrol uid=0 args=-o show node c-worker-cpu-0"
            until(lambda: asked in log.read_text(), timeout=30, interval=0.1, what="Slurm asked about the node")
        holds(lambda: log.read_text().count("slurmd got HUP") <= 1, seconds=1, what="at most one SIGHUP")
    finally:
        stop.touch()
        proc.communicate(timeout=30)
    return log.read_text()


def test_a_dynamic_node_whose_registration_was_lost_registers_again(pod: dict[str, str]) -> None:
    """slurmd took a standby's refusal for a registration (Slurm 24.11): Slurm does not know the node and never will
    by itself. The follower sees "not found" and sends slurmd one SIGHUP, after which it is known."""
    log = _run_dynamic_worker(pod, leaving=False)

    assert log.count("slurmd got HUP") == 1, log
    assert log.count("slurmd uid=0") == 1, "slurmd was not started twice"


def test_a_dynamic_node_leaving_slurm_is_not_registered_again(pod: dict[str, str]) -> None:
    """The preStop deletes the node from Slurm on purpose (scale-in): once it has begun, "not found" is what it
    wanted, and the follower leaves slurmd alone."""
    log = _run_dynamic_worker(pod, leaving=True)

    assert "slurmd got HUP" not in log, log


@pytest.mark.parametrize("containers", [False, True])
def test_worker_prepares_container_steps_only_with_oci_conf(pod: dict[str, str], containers: bool) -> None:
    """slurmstepd would create the steps' directory owned by the first user to run a container step: it must exist,
    root's, first. And slurmstepd reads a bundle's config.json before it enters the jail: the users' directories are
    there at their own paths, read-only; without container steps nothing of the jail is outside it."""
    env = {**jail_env(pod), "OCI_ROOT": pod["ROOT"] + "/run/slurm-oci"}
    bundle = Path(env["JAIL_DIR"]) / "home" / "alice" / "bundle"
    bundle.mkdir(parents=True)
    (bundle / "config.json").write_text("{}\n")
    if containers:
        (Path(env["SLURM_CONFIGS_SOURCE"]) / "oci.conf").write_text('RunTimeRun="crun run"\n')
    probe = '"$0" && cat /home/alice/bundle/config.json; touch /home/alice/x 2>/dev/null && echo writable; true'
    wrapper = ("unshare", "--mount", "--propagation", "private", "bash", "-c", probe)
    done = run_script("entrypoint-worker", env=env, wrapper=wrapper)

    assert done.returncode == 0, done.stderr
    top = Path(env["OCI_ROOT"])
    assert top.exists() == containers
    assert done.stdout == ("{}\n" if containers else "")
    if containers:
        assert (top.stat().st_uid, stat.S_IMODE(top.stat().st_mode)) == (0, 0o711)


def test_login_installs_sshd_config_keys_and_runs_sshd(pod: dict[str, str]) -> None:
    root = Path(pod["ROOT"])
    sshd_cm = root / "mnt" / "sshd-configs"
    sshd_cm.mkdir()
    (sshd_cm / "sshd_config").write_text("ChrootDirectory /mnt/jail\n")
    (sshd_cm / "authorized_keys").write_text("ssh-ed25519 AAAA admin\n")
    keys = root / "mnt" / "ssh-host-keys"
    keys.mkdir()
    (keys / "ssh_host_ed25519_key").write_text("PRIVATE")
    (keys / "ssh_host_ed25519_key.pub").write_text("ssh-ed25519 AAAA host")
    env = {
        **jail_env(pod),
        "SSHD_CONFIGS_SOURCE": str(sshd_cm),
        "SSH_HOST_KEYS_SOURCE": str(keys),
        "SSH_DIR": str(root / "etc" / "ssh"),
        "ROOT_SSH_DIR": str(root / "root-ssh"),
        "SSHD_PRIVSEP_DIR": str(root / "run" / "sshd"),
    }
    (root / "etc" / "ssh").mkdir(parents=True)

    done = run_script("entrypoint-login", env=env, wrapper=("unshare", "--mount", "--propagation", "private"))

    assert done.returncode == 0, done.stderr
    ssh = root / "etc" / "ssh"
    assert stat.S_IMODE((ssh / "ssh_host_ed25519_key").stat().st_mode) == 0o600
    assert stat.S_IMODE((ssh / "ssh_host_ed25519_key.pub").stat().st_mode) == 0o644
    assert stat.S_IMODE((root / "root-ssh" / "authorized_keys").stat().st_mode) == 0o600
    assert (ssh / "sshd_config").read_text() == "ChrootDirectory /mnt/jail\n"
    assert Path(pod["LOG"]).read_text() == f"sshd uid=0 args=-D -e -f {ssh}/sshd_config\n"
    # Clients need only munged's socket: no munge key here for a root session that leaves the chroot to find.
    assert not Path(pod["MUNGE_KEY_FILE"]).exists()

    assert not (ssh / "ssh_known_hosts2").exists()

    # spec.login.sshToJobNodes: the workers' sshd has these host keys; the jail's ssh client knows them for the
    # workers' names, in the file bound over the jail's ssh_known_hosts2.
    jobs = {**env, "SLURMCTL_JOB_NODES": "c-worker-cpu-*,c-worker-gpu-*"}
    probe = (
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "bash",
        "-c",
        f'"$0" && cat {env["JAIL_DIR"]}{ssh}/ssh_known_hosts2',
    )
    known = run_script("entrypoint-login", env=jobs, wrapper=probe)
    assert known.returncode == 0, known.stderr
    assert known.stdout == "c-worker-cpu-*,c-worker-gpu-* ssh-ed25519 AAAA\n"

    # sshd, and so every session, runs without CAP_SYS_ADMIN: only complement-jail needed it.
    write_exe(root / "bin" / "sshd", f"#!/bin/sh\ngrep CapBnd /proc/self/status > {root}/sshd-caps\n")
    assert (
        run_script("entrypoint-login", env=env, wrapper=("unshare", "--mount", "--propagation", "private")).returncode
        == 0
    )
    bounding = int((root / "sshd-caps").read_text().split()[1], 16)
    cap_setpcap, cap_sys_admin, cap_sys_chroot = 8, 21, 18
    assert not bounding & ((1 << cap_sys_admin) | (1 << cap_setpcap)), hex(bounding)
    assert bounding & (1 << cap_sys_chroot), hex(bounding)

    (keys / "ssh_host_ed25519_key").unlink()
    no_keys = run_script("entrypoint-login", env=env, wrapper=("unshare", "--mount", "--propagation", "private"))
    assert no_keys.returncode == 1
    assert "no ssh_host_*_key in" in no_keys.stderr


def test_a_worker_with_ssh_to_job_nodes_runs_the_login_nodes_sshd_behind_pam_slurm_adopt(pod: dict[str, str]) -> None:
    """spec.login.sshToJobNodes: the login nodes' sshd files installed, sshd started beside slurmd (its PID kept for
    the preStop), and PAM's account phase extended once with the login-address check and pam_slurm_adopt for this
    node. Without the setting, none of it: no sshd, the PAM file untouched."""
    root = Path(pod["ROOT"])
    sshd_cm = root / "mnt" / "sshd-configs"
    sshd_cm.mkdir()
    (sshd_cm / "sshd_config").write_text("ChrootDirectory /mnt/jail\n")
    keys = root / "mnt" / "ssh-host-keys"
    keys.mkdir()
    (keys / "ssh_host_ed25519_key").write_text("PRIVATE")
    pam = root / "etc" / "pam.d" / "sshd"
    pam.parent.mkdir(parents=True)
    pam.write_text("@include common-account\n")
    env = {
        **jail_env(pod),
        "SLURMD_NODENAME": "c-worker-cpu-0",
        "SSHD_CONFIGS_SOURCE": str(sshd_cm),
        "SSH_HOST_KEYS_SOURCE": str(keys),
        "SSH_DIR": str(root / "etc" / "ssh"),
        "ROOT_SSH_DIR": str(root / "root-ssh"),
        "SSHD_PRIVSEP_DIR": str(root / "run" / "sshd"),
        "SSHD_PAM": str(pam),
        "JOB_SSHD_PID": str(root / "run" / "job-sshd.pid"),
    }
    (root / "etc" / "ssh").mkdir(parents=True)
    wrapper = ("unshare", "--mount", "--propagation", "private")

    off = run_script("entrypoint-worker", env=env, wrapper=wrapper)
    assert off.returncode == 0, off.stderr
    assert Path(pod["LOG"]).read_text() == f"slurmd uid=0 args=-D -L {pod['SLURMD_LOG_PIPE']}\n"
    assert pam.read_text() == "@include common-account\n"
    assert not (root / "etc" / "ssh" / "sshd_config").exists()

    on = {**env, "SLURMCTL_SSH_FROM": "c-login-headless.hpc.svc.cluster.local"}
    for _ in range(2):  # a restarted container adds nothing twice
        done = run_script("entrypoint-worker", env=on, wrapper=wrapper)
        assert done.returncode == 0, done.stderr
    until(lambda: Path(pod["LOG"]).read_text().count("sshd uid=0") == 2, timeout=10, what="sshd started twice")
    assert f"sshd uid=0 args=-D -e -f {root}/etc/ssh/sshd_config\n" in Path(pod["LOG"]).read_text()
    assert (root / "etc" / "ssh" / "sshd_config").read_text() == "ChrootDirectory /mnt/jail\n"
    assert stat.S_IMODE((root / "etc" / "ssh" / "ssh_host_ed25519_key").stat().st_mode) == 0o600
    assert int((root / "run" / "job-sshd.pid").read_text()) > 1
    assert pam.read_text() == (
        "@include common-account\n"
        f"account required pam_exec.so quiet {SCRIPTS}/ssh-from-login c-login-headless.hpc.svc.cluster.local\n"
        "account required pam_slurm_adopt.so nodename=c-worker-cpu-0 join_container=false"
        " action_adopt_failure=deny action_generic_failure=deny\n"
    )


@pytest.mark.parametrize(
    ("rhost", "admitted"),
    [("10.244.1.7", True), ("10.244.1.70", False), ("", False)],
)
def test_ssh_from_login_admits_only_an_address_of_the_login_service(tmp_path: Path, rhost: str, admitted: bool) -> None:
    """The PAM account check of a worker's sshd: PAM_RHOST must be one of the addresses the login nodes' headless
    Service resolves to at that moment; a failed lookup refuses."""
    getent = (
        '#!/bin/sh\n[ "$1 $2" = "ahosts c-login" ] || exit 2\n'
        'printf "10.244.1.7 STREAM c-login\\n10.244.2.9 STREAM\\n"\n'
    )
    bin_dir = tmp_path / "bin"
    write_exe(bin_dir / "getent", getent)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "PAM_RHOST": rhost, "PAM_TYPE": "account"}
    done = run_script("ssh-from-login", "c-login", env=env)
    assert (done.returncode == 0) == admitted, done.stderr
    assert run_script("ssh-from-login", "c-other", env={**env, "PAM_RHOST": "10.244.1.7"}).returncode == 1


@pytest.mark.parametrize("root", [True, False], ids=["as-root", "without-root"])
def test_munge_container_runs_a_working_munged_as_munge(pod: dict[str, str], root: bool) -> None:
    """As root the container makes the socket directory munge's and drops to munge; without root (the accounting pod,
    Pod Security "restricted") it runs as munge from the start, in the pod's group-writable emptyDir, which munged
    accepts only forced (the script says so), with the key from a Secret readable through fsGroup."""
    root_dir = Path(pod["ROOT"])
    sock = root_dir / "munge-run" / "munge.socket.2"
    env = {**pod, "MUNGE_SOCKET": str(sock)}
    state = root_dir / "munge-state"
    state.mkdir(mode=0o700)
    os.chown(state, pwd.getpwnam("munge").pw_uid, -1)
    argv = [str(SCRIPTS / "entrypoint-munge"), f"--pid-file={state}/pid", f"--seed-file={state}/seed"]
    argv.append(f"--log-file={state}/log")
    wrapper: tuple[str, ...] = ()
    if root:
        argv.append("--force")  # the test's own directories (under /var/tmp) are not munge's
    else:
        # An emptyDir with the pod's fsGroup, and /etc/munge as the image has it (munge's, 0700).
        sock.parent.mkdir()
        os.chown(sock.parent, 0, grp.getgrnam("slurm").gr_gid)
        sock.parent.chmod(0o2777)
        key_dir = Path(pod["MUNGE_KEY_FILE"]).parent
        key_dir.mkdir(parents=True, mode=0o700)
        os.chown(key_dir, pwd.getpwnam("munge").pw_uid, -1)
        as_kubelet_with_fs_group(Path(pod["MUNGE_KEY_SOURCE"]))
        wrapper = without_root("munge")
    proc = subprocess.Popen([*wrapper, *argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while not sock.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "munged did not create its socket"
            time.sleep(0.1)
        cred = subprocess.run(["munge", "-n", "-S", str(sock)], capture_output=True, text=True, check=True)
        decoded = subprocess.run(
            ["unmunge", "-S", str(sock)], input=cred.stdout, capture_output=True, text=True, check=False
        )
        assert decoded.returncode == 0, decoded.stderr
        assert "STATUS:          Success (0)" in decoded.stdout
        owner = subprocess.run(["ps", "-o", "user=", "-p", str(proc.pid)], capture_output=True, text=True, check=True)
        assert owner.stdout.strip() == "munge"
        key = Path(pod["MUNGE_KEY_FILE"])
        assert (stat.S_IMODE(key.stat().st_mode), pwd.getpwuid(key.stat().st_uid).pw_name) == (0o400, "munge")
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert ("munged runs with --force" in err) is not root, err


def test_benchmark_job_runs_its_own_munged_and_the_benchmark_as_slurm_user(pod: dict[str, str]) -> None:
    root = Path(pod["ROOT"])
    sock = root / "munge-run" / "munge.socket.2"
    state = root / "munge-state"
    state.mkdir(mode=0o700)
    os.chown(state, pwd.getpwnam("munge").pw_uid, -1)
    # The stand-in benchmark proves munge answers to it, then fails like a benchmark with a slow node does.
    stand_in = write_exe(
        root / "bin" / "benchmark",
        "#!/bin/sh\n"
        f'munge -n -S "$MUNGE_SOCKET" | unmunge -S "$MUNGE_SOCKET" >/dev/null && echo "munge ok" >> {pod["LOG"]}\n'
        f'echo "benchmark uid=$(id -u) args=$*" >> {pod["LOG"]}\nexit 1\n',
    )
    env = {
        **pod,
        "MUNGE_SOCKET": str(sock),
        "NCCL_BENCHMARK": str(stand_in),
        "MUNGED_ARGS": f"--pid-file={state}/pid --seed-file={state}/seed --log-file={state}/log",
    }

    done = run_script("entrypoint-nccl-benchmark", env=env, timeout=30)

    assert done.returncode == 1, done.stderr
    slurm_uid = pwd.getpwnam("slurm").pw_uid
    assert Path(pod["LOG"]).read_text() == f"munge ok\nbenchmark uid={slurm_uid} args=\n"
    # munged lived only as long as the Job's work: nothing keeps it running afterwards (it is signalled on exit).
    deadline = time.monotonic() + 10
    while subprocess.run(["pgrep", "-f", "--", f"--socket={sock}"], capture_output=True, check=False).returncode == 0:
        assert time.monotonic() < deadline, "munged outlived the benchmark"
        time.sleep(0.1)


def test_benchmark_job_installs_all_reduce_perf_first_and_leaves_its_report_as_termination_message(
    pod: dict[str, str],
) -> None:
    root = Path(pod["ROOT"])
    sock = root / "munge-run" / "munge.socket.2"
    state = root / "munge-state"
    state.mkdir(mode=0o700)
    os.chown(state, pwd.getpwnam("munge").pw_uid, -1)
    installer = write_exe(
        root / "bin" / "install-stand-in", '#!/bin/sh\necho "installing" >&2\necho /usr/lib/x/v1/bin\n'
    )
    # The stand-in benchmark writes its report where it is told, as SlurmUser, and says which PATH it was given.
    stand_in = write_exe(
        root / "bin" / "benchmark",
        f'#!/bin/sh\necho "path=$NCCL_BENCHMARK_PATH uid=$(id -u)" >> {pod["LOG"]}\n'
        'echo \'{"exit":2,"not_run":[]}\' > "$NCCL_BENCHMARK_REPORT"\nexit 2\n',
    )
    termination_log = root / "termination-log"
    termination_log.touch()
    tmp = root / "tmp"
    tmp.mkdir()
    env = {
        **pod,
        "MUNGE_SOCKET": str(sock),
        "NCCL_BENCHMARK": str(stand_in),
        "INSTALL_ALL_REDUCE_PERF": str(installer),
        "TERMINATION_LOG": str(termination_log),
        "TMPDIR": str(tmp),
        "MUNGED_ARGS": f"--pid-file={state}/pid --seed-file={state}/seed --log-file={state}/log",
    }

    done = run_script("entrypoint-nccl-benchmark", env=env, timeout=30)

    assert done.returncode == 2, done.stderr
    assert Path(pod["LOG"]).read_text() == f"path=/usr/lib/x/v1/bin uid={pwd.getpwnam('slurm').pw_uid}\n"
    assert termination_log.read_text() == '{"exit":2,"not_run":[]}\n'
    assert list(tmp.iterdir()) == [], "the report's temporary file is removed"

    # An installer that fails leaves the benchmark to the jail's own all_reduce_perf (no PATH entry) and says so.
    write_exe(installer, '#!/bin/sh\necho "cannot copy" >&2\nexit 1\n')
    Path(pod["LOG"]).write_text("")
    done = run_script("entrypoint-nccl-benchmark", env=env, timeout=30)
    assert done.returncode == 2
    assert Path(pod["LOG"]).read_text().startswith("path= uid=")
    assert "could not be installed into the jail" in done.stderr


def test_munge_container_clears_the_socket_a_munged_before_it_left(pod: dict[str, str]) -> None:
    """The socket directory (an emptyDir) outlives the container, and the node's crash: a socket left there would pass
    the startup probe (`test -S`) before this munged listens. The entrypoint removes it before munged starts."""
    root_dir = Path(pod["ROOT"])
    sock = root_dir / "munge-run" / "munge.socket.2"
    sock.parent.mkdir()
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(sock))
    stale.close()
    assert sock.is_socket()
    write_exe(
        root_dir / "bin" / "munged",
        f"#!/bin/sh\n[ -e {sock} ] && echo stale >> {pod['LOG']} || echo fresh >> {pod['LOG']}\n",
    )
    done = run_script("entrypoint-munge", env={**pod, "MUNGE_SOCKET": str(sock)})

    assert done.returncode == 0, done.stderr
    assert Path(pod["LOG"]).read_text() == "fresh\n"
