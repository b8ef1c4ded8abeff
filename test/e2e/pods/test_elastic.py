"""Elastic worker groups on real pods: worker pods exist only while Slurm has work for them (spec.workers[].autoscale).

One cluster, shared by the tests in order: a group `cpu` with min 0 and max 3 (idleTime 30s) starts with no worker pod
and Slurm knows its three nodes powered down → `sbatch -N2` powers two up, the operator creates their pods, the job
runs (its nodes' names resolving to their pods); once idle for idleTime Slurm powers them down and their pods go
(twice: a powered-down node comes back), Slurm's ResumeProgram having told the operator which nodes it powered up
(the `<c>-power` ConfigMap) → a job needing more nodes than the group has is refused by Slurm at
submission and creates no pod → `max` lowered under a running job, then the group switched to fixed and back under a
running job each way: the jobs complete, their nodes leave only after them → a group `big` whose pod can never be
placed (it asks for 64 CPUs): the cluster's WorkersReady names the group and the scheduler's reason, after its
resumeTimeout Slurm sets the node DOWN, the pod goes, and the job is requeued, not lost; the cause fixed, the operator
resumes the node after its backoff and the job runs → that node, idle, gets a new template: the operator has Slurm
power it down (POWER_DOWN_ASAP) → a sub-mount a symlink in the jail would lead onto /etc is refused: the login pod and
a new elastic pod start all the same, the node drained naming it. The operator runs as `slurmctl run`. Figures
(submit → RUNNING from zero, job end → pods gone) are printed (pytest -s).
"""

from __future__ import annotations

import json
import shlex
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from test.e2e.pods.slurm import Kube, pod_ready, small_cluster
from test.waiting import holds, until

