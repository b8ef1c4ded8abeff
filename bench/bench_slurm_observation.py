"""One Slurm observation at scale (issue 26): 64 groups x 64 nodes (4,096 Slurm nodes) and 10,000 jobs.

slurmrestd 24.11's answers are built from the ones recorded from a real slurmrestd (test/unit/slurm/recorded: every
field it sends, v0.0.42), grown to this size: each node and job is a recorded one with its names, states, host
lists and allocations changed (3,000 jobs running on 1 or 2 whole 64-core nodes, 6,000 pending, 1,000 finished, as
MinJobAge keeps them). A separate process serves them on 127.0.0.1 (aiohttp), so the CPU measured is the operator's
own: one `SlurmAccess.snapshot` (the real SlurmClient: GET /nodes/, /jobs/ and /partitions/ with the operator's
query flags, classification, validation, parsing) and what one pass decides from it (the Slurm node loop: upkeep,
jobs_by_node, evictable for every worker, node counts, the jobs-by-state series; the drain gate's verdict on a
64-node scale-in).

Figures, each with its baselines from the same run: the CPU of the observation (process time, median of ROUNDS),
split into read+parse and decide, beside the CPU of reading the same bytes with aiohttp alone, of a plain
`json.loads` of them, and of the same observation decoding each answer whole first, as the client did before issue 26
(`json.loads`, then validation of the dicts); the answers' sizes; the bytes the kept snapshot holds (tracemalloc: it is
all Python objects); the peak resident memory one observation adds to a fresh process (VmHWM: a C decoder's buffers
are not Python memory, tracemalloc would not see them), decoding from the bytes and whole first.
Environment: BENCH_SLURM_ROUNDS (5).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import gc
import json
import multiprocessing
import os
import statistics
import tempfile
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from bench import goal
from slurmctl.reconcilers.drain import Leaving, evictable, jobs_by_node, judge, upkeep
from slurmctl.reconcilers.node_plans import node_counts
from slurmctl.reconcilers.observed import WorkerPod
from slurmctl.reconcilers.slurm_access import SlurmAccess
from slurmctl.reconcilers.slurm_snapshot import SlurmSnapshot
from slurmctl.render import meta
from slurmctl.render.cluster import JWT_KEY
from slurmctl.slurm import API_VERSION, SlurmClient
from slurmctl.slurm import client as slurm_client

GROUPS = 64
NODES_PER_GROUP = 64
JOBS = 10_000
RUNNING = 3_000
FINISHED = 1_000
SOCKETS, CORES_PER_SOCKET = 2, 32
CLUSTER, NAMESPACE = "c", "hpc"
ROUNDS = int(os.environ.get("BENCH_SLURM_ROUNDS", "5"))
RECORDED = Path(__file__).resolve().parents[1] / "test" / "unit" / "slurm" / "recorded"
NOW = 1_795_449_440  # the recorded answers' clock

Figure = tuple[str, float, str]


def _recorded(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RECORDED / f"{name}.json").read_text())["json"]
    return data


def _node_names() -> list[str]:
    return [f"{meta.worker_group(CLUSTER, f'g{g:02}')}-{i}" for g in range(GROUPS) for i in range(NODES_PER_GROUP)]


def _hostlist(names: list[str]) -> str:
    """Slurm's compact form for consecutive names of one group ("c-worker-g00-[4-5]")."""
    if len(names) == 1:
        return names[0]
    prefix = names[0].rpartition("-")[0]
    first, last = names[0].rpartition("-")[2], names[-1].rpartition("-")[2]
    return f"{prefix}-[{first}-{last}]"


def _placements() -> list[list[str]]:
    """The nodes of each running job: one in four runs on two nodes; the nodes left over stay idle."""
    names, out, at = _node_names(), [], 0
    for k in range(RUNNING):
        size = 2 if k % 4 == 0 and (at + 1) % NODES_PER_GROUP else 1
        out.append(names[at : at + size])
        at += size
    return out


