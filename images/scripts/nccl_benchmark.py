#!/usr/bin/python3
"""NCCL all-reduce benchmark over every idle node of the cluster (installed as /usr/lib/slurmctl/nccl-benchmark).

Each idle, responding node runs nccl-tests' `all_reduce_perf` through `srun` (one benchmark per node at a time: a
node where one already runs or is queued is skipped). The "Avg bus bandwidth" line is compared with the threshold; a
node below it, or whose run crashed, timed out or printed no result, has failed. With draining enabled a failed node
is drained with a reason starting "slurmctl-nccl:" that says what was measured and what was required.

Only idle nodes are benchmarked: a node running users' jobs would give a meaningless number, and a drained or down
node cannot run the benchmark. When any node of the cluster has GPUs in its Gres, only such nodes are benchmarked
and `--gpus-per-node` is requested; a cluster that declares no GPU GRES benchmarks all idle nodes without it.

Environment: NCCL_MIN_BYTES (512M), NCCL_MAX_BYTES (8G), NCCL_STEP_FACTOR (2), NCCL_MIN_BUS_BANDWIDTH_GBPS (0: only
crashes fail), NCCL_DRAIN_ON_FAILURE (false), NCCL_TIMEOUT_SECONDS (1800, per node), GPUS_PER_NODE (8),
NCCL_PARTITION (all partitions), NCCL_BENCHMARK_BINARY (all_reduce_perf, found on PATH inside the jail),
NCCL_BENCHMARK_PATH (a directory inside the jail appended to the step's PATH: where entrypoint-nccl-benchmark installed
slurmctl's own all_reduce_perf, so that nccl-tests' one in the jail, if any, still comes first), NCCL_BENCHMARK_REPORT
(a file to write the run's outcome to, one line of JSON that the operator reads from the pod's termination message).

With one GPU per node the bus bandwidth is 0 by nccl-tests' definition (busbw = algbw * 2*(n-1)/n): such a run checks
that the all-reduce works and gives correct results, and the bandwidth threshold is not applied to it.

A run that could not take place says nothing about the node and never drains it: `all_reduce_perf` missing from the
jail, no GPU visible to CUDA in the step, srun missing or Slurm not answering, an allocation Slurm refuses for a
reason other than the node being busy. Such a node is reported as "could not run".

Exit status: 0 every benchmarked node passed (or none was idle), 1 a node failed (and was drained when draining is
on), 2 the benchmark could not run (bad settings, Slurm unreachable, or no node failed but some could not run).
Standard library only: it runs in a slim image.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

log = logging.getLogger("nccl-benchmark")

REASON_PREFIX = "slurmctl-nccl:"
JOB_NAME = "slurmctl-nccl-benchmark"
SLURM_TIMEOUT_SECONDS = 30
GRACE_SECONDS = 10
EXIT_OK, EXIT_FAILED, EXIT_ERROR = 0, 1, 2
# The report is a container's termination message, which the kubelet cuts at 4096 bytes.
REPORT_LIMIT = 4000
REPORT_DETAIL_LIMIT = 300

_SIZE = re.compile(r"^\s*(\d+)\s*([KMGT]?)B?\s*$", re.IGNORECASE)
_AVG_BUSBW = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)", re.MULTILINE)
_OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s+(\S+)", re.MULTILINE)
_RANKS = re.compile(r"^#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)", re.MULTILINE)
# Output of a step that never got to measure the node, with what to report. Matched only when the run gave no result.
_NOT_RUN = (
    (re.compile(r"execve\(\): \S+: (No such file or directory|Permission denied)|command not found"),
     "the benchmark binary is missing from the jail (see the Job's log: entrypoint-nccl-benchmark installs it)"),
    (re.compile(r"error while loading shared libraries: \S+"),
     "the benchmark binary cannot load its libraries in the jail"),
    (re.compile(r"no CUDA-capable device|cudaErrorNoDevice|CUDA driver version is insufficient|"
                r"cudaErrorInsufficientDriver|No devices were found", re.IGNORECASE),
     "no GPU visible to CUDA in the benchmark step"),
    (re.compile(r"Unable to contact slurm controller|Socket timed out on send/recv|Zero Bytes were transmitted|"
                r"Communication connection failure|Unable to confirm allocation|Unable to create step"),
     "Slurm did not answer or refused the step"),
    (re.compile(r"Unable to allocate resources"), "Slurm refused the allocation"),
)  # fmt: skip


class SettingsError(ValueError):
    """A setting from the environment is unusable; reported once, then the benchmark exits 2."""


class SlurmError(RuntimeError):
    """A Slurm client command failed or did not answer in time."""


@dataclass(frozen=True)
class Settings:
    min_bytes: str
    max_bytes: str
    step_factor: int
    min_bus_bandwidth_gbps: float
    drain_on_failure: bool
    timeout_seconds: int
    gpus_per_node: int
    partition: str | None
    binary: str
    path: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        def get(name: str, default: str) -> str:
            return env.get(name, "").strip() or default

        def number(name: str, default: str, kind: type[int] | type[float], minimum: float) -> float:
            raw = get(name, default)
            try:
                value = kind(raw)
            except ValueError:
                raise SettingsError(f"{name}={raw!r} is not a {kind.__name__}") from None
            if not math.isfinite(value) or value < minimum:
                raise SettingsError(f"{name}={raw!r} must be at least {minimum}")
            return value

        def size(name: str, default: str) -> str:
            raw = get(name, default)
            if not _SIZE.match(raw):
                raise SettingsError(f"{name}={raw!r} is not a size such as 512M or 8G")
            return raw.strip()

        drain = get("NCCL_DRAIN_ON_FAILURE", "false").lower()
        if drain not in ("true", "false"):
            raise SettingsError(f"NCCL_DRAIN_ON_FAILURE={drain!r} must be true or false")
        settings = cls(
            min_bytes=size("NCCL_MIN_BYTES", "512M"),
            max_bytes=size("NCCL_MAX_BYTES", "8G"),
            step_factor=int(number("NCCL_STEP_FACTOR", "2", int, 2)),
            min_bus_bandwidth_gbps=number("NCCL_MIN_BUS_BANDWIDTH_GBPS", "0", float, 0),
            drain_on_failure=drain == "true",
            timeout_seconds=int(number("NCCL_TIMEOUT_SECONDS", "1800", int, 1)),
            gpus_per_node=int(number("GPUS_PER_NODE", "8", int, 1)),
            partition=get("NCCL_PARTITION", "") or None,
            binary=get("NCCL_BENCHMARK_BINARY", "all_reduce_perf"),
            path=get("NCCL_BENCHMARK_PATH", "") or None,
        )
        if settings.path is not None and (not settings.path.startswith("/") or ":" in settings.path):
            raise SettingsError(f"NCCL_BENCHMARK_PATH={settings.path!r} must be one absolute directory")
        if size_bytes(settings.min_bytes) > size_bytes(settings.max_bytes):
            raise SettingsError(f"NCCL_MIN_BYTES={settings.min_bytes} is above NCCL_MAX_BYTES={settings.max_bytes}")
        return settings


def size_bytes(text: str) -> int:
    match = _SIZE.match(text)
    if not match:
        raise ValueError(text)
    number, unit = int(match.group(1)), match.group(2).upper()
    return number * 1024 ** ("KMGT".index(unit) + 1) if unit else number


def wrong_results(output: str) -> str | None:
    """What the run's own check found wrong ("# Out of bounds values : K FAILED"), None when it found nothing."""
    oob = _OUT_OF_BOUNDS.search(output)
    if oob and (int(oob.group(1)) != 0 or oob.group(2).upper() != "OK"):
        return f"{oob.group(1)} out-of-bounds values (results are wrong)"
    return None


