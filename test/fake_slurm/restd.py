"""A stand-in slurmrestd for the scale harness: the in-memory Slurm (model.py) served over the REST endpoints and the
data parser version the operator's client speaks (slurmctl.slurm.client: /slurm/v0.0.42/ and /slurmdb/v0.0.42/), with
the slurmd registrations and the scheduling a real slurmctld does:

- a worker pod that runs (its slurmd container running, which KWOK's pod-ready stage reports) registers its node, IDLE;
  a pod that goes leaves Slurm as a real worker's preStop makes it (images/scripts/worker-prestop: what still ran
  there ends, and the node is deleted; KWOK runs no hook, so the stand-in does it), and its re-created pod registers
  a new node, IDLE and not drained;
- `submit` queues jobs; each scheduling pass starts pending jobs on idle nodes that are neither drained nor
  unresponsive, and ends running jobs whose time is up, as slurmctld's backfill and the job's own end would;
- drains, resumes, DOWN and deletes come through POST /nodes/ and DELETE /node/{name} and change the model exactly as
  the unit tests' calls do (the model is the same code).

A job is "lost" when Slurm ends it before its time: its node set DOWN, or its pod gone under it. `lost` lists them;
the harness asserts there are none after a roll. Every request is counted by method and path (`requests`), so a test
can check how often the operator asked.

It is a test aid, never shipped: the operator reaches it only because the harness builds the operator's Slurm access
with a `connect` that points at it (test/e2e/scale.py), the way the unit tests route the same access to the model.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
from aiohttp import web
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.rest import ApiException

from slurmctl.render import meta
from slurmctl.slurm import ExitCode, Job, Node, SlurmApiError, SlurmUnavailable, SlurmUnknownNodeError
from slurmctl.slurm.client import API_VERSION, ESLURM_INVALID_NODE_NAME
from test.fake_slurm.model import FakeSlurm

log = logging.getLogger(__name__)

WORKERS_COMPONENT = "workers"
# slurm_errno.h: slurmctld refusing to delete a node that runs a job; the stand-in answers any other refusal of the
# model with it too (the client branches on none of them).
ESLURM_NODES_BUSY = 2016
SLURM_COMMUNICATIONS_CONNECTION_ERROR = 1001  # what slurmrestd answers when slurmctld is down
PASS_INTERVAL = 0.2  # seconds between scheduling passes
WATCH_TIMEOUT = 60  # seconds a pod watch runs before it is renewed (the API server's own cap is longer)
TIMEOUT = 10
# Lists of thousands of pods on loopback: gzip is CPU spent, not time saved (this stand-in and the scale bench).
UNCOMPRESSED = {"Accept-Encoding": "identity"}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class _Pending:
    job_id: int
    seconds: float


@dataclass
class _Running:
    job_id: int
    node: str
    ends_at: float


@dataclass
class Jobs:
    """The jobs the stand-in schedules: queued, running (until `ends_at`), completed, and lost."""

    pending: list[_Pending] = field(default_factory=list)
    running: dict[int, _Running] = field(default_factory=dict)
    completed: set[int] = field(default_factory=set)
    lost: dict[int, str] = field(default_factory=dict)  # job id -> why Slurm ended it early
    next_id: int = 1

    @property
    def submitted(self) -> int:
        return self.next_id - 1


def _no_val(value: int | None) -> dict[str, Any]:
    return {"set": value is not None, "infinite": False, "number": value or 0}


def wire_node(node: Node) -> dict[str, Any]:
    """A node as slurmrestd v0.0.42 writes it (only the fields the client reads, and the ones it does with them)."""
    since = None if node.reason_changed_at is None else int(node.reason_changed_at.timestamp())
    return {
        "name": node.name,
        "hostname": node.name,
        "state": sorted(node.state),
        "cpus": node.cpus,
        "alloc_cpus": node.alloc_cpus,
        "reason": node.reason,
        "reason_set_by_user": node.reason_set_by,
        "reason_changed_at": _no_val(since),
        "features": list(node.features),
        "partitions": list(node.partitions),
    }


def wire_job(job: Job) -> dict[str, Any]:
    code = job.exit_code
    return {
        "job_id": job.job_id,
        "job_state": [job.state, *sorted(job.state_flags)],
        "name": job.name,
        "user_name": job.user,
        "nodes": ",".join(job.nodes),
        "exit_code": {"status": list(code.status), "return_code": _no_val(code.return_code), "signal": {}},
        "state_reason": job.reason or "None",
        "partition": job.partition,
        "node_count": _no_val(job.node_count if job.node_count is not None else len(job.nodes) or 1),
    }


def _answer(**data: Any) -> web.Response:
    return web.json_response({**data, "errors": [], "warnings": []})


def _error(status: int, errno: int, description: str) -> web.Response:
    body = {"errors": [{"error_number": errno, "error": description, "description": description, "source": ""}]}
    return web.json_response(body, status=status)


class StandInRestd:
    """slurmrestd in front of `slurm` for cluster `cluster` in `namespace`. `start` serves it on loopback and, given
    an API client, watches the cluster's worker pods to register their nodes."""

    def __init__(self, slurm: FakeSlurm, *, cluster: str, namespace: str, cpus: int = 2) -> None:
        self.slurm = slurm
        self.cluster = cluster
        self.namespace = namespace
        self.cpus = cpus
        self.jobs = Jobs()
        self.requests: Counter[tuple[str, str]] = Counter()
        self.registered: set[str] = set()  # nodes whose pod runs
        self._runner: web.AppRunner | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.url = ""

    # ---- the HTTP side -----------------------------------------------------------------------------------------
    def app(self) -> web.Application:
        slurm, slurmdb = f"/slurm/{API_VERSION}", f"/slurmdb/{API_VERSION}"
        app = web.Application(middlewares=[self._count])
        app.router.add_get(f"{slurm}/ping/", self._ping)
        app.router.add_get(f"{slurm}/nodes/", self._nodes)
        app.router.add_post(f"{slurm}/nodes/", self._update_nodes)
        app.router.add_delete(f"{slurm}/node/{{name}}", self._delete_node)
        app.router.add_get(f"{slurm}/jobs/", self._jobs)
        app.router.add_get(f"{slurm}/partitions/", self._partitions)
        app.router.add_get(f"{slurm}/reconfigure/", self._reconfigure)
        for kind in ("qos", "accounts", "associations", "users"):
            app.router.add_get(f"{slurmdb}/{kind}/", self._records(kind))
            app.router.add_post(f"{slurmdb}/{kind}/", self._update_records(kind))
        app.router.add_post(f"{slurmdb}/accounts_association/", self._add_associations)
        app.router.add_post(f"{slurmdb}/users_association/", self._add_associations)
        return app

    @web.middleware
    async def _count(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Count the request; refuse one without a token as slurmrestd's rest_auth/jwt does; answer the model's
        outage and refusals as slurmrestd answers slurmctld's."""
        self.requests[(request.method, request.path)] += 1
        if not request.headers.get("X-SLURM-USER-TOKEN"):
            return web.Response(status=401, text="Authentication failure")
        try:
            return await handler(request)
        except SlurmUnavailable as exc:
            return _error(500, SLURM_COMMUNICATIONS_CONNECTION_ERROR, str(exc))
        except SlurmUnknownNodeError as exc:
            return _error(500, ESLURM_INVALID_NODE_NAME, "; ".join(exc.errors) or str(exc))
        except SlurmApiError as exc:
            return _error(500, ESLURM_NODES_BUSY, "; ".join(exc.errors) or str(exc))

    async def _ping(self, request: web.Request) -> web.Response:
        pings = await self.slurm.controllers() or {f"{self.cluster}-controller-0": True}
        return _answer(
            pings=[{"hostname": h, "pinged": "UP" if up else "DOWN", "responding": up} for h, up in pings.items()]
        )

    async def _nodes(self, request: web.Request) -> web.Response:
        return _answer(nodes=[wire_node(n) for n in await self.slurm.nodes()])

    async def _jobs(self, request: web.Request) -> web.Response:
        return _answer(jobs=[wire_job(j) for j in await self.slurm.jobs()])

    async def _partitions(self, request: web.Request) -> web.Response:
        parts = await self.slurm.partitions()
        if not parts:  # one partition of every node, as the rendered slurm.conf's default partition holds them
            names = sorted(self.slurm.table)
            wire = [{"name": "main", "nodes": {"configured": ",".join(names), "total": len(names)},
                     "cpus": {"total": self.cpus * len(names)}}]  # fmt: skip
        else:
            wire = [
                {"name": p.name, "nodes": {"configured": ",".join(p.nodes), "total": p.total_nodes},
                 "cpus": {"total": p.total_cpus}}
                for p in parts
            ]  # fmt: skip
        return _answer(partitions=wire)

    async def _reconfigure(self, request: web.Request) -> web.Response:
        return _answer()

    async def _update_nodes(self, request: web.Request) -> web.Response:
        """POST /nodes/ as slurmctld's update_node takes it: every named node must exist, or nothing changes."""
        body = await request.json()
        names: list[str] = list(body.get("name") or [])
        state = tuple(body.get("state") or ())
        unknown = [n for n in names if n not in self.slurm.table]
        if unknown:
            return _error(500, ESLURM_INVALID_NODE_NAME, f"Invalid node name specified: {','.join(unknown)}")
        if state == ("DRAIN",):
            await self.slurm.drain(names, reason=body.get("reason", ""))
        elif state == ("RESUME",):
            await self.slurm.resume(names)
        elif state == ("DOWN",):
            self._lose(names, "node set DOWN")
            await self.slurm.set_down(names, reason=body.get("reason", ""))
        elif state == ("POWER_UP",):
            await self.slurm.power_up(names)
        elif set(state) == {"POWER_DOWN", "POWER_DRAIN"}:
            await self.slurm.power_down_asap(names)
        else:
            return _error(500, 2019, f"Invalid node state specified: {state}")  # ESLURM_INVALID_NODE_STATE
        return _answer()

    async def _delete_node(self, request: web.Request) -> web.Response:
        await self.slurm.delete_node(request.match_info["name"])
        return _answer()

    def _records(self, kind: Any) -> Handler:
        async def handler(request: web.Request) -> web.Response:
            return _answer(**{kind: await self.slurm.accounting_records(kind)})

        return handler

    def _update_records(self, kind: Any) -> Handler:
        async def handler(request: web.Request) -> web.Response:
            await self.slurm.update_accounting_records(kind, (await request.json())[kind])
            return _answer()

        return handler

    async def _add_associations(self, request: web.Request) -> web.Response:
        await self.slurm.add_associations((await request.json())["association_condition"])
        return _answer()

    # ---- slurmctld's side: registrations and scheduling ---------------------------------------------------------
    def register(self, name: str) -> None:
        """The node's slurmd registered: a new node, IDLE."""
        self.registered.add(name)
        if name not in self.slurm.table:
            self.slurm.add_node(name)
            self.slurm.table[name] = _with_cpus(self.slurm.table[name], self.cpus)

    def unregister(self, name: str) -> None:
        """The node's pod is gone, and its preStop took the node out of Slurm: what still ran there is lost (the
        preStop set the node DOWN), and the node is deleted."""
        self.registered.discard(name)
        if name in self.slurm.table:
            self._lose([name], "its pod went away")
            for job in [j for j in self.slurm.queue if name in j.nodes]:
                self.slurm.queue.remove(job)
                self.jobs.running.pop(job.job_id, None)
            del self.slurm.table[name]

    def submit(self, count: int, *, seconds: float) -> list[int]:
        """Queue `count` one-node jobs that run `seconds` each once started."""
        ids = []
        for _ in range(count):
            job_id = self.jobs.next_id
            self.jobs.next_id += 1
            self.jobs.pending.append(_Pending(job_id, seconds))
            pending = ExitCode(status=("PENDING",), return_code=None, signal=None)
            self.slurm.queue.append(
                Job(job_id=job_id, name="sim", user="alice", state="PENDING", nodes=(), exit_code=pending,
                    reason="Resources", partition="main", node_count=1)
            )  # fmt: skip
            ids.append(job_id)
        return ids

    def schedule(self, now: float | None = None) -> None:
        """One scheduling pass: end the jobs whose time is up, then start pending jobs on free nodes."""
        now = time.monotonic() if now is None else now
        for job_id, run in list(self.jobs.running.items()):
            if run.ends_at <= now:
                del self.jobs.running[job_id]
                self.slurm.end_job(job_id)
                self.jobs.completed.add(job_id)
        if not self.jobs.pending:
            return
        free = [n.name for n in self.slurm.table.values() if n.state == {"IDLE"}]
        starts = min(len(free), len(self.jobs.pending))
        if not starts:
            return
        started = {p.job_id: p for p in self.jobs.pending[:starts]}
        del self.jobs.pending[:starts]
        self.slurm.queue = [j for j in self.slurm.queue if j.job_id not in started]
        for (job_id, pending), node in zip(started.items(), free, strict=False):
            self.slurm.run_job(job_id, node)
            self.jobs.running[job_id] = _Running(job_id, node, now + pending.seconds)

    def _lose(self, names: Sequence[str], why: str) -> None:
        for job in self.slurm.queue:
            if job.state == "RUNNING" and set(job.nodes) & set(names):
                self.jobs.lost[job.job_id] = why

    async def _scheduling(self) -> None:
        while True:
            self.schedule()
            await asyncio.sleep(PASS_INTERVAL)

    async def _watching(self, api: client.ApiClient) -> None:
        """Register each worker pod's node when its slurmd runs; unregister it when the pod goes. Lists, then watches
        from the list's resourceVersion; starts over when the watch expires or breaks. Pods are read as plain JSON:
        turning thousands into client models took the CPU this process needs to answer the operator in time."""
        core = client.CoreV1Api(api)
        selector = f"{meta.LABEL_INSTANCE}={self.cluster},{meta.LABEL_COMPONENT}={WORKERS_COMPONENT}"
        while True:
            try:
                response = await core.list_namespaced_pod(
                    self.namespace, label_selector=selector, _request_timeout=60, _preload_content=False,
                    _headers=UNCOMPRESSED,
                )  # fmt: skip
                listed = msgspec.json.decode(await response.read())
                seen = set()
                for pod in listed["items"]:
                    seen.add(pod["metadata"]["name"])
                    self._pod(pod, deleted=False)
                for name in self.registered - seen:
                    self.unregister(name)
                watcher = watch.Watch(return_type="object")  # "object": each event's pod as it came, a dict
                async for event in watcher.stream(
                    core.list_namespaced_pod,
                    self.namespace,
                    label_selector=selector,
                    resource_version=listed["metadata"]["resourceVersion"],
                    timeout_seconds=WATCH_TIMEOUT,
                    _request_timeout=WATCH_TIMEOUT + TIMEOUT,
                ):
                    if event["type"] == "ERROR":
                        break
                    self._pod(event["object"], deleted=event["type"] == "DELETED")
            except (ApiException, TimeoutError, OSError) as exc:
                log.warning("stand-in slurmrestd: pod watch broke (%s); listing again", exc)
                await asyncio.sleep(0.5)

    def _pod(self, pod: dict[str, Any], *, deleted: bool) -> None:
        md = pod["metadata"]
        name = md["name"]
        if deleted:
            self.unregister(name)
            return
        statuses = pod.get("status", {}).get("containerStatuses") or []
        slurmd = next((s for s in statuses if s.get("name") == "slurmd"), None)
        running = slurmd is not None and "running" in (slurmd.get("state") or {})
        if running and not md.get("deletionTimestamp"):  # a terminating pod's slurmd answers until the pod is gone
            self.register(name)

    async def start(self, api: client.ApiClient | None = None, *, host: str = "127.0.0.1", port: int = 0) -> str:
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        server = site._server
        assert server is not None
        sockets = getattr(server, "sockets", None) or []
        bound = sockets[0].getsockname()[1]
        self.url = f"http://{host}:{bound}"
        self._tasks.append(asyncio.create_task(self._scheduling(), name="stand-in slurmctld scheduling"))
        if api is not None:
            self._tasks.append(asyncio.create_task(self._watching(api), name="stand-in slurmd registrations"))
        return self.url

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def _with_cpus(node: Node, cpus: int) -> Node:
    return msgspec.structs.replace(node, cpus=cpus)
