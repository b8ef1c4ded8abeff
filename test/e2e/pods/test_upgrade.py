"""A Slurm upgrade with jobs running, on real pods: a cluster on 24.11 with accounting (the fault modules' cluster:
two workers, a login node, slurmrestd, a test MariaDB) moves to 26.05 (spec.slurm.version) in Slurm's order.

One job runs across the whole upgrade (on worker 1, which the worker roll takes first: its drain waits for the job
until the test lets it end), one is pending from before it (a dependency on the first). Both end COMPLETED, started
once; sacct still shows the jobs from before the upgrade; sinfo and srun work after it; every daemon says 26.05.
Needs the 26.05 images (`SLURM_LINE=26.05 make images`, which `make test` builds: images-both-lines).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from test.e2e.harness import Node
from test.e2e.pods.conftest import require_images
from test.e2e.pods.faults import Cluster, bring_up, outcome
from test.e2e.pods.slurm import DEFAULT_SLURM_LINE, SLURM_LINE, UPGRADE_IMAGES, UPGRADE_LINE
from test.waiting import until

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(SLURM_LINE != DEFAULT_SLURM_LINE, reason="upgrades from the default line (24.11)"),
]
NAME = "upg"
TO = UPGRADE_LINE
OPERATOR_ARGS = ("--allow-root-jobs",)


@pytest.fixture(scope="module")
def cluster(node: Node, kube: Any, operator: Path) -> Iterator[Cluster]:
    require_images(node, list(UPGRADE_IMAGES))
    yield bring_up(node, kube, operator, NAME, pinned=False)


def slurm_status(c: Cluster) -> dict[str, Any]:
    return c.kube.json("slurmcluster", c.name).get("status", {}).get("slurm") or {}


def image(c: Cluster, pod: str) -> str:
    found = c.pod(pod)
    return found["spec"]["containers"][0]["image"] if found else ""


@pytest.mark.timeout(1200)  # a first module copies images to nodes 2 and 3, the cluster starts (~3 min), the upgrade
def test_an_upgrade_to_26_05_keeps_running_and_pending_jobs(cluster: Cluster) -> None:
    c = cluster
    before = c.sbatch(wrap="true")  # a job from before the upgrade, already in accounting
    until(lambda: c.state(before) == "COMPLETED", timeout=60, interval=1, what=f"job {before} completed")
    running = c.held("upgrade", "-w", c.w1)
    c.running(running)
    pending = c.sbatch(f"--dependency=afterok:{running}", wrap="srun hostname")
    assert c.state(pending) == "PENDING"
    old = {p: c.kube.json("pod", p)["metadata"]["uid"] for p in (c.controller_pod, c.w0, c.w1, c.login_pod)}

    c.patch({"op": "add", "path": "/spec/slurm/version", "value": TO})
    # slurmdbd first, after the backup; then slurmctld; the workers wait behind worker 1's job.
    until(lambda: slurm_status(c).get("phase") == "Workers", timeout=300, interval=2, what="the upgrade at the workers")
    status = slurm_status(c)
    assert status["components"]["accounting"] == TO and status["components"]["controller"] == TO, status
    assert status["components"]["login"] == "24.11" and status["components"]["rest"] == "24.11", status
    assert status["backupClaim"] == f"{NAME}-slurmdbd-backup"
    backup = c.kube.run("logs", f"job/{NAME}-slurmdbd-backup-2411-2605")
    assert "backed up slurm_acct_db to /backup/slurm_acct_db-24.11-to-26.05-" in backup, backup
    assert image(c, c.w1).endswith(":0.1.0") and c.state(running) == "RUNNING"
    assert (c.pod(c.w1) or {}).get("metadata", {}).get("uid") == old[c.w1]
    assert c.state(pending) == "PENDING"

    c.release("upgrade")
    until(
        lambda: slurm_status(c).get("version") == TO and slurm_status(c).get("phase") == "Current",
        timeout=300,
        interval=2,
        what="every component on 26.05",
    )
    row = outcome(c, "Slurm 24.11 -> 26.05", [running, pending], timeout=120)
    assert row.completed == [running, pending] and not row.requeued, row
    assert c.starts("upgrade") == [running], "the running job started more than once"
    sacct = c.login("sacct", "-a", "-n", "-P", "-X", "-j", f"{before},{running},{pending}", "--format=JobID,State")
    assert dict(line.split("|")[:2] for line in sacct.split()) == {
        before: "COMPLETED",
        running: "COMPLETED",
        pending: "COMPLETED",
    }, sacct
    # Every daemon says 26.05; the login pod's commands (the jail's) work against them.
    for pod, container, command in (
        (c.controller_pod, "slurmctld", "slurmctld -V"),
        (c.w0, "slurmd", "slurmd -V"),
        (c.w1, "slurmd", "slurmd -V"),
        (f"deployment/{NAME}-accounting", "slurmdbd", "slurmdbd -V"),
        (f"deployment/{NAME}-rest", "slurmrestd", "slurmrestd -V"),
    ):
        said = c.kube.exec(pod, container, "sh", "-c", command).strip()
        assert said.split()[-1].startswith(f"{TO}."), (pod, said)  # "slurm-wlm 26.05.5" (Debian's name)
    until(lambda: c.idle(c.w0) and c.idle(c.w1), timeout=120, interval=2, what="both workers idle")
    assert "idle" in c.as_user("sinfo -h -o %t")
    assert len(c.as_user("srun -N2 hostname").split()) == 2
    assert "24.11" not in c.kube.json("slurmcluster", c.name)["status"]["slurm"]["components"].values()
    # An Event per stage the cluster component saw (a short stage can pass between two of its passes), and the end.
    events = c.kube.json("events", "--field-selector", f"involvedObject.name={NAME}")["items"]
    stages = [
        e["reason"]
        for e in sorted(events, key=lambda e: e.get("eventTime") or e.get("firstTimestamp") or "")
        if e["reason"].startswith("SlurmUpgrade")
    ]
    assert "SlurmUpgradeWorkers" in stages and stages[-1] == "SlurmUpgradeDone", stages
