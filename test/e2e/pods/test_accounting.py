"""Accounting on the real node: slurmdbd from the operator's rendered config, storing into a MariaDB server built by
`make images` (images/test-mariadb) and run here as a plain StatefulSet on a volume claim, which the SlurmCluster's
`spec.accounting.external` points at.

One cluster is shared by the tests of this module, in order: registered → jobs recorded with state and exit code →
slurmdbd deleted while jobs run → the database pod re-created on its claim → a worker group removed after its job,
the job kept in sacct → a limit declared in the cluster that bites, follows edits and goes → the database
unreachable.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from test.e2e.harness import Node
from test.e2e.pods.conftest import require_images
from test.e2e.pods.slurm import (
    TEST_DB_IMAGE,
    Kube,
    accounting_into,
    attempts_script,
    attempts_seen,
    database,
    identity,
    pod_ready,
    slurm_image,
    small_cluster,
    small_group,
    ssh,
    ssh_keypair,
)
from test.waiting import until

pytestmark = pytest.mark.e2e
NAME = "acct"
# --allow-root-jobs: most jobs here are root's (`login`: sbatch and srun through `kubectl exec`). --allow-root-logins:
# root logs in over ssh for the root rows of the escape table.
OPERATOR_ARGS = ("--allow-root-jobs", "--allow-root-logins")
DB = f"{NAME}-db"
DB_POD = f"{DB}-0"
DB_PASSWORD_SECRET = f"{DB}-password"
LOGIN_POD, LOGIN = f"{NAME}-login-0", "sshd"
CONTROLLER_POD = f"{NAME}-controller-0"
WORKER_POD = f"{NAME}-worker-cpu-0"
SLURMDBD = f"app.kubernetes.io/instance={NAME},app.kubernetes.io/component=accounting"
JAIL = "/mnt/jail"
USER, UID, ACCOUNT = "carol", 1700, "physics"
LIMIT_REASON = "AssocMaxJobsLimit"  # Slurm's reason for a job held by its association's MaxJobs


def slurm_cluster(root_key: str) -> list[dict[str, Any]]:
    """One small worker and a login node root may log in to with `root_key`; accounting into the test database."""
    return small_cluster(NAME, accounting=accounting_into(DB), login={"sshRootPublicKeys": [root_key]})


def condition(kube: Kube, type_: str) -> dict[str, Any]:
    conditions = kube.json("slurmcluster", NAME).get("status", {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == type_), {})


def login(kube: Kube, *command: str) -> str:
    return kube.exec(LOGIN_POD, LOGIN, *command)


def sbatch(kube: Kube, script: str) -> str:
    """Submits a batch job as root from the login node and returns its id (output discarded)."""
    return login(kube, "sbatch", "--parsable", "-o", "/dev/null", "--wrap", script).strip().split(";")[0]


def sacct(kube: Kube, job_ids: list[str]) -> dict[str, tuple[str, str]]:
    """What accounting recorded for these jobs: job id -> (State, ExitCode), allocations only."""
    out = login(kube, "sacct", "-a", "-n", "-P", "-X", "-j", ",".join(job_ids), "--format=JobID,State,ExitCode")
    rows = [line.split("|") for line in out.splitlines() if line.strip()]
    return {row[0]: (row[1], row[2]) for row in rows}


def recorded(kube: Kube, expected: dict[str, tuple[str, str]], *, timeout: float, what: str) -> None:
    seen: list[dict[str, tuple[str, str]]] = [{}]

    def probe() -> bool:
        seen[0] = sacct(kube, list(expected))
        return seen[0] == expected

    try:
        until(probe, timeout=timeout, interval=2, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; sacct showed {seen[0]}, expected {expected}") from None


def queued(kube: Kube, job_ids: list[str]) -> list[str]:
    out = login(kube, "squeue", "-h", "-o", "%i", "-j", ",".join(job_ids))
    return out.split()


def slurmdbd_pod(kube: Kube) -> dict[str, Any] | None:
    pods = [p for p in kube.pods(SLURMDBD) if not p["metadata"].get("deletionTimestamp")]
    return pods[0] if len(pods) == 1 else None


def others(kube: Kube) -> dict[str, tuple[str, int]]:
    return {name: identity(kube.json("pod", name)) for name in (CONTROLLER_POD, WORKER_POD, LOGIN_POD, DB_POD)}


@pytest.fixture(scope="module")
def root_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """root's ssh key pair for the login node (spec.login.sshRootPublicKeys)."""
    return ssh_keypair(tmp_path_factory.mktemp("root-ssh"))


