"""The `benchmark` component: the NCCL benchmark CronJob on clusters with GPU workers, BenchmarkScheduled, and
BenchmarkPassed, what the last finished run found.

A run's outcome reaches the operator through its pod, which the operator already watches (the Job's pods carry the
owned-children labels): the benchmark leaves a one-line JSON report as the container's termination message
(images/scripts/nccl_benchmark.py, `report`). The newest finished pod decides BenchmarkPassed (`benchmark_result`, a
pure function of it): True when every benchmarked node passed, False with `NodesFailed` (the benchmark drained them
when spec.healthChecks.ncclBenchmark.drainOnFailure says so), `CouldNotRun` (nodes it could not measure, or a run that
could not start: named with the cause; nothing is drained for it, here or by the benchmark) or `JobFailed` (the run
died without a report). Each new finding is also one Warning Event. Neither condition counts for the phase.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slurmctl.api.v1 import Reason, SlurmClusterStatus
from slurmctl.api.v1.status import BENCHMARK_PASSED, BENCHMARK_SCHEDULED
from slurmctl.reconcilers.base import ComponentReconciler
from slurmctl.reconcilers.component import component_is
from slurmctl.reconcilers.observation import Observation
from slurmctl.reconcilers.observed import BenchmarkRun, cluster_of_pod, last_benchmark_run
from slurmctl.reconcilers.plan import Note, Plan
from slurmctl.render import meta
from slurmctl.render.benchmark import COMPONENT
from slurmctl.render.kinds import CRONJOB, POD
from slurmctl.render.manifests import benchmark_objects
from slurmctl.runtime.handlers import enqueue_mapped
from slurmctl.runtime.manager import ControllerBuilder

# Kept short in conditions and Events (the nodes named are capped by the report already).
MAX_MESSAGE = 1024


class BenchmarkReconciler(ComponentReconciler):
    def watch(self, builder: ControllerBuilder) -> None:
        """The benchmark Jobs' pods: a run's outcome is its pod's termination message."""
        builder.watches(*POD, enqueue_mapped(cluster_of_pod), predicates=[component_is(COMPONENT)])


def plan(obs: Observation) -> Plan:
    spec = obs.loaded.cluster.spec
    nccl = spec.health_checks.nccl_benchmark
    name = meta.nccl_benchmark(obs.loaded.name)
    intents = benchmark_objects(obs.inputs())
    prune = obs.prune(CRONJOB, keep=[o["metadata"]["name"] for o in intents])
    if not spec.gpu_groups:
        if nccl.enabled:
            reason, message = Reason.NO_GPU_WORKERS, "spec.healthChecks.ncclBenchmark is enabled but no group has GPUs"
        else:
            reason, message = Reason.DISABLED, "spec.healthChecks.ncclBenchmark.enabled is false"
        cond = obs.condition(BENCHMARK_SCHEDULED, ok=False, reason=reason, message=message)
    elif nccl.enabled:
        message = f"CronJob {name} runs on schedule {nccl.schedule!r}"
        cond = obs.condition(BENCHMARK_SCHEDULED, ok=True, reason=Reason.SCHEDULED, message=message)
    else:
        message = f"CronJob {name} is suspended: spec.healthChecks.ncclBenchmark.enabled is false"
        cond = obs.condition(BENCHMARK_SCHEDULED, ok=False, reason=Reason.DISABLED, message=message)
    conditions = [cond]
    events: tuple[Note, ...] = ()
    run = last_benchmark_run(obs.pods.values())
    if run is not None:  # none finished yet (or all gone with their Jobs): the last word stands
        ok, reason, message = benchmark_result(run)
        if not ok and obs.is_news(BENCHMARK_PASSED, reason, message):
            events = (Note("Warning", f"Benchmark{reason.value}", message),)
        conditions.append(obs.condition(BENCHMARK_PASSED, ok=ok, reason=reason, message=message))
    status = SlurmClusterStatus(conditions=conditions)
    return Plan(BENCHMARK_SCHEDULED, apply=tuple(intents), delete=tuple(prune), events=events, status=status)


def benchmark_result(run: BenchmarkRun) -> tuple[bool, Reason, str]:
    """BenchmarkPassed for a finished run: whether it holds, its reason and its message (naming the Job and when it
    ended, then each node with what was found)."""
    when = f" (finished {run.finished})" if run.finished else ""
    head = f"Job {run.job}{when}"
    if run.report is None:
        return _without_report(head, run.exit_code, run.said)
    ok, reason, message = _from_report(head, run.report)
    return ok, reason, message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."


def _from_report(head: str, report: Mapping[str, Any]) -> tuple[bool, Reason, str]:
    """The report's exit status is the benchmark's: 0 passed, 1 nodes failed, 2 could not run."""
    code, nodes = report["exit"], _count(report, "nodes")
    failed, not_run = _groups(report, "failed"), _groups(report, "not_run")
    omitted = _count(report, "omitted")
    more = f"; {omitted} more nodes not listed" if omitted else ""
    if code == 0:
        if nodes == 0:
            return True, Reason.PASSED, f"{head}: no idle GPU node to benchmark"
        skipped = _count(report, "skipped")
        also = f", {skipped} skipped (busy)" if skipped else ""
        return True, Reason.PASSED, f"{head}: {_count(report, 'passed')} of {nodes} nodes passed{also}"
    if code == 1:
        count = sum(n for n, _ in failed)
        message = f"{head}: {count} of {nodes} nodes failed ({_count(report, 'drained')} drained): "
        message += "; ".join(text for _, text in failed)
        if not_run:
            message += "; could not benchmark " + "; ".join(text for _, text in not_run)
        return False, Reason.NODES_FAILED, message + more
    if code == 2:
        if isinstance(report.get("error"), str):
            return False, Reason.COULD_NOT_RUN, f"{head} could not run, nothing drained: {report['error']}"
        count = sum(n for n, _ in not_run)
        message = f"{head} could not benchmark {count} of {nodes} nodes, nothing drained: "
        return False, Reason.COULD_NOT_RUN, message + "; ".join(text for _, text in not_run) + more
    return False, Reason.JOB_FAILED, f"{head} ended with exit status {code}"


def _without_report(head: str, code: int, said: str) -> tuple[bool, Reason, str]:
    """An image older than the report, or a run that died before writing it: the container's exit status is read as
    the benchmark's, with what the pod said (its log's tail) as the detail; any other status is a failed Job."""
    said = f": {said}" if said else ""
    reason, ok, message = {
        0: (Reason.PASSED, True, f"{head} passed (no report{said})"),
        1: (Reason.NODES_FAILED, False, f"{head} found failing nodes{said}"),
        2: (Reason.COULD_NOT_RUN, False, f"{head} could not run; nothing drained{said}"),
    }.get(code, (Reason.JOB_FAILED, False, f"{head} ended with exit status {code} and no report{said}"))
    return ok, reason, message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."


def _count(report: Mapping[str, Any], key: str) -> int:
    value = report.get(key)
    return value if isinstance(value, int) and value >= 0 else 0


def _groups(report: Mapping[str, Any], key: str) -> list[tuple[int, str]]:
    """(nodes, "node-a, node-b and 3 more: what was found") for each group of the report's `key` list."""
    out = []
    for group in report.get(key) or []:
        if not isinstance(group, Mapping):
            continue
        names = [str(n) for n in group.get("nodes") or []]
        count = max(_count(group, "count"), len(names))
        listed = ", ".join(names) if names else f"{count} nodes"
        if names and count > len(names):
            listed += f" and {count - len(names)} more"
        out.append((count, f"{listed}: {group.get('detail', '')}"))
    return out
