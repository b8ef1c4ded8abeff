"""The manager's HTTP endpoints: `/metrics` on one address, `/healthz` and `/readyz` on another, as kubebuilder."""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry

from slurmctl.runtime.logs import kv
from slurmctl.runtime.metrics import exposition

log = logging.getLogger(__name__)

Check = Callable[[], tuple[bool, str]]


def split_address(address: str) -> tuple[str, int]:
    """Parse kubebuilder-style bind addresses (`:8080`, `127.0.0.1:8080`); an empty host means all interfaces."""
    host, _, port = address.rpartition(":")
    return host or "0.0.0.0", int(port)  # noqa: S104 - the probes must be reachable from the kubelet


def disabled(address: str) -> bool:
    """kubebuilder's convention: bind address "0" (or empty) turns the endpoint off."""
    return address in ("", "0")


def _metrics(registry: CollectorRegistry) -> Callable[[web.Request], object]:
    async def handler(_: web.Request) -> web.Response:
        return web.Response(body=exposition(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    return handler


def _probe(check: Check) -> Callable[[web.Request], object]:
    async def handler(_: web.Request) -> web.Response:
        ok, detail = check()
        return web.Response(status=200 if ok else 500, text=detail)

    return handler


async def start_site(address: str, routes: list[web.RouteDef]) -> web.AppRunner | None:
    if disabled(address):
        return None
    app = web.Application()
    app.add_routes(routes)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    host, port = split_address(address)
    try:
        await web.TCPSite(runner, host, port).start()
    except BaseException:
        await runner.cleanup()
        raise
    log.info("serving %s", kv(address=address, paths=",".join(r.path for r in routes if isinstance(r, web.RouteDef))))
    return runner


def metrics_routes(registry: CollectorRegistry) -> list[web.RouteDef]:
    return [web.get("/metrics", _metrics(registry))]  # type: ignore[arg-type]


def probe_routes(healthz: Check, readyz: Check) -> list[web.RouteDef]:
    return [web.get("/healthz", _probe(healthz)), web.get("/readyz", _probe(readyz))]  # type: ignore[arg-type]
