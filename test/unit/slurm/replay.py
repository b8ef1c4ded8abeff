"""An aiohttp server that answers like slurmrestd did: recorded answers from recorded/*.json, or hand-made bad ones
(`streaming`: an answer of any size, 1 GiB included, made on the fly)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer

RECORDED = Path(__file__).resolve().parent / "recorded"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
GIB = 1024**3
CHUNK = 64 * 1024


def recording(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RECORDED / f"{name}.json").read_text())
    return data


def route(name: str) -> tuple[tuple[str, str], Handler]:
    """The recorded request (method, path with query) and a handler replaying its answer."""
    rec = recording(name)
    return (rec["request"]["method"], rec["request"]["path"]), replay(name)


def replay(name: str) -> Handler:
    """A handler answering with the recorded status, content type and body."""
    rec = recording(name)

    async def handler(request: web.Request) -> web.StreamResponse:
        body = json.dumps(rec["json"]) if "json" in rec else rec["text"]
        return web.Response(status=rec["status"], text=body, content_type=rec["content_type"])

    return handler


@dataclass
class Seen:
    """What the server received: one entry per request."""

    requests: list[dict[str, Any]] = field(default_factory=list)


@asynccontextmanager
async def serve(routes: dict[tuple[str, str], Handler]) -> AsyncIterator[tuple[str, Seen]]:
    """Serve `routes` ((method, path with query) -> handler) on a free loopback port; yield the base URL and what was
    received. Any other request (another path, or other query flags) gets a 404 like slurmrestd's for an unknown
    path."""
    seen = Seen()

    async def dispatch(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        seen.requests.append(
            {
                "method": request.method,
                "path": request.path_qs,
                "headers": dict(request.headers),
                "json": json.loads(body) if body else None,
            }
        )
        handler = routes.get((request.method, request.path_qs))
        if handler is None:
            return web.Response(status=404, text="Unable to find requested URL", content_type="text/plain")
        return await handler(request)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", dispatch)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/"), seen
    finally:
        await server.close()


@dataclass
class Streamed:
    """What the stand-in did in its last answer: the bytes it wrote, and whether its handler has ended."""

    sent: int = 0
    ended: asyncio.Event = field(default_factory=asyncio.Event)


def streaming(size: int, *, prefix: bytes = b"", content_length: bool) -> tuple[Streamed, Handler]:
    """A handler answering `prefix` then spaces (JSON's own padding) up to `size` bytes, written one reused chunk at a
    time and never held whole; with a Content-Length, or chunked without one. It stops when the client disconnects."""
    streamed = Streamed()
    filler = b" " * CHUNK

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        if content_length:
            resp.content_length = size
        else:
            resp.enable_chunked_encoding()
        streamed.sent = 0
        streamed.ended.clear()
        try:
            await resp.prepare(request)
            if prefix:
                await resp.write(prefix)
                streamed.sent += len(prefix)
            while streamed.sent < size:
                piece = filler[: min(CHUNK, size - streamed.sent)]
                await resp.write(piece)
                streamed.sent += len(piece)
            await resp.write_eof()
        except ConnectionError:
            pass  # the client stopped reading and closed the connection
        finally:
            streamed.ended.set()
        return resp

    return streamed, handler
