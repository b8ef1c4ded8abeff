"""Several Kubernetes nodes on this machine (hack/node.sh add): workers spread over them, topology from their labels, a
node lost with a job on it, the primary controller's node lost with a standby slurmctld, a worker drained by a health
check moved off its node.

Nodes 2 and 3 join the package's cluster for this module only (each its own kubelet and containerd; `crash` kills one
as a machine failure would: pods off the network, every process SIGKILLed; `start` is its reboot). One SlurmCluster
(three workers, a login node, slurmrestd, slurmctld with a standby) is shared by the tests, in order. Node labels:
switch `sw1` = nodes 1 and 2, `sw2` = node 3; the two slurmctld pods may run on nodes 2 and 3 only and the login pod
(through which the tests reach Slurm) on node 1 only, which is never crashed: it runs the scheduler and DNS.
slurmrestd goes wherever the scheduler puts it: when that node is crashed, it has to come back elsewhere for slurmctl
to act. The operator runs with a short lost-node threshold and Slurm with short timeouts so that the module stays
short; kube-controller-manager keeps its default 40 s before a silent node is NotReady. Each test prints its figures
(seconds from the crash).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from test.e2e.harness import NODE_NAME, Node, node_script
from test.e2e.pods.conftest import SLURM_IMAGES, TEST_IMAGE
from test.e2e.pods.slurm import Kube, pod_ready, small_cluster
from test.waiting import until

pytestmark = pytest.mark.e2e
NAME = "fleet"
EXTRA = ("2", "3")
NODES = (NODE_NAME, *(f"{NODE_NAME}-{k}" for k in EXTRA))
SWITCH_LABEL = "slurmctl.test/switch"
SWITCHES = {NODES[0]: "sw1", NODES[1]: "sw1", NODES[2]: "sw2"}
CONTROLLERS_LABEL = "slurmctl.test/controllers"
PRIMARY, BACKUP = f"{NAME}-controller-0", f"{NAME}-controller-backup-0"
LOGIN_POD, LOGIN = f"{NAME}-login-0", "sshd"
WORKERS = f"app.kubernetes.io/instance={NAME},app.kubernetes.io/component=workers"
JAIL = "/mnt/jail"
LOST_AFTER = 10  # seconds: the operator's --node-lost-after in this module
OPERATOR_ARGS = ("--node-lost-after", str(LOST_AFTER))


@dataclass
class Fleet:
    node: Node
    kube: Kube

    def login(self, *command: str, timeout: float = 120) -> str:
        return self.kube.exec(LOGIN_POD, LOGIN, *command, timeout=timeout)

    def in_jail(self, script: str, *, timeout: float = 120) -> str:
        return self.login("chroot", JAIL, "sh", "-c", script, timeout=timeout)

    def workers(self) -> dict[str, dict[str, Any]]:
        """Worker pods that are not being deleted, by name."""
        return {p["metadata"]["name"]: p for p in self.kube.pods(WORKERS) if not p["metadata"].get("deletionTimestamp")}

    def placement(self) -> dict[str, str]:
        """Worker pod -> the Kubernetes node it runs on."""
        return {name: p["spec"].get("nodeName", "") for name, p in self.workers().items()}

    def slurm_node(self, name: str) -> dict[str, str]:
        try:
            out = self.login("scontrol", "show", "node", "-o", name)
        except AssertionError:
            return {}
        head, _, reason = out.strip().partition(" Reason=")
        fields = dict(kv.split("=", 1) for kv in head.split() if "=" in kv)
        if reason:
            fields["Reason"] = reason
        return fields

    def job(self, job: str) -> dict[str, str]:
        try:
            out = self.login("scontrol", "show", "job", "-o", job)
        except AssertionError:
            return {}
        return dict(kv.split("=", 1) for kv in out.split() if "=" in kv)

    def node_of(self, pod: str) -> str:
        return str(self.kube.json("pod", pod)["spec"].get("nodeName", ""))

    def ready(self, pod: str) -> bool:
        found = self.kube.cp.kubectl("-n", self.kube.ns, "get", "pod", pod, "-o", "json", check=False)
        return found.returncode == 0 and pod_ready(json.loads(found.stdout))

    def sbatch(self, *args: str, timeout: float = 120) -> str:
        words = ["sbatch", "--parsable", f"--output=/tmp/{NAME}-%j.out", *args]
        return self.in_jail(" ".join(words), timeout=timeout).strip().split(";")[0]

    def events(self, reason: str) -> list[str]:
        """The messages of the SlurmCluster's Events with this reason, oldest first."""
        items = self.kube.json("events", "--field-selector", f"involvedObject.name={NAME},reason={reason}")["items"]
        items.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
        return [str(e.get("message", "")) for e in items]

    def explain(self) -> None:
        """What explains a wait that timed out: pods, Slurm's view, slurmrestd's and slurmctld's last words."""
        print(self.kube.run("get", "pods", "-o", "wide", check=False))
        for args in (("sinfo", "-N", "-l"), ("scontrol", "ping"), ("squeue",)):
            try:
                print(self.login(*args, timeout=60))
            except AssertionError as exc:
                print(exc)
        for which in (
            f"deployment/{NAME}-rest --tail=30",
            f"{PRIMARY} -c slurmctld --tail=40",
            f"{BACKUP} -c slurmctld --tail=20",
        ):
            print(self.kube.run("logs", *which.split(), check=False))

    def until(self, probe: Callable[[], Any], *, timeout: float, what: str, interval: float = 2) -> Any:
        try:
            return until(probe, timeout=timeout, interval=interval, what=what)
        except AssertionError:
            self.explain()
            raise

    def srun_all(self) -> set[str]:
        """The hosts `srun -N3` ran on; empty when it could not run (within 60 s)."""
        try:
            out = self.in_jail("srun -N3 --immediate=60 hostname", timeout=90)
        except AssertionError:
            return set()
        return set(out.split())