def nodes_answer() -> bytes:
    answer = _recorded("nodes_mixed")
    template = answer["nodes"][0]
    busy = {name for nodes in _placements() for name in nodes}
    nodes = []
    for n, name in enumerate(_node_names()):
        node = copy.deepcopy(template)
        allocated = name in busy
        node.update(
            name=name, hostname=name, address=f"10.{n // 65536}.{n // 256 % 256}.{n % 256}",
            cpus=SOCKETS * CORES_PER_SOCKET, cores=CORES_PER_SOCKET, sockets=SOCKETS, effective_cpus=64,
            alloc_cpus=64 if allocated else 0, alloc_idle_cpus=0 if allocated else 64, real_memory=257_000,
            state=["ALLOCATED"] if allocated else ["IDLE"], partitions=["batch"],
            tres="cpu=64,mem=257000M,billing=64", tres_used="cpu=64" if allocated else "",
        )  # fmt: skip
        if n % 97 == 0:  # a few drained by an administrator
            node.update(state=[*node["state"], "DRAIN"], reason="bad DIMM", reason_set_by_user="root")
            node["reason_changed_at"] = {"infinite": False, "number": NOW - 3600, "set": True}
        nodes.append(node)
    answer["nodes"] = nodes
    return json.dumps(answer).encode()


def jobs_answer() -> bytes:
    answer = _recorded("jobs")
    by_state = {j["job_state"][0]: j for j in answer["jobs"]}
    running, pending, completed, failed = (by_state[s] for s in ("RUNNING", "PENDING", "COMPLETED", "FAILED"))
    placements = _placements()
    jobs = []
    for k in range(JOBS):
        job_id = 1_000_000 + k
        if k < RUNNING:
            job = copy.deepcopy(running)
            nodes = placements[k]
        elif k < RUNNING + FINISHED:
            job = copy.deepcopy(completed if k % 5 else failed)
            nodes = placements[k % RUNNING]
        else:
            job = copy.deepcopy(pending)
            nodes = []
        job.update(job_id=job_id, name=f"train-{k % 97}", user_name=f"user{k % 40}")
        job["nodes"] = _hostlist(nodes) if nodes else ""
        job["node_count"] = {"infinite": False, "number": max(1, len(nodes)), "set": True}
        job["command"] = f"/home/user{k % 40}/jobs/run-{k}.sh"
        job["standard_output"] = f"/home/user{k % 40}/logs/slurm-{job_id}.out"
        jobs.append(job)
    answer["jobs"] = jobs
    return json.dumps(answer).encode()


def partitions_answer() -> bytes:
    answer = _recorded("partitions")
    answer["partitions"][0].update(name="batch")
    groups = [f"{meta.worker_group(CLUSTER, f'g{g:02}')}-[0-{NODES_PER_GROUP - 1}]" for g in range(GROUPS)]
    answer["partitions"][0]["nodes"].update(configured=",".join(groups), total=GROUPS * NODES_PER_GROUP)
    return json.dumps(answer).encode()


# ---- slurmrestd's stand-in, in a process of its own --------------------------------------------------------------


def _serve(directory: str, ports: Any) -> None:
    answers = {p.stem: p.read_bytes() for p in Path(directory).glob("*.json")}

    async def main() -> None:
        def answer(name: str) -> Callable[[web.Request], Any]:
            async def handler(request: web.Request) -> web.Response:
                return web.Response(body=answers[name], content_type="application/json")

            return handler

        app = web.Application()
        for name in answers:
            app.router.add_get(f"/slurm/{API_VERSION}/{name}/", answer(name))
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        ports.put(runner.addresses[0][1])
        await asyncio.Event().wait()

    asyncio.run(main())


@contextlib.contextmanager
def _decoding_whole() -> Iterator[None]:
    """Decoding the way the client did before issue 26 in structure: every answer whole through `json.loads` (a dict
    of every field of every job), then validated into the same wire types (`_classify`, then `_validated`: the path
    the client still takes for error answers)."""
    decoded = slurm_client._decoded

    def whole(where: str, model: Any, *, status: int, reason: str, raw: bytes) -> Any:
        data = slurm_client._classify(where, status=status, reason=reason, raw=raw)
        return slurm_client._validated(where, model, data)

    slurm_client._decoded = whole
    try:
        yield
    finally:
        slurm_client._decoded = decoded