def parse_ranks(output: str) -> int | None:
    """GPUs the run used (nccl-tests' "# nThread T nGpus G" header: T*G ranks), None when the output does not say."""
    found = _RANKS.search(output)
    return int(found.group(1)) * int(found.group(2)) if found else None


def parse_bus_bandwidth(output: str) -> float:
    """GB/s from nccl-tests' summary; ValueError (with a short reason) when the run produced no valid result."""
    wrong = wrong_results(output)
    if wrong is not None:
        raise ValueError(wrong)
    found = _AVG_BUSBW.findall(output)
    if not found:
        raise ValueError('no "Avg bus bandwidth" in the output')
    try:
        value = float(found[-1])
    except ValueError:
        raise ValueError(f'unreadable "Avg bus bandwidth" value {found[-1][:40]!r}') from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f'unreadable "Avg bus bandwidth" value {found[-1][:40]!r}')
    return value


@dataclass(frozen=True)
class Outcome:
    """A node's verdict. Only `passed=False` with `not_run=False` is a finding against the node (and drains it)."""

    node: str
    passed: bool
    detail: str
    skipped: bool = False
    not_run: bool = False

    @property
    def failed(self) -> bool:
        return not self.passed and not self.not_run


def run_slurm(argv: Sequence[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=SLURM_TIMEOUT_SECONDS, check=False)
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{argv[0]} did not answer within {SLURM_TIMEOUT_SECONDS}s") from None
    except OSError as err:
        raise SlurmError(f"{argv[0]}: {err}") from None
    if done.returncode != 0:
        raise SlurmError(f"{' '.join(argv[:3])} failed: {(done.stderr or done.stdout).strip()[:300]}")
    return done.stdout


def expand_hostlist(hostlist: str) -> list[str]:
    if not hostlist or hostlist in ("(null)", "n/a"):
        return []
    return run_slurm(["scontrol", "show", "hostnames", hostlist]).split()


def candidate_nodes(settings: Settings) -> tuple[list[str], bool]:
    """Idle responding nodes to benchmark, and whether GPUs must be requested from Slurm for them."""
    argv = ["sinfo", "--noheader", "--Node", "--responding", "--format=%N|%T|%G"]
    if settings.partition:
        argv.append(f"--partition={settings.partition}")
    nodes: dict[str, tuple[str, bool]] = {}
    for line in run_slurm(argv).splitlines():
        parts = line.strip().split("|")
        if len(parts) != 3:
            continue
        name, state, gres = parts
        has_gpu = any(item.startswith("gpu:") or item == "gpu" for item in gres.split(","))
        nodes[name] = (state.lower(), has_gpu)
    gpu_cluster = any(has_gpu for _, has_gpu in nodes.values())
    chosen = [
        name for name, (state, has_gpu) in sorted(nodes.items()) if state == "idle" and (has_gpu or not gpu_cluster)
    ]
    return chosen, gpu_cluster


def nodes_with_benchmark() -> set[str]:
    """Nodes where a benchmark job is running (%N) or queued for (%n: the requested nodes)."""
    out = run_slurm(["squeue", "--noheader", f"--name={JOB_NAME}", "--format=%N|%n"])
    busy: set[str] = set()
    for line in out.splitlines():
        for hostlist in line.strip().split("|"):
            busy.update(expand_hostlist(hostlist.strip()))
    return busy


def srun_argv(settings: Settings, node: str, *, request_gpus: bool) -> list[str]:
    argv = [
        "srun",
        f"--nodelist={node}",
        "--nodes=1",
        "--ntasks=1",
        "--exclusive",
        "--immediate=60",
        f"--job-name={JOB_NAME}",
        f"--time={max(1, math.ceil(settings.timeout_seconds / 60))}",
        "--kill-on-bad-exit=1",
    ]
    if settings.partition:
        argv.append(f"--partition={settings.partition}")
    if request_gpus:
        argv.append(f"--gpus-per-node={settings.gpus_per_node}")
    argv += [
        settings.binary,
        "-b",
        settings.min_bytes,
        "-e",
        settings.max_bytes,
        "-f",
        str(settings.step_factor),
        "-g",
        str(settings.gpus_per_node),
    ]
    return argv


def _stop(proc: subprocess.Popen[str], node: str) -> None:
    """Cancels the node's step through Slurm, then makes sure srun itself is gone."""
    try:
        run_slurm(["scancel", f"--name={JOB_NAME}", f"--nodelist={node}"])
    except SlurmError as err:
        log.warning("node=%s scancel failed: %s", node, err)
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def step_env(settings: Settings, env: Mapping[str, str]) -> dict[str, str]:
    """srun's environment, which the step inherits: NCCL_BENCHMARK_PATH last on PATH (inside the jail)."""
    out = dict(env)
    if settings.path:
        path = out.get("PATH") or "/usr/local/bin:/usr/bin:/bin"
        out["PATH"] = f"{path}:{settings.path}"
    return out


def benchmark(settings: Settings, node: str, *, request_gpus: bool) -> Outcome:
    argv = srun_argv(settings, node, request_gpus=request_gpus)
    log.info("node=%s running: %s", node, " ".join(argv))
    try:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            env=step_env(settings, os.environ),
        )
    except OSError as err:
        return Outcome(node, passed=False, not_run=True, detail=f"cannot start srun: {err}")
    try:
        output, _ = proc.communicate(timeout=settings.timeout_seconds)
    except subprocess.TimeoutExpired:
        _stop(proc, node)
        return Outcome(node, passed=False, detail=f"benchmark timed out after {settings.timeout_seconds}s")
    for line in output.splitlines():
        log.debug("node=%s | %s", node, line)
    return judge(settings, node, returncode=proc.returncode, output=output)