@pytest.fixture(scope="module")
def nodes(node: Node) -> Iterator[list[str]]:
    """Nodes 2 and 3 up beside node 1, with the images the module's pods run; all three labelled with a switch."""
    assert node.state_dir is not None
    images = {"NODE_IMAGES": " ".join((*SLURM_IMAGES, TEST_IMAGE))}
    try:
        for k in EXTRA:
            t0 = time.monotonic()
            added = node_script("add", node.state_dir, k, env=images, timeout=600)
            assert added.returncode == 0, added.stderr
            print(f"node {k} added in {time.monotonic() - t0:.1f}s")
        for name, switch in SWITCHES.items():
            node.kubectl("label", "node", name, f"{SWITCH_LABEL}={switch}", "--overwrite")
        for name in NODES[1:]:
            node.kubectl("label", "node", name, f"{CONTROLLERS_LABEL}=yes", "--overwrite")
        yield list(NODES)
    finally:
        node.kubectl("label", "node", NODE_NAME, f"{SWITCH_LABEL}-", check=False)
        for k in reversed(EXTRA):
            removed = node_script("remove", node.state_dir, k, timeout=300)
            assert removed.returncode == 0, removed.stderr


@pytest.fixture(scope="module")
def fleet(node: Node, nodes: list[str], kube: Kube, operator: Path) -> Iterator[Fleet]:
    objects = small_cluster(
        NAME,
        topology={"tree": {"levels": [SWITCH_LABEL]}},
        controller={"standby": True, "nodeSelector": {CONTROLLERS_LABEL: "yes"}},
        login={"nodeSelector": {"kubernetes.io/hostname": NODE_NAME}},
        slurm={"config": {"slurmctldTimeout": 20}, "extraConfig": "SlurmdTimeout=30", "allowOperatorOwnedKeys": True},
    )
    objects[1]["spec"]["workers"][0].update(size=3, replaceUnhealthy=True)
    kube.apply(objects)
    kube.until_available(NAME, operator, timeout=600)
    f = Fleet(node, kube)
    until(lambda: len(f.srun_all()) == 3, timeout=180, interval=3, what="srun -N3 on the three workers")
    yield f