def _rss(field: str) -> int:
    """This process' resident memory (VmRSS) or its high-water mark (VmHWM), bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _peak_rss(base_url: str, before: bool, results: Any) -> None:
    """In a fresh process: how much one observation raises the resident high-water mark over what the process held
    before it (modules imported, session open)."""

    async def main() -> int:
        async with aiohttp.ClientSession(trust_env=False) as session:
            bench = _Bench(base_url, session)
            gc.collect()
            held = _rss("VmRSS")
            with _decoding_whole() if before else contextlib.nullcontext():
                await bench.observe()
            return _rss("VmHWM") - held

    results.put(asyncio.run(main()))


class _Cache:
    """What SlurmAccess reads of the pod cache: the ready slurmrestd pod (at the stand-in's address) and the JWT key."""

    def __init__(self) -> None:
        self.secret = {"metadata": {"uid": "k"}, "data": {JWT_KEY: base64.b64encode(b"k" * 32).decode()}}

    def list(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        return []  # never asked: the bench connects SlurmAccess to its client itself

    def get(self, *args: Any, **kwargs: Any) -> Mapping[str, Any]:
        return self.secret


def _workers() -> list[WorkerPod]:
    created = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        WorkerPod(name, f"k8s-{n // 8}", True, True, True, False, False, uid=f"u{n}", created=created)
        for n, name in enumerate(_node_names())
    ]


def decide(snapshot: SlurmSnapshot, workers: list[WorkerPod], leaving: list[Leaving]) -> tuple[object, ...]:
    """What one pass decides from one snapshot: the Slurm node loop's drains and resumes, its evictable pods and node
    counts, the metrics' jobs by state, and the drain gate's verdict on the leaving nodes."""
    nodes = snapshot.check().nodes
    mine = {n.name: n for n in nodes if n.name.startswith(meta.worker_group(CLUSTER, ""))}
    plan = upkeep(workers, mine, cordoned=set(), leaving={going.node for going in leaving})
    running = jobs_by_node(snapshot.jobs)
    may_go = {w.name for w in workers if evictable(w, mine.get(w.name), running)}
    counts = node_counts(list(mine.values()))
    by_state = Counter(j.state.lower() for j in snapshot.jobs)
    timeouts = {going.node: timedelta(hours=1) for going in leaving}
    verdict = judge(leaving, nodes=snapshot.by_name, jobs=snapshot.jobs, now=datetime.now(UTC), timeout=timeouts)
    return plan, may_go, counts, by_state, verdict


class _Bench:
    def __init__(self, base_url: str, session: aiohttp.ClientSession) -> None:
        self.base_url = base_url
        self.session = session
        self.client = SlurmClient(session=session, base_url=base_url, token=lambda: "bench", timeout=120)
        self.workers = _workers()
        group = meta.worker_group(CLUSTER, "g63")
        self.leaving = [Leaving(f"{group}-{i}", "g63", "scale-in") for i in range(NODES_PER_GROUP)]

    def access(self) -> SlurmAccess:
        access = SlurmAccess(_Cache(), connect=lambda url, token: self.client)  # type: ignore[arg-type]
        access.address = lambda c, namespace: "127.0.0.1"  # type: ignore[method-assign]
        return access

    async def observe(self) -> tuple[float, float, SlurmSnapshot]:
        """One observation: (CPU seconds to read and parse, CPU seconds to decide, the snapshot)."""
        access = self.access()
        started = time.process_time()
        snapshot = await access.snapshot(CLUSTER, NAMESPACE, max_age=0.0)
        read = time.process_time()
        decide(snapshot.check(), self.workers, self.leaving)
        return read - started, time.process_time() - read, snapshot

    async def raw(self, name: str) -> bytes:
        async with self.session.get(f"{self.base_url}/slurm/{API_VERSION}/{name}/") as resp:
            return await resp.read()

    async def transport(self) -> float:
        started = time.process_time()
        for name in ("nodes", "jobs", "partitions"):
            await self.raw(name)
        return time.process_time() - started

    @staticmethod
    def plain_loads(answers: list[bytes]) -> float:
        started = time.process_time()
        for answer in answers:
            json.loads(answer)
        return time.process_time() - started

    async def held(self) -> int:
        """The bytes the kept snapshot holds (traced; the answers and everything parsed from them are gone)."""
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        _, _, snapshot = await self.observe()
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        assert snapshot.up
        return held - before


def _ms(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1000


async def _measure(base_url: str) -> list[Figure]:
    async with aiohttp.ClientSession(trust_env=False) as session:
        bench = _Bench(base_url, session)
        answers = [await bench.raw(name) for name in ("nodes", "jobs", "partitions")]
        _, _, first = await bench.observe()  # warm-up; and the answers are what the bench says they are
        assert (len(first.nodes), len(first.jobs)) == (GROUPS * NODES_PER_GROUP, JOBS)
        reads, decides, transports, loads, before, nodes_only = [], [], [], [], [], []
        del first
        for _ in range(ROUNDS):
            gc.collect()
            read, decided, _ = await bench.observe()
            reads.append(read)
            decides.append(decided)
            gc.collect()
            transports.append(await bench.transport())
            loads.append(bench.plain_loads(answers))
            gc.collect()
            started = time.process_time()
            await bench.client.nodes()
            nodes_only.append(time.process_time() - started)
            gc.collect()
            with _decoding_whole():
                read, decided, _ = await bench.observe()
            before.append(read + decided)
        held = await bench.held()
        jobs_bytes, nodes_bytes = len(answers[1]), len(answers[0])
        del answers
    peak, peak_before = (_in_fresh_process(_peak_rss, base_url, old) for old in (False, True))
    observation = _ms([r + d for r, d in zip(reads, decides, strict=True)])
    baselines = (
        f"aiohttp read alone {_ms(transports):.1f} ms | plain json.loads {_ms(loads):.1f} ms"
        f" | whole document first (json.loads, then validation) {_ms(before):.1f} ms"
    )
    scale = f"{GROUPS * NODES_PER_GROUP:,} nodes, {JOBS:,} jobs"
    return [
        ("slurm_observation_cpu", observation, goal("ms", f"<= 200 ({scale}) | {baselines}")),
        ("slurm_observation_read_parse_cpu", _ms(reads), goal("ms", "reported")),
        ("slurm_observation_decide_cpu", _ms(decides), goal("ms", "reported")),
        ("slurm_nodes_read_parse_cpu", _ms(nodes_only), goal("ms", "reported (GET /nodes/ alone, no jobs)")),
        ("slurm_answer_nodes_bytes", nodes_bytes, goal("bytes", "reported")),
        ("slurm_answer_jobs_bytes", jobs_bytes, goal("bytes", "reported")),
        ("slurm_snapshot_bytes_held", held, goal("bytes", f"bounded, reported (the kept snapshot, {scale})")),
        ("slurm_observation_peak_rss_growth", peak,
         goal("bytes", f"reported (one observation, new process) | whole document first {peak_before:,} bytes")),
    ]  # fmt: skip


def _in_fresh_process(target: Callable[..., None], *args: Any) -> Any:
    spawn = multiprocessing.get_context("spawn")
    results = spawn.Queue()
    child = spawn.Process(target=target, args=(*args, results), daemon=True)
    child.start()
    try:
        return results.get(timeout=300)
    finally:
        child.join(30)


def run() -> Iterator[Figure]:
    with tempfile.TemporaryDirectory(prefix="bench-slurm-") as tmp:
        for name, build in (("nodes", nodes_answer), ("jobs", jobs_answer), ("partitions", partitions_answer)):
            (Path(tmp) / f"{name}.json").write_bytes(build())
        spawn = multiprocessing.get_context("spawn")
        ports = spawn.Queue()
        server = spawn.Process(target=_serve, args=(tmp, ports), daemon=True)
        server.start()
        try:
            port = ports.get(timeout=60)
            yield from asyncio.run(_measure(f"http://127.0.0.1:{port}"))
        finally:
            server.terminate()
            server.join(10)