def judge(settings: Settings, node: str, *, returncode: int, output: str) -> Outcome:
    """The verdict on one finished srun of the benchmark."""
    if returncode != 0 and "Requested nodes are busy" in output:
        return Outcome(node, passed=True, skipped=True, detail="node became busy; not benchmarked")
    wrong = wrong_results(output)
    if wrong is not None and returncode != 0:  # it ran and its own check failed (slurmctl's binary exits 1 then)
        return Outcome(node, passed=False, detail=f"benchmark gave no result: {wrong}")
    busbw: float | None = None
    if returncode != 0:
        tail = " ".join(output.strip().splitlines()[-1:])[:120]
        problem = f"benchmark crashed (exit {returncode}): {tail}".rstrip(": ")
    else:
        try:
            busbw = parse_bus_bandwidth(output)
        except ValueError as err:
            problem = f"benchmark gave no result: {err}"
    if busbw is None:
        not_run = could_not_run(output)
        if not_run is not None:
            return Outcome(node, passed=False, not_run=True, detail=not_run)
        return Outcome(node, passed=False, detail=problem)
    return threshold(settings, node, busbw, ranks=parse_ranks(output))


def threshold(settings: Settings, node: str, busbw: float, *, ranks: int | None) -> Outcome:
    """The verdict on a measured bus bandwidth: at least the required one passes. One GPU has no bus bandwidth to
    hold against it (nccl-tests' busbw = algbw * 2*(n-1)/n is 0), so such a run passes on correct results alone."""
    required = settings.min_bus_bandwidth_gbps
    if ranks == 1:
        return Outcome(
            node,
            passed=True,
            detail=f"one GPU: all-reduce results correct, no bus bandwidth to measure (required {required:g} GB/s"
            " applies to nodes with 2 GPUs or more)",
        )
    if busbw < required:
        return Outcome(node, passed=False, detail=f"avg bus bandwidth {busbw:g} GB/s below required {required:g} GB/s")
    return Outcome(node, passed=True, detail=f"avg bus bandwidth {busbw:g} GB/s (required {required:g} GB/s)")


