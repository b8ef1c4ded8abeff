"""The local node runs real pods: Ready, commands run, no route out (ClusterIPs only), cluster DNS only, PVCs bind,
one per machine."""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from test.e2e.harness import Node, eventually, node_script
from test.e2e.pods.machine import TEST_IMAGE

pytestmark = [pytest.mark.e2e, pytest.mark.pods]


@pytest.fixture
def ns(node: Node) -> Iterator[str]:
    name = f"pods-{uuid.uuid4().hex[:8]}"
    node.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        node.kubectl("delete", "namespace", name, "--wait=false", check=False)


def apply(node: Node, ns: str, *objects: dict[str, Any]) -> None:
    node.kubectl(
        "apply", "-n", ns, "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})
    )


def pod(name: str, command: str, mounts: list[dict[str, str]] | None = None, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "c",
        "image": TEST_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", command],
    }
    if mounts:
        container["volumeMounts"] = mounts
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [container],
            **spec,
        },
    }


def get(node: Node, *args: str) -> dict[str, Any]:
    proc = node.kubectl("get", *args, "-o", "json", check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else {}


async def wait_phase(node: Node, ns: str, name: str, phase: str, timeout: float = 60) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        obj = get(node, "pod", "-n", ns, name)
        status = obj.get("status", {})
        if status.get("phase") == "Failed" and phase != "Failed":
            raise AssertionError(f"pod {ns}/{name} failed: {status}")
        return obj if status.get("phase") == phase else None

    return await eventually(probe, timeout=timeout, interval=0.3, what=f"pod {ns}/{name} {phase}")


async def test_node_is_ready_and_up_is_idempotent(node: Node, tmp_path: Path) -> None:
    assert node.state_dir is not None
    obj = get(node, "node", node.node_name)
    ready = [c for c in obj["status"]["conditions"] if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True"
    assert {"type": "InternalIP", "address": "127.0.0.1"} in obj["status"]["addresses"]

    status = node_script("status", node.state_dir)
    assert status.returncode == 0, status.stdout + status.stderr
    for daemon in ("containerd", "dnsmasq", "dns-watcher", "kube-scheduler", "kubelet"):
        assert f"{daemon} " in status.stdout and "not running" not in status.stdout

    again = node_script("up", node.state_dir, timeout=30)
    assert again.returncode == 0 and "already up" in again.stderr, again.stderr

    # The bridge, DNS namespace and image store are machine-wide: a second cluster's node must refuse, naming the
    # first (nodes join the first cluster with `add`).
    other = node_script("up", tmp_path / "other", timeout=30)
    assert other.returncode != 0
    assert "another node is up" in other.stderr and str(node.state_dir) in other.stderr, other.stderr
    assert not (tmp_path / "other" / "node").exists()
    refused = node_script("reclaim", tmp_path / "other", timeout=30)
    assert refused.returncode != 0 and "another node is up" in refused.stderr, refused.stderr
    assert node_script("status", node.state_dir).returncode == 0


# What a node killed with its machine leaves (a bridge naming its state directory, the DNS namespace, mounts), made
# with names (and an image store) of their own so that the node the other tests use stays up beside it.
RECLAIM_NAMES = {
    "SLURMCTL_NODE_BRIDGE": "slurmctlt0",
    "SLURMCTL_NODE_DNS_NS": "slurmctl-dnst",
    "SLURMCTL_CONTAINERD_DIR": "/nonexistent/slurmctl-reclaim-test",
}


def link_exists(name: str) -> bool:
    return Path(f"/sys/class/net/{name}").exists()


def mounted(path: Path) -> bool:
    return any(line.split()[4] == str(path) for line in Path("/proc/self/mountinfo").read_text().splitlines())


@pytest.fixture
def abandoned_node(tmp_path: Path) -> Iterator[Path]:
    bridge, netns = RECLAIM_NAMES["SLURMCTL_NODE_BRIDGE"], RECLAIM_NAMES["SLURMCTL_NODE_DNS_NS"]
    owner = tmp_path / "abandoned"
    volume = owner / "node" / "kubelet" / "pods" / "volume"
    volume.mkdir(parents=True)
    (owner / "pids").mkdir()
    subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], check=True)
    try:
        subprocess.run(["ip", "link", "set", bridge, "alias", str(owner)], check=True)
        subprocess.run(["ip", "netns", "add", netns], check=True)
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(volume)], check=True)
        yield owner
    finally:
        if mounted(volume):
            subprocess.run(["umount", str(volume)], check=False)
        subprocess.run(["ip", "netns", "delete", netns], check=False, capture_output=True)
        if link_exists(bridge):
            subprocess.run(["ip", "link", "delete", bridge], check=False)


def test_a_node_whose_processes_are_gone_is_reclaimed_and_a_live_one_never(
    abandoned_node: Path, tmp_path: Path
) -> None:
    bridge, netns = RECLAIM_NAMES["SLURMCTL_NODE_BRIDGE"], RECLAIM_NAMES["SLURMCTL_NODE_DNS_NS"]
    volume = abandoned_node / "node" / "kubelet" / "pods" / "volume"
    # While one of its recorded processes runs, the node is someone's: nothing of it is touched.
    with subprocess.Popen(["bash", "-c", "read -r _", "kubelet"], stdin=subprocess.PIPE) as kubelet:
        (abandoned_node / "pids" / "kubelet").write_text(f"{kubelet.pid}\n")
        refused = node_script("reclaim", tmp_path / "next", timeout=60, env=RECLAIM_NAMES)
        assert refused.returncode != 0 and str(abandoned_node) in refused.stderr, refused.stderr
        assert link_exists(bridge) and Path(f"/run/netns/{netns}").exists() and mounted(volume)
        kubelet.kill()
    # Its last process gone (as after a machine restart), the next node takes the machine back.
    reclaimed = node_script("reclaim", tmp_path / "next", timeout=60, env=RECLAIM_NAMES)
    assert reclaimed.returncode == 0, reclaimed.stderr
    assert "processes are all gone" in reclaimed.stderr
    assert not link_exists(bridge)
    assert not Path(f"/run/netns/{netns}").exists()
    assert not mounted(volume) and not (abandoned_node / "node").exists()