@pytest.fixture(scope="module")
def cluster(node: Node, kube: Kube, operator: Path, root_key: tuple[Path, str]) -> Iterator[Kube]:
    require_images(node, [TEST_DB_IMAGE, slurm_image("accounting")])
    kube.apply(database(DB, secrets.token_urlsafe(18)))
    kube.apply(slurm_cluster(root_key[1]))
    kube.until_available(NAME, operator, timeout=600, logs=(f"deployment/{NAME}-accounting -c slurmdbd",))
    yield kube


def test_slurmdbd_is_ready_because_it_answers_and_the_cluster_is_registered(cluster: Kube) -> None:
    kube = cluster
    assert condition(kube, "AccountingReady")["status"] == "True"
    dbd = slurmdbd_pod(kube)
    assert dbd is not None and pod_ready(dbd)
    probe = dbd["spec"]["containers"][0]["readinessProbe"]
    assert probe["exec"]["command"] == ["/usr/lib/slurmctl/slurm-ready", "accounting"]
    clusters = login(kube, "sacctmgr", "-n", "-P", "show", "cluster", "format=cluster")
    assert clusters.split() == [NAME]
    conf = login(kube, "cat", "/etc/slurm/slurm.conf")
    assert "AccountingStorageType=accounting_storage/slurmdbd\n" in conf


def test_jobs_show_up_in_sacct_with_state_and_exit_code(cluster: Kube) -> None:
    kube = cluster
    ok = sbatch(kube, "true")
    failing = sbatch(kube, "exit 3")
    recorded(kube, {ok: ("COMPLETED", "0:0"), failing: ("FAILED", "3:0")}, timeout=120, what="both jobs in sacct")
    print(login(kube, "sacct", "-a", "-X", "-j", f"{ok},{failing}", "--format=JobID,JobName%12,User,State,ExitCode"))


def test_jobs_finish_while_slurmdbd_is_away_and_are_all_recorded_when_it_is_back(cluster: Kube) -> None:
    kube = cluster
    before = others(kube)
    running = [sbatch(kube, "sleep 6") for _ in range(2)]
    until(lambda: login(kube, "squeue", "-h", "-t", "R", "-o", "%i").split(), timeout=60, what="a job running")
    old = slurmdbd_pod(kube)
    assert old is not None
    kube.delete("pod", old["metadata"]["name"])
    during = [sbatch(kube, "true")]  # submitted while slurmdbd is away
    jobs = running + during
    until(lambda: not queued(kube, jobs), timeout=120, interval=2, what="every job of the window to finish")

    def back() -> bool:
        pod = slurmdbd_pod(kube)
        return pod is not None and pod["metadata"]["uid"] != old["metadata"]["uid"] and pod_ready(pod)

    until(back, timeout=180, interval=2, what="a new slurmdbd pod to be ready")
    recorded(kube, {j: ("COMPLETED", "0:0") for j in jobs}, timeout=120, what="every job of the window in sacct")
    assert others(kube) == before, "a pod other than slurmdbd restarted or was re-created"


def test_the_database_pod_recreated_on_its_claim_loses_nothing(cluster: Kube) -> None:
    kube = cluster
    all_jobs = login(kube, "sacct", "-a", "-n", "-P", "-X", "--format=JobID,State,ExitCode").split()
    assert len(all_jobs) >= 5, all_jobs
    ids = [row.split("|")[0] for row in all_jobs]
    before = sacct(kube, ids)
    uid = kube.json("pod", DB_POD)["metadata"]["uid"]
    kube.delete("pod", DB_POD)

    def recreated() -> bool:
        pods = kube.pods(f"app={DB}")
        return len(pods) == 1 and pods[0]["metadata"]["uid"] != uid and pod_ready(pods[0])

    until(recreated, timeout=180, interval=2, what="the database pod re-created and ready")
    recorded(kube, before, timeout=120, what="every job recorded before, after the database came back")


EXTRA = "extra"
EXTRA_POD = f"{NAME}-worker-{EXTRA}-0"


def sinfo_nodes(kube: Kube, *args: str) -> dict[str, str]:
    """Slurm's nodes as the login node sees them (`args` narrows, e.g. to a partition): name -> state."""
    out = login(kube, "sinfo", "-h", "-N", "-o", "%N %t", *args)
    return dict(line.split() for line in out.splitlines() if line.strip())


