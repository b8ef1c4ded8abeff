"""Helpers for the real-pods Slurm tests: the operator as a real process, kubectl exec into Slurm pods, ssh as a user.

Everything here is synchronous (the tests drive real processes and wait on them with deadlines), and every wait names
what it waited for and what it saw last.
"""

from __future__ import annotations

import copy
import json
import os
import runpy
import shlex
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from slurmctl.api.v1 import IMAGE_TAG, Component, default_image
from test import timing
from test.e2e.harness import REPO, ControlPlane
from test.waiting import until

SLURMCTL = REPO / ".venv" / "bin" / "slurmctl"
# Not a Slurm image: the same for every Slurm line (hack/images.sh builds it with the default line only).
TEST_DB_IMAGE = f"localhost/slurmctl-test/mariadb:{IMAGE_TAG}"
MYSQL_UID = 970  # images/test-mariadb/Dockerfile

# The Slurm line the tests run, one setting as for hack/images.sh and hack/local-slurm.sh: SLURM_LINE=26.05 runs every
# SlurmCluster on the images `SLURM_LINE=26.05 make images` built (the line's tag suffix from its pin file).
DEFAULT_SLURM_LINE = "24.11"
SLURM_LINE = os.environ.get("SLURM_LINE") or DEFAULT_SLURM_LINE


def _line_image_tag(line: str) -> str:
    if line == DEFAULT_SLURM_LINE:
        return IMAGE_TAG
    pins = REPO / "images" / "lines" / f"{line}.pins"
    assert pins.is_file(), f"SLURM_LINE={line}: no {pins.relative_to(REPO)}"
    image_line = runpy.run_path(str(REPO / "hack" / "image_line.py"))
    suffix: str = image_line["parse"](pins.read_text(), str(pins)).settings["tag-suffix"]
    return IMAGE_TAG + suffix


SLURM_IMAGE_TAG = _line_image_tag(SLURM_LINE)
# The line test_upgrade.py moves a cluster of the default line to, and the images of the components it moves (none
# when the tests run another line: the upgrade test then skips).
UPGRADE_LINE = "26.05"
UPGRADE_IMAGES: tuple[str, ...] = (
    tuple(
        default_image(c, tag=_line_image_tag(UPGRADE_LINE))
        for c in ("controller", "worker", "login", "rest", "accounting")
    )
    if SLURM_LINE == DEFAULT_SLURM_LINE
    else ()
)


def slurm_image(component: Component) -> str:
    """The image of a Slurm component on the line the tests run."""
    return default_image(component, tag=SLURM_IMAGE_TAG)


def on_slurm_line(obj: dict[str, Any]) -> dict[str, Any]:
    """A SlurmCluster set to the tests' line's images (spec.slurm.imageTag, unless it names a tag itself); any other
    object as it is. The default line leaves the spec alone, so those tests run the operator's own default."""
    if obj.get("kind") != "SlurmCluster" or SLURM_IMAGE_TAG == IMAGE_TAG:
        return obj
    obj = copy.deepcopy(obj)
    slurm = obj.setdefault("spec", {}).setdefault("slurm", {})
    slurm.setdefault("imageTag", SLURM_IMAGE_TAG)
    slurm.setdefault("version", SLURM_LINE)  # what status.slurm reports: an imageTag says nothing of its line
    return obj


# What a failed test's report shows of a container that is not ready or restarted.
STATUS_KEYS = ("ready", "started", "restartCount", "state", "lastState")