pytestmark = pytest.mark.e2e
NAME = "elastic"
# --allow-root-jobs: the jobs here are root's (sbatch through `kubectl exec` into the login container).
OPERATOR_ARGS = ("--allow-root-jobs",)
LOGIN_POD, LOGIN = f"{NAME}-login-0", "sshd"
WORKERS = f"app.kubernetes.io/instance={NAME},app.kubernetes.io/component=workers"
CPU = [f"{NAME}-worker-cpu-{i}" for i in range(3)]
BIG = f"{NAME}-worker-big-0"
IDLE_TIME = 30
SMALL = {"requests": {"cpu": "300m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}}
# A job step on each powered-up node: every node of the job resolves, in the jail, to the address Slurm uses for it
# (else the job FAILS). Elastic pods are the operator's own, not a StatefulSet's: their names must resolve all the same.
NAMES_RESOLVE = (
    'for n in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do a=$(getent hosts "$n" | cut -d" " -f1); '
    'scontrol show node "$n" | grep -q "NodeAddr=$a " || exit 1; done'
)


@pytest.fixture(scope="module")
def elastic(kube: Kube, operator: Path) -> Kube:
    objects = small_cluster(NAME)
    objects[1]["spec"]["workers"] = [
        {"name": "cpu", "resources": SMALL, "autoscale": {"min": 0, "max": 3, "idleTime": f"{IDLE_TIME}s"}},
        {
            "name": "big",
            "resources": {"requests": {"cpu": "64", "memory": "512Mi"}, "limits": {"memory": "1Gi"}},
            "autoscale": {"max": 1, "resumeTimeout": "30s"},
        },
    ]
    kube.apply(objects)
    kube.until_available(NAME, operator, timeout=900)
    return kube


def worker_pods(kube: Kube) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in kube.pods(WORKERS)}


def sinfo(kube: Kube) -> dict[str, str]:
    """node -> Slurm's short state with its suffix (idle~: powered down, idle#: powering up, down~, alloc, ...)."""
    out = kube.exec(LOGIN_POD, LOGIN, "sinfo", "-h", "-N", "-o", "%N %t")
    return dict(line.split() for line in out.splitlines() if line.strip())


def powered_down(kube: Kube, names: list[str]) -> dict[str, str] | None:
    """sinfo, once each of `names` is idle and powered down (idle~); else None."""
    nodes = sinfo(kube)
    return nodes if all(nodes.get(name) == "idle~" for name in names) else None


def resting(kube: Kube, names: list[str]) -> bool:
    """Each of `names` powered down or powering down (idle~, idle%): none powering up (idle#) or up."""
    nodes = sinfo(kube)
    return all(nodes.get(name) in ("idle~", "idle%") for name in names)


def job(kube: Kube, job_id: str) -> dict[str, str]:
    out = kube.exec(LOGIN_POD, LOGIN, "scontrol", "show", "job", "-o", job_id)
    return dict(kv.split("=", 1) for kv in out.split() if "=" in kv)


def job_in(kube: Kube, job_id: str, *states: str) -> dict[str, str] | None:
    """`scontrol show job`, once its JobState is one of `states`; else None."""
    found = job(kube, job_id)
    return found if found["JobState"] in states else None


def sbatch(kube: Kube, *args: str) -> str:
    out = kube.exec(LOGIN_POD, LOGIN, "sbatch", "--parsable", "-o", "/dev/null", *args)
    return out.strip().split(";")[0]


def workers_condition(kube: Kube) -> dict[str, str]:
    conditions = kube.json("slurmcluster", NAME).get("status", {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "WorkersReady"), {})


def test_an_elastic_group_starts_with_no_pod_and_slurm_knows_its_nodes_powered_down(elastic: Kube) -> None:
    kube = elastic
    assert worker_pods(kube) == {}
    nodes = until(lambda: powered_down(kube, [*CPU, BIG]), timeout=60, what="every elastic node idle~ in sinfo")
    print(f"sinfo: {nodes}")


def hostnames(kube: Kube, hostlist: str) -> set[str]:
    if not hostlist:
        return set()
    return set(kube.exec(LOGIN_POD, LOGIN, "scontrol", "show", "hostnames", hostlist).split())


def _seconds(stamp: str) -> float:
    """An RFC 3339 time (Kubernetes', or Slurm's local time without a zone: the machine's clock, UTC here)."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).replace(tzinfo=UTC).timestamp()


def timeline(job: dict[str, str], signal: dict[str, str], pods: dict[str, dict[str, Any]]) -> str:
    """Where the seconds from submission to RUNNING went, each step from the job's SubmitTime (whole seconds, but
    for ResumeProgram's patch): ResumeProgram's patch, then per pod its creation, scheduling, its munge init
    container's start, its slurmd container's start and readiness; then the job's StartTime."""
    t0 = _seconds(job["SubmitTime"])
    steps = [f"ResumeProgram +{_seconds(signal['at']) - t0:.1f}s"] if signal.get("at") else []
    for name, pod in sorted(pods.items()):
        status = pod["status"]
        conditions = {c["type"]: c.get("lastTransitionTime") for c in status.get("conditions", [])}
        inits = [c["state"].get("terminated", {}).get("startedAt") for c in status.get("initContainerStatuses", [])]
        daemon = [c["state"].get("running", {}).get("startedAt") for c in status.get("containerStatuses", [])]
        marks = [
            ("created", pod["metadata"]["creationTimestamp"]),
            ("scheduled", conditions.get("PodScheduled")),
            ("munge", inits[0] if inits else None),
            ("slurmd", daemon[0] if daemon else None),
            ("ready", conditions.get("Ready")),
        ]
        steps.append(f"{name}: " + ", ".join(f"{what} +{_seconds(at) - t0:.0f}s" for what, at in marks if at))
    steps.append(f"StartTime +{_seconds(job['StartTime']) - t0:.0f}s")
    return "; ".join(steps)


def power_cycle(kube: Kube) -> tuple[float, float]:
    """From every cpu node powered down: `sbatch -N2` → two pods, the job runs → idle for idleTime → pods gone, the
    nodes powering down or powered down. Returns (submit → RUNNING, job end → pods gone) in seconds."""
    # A powered-down node is usable again once SuspendTimeout has passed since Slurm powered it down.
    until(lambda: powered_down(kube, CPU), timeout=120, what="the cpu nodes powered down and idle")
    submitted = time.monotonic()
    job_id = sbatch(kube, "-N2", "-C", "cpu", "--wrap", f"srun -N2 sh -c {shlex.quote(NAMES_RESOLVE)} && sleep 5")
    until(
        lambda: job_in(kube, job_id, "RUNNING", "COMPLETED"),
        timeout=300,
        interval=0.5,
        what=f"job {job_id} running on two powered-up nodes",
    )
    to_running = time.monotonic() - submitted
    pods = worker_pods(kube)
    assert len(pods) == 2 and set(pods) <= set(CPU), list(pods)  # a job runs: their slurmd registered
    # Slurm's ResumeProgram told the operator which nodes it powered up for this job (the resume signal,
    # render/power.py): its last write names some of them (both, unless Slurm powered them up in two passes), after
    # the submission.
    signal = kube.json("configmap", f"{NAME}-power").get("data") or {}
    named = hostnames(kube, signal.get("nodes", ""))
    assert named and named <= set(pods), signal
    started = job(kube, job_id)
    assert _seconds(signal["at"]) >= _seconds(started["SubmitTime"]), (signal, started["SubmitTime"])
    print(f"job {job_id} from zero: {timeline(started, signal, pods)}")
    ended = until(
        lambda: job_in(kube, job_id, "COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT"),
        timeout=120,
        what=f"job {job_id} to end",
    )
    assert ended["JobState"] == "COMPLETED", ended
    done = time.monotonic()
    until(lambda: not worker_pods(kube) or None, timeout=IDLE_TIME + 180, what="the idle nodes' pods gone")
    to_gone = time.monotonic() - done
    nodes = sinfo(kube)
    # idle%: powering down (SuspendTimeout), idle~: powered down; never down or drained.
    assert all(nodes[name] in ("idle%", "idle~") for name in CPU), nodes
    return to_running, to_gone


@pytest.mark.timeout(600)  # two power cycles: each ~20 s to RUNNING, idleTime 30 s, SuspendTimeout 45 s, pods' end
def test_a_job_powers_nodes_up_as_pods_and_idle_nodes_go_with_their_pods(elastic: Kube) -> None:
    runs = [power_cycle(elastic) for _ in range(2)]  # the second from nodes powered down by the first
    to_running, to_gone = [r for r, _ in runs], [g for _, g in runs]
    print(
        f"submit -> RUNNING from zero: {', '.join(f'{t:.0f}s' for t in to_running)} (p50 "
        f"{statistics.median(to_running):.0f}s, max {max(to_running):.0f}s); job end -> pods gone (idleTime "
        f"{IDLE_TIME}s): {', '.join(f'{t:.0f}s' for t in to_gone)}"
    )


def test_a_job_needing_more_nodes_than_the_group_has_is_refused_by_slurm_and_creates_no_pod(elastic: Kube) -> None:
    """Slurm knows the whole range, so it answers at once: a job larger than every node it could ever power up is
    refused at submission (not left pending forever), and nothing is powered up for it."""
    kube = elastic
    submitted = kube.cp.kubectl(
        "-n",
        kube.ns,
        "exec",
        LOGIN_POD,
        "-c",
        LOGIN,
        "--",
        "sbatch",
        "-N4",
        "-C",
        "cpu",
        "--wrap",
        "hostname",
        check=False,
    )
    print(f"sbatch -N4 -C cpu (3 cpu nodes): exit {submitted.returncode}: {submitted.stderr.strip()}")
    assert submitted.returncode != 0
    assert "Requested node configuration is not available" in submitted.stderr
    holds(lambda: not worker_pods(kube) and resting(kube, CPU), seconds=10, what="nothing powered up")


def set_max(kube: Kube, value: int) -> None:
    patch = [{"op": "replace", "path": "/spec/workers/0/autoscale/max", "value": value}]
    kube.run("patch", "slurmcluster", NAME, "--type=json", "-p", json.dumps(patch))


def statefulset_exists(kube: Kube) -> bool:
    return bool(kube.run("get", "statefulset", "-o", "name", "--ignore-not-found", f"{NAME}-worker-cpu").strip())


def ready_pod(kube: Kube, name: str) -> dict[str, Any] | None:
    pod = worker_pods(kube).get(name)
    return pod if pod is not None and pod_ready(pod) else None


def run_held_job(kube: Kube, node: str) -> tuple[str, str]:
    """A job on `node` that runs until the test creates its release file (in the jail, which every node shares):
    (job id, release path)."""
    release = f"/root/release-{time.monotonic_ns()}"
    job_id = sbatch(kube, "-w", node, "-t", "10", "--wrap", f"while [ ! -e {release} ]; do sleep 1; done")
    until(lambda: job_in(kube, job_id, "RUNNING"), timeout=300, interval=0.5, what=f"job {job_id} running on {node}")
    return job_id, release


def release_and_complete(kube: Kube, job_id: str, release: str) -> None:
    kube.exec(LOGIN_POD, LOGIN, "touch", f"/mnt/jail{release}")
    ended = until(
        lambda: job_in(kube, job_id, "COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT"),
        timeout=120,
        what=f"job {job_id} to end",
    )
    assert ended["JobState"] == "COMPLETED", ended
    assert ended["Restarts"] == "0", ended


@pytest.mark.timeout(600)
def test_lowering_max_below_a_node_running_a_job_lets_the_job_finish_then_the_node_leaves(elastic: Kube) -> None:
    """`max` lowered from 3 to 2 while a job runs on node 2: the drain gate drains the node and keeps its pod, and
    slurmctl keeps the node in nodes.conf, so the job survives slurmctld's reconfigure and completes; then the pod goes
    and the node leaves Slurm. `max` goes back to 3 at the end."""
    kube = elastic
    until(lambda: powered_down(kube, CPU), timeout=120, what="the cpu nodes powered down and idle")
    job_id, release = run_held_job(kube, CPU[2])
    set_max(kube, 2)
    try:
        held = f"grep -q '^NodeName={CPU[2]} ' /etc/slurm/nodes.conf && echo held || echo no"
        until(
            lambda: kube.exec(f"{NAME}-controller-0", "slurmctld", "sh", "-c", held).strip() == "held",
            timeout=180,
            interval=2,
            what=f"slurmctld's nodes.conf holding {CPU[2]} on its own line",
        )
        kube.exec(LOGIN_POD, LOGIN, "scontrol", "reconfigure")  # slurmctld reads the files again, now
        until(  # draining: the gate's drain, its job still running
            lambda: sinfo(kube).get(CPU[2], "").startswith("drng") or None,
            timeout=60,
            what=f"{CPU[2]} draining in sinfo after the reconfigure",
        )
        assert job(kube, job_id)["JobState"] == "RUNNING"
        release_and_complete(kube, job_id, release)
        until(lambda: CPU[2] not in worker_pods(kube) or None, timeout=120, what=f"the pod of {CPU[2]} gone")
        until(lambda: CPU[2] not in sinfo(kube) or None, timeout=240, interval=3, what=f"{CPU[2]} gone from Slurm")
    finally:
        set_max(kube, 3)
        kube.exec(LOGIN_POD, LOGIN, "rm", "-f", f"/mnt/jail{release}")
    until(lambda: powered_down(kube, CPU), timeout=240, interval=3, what="the three cpu nodes known again, idle~")


@pytest.mark.timeout(900)
def test_switching_a_group_between_elastic_and_fixed_lets_the_running_job_finish_each_way(elastic: Kube) -> None:
    """cpu, elastic with a job running on node 0, made fixed (size 1): the elastic pod is drained and kept, and no
    StatefulSet is made, until the job completed; then the StatefulSet's pod registers node 0 as a dynamic node.
    Made elastic again with a job on that node: the StatefulSet stays, drained, until the job completed; then the
    group's three nodes are CLOUD nodes again, powered down (reconcilers/group_switch.py)."""
    kube = elastic
    until(lambda: powered_down(kube, CPU), timeout=120, what="the cpu nodes powered down and idle")
    job_id, release = run_held_job(kube, CPU[0])
    elastic_pod = worker_pods(kube)[CPU[0]]
    to_fixed = [
        {"op": "remove", "path": "/spec/workers/0/autoscale"},
        {"op": "add", "path": "/spec/workers/0/size", "value": 1},
    ]
    to_elastic = [
        {"op": "add", "path": "/spec/workers/0/autoscale", "value": {"min": 0, "max": 3, "idleTime": f"{IDLE_TIME}s"}}
    ]
    try:
        kube.run("patch", "slurmcluster", NAME, "--type=json", "-p", json.dumps(to_fixed))
        until(lambda: sinfo(kube).get(CPU[0], "").startswith("drng") or None, timeout=120, what=f"{CPU[0]} draining")
        until(
            lambda: f"{CPU[0]} for job {job_id}" in workers_condition(kube).get("message", "") or None,
            timeout=60,
            what="WorkersReady naming the job the switch waits for",
        )
        assert not statefulset_exists(kube), "a StatefulSet while the elastic pod of its node 0 runs a job"
        assert worker_pods(kube)[CPU[0]]["metadata"]["uid"] == elastic_pod["metadata"]["uid"]
        release_and_complete(kube, job_id, release)
        until(lambda: statefulset_exists(kube) or None, timeout=300, interval=2, what="the cpu StatefulSet made")
        fixed_pod = until(
            lambda: ready_pod(kube, CPU[0]),
            timeout=240,
            what=f"the StatefulSet's pod {CPU[0]} ready",
        )
        assert fixed_pod["metadata"]["ownerReferences"][0]["kind"] == "StatefulSet"
        until(lambda: sinfo(kube).get(CPU[0]) == "idle" or None, timeout=180, what=f"{CPU[0]} idle as a fixed node")
        assert set(sinfo(kube)) & set(CPU) == {CPU[0]}, sinfo(kube)

        job_id, release = run_held_job(kube, CPU[0])
        kube.run("patch", "slurmcluster", NAME, "--type=json", "-p", json.dumps(to_elastic))
        until(lambda: sinfo(kube).get(CPU[0], "").startswith("drng") or None, timeout=120, what=f"{CPU[0]} draining")
        assert statefulset_exists(kube) and worker_pods(kube)[CPU[0]]["metadata"]["uid"] == fixed_pod["metadata"]["uid"]
        release_and_complete(kube, job_id, release)
    finally:
        if kube.json("slurmcluster", NAME)["spec"]["workers"][0].get("autoscale") is None:
            kube.run("patch", "slurmcluster", NAME, "--type=json", "-p", json.dumps(to_elastic))
        kube.exec(LOGIN_POD, LOGIN, "rm", "-f", f"/mnt/jail{release}")
    until(lambda: not statefulset_exists(kube) or None, timeout=180, interval=2, what="the cpu StatefulSet gone")
    until(lambda: powered_down(kube, CPU), timeout=300, interval=3, what="the three cpu nodes CLOUD again, idle~")


def events(kube: Kube, reason: str) -> list[str]:
    """The messages of the SlurmCluster's Events with this reason."""
    items = kube.json("events", "--field-selector", f"involvedObject.name={NAME},reason={reason}")["items"]
    return [str(e.get("message", "")) for e in items]


def patch_big(kube: Kube, resources: dict[str, Any]) -> None:
    groups = kube.json("slurmcluster", NAME)["spec"]["workers"]
    for group in groups:
        if group["name"] == "big":
            group["resources"] = resources
    kube.run("patch", "slurmcluster", NAME, "--type=merge", "-p", json.dumps({"spec": {"workers": groups}}))


@pytest.mark.timeout(600)  # resumeTimeout 30 s, Slurm's power-save pass, the pod's end, the 60 s backoff, the job
def test_a_pod_that_cannot_be_placed_is_reported_and_its_node_goes_down_without_losing_the_job(elastic: Kube) -> None:
    """...and once the cause is fixed (the group asks for what a node has), the operator resumes the node after its
    backoff (max(resumeTimeout, 60s) from Slurm's DOWN), Slurm powers it up for the requeued job, which runs."""
    kube = elastic
    job_id = sbatch(kube, "-C", "big", "--wrap", "hostname")
    ended: dict[str, str] = {}
    try:
        cond = until(
            lambda: c if (c := workers_condition(kube)).get("reason") == "Unschedulable" else None,
            timeout=120,
            what="WorkersReady False, Unschedulable",
        )
        assert cond["status"] == "False" and "big" in cond["message"] and "Insufficient cpu" in cond["message"], cond
        print(f"WorkersReady: {cond['message']}")
        until(lambda: sinfo(kube).get(BIG, "").startswith("down") or None, timeout=120, what=f"{BIG} DOWN in Slurm")
        until(lambda: BIG not in worker_pods(kube) or None, timeout=60, what=f"the pod of {BIG} gone")
        state = job(kube, job_id)
        assert state["JobState"] == "PENDING", state  # requeued: Slurm still has it
        cond = workers_condition(kube)
        assert cond["reason"] == "Unschedulable" and "resumeTimeout" in cond["message"], cond
        print(f"after resumeTimeout: {BIG} {sinfo(kube)[BIG]}, job {job_id} {state['JobState']} ({state['Reason']})")
        assert "slurmctl resumes it at" in cond["message"], cond
        patch_big(kube, SMALL)  # the cause fixed, well within the backoff
        ended = until(
            lambda: job_in(kube, job_id, "COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT"),
            timeout=300,
            what=f"job {job_id} to run on {BIG}, resumed by the operator",
        )
        print(f"resumed: {events(kube, 'ResumeRetried')}; job {job_id} {ended['JobState']} on {ended.get('NodeList')}")
        assert any(BIG in m and "retry 1" in m for m in events(kube, "ResumeRetried")), events(kube, "ResumeRetried")
    finally:
        if not ended:
            kube.exec(LOGIN_POD, LOGIN, "scancel", job_id)
    assert ended["JobState"] == "COMPLETED" and ended["NodeList"] == BIG, ended


@pytest.mark.timeout(300)
def test_an_idle_elastic_pod_of_an_older_template_is_powered_down_through_slurm(elastic: Kube) -> None:
    """The node the test before resumed is up and idle (idleTime 10m: it would stay up); a new template of its group
    makes the operator ask Slurm for POWER_DOWN_ASAP, Slurm powers it down, and its pod goes."""
    kube = elastic
    pod = until(lambda: worker_pods(kube).get(BIG), timeout=60, what=f"the pod of {BIG}")
    assert sinfo(kube).get(BIG) == "idle", sinfo(kube)
    patch_big(kube, {**SMALL, "limits": {"memory": "768Mi"}})
    until(lambda: BIG not in worker_pods(kube) or None, timeout=180, what=f"the pod of {BIG} gone")
    state = sinfo(kube)[BIG]
    print(f"{BIG}: {state} after {events(kube, 'PoweringDown')}")
    assert state in ("idle%", "idle~"), state  # powering down or powered down: never down or drained
    assert any(BIG in m and "older template" in m for m in events(kube, "PoweringDown"))
    assert pod["metadata"]["annotations"].get("slurm.slurmctl.io/template-hash")


# A symlink a user (or root in the jail) planted where a sub-mount goes, leading it onto the jail's /etc.
SUB_MOUNT_PATH = "/srv/elastic/ds"


def login_has_sub_mount(kube: Kube) -> bool:
    """The login pod runs the template with the sub-mount and is ready (it rolls when the spec gains one)."""
    pods = [p for p in kube.pods(f"app.kubernetes.io/instance={NAME},app.kubernetes.io/component=login")]
    for pod in pods:
        env = {e["name"]: e.get("value", "") for c in pod["spec"]["containers"] for e in c.get("env", [])}
        if "ds:" in env.get("JAIL_SUBMOUNTS", "") and pod_ready(pod) and not pod["metadata"].get("deletionTimestamp"):
            return True
    return False


@pytest.mark.timeout(600)
def test_a_sub_mount_a_symlink_redirects_is_refused_and_the_elastic_pod_starts_drained_naming_it(elastic: Kube) -> None:
    """complement-jail refuses the sub-mount (no mount over the jail's /etc), the login pod and a new elastic pod
    start all the same (no crash loop), and the worker's node is drained before it takes a job, the reason naming
    the sub-mount and why."""
    kube = elastic
    kube.exec(
        LOGIN_POD, LOGIN, "sh", "-c", f"mkdir -p /mnt/jail/srv/elastic && ln -sfn ../../etc /mnt/jail{SUB_MOUNT_PATH}"
    )
    sub_mount = {"name": "ds", "mountPath": SUB_MOUNT_PATH, "volume": {"source": {"emptyDir": {}}}}
    kube.run(
        "patch", "slurmcluster", NAME, "--type=merge", "-p", json.dumps({"spec": {"jail": {"subMounts": [sub_mount]}}})
    )
    until(lambda: login_has_sub_mount(kube), timeout=300, what="the login pod rolled with the sub-mount, ready")
    job_id = sbatch(kube, "-w", CPU[0], "--wrap", "hostname")
    try:
        reason = until(
            lambda: (
                r
                if (r := kube.exec(LOGIN_POD, LOGIN, "sinfo", "-h", "-N", "-n", CPU[0], "-o", "%E").strip()).startswith(
                    "slurmctl-jail:"
                )
                else None
            ),
            timeout=240,
            what=f"{CPU[0]} drained naming the sub-mount",
        )
        print(f"{CPU[0]}: {reason}")
        assert reason.startswith(
            f"slurmctl-jail: sub-mount ds at {SUB_MOUNT_PATH} refused: {SUB_MOUNT_PATH} is a symlink (to ../../etc)"
        ), reason
        pod = until(lambda: worker_pods(kube).get(CPU[0]), timeout=60, what=f"the pod of {CPU[0]}")
        assert all(s["restartCount"] == 0 for s in pod["status"].get("containerStatuses", [])), pod["status"]
        where = "findmnt --mountpoint /mnt/jail/etc >/dev/null && echo MOUNTED || echo not-mounted"
        assert kube.exec(CPU[0], "slurmd", "sh", "-c", where).strip() == "not-mounted"
        assert kube.exec(LOGIN_POD, LOGIN, "sh", "-c", where).strip() == "not-mounted"
        assert "refusing jail sub-mount 'ds' at /srv/elastic/ds" in kube.run("logs", LOGIN_POD, "-c", LOGIN)
        assert job(kube, job_id)["JobState"] == "PENDING"  # nothing ran on the drained node
    finally:
        kube.exec(LOGIN_POD, LOGIN, "scancel", job_id)
        kube.exec(LOGIN_POD, LOGIN, "rm", "-f", f"/mnt/jail{SUB_MOUNT_PATH}")
