"""On-demand nodes on real pods: submit → RUNNING on a scaled-to-zero elastic group against the same job on an
already-running fixed-size group (the baseline), same run; job end → pods gone; and over an idle window of each
cluster, the operator's CPU and its requests to slurmrestd (its own counter slurmctl_slurmrestd_requests_total).

Like the pods tests it starts a control plane and a node of its own (hack/control-plane.sh, hack/node.sh), needs the
images (`make images`), runs `slurmctl run` as the pods tests do (their ServiceAccount's token, watching the bench's
namespace, root's jobs allowed), and stops what it started. The fixed cluster (2 workers) goes first, then the elastic
one (max 2, idleTime 30s); each job is `sbatch -N2` of `srun -N2 hostname`. About 12 minutes on 2 cores.
"""

from __future__ import annotations

import statistics
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families
from test.e2e.harness import REPO, Node, control_plane_script, free_port, node_script
from test.e2e.operator import e2e_operator_kubeconfig
from test.e2e.pods.machine import wait_for_other_test_sessions
from test.e2e.pods.slurm import Kube, OperatorProcess, small_cluster
from test.waiting import until

from bench import goal

RUNS = 3
IDLE_WINDOW = 90.0
IDLE_TIME = 30
SMALL = {"requests": {"cpu": "300m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}}
NAMESPACE = "bench-elastic"


@contextmanager
def cluster_node() -> Iterator[Node]:
    with tempfile.TemporaryDirectory(prefix="bench-elastic-") as tmp:
        state = Path(tmp)
        node = Node(kubeconfig=state / "kubeconfig", state_dir=state)
        wait_for_other_test_sessions(timeout=1800)  # one node per machine: the pods tests' sessions go first
        try:
            for script, name in ((control_plane_script, "control plane"), (node_script, "node")):
                up = script("up", state)
                if up.returncode != 0:
                    raise RuntimeError(f"{name} did not come up: {up.stderr[-2000:]}")
            yield node
        finally:
            node_script("down", state)
            control_plane_script("down", state)


@contextmanager
def operator(node: Node, work: Path, metrics: str) -> Iterator[OperatorProcess]:
    manifests = node.kubectl("kustomize", str(REPO / "config" / "default")).stdout
    docs = [d for d in yaml.safe_load_all(manifests) if d and d.get("kind") != "Deployment"]
    node.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(docs))
    node.kubectl("wait", "--for=condition=Established", "crd/slurmclusters.slurm.slurmctl.io", "--timeout=60s")
    # The pods tests' operator: the e2e ServiceAccount with the operator's rules in every namespace, watching the
    # bench's (config/default's own Role is in `default` only).
    kubeconfig = e2e_operator_kubeconfig(node, work / "kubeconfig")
    args = ("--metrics-bind-address", metrics, "--watch-namespace", NAMESPACE, "--allow-root-jobs")
    node.kubectl("create", "namespace", NAMESPACE)  # before the operator, which watches it
    proc = OperatorProcess(kubeconfig, work / "operator.log", args)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def requests_total(metrics: str, cluster: str) -> float:
    with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "slurmctl_slurmrestd_requests_total" and sample.labels.get("cluster") == cluster:
                total += sample.value
    return total


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / 100.0  # utime + stime, in clock ticks (USER_HZ 100)


def idle_window(proc: OperatorProcess, metrics: str, cluster: str) -> tuple[float, float]:
    """(slurmrestd requests per minute, operator CPU %) over IDLE_WINDOW seconds of an idle cluster."""
    assert proc.proc is not None
    r0, c0, t0 = requests_total(metrics, cluster), cpu_seconds(proc.proc.pid), time.monotonic()
    time.sleep(IDLE_WINDOW)  # a measuring window, not a wait for a condition
    r1, c1, t1 = requests_total(metrics, cluster), cpu_seconds(proc.proc.pid), time.monotonic()
    return (r1 - r0) * 60 / (t1 - t0), 100 * (c1 - c0) / (t1 - t0)


def sinfo(kube: Kube, login: str) -> dict[str, str]:
    out = kube.exec(login, "sshd", "sinfo", "-h", "-N", "-o", "%N %t")
    return dict(line.split() for line in out.splitlines() if line.strip())


def all_idle(kube: Kube, login: str, state: str) -> bool:
    """Every node of the cluster in `state` (idle, or idle~: powered down)."""
    nodes = sinfo(kube, login)
    return bool(nodes) and set(nodes.values()) == {state}


def job_state(kube: Kube, login: str, job_id: str) -> str:
    out = kube.exec(login, "sshd", "scontrol", "show", "job", "-o", job_id)
    return dict(kv.split("=", 1) for kv in out.split() if "=" in kv)["JobState"]


def one_job(kube: Kube, login: str) -> tuple[float, float]:
    """(submit → RUNNING, submit → end) of `sbatch -N2` running `srun -N2 hostname`, in seconds."""
    submitted = time.monotonic()
    out = kube.exec(login, "sshd", "sbatch", "--parsable", "-o", "/dev/null", "-N2", "--wrap", "srun -N2 hostname")
    job_id = out.strip().split(";")[0]
    # CONFIGURING (nodes powering up) is not running yet: the job's processes start with RUNNING.
    started = ("RUNNING", "COMPLETING", "COMPLETED")
    until(lambda: job_state(kube, login, job_id) in started or None, timeout=600, interval=0.5, what="running")
    running = time.monotonic() - submitted
    until(lambda: job_state(kube, login, job_id) == "COMPLETED" or None, timeout=300, interval=0.5, what="done")
    return running, time.monotonic() - submitted


def worker_pods(kube: Kube, cluster: str) -> list[Any]:
    return kube.pods(f"app.kubernetes.io/instance={cluster},app.kubernetes.io/component=workers")


def run() -> Iterator[tuple[str, float, str]]:
    metrics = f"127.0.0.1:{free_port()}"
    with (
        tempfile.TemporaryDirectory(prefix="bench-elastic-op-") as work,
        cluster_node() as node,
        operator(node, Path(work), metrics) as proc,
    ):
        kube = Kube(node, NAMESPACE)
        # The baseline: a fixed-size group of 2, already running.
        fixed = small_cluster("fixed")
        fixed[1]["spec"]["workers"][0].update(size=2, resources=SMALL)
        kube.apply(fixed)
        kube.until_available("fixed", proc.log, timeout=900)
        until(
            lambda: list(sinfo(kube, "fixed-login-0").values()) == ["idle", "idle"] or None,
            timeout=180,
            what="idle",
        )
        fixed_requests, fixed_cpu = idle_window(proc, metrics, "fixed")
        warm = [one_job(kube, "fixed-login-0")[0] for _ in range(RUNS)]
        kube.delete("slurmcluster", "fixed", timeout=300)
        until(lambda: not worker_pods(kube, "fixed") or None, timeout=300, what="the fixed cluster's pods gone")
        # The same job on an elastic group scaled to zero.
        elastic = small_cluster("elastic")
        autoscale = {"min": 0, "max": 2, "idleTime": f"{IDLE_TIME}s"}
        elastic[1]["spec"]["workers"][0].update(resources=SMALL, autoscale=autoscale)
        kube.apply(elastic)
        kube.until_available("elastic", proc.log, timeout=900)
        cold: list[float] = []
        gone: list[float] = []
        for _ in range(RUNS):
            until(lambda: all_idle(kube, "elastic-login-0", "idle~"), timeout=300, what="both nodes powered down")
            to_running, _ = one_job(kube, "elastic-login-0")
            ended = time.monotonic()
            cold.append(to_running)
            until(lambda: not worker_pods(kube, "elastic") or None, timeout=300, what="the elastic pods gone")
            gone.append(time.monotonic() - ended)
        elastic_requests, elastic_cpu = idle_window(proc, metrics, "elastic")
        kube.delete("slurmcluster", "elastic", timeout=300)
    baseline = f"already-running fixed group p50 {statistics.median(warm):.1f} s"
    yield "elastic_submit_to_running_from_zero_p50", statistics.median(cold), goal("s", baseline)
    yield "elastic_submit_to_running_from_zero_max", max(cold), goal("s", f"{RUNS} runs")
    yield "fixed_submit_to_running_p50", statistics.median(warm), "s | the baseline: the same job on running nodes"
    yield (
        "elastic_job_end_to_pods_gone_p50",
        statistics.median(gone),
        goal("s", f"idleTime {IDLE_TIME}s + the pod's end"),
    )
    yield (
        "elastic_idle_slurmrestd_requests_per_min",
        elastic_requests,
        f"req/min | fixed-size cluster {fixed_requests:.1f} req/min",
    )
    yield "elastic_idle_operator_cpu", elastic_cpu, f"% of a core | fixed-size cluster {fixed_cpu:.2f} %"
