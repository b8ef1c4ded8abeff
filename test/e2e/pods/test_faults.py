"""Faults on the real node, with jobs running through each: nothing the operator does or allows loses a job Slurm
accepted, a job's accounting record or a user's file. This module: pods deleted, evicted and cordoned away, the
operator killed mid-drain, configs re-installed under starting steps; test_faults_restarts.py has the daemons' own
restarts and crashes. Both run side by side, each with its own cluster (test/e2e/pods/faults.py).

One cluster (two workers on the node kept for this module, a login node, slurmrestd, accounting into a test MariaDB) is
shared by the tests of this module, in order; each injects one fault while jobs run, waits for every job to end and
records a row: fault | jobs | completed | requeued by Slurm | lost | files lost. A job Slurm requeues itself (NODE_FAIL
of a pod the user deleted) counts as requeued, not lost, and must then complete. The last test prints the table and
checks every job's record in accounting. The operator runs as `slurmctl run` and is killed (SIGKILL) and started again
by one of the tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from test.e2e.harness import Node
from test.e2e.pods.faults import (
    JAIL,
    POD_ANNOTATIONS,
    POD_LABELS,
    POD_SETTINGS,
    PULL_SECRET,
    USER,
    Cluster,
    assert_nothing_lost,
    bring_up,
    fault_table,
    last_words,
    outcome,
    said,
)
from test.e2e.pods.machine import FAULTS_NODE, FAULTS_TOLERATION
from test.e2e.pods.slurm import Kube, OperatorProcess, pod_ready
from test.waiting import until

pytestmark = pytest.mark.e2e
NAME = "faults"
REST_PODS = f"app.kubernetes.io/instance={NAME},app.kubernetes.io/component=rest"
WORKERS = f"app.kubernetes.io/instance={NAME},app.kubernetes.io/component=workers"
# The cluster admin's bound on how long an eviction waits for jobs: longer than the eviction test's 25 s job, so that
# only the job that never ends meets it.
HOLD = 45
OPERATOR_ARGS = ("--max-eviction-hold", str(HOLD))


@pytest.fixture(scope="module")
def cluster(node: Node, kube: Kube, operator: Path) -> Cluster:
    return bring_up(node, kube, operator, NAME, pinned=True)


def test_the_pinned_workers_run_where_their_group_says_with_its_pod_settings(cluster: Cluster) -> None:
    """A worker group placed by a node label onto a tainted second kubelet it tolerates, with a priority class, the
    cluster's pull secret, a label and an annotation: both workers run there, the API server resolved the class into
    their priority, and the rest is on the pods as given, beside the operator's own labels."""
    selector = f"{WORKERS},slurm.slurmctl.io/worker-group=cpu"

    def both_ready() -> dict[str, dict[str, Any]] | None:
        # Slurm says both are idle (bring_up); the kubelet's readiness probe follows within its period.
        pods = {p["metadata"]["name"]: p for p in cluster.kube.pods(selector)}
        return pods if set(pods) == {cluster.w0, cluster.w1} and all(map(pod_ready, pods.values())) else None

    pods = until(both_ready, timeout=60, what="both pinned workers ready")
    for name, pod in pods.items():
        spec, metadata = pod["spec"], pod["metadata"]
        assert spec["nodeName"] == FAULTS_NODE, name
        assert FAULTS_TOLERATION in spec["tolerations"], name
        assert (spec["priorityClassName"], spec["priority"]) == (POD_SETTINGS["priorityClassName"], 100_000), name
        assert spec["imagePullSecrets"] == [{"name": PULL_SECRET}], name
        assert metadata["labels"].items() >= {**POD_LABELS, "app.kubernetes.io/instance": NAME}.items(), name
        assert metadata["annotations"].items() >= POD_ANNOTATIONS.items(), name


def test_a_burst_of_submissions_then_the_slurmctld_pod_deleted(cluster: Cluster) -> None:
    """20 jobs accepted within a second, then `kubectl delete pod` of slurmctld's: it gets its SIGTERM, saves every
    job, and the new pod knows all of them (and hands out no id twice)."""
    c = cluster
    long = [c.sbatch("--requeue", wrap="sleep 15") for _ in range(2)]
    c.running(*long)
    uid = c.kube.json("pod", c.controller_pod)["metadata"]["uid"]
    with last_words(c.kube, c.controller_pod, "slurmctld", "munge") as words:
        burst = c.as_user(f"for i in $(seq 20); do sbatch --parsable -o /home/{USER}/out/%j.out --wrap true; done")
        c.kube.run("delete", "pod", c.controller_pod, "--wait=false")
    jobs = long + [line.split(";")[0] for line in burst.split()]
    assert len(jobs) == 22
    # slurmctld got its SIGTERM and saved its state; munged stopped only after it.
    saved = said(words["slurmctld"], "Saving all slurm state")
    exited = said(words["slurmctld"], "slurmctld exited (0)")
    assert saved <= exited <= said(words["munge"], "Stopping munge")
    until(lambda: c.ready(c.controller_pod, not_uid=uid), timeout=240, interval=2, what="the new slurmctld pod ready")
    known = c.jobs()
    assert [j for j in jobs if j not in known] == [], "jobs slurmctld forgot"
    after = c.sbatch(wrap="true")
    assert int(after) > max(map(int, jobs)), f"job id {after} handed out again"
    assert_nothing_lost(outcome(c, "slurmctld pod deleted right after 20 submissions", [*jobs, after]))


