"""The `benchmark` reconciler: the NCCL CronJob exists while there are GPU groups, suspended while disabled; what the
last finished run found is BenchmarkPassed, read from its pod's termination message (the benchmark's report)."""

from __future__ import annotations

import json
from typing import Any

from slurmctl.reconcilers.benchmark import benchmark_result
from slurmctl.reconcilers.observed import BenchmarkRun
from slurmctl.render import meta
from slurmctl.render.kinds import CRONJOB
from test.unit.reconcilers.env import NAME, NS, Env, spec

CRON = f"{NAME}-nccl-benchmark"
GPU = {"name": "gpu", "size": 1, "gpus": 8}


async def test_no_gpu_groups_means_no_cronjob_and_enabling_it_there_is_a_spec_error() -> None:
    async with Env() as env:
        env.create(spec())
        await env.run("benchmark")
        assert env.names(CRONJOB) == []
        assert env.reason("BenchmarkScheduled") == ("False", "Disabled")
        env.edit(lambda s: s.update(healthChecks={"ncclBenchmark": {"enabled": True}}))
        await env.run()
        assert env.reason("SpecValid") == ("False", "InvalidSpec")
        assert env.names(CRONJOB) == []


async def test_the_cronjob_follows_gpu_groups_and_the_enabled_switch() -> None:
    async with Env() as env:
        body = spec(healthChecks={"ncclBenchmark": {"enabled": True, "schedule": "0 3 * * *"}})
        body["workers"].append(GPU)
        env.create(body)
        await env.run("benchmark")
        cron = env.get(CRONJOB, CRON)
        assert cron is not None and cron["spec"]["suspend"] is False
        assert env.reason("BenchmarkScheduled") == ("True", "Scheduled")
        env.edit(lambda s: s["healthChecks"]["ncclBenchmark"].update(enabled=False))
        await env.run("benchmark")
        assert env.get(CRONJOB, CRON)["spec"]["suspend"] is True  # type: ignore[index]
        assert env.reason("BenchmarkScheduled") == ("False", "Disabled")
        env.edit(lambda s: s.update(workers=s["workers"][:1]))
        await env.run("benchmark")
        assert env.names(CRONJOB) == []
        mark = env.mark()
        await env.run("benchmark")
        assert env.writes_since(mark) == []


# ---- what the last run found: BenchmarkPassed ---------------------------------------------------------------------

NO_GPU = "could not run: no GPU visible to CUDA in the benchmark step (no CUDA-capable device)"
NOT_RUN = {
    "exit": 2, "nodes": 2, "passed": 0, "skipped": 0, "drained": 0,
    "not_run": [{"detail": NO_GPU, "nodes": ["c-worker-gpu-0", "c-worker-gpu-1"], "count": 2}],
}  # fmt: skip


def run_ends(env: Env, job: str, exit_code: int, message: str, *, at: str = "2026-01-01T03:00:40Z") -> None:
    """A benchmark Job's pod ends, as the Job controller and the kubelet leave it (the CronJob names its Jobs)."""
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": f"uid-{job}", "controller": True}
    terminated = {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error", "finishedAt": at}
    if message:
        terminated["message"] = message
    env.fake.put(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{job}-abcde",
                "namespace": NS,
                "labels": meta.labels(NAME, "benchmark"),
                "ownerReferences": [owner],
                "creationTimestamp": at,
            },
            "status": {
                "phase": "Succeeded" if exit_code == 0 else "Failed",
                "containerStatuses": [{"name": "nccl-benchmark", "state": {"terminated": terminated}}],
            },
        }
    )


async def gpu_cluster(env: Env) -> None:
    body = spec(healthChecks={"ncclBenchmark": {"enabled": True}})
    body["workers"].append(GPU)
    env.create(body)
    await env.run("benchmark")


async def test_could_not_run_is_a_condition_naming_each_node_and_the_cause_and_one_event() -> None:
    async with Env() as env:
        await gpu_cluster(env)
        assert env.condition("BenchmarkPassed") is None, "no run has finished yet"
        mark = env.mark()

        run_ends(env, f"{CRON}-29000000", 2, json.dumps(NOT_RUN))
        await env.run("benchmark")

        assert env.reason("BenchmarkPassed") == ("False", "CouldNotRun")
        assert env.reason("BenchmarkScheduled") == ("True", "Scheduled")
        cond = env.condition("BenchmarkPassed")
        assert cond is not None
        assert cond["message"] == (
            f"Job {CRON}-29000000 (finished 2026-01-01T03:00:40Z) could not benchmark 2 of 2 nodes, nothing drained:"
            f" c-worker-gpu-0, c-worker-gpu-1: {NO_GPU}"
        )
        assert [e for e in env.events() if e[0] == "Warning"] == [("Warning", "BenchmarkCouldNotRun", cond["message"])]
        # Nothing but the status and the Event: no node is drained, cordoned or touched for a run that measured nothing.
        writes = {(w.kind, w.verb) for w in env.writes_since(mark)}
        assert writes == {("SlurmCluster", "apply"), ("Event", "create")}, writes

        await env.run("benchmark")
        assert len([e for e in env.events() if e[0] == "Warning"]) == 1, "the same finding is said once"