def test_removing_a_worker_group_whose_node_ran_a_job_keeps_slurmctld_up_and_the_jobs_history(cluster: Kube) -> None:
    """Slinky #138: a NodeSet removed while a finished job still named its node and partition crash-looped
    slurmctld. Here a group with a partition of its own runs a job, and both go minutes before Slurm forgets the job
    (MinJobAge): slurmctld reconfigures without restarting, sacct keeps the job with its node, the rest works."""
    kube = cluster
    group = small_group(EXTRA)
    partitions = [{"name": "main", "default": True, "workers": ["cpu"]}, {"name": EXTRA, "workers": [EXTRA]}]
    patch = [
        {"op": "add", "path": "/spec/workers/-", "value": group},
        {"op": "add", "path": "/spec/partitions", "value": partitions},
    ]
    kube.run("patch", "slurmcluster", NAME, "--type=json", "-p", json.dumps(patch))
    until(
        lambda: sinfo_nodes(kube, "-p", EXTRA) == {EXTRA_POD: "idle"},
        timeout=240,
        interval=2,
        what=f"{EXTRA_POD} idle in partition {EXTRA}",
    )
    job = login(kube, "sbatch", "--parsable", "-p", EXTRA, "-o", "/dev/null", "--wrap", "true").strip()
    recorded(kube, {job: ("COMPLETED", "0:0")}, timeout=120, what=f"job {job} on {EXTRA_POD} in sacct")
    controller = identity(kube.json("pod", CONTROLLER_POD))

    workers = kube.json("slurmcluster", NAME)["spec"]["workers"]
    index = next(i for i, g in enumerate(workers) if g["name"] == EXTRA)
    removal = [
        {"op": "test", "path": f"/spec/workers/{index}/name", "value": EXTRA},
        {"op": "remove", "path": f"/spec/workers/{index}"},
        {"op": "replace", "path": "/spec/partitions", "value": [{"name": "main", "default": True}]},
    ]
    kube.run("patch", "slurmcluster", NAME, "--type=json", "-p", json.dumps(removal))

    def gone() -> bool:
        partition = kube.cp.kubectl("-n", kube.ns, "exec", LOGIN_POD, "-c", LOGIN, "--", "scontrol", "show",
                                    "partition", EXTRA, check=False)  # fmt: skip
        return (
            partition.returncode != 0
            and EXTRA_POD not in sinfo_nodes(kube)
            and not kube.pods(f"slurm.slurmctl.io/worker-group={EXTRA}")
        )

    until(gone, timeout=240, interval=2, what=f"partition {EXTRA} and node {EXTRA_POD} gone from Slurm, pod gone")
    assert not kube.run("get", "statefulset", "-o", "name").count(f"{NAME}-worker-{EXTRA}")
    # Still the same slurmctld, answering: nothing restarted it while it forgot the group.
    assert identity(kube.json("pod", CONTROLLER_POD)) == controller, "slurmctld restarted"
    assert sinfo_nodes(kube) == {WORKER_POD: "idle"}
    out = login(kube, "sacct", "-a", "-n", "-P", "-X", "-j", job, "--format=JobID,State,ExitCode,NodeList,Partition")
    assert out.split() == [f"{job}|COMPLETED|0:0|{EXTRA_POD}|{EXTRA}"], out
    assert login(kube, "squeue", "-h", "-o", "%i").split() == []
    assert login(kube, "srun", "-N1", "hostname").strip() == WORKER_POD
    assert identity(kube.json("pod", CONTROLLER_POD)) == controller, "slurmctld restarted"
    log = kube.run("logs", CONTROLLER_POD, "-c", "slurmctld")
    print("\n".join(line for line in log.splitlines() if job in line or EXTRA in line)[-3000:])


def as_user(kube: Kube, command: str) -> str:
    """A shell command as the jail's user, inside the jail on the login node (what an ssh session gets)."""
    env = ["env", f"HOME=/home/{USER}", f"USER={USER}", "PATH=/usr/local/bin:/usr/bin:/bin"]
    return login(kube, "chroot", f"--userspec={UID}:{UID}", JAIL, *env, "sh", "-c", f"cd && {command}")


def patch_accounts(kube: Kube, accounts: list[dict[str, Any]]) -> None:
    patch = [{"op": "add", "path": "/spec/accounting/accounts", "value": accounts}]
    kube.run("patch", "slurmcluster", NAME, "--type=json", "-p", json.dumps(patch))


def ctld_max_jobs(kube: Kube) -> str:
    """MaxJobs of the user's association as slurmctld enforces it ("" when unlimited), from its association cache."""
    out = login(kube, "scontrol", "show", "assoc_mgr", f"users={USER}", f"accounts={ACCOUNT}", "flags=assoc")
    found = re.search(r"\bMaxJobs=([^\s(]*)", out.split(f"UserName={USER}(", 1)[1])  # "MaxJobs=2(1)", "MaxJobs= "
    assert found is not None, out
    return found.group(1)