class Kube:
    """kubectl in one namespace of a control plane."""

    def __init__(self, cp: ControlPlane, namespace: str) -> None:
        self.cp = cp
        self.ns = namespace

    def run(self, *args: str, check: bool = True, input: str | None = None) -> str:
        return self.cp.kubectl("-n", self.ns, *args, check=check, input=input).stdout

    def json(self, *args: str) -> Any:
        return json.loads(self.run("get", *args, "-o", "json"))

    def exec(self, pod: str, container: str, *command: str, input: str | None = None, timeout: float = 120) -> str:
        """Run a command in a container; fail with its output when it exits non-zero."""
        env = {**os.environ, "KUBECONFIG": str(self.cp.kubeconfig)}
        args = ["kubectl", "-n", self.ns, "exec", "-i" if input is not None else "", pod, "-c", container, "--"]
        proc = subprocess.run(
            [a for a in args if a] + list(command),
            env=env,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if proc.returncode != 0:
            raise AssertionError(
                f"{' '.join(command)} in {pod}/{container} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
            )
        return proc.stdout

    def pods(self, selector: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.json("pods", "-l", selector)["items"]
        return items

    def slurm_state(self) -> str:
        """What Slurm says now and what its daemons said last, for a failed test's report: where the pods run,
        `sinfo -R`, every node's state (COMPLETING too), every job, which controller answers and the topology it uses
        (through each login pod), and the last lines of every slurmctld and slurmd log in the namespace."""
        out = [self.run("get", "pods", "-o", "wide", check=False)]
        for pod in self.pods("app.kubernetes.io/component=login"):
            name, command = (
                pod["metadata"]["name"],
                ("sinfo -R; sinfo -N -o '%N %T %E'; squeue -a -t all; scontrol ping; scontrol show topology"),
            )
            found = self.cp.kubectl("-n", self.ns, "exec", name, "-c", "sshd", "--", "sh", "-c", command, check=False)
            out.append(f"--- {name}: {command}\n{found.stdout}{found.stderr}")
        for component, container in (("controller", "slurmctld"), ("workers", "slurmd")):
            for pod in self.pods(f"app.kubernetes.io/component={component}"):
                name = pod["metadata"]["name"]
                logs = self.run("logs", name, "-c", container, "--tail=30", check=False)
                out.append(f"--- {name}/{container}, last lines\n{logs}")
        out += self._unready_containers()
        return "\n".join(out)

    def _unready_containers(self) -> list[str]:
        """Every container (native sidecars too) not ready or restarted: its status, and the last lines of its
        current and previous run. A worker back from a node crash that Slurm still calls "Not responding" while its
        pod reads 1/2 (test_nodes, stop 51) showed no more than its slurmd's log."""
        out = []
        for pod in self.json("pods")["items"]:
            name, status_of = pod["metadata"]["name"], pod.get("status", {})
            for status in [*status_of.get("initContainerStatuses", []), *status_of.get("containerStatuses", [])]:
                if status.get("ready") and not status.get("restartCount"):
                    continue
                container = status["name"]
                out.append(f"--- {name}/{container}: {json.dumps({k: status.get(k) for k in STATUS_KEYS})}")
                for previous in ([], ["--previous"]) if status.get("restartCount") else ([],):
                    logs = self.run("logs", name, "-c", container, "--tail=15", *previous, check=False)
                    out.append(f"{' '.join(previous) or 'current'}:\n{logs}")
        return out

    def save_logs(self, into: Path) -> None:
        """Every container's whole log in the namespace (and its previous run's, where it restarted), one file each,
        for a failed test: the report keeps only the last lines, and the namespace is gone once the module ends."""
        into.mkdir(parents=True, exist_ok=True)
        for pod in self.json("pods")["items"]:
            name = pod["metadata"]["name"]
            status_of = pod.get("status", {})
            for status in [*status_of.get("initContainerStatuses", []), *status_of.get("containerStatuses", [])]:
                container = status["name"]
                for previous in [False, True] if status.get("restartCount") else [False]:
                    args = ["logs", name, "-c", container, *(["--previous"] if previous else [])]
                    suffix = ".previous" if previous else ""
                    (into / f"{name}.{container}{suffix}.log").write_text(self.run(*args, check=False))

    def apply(self, objects: list[dict[str, Any]]) -> None:
        """Server-side apply, as one List; SlurmClusters on the tests' Slurm line (`on_slurm_line`)."""
        items = {"apiVersion": "v1", "kind": "List", "items": [on_slurm_line(o) for o in objects]}
        self.run("apply", "--server-side", "-f", "-", input=json.dumps(items))

    def apply_file(self, path: Path) -> None:
        """A manifest file (such as a sample), applied as `apply` applies objects."""
        self.apply([doc for doc in yaml.safe_load_all(path.read_text()) if doc])

    def phase(self, cluster: str) -> str:
        return str(self.json("slurmcluster", cluster).get("status", {}).get("phase", ""))

    def until_available(self, cluster: str, operator_log: Path, *, timeout: float, logs: tuple[str, ...] = ()) -> None:
        """Wait for the SlurmCluster to be Available; on timeout print what explains why: pods, their events, the
        `logs` (kubectl logs arguments, e.g. "deployment/x -c c") and the operator's log. The wait is charged to the
        running module's "to Available" in the timing table (test.timing), on timeout too."""
        start = time.monotonic()
        try:
            until(lambda: self.phase(cluster) == "Available", timeout=timeout, interval=3, what=f"{cluster} Available")
        except AssertionError:
            timing.record_available(time.monotonic() - start)
            print(self.run("get", "pods,jobs,pvc", "-o", "wide", check=False))
            print(self.run("describe", "pods", check=False)[-8000:])
            for args in logs:
                print(self.run("logs", *args.split(), "--tail=40", check=False))
            print(operator_log.read_text()[-4000:])
            raise
        timing.record_available(time.monotonic() - start)

    def delete(self, kind: str, name: str, *, timeout: float = 180) -> None:
        """Delete an object and wait until that one (by uid: a controller may make a new one of the same name) is
        gone. Waited for here rather than by `kubectl --wait`, whose own deadline would race kubectl's."""
        uid = self.json(kind, name)["metadata"]["uid"]
        self.run("delete", kind, name, "--wait=false")

        def gone() -> bool:
            found = self.cp.kubectl("-n", self.ns, "get", kind, name, "-o", "jsonpath={.metadata.uid}", check=False)
            return found.returncode != 0 or found.stdout != uid

        until(gone, timeout=timeout, interval=1, what=f"{kind} {name} to be deleted")


def small_group(name: str, size: int = 1) -> dict[str, Any]:
    """A worker group of small workers (room for other modules' pods on this 2-core node)."""
    resources = {"requests": {"cpu": "300m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}}
    return {"name": name, "size": size, "resources": resources}


def small_cluster(name: str, **spec: Any) -> list[dict[str, Any]]:
    """A jail claim and a SlurmCluster with one small worker (`small_group` cpu) and a login node; `spec` adds to the
    SlurmCluster's spec."""
    worker = small_group("cpu")
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": f"{name}-jail"},
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "5Gi"}}},
        },
        {
            "apiVersion": "slurm.slurmctl.io/v1",
            "kind": "SlurmCluster",
            "metadata": {"name": name},
            "spec": {"jail": {"volume": {"claimName": f"{name}-jail"}}, "workers": [worker], **spec},
        },
    ]


