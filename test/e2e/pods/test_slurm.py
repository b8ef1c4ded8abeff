"""A SlurmCluster becomes a working Slurm 24.11 on the real node: real pods from the images `make images` built, Slurm
daemons started from what the operator rendered, users entering the jail through sshd and the chroot SPANK plugin.

One cluster (the minimal sample, with ssh to job nodes on) is shared by the tests of this module, in order: available
→ a jail user logs in and runs jobs → scancel of a step started on the login node → every node name resolves where
users run code, and follows a re-created worker → a torchrun-style rendezvous across the workers by node name → an MPI
allreduce → ssh to the worker of a running job → job files at any path in the jail → two users' jobs at once on one
worker, each with its own /tmp and /dev/shm → the escape table → slurmrestd → the operator's Slurm metrics against
sinfo and squeue → Slurm's node state on the pods → a partition change reaches every daemon in place → scale out under
a running job → scale in under a running job (drain first) → scale in while Slurm cannot be asked (nothing goes) →
the JWT key rotated under a running job → a worker group with its own partition removed under a running job → a
restart-requiring change held until a maintenance window, under Slurm's MAINT reservation → delete. The operator
runs as `slurmctl run`, with its ServiceAccount's token.
(Re-creating workers for a change only a restart can apply is unit-tested: test/unit/reconcilers/test_drain.py.)
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from slurmctl.render.rest import API_VERSION
from test.e2e.harness import REPO, free_port
from test.e2e.pods.slurm import (
    Kube,
    attempts_script,
    attempts_seen,
    identity,
    node_fields,
    pod_ready,
    small_group,
    ssh,
    ssh_keypair,
)
from test.waiting import holds, until

pytestmark = pytest.mark.e2e
SAMPLE = REPO / "config" / "samples" / "slurmcluster_minimal.yaml"
NAME = "minimal"
LOGIN_POD, LOGIN = f"{NAME}-login-0", "sshd"
CONTROLLER_POD = f"{NAME}-controller-0"
WORKERS = f"app.kubernetes.io/instance={NAME},app.kubernetes.io/component=workers"
JAIL = "/mnt/jail"
USER, UID = "alice", 1500
REST = f"http://{NAME}-rest:6820"
REST_PODS = f"app.kubernetes.io/instance={NAME},app.kubernetes.io/component=rest"
METRICS = f"127.0.0.1:{free_port()}"
PROMTOOL = Path(os.environ.get("SLURMCTL_CACHE", Path.home() / ".cache" / "slurmctl")) / "promtool" / "promtool"
OPERATOR_ARGS = ("--metrics-bind-address", METRICS)  # the module's operator serves /metrics there


def sinfo_nodes(kube: Kube) -> dict[str, str]:
    """Slurm's node list as the login node sees it: node name -> state (e.g. idle, alloc, down*)."""
    out = kube.exec(LOGIN_POD, LOGIN, "sinfo", "-h", "-N", "-o", "%N %t")
    return dict(line.split() for line in out.splitlines() if line.strip())


def wait_for_nodes(kube: Kube, ok: Callable[[dict[str, str]], bool], *, timeout: float, what: str) -> dict[str, str]:
    seen: list[dict[str, str]] = []

    def probe() -> dict[str, str] | None:
        seen[:] = [sinfo_nodes(kube)]
        return seen[0] if ok(seen[0]) else None

    try:
        return until(probe, timeout=timeout, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; sinfo showed {seen}") from None


def worker_pods(kube: Kube) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in kube.pods(WORKERS)}


@pytest.fixture(scope="module")
def available(kube: Kube, operator: Path) -> Kube:
    """The minimal sample, with ssh to job nodes on (spec.login.sshToJobNodes, off by default): every other test of
    the module runs beside the workers' sshd."""
    docs = [doc for doc in yaml.safe_load_all(SAMPLE.read_text()) if doc]
    for doc in docs:
        if doc["kind"] == "SlurmCluster":
            doc["spec"].setdefault("login", {})["sshToJobNodes"] = True
    kube.apply(docs)
    kube.until_available(NAME, operator, timeout=900)
    return kube


def test_minimal_sample_is_available_with_every_worker_idle(available: Kube) -> None:
    kube = available
    pods = kube.pods(f"app.kubernetes.io/instance={NAME}")
    slurm_pods = [
        p for p in pods if p["metadata"].get("labels", {}).get("app.kubernetes.io/component") != "populate-jail"
    ]
    # controller, 2 workers, login, slurmrestd
    assert len(slurm_pods) == 5, [p["metadata"]["name"] for p in pods]
    assert all(pod_ready(p) for p in slurm_pods), {p["metadata"]["name"]: p["status"] for p in slurm_pods}
    # Readiness asks Slurm: a ready worker is a node slurmctld knows and hears from.
    nodes = wait_for_nodes(
        kube,
        lambda n: set(n.values()) == {"idle"} and len(n) == 2,
        timeout=120,
        what="both workers idle in sinfo",
    )
    assert set(nodes) == {f"{NAME}-worker-cpu-0", f"{NAME}-worker-cpu-1"}