def enforce(kube: Kube) -> str:
    """slurmctld's AccountingStorageEnforce."""
    lines = login(kube, "scontrol", "show", "config").splitlines()
    return next((line.split("=", 1)[1].strip() for line in lines if line.startswith("AccountingStorageEnforce")), "")


def job_states(kube: Kube, job_ids: list[str]) -> dict[str, tuple[str, str]]:
    out = login(kube, "squeue", "-h", "-o", "%i|%T|%r", "-j", ",".join(job_ids))
    return {row.split("|")[0]: (row.split("|")[1], row.split("|")[2]) for row in out.split()}


def test_a_limit_declared_in_the_cluster_bites_follows_edits_and_is_lifted_when_removed(cluster: Kube) -> None:
    kube = cluster
    login(kube, "chroot", JAIL, "useradd", "-m", "-u", str(UID), "-s", "/bin/bash", USER)
    login(kube, "sacctmgr", "-i", "add", "account", "byhand", "description=made-by-an-admin")
    assert condition(kube, "LimitsApplied") == {}, "no limits declared yet"
    patch_accounts(kube, [{"name": ACCOUNT, "users": [USER], "maxJobsPerUser": 1}])
    until(lambda: condition(kube, "LimitsApplied").get("status") == "True", timeout=180, what="LimitsApplied")
    assert login(kube, "sacctmgr", "-n", "-P", "show", "user", USER, "format=defaultaccount").strip() == ACCOUNT
    until(
        lambda: "limits" in enforce(kube),
        timeout=180,
        interval=2,
        what="AccountingStorageEnforce with limits in slurmctld",
    )
    until(lambda: ctld_max_jobs(kube) == "1", timeout=60, what="MaxJobs=1 in slurmctld")

    # Two jobs of one user: the second waits for the limit, and runs once the first is done.
    first, second = (as_user(kube, "sbatch --parsable -o /dev/null --wrap 'sleep 8'").strip() for _ in range(2))
    until(
        lambda: job_states(kube, [first, second]) == {first: ("RUNNING", "None"), second: ("PENDING", LIMIT_REASON)},
        timeout=60,
        what=f"job {first} running and {second} held by the limit",
    )
    until(lambda: first not in queued(kube, [first]), timeout=60, what=f"job {first} to end")
    until(lambda: second not in queued(kube, [second]), timeout=60, what=f"job {second} to run and end")
    recorded(kube, {first: ("COMPLETED", "0:0"), second: ("COMPLETED", "0:0")}, timeout=60, what="both jobs")

    # An edit reaches slurmctld; removing the limit from the spec lifts it.
    for value, expected in ((2, "2"), (None, "")):
        start = time.monotonic()
        account = {"name": ACCOUNT, "users": [USER]} | ({"maxJobsPerUser": value} if value else {})
        patch_accounts(kube, [account])
        until(partial(lambda want: ctld_max_jobs(kube) == want, expected), timeout=90, what=f"MaxJobs={expected!r}")
        print(f"maxJobsPerUser {value}: in slurmctld after {time.monotonic() - start:.1f}s")
    # What the spec never named is left as it was.
    accounts = login(kube, "sacctmgr", "-n", "-P", "show", "account", "format=account,description").split()
    assert "byhand|made-by-an-admin" in accounts, accounts


def test_an_unreachable_database_is_named_in_the_condition_and_jobs_still_run(cluster: Kube) -> None:
    kube = cluster
    kube.run("scale", "statefulset", DB, "--replicas=0")
    until(lambda: not kube.pods(f"app={DB}"), timeout=120, interval=2, what="the database pod to go")
    old = slurmdbd_pod(kube)
    assert old is not None
    kube.delete("pod", old["metadata"]["name"])

    def names_the_host() -> dict[str, Any] | None:
        c = condition(kube, "AccountingReady")
        return c if c.get("status") == "False" and f"{DB}:3306" in c.get("message", "") else None

    cond = until(
        names_the_host,
        timeout=120,
        interval=2,
        what="AccountingReady=False naming the database host",
    )
    print(f"condition while the database is away: {cond}")
    # The rest of the cluster keeps running jobs.
    out = login(kube, "srun", "-N1", "hostname")
    assert out.strip() == WORKER_POD
    job = sbatch(kube, "true")
    try:
        until(lambda: not queued(kube, [job]), timeout=120, interval=2, what="the job to finish without accounting")
    except AssertionError:
        print(login(kube, "squeue", "-j", job, "-o", "%i %T %r %N"), login(kube, "sinfo", "-N"))
        raise
    kube.run("scale", "statefulset", DB, "--replicas=1")
    until(
        lambda: condition(kube, "AccountingReady").get("status") == "True",
        timeout=240,
        interval=3,
        what="AccountingReady=True once the database is back",
    )
    recorded(kube, {job: ("COMPLETED", "0:0")}, timeout=120, what="the job run without accounting, recorded later")


