"""The NCCL benchmark CronJob: schedule, suspension, limits and the settings the benchmark script reads."""

from __future__ import annotations

from typing import Any

from slurmctl.api.v1 import SlurmCluster
from slurmctl.render.benchmark import render_benchmark_cronjob
from test.unit.render.samples import manifests, sample, sample_doc


def _env(cronjob: dict[str, Any]) -> dict[str, str]:
    (container,) = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in container["env"]}


def test_the_research_benchmark() -> None:
    cronjob = render_benchmark_cronjob(sample("research"))
    assert cronjob["apiVersion"] == "batch/v1"
    spec = cronjob["spec"]
    assert (spec["schedule"], spec["suspend"], spec["concurrencyPolicy"]) == ("0 3 * * *", False, "Forbid")
    assert spec["successfulJobsHistoryLimit"] >= 1 and spec["failedJobsHistoryLimit"] >= 1
    assert spec["jobTemplate"]["spec"]["activeDeadlineSeconds"] >= 1800
    assert _env(cronjob) == {
        "NCCL_MIN_BYTES": str(512 * 2**20),
        "NCCL_MAX_BYTES": str(8 * 2**30),
        "NCCL_STEP_FACTOR": "2",
        "NCCL_MIN_BUS_BANDWIDTH_GBPS": "400",
        "NCCL_DRAIN_ON_FAILURE": "true",
        "NCCL_TIMEOUT_SECONDS": "1800",
        "GPUS_PER_NODE": "8",
        "JAIL_DIR": "/mnt/jail",
        "TERMINATION_LOG": "/dev/termination-log",
    }
    pod = spec["jobTemplate"]["spec"]["template"]["spec"]
    assert {v["name"] for v in pod["volumes"]} >= {"slurm-configs", "munge-key"}
    assert pod["containers"][0]["image"] == "ghcr.io/slurmctl/nccl-benchmark:0.1.0"


def test_the_job_mounts_the_jail_and_reports_through_its_termination_message() -> None:
    """all_reduce_perf is installed into the jail by the Job (the steps run there); what a run found is its report."""
    cluster = sample("research")
    pod = render_benchmark_cronjob(cluster)["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert {"name": "jail", "mountPath": "/mnt/jail"} in container["volumeMounts"]
    (jail,) = [v for v in pod["volumes"] if v["name"] == "jail"]
    assert jail == {"name": "jail", "persistentVolumeClaim": {"claimName": cluster.spec.jail.volume.claim_name}}
    assert container["terminationMessagePath"] == "/dev/termination-log"
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_a_disabled_benchmark_is_a_suspended_cronjob_and_cpu_clusters_have_none() -> None:
    doc = sample_doc("research")
    doc["spec"]["healthChecks"]["ncclBenchmark"]["enabled"] = False
    (cronjob,) = [o for o in manifests(SlurmCluster.model_validate(doc)) if o["kind"] == "CronJob"]
    assert cronjob["spec"]["suspend"] is True
    assert not [o for o in manifests(sample("minimal")) if o["kind"] == "CronJob"]


def test_sizes_and_gpus_per_node_follow_the_spec() -> None:
    doc = sample_doc("research")
    doc["spec"]["healthChecks"]["ncclBenchmark"].update(minBytes="1M", maxBytes=4096, minBusBandwidthGBps=12.5)
    doc["spec"]["workers"].append({"name": "l4", "size": 2, "gpus": 4})
    env = _env(render_benchmark_cronjob(SlurmCluster.model_validate(doc)))
    assert (env["NCCL_MIN_BYTES"], env["NCCL_MAX_BYTES"]) == ("1000000", "4096")
    assert env["NCCL_MIN_BUS_BANDWIDTH_GBPS"] == "12.5"
    # --gpus-per-node must fit on every GPU node, or the smaller ones would fail and be drained.
    assert env["GPUS_PER_NODE"] == "4"