def could_not_run(output: str) -> str | None:
    """Why a run that gave no result never measured the node (a missing binary, no GPU, Slurm away), else None."""
    for pattern, reason in _NOT_RUN:
        match = pattern.search(output)
        if match:
            return f"could not run: {reason} ({match.group(0)})"
    return None


def node_drained_by_other(node: str) -> bool:
    out = run_slurm(["sinfo", "--noheader", "--Node", f"--nodes={node}", "--format=%T|%E"])
    for line in out.splitlines():
        state, _, reason = line.strip().partition("|")
        if state.startswith("drain") and not reason.startswith(REASON_PREFIX):
            return True
    return False


def drain(node: str, detail: str) -> bool:
    """Drains the node (True), unless an administrator's drain is in place (False)."""
    if node_drained_by_other(node):
        log.warning("node=%s already drained by someone else; leaving its reason", node)
        return False
    reason = f"{REASON_PREFIX} {detail}"
    run_slurm(["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"])
    log.warning("node=%s drained reason=%r", node, reason)
    return True


@dataclass(frozen=True)
class Run:
    """What one run did: its exit status, each node's outcome, how many it drained, or why it could not start."""

    code: int
    outcomes: tuple[Outcome, ...] = ()
    drained: int = 0
    error: str | None = None


def report(run: Run, *, limit: int = REPORT_LIMIT) -> str:
    """The run as one line of JSON, for the operator (the pod's termination message): the exit status, how many nodes
    were benchmarked, passed, skipped and drained, why the run could not start, and the nodes that failed or could not
    be benchmarked, grouped by what was found. Node names are left out (their number kept) until it fits `limit`."""
    groups: dict[str, dict[str, list[str]]] = {"failed": {}, "not_run": {}}
    for outcome in run.outcomes:
        if not outcome.passed:
            kind = "not_run" if outcome.not_run else "failed"
            groups[kind].setdefault(outcome.detail[:REPORT_DETAIL_LIMIT], []).append(outcome.node)
    head: dict[str, object] = {
        "exit": run.code,
        "nodes": len(run.outcomes),
        "passed": sum(1 for o in run.outcomes if o.passed and not o.skipped),
        "skipped": sum(1 for o in run.outcomes if o.skipped),
        "drained": run.drained,
    }
    if run.error is not None:
        head["error"] = run.error[:REPORT_DETAIL_LIMIT]
    entries = [(kind, detail, nodes) for kind, found in groups.items() for detail, nodes in found.items()]

    def render(cap: int | None, keep: int) -> str:
        body = dict(head)
        for kind in groups:
            listed = [
                {"detail": detail, "nodes": nodes if cap is None else nodes[:cap], "count": len(nodes)}
                for k, detail, nodes in entries[:keep]
                if k == kind
            ]
            if listed:
                body[kind] = listed
        if keep < len(entries):
            body["omitted"] = sum(len(nodes) for _, _, nodes in entries[keep:])
        return json.dumps(body, separators=(",", ":"))

    # Fewer names first, then fewer groups (the nodes of those left out are only counted).
    attempts = [(cap, len(entries)) for cap in (None, 8, 2)] + [(2, keep) for keep in range(len(entries) - 1, -1, -1)]
    for cap, keep in attempts:
        text = render(cap, keep)
        if len(text) <= limit:
            return text
    return json.dumps(head, separators=(",", ":"))


