"""The fault modules' shared parts (test_faults.py, test_faults_restarts.py): a SlurmCluster with accounting and a jail
user whose files must outlive every fault, driven from its login node; the row each fault records (jobs completed,
requeued by Slurm, lost; files lost) and the fault table that checks every row's jobs in accounting.

Two modules, each with its own cluster, so that they run side by side (docs/testing.md): one cluster through all ten
faults was the run's longest module (about 14 min).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import select
import shlex
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from test.e2e.harness import Node
from test.e2e.pods.conftest import require_images
from test.e2e.pods.machine import FAULTS_NODE, FAULTS_TOLERATION
from test.e2e.pods.slurm import (
    TEST_DB_IMAGE,
    Kube,
    accounting_into,
    database,
    node_fields,
    pod_ready,
    slurm_image,
    small_cluster,
)
from test.waiting import until

LOGIN = "sshd"
JAIL = "/mnt/jail"
USER, UID = "dave", 1800
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL"}


@dataclass
class Row:
    fault: str
    jobs: list[str]
    completed: list[str] = field(default_factory=list)
    requeued: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    files_lost: list[str] = field(default_factory=list)


class Cluster:
    """A fault module's SlurmCluster, driven from its login node: as root in the login container, as the jail's user
    through the jail's own clients. `rows` are the faults recorded so far."""

    def __init__(self, kube: Kube, name: str) -> None:
        self.kube = kube
        self.name = name
        self.login_pod = f"{name}-login-0"
        self.controller_pod = f"{name}-controller-0"
        self.w0, self.w1 = f"{name}-worker-cpu-0", f"{name}-worker-cpu-1"
        self.db = f"{name}-db"
        self.keep = [f"/home/{USER}/keep/file-{i}" for i in range(5)] + [f"/data/{name}/keep-{i}" for i in range(3)]
        self.rows: list[Row] = []

    def login(self, *command: str, timeout: float = 120) -> str:
        return self.kube.exec(self.login_pod, LOGIN, *command, timeout=timeout)

    def as_user(self, script: str, *, timeout: float = 120) -> str:
        return self.login("chroot", JAIL, "su", "-", USER, "-c", script, timeout=timeout)

    def sbatch(self, *args: str, wrap: str) -> str:
        """A batch job of the user's, its output in the user's directory in the jail."""
        words = ["sbatch", "--parsable", f"--output=/home/{USER}/out/%j.out", *args, "--wrap", wrap]
        return self.as_user(shlex.join(words)).strip().split(";")[0]

    def held(self, tag: str, *args: str) -> str:
        """A job of the user's that runs until `release(tag)` (at most 10 minutes, then it fails) and notes each start
        in `starts(tag)`; a tag serves once a cluster. A fixed `sleep` ends on its own clock, and on a busy machine
        the faults around it can take longer: slurmrestd's pod took ~55 s to go (CI run49), slurmctld came back after
        a 75 s job ended (project CI of stop 45), a `sleep 15` ended between slurmctld's last save and its `kill -9`
        (ci17)."""
        gate = self._gate(tag)
        wait = f"for i in $(seq 600); do [ -e {gate} ] && exit 0; sleep 1; done; exit 1"
        return self.sbatch(*args, wrap=f"echo $SLURM_JOB_ID >> {gate}.starts; {wait}")

    def release(self, tag: str) -> None:
        """Lets every job `held(tag)` end (a file in the user's home, in the jail every node shares)."""
        self.as_user(f"touch {self._gate(tag)}")

    def starts(self, tag: str) -> list[str]:
        """The ids of the jobs `held(tag)`, once for each time one of them started."""
        return self.as_user(f"cat {self._gate(tag)}.starts").split()

    def _gate(self, tag: str) -> str:
        return f"/home/{USER}/out/release-{tag}"

    def jobs(self) -> dict[str, dict[str, str]]:
        """Every job slurmctld holds (MinJobAge keeps ended ones 300 s): id -> `scontrol show job` fields."""
        out = self.login("scontrol", "show", "job", "-o")
        found = {}
        for line in out.splitlines():
            fields = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
            if "JobId" in fields:
                found[fields["JobId"]] = fields
        return found

    def state(self, job: str) -> str:
        return self.jobs().get(job, {}).get("JobState", "")

    def running(self, *jobs: str, timeout: float = 120) -> None:
        until(
            lambda: all(self.state(j) == "RUNNING" for j in jobs), timeout=timeout, interval=1, what=f"{jobs} running"
        )

    def node(self, name: str) -> dict[str, str]:
        """`scontrol show node` fields; {} when Slurm does not know the node."""
        try:
            return node_fields(self.login("scontrol", "show", "node", "-o", name))
        except AssertionError:
            return {}

    def idle(self, name: str) -> bool:
        """Idle and taking jobs (a dynamic node's state reads IDLE+DYNAMIC_NORM)."""
        state = self.node(name).get("State", "").split("+")
        return state[0] == "IDLE" and "DRAIN" not in state

    def files(self) -> dict[str, str]:
        """The user's files that must survive every fault: path -> content (missing ones left out)."""
        out = self.login("sh", "-c", " ".join(f"[ -f {JAIL}{p} ] && echo {p} $(cat {JAIL}{p});" for p in self.keep))
        return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)

    def pod(self, name: str) -> dict[str, Any] | None:
        found = self.kube.cp.kubectl("-n", self.kube.ns, "get", "pod", name, "-o", "json", check=False)
        return json.loads(found.stdout) if found.returncode == 0 else None

    def ready(self, name: str, *, not_uid: str = "") -> bool:
        pod = self.pod(name)
        return pod is not None and pod["metadata"]["uid"] != not_uid and pod_ready(pod)

    def patch(self, *ops: dict[str, Any]) -> None:
        self.kube.run("patch", "slurmcluster", self.name, "--type=json", "-p", json.dumps(list(ops)))


@contextmanager
def last_words(kube: Kube, pod: str, *containers: str) -> Iterator[dict[str, list[str]]]:
    """Each container's log (`kubectl logs -f --timestamps`) from before a fault until the container has ended: what
    its daemon said while it stopped. Filled in when the block ends. The stream can be cut when the kubelet removes
    a deleted pod's containers right after the last one stopped: assert on what a daemon says when the signal
    arrives, and on later lines only where another container keeps the pod (slurmctld: munged outlives it)."""
    words: dict[str, list[str]] = {}
    env = {**os.environ, "KUBECONFIG": str(kube.cp.kubeconfig)}
    follow = {
        container: subprocess.Popen(
            ["kubectl", "-n", kube.ns, "logs", "-f", "--timestamps", "--tail=5", pod, "-c", container],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for container in containers
    }
    # The fault comes only once every stream is attached (its first line, from --tail, has arrived): a follower that
    # attaches after the container stopped, or after the kubelet removed it, would miss what the daemon said.
    first: dict[str, list[str]] = {}
    for container, proc in follow.items():
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, f"kubectl logs -f {pod} -c {container} printed nothing within 60 s"
        first[container] = [proc.stdout.readline().rstrip("\n")]
    try:
        yield words
    finally:
        for container, proc in follow.items():
            try:
                out, _ = proc.communicate(timeout=180)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate(timeout=10)
            words[container] = first[container] + out.splitlines()


def said(words: list[str], text: str) -> str:
    """The timestamp of the first log line containing `text` (RFC 3339, so they compare as strings)."""
    line = next((line for line in words if text in line), None)
    assert line is not None, f"no {text!r} in:\n" + "\n".join(words[-15:])
    return line.split(" ", 1)[0]


def outcome(cluster: Cluster, fault: str, jobs: list[str], *, timeout: float = 300) -> Row:
    """Wait until every job ended, then record the row: COMPLETED (Restarts > 0: requeued by Slurm first) or lost (no
    longer known, or ended any other way); and the user's files that are gone or changed."""
    seen: dict[str, dict[str, str]] = {}

    def ended() -> bool:
        seen.clear()
        seen.update(cluster.jobs())
        return all(j not in seen or seen[j].get("JobState") in ENDED for j in jobs)

    until(ended, timeout=timeout, interval=2, what=f"the jobs of '{fault}' to end")
    row = Row(fault, jobs)
    for job in jobs:
        fields = seen.get(job)
        if fields is not None and fields.get("JobState") == "COMPLETED" and fields.get("ExitCode") == "0:0":
            row.completed.append(job)
            if int(fields.get("Restarts", "0")) > 0:
                row.requeued.append(job)
        else:
            row.lost.append(job)
    files = cluster.files()
    row.files_lost = [p for p in cluster.keep if files.get(p) != f"kept {p}"]
    cluster.rows.append(row)
    print(f"{fault}: {len(jobs)} jobs, {len(row.completed)} completed ({len(row.requeued)} requeued), lost {row.lost}")
    print({j: (seen.get(j, {}).get("JobState"), seen.get(j, {}).get("Restarts")) for j in jobs})
    return row


def assert_nothing_lost(row: Row) -> None:
    assert not row.lost, f"{row.fault}: jobs lost {row.lost}"
    assert not row.files_lost, f"{row.fault}: files lost {row.files_lost}"


# What a shared cluster's admin gives the pinned workers besides their place: a priority class (cluster-scoped, so
# one for every run; the API server resolves it into each pod's priority), a private registry's pull secret (never
# used: the images are on the node already) and a label and an annotation of their own.
PRIORITY_CLASS: dict[str, Any] = {
    "apiVersion": "scheduling.k8s.io/v1",
    "kind": "PriorityClass",
    "metadata": {"name": "slurmctl-test-hpc"},
    "value": 100_000,
    "description": "slurmctl's real-pods tests: a worker group's priority class",
}
PULL_SECRET = "registry"
POD_LABELS = {"example.com/team": "faults"}
POD_ANNOTATIONS = {"example.com/owner": "the faults module"}
POD_SETTINGS: dict[str, Any] = {
    "priorityClassName": PRIORITY_CLASS["metadata"]["name"],
    "podLabels": POD_LABELS,
    "podAnnotations": POD_ANNOTATIONS,
}


def pull_secret() -> dict[str, Any]:
    auths = {"auths": {"127.0.0.1:5000": {"auth": base64.b64encode(b"user:password").decode()}}}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": PULL_SECRET},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": json.dumps(auths)},
    }