def test_a_user_deletes_a_busy_worker_pod(cluster: Cluster) -> None:
    """The pod's preStop drains its node, waits a moment for the job, then sets the node DOWN: Slurm requeues the job
    at once and it runs again on the new pod. The other worker's job is untouched."""
    c = cluster
    doomed = c.sbatch("--requeue", "-w", c.w1, wrap="sleep 30")
    bystander = c.sbatch("-w", c.w0, wrap="sleep 20")
    c.running(doomed, bystander)
    with last_words(c.kube, c.w1, "slurmd", "munge") as words:
        c.kube.delete("pod", c.w1)
    # The preStop (drain, set DOWN, leave the node list: munge-signed messages) ran before slurmd's SIGTERM, and the
    # munge sidecar stopped only after slurmd.
    assert said(words["slurmd"], "Caught SIGTERM. Shutting down.") <= said(words["munge"], "Stopping munge")
    reason = c.node(c.w1).get("Reason", "")
    print(f"{c.w1} after its pod went: {c.node(c.w1).get('State')} {reason!r}")
    until(lambda: c.ready(c.w1), timeout=240, interval=2, what=f"{c.w1} re-created")
    row = outcome(c, "a user deletes a busy worker pod", [doomed, bystander])
    assert row.requeued == [doomed], "the job on the deleted pod was not requeued by Slurm"
    assert_nothing_lost(row)


def evict(kube: Kube, pod: str) -> tuple[bool, str]:
    """POST an Eviction (policy/v1beta1: every version this test runs on serves it) for the pod."""
    body = {"apiVersion": "policy/v1beta1", "kind": "Eviction", "metadata": {"name": pod, "namespace": kube.ns}}
    path = f"/api/v1/namespaces/{kube.ns}/pods/{pod}/eviction"
    done = kube.cp.kubectl("create", "--raw", path, "-f", "-", input=json.dumps(body), check=False)
    return done.returncode == 0, done.stdout + done.stderr


def test_an_eviction_waits_for_the_job_and_a_cordon_drains_first(cluster: Cluster) -> None:
    """`kubectl drain` as it works: an Eviction of a busy worker is refused (429) while its job runs; cordoning the
    Kubernetes node drains its workers in Slurm; once the job is done the eviction goes through, and an idle worker's
    too, each node leaving Slurm cleanly; uncordon brings them back and resumes them."""
    c = cluster
    job = c.sbatch("-w", c.w0, wrap="sleep 25")
    c.running(job)
    k8s_node = c.kube.json("pod", c.w0)["spec"]["nodeName"]
    ok, said = evict(c.kube, c.w0)
    assert not ok and "disruption budget" in said, said
    c.kube.cp.kubectl("cordon", k8s_node)
    try:
        until(
            lambda: "cordoned" in c.node(c.w0).get("Reason", "") and "cordoned" in c.node(c.w1).get("Reason", ""),
            timeout=60,
            what="both workers drained in Slurm for the cordon",
        )
        ok, said = evict(c.kube, c.w0)
        assert not ok and "disruption budget" in said, f"a busy worker was evicted: {said}"
        assert c.state(job) == "RUNNING"
        uids = {w: c.kube.json("pod", w)["metadata"]["uid"] for w in (c.w0, c.w1)}
        for worker in (c.w1, c.w0):  # the idle one, then the one whose job ends
            until(lambda w=worker: evict(c.kube, w)[0], timeout=120, interval=2, what=f"{worker} evicted")
        for worker in (c.w0, c.w1):
            until(lambda w=worker: c.node(w) == {}, timeout=60, interval=2, what=f"{worker} gone from Slurm")

            def evicted(w: str = worker) -> bool:
                pod = c.pod(w)
                return pod is None or pod["metadata"]["uid"] != uids[w]

            until(evicted, timeout=120, interval=2, what=f"{worker}'s pod gone")
    finally:
        c.kube.cp.kubectl("uncordon", k8s_node)
    for worker in (c.w0, c.w1):
        until(lambda w=worker: c.ready(w), timeout=240, interval=2, what=f"{worker} back")
        until(lambda w=worker: c.idle(w), timeout=120, interval=2, what=f"{worker} idle, resumed")
    assert_nothing_lost(outcome(c, "eviction of a busy worker (kubectl drain: cordon, evict)", [job]))