async def test_pod_runs_a_command_with_no_route_out(node: Node, ns: str) -> None:
    """Two routes only: the pod network, and the Service network through the bridge's address, where the node DNATs
    ClusterIPs (the `kubernetes` Service's to the API server on loopback)."""
    api = "nc -w 3 10.96.0.1 443 </dev/null && echo kubernetes Service reachable"
    apply(node, ns, pod("hello", f"echo hello from $(hostname); ip route; ip addr show eth0; {api}"))
    await wait_phase(node, ns, "hello", "Succeeded")
    out = node.kubectl("logs", "-n", ns, "hello").stdout
    assert "hello from hello" in out
    routes = [line for line in out.splitlines() if "dev eth0" in line and "inet" not in line]
    pairs = sorted(" ".join(r.split()[:3]) for r in routes)
    assert pairs == ["10.244.0.0/16 dev eth0", "10.96.0.0/16 via 10.244.0.1"], out
    assert "default" not in out, out
    assert "kubernetes Service reachable" in out, out


async def test_dns_resolves_statefulset_names_and_nothing_outside(node: Node, ns: str) -> None:
    labels = {"app": "web"}
    apply(
        node,
        ns,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {"clusterIP": "None", "selector": labels, "ports": [{"name": "p", "port": 80}]},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "web"},
            "spec": {
                "serviceName": "web",
                "replicas": 2,
                "podManagementPolicy": "Parallel",
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "terminationGracePeriodSeconds": 1,
                        "containers": [
                            {
                                "name": "c",
                                "image": TEST_IMAGE,
                                "imagePullPolicy": "Never",
                                "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"],
                            }
                        ],
                    },
                },
            },
        },
    )
    pods = [await wait_phase(node, ns, f"web-{i}", "Running") for i in range(2)]
    ips = [p["status"]["podIP"] for p in pods]

    def resolves(name: str, expect: list[str]) -> Callable[[], Awaitable[bool]]:
        """Through the pod's own libc resolver (search path, ndots): `ping` names the address it resolved."""

        async def probe() -> bool:
            out = node.exec(ns, "web-0", "ping", "-c1", "-W2", name, check=False).stdout
            match = re.search(rf"PING {re.escape(name)} \(([0-9.]+)\)", out)
            return bool(match) and match is not None and match.group(1) in expect

        return probe

    for name, expect in [
        ("web-1.web", [ips[1]]),
        ("web-0.web", [ips[0]]),
        (f"web-1.web.{ns}.svc.cluster.local", [ips[1]]),
        (f"web.{ns}", ips),
        ("web", ips),
    ]:
        await eventually(resolves(name, expect), timeout=20, what=f"{name} -> {expect}")
    # Every address of the headless Service, straight from the pod DNS server.
    both = node.exec(ns, "web-0", "nslookup", f"web.{ns}.svc.cluster.local").stdout
    assert all(ip in both for ip in ips), both

    outside = node.exec(ns, "web-0", "ping", "-c1", "-W2", "example.com", check=False)
    assert outside.returncode != 0 and "bad address" in outside.stdout + outside.stderr, outside
    lookup = node.exec(ns, "web-0", "nslookup", "example.com", check=False)
    assert lookup.returncode != 0, lookup.stdout


async def test_pvc_binds_with_the_default_storage_class_and_a_pod_writes_to_it(node: Node, ns: str) -> None:
    apply(
        node,
        ns,
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Mi"}}},
        },
        pod(
            "writer",
            "echo written > /data/hello && cat /data/hello",
            mounts=[{"name": "data", "mountPath": "/data"}],
            volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        ),
    )

    async def bound() -> dict[str, Any] | None:
        pvc = get(node, "pvc", "-n", ns, "data")
        return pvc if pvc.get("status", {}).get("phase") == "Bound" else None

    pvc = await eventually(bound, timeout=30, what="PVC data Bound")
    await wait_phase(node, ns, "writer", "Succeeded")
    assert node.kubectl("logs", "-n", ns, "writer").stdout.strip() == "written"
    pv = get(node, "pv", pvc["spec"]["volumeName"])
    path = Path(pv["spec"]["hostPath"]["path"])
    assert (path / "hello").read_text() == "written\n"


async def test_a_missing_image_is_never_pulled_from_a_registry(node: Node, ns: str) -> None:
    """Every registry host in containerd's config points at a closed loopback port, so a pull fails right there."""
    missing = pod("missing", "true")
    missing["spec"]["containers"][0] |= {"image": "registry.k8s.io/slurmctl-none:1", "imagePullPolicy": "IfNotPresent"}
    apply(node, ns, missing)

    async def pull_refused() -> str | None:
        events = node.kubectl("get", "events", "-n", ns, "-o", "jsonpath={.items[*].message}", check=False).stdout
        return events if "127.0.0.1:9" in events else None

    events = await eventually(pull_refused, timeout=30, interval=0.5, what="a pull refused on 127.0.0.1:9")
    assert "connection refused" in events, events