def test_nodes_are_kubernetes_nodes_of_their_own(node: Node, nodes: list[str]) -> None:
    """Each node is Ready at its own loopback address with its own pod range, and costs about this much memory."""
    assert node.state_dir is not None
    listed = json.loads(node.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    by_name = {n["metadata"]["name"]: n for n in listed}
    for i, name in enumerate(nodes):
        status = by_name[name]["status"]
        assert {"type": "InternalIP", "address": f"127.0.0.{i + 1}"} in status["addresses"], name
        assert any(c["type"] == "Ready" and c["status"] == "True" for c in status["conditions"]), name
    for k in EXTRA:
        rss = 0
        for daemon in (f"containerd-{k}", f"kubelet-{k}"):
            pid = (node.state_dir / "pids" / daemon).read_text().strip()
            status = Path(f"/proc/{pid}/status").read_text()
            rss += int(re.search(r"VmRSS:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
        print(f"node {k}: containerd + kubelet RSS {rss / 1024:.0f} MiB")


def test_workers_spread_over_the_nodes_and_the_controller_avoids_the_login_node(fleet: Fleet) -> None:
    placement = fleet.placement()
    assert len(placement) == 3 and set(placement.values()) == set(NODES), placement
    controller = fleet.kube.json("pod", f"{NAME}-controller-0")["spec"]["nodeName"]
    login = fleet.kube.json("pod", LOGIN_POD)["spec"]["nodeName"]
    assert controller != login, (controller, login)
    print(f"workers {placement}, controller on {controller}, login on {login}")


def test_topology_follows_the_node_labels(fleet: Fleet) -> None:
    """Slurm's tree has one switch per label value with the workers of those nodes (rendered from where the pods run,
    installed with a reconfigure); a job asking for one switch gets two workers of sw1."""
    placement = fleet.placement()
    expected = {
        switch: sorted(w for w, n in placement.items() if SWITCHES[n] == switch) for switch in set(SWITCHES.values())
    }
    shown: dict[str, list[str]] = {}

    def matches() -> bool:
        shown.clear()
        for line in fleet.login("scontrol", "show", "topology").splitlines():
            name = re.search(r"SwitchName=(\S+)", line)
            nodes = re.search(r"Nodes=(\S+)", line)
            if name and nodes:
                shown[name.group(1)] = fleet.login("scontrol", "show", "hostnames", nodes.group(1)).split()
        return all(sorted(shown.get(switch, [])) == members for switch, members in expected.items())

    until(matches, timeout=120, interval=3, what=f"scontrol show topology with {expected}")
    print(f"topology: {shown}")
    ran = fleet.in_jail("srun -N2 --switches=1@60 hostname", timeout=120).split()
    assert sorted(ran) == expected["sw1"], ran


def number(node_name: str) -> str:
    """hack/node.sh's K of an extra node."""
    assert node_name in NODES[1:], f"{node_name} is not an extra node"
    return node_name.rsplit("-", 1)[1]


def crash(fleet: Fleet, node_name: str) -> float:
    assert fleet.node.state_dir is not None
    t0 = time.monotonic()
    crashed = node_script("crash", fleet.node.state_dir, number(node_name))
    assert crashed.returncode == 0, crashed.stderr
    return t0


def start(fleet: Fleet, node_name: str) -> None:
    assert fleet.node.state_dir is not None
    started = node_script("start", fleet.node.state_dir, number(node_name))
    assert started.returncode == 0, started.stderr


@contextmanager
def crashed(fleet: Fleet, node_name: str) -> Iterator[float]:
    """The node crashed (yields when, by the monotonic clock) and started again on the way out, also when the test
    failed: the next test gets three nodes."""
    t0 = crash(fleet, node_name)
    try:
        yield t0
    finally:
        start(fleet, node_name)


@pytest.mark.timeout(720)  # NotReady after 40 s, slurmrestd back after 30 s more, the node restarted at the end
def test_a_lost_node_is_drained_its_pods_move_and_slurm_works_again(fleet: Fleet) -> None:
    """The standby controller's node crashes with a job on its worker: slurmctl drains that Slurm node once Kubernetes
    has said NotReady for the threshold and Slurm cannot reach its slurmd, removes the stranded worker pod, the
    StatefulSet places it on another node, its new slurmd registers, and `srun -N3` works again without anyone
    touching Slurm. The primary slurmctld goes on. The node's return duplicates nothing."""
    lost_node = fleet.node_of(BACKUP)
    (victim,) = [w for w, n in fleet.placement().items() if n == lost_node]
    job = fleet.sbatch("--requeue", "-w", victim, "--wrap", "'sleep 600'")
    until(lambda: fleet.job(job).get("JobState") == "RUNNING", timeout=60, what=f"job {job} running")
    old_uid = fleet.workers()[victim]["metadata"]["uid"]
    with crashed(fleet, lost_node) as t0:
        figures: dict[str, float] = {}

        def drained() -> bool:
            # In Slurm the drain may last only a moment: once slurmctld cannot reach the slurmd either, the same pass
            # sets the node DOWN and deletes it. The Events tell.
            return any(
                f"{victim} in Slurm (slurmctl: node {lost_node} NotReady)" in m for m in fleet.events("Draining")
            )

        fleet.until(drained, timeout=240, interval=2, what=f"{victim} drained for {lost_node}")
        figures["Slurm node drained"] = time.monotonic() - t0

        def moved() -> bool:
            pod = fleet.workers().get(victim)
            return (
                pod is not None
                and pod["metadata"]["uid"] != old_uid
                and pod["spec"].get("nodeName") not in ("", lost_node)
                and pod_ready(pod)
            )

        fleet.until(moved, timeout=300, interval=2, what=f"{victim} Ready on another node")
        figures["new pod Ready elsewhere"] = time.monotonic() - t0
        # (`NodeDown` too, unless slurmctld had already set the node DOWN itself: SlurmdTimeout is 30 s here.)
        for reason in ("SlurmNodeDeleted", "Deleted"):
            assert any(victim in m for m in fleet.events(reason)), (reason, fleet.events(reason))
        # The batch job was requeued by Slurm, not lost: it runs again (on the new pod: it asked for that node), so it
        # is cancelled for `srun -N3` to find all three idle.
        state = fleet.until(
            lambda: (s := fleet.job(job)) and s.get("Restarts", "0") != "0" and s,
            timeout=60,
            what=f"job {job} requeued",
        )
        print(f"the job on {victim}: JobState={state.get('JobState')} Restarts={state.get('Restarts')}")
        fleet.login("scancel", job)
        fleet.until(lambda: len(fleet.srun_all()) == 3, timeout=240, interval=3, what="srun -N3 working again")
        figures["srun -N3 works again"] = time.monotonic() - t0
        print(f"node {lost_node} lost: " + ", ".join(f"{k} {v:.0f}s" for k, v in figures.items()))
    # Back: its kubelet finds the old worker pod gone from the API and starts nothing of it; the standby slurmctld
    # (its pod was left to Kubernetes) runs there again. One Slurm node per worker, all answering.
    until(lambda: fleet.ready(BACKUP), timeout=180, interval=2, what="the standby slurmctld back")
    on_lost = fleet.node.kubectl("get", "pods", "-A", "--field-selector", f"spec.nodeName={lost_node}", "-o", "name")
    assert f"pod/{victim}" not in on_lost.stdout.split()
    assert len(fleet.workers()) == 3
    in_slurm = fleet.login("sinfo", "-h", "-N", "-o", "%N").split()
    assert sorted(set(in_slurm)) == sorted(fleet.workers()), in_slurm
    assert len(fleet.srun_all()) == 3


@pytest.mark.timeout(720)  # SlurmctldTimeout, a 90 s job, the node restarted
def test_the_primary_controller_s_node_lost_the_standby_takes_over(fleet: Fleet) -> None:
    """The primary slurmctld's node crashes while a job runs elsewhere: Slurm's backup controller takes control within
    SlurmctldTimeout, the running job goes on, new jobs are accepted and run; when the node comes back the primary
    takes control again and the jobs notice nothing."""
    lost_node = fleet.node_of(PRIMARY)
    assert lost_node != fleet.node_of(BACKUP), "both controllers on one node"
    safe = next(w for w, n in fleet.placement().items() if n == NODES[0])
    running = fleet.sbatch("-w", safe, "--wrap", "'sleep 90'")
    until(lambda: fleet.job(running).get("JobState") == "RUNNING", timeout=60, what=f"job {running} running")
    with crashed(fleet, lost_node) as t0:
        accepted: list[str] = []

        def takes_jobs() -> bool:
            try:
                accepted.append(fleet.sbatch("-w", safe, "--wrap", "true", timeout=60))
            except AssertionError:
                return False
            return True

        fleet.until(takes_jobs, timeout=180, interval=2, what="a controller accepting jobs")
        failover = time.monotonic() - t0
        ping = fleet.login("scontrol", "ping", timeout=60)
        print(ping)
        assert re.search(rf"at {BACKUP} is UP", ping), ping
        assert fleet.job(running).get("JobState") == "RUNNING"
        until(lambda: fleet.job(accepted[0]).get("JobState") == "COMPLETED", timeout=120, what="the new job done")
        print(f"primary slurmctld's node {lost_node} lost: a job accepted again after {failover:.0f}s")
    until(lambda: fleet.ready(PRIMARY), timeout=240, interval=2, what="the primary slurmctld back")
    until(
        lambda: re.search(rf"at {PRIMARY} is UP", fleet.login("scontrol", "ping", timeout=60)) is not None,
        timeout=120,
        what="the primary answering",
    )
    after = fleet.sbatch("--wrap", "true")
    until(
        lambda: all(fleet.job(j).get("JobState") == "COMPLETED" for j in (running, after)),
        timeout=180,
        interval=2,
        what=f"jobs {running} and {after} done",
    )
    assert fleet.job(running).get("Restarts") == "0", fleet.job(running)


@pytest.mark.timeout(480)
def test_a_worker_drained_by_a_health_check_moves_off_its_node(fleet: Fleet) -> None:
    """The GPU health check's drain (simulated: the same `scontrol update` the check makes, with its reason prefix) on
    an idle worker of a group that opts in: slurmctl cordons the Kubernetes node, labelled with why, and the pod
    comes back on another node, registered anew (idle, not drained). An administrator's drain is left alone."""
    placement = fleet.placement()
    admin = next(w for w, n in placement.items() if n == NODES[0])
    victim, bad_node = next((w, n) for w, n in placement.items() if n in NODES[1:])
    old_uid = fleet.workers()[victim]["metadata"]["uid"]
    fleet.login("scontrol", "update", f"NodeName={admin}", "State=DRAIN", "Reason=admin: cable check")
    t0 = time.monotonic()
    fleet.login("scontrol", "update", f"NodeName={victim}", "State=DRAIN", "Reason=slurmctl-gpu: simulated XID 79")
    try:

        def cordoned() -> dict[str, Any] | None:
            obj = json.loads(fleet.node.kubectl("get", "node", bad_node, "-o", "json").stdout)
            return obj if obj["spec"].get("unschedulable") else None

        node = until(cordoned, timeout=120, interval=2, what=f"{bad_node} cordoned")
        cordon_s = time.monotonic() - t0
        assert node["metadata"]["labels"].get("slurm.slurmctl.io/unhealthy") == "gpu", node["metadata"]["labels"]
        assert "simulated XID 79" in node["metadata"]["annotations"].get("slurm.slurmctl.io/unhealthy-reason", "")

        def moved() -> bool:
            pod = fleet.workers().get(victim)
            return (
                pod is not None
                and pod["metadata"]["uid"] != old_uid
                and pod["spec"].get("nodeName") not in ("", bad_node)
                and pod_ready(pod)
            )

        fleet.until(moved, timeout=240, interval=2, what=f"{victim} Ready on another node")
        moved_s = time.monotonic() - t0
        until(
            lambda: (
                fleet.slurm_node(victim).get("State", "").startswith("IDLE")
                and "DRAIN" not in fleet.slurm_node(victim).get("State", "")
            ),
            timeout=120,
            what=f"{victim} idle in Slurm again",
        )
        assert any(bad_node in m and "simulated XID 79" in m for m in fleet.events("Replacing"))
        # The administrator's drain: still there, its pod untouched.
        assert fleet.slurm_node(admin).get("Reason", "").startswith("admin: cable check")
        assert fleet.workers()[admin]["spec"]["nodeName"] == NODES[0]
        print(f"unhealthy worker: node cordoned after {cordon_s:.0f}s, pod Ready on another node after {moved_s:.0f}s")
    finally:
        fleet.node.kubectl("uncordon", bad_node, check=False)
        fleet.node.kubectl("label", "node", bad_node, "slurm.slurmctl.io/unhealthy-", check=False)
        fleet.login("scontrol", "update", f"NodeName={admin}", "State=RESUME")