# What root tries against the node wherever it is, in a job or logged in to the login jail: each row is (attempt,
# shell command), the command exits 0 only if the attempt worked.
ROOT_ESCAPES = (
    ("the container's root through /proc/1/root", "ls /proc/1/root/"),
    ("mount a filesystem", "mkdir -p /tmp/m.$$ && mount -t tmpfs x /tmp/m.$$"),
    ("create a device node", "mknod /tmp/d.$$ b 7 0"),
    ("write to /sys", "echo 1 > /sys/kernel/mm/ksm/run"),
    ("become root of a new user namespace", "unshare -Ur true"),
)
# Root in a job, which this module's install allows (--allow-root-jobs). The worker's container is privileged; the
# job's tasks run with no capability, no_new_privs, no new user namespaces and a read-only /sys (chroot.so).
ROOT_JOB_ESCAPES = (
    ("leave the jail with chroot", "chroot / true"),
    ("the munge key", "cat /etc/munge/munge.key || cat /proc/1/root/etc/munge/munge.key"),
    ("create a cgroup", "mkdir /sys/fs/cgroup/escape.$$ || mkdir /sys/fs/cgroup/memory/escape.$$"),
    *ROOT_ESCAPES,
)


def test_a_root_job_the_admin_allows_is_still_not_root_of_the_node(cluster: Kube) -> None:
    script = attempts_script(ROOT_JOB_ESCAPES)
    script += "\ngrep -E '^(NoNewPrivs|CapEff|CapBnd):' /proc/self/status\n"
    out = login(cluster, "srun", "-N1", "bash", "-c", script)
    rows = attempts_seen(out, ROOT_JOB_ESCAPES)
    print("\nwhere    | attempt" + " " * 36 + "| expected | observed")
    print("\n".join(f"root job | {attempt:42} | refused  | {verdict}: {detail}" for attempt, verdict, detail in rows))
    assert [attempt for attempt, verdict, _ in rows if verdict != "refused"] == [], out
    assert dict(re.findall(r"^(\w+):\s*(\S+)$", out, re.MULTILINE)) == {
        "NoNewPrivs": "1",
        "CapEff": "0000000000000000",
        "CapBnd": "0000000000000000",
    }, out


# Root logged in over ssh (--allow-root-logins) is root in the login jail: the login container is not privileged, and
# sshd runs without CAP_SYS_ADMIN. A chroot escape (CAP_SYS_CHROOT, which sshd needs for ChrootDirectory) reaches the
# container's own root filesystem, where no munge key is: the row tries the key through one.
CHROOT_ESCAPE = (
    'python3 -c \'import os; os.makedirs("/tmp/e", exist_ok=True); os.chroot("/tmp/e"); '
    '[os.chdir("..") for _ in range(64)]; os.chroot("."); print(open("/etc/munge/munge.key", "rb").read(1))\''
)
ROOT_LOGIN_ESCAPES = (
    ("the munge key", "cat /etc/munge/munge.key"),
    ("the munge key through a chroot escape", CHROOT_ESCAPE),
    *ROOT_ESCAPES,
)


def test_root_logged_in_to_the_jail_is_not_root_of_the_node(cluster: Kube, root_key: tuple[Path, str]) -> None:
    key, _ = root_key
    ip = cluster.json("pod", LOGIN_POD)["status"]["podIP"]
    script = attempts_script(ROOT_LOGIN_ESCAPES) + "grep CapEff /proc/self/status\n"
    cluster.exec(LOGIN_POD, LOGIN, "sh", "-c", f"cat > {JAIL}/root/escape.sh", input=script)
    out = ssh(key, "root", ip, "bash /root/escape.sh")
    rows = attempts_seen(out, ROOT_LOGIN_ESCAPES)
    print("\nwhere      | attempt" + " " * 36 + "| expected | observed")
    print("\n".join(f"root login | {attempt:42} | refused  | {verdict}: {detail}" for attempt, verdict, detail in rows))
    assert [attempt for attempt, verdict, _ in rows if verdict != "refused"] == [], out
    effective = int(re.findall(r"^CapEff:\s*(\S+)$", out, re.MULTILINE)[0], 16)
    cap_sys_module, cap_sys_admin = 16, 21
    assert not effective & ((1 << cap_sys_module) | (1 << cap_sys_admin)), hex(effective)