def test_a_job_that_never_ends_holds_an_eviction_only_for_the_admin_s_bound_and_is_requeued(cluster: Cluster) -> None:
    """--max-eviction-hold: `kubectl drain` of the node of a worker whose job would run for ever (until the test
    releases it) waits HOLD seconds from the cordon's drain; then the operator sets the worker DOWN (Event
    EvictionHoldExpired), Slurm requeues the job and the eviction goes through. Uncordoned, the worker comes back and
    the job runs again to completion: requeued, not lost."""
    c = cluster
    job = c.held("hold", "-w", c.w0)
    c.running(job)
    pod = c.kube.json("pod", c.w0)
    k8s_node, uid = pod["spec"]["nodeName"], pod["metadata"]["uid"]
    c.kube.cp.kubectl("cordon", k8s_node)
    try:
        until(lambda: "cordoned" in c.node(c.w0).get("Reason", ""), timeout=60, what=f"{c.w0} drained for the cordon")
        drained = time.monotonic()
        ok, said_ = evict(c.kube, c.w0)
        assert not ok and "disruption budget" in said_, f"evicted within the hold: {said_}"
        until(lambda: evict(c.kube, c.w0)[0], timeout=HOLD + 180, interval=2, what=f"{c.w0} evicted after the hold")
        waited = time.monotonic() - drained
        print(f"eviction went through {waited:.0f}s after the cordon's drain (hold {HOLD}s)")
        assert waited >= HOLD - 10, "the eviction did not wait for the hold"
        events = c.kube.run("get", "events", "--field-selector", "reason=EvictionHoldExpired", "-o", "name")
        assert events.strip(), "no EvictionHoldExpired Event"
        until(lambda: (c.pod(c.w0) or {}).get("metadata", {}).get("uid") != uid, timeout=120, what=f"{c.w0} gone")
    finally:
        c.kube.cp.kubectl("uncordon", k8s_node)
    until(lambda: c.ready(c.w0), timeout=240, interval=2, what=f"{c.w0} back")
    until(lambda: len(c.starts("hold")) == 2, timeout=240, interval=2, what=f"job {job} started again")
    c.release("hold")
    row = outcome(c, "kubectl drain of a worker whose job never ends (--max-eviction-hold)", [job])
    assert row.requeued == [job], "the job was not requeued by Slurm"
    assert_nothing_lost(row)


def test_with_slurmrestd_disabled_the_hold_alone_releases_an_eviction_and_the_preStop_requeues_the_job(
    cluster: Cluster,
) -> None:
    """spec.rest.enabled false: the operator cannot ask Slurm whether jobs run, so without a hold a cordon would pin
    every worker. With --max-eviction-hold the pod on the cordoned node becomes evictable after the hold (by the
    operator's clock); the eviction's preStop drains the node, sets it DOWN as the job still runs, and Slurm requeues
    it. slurmrestd enabled again, the job runs again to completion: requeued, not lost."""
    c = cluster
    job = c.held("hold-no-rest", "-w", c.w0)
    c.running(job)
    c.patch({"op": "replace", "path": "/spec/rest/enabled", "value": False})
    until(lambda: not c.kube.pods(REST_PODS), timeout=120, interval=2, what="slurmrestd gone")
    pod = c.kube.json("pod", c.w0)
    k8s_node, uid = pod["spec"]["nodeName"], pod["metadata"]["uid"]
    c.kube.cp.kubectl("cordon", k8s_node)
    try:
        cordoned = time.monotonic()
        ok, said_ = evict(c.kube, c.w0)
        assert not ok and "disruption budget" in said_, f"evicted within the hold: {said_}"
        until(lambda: evict(c.kube, c.w0)[0], timeout=HOLD + 120, interval=2, what=f"{c.w0} evicted after the hold")
        waited = time.monotonic() - cordoned
        print(f"eviction went through {waited:.0f}s after the cordon, Slurm not asked (hold {HOLD}s)")
        assert waited >= HOLD - 5, "the eviction did not wait for the hold"
        until(lambda: (c.pod(c.w0) or {}).get("metadata", {}).get("uid") != uid, timeout=120, what=f"{c.w0} gone")
    finally:
        c.kube.cp.kubectl("uncordon", k8s_node)
        c.patch({"op": "replace", "path": "/spec/rest/enabled", "value": True})
    until(lambda: c.ready(c.w0), timeout=240, interval=2, what=f"{c.w0} back")
    until(lambda: len(c.starts("hold-no-rest")) == 2, timeout=240, interval=2, what=f"job {job} started again")
    until(lambda: any(pod_ready(p) for p in c.kube.pods(REST_PODS)), timeout=180, interval=2, what="slurmrestd back")
    c.release("hold-no-rest")
    row = outcome(c, "kubectl drain of a worker whose job never ends, slurmrestd disabled (--max-eviction-hold)", [job])
    assert row.requeued == [job], "the job was not requeued by Slurm"
    assert_nothing_lost(row)