def node_fields(shown: str) -> dict[str, str]:
    """The fields of one `scontrol show node -o` line; Reason, the last field, may hold spaces."""
    head, _, reason = shown.strip().partition(" Reason=")
    fields = dict(kv.split("=", 1) for kv in head.split() if "=" in kv)
    if reason:
        fields["Reason"] = reason
    return fields


def pod_ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return pod.get("status", {}).get("phase") == "Running" and any(
        c["type"] == "Ready" and c["status"] == "True" for c in conditions
    )


def identity(pod: dict[str, Any]) -> tuple[str, int]:
    """A pod's UID and its containers' restarts (its munge sidecar's too): equal before and after means it neither
    moved nor restarted."""
    status = pod.get("status", {})
    statuses = [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
    return pod["metadata"]["uid"], sum(s.get("restartCount", 0) for s in statuses)


class OperatorProcess:
    """`slurmctl run` as users run it, authenticated as the operator's ServiceAccount; stopped by its PID. Tests of
    operator faults kill it (SIGKILL, as a crash would) and start it again; its log collects every run."""

    def __init__(self, kubeconfig: Path, log: Path, args: tuple[str, ...] = ()) -> None:
        self.kubeconfig = kubeconfig
        self.log = log
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "SLURMCTL_METRICS_BIND_ADDRESS": "0",
            "SLURMCTL_HEALTH_PROBE_BIND_ADDRESS": "0",
        }
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [str(SLURMCTL), "run", *self.args], env=env, stdout=out, stderr=subprocess.STDOUT
            )

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: whatever it was in the middle of stops there."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if not self.running():
            return
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


@contextmanager
def operator_process(kubeconfig: Path, log: Path, args: tuple[str, ...] = ()) -> Iterator[OperatorProcess]:
    """An OperatorProcess (`slurmctl run ARGS`) started for the block and stopped after it."""
    operator = OperatorProcess(kubeconfig, log, args)
    operator.start()
    try:
        yield operator
    finally:
        operator.stop()


