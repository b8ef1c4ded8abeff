"""Command-line entry point: `slurmctl --version`, `slurmctl run`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Sequence

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from slurmctl import __version__

log = logging.getLogger(__name__)


def _split_address(address: str) -> tuple[str, int]:
    """Parse kubebuilder-style bind addresses (`:8080`, `127.0.0.1:8080`); an empty host means all interfaces."""
    host, _, port = address.rpartition(":")
    return host or "0.0.0.0", int(port)  # noqa: S104 - the operator's probes must be reachable from the kubelet


async def _health(_: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _metrics(_: web.Request) -> web.Response:
    return web.Response(body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _serve(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    runners: list[web.AppRunner] = []
    try:
        for address, routes in (
            (args.metrics_bind_address, [web.get("/metrics", _metrics)]),
            (args.health_probe_bind_address, [web.get("/healthz", _health), web.get("/readyz", _health)]),
        ):
            app = web.Application()
            app.add_routes(routes)
            runner = web.AppRunner(app)
            await runner.setup()
            runners.append(runner)
            host, port = _split_address(address)
            await web.TCPSite(runner, host, port).start()
            log.info("serving address=%s paths=%s", address, ",".join(r.path for r in routes))
        log.info("manager started (no controllers registered yet)")
        await stop.wait()
        log.info("shutting down")
    finally:
        for runner in runners:
            with contextlib.suppress(Exception):
                await runner.cleanup()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="slurmctl", description=__doc__)
    parser.add_argument("--version", action="version", version=f"slurmctl {__version__}")
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run", help="run the operator in the foreground")
    run.add_argument("--metrics-bind-address", default=os.environ.get("SLURMCTL_METRICS_BIND_ADDRESS", ":8080"))
    run.add_argument(
        "--health-probe-bind-address", default=os.environ.get("SLURMCTL_HEALTH_PROBE_BIND_ADDRESS", ":8081")
    )
    run.add_argument("--log-level", default=os.environ.get("SLURMCTL_LOG_LEVEL", "info"))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command != "run":
        _parser().print_help()
        return 2
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    asyncio.run(_serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
