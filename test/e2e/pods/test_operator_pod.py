"""The operator installed the way users install it and running as pods: `helm install slurmctl charts/slurmctl` with
default values into `slurmctl-system`, labelled Pod Security `restricted` first (the chart's defaults render
config/default's objects: test/e2e/test_helm_chart.py), so the locally built operator image with its restricted
security context, its ServiceAccount's token, leader election, two replicas and the metrics Service (not the
ServiceMonitor: there is no Prometheus Operator here). Every other pods module runs the operator as `slurmctl run` on
the host, which is faster to start and to kill; this one proves the install users run.

The pods reach the API server through the `kubernetes` Service's ClusterIP (the in-cluster config) and slurmrestd by
pod IP; the metrics Service is read through its ClusterIP from a client pod. hack/node.sh routes ClusterIPs as
kube-proxy would (DNAT rules kept by hack/dns_watcher.py). One SlurmCluster, the minimal sample, shared by the tests
in order: both replicas Ready and one holds the Lease → the sample becomes Available → /metrics through the Service →
the leader pod deleted while the sample is scaled in: another replica takes the Lease (the standby, or the
replacement pod when it starts first) and the StatefulSet follows the edit → `helm upgrade` changing a value while a
job runs: both replicas replaced, the job COMPLETED and never requeued → no traceback in any replica's log → `helm
uninstall`: the operator goes, the SlurmCluster, its pods and the jail's data stay. Figures (install → Ready, sample →
Available, failover, upgrade) are printed (pytest -s).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml

from test import timing
from test.e2e.harness import CHART, REPO, Helm, Node
from test.e2e.pods.conftest import SLURM_IMAGES, require_images
from test.e2e.pods.machine import TEST_IMAGE
from test.e2e.pods.slurm import Kube, pod_ready
from test.waiting import until

pytestmark = pytest.mark.e2e  # and `alone` (test/conftest.py ALONE)
NAMESPACE = "slurmctl-system"
DEPLOYMENT = "slurmctl-operator"
RELEASE = "slurmctl"
METRICS_SERVICE = "slurmctl-operator-metrics"
LEASE = "slurmctl.slurm.slurmctl.io"
SELECTOR = "app.kubernetes.io/name=slurmctl,app.kubernetes.io/component=operator"
REPLICAS = 2
SAMPLE = REPO / "config" / "samples" / "slurmcluster_minimal.yaml"
NAME = "minimal"
WORKERS_STS = f"{NAME}-worker-cpu"
LOGIN_POD, LOGIN = f"{NAME}-login-0", "sshd"
JAIL, JAIL_CLAIM = "/mnt/jail", f"{NAME}-jail"
CLIENT = "metrics-client"
TRIES = 16
END = "--end-of-answer--"
SERVICE_CHAIN = "SLURMCTL-SVC-slurmctl0"  # hack/node.sh's nat chain for ClusterIPs


ROOT_JOBS = ("--set", "policy.allowRootJobs=true")


def kustomize(node: Node, directory: str) -> list[dict[str, Any]]:
    out = node.kubectl("kustomize", str(REPO / "config" / directory)).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def install(node: Node, helm: Helm, watched: str) -> str:
    """The release namespace as config/default makes it (labelled restricted: the chart does not own its namespace),
    then `helm install` with default values but the namespace to watch (`watchNamespaces`: the operator gets a Role
    there and nothing in any other namespace) and ROOT_JOBS; the operator image it runs. `--take-ownership`: the other
    pods modules applied config/default's CRD, RBAC and ServiceAccount before this one (the same objects), which Helm
    adopts; on a cluster without them it changes nothing. The image and pull policy stay as the chart has them: the
    tag was imported by `make images` and `IfNotPresent` never pulls a tag the node has."""
    (namespace,) = [d for d in kustomize(node, "default") if d["kind"] == "Namespace"]
    node.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(namespace))
    values = ("--set", f"watchNamespaces={{{watched}}}")
    rendered = [
        d for d in yaml.safe_load_all(helm.check("template", RELEASE, str(CHART), "-n", NAMESPACE, *values)) if d
    ]
    (deployment,) = [d for d in rendered if d["kind"] == "Deployment"]
    assert deployment["spec"]["replicas"] == REPLICAS, "the chart runs two replicas, with leader election"
    assert [d["metadata"]["name"] for d in rendered if d["kind"] == "Service"] == [METRICS_SERVICE]
    assert {
        (d["kind"], d["metadata"].get("namespace"))
        for d in rendered
        if d["kind"] in ("Role", "ClusterRole") and d["metadata"]["name"] == "slurmctl-operator"
    } == {("Role", watched)}
    # The test's job is root's (`kubectl exec` into the login container): the install opts in (policy.allowRootJobs),
    # as an admin whose users may run jobs as root would.
    helm.check("install", RELEASE, str(CHART), "-n", NAMESPACE, "--take-ownership", *values, *ROOT_JOBS)
    image: str = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    return image


@dataclass
class OperatorPods:
    """The operator's pods in slurmctl-system: who they are, who leads, and what each said. A pod's log is followed
    (`kubectl logs -f`) from when the pod is first seen, so a deleted pod's last words are kept."""

    node: Node
    followed: dict[str, subprocess.Popen[str]] = field(default_factory=dict)
    said: dict[str, str] = field(default_factory=dict)

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.node.kubectl("-n", NAMESPACE, *args, check=check)

    def pods(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = json.loads(self.kubectl("get", "pods", "-l", SELECTOR, "-o", "json").stdout)[
            "items"
        ]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    def ready(self) -> list[str]:
        names = sorted(p["metadata"]["name"] for p in self.pods() if pod_ready(p))
        for name in names:
            self.follow(name)
        return names

    def follow(self, pod: str) -> None:
        if pod in self.followed:
            return
        env = {**os.environ, "KUBECONFIG": str(self.node.kubeconfig)}
        self.followed[pod] = subprocess.Popen(
            ["kubectl", "-n", NAMESPACE, "logs", "-f", pod, "-c", "operator"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def holder(self) -> str:
        """The pod holding the Lease (its identity is `<hostname>_<random>`, the hostname the pod's name)."""
        found = self.kubectl("get", "lease", LEASE, "-o", "jsonpath={.spec.holderIdentity}", check=False)
        return found.stdout.rpartition("_")[0] if found.returncode == 0 else ""

    def collect(self, pod: str, timeout: float = 60) -> str:
        """Everything the pod's operator said (the follower ends when the container does)."""
        proc = self.followed.pop(pod, None)
        if proc is not None:
            try:
                out, _ = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate(timeout=10)
            self.said[pod] = out
        return self.said.get(pod, "")

    def logs(self) -> dict[str, str]:
        """Every replica's log: those that ended as collected, the live ones as `kubectl logs` has them now."""
        logs = dict(self.said)
        for pod in self.pods():
            name = pod["metadata"]["name"]
            if name not in logs:
                logs[name] = self.kubectl("logs", name, "-c", "operator", check=False).stdout
        return logs

    def report(self, tail: int = 40) -> str:
        """For an assertion message: the pods, the Lease holder, and the last lines of every replica's log."""
        out = [self.kubectl("get", "pods", "-o", "wide", check=False).stdout, f"lease holder: {self.holder()!r}"]
        for pod, text in self.logs().items():
            out.append(f"--- {pod}, last lines\n" + "\n".join(text.splitlines()[-tail:]))
        return "\n".join(out)

    def stop_following(self) -> None:
        for proc in self.followed.values():
            proc.kill()
            proc.communicate(timeout=10)
        self.followed.clear()


@pytest.fixture(scope="module")
def helm(node: Node, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm.at(tmp_path_factory.mktemp("helm"), node.kubeconfig)


@pytest.fixture(scope="module")
def watched(node: Node) -> str:
    """The module's namespace, made before the install (the chart's Role goes there); `kube` deletes it."""
    ns = f"slurm-{uuid.uuid4().hex[:6]}"
    node.kubectl("create", "namespace", ns)
    return ns


@pytest.fixture(scope="module")
def operator_pods(node: Node, helm: Helm, watched: str) -> Iterator[OperatorPods]:
    """The Helm install with two replicas, both Ready; uninstalled at the end (by the last test, or here), waited for
    (a later module runs the operator on the host, which must not find a second one reconciling)."""
    ops = OperatorPods(node)
    t0 = time.monotonic()
    image = install(node, helm, watched)
    require_images(node, [*SLURM_IMAGES, image, TEST_IMAGE])
    try:
        until(
            lambda: len(ops.ready()) == REPLICAS and ops.holder() in ops.ready(),
            timeout=180,
            interval=1,
            what=f"{REPLICAS} operator pods Ready, one holding the Lease",
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{ops.report()}") from None
    print(f"\nhelm install → {REPLICAS} operator pods Ready, one leading: {time.monotonic() - t0:.1f}s")
    yield ops
    ops.stop_following()
    if RELEASE in helm.check("list", "-n", NAMESPACE, "-q").split():
        helm.check("uninstall", RELEASE, "-n", NAMESPACE)
    until(
        lambda: not ops.kubectl("get", "pods", "-l", SELECTOR, "-o", "name").stdout.strip(),
        timeout=90,
        what="operator pods gone",
    )
    node.kubectl("-n", NAMESPACE, "delete", "lease", LEASE, check=False)


@pytest.fixture(scope="module")
def kube(node: Node, watched: str, operator_pods: OperatorPods) -> Iterator[Kube]:
    """The module's namespace (deleted while the operator pods still run, waited for)."""
    ns = watched
    kube = Kube(node, ns)
    yield kube
    node.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    try:
        until(lambda: node.kubectl("get", "namespace", ns, check=False).returncode != 0, timeout=180, what=ns)
    except AssertionError as exc:
        print(f"namespace {ns} not deleted yet: {exc}")


def status(kube: Kube) -> dict[str, Any]:
    found: dict[str, Any] = kube.json("slurmcluster", NAME).get("status", {})
    return found


def available(kube: Kube, workers: str, ops: OperatorPods, *, timeout: float, idle: int | None = None) -> float:
    """Seconds until the sample is Available with `workers` ready/desired (and, given `idle`, Slurm's node list as the
    operator last read it from slurmrestd: that many nodes, all idle); on timeout what explains why. The wait is
    charged to the module's "to Available" (test.timing), on timeout too."""
    t0 = time.monotonic()

    def done() -> bool:
        s = status(kube)
        nodes = s.get("slurmNodes") or {}
        slurm = idle is None or (nodes.get("total"), nodes.get("idle")) == (idle, idle)
        return s.get("phase") == "Available" and s.get("workersReady") == workers and slurm

    try:
        until(done, timeout=timeout, interval=0.5, what=f"{NAME} Available with workers {workers}, {idle} idle")
    except AssertionError as exc:
        timing.record_available(time.monotonic() - t0)
        pods = kube.run("get", "pods,jobs,pvc", "-o", "wide", check=False)
        raise AssertionError(f"{exc}\nstatus: {status(kube)}\n{pods}\n{ops.report()}") from None
    seconds = time.monotonic() - t0
    timing.record_available(seconds)
    return seconds


def test_both_replicas_run_restricted_and_one_holds_the_lease(operator_pods: OperatorPods) -> None:
    ready = operator_pods.ready()
    assert operator_pods.holder() in ready, operator_pods.report()
    for pod in ready:
        # As config/manager says: uid 65532, read-only root filesystem, the ServiceAccount's token mounted.
        probe = "id -u; touch /probe 2>&1; ls /var/run/secrets/kubernetes.io/serviceaccount/"
        out = operator_pods.kubectl("exec", pod, "-c", "operator", "--", "sh", "-c", probe, check=False).stdout
        assert out.splitlines()[0] == "65532" and "Read-only file system" in out and "token" in out, out
    env = operator_pods.kubectl("exec", ready[0], "-c", "operator", "--", "env").stdout
    # The in-cluster config connects to this address: the `kubernetes` Service's ClusterIP.
    assert "KUBERNETES_SERVICE_HOST=10.96.0.1" in env, env


def test_the_sample_becomes_available(kube: Kube, operator_pods: OperatorPods) -> None:
    kube.apply_file(SAMPLE)
    seconds = available(kube, "2/2", operator_pods, timeout=600)
    print(f"\nminimal sample applied → Available (2/2 workers), operator as pods: {seconds:.1f}s")
    leader = operator_pods.holder()
    logs = operator_pods.logs()
    assert "became leader" in logs[leader], operator_pods.report()
    standby = [p for p in operator_pods.ready() if p != leader]
    assert standby and all("became leader" not in logs[p] for p in standby), operator_pods.report()


def test_metrics_through_the_metrics_service(kube: Kube, operator_pods: OperatorPods) -> None:
    """From a client pod, to the Service's ClusterIP: the node routes it to one of the replicas at random; the
    leader's answer carries Slurm's metrics of the sample, read from its slurmrestd."""
    service = json.loads(operator_pods.kubectl("get", "service", METRICS_SERVICE, "-o", "json").stdout)
    cluster_ip, port = service["spec"]["clusterIP"], service["spec"]["ports"][0]["port"]
    assert re.fullmatch(r"10\.96\.\d+\.\d+", cluster_ip), service["spec"]
    client = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": CLIENT},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "c",
                    "image": TEST_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"],
                }
            ],
        },
    }
    kube.apply([client])
    until(lambda: pod_ready(kube.json("pod", CLIENT)), timeout=60, what=f"pod {CLIENT} Ready")
    url = f"http://{cluster_ip}:{port}/metrics"
    # HTTP/1.0 by hand (busybox-static's wget crashes on Debian 12), TRIES connections in one exec: each is a new
    # connection, which the node sends to either replica at random (both are Ready endpoints).
    request = f"printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' | nc -w 5 {cluster_ip} {port}; echo {END}"
    status = f'leader_election_master_status{{name="{LEASE}"}}'
    slurm_up = f'slurm_up{{cluster="{NAME}",namespace="{kube.ns}"}} 1.0'  # labels in name order, as exposed
    answers: list[str] = []

    def leader_told_slurm_up() -> bool:
        """Another TRIES connections; true once the leader's answer has Slurm's metrics of the sample (its node loop
        reads slurmrestd every 15 s, so the first read may still be coming)."""
        out = kube.exec(CLIENT, "c", "sh", "-c", f"for i in $(seq {TRIES}); do {request}; done", timeout=120)
        answers.extend(a.strip() for a in out.split(END)[:-1])
        return any(slurm_up in a.splitlines() for a in answers if f"{status} 1.0" in a)

    def routing() -> str:
        endpoints = operator_pods.kubectl("get", "endpoints", METRICS_SERVICE, "-o", "yaml", check=False).stdout
        chain = subprocess.run(
            ["iptables", "-t", "nat", "-S", SERVICE_CHAIN], check=False, capture_output=True, text=True
        )
        return f"{endpoints}\n{chain.stdout}{chain.stderr}\n{operator_pods.report()}"

    def counts() -> dict[str, int]:
        return {role: sum(f"{status} {v}" in a for a in answers) for role, v in (("leader", "1.0"), ("standby", "0.0"))}

    try:
        until(leader_told_slurm_up, timeout=60, interval=1, what=f"{slurm_up} in the leader's answer")
    except AssertionError as exc:
        last = answers[-1][-2000:] if answers else ""
        raise AssertionError(f"{exc}\nanswers {counts()} of {len(answers)}, the last:\n{last}\n{routing()}") from None
    print(f"\n/metrics through Service {cluster_ip}:{port} from a pod: {counts()} answers of {len(answers)}")
    ok = [a for a in answers if a.startswith("HTTP/1.") and " 200 " in a.splitlines()[0]]
    assert len(ok) == len(answers), "\n---\n".join(a[:300] for a in answers) + routing()
    found = counts()
    assert found["leader"] and found["standby"] and sum(found.values()) == len(answers), f"{found}\n{routing()}"
    assert all("controller_runtime_reconcile_total" in a for a in answers), answers[0][-3000:]
    # The node itself reaches it too (its nat OUTPUT chain), as a hostNetwork scraper would.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=10) as answer:
        assert status in answer.read().decode()


def test_the_leader_pod_deleted_the_other_replica_takes_over_and_the_cluster_converges(
    kube: Kube, operator_pods: OperatorPods
) -> None:
    leader = operator_pods.holder()
    others = [p for p in operator_pods.ready() if p != leader]
    assert leader and others, operator_pods.report()
    t0 = time.monotonic()
    operator_pods.kubectl("delete", "pod", leader, "--wait=false")
    # A spec edit only the next leader can carry out: scale the sample in (the drain goes through slurmrestd).
    scale_in = [{"op": "replace", "path": "/spec/workers/0/size", "value": 1}]
    kube.run("patch", "slurmcluster", NAME, "--type=json", "-p", json.dumps(scale_in))
    try:
        # The deleted leader releases the Lease on SIGTERM; candidates poll every retry period (2 s), so the standby
        # takes it, or the ReplicaSet's replacement when it starts within that window: either is a new leader.
        until(lambda: operator_pods.holder() not in ("", leader), timeout=60, interval=0.2, what="another leader")
        took_lease = time.monotonic() - t0
        until(
            lambda: kube.json("statefulset", WORKERS_STS)["spec"]["replicas"] == 1,
            timeout=90,
            interval=0.5,
            what=f"StatefulSet {WORKERS_STS} scaled to 1",
        )
        sts = time.monotonic() - t0
    except AssertionError as exc:
        operator_pods.collect(leader, timeout=5)
        raise AssertionError(f"{exc}\n{operator_pods.report()}") from None
    converged = sts + available(kube, "1/1", operator_pods, timeout=180, idle=1)
    last_words = operator_pods.collect(leader)
    successor = operator_pods.holder()
    role = "the standby" if successor in others else "the replacement pod"
    print(
        f"\nleader pod {leader} deleted → {successor} ({role}) holds the Lease: {took_lease:.1f}s, "
        f"the scale-in reached StatefulSet {WORKERS_STS}: {sts:.1f}s, Available with 1/1 worker and Slurm's one node "
        f"idle: {converged:.1f}s"
    )
    # A clean shutdown gives the Lease up, so the successor need not wait for it to expire (15 s).
    assert "released leadership" in last_words, last_words[-3000:]
    until(lambda: len(operator_pods.ready()) == REPLICAS, timeout=120, what="the replacement replica Ready")


def job(kube: Kube, job_id: str) -> dict[str, str]:
    """slurmctld's record of a job (`scontrol show job -o`), as seen from the login node."""
    shown = kube.exec(LOGIN_POD, LOGIN, "scontrol", "-o", "show", "job", job_id)
    return dict(f.split("=", 1) for f in shown.split() if "=" in f)


def test_a_helm_upgrade_while_a_job_runs_replaces_both_replicas_and_the_job_completes_untouched(
    kube: Kube, operator_pods: OperatorPods, helm: Helm
) -> None:
    """A changed value (the log level) rolls the operator's Deployment: both replicas are replaced one after the other,
    leadership moves with them, and the running job neither notices nor is requeued."""
    submitted = kube.exec(LOGIN_POD, LOGIN, "sbatch", "--parsable", "-o", "/dev/null", "--wrap", "sleep 40")
    job_id = submitted.strip().split(";")[0]
    until(lambda: job(kube, job_id).get("JobState") == "RUNNING", timeout=60, what=f"job {job_id} RUNNING")
    before = set(operator_pods.ready())
    t0 = time.monotonic()
    helm.check("upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "--reuse-values", "--set", "logLevel=debug")

    def replaced() -> bool:
        ready = operator_pods.ready()
        return len(ready) == REPLICAS and not before & set(ready) and operator_pods.holder() in ready

    try:
        until(replaced, timeout=240, interval=1, what=f"{REPLICAS} new operator pods Ready, one leading")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{operator_pods.report()}") from None
    rolled = time.monotonic() - t0
    for pod in before:
        operator_pods.collect(pod)  # their whole logs, for the traceback check
    deployment = json.loads(operator_pods.kubectl("get", "deployment", DEPLOYMENT, "-o", "json").stdout)
    assert "--log-level=debug" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    until(lambda: job(kube, job_id).get("JobState") == "COMPLETED", timeout=120, what=f"job {job_id} COMPLETED")
    record = job(kube, job_id)
    assert (record["Restarts"], record["ExitCode"]) == ("0", "0:0"), record
    print(
        f"\nhelm upgrade (logLevel=debug) → both replicas replaced, one leading: {rolled:.1f}s; job {job_id} untouched"
    )
    available(kube, "1/1", operator_pods, timeout=120, idle=1)


def test_no_replica_logged_a_traceback(operator_pods: OperatorPods) -> None:
    logs = operator_pods.logs()
    assert len(logs) > REPLICAS, f"the deleted leader's log is missing: {sorted(logs)}"
    bad = {pod: text for pod, text in logs.items() if "Traceback" in text}
    assert not bad, "\n".join(f"--- {pod}\n{text[-4000:]}" for pod, text in bad.items())


def test_helm_uninstall_leaves_the_cluster_its_pods_and_the_jail_data(
    kube: Kube, operator_pods: OperatorPods, helm: Helm
) -> None:
    """The CRD is kept (helm.sh/resource-policy: keep), so the SlurmCluster and everything it owns stay: the same pods,
    still Ready, Slurm still answering, the jail's files where they were. Only the operator goes."""
    marker = f"{JAIL}/srv/kept-through-helm-uninstall"
    kube.exec(LOGIN_POD, LOGIN, "sh", "-c", f"mkdir -p {JAIL}/srv && echo kept > {marker}")
    cluster_uid = kube.json("slurmcluster", NAME)["metadata"]["uid"]
    pods = {p["metadata"]["name"]: p["metadata"]["uid"] for p in kube.json("pods")["items"] if pod_ready(p)}
    claim = kube.json("pvc", JAIL_CLAIM)["metadata"]["uid"]
    helm.check("uninstall", RELEASE, "-n", NAMESPACE)
    until(lambda: not operator_pods.pods(), timeout=90, what="operator pods gone")
    assert node_has_crd(kube), "the CRD is kept"
    assert kube.json("slurmcluster", NAME)["metadata"]["uid"] == cluster_uid
    now = {p["metadata"]["name"]: p["metadata"]["uid"] for p in kube.json("pods")["items"] if pod_ready(p)}
    assert now == pods, "the same pods, still Ready"
    assert kube.json("pvc", JAIL_CLAIM)["metadata"]["uid"] == claim
    assert kube.exec(LOGIN_POD, LOGIN, "cat", marker).strip() == "kept"
    assert "idle" in kube.exec(LOGIN_POD, LOGIN, "sinfo", "-h", "-o", "%T"), "Slurm answers without the operator"


def node_has_crd(kube: Kube) -> bool:
    return kube.cp.kubectl("get", "crd", "slurmclusters.slurm.slurmctl.io", check=False).returncode == 0