def database(name: str, password: str, *, restricted: bool = False) -> list[dict[str, Any]]:
    """A MariaDB for accounting (images/test-mariadb, `make images`): its password Secret `<name>-password`, a
    headless Service `<name>` (pod DNS) and a one-pod StatefulSet on a volume claim, so a re-created pod keeps every
    row. A SlurmCluster's spec.accounting.external points at it (host `<name>`, user slurm). `restricted`: the pod
    meets Pod Security "restricted" (no root, no capability) and keeps its data in an emptyDir, which its fsGroup
    makes writable (the test's host-path claims take no fsGroup)."""
    labels = {"app": name}
    container = {
        "name": "mariadb",
        "image": TEST_DB_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "ports": [{"name": "mysql", "containerPort": 3306, "protocol": "TCP"}],
        "volumeMounts": [
            {"name": "data", "mountPath": "/var/lib/mysql"},
            {"name": "password", "mountPath": "/mnt/db-password", "readOnly": True},
        ],
        "readinessProbe": {
            "exec": {"command": ["mariadb-admin", "--protocol=socket", "ping"]},
            "periodSeconds": 2,
            "timeoutSeconds": 5,
        },
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "768Mi"}},
    }
    pod_spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 20,
        "automountServiceAccountToken": False,
        "containers": [container],
        "volumes": [{"name": "password", "secret": {"secretName": f"{name}-password"}}],
    }
    data_claim = {
        "metadata": {"name": "data"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "local-hostpath",
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    if restricted:
        pod_spec["securityContext"] = {
            "runAsNonRoot": True,
            "runAsUser": MYSQL_UID,
            "runAsGroup": MYSQL_UID,
            "fsGroup": MYSQL_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        container["securityContext"] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
        pod_spec["volumes"].append({"name": "data", "emptyDir": {}})
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"{name}-password"},
            "stringData": {"password": password},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name},
            "spec": {
                "clusterIP": "None",
                "selector": labels,
                "ports": [{"name": "mysql", "port": 3306, "targetPort": 3306, "protocol": "TCP"}],
            },
        },
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": name},
            "spec": {
                "serviceName": name,
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": pod_spec},
                "volumeClaimTemplates": [] if restricted else [data_claim],
            },
        },
    ]


def accounting_into(db: str) -> dict[str, Any]:
    """spec.accounting for a SlurmCluster storing into `database(db, ...)`."""
    external = {"host": db, "user": "slurm", "passwordSecretRef": {"name": f"{db}-password", "key": "password"}}
    return {"enabled": True, "external": external}


def ssh_keypair(directory: Path) -> tuple[Path, str]:
    key = directory / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True, timeout=30)
    return key, (directory / "id_ed25519.pub").read_text().strip()


def attempts_script(rows: Sequence[tuple[str, str]]) -> str:
    """A shell script that tries each (attempt, command) row of an escape table, a command exiting 0 only if its
    attempt worked, and prints `ROW|attempt|OPEN or refused|the start of its output` for each."""
    return "".join(
        f"if out=$( ({command}) 2>&1 </dev/null); then r=OPEN; else r=refused; fi; "
        f'printf "ROW|%s|%s|%s\\n" {shlex.quote(attempt)} "$r" "$(printf %s "$out" | head -c 90 | tr "\\n|" "  ")"\n'
        for attempt, command in rows
    )


def attempts_seen(out: str, rows: Sequence[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """(attempt, verdict, output) of each row in what attempts_script printed, checked to be every row, in order."""
    seen = [tuple(line.split("|", 3)[1:]) for line in out.splitlines() if line.startswith("ROW|")]
    assert [row[0] for row in seen] == [attempt for attempt, _ in rows], out
    return [(attempt, verdict, detail.strip()) for attempt, verdict, detail in seen]


def ssh(key: Path, user: str, host: str, command: str, *, timeout: float = 180) -> str:
    """One command over a real ssh connection to the login pod's IP (a bridge address of our own node)."""
    proc = subprocess.run(
        [
            "ssh",
            "-i",
            str(key),
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "ConnectTimeout=10",
            "-o",
            "LogLevel=ERROR",
            f"{user}@{host}",
            command,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(f"ssh {user}@{host} {command!r} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout
