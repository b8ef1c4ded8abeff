"""The manager: shared informers, controllers, leader election, events and HTTP endpoints under one TaskGroup.

Typical use (the reconcilers register before `run`):

    manager = Manager(client, ManagerOptions(namespace=None, leader_election=LeaderElectionConfig(ns, "slurmctl")))
    (manager.controller("workers", reconcile, for_=("slurm.slurmctl.io/v1", "SlurmCluster"))
        .owns("apps/v1", "StatefulSet")
        .owns("v1", "Service"))
    await manager.run()          # returns after SIGTERM/SIGINT; raises LeaderElectionLost when the lease is lost

Informers start at once (followers keep warm caches); controllers start only once this process leads and every
informer has synced. Shutdown stops the queues, waits up to the grace period for reconciles in flight, releases the
lease, then cancels whatever is left: nothing outlives `run`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web

from slurmctl.runtime.apply import Applier
from slurmctl.runtime.cache import Cache
from slurmctl.runtime.client import Client, Obj, cluster_scoped
from slurmctl.runtime.clock import REAL_CLOCK, Clock
from slurmctl.runtime.controller import Controller, Reconcile
from slurmctl.runtime.events import EventRecorder
from slurmctl.runtime.handlers import Handler, Predicate, enqueue_object, enqueue_owner
from slurmctl.runtime.informer import ClientSource, Informer, NamespacedInformers, Transform
from slurmctl.runtime.leader import LeaderElectionConfig, LeaderElectionLost, LeaderElector
from slurmctl.runtime.logs import kv
from slurmctl.runtime.metrics import Metrics, default_metrics
from slurmctl.runtime.server import metrics_routes, probe_routes, start_site

log = logging.getLogger(__name__)
LEADER_TASK = "leader"  # the task that acquires the lease, starts the controllers and renews the lease


@dataclass(frozen=True)
class ManagerOptions:
    namespace: str | None = None  # watch one namespace; None watches all (unless `namespaces` is set)
    namespaces: tuple[str, ...] = ()  # watch exactly these namespaces, an informer per namespace and kind
    metrics_bind_address: str = ":8080"  # "0" disables
    health_probe_bind_address: str = ":8081"  # "0" disables
    leader_election: LeaderElectionConfig | None = None
    grace_period: float = 30.0
    max_concurrent_reconciles: int = 1
    resync_period: float | None = None
    field_manager: str = "slurmctl"
    component: str = "slurmctl"
    handle_signals: bool = True


class ControllerBuilder:
    """Fluent registration of what a controller watches; every watch shares the manager's informer for its kind."""

    def __init__(self, manager: Manager, controller: Controller, for_: tuple[str, str]) -> None:
        self._manager = manager
        self.controller = controller
        self._for = for_

    def watches(
        self,
        api_version: str,
        kind: str,
        handler: Handler,
        *,
        predicates: Iterable[Predicate] = (),
        batch: float = 0.0,
    ) -> ControllerBuilder:
        """`batch`: see `Controller.listener`."""
        listener = self.controller.listener(handler, predicates, batch=batch)
        self._manager.informer(api_version, kind).add_listener(listener)
        return self

    def owns(self, api_version: str, kind: str, *, predicates: Iterable[Predicate] = ()) -> ControllerBuilder:
        """Children whose controller owner reference names this controller's primary kind enqueue that owner."""
        return self.watches(api_version, kind, enqueue_owner(*self._for), predicates=predicates)


class CacheFactory(Protocol):
    def __call__(
        self, informers: Mapping[tuple[str, str], Informer], *, namespace: str | Collection[str] | None = None
    ) -> Cache: ...