def test_the_operator_killed_in_the_middle_of_a_drain_and_slurmrestd_deleted_during_the_scale_in(
    cluster: Cluster, operator_process_of_module: OperatorProcess
) -> None:
    """Scale-in 2 -> 1 with a job on the leaving node: the drain starts, the operator is SIGKILLed and started again,
    then slurmrestd's pod is deleted while the node still drains. Nothing goes until Slurm says the job is done.

    The job runs until the test releases it, after the faults (Cluster.held)."""
    c, operator = cluster, operator_process_of_module
    job = c.held("scale-in", "-w", c.w1)
    c.running(job)
    w1 = c.kube.json("pod", c.w1)["metadata"]["uid"]
    c.patch({"op": "replace", "path": "/spec/workers/0/size", "value": 1})
    until(lambda: "scale-in" in c.node(c.w1).get("Reason", ""), timeout=60, interval=1, what=f"{c.w1} draining")
    operator.kill()
    operator.start()
    (rest,) = c.kube.pods(REST_PODS)
    with last_words(c.kube, rest["metadata"]["name"], "slurmrestd") as words:
        c.kube.delete("pod", rest["metadata"]["name"])
    said(words["slurmrestd"], "caught SIGINT. Shutting down.")
    assert c.state(job) == "RUNNING" and c.kube.json("pod", c.w1)["metadata"]["uid"] == w1
    c.release("scale-in")
    row = outcome(c, "operator SIGKILL mid-drain + slurmrestd pod deleted during the scale-in", [job])
    until(lambda: c.pod(c.w1) is None, timeout=120, interval=2, what=f"{c.w1} gone once its job ended")
    assert c.node(c.w1) == {}
    c.patch({"op": "replace", "path": "/spec/workers/0/size", "value": 2})
    until(lambda: c.ready(c.w1), timeout=240, interval=2, what=f"{c.w1} back")
    until(lambda: c.idle(c.w1), timeout=120, interval=2, what=f"{c.w1} idle")
    assert_nothing_lost(row)


@pytest.mark.timeout(600)  # CI (2 cores, the install loop busy on one): 25 steps once took over 300 s
def test_steps_started_while_configs_are_reinstalled_all_run_in_the_jail(cluster: Cluster) -> None:
    """The worker installs its configs again and again (as it does when the ConfigMap changes) while steps start:
    each step reads plugstack.conf at its start, and every one of them finds the chroot plugin there."""
    c = cluster
    c.login("sh", "-c", f"echo jail-of-{c.name} > {JAIL}/etc/slurmctl-fault-marker")
    stop = "/tmp/stop-reinstalling"
    loop = (
        f". /usr/lib/slurmctl/lib.sh; n=0; until [ -e {stop} ] || [ $n -ge 5000 ]; do install_slurm_configs;"
        " n=$((n+1)); done"
    )
    reinstall = subprocess.Popen(
        ["kubectl", "-n", c.kube.ns, "exec", c.w0, "-c", "slurmd", "--", "bash", "-c", f"{loop} 2>/dev/null; echo $n"],
        env={**os.environ, "KUBECONFIG": str(c.kube.cp.kubeconfig)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        out = c.as_user(
            "for i in $(seq 25); do srun -w " + c.w0 + " -J reinstall cat /etc/slurmctl-fault-marker || echo FAILED;"
            " done",
            timeout=540,
        )
    finally:
        c.kube.exec(c.w0, "slurmd", "touch", stop)
        installs, _ = reinstall.communicate(timeout=60)
        c.kube.exec(c.w0, "slurmd", "rm", "-f", stop)
    print(f"25 steps started while the worker installed its configs {installs.strip()} times")
    assert out.split() == [f"jail-of-{c.name}"] * 25, out
    jobs = [j for j, f in c.jobs().items() if f.get("JobName") == "reinstall"]
    assert len(jobs) == 25
    assert_nothing_lost(outcome(c, "configs re-installed while 25 steps start", jobs))


def test_the_fault_table(cluster: Cluster) -> None:
    fault_table(cluster, rows=7)
