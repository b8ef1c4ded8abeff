"""Several Kubernetes nodes on this machine (hack/node.sh add): workers spread over them, topology from their labels,
a node lost with a job on it, the controller's node lost with a standby slurmctld.

Nodes 2 and 3 join the package's cluster for this module only (each its own kubelet and containerd; `crash` kills one
as a machine failure would: pods off the network, every process SIGKILLed). One SlurmCluster is shared by the tests,
in order. Node labels: switch `sw1` = nodes 1 and 2, `sw2` = node 3. The operator runs with a short lost-node
threshold so that the module stays short; kube-controller-manager keeps its default 40 s before a silent node is
NotReady. Each test prints its figures (seconds from the crash).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
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
        slurm={"extraConfig": "SlurmdTimeout=30", "allowOperatorOwnedKeys": True},
    )
    objects[1]["spec"]["workers"][0]["size"] = 3
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
    """Slurm's tree has one switch per label value with the workers of those nodes; a job asking for one switch
    gets two workers of sw1."""
    placement = fleet.placement()
    expected = {
        switch: sorted(w for w, n in placement.items() if SWITCHES[n] == switch) for switch in set(SWITCHES.values())
    }
    shown = fleet.login("scontrol", "show", "topology")
    print(shown)
    for switch, members in expected.items():
        line = next((ln for ln in shown.splitlines() if f"SwitchName={switch} " in ln), "")
        assert line, f"no switch {switch} in:\n{shown}"
        listed = fleet.login("scontrol", "show", "hostnames", line.split("Nodes=")[1].split()[0]).split()
        assert sorted(listed) == members, (switch, listed, members)
    ran = fleet.in_jail("srun -N2 --switches=1@60 hostname", timeout=120).split()
    assert sorted(ran) == expected["sw1"], ran


def test_a_lost_node_is_drained_its_pods_move_and_slurm_works_again(fleet: Fleet) -> None:
    """Node 3 crashes with a job on its worker: slurmctl drains that Slurm node once Kubernetes has said NotReady for
    the threshold and Slurm cannot reach slurmd, removes the stranded pod, the StatefulSet places it on another node,
    its new slurmd registers, and `srun -N3` works again; node 3's return duplicates nothing."""
    lost_node = NODES[2]
    (victim,) = [w for w, n in fleet.placement().items() if n == lost_node]
    job = (
        fleet.in_jail(f"sbatch --parsable --requeue -w {victim} -o /tmp/{NAME}-%j.out --wrap 'sleep 600'")
        .strip()
        .split(";")[0]
    )
    until(lambda: fleet.job(job).get("JobState") == "RUNNING", timeout=60, what=f"job {job} running")
    old_uid = fleet.workers()[victim]["metadata"]["uid"]
    assert fleet.node.state_dir is not None
    t0 = time.monotonic()
    crashed = node_script("crash", fleet.node.state_dir, "3")
    assert crashed.returncode == 0, crashed.stderr
    figures: dict[str, float] = {}

    def drained() -> bool:
        fields = fleet.slurm_node(victim)
        return f"slurmctl: node {lost_node} NotReady" in fields.get("Reason", "")

    until(drained, timeout=240, interval=2, what=f"{victim} drained for {lost_node}")
    figures["drained"] = time.monotonic() - t0

    def moved() -> bool:
        pod = fleet.workers().get(victim)
        return (
            pod is not None
            and pod["metadata"]["uid"] != old_uid
            and pod["spec"].get("nodeName") not in ("", lost_node)
            and pod_ready(pod)
        )

    until(moved, timeout=300, interval=2, what=f"{victim} Ready on another node")
    figures["pod ready elsewhere"] = time.monotonic() - t0
    until(lambda: len(fleet.srun_all()) == 3, timeout=240, interval=3, what="srun -N3 working again")
    figures["srun -N3 again"] = time.monotonic() - t0
    state = fleet.job(job)
    print(f"job {job} on {victim}: JobState={state.get('JobState')} Restarts={state.get('Restarts')}")
    print("lost node: " + ", ".join(f"{k} {v:.0f}s" for k, v in figures.items()))

    started = node_script("start", fleet.node.state_dir, "3")
    assert started.returncode == 0, started.stderr
    # Back: node 3's kubelet finds its old pod gone from the API and starts nothing of it; Slurm keeps one node per
    # worker and all of them answer.
    on_lost = fleet.node.kubectl("get", "pods", "-A", "--field-selector", f"spec.nodeName={lost_node}", "-o", "name")
    assert f"pod/{victim}" not in on_lost.stdout.split()
    assert len(fleet.workers()) == 3
    nodes_in_slurm = fleet.login("sinfo", "-h", "-N", "-o", "%N").split()
    assert sorted(set(nodes_in_slurm)) == sorted(fleet.workers()), nodes_in_slurm
    assert len(fleet.srun_all()) == 3
    fleet.login("scancel", job)