class Manager:
    def __init__(
        self,
        client: Client,
        options: ManagerOptions | None = None,
        *,
        clock: Clock = REAL_CLOCK,
        cache: CacheFactory = Cache,
        metrics: Metrics | None = None,
    ) -> None:
        """`cache` builds the read side over the manager's informers (tests pass `FakeClient.cache_factory`);
        `metrics` is where the series go and what `/metrics` serves (default: prometheus_client's registry)."""
        self.metrics = metrics or default_metrics()
        self.client = client
        self.options = options or ManagerOptions()
        self._clock = clock
        self._informers: dict[tuple[str, str], Informer] = {}
        self._selectors: dict[tuple[str, str], str] = {}
        self._transforms: dict[tuple[str, str], Transform] = {}
        self._controllers: list[Controller] = []
        self._runnables: list[tuple[str, Callable[[], Awaitable[None]]]] = []
        self.cache = cache(self._informers, namespace=self.watched_namespaces)
        self.applier = Applier(client, lookup=self.cache.lookup, metrics=self.metrics)
        le = self.options.leader_election
        self.elector = LeaderElector(client, le, clock=clock, metrics=self.metrics) if le else None
        self.recorder = EventRecorder(
            client, component=self.options.component, instance=le.identity if le else self.options.component
        )
        self._stop = asyncio.Event()
        self._running = False
        self._leading = asyncio.Event()

    # ---- registration -----------------------------------------------------------------------------------------
    @property
    def watched_namespaces(self) -> tuple[str, ...] | None:
        """The namespaces informers list and watch; None for all (cluster scope)."""
        if self.options.namespaces:
            return self.options.namespaces
        return (self.options.namespace,) if self.options.namespace else None

    def select(self, api_version: str, kind: str, *, label_selector: str) -> None:
        """Watch only the objects of a kind matching `label_selector` (e.g. the Secrets this operator labels as its
        own), so the cache never holds, and the server never sends, the others. Call before anything watches it."""
        key = (api_version, kind)
        if key in self._informers and self._selectors.get(key) != label_selector:
            raise RuntimeError(f"{kind} ({api_version}) is already watched; select it before registering watches")
        self._selectors[key] = label_selector

    def trim(self, api_version: str, kind: str, transform: Transform) -> None:
        """Keep only what `transform` returns of each object of a kind (controller-runtime's TransformFunc): for kinds
        watched cluster-wide for one field (a Node's `spec.unschedulable`), so the cache does not hold every node's
        image list. Call before anything watches it."""
        key = (api_version, kind)
        if key in self._informers and self._transforms.get(key) is not transform:
            raise RuntimeError(f"{kind} ({api_version}) is already watched; trim it before registering watches")
        self._transforms[key] = transform

    def label_selector(self, api_version: str, kind: str) -> str | None:
        return self._selectors.get((api_version, kind))

    def informer(self, api_version: str, kind: str) -> Informer:
        """The one shared informer for a kind (created on first request; started by `run`)."""
        key = (api_version, kind)
        if key not in self._informers:
            if self._running:
                raise RuntimeError("register informers before Manager.run")
            selector = self._selectors.get(key)
            name = f"{kind}.{api_version}"
            # A cluster-scoped kind has no per-namespace list: one informer, whatever the watched namespaces.
            scoped = not cluster_scoped(api_version, kind)
            namespaces = self.options.namespaces if scoped else ()
            if namespaces:
                members = [self._new_informer(api_version, kind, ns, selector, f"{name}/{ns}") for ns in namespaces]
                self._informers[key] = NamespacedInformers(members, name=name, label_selector=selector)
            else:
                namespace = self.options.namespace if scoped else None
                self._informers[key] = self._new_informer(api_version, kind, namespace, selector, name)
        return self._informers[key]

    def _new_informer(
        self, api_version: str, kind: str, namespace: str | None, selector: str | None, name: str
    ) -> Informer:
        source = ClientSource(self.client, api_version, kind, namespace=namespace, label_selector=selector)
        return Informer(
            source,
            name=name,
            clock=self._clock,
            resync_period=self.options.resync_period,
            label_selector=selector,
            transform=self._transforms.get((api_version, kind)),
        )

    def controller(
        self,
        name: str,
        reconcile: Reconcile,
        *,
        for_: tuple[str, str],
        predicates: Iterable[Predicate] = (),
        batch: float = 0.0,
        max_concurrent_reconciles: int | None = None,
        reconcile_timeout: float | None = None,
    ) -> ControllerBuilder:
        """A controller reconciling objects of kind `for_` = (apiVersion, kind), keyed by their namespace/name;
        `batch`: how long a change of one waits for others (`Controller.listener`)."""
        if self._running:
            raise RuntimeError("register controllers before Manager.run")
        ctrl = Controller(
            name,
            reconcile,
            max_concurrent_reconciles=max_concurrent_reconciles or self.options.max_concurrent_reconciles,
            reconcile_timeout=reconcile_timeout,
            clock=self._clock,
            metrics=self.metrics,
        )
        self._controllers.append(ctrl)
        builder = ControllerBuilder(self, ctrl, for_)
        return builder.watches(*for_, enqueue_object, predicates=predicates, batch=batch)

    def add_runnable(self, name: str, run: Callable[[], Awaitable[None]]) -> None:
        """A long-running task that works only while this process leads (e.g. a writer that batches status): started
        with the controllers, cancelled once their reconciles have ended at shutdown."""
        if self._running:
            raise RuntimeError("register runnables before Manager.run")
        self._runnables.append((name, run))

    @property
    def clock(self) -> Clock:
        return self._clock

    # ---- what reconcilers call --------------------------------------------------------------------------------
    async def apply(self, intent: Mapping[str, Any], *, field_manager: str | None = None) -> Obj:
        return await self.applier.apply(intent, field_manager=field_manager or self.options.field_manager)

    async def apply_status(self, obj: Mapping[str, Any], *, field_manager: str) -> Obj:
        return await self.applier.apply_status(obj, field_manager=field_manager)

    async def is_served(self, api_version: str, kind: str) -> bool:
        return await self.client.is_served(api_version, kind)

    # ---- health -----------------------------------------------------------------------------------------------
    def healthz(self) -> tuple[bool, str]:
        return (True, "ok") if self._running else (False, "manager not running")

    def readyz(self) -> tuple[bool, str]:
        for informer in self._informers.values():
            if not informer.has_synced:
                return False, f"informer {informer.name} not synced"
            if informer.is_stale():
                return False, f"informer {informer.name} watch is stale"
        return True, "ok"

    @property
    def controller_names(self) -> list[str]:
        return [ctrl.name for ctrl in self._controllers]

    @property
    def is_leading(self) -> bool:
        return self._leading.is_set()

    def stop(self) -> None:
        """Begin a graceful shutdown (what SIGTERM and SIGINT do)."""
        self._stop.set()

    # ---- run --------------------------------------------------------------------------------------------------
    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        signals = (signal.SIGTERM, signal.SIGINT) if self.options.handle_signals else ()
        for sig in signals:
            loop.add_signal_handler(sig, self.stop)
        runners: list[web.AppRunner] = []
        lost = False
        self._running = True
        try:
            for address, routes in (
                (self.options.metrics_bind_address, metrics_routes(self.metrics.registry)),
                (self.options.health_probe_bind_address, probe_routes(self.healthz, self.readyz)),
            ):
                runner = await start_site(address, routes)
                if runner is not None:
                    runners.append(runner)
            lost = await self._run_tasks()
        finally:
            self._running = False
            self._leading.clear()
            for runner in runners:
                await runner.cleanup()
            for sig in signals:
                loop.remove_signal_handler(sig)
        log.info("manager stopped")
        if lost:
            raise LeaderElectionLost("leadership lost; controllers stopped")

    async def _run_tasks(self) -> bool:
        """Everything long-running, in one TaskGroup. Returns True when leadership was lost."""
        tasks: list[asyncio.Task[Any]] = []
        workers: list[asyncio.Task[None]] = []
        lost = asyncio.Event()
        async with asyncio.TaskGroup() as tg:
            for informer in self._informers.values():
                tasks.append(tg.create_task(informer.run(), name=f"informer-{informer.name}"))
            tasks.append(tg.create_task(self.recorder.run(), name="event-recorder"))
            tasks.append(tg.create_task(self._lead(tg, tasks, workers, lost), name=LEADER_TASK))
            log.info("manager started %s", kv(informers=len(self._informers), controllers=len(self._controllers)))
            await self._stop.wait()
            log.info("shutting down %s", kv(grace_period=self.options.grace_period, leadership_lost=lost.is_set()))
            # After losing the lease another replica may already lead: stop reconciling at once, no grace.
            await self._shutdown(tasks, workers, grace=0.0 if lost.is_set() else self.options.grace_period)
        return lost.is_set()

    async def _lead(
        self,
        tg: asyncio.TaskGroup,
        tasks: list[asyncio.Task[Any]],
        workers: list[asyncio.Task[None]],
        lost: asyncio.Event,
    ) -> None:
        if self.elector is not None:
            await self.elector.acquire()
        await asyncio.gather(*(i.wait_synced() for i in self._informers.values()))
        for name, run in self._runnables:
            tasks.append(tg.create_task(_awaited(run), name=name))
        for ctrl in self._controllers:
            workers.extend(ctrl.start(tg))
        self._leading.set()
        if self.elector is not None:
            try:
                await self.elector.hold()
            except LeaderElectionLost:
                lost.set()
                self.stop()

    async def _shutdown(
        self, tasks: list[asyncio.Task[Any]], workers: list[asyncio.Task[None]], *, grace: float
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        for ctrl in self._controllers:
            ctrl.queue.shutdown()
        if workers and grace > 0:
            _, pending = await asyncio.wait(workers, timeout=grace)
            if pending:
                log.warning("reconciles still running at the end of the grace period %s", kv(cancelled=len(pending)))
        self._leading.clear()
        if self.elector is not None:
            # Renewals stop first: one landing between the release's read of the Lease and its write makes that
            # write conflict, and the successor then waits out the whole lease.
            holding = [task for task in tasks if task.get_name() == LEADER_TASK]
            for task in holding:
                task.cancel()
            if holding:
                await asyncio.wait(holding)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.1, deadline - loop.time())):
                    await self.elector.release()
        for task in (*tasks, *workers):
            task.cancel()


async def _awaited(run: Callable[[], Awaitable[None]]) -> None:
    await run()