def write_report(path: str | None, run: Run) -> None:
    if not path:
        return
    try:
        with open(path, "w", encoding="utf-8") as out:
            out.write(report(run) + "\n")
    except OSError as err:
        log.warning("cannot write the report to %s: %s", path, err)


def run_benchmark(env: Mapping[str, str]) -> Run:
    try:
        settings = Settings.from_env(env)
    except SettingsError as err:
        log.error("bad setting: %s", err)
        return Run(EXIT_ERROR, error=f"bad setting: {err}")
    try:
        nodes, gpu_cluster = candidate_nodes(settings)
        busy = nodes_with_benchmark()
    except SlurmError as err:
        log.error("cannot list nodes: %s", err)
        return Run(EXIT_ERROR, error=f"cannot list nodes: {err}")
    for node in sorted(busy.intersection(nodes)):
        log.info("node=%s skipped: a benchmark already runs there", node)
    todo = [node for node in nodes if node not in busy]
    if not todo:
        log.info("no idle node to benchmark")
        return Run(EXIT_OK)
    with ThreadPoolExecutor(max_workers=min(len(todo), 32)) as pool:
        outcomes = tuple(pool.map(lambda n: benchmark(settings, n, request_gpus=gpu_cluster), todo))
    failed = not_run = drained = 0
    for outcome in outcomes:
        if outcome.passed:
            log.info("node=%s %s: %s", outcome.node, "skipped" if outcome.skipped else "passed", outcome.detail)
            continue
        if outcome.not_run:
            not_run += 1
            log.warning("node=%s not benchmarked, not drained: %s", outcome.node, outcome.detail)
            continue
        failed += 1
        log.error("node=%s failed: %s", outcome.node, outcome.detail)
        if settings.drain_on_failure:
            try:
                drained += drain(outcome.node, outcome.detail)
            except SlurmError as err:
                log.error("node=%s could not be drained: %s", outcome.node, err)
    log.info("%d of %d nodes failed, %d could not be benchmarked", failed, len(outcomes), not_run)
    code = EXIT_FAILED if failed else EXIT_ERROR if not_run else EXIT_OK
    return Run(code, outcomes, drained=drained)


def main(env: Mapping[str, str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s nccl-benchmark: %(message)s", stream=sys.stderr)
    env = os.environ if env is None else env
    run = run_benchmark(env)
    write_report(env.get("NCCL_BENCHMARK_REPORT", "").strip(), run)
    return run.code


if __name__ == "__main__":
    sys.exit(main())