async def test_the_newest_run_decides_and_each_new_finding_is_an_event() -> None:
    async with Env() as env:
        await gpu_cluster(env)
        run_ends(env, f"{CRON}-1", 2, json.dumps(NOT_RUN), at="2026-01-01T03:00:00Z")
        passed = {"exit": 0, "nodes": 2, "passed": 2, "skipped": 0, "drained": 0}
        run_ends(env, f"{CRON}-2", 0, json.dumps(passed), at="2026-01-02T03:00:00Z")
        await env.run("benchmark")
        assert env.reason("BenchmarkPassed") == ("True", "Passed")
        assert env.condition("BenchmarkPassed")["message"].endswith(": 2 of 2 nodes passed")  # type: ignore[index]
        assert [e for e in env.events() if e[0] == "Warning"] == []

        failed = {
            "exit": 1, "nodes": 2, "passed": 1, "skipped": 0, "drained": 1,
            "failed": [{"detail": "avg bus bandwidth 12 GB/s below required 50 GB/s", "nodes": ["c-worker-gpu-1"],
                        "count": 1}],
        }  # fmt: skip
        run_ends(env, f"{CRON}-3", 1, json.dumps(failed), at="2026-01-03T03:00:00Z")
        await env.run("benchmark")
        assert env.reason("BenchmarkPassed") == ("False", "NodesFailed")
        message = env.condition("BenchmarkPassed")["message"]  # type: ignore[index]
        assert message.endswith(
            ": 1 of 2 nodes failed (1 drained): c-worker-gpu-1: avg bus bandwidth 12 GB/s below required 50 GB/s"
        )
        assert [(t, r) for t, r, _ in env.events() if t == "Warning"] == [("Warning", "BenchmarkNodesFailed")]


async def test_a_run_that_died_without_a_report_says_what_its_log_said() -> None:
    async with Env() as env:
        await gpu_cluster(env)
        run_ends(env, f"{CRON}-7", 137, "nccl-benchmark: node=c-worker-gpu-0 running: srun ...")
        running = {"name": f"{CRON}-8-xyz", "namespace": NS, "labels": meta.labels(NAME, "benchmark")}
        env.fake.put({"apiVersion": "v1", "kind": "Pod", "metadata": running, "status": {"phase": "Running"}})
        await env.run("benchmark")

        assert env.reason("BenchmarkPassed") == ("False", "JobFailed")
        assert env.condition("BenchmarkPassed")["message"] == (  # type: ignore[index]
            f"Job {CRON}-7 (finished 2026-01-01T03:00:40Z) ended with exit status 137 and no report:"
            " nccl-benchmark: node=c-worker-gpu-0 running: srun ..."
        )


async def test_a_benchmark_that_could_not_run_leaves_an_available_cluster_available() -> None:
    async with Env() as env:
        body = spec(healthChecks={"ncclBenchmark": {"enabled": True}})
        body["workers"].append(GPU)
        await env.available(body)
        assert env.phase() == "Available"

        run_ends(env, f"{CRON}-29000000", 2, json.dumps(NOT_RUN))
        await env.converge()

        assert env.reason("BenchmarkPassed") == ("False", "CouldNotRun")
        assert env.phase() == "Available"


def result(exit_code: int, message: str = "", report: dict[str, Any] | None = None) -> tuple[bool, str, str]:
    run = BenchmarkRun(job="j", finished="", exit_code=exit_code, report=report, said=message)
    ok, reason, text = benchmark_result(run)
    return ok, reason.value, text


def test_results_of_runs_that_could_not_start_or_list_few_names() -> None:
    error = {"exit": 2, "nodes": 0, "passed": 0, "skipped": 0, "drained": 0, "error": "cannot list nodes: sinfo failed"}
    assert result(2, report=error) == (
        False,
        "CouldNotRun",
        "Job j could not run, nothing drained: cannot list nodes: sinfo failed",
    )
    many = {
        **NOT_RUN,
        "nodes": 900,
        "not_run": [{"detail": NO_GPU, "nodes": ["n1", "n2"], "count": 880}],
        "omitted": 20,
    }
    assert result(2, report=many)[2] == (
        f"Job j could not benchmark 880 of 900 nodes, nothing drained: n1, n2 and 878 more: {NO_GPU}; 20 more nodes not"
        " listed"
    )
    assert result(0, report={"exit": 0, "nodes": 0}) == (True, "Passed", "Job j: no idle GPU node to benchmark")


def test_results_of_an_image_that_writes_no_report_follow_its_exit_status() -> None:
    said = "nccl-benchmark: node=gpu-0 not benchmarked, not drained: could not run: ..."
    assert result(2, said) == (False, "CouldNotRun", f"Job j could not run; nothing drained: {said}")
    assert result(1)[:2] == (False, "NodesFailed")
    assert result(0) == (True, "Passed", "Job j passed (no report)")
    assert result(143)[:2] == (False, "JobFailed")