def bring_up(node: Node, kube: Kube, operator: Path, name: str, *, pinned: bool) -> Cluster:
    """The cluster (two workers, a login node, slurmrestd, accounting into a test MariaDB) with the jail's user and
    their files, both workers idle. `pinned`: both workers on the node kept for test_faults (machine.py), whose
    cordon test cordons it, so that no other module's workers are there for their operators to drain, with the
    pod settings above and the cluster's pull secret."""
    require_images(node, [TEST_DB_IMAGE, slurm_image("accounting")])
    c = Cluster(kube, name)
    kube.apply(database(c.db, secrets.token_urlsafe(18)))
    objects = small_cluster(name, accounting=accounting_into(c.db))
    if pinned:
        kube.apply([PRIORITY_CLASS, pull_secret()])
        where = {"nodeSelector": {"kubernetes.io/hostname": FAULTS_NODE}, "tolerations": [FAULTS_TOLERATION]}
        objects[1]["spec"]["workers"][0].update(**where, **POD_SETTINGS)
        objects[1]["spec"]["slurm"] = {
            **objects[1]["spec"].get("slurm", {}),
            "imagePullSecrets": [{"name": PULL_SECRET}],
        }
    objects[1]["spec"]["workers"][0]["size"] = 2
    kube.apply(objects)
    kube.until_available(name, operator, timeout=600, logs=(f"deployment/{name}-accounting -c slurmdbd",))
    # A user of the jail with files that must outlive every fault, and an account to run jobs under.
    c.login("chroot", JAIL, "useradd", "-m", "-u", str(UID), "-s", "/bin/bash", USER)
    make = " && ".join(f"mkdir -p $(dirname {p}) && echo kept {p} > {p}" for p in c.keep)
    c.login("chroot", JAIL, "sh", "-c", f"{make} && mkdir -p /home/{USER}/out && chown -R {USER}: /home/{USER}")
    c.login("chroot", JAIL, "chown", "-R", f"{USER}:", f"/data/{name}")
    until(lambda: c.idle(c.w0) and c.idle(c.w1), timeout=120, what="both workers idle")
    return c


def fault_table(c: Cluster, rows: int) -> None:
    """Every row's jobs are in accounting with their final state (no lost state record), and nothing was lost."""
    ids = [j for row in c.rows for j in row.jobs]
    out = c.login("sacct", "-a", "-n", "-P", "-X", "-j", ",".join(ids), "--format=JobID,State", timeout=120)
    recorded = dict(line.split("|")[:2] for line in out.splitlines() if "|" in line)
    header = f"{'fault':72} | jobs | completed | requeued by Slurm | lost | files lost | records lost"
    lines = [header, "-" * len(header)]
    for row in c.rows:
        records_lost = [j for j in row.jobs if recorded.get(j) != "COMPLETED"]
        lines.append(
            f"{row.fault:72} | {len(row.jobs):4} | {len(row.completed):9} | {len(row.requeued):17} | "
            f"{len(row.lost):4} | {len(row.files_lost):10} | {len(records_lost):12}"
        )
    print("\n".join(lines))
    assert len(c.rows) == rows, [r.fault for r in c.rows]
    assert not [j for row in c.rows for j in row.lost]
    assert not [p for row in c.rows for p in row.files_lost]
    assert [j for j in ids if recorded.get(j) != "COMPLETED"] == [], f"accounting records lost or wrong: {recorded}"
