"""slurmrestd 26.05.5's double answer to a rejected request, from a raw socket on 127.0.0.1: the operator's session
reads the first answer (so a rejected token is an auth error, not an unreachable slurmrestd); nothing else changes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest

from slurmctl.slurm import API_VERSION, SlurmAuthError, SlurmClient, SlurmUnavailable, new_session

# What slurmrestd 26.05.5 sent (seen with a raw socket) for a token signed with another key: the JSON error, then a
# second response on the same connection.
ERROR_BODY = json.dumps(
    {
        "errors": [
            {
                "description": "Unable to query ping",
                "error_number": 1007,
                "error": "Protocol authentication error",
                "source": "slurm_ping",
            }
        ],
        "warnings": [],
        "meta": {},
    },
    indent=2,  # slurmrestd's JSON has line breaks: the parser sees them inside the body
).encode()


def response(status: str, body: bytes, content_type: str) -> bytes:
    head = f"HTTP/1.1 {status}\r\nConnection: Close\r\nContent-Length: {len(body)}\r\nContent-Type: {content_type}\r\n"
    return head.encode() + b"\r\n" + body


FIRST = response("511 NETWORK AUTHENTICATION REQUIRED", ERROR_BODY, "application/json")
SECOND = response("511 NETWORK AUTHENTICATION REQUIRED", b"Protocol authentication error", "text/plain")


@asynccontextmanager
async def raw_server(*chunks: bytes, hold_open: bool = False) -> AsyncIterator[tuple[str, list[bytes]]]:
    """A server on 127.0.0.1 that reads one request head, then writes `chunks` (each flushed on its own) and closes,
    or keeps the connection open until the client closes it (`hold_open`). Yields its URL and the request heads."""
    heads: list[bytes] = []
    handlers: set[asyncio.Task[None]] = set()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        try:
            heads.append(await reader.readuntil(b"\r\n\r\n"))
            for chunk in chunks:
                writer.write(chunk)
                await writer.drain()
            if hold_open:
                await reader.read()  # until the client closes
        finally:
            writer.close()
            handlers.discard(task)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", heads
    finally:
        server.close()
        for task in list(handlers):
            task.cancel()
        await server.wait_closed()


def client(session: aiohttp.ClientSession, url: str, timeout: float = 5.0) -> SlurmClient:
    return SlurmClient(session=session, base_url=url, token=lambda: "tok.en.value", user="root", timeout=timeout)


async def test_plain_aiohttp_loses_the_first_answer() -> None:
    """Why the session exists: with aiohttp's own connector the double answer in one segment is a parse error. When
    this fails, aiohttp reads such answers itself and `slurmctl.slurm.session` can go."""
    async with raw_server(FIRST + SECOND) as (url, _), aiohttp.ClientSession() as session:
        with pytest.raises(SlurmUnavailable, match="Data after `Connection: close`"):
            await client(session, url).ping()


@pytest.mark.parametrize("chunks", [(FIRST + SECOND,), (FIRST, SECOND)], ids=["one-segment", "two-segments"])
async def test_a_rejected_token_is_an_auth_error_despite_the_second_answer(chunks: tuple[bytes, ...]) -> None:
    async with raw_server(*chunks) as (url, heads), new_session() as session:
        with pytest.raises(SlurmAuthError) as raised:
            await client(session, url).ping()
    assert "Protocol authentication error" in str(raised.value)
    assert "HTTP 511" in str(raised.value)
    assert heads and heads[0].startswith(f"GET /slurm/{API_VERSION}/ping/ ".encode())


async def test_the_answer_is_read_when_the_server_keeps_the_connection_open() -> None:
    """The answer is complete at its Content-Length: the call does not wait for the server to close (nor for the
    deadline), and the second answer behind it is dropped, not parsed."""
    async with raw_server(FIRST + SECOND, hold_open=True) as (url, _), new_session() as session:
        with pytest.raises(SlurmAuthError):
            await asyncio.wait_for(client(session, url, timeout=30).ping(), timeout=10)


async def test_a_body_that_contains_a_status_line_is_read_whole() -> None:
    """A body is never cut where it happens to contain "HTTP/1.": only bytes after a complete answer are dropped."""
    pings = {"pings": [{"hostname": "HTTP/1.1 200 OK", "pinged": "UP", "responding": True}], "errors": []}
    body = json.dumps(pings).encode()
    async with raw_server(response("200 OK", body, "application/json")) as (url, _), new_session() as session:
        assert await client(session, url).controllers() == {"HTTP/1.1 200 OK": True}


async def test_other_trailing_bytes_are_still_a_protocol_failure() -> None:
    """Only a second status line is dropped: other bytes after a closing answer stay aiohttp's parse error."""
    async with raw_server(FIRST + b"garbage\r\n\r\n") as (url, _), new_session() as session:
        with pytest.raises(SlurmUnavailable, match="Data after `Connection: close`"):
            await client(session, url).ping()


async def test_a_keep_alive_connection_serves_the_next_call() -> None:
    """Answers without `Connection: close` are untouched: two calls, one pooled connection."""
    body = json.dumps({"pings": [{"hostname": "c0", "pinged": "UP", "responding": True}], "errors": []}).encode()
    keep = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\nContent-Type: application/json\r\n\r\n".encode() + body
    connections = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                writer.write(keep)
                await writer.drain()
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        async with new_session() as session:
            assert await client(session, url).controllers() == {"c0": True}
            assert await client(session, url).controllers() == {"c0": True}
    finally:
        server.close()
    assert connections == 1