@pytest.fixture(scope="module")
def jail_user(available: Kube, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A user created inside the jail (as an admin would, with the jail's own useradd), with an ssh key."""
    kube = available
    key, public = ssh_keypair(tmp_path_factory.mktemp("ssh"))
    home = f"/home/{USER}"
    kube.exec(LOGIN_POD, LOGIN, "chroot", JAIL, "useradd", "-m", "-u", str(UID), "-s", "/bin/bash", USER)
    kube.exec(
        LOGIN_POD,
        LOGIN,
        "chroot",
        JAIL,
        "sh",
        "-c",
        f"install -d -m 700 -o {USER} -g {USER} {home}/.ssh && cat > {home}/.ssh/authorized_keys && "
        f"chown {USER}: {home}/.ssh/authorized_keys && chmod 600 {home}/.ssh/authorized_keys",
        input=public + "\n",
    )
    kube.exec(LOGIN_POD, LOGIN, "sh", "-c", f"echo jail-of-{NAME} > {JAIL}/etc/slurmctl-test-marker")
    ip = kube.json("pod", LOGIN_POD)["status"]["podIP"]
    return key, ip


def test_root_gets_no_job_unless_the_admin_allows_it(available: Kube) -> None:
    """This module's operator runs with the default policy (no --allow-root-jobs): slurm.conf says DisableRootJobs,
    so root in the login pod is refused a job; root submitting for a user (`sbatch --uid`) still is the user's job
    (test_two_users_jobs_on_one_worker_each_see_only_their_own_tmp_and_shm submits one)."""
    kube = available
    config = kube.exec(LOGIN_POD, LOGIN, "scontrol", "show", "config")
    assert re.search(r"^DisableRootJobs\s*=\s*yes", config, re.MULTILINE | re.IGNORECASE), config
    out = kube.exec(LOGIN_POD, LOGIN, "sh", "-c", "srun -N1 -t 1 true 2>&1; echo rc=$?")
    assert not out.rstrip().endswith("rc=0"), f"root ran a job: {out}"


def test_jail_user_logs_in_over_ssh_and_runs_jobs(available: Kube, jail_user: tuple[Path, str]) -> None:
    kube = available
    key, ip = jail_user
    # Logged in as the jail's user, with the jail as "/".
    who = ssh(key, USER, ip, "id -un; id -u; cat /etc/slurmctl-test-marker; test ! -e /mnt/jail && echo no-mnt-jail")
    assert who.split() == [USER, str(UID), f"jail-of-{NAME}", "no-mnt-jail"], who
    # srun across both workers, each task in the jail as the user.
    out = ssh(
        key,
        USER,
        ip,
        "srun -N2 --ntasks-per-node=1 sh -c 'echo $(hostname) $(id -un) $(cat /etc/slurmctl-test-marker)'",
    )
    lines = sorted(out.split("\n")[:-1])
    assert lines == [f"{NAME}-worker-cpu-{i} {USER} jail-of-{NAME}" for i in range(2)], out
    # sbatch: the output file is written where the user asked, in the jail (slurmstepd itself works inside it).
    job = ssh(key, USER, ip, "cd ~ && sbatch --parsable --wait -o batch-%j.out --wrap 'echo batch-on $(hostname)'")
    job_id = job.strip().split(";")[0]
    output = kube.exec(LOGIN_POD, LOGIN, "cat", f"{JAIL}/home/{USER}/batch-{job_id}.out")
    assert re.fullmatch(rf"batch-on {NAME}-worker-cpu-[01]\n", output), output
    owner = kube.exec(LOGIN_POD, LOGIN, "stat", "-c", "%u", f"{JAIL}/home/{USER}/batch-{job_id}.out")
    assert owner.strip() == str(UID)


def test_a_lower_ulimit_in_the_login_session_reaches_the_users_srun_job(
    available: Kube, jail_user: tuple[Path, str]
) -> None:
    """Slurm's default PropagateResourceLimits (ALL; docs/slurm-settings.md): the soft limits a user sets in their
    login shell are their job's on the worker, as on any Slurm cluster (Slurm's own test1.29). 4096 KiB of stack and
    512 open files are below what the worker's slurmd runs with, so the job can only have them from the login."""
    kube = available
    key, ip = jail_user
    show = "echo $(ulimit -S -s) $(ulimit -S -n)"
    worker = kube.exec(f"{NAME}-worker-cpu-0", "slurmd", "bash", "-c", show).split()
    assert worker != ["4096", "512"], worker
    out = ssh(key, USER, ip, f"ulimit -S -s 4096 && ulimit -S -n 512 && {show} && srun -N1 bash -c '{show}'")
    assert out.split("\n")[:2] == ["4096 512", "4096 512"], out


def test_a_step_that_fails_to_start_says_why_in_its_workers_container_log(
    available: Kube, jail_user: tuple[Path, str]
) -> None:
    """slurmstepd's own log (docs/slurm-settings.md "Where the logs are"): a step (`srun` in a batch job) whose
    program is not in the jail fails in slurmstepd's execve, whose error line, with its step, is in `kubectl logs
    <worker> -c slurmd`, once; slurmd's own lines are there once as well (its standard error), none of them copied a
    second time from its log file."""
    kube = available
    key, ip = jail_user
    worker, program = f"{NAME}-worker-cpu-0", "/no/such/program-of-alice"
    job = ssh(key, USER, ip, f"cd ~ && sbatch --parsable --wait -w {worker} -o /dev/null --wrap 'srun {program}; true'")
    job_id = job.strip().split(";")[0]
    error = rf"\[{job_id}\.0\] error: execve\(\): {program}: No such file or directory"
    line = re.compile(rf"^\[[^]]+\] {error}$", re.M)

    def logged() -> str | None:
        logs = kube.run("logs", worker, "-c", "slurmd")
        return logs if line.search(logs) else None

    logs = until(logged, timeout=30, interval=1, what=f"slurmstepd's execve error of job {job_id} in {worker}'s log")
    assert len(line.findall(logs)) == 1, logs
    assert not re.search(r"^\[[^]]+\] (?!\[[0-9])", logs, re.M), "slurmd's log file lines were copied too"
    assert "slurmd version" in logs  # slurmd's own start, from its standard error


def test_scancel_of_a_step_started_on_the_login_node_is_answered_and_srun_hears_it(
    available: Kube, jail_user: tuple[Path, str]
) -> None:
    """slurmctld reaches a step's srun by the name srun gives for its host, the login pod's short name: it resolves
    (the pod's own Service), so `scancel` is answered at once and srun is told. Unresolvable, slurmctld spent 10 s
    retrying inside the cancel request, and scancel said "Socket timed out"."""
    kube = available
    key, ip = jail_user
    login_ip = kube.json("pod", LOGIN_POD)["status"]["podIP"]
    resolved = kube.exec(CONTROLLER_POD, "slurmctld", "getent", "hosts", LOGIN_POD)
    assert resolved.split()[0] == login_ip, resolved
    # Cancelled once its task runs (the job alone can be RUNNING while srun still waits for its node).
    script = """srun -N1 -J cancel-me sh -c 'echo started; exec sleep 300' > ~/cancel-me.out 2>&1 & pid=$!
i=0; until grep -q started ~/cancel-me.out || [ $i -ge 600 ]; do sleep 0.1; i=$((i+1)); done
scancel -n cancel-me 2>&1; echo "scancel=$?"; wait $pid; echo "srun=$?"; cat ~/cancel-me.out"""
    out = ssh(key, USER, ip, script)
    assert "scancel=0" in out and "error" not in out.split("scancel=0")[0], out
    assert "CANCELLED" in out and "srun=0" not in out, out


# How soon a re-created worker's new address is what its name resolves to, once the API server shows the pod's IP (the
# node's resolver is fed by a watch, as CoreDNS is): a stated bound, not a timer the test waits out.
RESOLVES_WITHIN = 10.0


def resolved(kube: Kube, pod: str, container: str, *names: str) -> dict[str, str]:
    """name -> the first address `getent hosts` gives for it in a container ('' when it does not resolve)."""
    script = 'for n in "$@"; do echo "$n $(getent hosts "$n" | cut -d" " -f1)"; done'
    out = kube.exec(pod, container, "sh", "-c", script, "sh", *names)
    return {name: (rest or [""])[0] for name, *rest in (line.split() for line in out.splitlines())}


def test_every_node_name_resolves_to_its_pod_in_jobs_on_login_and_controller_and_follows_a_new_pod(
    available: Kube, jail_user: tuple[Path, str]
) -> None:
    """User code takes the node names Slurm hands out (MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST |
    head -n1), mpirun host lists): each worker's name resolves, forward and reverse, to the pod IP Slurm uses, in a
    job on every worker (inside the jail), on the login node and on the controller; a re-created worker's new
    address follows within RESOLVES_WITHIN seconds."""
    kube = available
    key, ip = jail_user
    workers = {name: pod["status"]["podIP"] for name, pod in worker_pods(kube).items()}
    expected = {**workers, LOGIN_POD: kube.json("pod", LOGIN_POD)["status"]["podIP"]}
    names = " ".join(sorted(expected))
    addresses = " ".join(sorted(workers.values()))
    # One task per worker, as the jail's user: each resolves every name, then every worker address back to a name.
    script = (
        f"for n in {names}; do echo \"$(hostname) $n $(getent hosts $n | cut -d' ' -f1)\"; done; "
        f"for a in {addresses}; do echo \"$(hostname) $a $(getent hosts $a | awk '{{print $2}}')\"; done"
    )
    out = ssh(key, USER, ip, f"srun -N{len(workers)} --ntasks-per-node=1 sh -c {shlex.quote(script)}")
    seen: dict[tuple[str, str], str] = {}
    for line in out.splitlines():
        where, asked, *answer = line.split()
        seen[(where, asked)] = answer[0] if answer else ""
    for where in workers:
        for name, address in expected.items():
            assert seen.get((where, name)) == address, f"{name} from a job on {where}: {out}"
        for name, address in workers.items():
            # The reverse name is the pod's own (`<pod>.<c>-workers.<ns>.svc.<domain>`): its first label is the node.
            assert seen.get((where, address), "").split(".")[0] == name, f"{address} from a job on {where}: {out}"
    on_login = ssh(key, USER, ip, f"for n in {' '.join(sorted(workers))}; do getent hosts $n; done")
    assert sorted(line.split()[0] for line in on_login.splitlines()) == sorted(workers.values()), on_login
    assert resolved(kube, CONTROLLER_POD, "slurmctld", *workers) == workers

    # A worker re-created (its pod deleted, as a node's drain or a user would): its name follows the new pod.
    moved, stays = sorted(workers)[-1], sorted(workers)[0]
    old_uid = worker_pods(kube)[moved]["metadata"]["uid"]
    kube.run("delete", "pod", moved, "--wait=false")

    def new_address() -> str | None:
        pod = worker_pods(kube).get(moved)
        return pod["status"].get("podIP") if pod and pod["metadata"]["uid"] != old_uid else None

    address = until(new_address, timeout=240, interval=0.2, what=f"a new pod {moved} with an IP")
    shown = time.monotonic()
    until(
        lambda: resolved(kube, stays, "slurmd", moved)[moved] == address or None,
        timeout=RESOLVES_WITHIN,
        interval=0.2,
        what=f"{moved} to resolve to its new address {address} on {stays}",
    )
    print(f"\n{moved}: {workers[moved]} -> {address}, resolved on {stays} {time.monotonic() - shown:.1f}s later")
    # The rest of the module starts from every worker idle again.
    wait_for_nodes(
        kube, lambda n: set(n.values()) == {"idle"} and len(n) == len(workers), timeout=240, what="workers idle"
    )


EXAMPLES = REPO / "docs" / "examples"


def test_a_torchrun_style_rendezvous_finds_rank_0_by_its_node_name_across_workers(
    available: Kube, jail_user: tuple[Path, str]
) -> None:
    """docs/usage.md's two-node job as a user submits it (docs/examples/rendezvous.sbatch): rank 0 listens on
    MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n1), the other rank connects to it by that
    name, and both get the sum of every rank's value, as PyTorch's c10d rendezvous and an allreduce would."""
    kube = available
    out = run_example(kube, jail_user, "rendezvous")
    # One line per rank: "rank R on HOST: world 2, sum 3, master MASTER".
    words = [line.split() for line in out.splitlines() if line.startswith("rank ")]
    ranks = {w[1]: (w[3].rstrip(":"), w[5], w[7], w[9]) for w in words if len(w) == 10}
    assert set(ranks) == {"0", "1"}, out
    first, second = ranks["0"][0], ranks["1"][0]
    assert {first, second} <= set(worker_pods(kube)) and first != second, out
    assert ranks["0"][1:] == ranks["1"][1:] == ("2,", "3,", first), out


def test_an_mpi_allreduce_across_workers_through_pmix_and_under_mpirun(
    available: Kube, jail_user: tuple[Path, str]
) -> None:
    """docs/usage.md's two-node MPI job as a user submits it (docs/examples/allreduce.sbatch): Open MPI ranks started by
    `srun --mpi=pmix` on both workers agree on the sum of an allreduce, and so do the ranks `mpirun` starts inside the
    same allocation."""
    kube = available
    out = run_example(kube, jail_user, "allreduce")
    # One line per rank and launcher: "<launcher> rank R of N on HOST: sum S".
    lines = [line.split() for line in out.splitlines() if " rank " in line]
    seen = {(w[0], w[2]): (w[6].rstrip(":"), w[4], w[8]) for w in lines if len(w) == 9}
    assert set(seen) == {(launcher, rank) for launcher in ("srun", "mpirun") for rank in ("0", "1")}, out
    for launcher in ("srun", "mpirun"):
        hosts = {seen[(launcher, rank)][0] for rank in ("0", "1")}
        assert hosts <= set(worker_pods(kube)) and len(hosts) == 2, out
        assert {seen[(launcher, rank)][1:] for rank in ("0", "1")} == {("2", "3")}, out


def run_example(kube: Kube, jail_user: tuple[Path, str], name: str) -> str:
    """A job of docs/examples as a user runs it: `<name>.sbatch` and `<name>.py` in their home, `sbatch --wait`, and
    the job's output file (`<name>-<job>.out`)."""
    key, ip = jail_user
    for example in (f"{name}.py", f"{name}.sbatch"):
        write_in_jail(kube, f"/home/{USER}/{example}", (EXAMPLES / example).read_text())
    job = ssh(key, USER, ip, f"cd ~ && sbatch --parsable --wait {name}.sbatch").strip().split(";")[0]
    return ssh(key, USER, ip, f"cat ~/{name}-{job}.out")


def write_in_jail(kube: Kube, path: str, text: str) -> None:
    """A file of the jail user's, written through the login node as root (then handed to the user)."""
    kube.exec(LOGIN_POD, LOGIN, "chroot", JAIL, "sh", "-c", f"cat > {path} && chown {USER}: {path}", input=text)


@pytest.fixture(scope="module")
def job_node_ssh(jail_user: tuple[Path, str]) -> str:
    """The ssh command a jail user runs on the login node to reach a worker: their own key for hops inside the
    cluster, kept in the shared home and authorized there. StrictHostKeyChecking=yes: the jail's ssh client knows the
    workers' host keys already."""
    key, ip = jail_user
    ssh(
        key,
        USER,
        ip,
        "test -f ~/.ssh/id_ed25519 || { ssh-keygen -q -t ed25519 -N '' -f ~/.ssh/id_ed25519 && "
        "cat ~/.ssh/id_ed25519.pub >> ~/.ssh/authorized_keys; }",
    )
    return "ssh -o BatchMode=yes -o StrictHostKeyChecking=yes -o ConnectTimeout=10"


def test_a_user_sshes_to_the_worker_of_their_job_only_from_a_login_node_and_only_while_it_runs(
    available: Kube, jail_user: tuple[Path, str], job_node_ssh: str
) -> None:
    """spec.login.sshToJobNodes (issue 42 item 4): from the login node a user reaches the worker running their job,
    lands in the jail as themself, inside the job's cgroup (pam_slurm_adopt), and the session ends with the job; the
    worker's host key is known in advance.
    Refused with Slurm's message without a job there, and refused from anywhere but a login node (here: from a job on
    the other worker)."""
    kube = available
    key, ip = jail_user
    node, other = f"{NAME}-worker-cpu-0", f"{NAME}-worker-cpu-1"
    hop = job_node_ssh
    # Earlier tests' jobs ran there: pam_slurm_adopt admits while any step of the user is still on the node (an
    # extern step's slurmstepd outlives `sbatch --wait` and scancel by a moment).
    until(
        lambda: "slurmstepd" not in kube.exec(node, "slurmd", "ps", "-eo", "comm") or None,
        timeout=60,
        what=f"no job step left on {node}",
    )
    refused = ssh(key, USER, ip, f"{hop} {node} true 2>&1; echo rc=$?")
    # Slurm's words: no job of this user there, or none of anyone's.
    messages = ("Access denied by pam_slurm_adopt: you have no active jobs on this node", "No Slurm jobs found on node")
    assert any(m in refused for m in messages), refused
    assert refused.rstrip().endswith("rc=255"), refused
    job = ssh(key, USER, ip, f"sbatch --parsable -w {node} -J ssh-target --wrap 'sleep 600'").strip().split(";")[0]
    try:
        until(
            lambda: kube.exec(LOGIN_POD, LOGIN, "squeue", "-h", "-j", job, "-o", "%T").strip() == "RUNNING" or None,
            timeout=60,
            what=f"job {job} running on {node}",
        )
        inside = ssh(
            key, USER, ip, f"{hop} {node} 'id -un; hostname; cat /etc/slurmctl-test-marker; cat /proc/self/cgroup'"
        )
        user, host, marker, *cgroups = inside.splitlines()
        assert (user, host, marker) == (USER, node, f"jail-of-{NAME}"), inside
        assert any(f"/job_{job}/step_extern" in line for line in cgroups), inside
        from_worker = ssh(key, USER, ip, f"srun -w {other} -N1 {hop} {node} true 2>&1; echo rc=$?")
        assert from_worker.rstrip().endswith("rc=255"), from_worker
        # A session open when the job ends is ended with it.
        pid = ssh(key, USER, ip, f"nohup {hop} {node} 'sleep 500' >/dev/null 2>&1 </dev/null & echo $!").strip()
        until(
            lambda: "sleep 500" in kube.exec(node, "slurmd", "ps", "-eo", "args") or None,
            timeout=60,
            what=f"the ssh session's sleep on {node}",
        )
        kube.exec(LOGIN_POD, LOGIN, "scancel", job)
        until(
            lambda: (
                ssh(key, USER, ip, f"kill -0 {pid} 2>/dev/null && echo open || echo ended").strip() == "ended" or None
            ),
            timeout=60,
            what="the ssh session to end with the job",
        )
    finally:
        kube.exec(LOGIN_POD, LOGIN, "scancel", job)


def test_job_output_working_directory_and_sbcast_files_are_the_jails_at_any_path(
    available: Kube, jail_user: tuple[Path, str]
) -> None:
    """`sbatch -o /var/tmp/...`, a directory the user made (/data/run1) as --chdir with relative output, and sbcast:
    all land in the jail, where the user and every other node see them, and nothing in the worker containers."""
    kube = available
    key, ip = jail_user
    kube.exec(LOGIN_POD, LOGIN, "chroot", JAIL, "sh", "-c", f"mkdir -p /data/run1 && chown {USER}: /data/run1")
    script = (
        "echo payload > ~/payload.txt && "
        "sbatch --parsable --wait -N2 -o /var/tmp/out-%j.txt"
        " --wrap 'pwd; sbcast -f ~/payload.txt /data/run1/bcast.txt && cat /data/run1/bcast.txt' && "
        "sbatch --parsable --wait --chdir=/data/run1 -o rel-%j.txt --wrap 'pwd; echo in-run1'"
    )
    first, second = (line.split(";")[0] for line in ssh(key, USER, ip, f"cd ~ && {script}").split())
    assert ssh(key, USER, ip, f"cat /var/tmp/out-{first}.txt").split() == [f"/home/{USER}", "payload"]
    assert ssh(key, USER, ip, f"cat /data/run1/rel-{second}.txt").split() == ["/data/run1", "in-run1"]
    assert "bcast.txt" in ssh(key, USER, ip, "ls /data/run1").split()
    for worker in (f"{NAME}-worker-cpu-0", f"{NAME}-worker-cpu-1"):
        clean = f"test ! -e /var/tmp/out-{first}.txt && test ! -e /data && echo clean"
        assert kube.exec(worker, "slurmd", "sh", "-c", clean).strip() == "clean", worker


def test_two_users_jobs_on_one_worker_each_see_only_their_own_tmp_and_shm(
    available: Kube, jail_user: tuple[Path, str]
) -> None:
    """spec.jail.privateTmp (the default): two jobs of two users at once on one worker, each with its own /tmp and
    /dev/shm, neither seeing the other's or the jail's shared ones; both gone from the worker when the jobs end."""
    kube = available
    key, ip = jail_user
    other, worker = "bob", f"{NAME}-worker-cpu-0"
    tag = f"isol-{time.monotonic_ns()}"
    shared = f"/data/{tag}"  # where the jobs meet: each says it is ready, then looks
    kube.exec(LOGIN_POD, LOGIN, "chroot", JAIL, "sh", "-c", f"id {other} || useradd -u 1501 {other}")
    kube.exec(LOGIN_POD, LOGIN, "chroot", JAIL, "sh", "-c", f"mkdir -p {shared} && chmod 1777 {shared}")
    # What every job on a worker shared before: the jail's /tmp and /dev/shm there.
    kube.exec(worker, "slurmd", "sh", "-c", f"echo shared > {JAIL}/tmp/{tag} && echo shared > /dev/shm/{tag}")

    def script(me: str, them: str) -> str:
        wait = (
            "i=0; while [ ! -e {f} ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done; "
            "[ -e {f} ] || {{ echo never ran beside {them}; exit 3; }}"
        )
        return (
            f"echo {me} > /tmp/secret-{me}; echo {me} > /dev/shm/secret-{me}; touch {shared}/{me}.ready; "
            + wait.format(f=f"{shared}/{them}.ready", them=them)
            + f"; ls -A /tmp /dev/shm > {shared}/{me}.seen; touch {shared}/{me}.looked; "
            + wait.format(f=f"{shared}/{them}.looked", them=them)
        )

    # The one worker has one CPU: the partition lets the two share it for this test only.
    kube.exec(LOGIN_POD, LOGIN, "scontrol", "update", "PartitionName=main", "OverSubscribe=FORCE:2")
    jobs: list[str] = []
    try:
        submit = f"sbatch --parsable --oversubscribe --mem=64M -w {worker} -o {shared}/%u.out --wrap {{}}"
        jobs.append(ssh(key, USER, ip, submit.format(shlex.quote(script(USER, other)))).strip().split(";")[0])
        jobs.append(
            kube.exec(LOGIN_POD, LOGIN, "sh", "-c", f"{submit.format(shlex.quote(script(other, USER)))} --uid={other}")
            .strip()
            .split(";")[0]
        )
        until(
            lambda: not kube.exec(LOGIN_POD, LOGIN, "squeue", "-h", "-j", ",".join(jobs), "-o", "%i").strip(),
            timeout=300,
            what=f"jobs {jobs} to end",
        )
    finally:
        kube.exec(LOGIN_POD, LOGIN, "scontrol", "update", "PartitionName=main", "OverSubscribe=NO")
        kube.exec(LOGIN_POD, LOGIN, "sh", "-c", f"scancel {' '.join(jobs)} 2>/dev/null || true")
    for me in (USER, other):
        out = kube.exec(LOGIN_POD, LOGIN, "cat", f"{JAIL}{shared}/{me}.out")
        seen = kube.exec(LOGIN_POD, LOGIN, "cat", f"{JAIL}{shared}/{me}.seen")
        assert out == "" and seen.split() == ["/dev/shm:", f"secret-{me}", "/tmp:", f"secret-{me}"], (out, seen)
    # Removed with the jobs, and the worker's shared ones untouched.
    job_dirs = " ".join(f"/var/lib/slurmctl/job-tmp/{j} /var/lib/slurmctl/job-shm/{j}" for j in jobs)
    until(
        lambda: kube.exec(worker, "slurmd", "sh", "-c", f"ls -d {job_dirs} 2>/dev/null || true").strip() == "",
        timeout=60,
        what=f"jobs {jobs}' directories removed on {worker}",
    )
    kube.exec(worker, "slurmd", "sh", "-c", f"rm {JAIL}/tmp/{tag} /dev/shm/{tag}")


# The escape table: what a jail user tries, as a login session (over ssh) and inside a job (on a worker). Each row is
# (attempt, shell command); the command exits 0 only if the attempt worked. Every row must be refused.
# What root outside the jail (another node's, an admin's pod) plants on the shared jail volume for the last rows: a
# setuid-root program and a device node anyone may open. The jail is mounted nosuid and nodev on every node.
PLANTED = "/var/tmp/slurmctl-planted"
ESCAPES = (
    ("read the munge key", "cat /etc/munge/munge.key"),
    ("read the JWT signing key", "cat /etc/slurm/jwt_hs256.key"),
    ("read sshd's host keys", "cat /etc/ssh/ssh_host_*_key"),
    ("the container's root through /proc/1/root", "ls /proc/1/root/"),
    (
        "any root process's root or environment through /proc",
        'for p in /proc/[0-9]*; do [ "$(stat -c %u "$p")" = 0 ] || continue; '
        'ls "$p/root/" >/dev/null 2>&1 && exit 0; cat "$p/environ" >/dev/null 2>&1 && exit 0; done; '
        'echo "none readable"; exit 1',
    ),
    ("files of the node under the parked old root", 'test -n "$(ls -A /.slurmctl-old-root 2>/dev/null)"'),
    ("replace the parked old root with a symlink", "rmdir /.slurmctl-old-root || ln -s / /.slurmctl-old-root2"),
    (
        "read a raw disk or memory device",
        "for d in /dev/sd? /dev/vd? /dev/nvme?n1 /dev/loop0 /dev/mem /dev/port; do [ -e $d ] || continue; "
        'head -c1 $d >/dev/null 2>&1 && exit 0; done; echo "none readable"; exit 1',
    ),
    ("create a device node", "mknod /tmp/escape-dev-$$ b 7 0"),
    ("read the kernel log", "timeout 5 head -c1 /dev/kmsg"),
    ("write to /sys", "echo 1 > /sys/kernel/mm/ksm/run"),
    ("create a cgroup", "mkdir /sys/fs/cgroup/escape"),
    ("become root with su", "su -c id root < /dev/null"),
    ("become root with sudo", "sudo -n id"),
    ("leave the jail as root of a user namespace", "unshare -Ur ls /proc/1/root/"),
    ("change the jail's accounts", "echo 'x::0:0::/:/bin/sh' >> /etc/passwd"),
    ("signal the container's init", "kill -0 1"),
    ("drain a node through Slurm", f"scontrol update NodeName={NAME}-worker-cpu-0 State=DRAIN Reason=escape"),
    ("reconfigure Slurm", "scontrol reconfigure"),
    ("submit a job as root", "sbatch --uid=0 --wrap true"),
    (
        "another user's command line through /proc",
        'for p in /proc/[0-9]*; do [ "$(stat -c %u "$p" 2>/dev/null)" = "$(id -u)" ] && continue; '
        "tr '\\0' ' ' < \"$p/cmdline\" 2>/dev/null | grep -q . && exit 0; done; echo \"none visible\"; exit 1",
    ),
    ("a Slurm token for a year", "scontrol token lifespan=31536000"),
    ("the API server's Secrets", "curl -sSk --fail --max-time 10 https://{api}/api/v1/namespaces/kube-system/secrets"),
    # A route lookup, not a connection: nothing is sent, and a route there would be the hole.
    ("a route to a cloud metadata address", "ip route get 169.254.169.254"),
    ("root through a setuid program planted on the jail volume", f'[ "$({PLANTED}-suid -u)" = 0 ]'),
    ("a device node planted on the jail volume", f": < {PLANTED}-dev"),
)


def escape_script(api: str) -> str:
    """The table as one script; `api` is the API server's address (its Service's cluster IP)."""
    return attempts_script([(attempt, command.replace("{api}", api)) for attempt, command in ESCAPES])


def test_escape_table_every_attempt_of_a_jail_user_is_refused(
    available: Kube, jail_user: tuple[Path, str], job_node_ssh: str
) -> None:
    """As a non-root user of the jail, logged in, inside a job, and in an ssh session on the worker of their job
    (spec.login.sshToJobNodes): keys, the containers' roots, devices, /sys, root through setuid programs or a user
    namespace, Slurm's administration. Prints attempt | expected | observed."""
    kube = available
    key, ip = jail_user
    node = f"{NAME}-worker-cpu-0"
    api = kube.run("get", "service", "kubernetes", "-n", "default", "-o", "jsonpath={.spec.clusterIP}").strip()
    kube.exec(
        LOGIN_POD, LOGIN, "sh", "-c", f"cat > {JAIL}/home/{USER}/escape.sh && chmod 755 {JAIL}/home/{USER}/escape.sh",
        input=escape_script(api),
    )  # fmt: skip
    plant = f"install -m 4755 /usr/bin/id {JAIL}{PLANTED}-suid && mknod -m 0666 {JAIL}{PLANTED}-dev c 1 3"
    kube.exec(f"{NAME}-worker-cpu-0", "slurmd", "sh", "-c", plant)
    held = ssh(key, USER, ip, f"sbatch --parsable -w {node} -J escape-hold --wrap 'sleep 600'").strip().split(";")[0]
    try:
        until(
            lambda: kube.exec(LOGIN_POD, LOGIN, "squeue", "-h", "-j", held, "-o", "%T").strip() == "RUNNING" or None,
            timeout=60,
            what=f"job {held} running on {node}",
        )
        seen = {
            "login": ssh(key, USER, ip, "bash ~/escape.sh"),
            "job": ssh(key, USER, ip, f"srun -N1 -w {NAME}-worker-cpu-1 bash ~/escape.sh"),
            "ssh": ssh(key, USER, ip, f"{job_node_ssh} {node} bash ~/escape.sh"),
        }
        # What a job's task runs with (chroot.so): no_new_privs, no capability to come, the user-namespace filter.
        status = ssh(
            key, USER, ip, f"srun -N1 -w {NAME}-worker-cpu-1 grep -E '^(NoNewPrivs|CapBnd|Seccomp):' /proc/self/status"
        )
    finally:
        kube.exec(LOGIN_POD, LOGIN, "scancel", held)
        kube.exec(f"{NAME}-worker-cpu-0", "slurmd", "rm", "-f", f"{JAIL}{PLANTED}-suid", f"{JAIL}{PLANTED}-dev")
    assert dict(re.findall(r"^(\w+):\s*(\S+)$", status, re.MULTILINE)) == {
        "NoNewPrivs": "1",
        "CapBnd": "0000000000000000",
        "Seccomp": "2",
    }, status
    table, open_rows = [], []
    for where, out in seen.items():
        for attempt, verdict, detail in attempts_seen(out, ESCAPES):
            table.append(f"{where:5} | {attempt:55} | refused | {verdict}: {detail}")
            if verdict != "refused":
                open_rows.append(f"{where}: {attempt}")
    print("\nwhere | attempt" + " " * 49 + "| expected | observed\n" + "\n".join(table))
    assert not open_rows, open_rows


# `scontrol token` (slurmctld signs it with the cluster's JWT key), then slurmrestd through its Service name. The token
# stays in the shell: only slurmrestd's answer and the HTTP status come back.
CALL_REST = (
    "T=$(scontrol token lifespan=300) && curl -sS --max-time 30 -w '\\n%{{http_code}}' "
    '-H "X-SLURM-USER-NAME: $(id -un)" -H "X-SLURM-USER-TOKEN: ${{T#SLURM_JWT=}}" {url}'
)


def rest_answer(out: str) -> tuple[int, dict[str, Any]]:
    body, _, status = out.rstrip("\n").rpartition("\n")
    return int(status), json.loads(body)


def test_users_get_a_token_and_slurmrestd_answers_with_every_node(available: Kube, jail_user: tuple[Path, str]) -> None:
    kube = available
    key, ip = jail_user
    (rest_pod,) = kube.pods(f"app.kubernetes.io/instance={NAME},app.kubernetes.io/component=rest")
    assert pod_ready(rest_pod), rest_pod["status"]
    url = f"{REST}/slurm/{API_VERSION}/nodes"
    # A user of the jail, logged in over ssh (the jail's scontrol and curl), and an administrator in the login
    # container (the login image's).
    as_user = ssh(key, USER, ip, CALL_REST.format(url=shlex.quote(url)))
    as_admin = kube.exec(LOGIN_POD, LOGIN, "bash", "-c", CALL_REST.format(url=shlex.quote(url)))
    expected = {f"{NAME}-worker-cpu-0", f"{NAME}-worker-cpu-1"}
    for who, out in ((USER, as_user), ("root", as_admin)):
        status, answer = rest_answer(out)
        nodes = {n["name"]: n["state"] for n in answer.get("nodes", [])}
        meta = answer.get("meta", {})
        print(
            f"GET {url} as {who}: HTTP {status}, nodes {nodes}, errors {answer.get('errors')}, "
            f"plugin {meta.get('plugin')}, slurm {meta.get('slurm', {}).get('release')}"
        )
        assert status == 200, out[-2000:]
        assert set(nodes) == expected, answer
        assert answer["errors"] == []
    # Without a token slurmrestd refuses.
    refused = kube.exec(LOGIN_POD, LOGIN, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", url)
    print(f"GET {url} without a token: HTTP {refused}")
    assert refused == "401"


# A batch job submitted to slurmrestd by a user of the jail with the token `scontrol token` gave them (the body in
# base64: no quoting through ssh). The token stays in the shell.
SUBMIT_REST = (
    "T=$(scontrol token lifespan=300) && echo {body} | base64 -d | curl -sS --max-time 30 -w '\\n%{{http_code}}' "
    '-H "X-SLURM-USER-NAME: $(id -un)" -H "X-SLURM-USER-TOKEN: ${{T#SLURM_JWT=}}" '
    "-H 'Content-Type: application/json' --data-binary @- {url}"
)


def test_a_job_submitted_over_rest_with_a_users_own_token_runs_as_that_user(
    available: Kube, jail_user: tuple[Path, str]
) -> None:
    """SlinkyProject/slurm-operator#118: a job that a user submits to slurmrestd with their own token (from `scontrol
    token` in their session) runs with their uid and gid in the jail, and no Slurm token is in its environment or in
    the user's session (the operator's SlurmUser tokens stay in the operator)."""
    kube = available
    key, ip = jail_user
    marker = f"rest-job-{time.monotonic_ns()}"
    script = f"#!/bin/bash\n{{ id -u; id -g; env | grep -c '^SLURM_JWT=' || true; }} > ~/{marker}\n"
    body = {
        "job": {
            "script": script,
            "name": marker,
            "current_working_directory": f"/home/{USER}",
            "environment": ["PATH=/usr/local/bin:/usr/bin:/bin", f"HOME=/home/{USER}"],
        }
    }
    encoded = base64.b64encode(json.dumps(body).encode()).decode()
    url = shlex.quote(f"{REST}/slurm/{API_VERSION}/job/submit")
    status, answer = rest_answer(ssh(key, USER, ip, SUBMIT_REST.format(body=encoded, url=url)))
    print(f"POST job/submit as {USER}: HTTP {status}, job {answer.get('job_id')}, errors {answer.get('errors')}")
    assert status == 200 and answer["errors"] == [], answer
    job_id = str(answer["job_id"])
    done = until(lambda: job_ended(kube, job_id), timeout=120, what=f"REST job {job_id} to end")
    assert (done["JobState"], done["ExitCode"]) == ("COMPLETED", "0:0"), done
    assert done["UserId"].startswith(f"{USER}({UID})"), done
    uid, gid, tokens = kube.exec(LOGIN_POD, LOGIN, "cat", f"{JAIL}/home/{USER}/{marker}").split()
    assert (uid, tokens) == (str(UID), "0"), (uid, gid, tokens)
    assert done["GroupId"].endswith(f"({gid})"), done
    session = ssh(key, USER, ip, "env | grep -c '^SLURM_JWT=' || true").strip()
    assert session == "0", "a Slurm token in the user's login session"


def metrics_text() -> str:
    with urllib.request.urlopen(f"http://{METRICS}/metrics", timeout=10) as answer:
        text: str = answer.read().decode()
    return text


def operator_metrics(namespace: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """The operator's series about this cluster: name -> (labels other than namespace and cluster) -> value."""
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(metrics_text()):
        for sample in family.samples:
            labels = dict(sample.labels)
            if (labels.pop("namespace", None), labels.pop("cluster", None)) == (namespace, NAME):
                out.setdefault(sample.name, {})[tuple(sorted(labels.items()))] = sample.value
    return out


SINFO_STATES = {"idle": "idle", "alloc": "allocated", "mix": "mixed", "drain": "drained"}


def test_the_operators_slurm_metrics_match_sinfo_and_squeue_while_a_job_runs(
    available: Kube, jail_user: tuple[Path, str]
) -> None:
    kube = available
    key, ip = jail_user
    job = running_job(kube, key, ip, "-N1", "--wrap", "'sleep 300'")
    seen: list[object] = []

    def agree() -> bool:
        nodes = {n: SINFO_STATES.get(s, s) for n, s in sinfo_nodes(kube).items()}
        jobs = kube.exec(LOGIN_POD, LOGIN, "squeue", "-h", "-o", "%T").split()
        (partition,) = kube.exec(LOGIN_POD, LOGIN, "sinfo", "-h", "-o", "%R %D %C").splitlines()
        name, count, cpus = partition.split()
        wanted = {
            "slurm_up": {(): 1.0},
            "slurm_nodes": {(("state", s),): float(list(nodes.values()).count(s)) for s in set(nodes.values())},
            "slurm_jobs": {(("state", s.lower()),): float(jobs.count(s)) for s in set(jobs)},
            "slurm_partition_nodes": {(("partition", name),): float(count)},
            "slurm_partition_cpus": {(("partition", name),): float(cpus.split("/")[3])},
        }
        got = operator_metrics(kube.ns)
        seen[:] = [wanted, {k: got.get(k) for k in wanted}]
        # slurm_jobs also counts jobs that ended (squeue shows them only while they complete): compare the live ones.
        live = {k: v for k, v in got.get("slurm_jobs", {}).items() if k in wanted["slurm_jobs"]}
        return all(got.get(k) == v for k, v in wanted.items() if k != "slurm_jobs") and live == wanted["slurm_jobs"]

    try:
        until(lambda: agree() or None, timeout=90, what="the operator's slurm_* series to match sinfo and squeue")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; wanted, then /metrics: {seen}") from None
    print(f"sinfo/squeue and /metrics agree: {seen[0]}")
    requests = operator_metrics(kube.ns)["slurmctl_slurmrestd_requests_total"]
    print(f"requests the operator sent slurmrestd so far: {requests}")
    for endpoint in ("nodes", "jobs", "partitions"):
        assert requests.get((("endpoint", endpoint), ("method", "GET")), 0) > 0, requests
    # Prometheus's own linter on the whole page, Slurm series included (hack/setup.sh fetches promtool).
    assert PROMTOOL.is_file(), f"{PROMTOOL} missing: run `make setup`"
    lint = subprocess.run([PROMTOOL, "check", "metrics"], input=metrics_text(), capture_output=True, text=True,
                          timeout=30, check=False)  # fmt: skip
    print(f"promtool check metrics: exit {lint.returncode} {lint.stdout.strip()} {lint.stderr.strip()}")
    assert lint.returncode == 0 and not lint.stdout.strip() and not lint.stderr.strip(), lint
    kube.exec(LOGIN_POD, LOGIN, "scancel", job)
    until(lambda: job_ended(kube, job), timeout=60, what=f"job {job} to end")


def patch_cluster(kube: Kube, *ops: str) -> None:
    kube.run("patch", "slurmcluster", NAME, "--type=json", "-p", "[" + ",".join(ops) + "]")


def set_size(kube: Kube, size: int) -> None:
    patch_cluster(kube, f'{{"op":"replace","path":"/spec/workers/0/size","value":{size}}}')


def job_state(kube: Kube, job_id: str) -> dict[str, str]:
    """`scontrol show job` as key -> value (JobState, ExitCode, NodeList, ...)."""
    out = kube.exec(LOGIN_POD, LOGIN, "scontrol", "show", "job", "-o", job_id)
    return dict(kv.split("=", 1) for kv in out.split() if "=" in kv)


def job_ended(kube: Kube, job_id: str) -> dict[str, str] | None:
    state = job_state(kube, job_id)
    return None if state["JobState"] in ("RUNNING", "PENDING", "COMPLETING") else state


def submit(key: Path, ip: str, *args: str) -> str:
    out = ssh(key, USER, ip, "cd ~ && sbatch --parsable " + " ".join(args))
    return out.strip().split(";")[0]


def running_job(kube: Kube, key: Path, ip: str, *args: str) -> str:
    """A batch job submitted by the jail user, once Slurm says it runs."""
    job = submit(key, ip, *args)
    until(lambda: job_state(kube, job)["JobState"] == "RUNNING" or None, timeout=60, what=f"job {job} running")
    return job


def node_state_condition(kube: Kube, pod: str) -> tuple[str, str, str] | None:
    conditions = kube.json("pod", pod).get("status", {}).get("conditions") or []
    cond = next((c for c in conditions if c["type"] == "SlurmNodeState"), None)
    return None if cond is None else (cond["status"], cond["reason"], cond.get("message", ""))


class Timeline:
    """What the test saw and when, printed with the test's output (pytest -s shows it; a failure shows it too)."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.lines: list[str] = []

    def __call__(self, what: str) -> None:
        self.lines.append(f"{time.monotonic() - self.start:6.1f}s  {what}")
        print(self.lines[-1])


def test_slurm_node_state_follows_drain_and_resume_and_an_idle_cluster_writes_nothing(available: Kube) -> None:
    kube = available
    pod = f"{NAME}-worker-cpu-1"
    # Idle in Slurm first: the test before this one cancels its job, and a node still completing it is not idle (CI
    # run50: the status, still "2 idle" from before that job, became "1 allocated" inside the window below). Then the
    # pod conditions and the cluster's counts, written by the same poll, one after the other.
    wait_for_nodes(kube, lambda n: set(n.values()) == {"idle"} and len(n) == 2, timeout=120, what="both idle in sinfo")
    for worker in worker_pods(kube):

        def idle(w: str = worker) -> bool | None:
            return node_state_condition(kube, w) == ("True", "Idle", "") or None

        until(idle, timeout=90, what=f"Idle on {worker}")
    until(
        lambda: kube.json("slurmcluster", NAME)["status"].get("slurmNodes", {}).get("idle") == 2,
        timeout=30,
        what="2 idle nodes in the cluster's status",
    )

    # Idle: over two polls (15 s each), not one write to a worker pod or to the cluster.
    objects = [("slurmcluster", NAME), *(("pod", p) for p in worker_pods(kube))]
    seen = {key: kube.json(*key) for key in objects}

    def unchanged() -> bool:
        now = {key: kube.json(*key) for key in objects}
        changed = [
            key
            for key in objects
            if now[key]["metadata"]["resourceVersion"] != seen[key]["metadata"]["resourceVersion"]
        ]
        seen.update(now)
        if changed:
            # Who wrote what: the managers of the newest writes, and the changed status, so a write is traceable.
            for key in changed:
                fields = sorted(now[key]["metadata"].get("managedFields", []), key=lambda f: f.get("time", ""))
                writes = [(f["manager"], f["operation"], f.get("subresource"), f.get("time")) for f in fields[-3:]]
                print(f"{key} written: {writes}")
                print(f"{key} status now: {json.dumps(now[key].get('status'), sort_keys=True)[:1500]}")
        return not changed

    holds(unchanged, seconds=35, what="the operator wrote to an idle cluster or its worker pods (printed above)")
    kube.exec(LOGIN_POD, LOGIN, "scontrol", "update", f"nodename={pod}", "state=drain", "reason=e2e-maintenance")
    until(
        lambda: node_state_condition(kube, pod) == ("False", "Drained", "e2e-maintenance") or None,
        timeout=60,
        what="SlurmNodeState Drained",
    )
    kube.exec(LOGIN_POD, LOGIN, "scontrol", "update", f"nodename={pod}", "state=resume")
    until(lambda: node_state_condition(kube, pod) == ("True", "Idle", "") or None, timeout=60, what="back to Idle")


def all_identities(kube: Kube) -> dict[str, tuple[str, int]]:
    """Every ready Slurm daemon pod (controller, workers, login). slurmrestd is left out: it is stateless, reads the
    configs only at start, and is re-created with them."""
    pods = kube.pods(f"app.kubernetes.io/instance={NAME},app.kubernetes.io/component!=rest")
    return {p["metadata"]["name"]: identity(p) for p in pods if pod_ready(p)}


def test_a_partition_change_reaches_every_daemon_in_place_without_killing_a_job(
    available: Kube, jail_user: tuple[Path, str]
) -> None:
    kube = available
    key, ip = jail_user
    release = f"{JAIL}/home/{USER}/release-reconfigure"
    job = running_job(kube, key, ip, "-N1", "--wrap", "'while [ ! -e ~/release-reconfigure ]; do sleep 1; done'")
    before = all_identities(kube)
    seen = Timeline()
    patch_cluster(
        kube,
        '{"op":"add","path":"/spec/partitions","value":'
        '[{"name":"main","default":true,"options":{"MaxTime":"02:00:00"}}]}',
    )
    seen("partition main: MaxTime=02:00:00 in the spec")

    def in_slurmctld() -> bool:
        return "MaxTime=02:00:00" in kube.exec(LOGIN_POD, LOGIN, "scontrol", "-o", "show", "partition", "main")

    until(in_slurmctld, timeout=240, interval=3, what="slurmctld to take the new partition option")
    seen("slurmctld shows it")
    for pod in worker_pods(kube):
        until(
            lambda pod=pod: "MaxTime=02:00:00" in kube.exec(pod, "slurmd", "cat", "/etc/slurm/nodes.conf"),
            timeout=180,
            interval=3,
            what=f"{pod}'s slurmd config",
        )
    seen("every slurmd's config has it")
    assert all_identities(kube) == before, "a pod restarted or was re-created"
    assert job_state(kube, job)["JobState"] == "RUNNING"
    kube.exec(LOGIN_POD, LOGIN, "sh", "-c", f"touch {release}")
    done = until(lambda: job_ended(kube, job), timeout=60, what=f"job {job} to end")
    assert (done["JobState"], done["ExitCode"]) == ("COMPLETED", "0:0"), done
    seen("timeline:\n" + "\n".join(seen.lines))


def test_scale_out_while_a_job_runs_restarts_nothing_and_new_nodes_are_usable_at_once(
    available: Kube, jail_user: tuple[Path, str]
) -> None:
    kube = available
    key, ip = jail_user
    job = running_job(kube, key, ip, "-N1", "--wrap", "'sleep 40'")
    before = {name: identity(p) for name, p in worker_pods(kube).items()}
    controller_before = identity(kube.json("pod", CONTROLLER_POD))
    # 2 -> 3, not 4: four workers' CPU requests (500m each) fill this 2-core node, leaving nothing for the others.
    set_size(kube, 3)
    wait_for_nodes(kube, lambda n: len(n) == 3, timeout=240, what="three nodes after scaling to 3")
    assert job_state(kube, job)["JobState"] == "RUNNING", "the running job survived the scale-out"
    after = {name: identity(p) for name, p in worker_pods(kube).items()}
    assert {name: after[name] for name in before} == before, "old workers restarted or were re-created"
    assert identity(kube.json("pod", CONTROLLER_POD)) == controller_before, "slurmctld restarted"
    done = until(lambda: job_ended(kube, job), timeout=120, what=f"job {job} to end")
    assert (done["JobState"], done["ExitCode"]) == ("COMPLETED", "0:0"), done
    out = ssh(key, USER, ip, "srun -N3 --ntasks-per-node=1 hostname")
    assert sorted(out.split()) == [f"{NAME}-worker-cpu-{i}" for i in range(3)], out


def test_scale_in_drains_the_node_and_its_pod_goes_only_after_the_job(
    available: Kube, jail_user: tuple[Path, str]
) -> None:
    kube = available
    key, ip = jail_user
    leaving = f"{NAME}-worker-cpu-2"
    seen = Timeline()
    job = running_job(kube, key, ip, "-w", leaving, "--wrap", "'sleep 45'")
    seen(f"job {job} running on {leaving}")
    set_size(kube, 2)
    seen("size 3 -> 2")
    state = wait_for_nodes(kube, lambda n: n.get(leaving, "").startswith("drng"), timeout=60, what="draining")
    seen(f"{leaving} is {state[leaving]} in Slurm")
    reason = kube.exec(LOGIN_POD, LOGIN, "sinfo", "-h", "-n", leaving, "-o", "%E").strip()
    assert reason.startswith("slurmctl:"), reason
    # The operator drains in Slurm first and then writes its status: read the condition of this generation (CI on
    # b2adfcd read the previous generation's "Ready" right after Slurm showed the drain). It names the job once the
    # drain gate's Slurm snapshot shows it (at most 2 s old, polled every 5 s while nodes drain): the job started a
    # second before the scale-in, and the first Draining said "drained now" (ci19 on 5f6097b).
    generation = kube.json("slurmcluster", NAME)["metadata"]["generation"]
    last: list[dict[str, Any]] = []

    def workers_draining_for_the_job() -> dict[str, Any] | None:
        conditions = kube.json("slurmcluster", NAME)["status"]["conditions"]
        last[:] = [next(c for c in conditions if c["type"] == "WorkersReady")]
        current = last[0].get("observedGeneration") == generation and last[0]["reason"] == "Draining"
        return last[0] if current and f"job {job}" in last[0]["message"] else None

    try:
        until(workers_draining_for_the_job, timeout=30, interval=0.5, what=f"WorkersReady Draining for job {job}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen: {last}") from None
    assert kube.json("slurmcluster", NAME)["status"]["phase"] != "Degraded"
    holds(
        lambda: leaving in worker_pods(kube),
        while_=lambda: job_state(kube, job)["JobState"] == "RUNNING",
        what="the pod went while its job was running",
    )
    seen(f"job {job} ended; pod still there: {leaving in worker_pods(kube)}")
    until(lambda: leaving not in worker_pods(kube), timeout=120, what=f"pod {leaving} to go")
    seen(f"pod {leaving} gone")
    done = job_state(kube, job)
    assert (done["JobState"], done["ExitCode"]) == ("COMPLETED", "0:0"), done
    nodes = wait_for_nodes(kube, lambda n: len(n) == 2, timeout=60, what="two nodes left in Slurm")
    assert leaving not in nodes
    seen("timeline:\n" + "\n".join(seen.lines))


def test_scale_in_waits_while_slurm_cannot_be_asked(available: Kube) -> None:
    kube = available
    leaving = f"{NAME}-worker-cpu-1"
    wait_for_nodes(kube, lambda n: set(n.values()) == {"idle"}, timeout=120, what="every node idle")
    patch_cluster(kube, '{"op":"add","path":"/spec/rest","value":{"enabled":false}}')
    until(lambda: not kube.pods(REST_PODS) or None, timeout=120, what="the slurmrestd pod to go")
    set_size(kube, 1)

    def closed() -> str | None:
        cond = next(c for c in kube.json("slurmcluster", NAME)["status"]["conditions"] if c["type"] == "WorkersReady")
        return cond["message"] if cond["reason"] == "SlurmUnreachable" else None

    message = until(closed, timeout=60, what="WorkersReady to say Slurm cannot be asked")
    assert "slurmrestd" in message, message
    holds(lambda: leaving in worker_pods(kube), seconds=30, what="a worker pod went while Slurm could not be asked")
    patch_cluster(kube, '{"op":"replace","path":"/spec/rest/enabled","value":true}')
    until(lambda: leaving not in worker_pods(kube), timeout=240, what=f"pod {leaving} to go once Slurm answers")
    nodes = wait_for_nodes(kube, lambda n: len(n) == 1, timeout=120, what="one node left in Slurm")
    assert set(nodes) == {f"{NAME}-worker-cpu-0"}


def test_a_jwt_key_rotation_keeps_jobs_refuses_old_tokens_and_the_operator_still_asks_slurm(
    available: Kube, jail_user: tuple[Path, str]
) -> None:
    """spec.jwtKeyRotation: a new key Secret, slurmctld restarted with it (nothing else: slurmrestd, slurmd and the
    login pods never read the key), a job running across it completes once, a token from before is refused by
    slurmrestd and a new one works, and the operator reads Slurm with its new tokens (a drain shows on the pod)."""
    kube = available
    key, ip = jail_user
    seen = Timeline()
    url = shlex.quote(f"{REST}/slurm/{API_VERSION}/nodes")

    def rest_answer(token: str) -> tuple[str, str]:
        """slurmrestd's HTTP status and body for `token`, as root in the login container."""
        headers = f"-H 'X-SLURM-USER-NAME: root' -H 'X-SLURM-USER-TOKEN: {token}'"
        call = f"curl -s -w '\\n%{{http_code}}' --max-time 30 {headers} {url}"
        body, _, status = kube.exec(LOGIN_POD, LOGIN, "bash", "-c", call).rstrip("\n").rpartition("\n")
        return status, body

    def refused(token: str) -> bool:
        """slurmctld refused the token: slurmrestd 24.11 answers 511 with Slurm's "Protocol authentication error"."""
        status, body = rest_answer(token)
        return status != "200" and "authentication" in body.lower()

    def token() -> str:
        return kube.exec(LOGIN_POD, LOGIN, "scontrol", "token", "lifespan=900").strip().removeprefix("SLURM_JWT=")

    before = token()
    assert rest_answer(before)[0] == "200"
    secret = kube.json("secret", f"{NAME}-jwt-key")
    release = f"{JAIL}/home/{USER}/release-rotation"
    job = running_job(kube, key, ip, "-N1", "--wrap", "'while [ ! -e ~/release-rotation ]; do sleep 1; done'")
    controller = kube.json("pod", CONTROLLER_POD)["metadata"]["uid"]
    others = {name: identity(p) for name, p in worker_pods(kube).items()}
    others.update({p["metadata"]["name"]: identity(p) for p in kube.pods(REST_PODS)})
    others[LOGIN_POD] = identity(kube.json("pod", LOGIN_POD))
    patch_cluster(kube, '{"op":"add","path":"/spec/jwtKeyRotation","value":"e2e-1"}')
    seen(f"spec.jwtKeyRotation e2e-1, job {job} running")

    status = until(
        lambda: kube.json("slurmcluster", NAME)["status"].get("jwtKeyRotation") == "e2e-1" or None,
        timeout=60,
        what="status.jwtKeyRotation e2e-1",
    )
    rotated = kube.json("secret", f"{NAME}-jwt-key")
    assert rotated["metadata"]["uid"] != secret["metadata"]["uid"] and rotated["data"] != secret["data"], status
    assert rotated["metadata"]["annotations"]["slurm.slurmctl.io/jwt-key-rotation"] == "e2e-1"
    events = kube.run("get", "events", "--field-selector", "reason=JWTKeyRotated", "-o", "jsonpath={.items[*].message}")
    assert "'e2e-1'" in events, events
    seen("a new key Secret")

    def restarted() -> bool:
        pod = kube.json("pod", CONTROLLER_POD)
        return pod["metadata"]["uid"] != controller and pod_ready(pod)

    until(restarted, timeout=240, interval=2, what="slurmctld restarted with the new key")
    seen("slurmctld restarted and ready")
    until(lambda: refused(before), timeout=60, what="the token from before refused")
    after = token()
    assert rest_answer(after)[0] == "200"
    seen(f"the old token refused ({rest_answer(before)[0]}), a new one answered (200)")
    assert job_state(kube, job)["JobState"] == "RUNNING"
    kube.exec(LOGIN_POD, LOGIN, "sh", "-c", f"touch {release}")
    done = until(lambda: job_ended(kube, job), timeout=60, what=f"job {job} to end")
    assert (done["JobState"], done["ExitCode"], done["Restarts"]) == ("COMPLETED", "0:0", "0"), done
    seen(f"job {job} completed, never requeued")

    # The operator asks Slurm with tokens of the new key: a drain made now shows on the pod and in the status.
    pod = sorted(worker_pods(kube))[0]
    kube.exec(LOGIN_POD, LOGIN, "scontrol", "update", f"nodename={pod}", "state=drain", "reason=e2e-rotation")
    until(
        lambda: node_state_condition(kube, pod) == ("False", "Drained", "e2e-rotation") or None,
        timeout=90,
        what=f"SlurmNodeState Drained on {pod}, read by the operator after the rotation",
    )
    kube.exec(LOGIN_POD, LOGIN, "scontrol", "update", f"nodename={pod}", "state=resume")
    until(lambda: node_state_condition(kube, pod) == ("True", "Idle", "") or None, timeout=90, what="back to Idle")
    seen("the operator reads Slurm's node states again")
    now = {name: identity(p) for name, p in worker_pods(kube).items()}
    now.update({p["metadata"]["name"]: identity(p) for p in kube.pods(REST_PODS)})
    now[LOGIN_POD] = identity(kube.json("pod", LOGIN_POD))
    assert now == others, "a pod that never reads the key restarted"
    until(lambda: kube.phase(NAME) == "Available" or None, timeout=120, what=f"{NAME} Available again")
    seen("timeline:\n" + "\n".join(seen.lines))


def test_removing_a_worker_group_lets_its_running_job_finish_and_keeps_slurmctld_up(
    available: Kube, jail_user: tuple[Path, str]
) -> None:
    """A group with a partition of its own, whose node ran a job that finished and runs one that has not, is removed
    from the spec with its partition: slurmctld takes the new config in place (no restart), the running job finishes
    (the drain gate keeps the node until then, and the operator keeps the group's node set and partition in nodes.conf
    meanwhile: Slurm ends a running job whose partition is gone), then the node leaves Slurm; the rest works."""
    kube = available
    key, ip = jail_user
    extra = f"{NAME}-worker-extra-0"
    seen = Timeline()
    partitions = [{"name": "main", "default": True, "workers": ["cpu"]}, {"name": "extra", "workers": ["extra"]}]
    patch_cluster(
        kube,
        f'{{"op":"add","path":"/spec/workers/-","value":{json.dumps(small_group("extra"))}}}',
        f'{{"op":"add","path":"/spec/partitions","value":{json.dumps(partitions)}}}',
    )
    wait_for_nodes(kube, lambda n: n.get(extra) == "idle", timeout=240, what=f"{extra} idle")
    seen(f"{extra} idle")
    finished = submit(key, ip, "-p", "extra", "--wrap", "true")
    done = until(lambda: job_ended(kube, finished), timeout=60, what=f"job {finished} to end")
    assert (done["JobState"], done["NodeList"]) == ("COMPLETED", extra), done
    release = f"{JAIL}/home/{USER}/release-removal"
    job = running_job(kube, key, ip, "-p", "extra", "--wrap", "'while [ ! -e ~/release-removal ]; do sleep 1; done'")
    seen(f"job {finished} completed on {extra}, job {job} running there")
    controller = identity(kube.json("pod", CONTROLLER_POD))
    workers = kube.json("slurmcluster", NAME)["spec"]["workers"]
    index = next(i for i, g in enumerate(workers) if g["name"] == "extra")
    patch_cluster(
        kube,
        f'{{"op":"test","path":"/spec/workers/{index}/name","value":"extra"}}',
        f'{{"op":"remove","path":"/spec/workers/{index}"}}',
        # And a new option on main: when slurmctld shows it, it took the nodes.conf without the group.
        '{"op":"replace","path":"/spec/partitions","value":[{"name":"main","default":true,'
        '"options":{"MaxTime":"03:00:00"}}]}',
    )
    seen("group extra and its partition removed from the spec")

    def slurm_node(name: str) -> dict[str, str]:
        """`scontrol show node` ({} once Slurm does not know it): sinfo lists only nodes in a partition."""
        out = kube.cp.kubectl("-n", kube.ns, "exec", LOGIN_POD, "-c", LOGIN, "--", "scontrol", "show", "node", "-o",
                              name, check=False)  # fmt: skip
        return node_fields(out.stdout) if out.returncode == 0 and out.stdout.strip() else {}

    def partition(name: str) -> str:
        out = kube.cp.kubectl("-n", kube.ns, "exec", LOGIN_POD, "-c", LOGIN, "--", "scontrol", "-o", "show",
                              "partition", name, check=False)  # fmt: skip
        return out.stdout if out.returncode == 0 else ""

    until(lambda: "MaxTime=03:00:00" in partition("main"), timeout=180, interval=2, what="slurmctld to take the edit")
    seen("slurmctld reconfigured with the spec without the group")
    until(lambda: "DRAIN" in slurm_node(extra).get("State", ""), timeout=60, what=f"{extra} drained in Slurm")
    # The group's partition is held while its job runs (Slurm would end the job at its next state load otherwise).
    assert "Nodes=" + extra in partition("extra"), partition("extra")
    kube.exec(CONTROLLER_POD, "slurmctld", "scontrol", "reconfigure")  # a state load, as any later change makes
    holds(
        lambda: job_state(kube, job)["JobState"] == "RUNNING" and extra in worker_pods(kube),
        seconds=20,
        what=f"job {job} ended, or {extra}'s pod went, while the job should run on",
    )
    seen(f"job {job} still running on {extra}, drained, across another reconfigure")
    kube.exec(LOGIN_POD, LOGIN, "sh", "-c", f"touch {release}")
    done = until(lambda: job_ended(kube, job), timeout=60, what=f"job {job} to end")
    assert (done["JobState"], done["ExitCode"], done["NodeList"]) == ("COMPLETED", "0:0", extra), done
    seen(f"job {job} completed")
    until(lambda: extra not in worker_pods(kube), timeout=120, what=f"pod {extra} to go")
    until(lambda: not slurm_node(extra), timeout=60, what=f"{extra} gone from Slurm")
    until(lambda: not partition("extra"), timeout=180, interval=2, what="the held partition gone from slurmctld")
    seen(f"{extra} and its partition gone from Kubernetes and Slurm")
    assert f"statefulset.apps/{NAME}-worker-extra" not in kube.run("get", "statefulset", "-o", "name").split()
    assert identity(kube.json("pod", CONTROLLER_POD)) == controller, "slurmctld restarted"
    assert extra not in sinfo_nodes(kube)
    assert kube.exec(LOGIN_POD, LOGIN, "squeue", "-h", "-o", "%i").split() == []
    out = ssh(key, USER, ip, "srun -N1 hostname")
    assert out.strip().startswith(f"{NAME}-worker-cpu-"), out
    assert identity(kube.json("pod", CONTROLLER_POD)) == controller, "slurmctld restarted"
    seen("timeline:\n" + "\n".join(seen.lines))


def maintenance(kube: Kube) -> tuple[str, str, str] | None:
    """MaintenancePending as (status, reason, message), None while the cluster has none."""
    conditions = kube.json("slurmcluster", NAME).get("status", {}).get("conditions") or []
    cond = next((c for c in conditions if c["type"] == "MaintenancePending"), None)
    return None if cond is None else (cond["status"], cond["reason"], cond.get("message", ""))


def reservation(kube: Kube) -> dict[str, str] | None:
    """Slurm's maintenance reservation (`scontrol show reservation`, key -> value), None when there is none."""
    out = kube.cp.kubectl(
        "-n", kube.ns, "exec", CONTROLLER_POD, "-c", "slurmctld", "--",
        "timeout", "30", "scontrol", "-o", "show", "reservation", "slurmctl-maintenance", check=False,
    )  # fmt: skip
    if out.returncode != 0:
        assert "not found" in out.stdout + out.stderr, out
        return None
    return dict(kv.split("=", 1) for kv in out.stdout.split() if "=" in kv)


def slurm_time(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at))


def rfc3339(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def spec_valid(kube: Kube) -> tuple[str, str] | None:
    conditions = kube.json("slurmcluster", NAME).get("status", {}).get("conditions") or []
    cond = next((c for c in conditions if c["type"] == "SpecValid"), None)
    return None if cond is None else (cond["status"], cond.get("message", ""))


def test_a_restart_requiring_change_waits_for_the_maintenance_window_under_a_maint_reservation(
    available: Kube,
) -> None:
    """Outside a window, new pod settings of login (a StatefulSet), slurmrestd (a Deployment) and the workers (rolled
    by the operator) wait, named in MaintenancePending with the window, the pods unchanged, while Slurm's MAINT
    reservation covers the window; a window opened now applies them; without windows the reservation goes. A schedule
    the schema lets through but cron cannot use is refused naming its field."""
    kube = available
    bad = {"spec": {"maintenance": {"windows": [{"schedule": "61 2 * * *", "duration": "1h"}]}}}
    kube.run("patch", "slurmcluster", NAME, "--type=merge", "-p", json.dumps(bad))
    refused = until(
        lambda: ((c := spec_valid(kube)) is not None and c[0] == "False" and c[1]) or None,
        timeout=60,
        what="SpecValid=False for the schedule",
    )
    assert "spec.maintenance.windows[0].schedule: '61 2 * * *' is not a cron expression" in refused, refused
    login_before = identity(kube.json("pod", LOGIN_POD))
    (rest_pod,) = kube.pods(REST_PODS)
    rest_before = identity(rest_pod)
    workers_before = {name: identity(pod) for name, pod in worker_pods(kube).items()}
    start = (int(time.time()) // 60 + 120) * 60  # in two hours, on the minute
    window = {"start": rfc3339(start), "end": rfc3339(start + 3600)}
    changed = {"example.com/maintenance-test": "1"}
    patch_cluster(
        kube,
        json.dumps({"op": "replace", "path": "/spec/maintenance", "value": {"windows": [window]}}),
        json.dumps({"op": "add", "path": "/spec/login/podAnnotations", "value": changed}),
        json.dumps({"op": "add", "path": "/spec/rest/podAnnotations", "value": changed}),
        json.dumps({"op": "test", "path": "/spec/workers/0/name", "value": "cpu"}),
        json.dumps({"op": "add", "path": "/spec/workers/0/podAnnotations", "value": changed}),
    )
    started = time.monotonic()
    workloads = (f"Deployment {NAME}-rest", f"StatefulSet {NAME}-login", f"StatefulSet {NAME}-worker-cpu")

    def waiting() -> str | None:
        cond = maintenance(kube)
        if cond is None or cond[:2] != ("True", "WaitingForWindow") or "covers" not in cond[2]:
            return None
        return cond[2] if all(w in cond[2] for w in workloads) else None

    message = until(waiting, timeout=180, what="MaintenancePending naming each workload, the reservation made")
    print(f"pending named after {time.monotonic() - started:.1f}s: {message}")
    assert (spec_valid(kube) or ("", ""))[0] == "True", "a valid window again"
    assert f"from {window['start']} to {window['end']} (spec.maintenance.windows[0])" in message
    assert f"{len(workers_before)} of {len(workers_before)} pods" in message, "every worker waits"
    held = reservation(kube)
    assert held is not None, "the MAINT reservation covers the window"
    assert (held["StartTime"], held["EndTime"]) == (slurm_time(start), slurm_time(start + 3600)), held
    assert {"MAINT", "IGNORE_JOBS"} <= set(held["Flags"].split(",")), held
    assert held["Nodes"] != "(null)", held
    login_sts = kube.json("statefulset", f"{NAME}-login")
    assert login_sts["status"]["updateRevision"] != login_sts["status"]["currentRevision"], "a new template, held"
    assert kube.json("deployment", f"{NAME}-rest")["spec"].get("paused") is True
    # Held for a while (the workers' drain gate polls Slurm every few seconds): no pod replaced, no worker drained.
    holds(
        lambda: (
            identity(kube.json("pod", LOGIN_POD)) == login_before
            and [identity(p) for p in kube.pods(REST_PODS)] == [rest_before]
            and {name: identity(pod) for name, pod in worker_pods(kube).items()} == workers_before
            and all(state == "idle" for state in sinfo_nodes(kube).values())
        ),
        what="every pod unchanged and every worker idle outside the window",
        seconds=20,
    )

    # The test opens a window now: the change is applied, the reservation follows the open window.
    now = int(time.time())
    opened = {"start": rfc3339(now - 60), "end": rfc3339(now + 1800)}
    kube.run(
        "patch",
        "slurmcluster",
        NAME,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"maintenance": {"windows": [opened]}}}),
    )
    opened_at = time.monotonic()

    def applied() -> bool | None:
        # The login pod is absent for a moment while its StatefulSet re-creates it.
        login = json.loads(kube.run("get", "pods", "--field-selector", f"metadata.name={LOGIN_POD}", "-o", "json"))
        rest = kube.pods(REST_PODS)
        workers = worker_pods(kube)
        done = (
            len(login["items"]) == 1
            and identity(login["items"][0])[0] != login_before[0]
            and pod_ready(login["items"][0])
            and len(rest) == 1
            and identity(rest[0])[0] != rest_before[0]
            and pod_ready(rest[0])
            and set(workers) == set(workers_before)
            and all(identity(p)[0] != workers_before[n][0] and pod_ready(p) for n, p in workers.items())
        )
        cond = maintenance(kube)
        return (done and cond is not None and cond[:2] == ("False", "NothingPending")) or None

    until(applied, timeout=300, what="login, slurmrestd and both workers re-created in the window, nothing pending")
    print(f"applied {time.monotonic() - opened_at:.1f}s after the window opened")
    assert kube.json("pod", LOGIN_POD)["metadata"]["annotations"]["example.com/maintenance-test"] == "1"
    until(
        lambda: ((r := reservation(kube)) is not None and r["EndTime"] == slurm_time(now + 1800)) or None,
        timeout=120,
        what="the reservation to cover the open window",
    )

    # No windows: applied at once again, and the reservation (which holds every node now) is removed.
    kube.run("patch", "slurmcluster", NAME, "--type=json", "-p", '[{"op":"remove","path":"/spec/maintenance"}]')
    until(lambda: reservation(kube) is None or None, timeout=120, what="the maintenance reservation to be removed")
    until(
        lambda: ((c := maintenance(kube)) is not None and c[1] == "NoWindows") or None,
        timeout=60,
        what="MaintenancePending to say there are no windows",
    )
    wait_for_nodes(
        kube,
        lambda nodes: len(nodes) == len(workers_before) and set(nodes.values()) == {"idle"},
        timeout=120,
        what="every worker idle, out of the reservation",
    )


def jail_host_path(kube: Kube) -> Path:
    claim = kube.json("pvc", f"{NAME}-jail")
    pv = kube.cp.kubectl("get", "pv", claim["spec"]["volumeName"], "-o", "jsonpath={.spec.hostPath.path}").stdout
    return Path(pv)


def test_deleting_the_cluster_removes_every_child_but_keeps_the_jail(available: Kube) -> None:
    kube = available
    jail = jail_host_path(kube)
    assert (jail / "etc" / "slurmctl-test-marker").read_text() == f"jail-of-{NAME}\n"
    kube.delete("slurmcluster", NAME)

    def leftovers() -> str:
        out = kube.run(
            "get",
            "pods,statefulsets,services,configmaps,secrets,jobs",
            "-l",
            f"app.kubernetes.io/instance={NAME}",
            "-o",
            "name",
        )
        return out.strip()

    until(lambda: leftovers() == "" or None, timeout=300, what=f"every child of {NAME} to be deleted")
    claim = kube.json("pvc", f"{NAME}-jail")
    assert claim["status"]["phase"] == "Bound"
    assert (jail / "etc" / "slurmctl-test-marker").read_text() == f"jail-of-{NAME}\n"
    assert (jail / "home" / USER / ".ssh" / "authorized_keys").exists()
