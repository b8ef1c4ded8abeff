"""The cap on slurmrestd's answers (slurm/answer.py), against a stand-in slurmrestd on 127.0.0.1 that streams a 1 GiB
answer, made on the fly from one reused chunk: the client refuses it at the cap, quickly, without holding more than
the cap, and the shared session keeps working for the next request."""

from __future__ import annotations

import asyncio
import gzip
import json
import time
import tracemalloc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest
from aiohttp import web

from slurmctl.slurm import (
    API_VERSION,
    DEFAULT_MAX_ANSWER_BYTES,
    SlurmAnswerTooLargeError,
    SlurmClient,
    SlurmProtocolError,
    describe_size,
)
from test.unit.slurm.replay import GIB, Handler, Streamed, recording, replay, serve, streaming

MIB = 1024**2
NODES = recording("nodes_idle")["request"]["path"]
WHERE = f"slurmrestd GET /slurm/{API_VERSION}/nodes/"
# What may be in flight when the client stops reading: the kernel's socket buffers on loopback (a few MiB each way)
# and aiohttp's own (a few chunks). Far below the 1 GiB the stand-in would send.
IN_FLIGHT = 32 * MIB
DEADLINE = 20.0  # seconds; each refusal here takes well under one


@asynccontextmanager
async def standin(handler: Handler) -> AsyncIterator[str]:
    """slurmrestd's stand-in: `handler` answers /nodes/, the recorded answer /ping/."""
    async with serve({("GET", NODES): handler, ("GET", f"/slurm/{API_VERSION}/ping/"): replay("ping")}) as (url, _):
        yield url


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def client(session: aiohttp.ClientSession, url: str, *, cap: int = DEFAULT_MAX_ANSWER_BYTES) -> SlurmClient:
    return SlurmClient(
        session=session, base_url=url, token=lambda: "tok.en.value", timeout=DEADLINE, max_answer_bytes=cap
    )


async def refused(c: SlurmClient, streamed: Streamed) -> tuple[SlurmAnswerTooLargeError, float]:
    """The error reading /nodes/ ends with and the seconds it took; returns once the stand-in saw the client go."""
    started = time.monotonic()
    with pytest.raises(SlurmAnswerTooLargeError) as caught:
        await c.nodes()
    took = time.monotonic() - started
    async with asyncio.timeout(DEADLINE):
        await streamed.ended.wait()
    return caught.value, took


async def test_a_1_gib_answer_that_says_so_is_refused_unread_at_the_default_cap(session: aiohttp.ClientSession) -> None:
    streamed, handler = streaming(GIB, content_length=True)
    async with standin(handler) as url:
        error, took = await refused(client(session, url), streamed)
    assert str(error) == (
        f"{WHERE}: answer larger than the operator's cap of 256 MiB (Content-Length {GIB} bytes); not read"
    )
    assert error.limit == DEFAULT_MAX_ANSWER_BYTES == 256 * MIB
    assert isinstance(error, SlurmProtocolError), "handled like every other Slurm failure"
    assert streamed.sent <= IN_FLIGHT, "the connection was closed at once, not drained"
    assert took < DEADLINE / 2


@pytest.mark.parametrize(
    ("content_length", "detail"),
    [(False, "; reading stopped at the cap"), (True, f" (Content-Length {GIB} bytes); not read")],
    ids=["chunked", "content-length"],
)
async def test_a_1_gib_answer_is_cut_at_the_cap_holding_no_more_than_the_cap(
    session: aiohttp.ClientSession, content_length: bool, detail: str
) -> None:
    cap = 4 * MIB
    streamed, handler = streaming(GIB, prefix=b'{"nodes": [', content_length=content_length)
    async with standin(handler) as url:
        c = client(session, url, cap=cap)
        tracemalloc.start()
        try:
            error, took = await refused(c, streamed)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        await c.ping()  # the session all clusters share is not left with the cut connection
    assert str(error) == f"{WHERE}: answer larger than the operator's cap of 4 MiB{detail}"
    # The body grows in one bytearray (CPython over-allocates it by an eighth), besides a few of aiohttp's chunks.
    assert peak < cap + cap // 8 + 2 * MIB, f"held {peak} bytes at most for a cap of {cap}"
    assert streamed.sent <= cap + IN_FLIGHT
    assert took < DEADLINE / 2


async def test_the_cap_counts_the_bytes_after_decompression(session: aiohttp.ClientSession) -> None:
    """A small gzip answer (its Content-Length far under the cap) that inflates past the cap is cut too."""
    body = gzip.compress(b'{"nodes": [' + b" " * (8 * MIB), compresslevel=1)
    assert len(body) < MIB

    async def handler(request: web.Request) -> web.StreamResponse:
        headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
        return web.Response(body=body, headers=headers)

    async with standin(handler) as url:
        with pytest.raises(SlurmAnswerTooLargeError, match="cap of 4 MiB; reading stopped at the cap"):
            await client(session, url, cap=4 * MIB).nodes()


@pytest.mark.parametrize("content_length", [False, True], ids=["chunked", "content-length"])
async def test_an_answer_of_exactly_the_cap_decodes_and_one_byte_more_is_refused(
    session: aiohttp.ClientSession, content_length: bool
) -> None:
    answer = json.dumps(recording("nodes_idle")["json"]).encode()
    size = 3 * MIB + 17  # several chunks, the last one partial
    _, handler = streaming(size, prefix=answer, content_length=content_length)
    async with standin(handler) as url:
        (node,) = await client(session, url, cap=size).nodes()
        assert node.name == recording("nodes_idle")["json"]["nodes"][0]["name"]
        with pytest.raises(SlurmAnswerTooLargeError, match=f"cap of {size - 1} bytes"):
            await client(session, url, cap=size - 1).nodes()


def test_the_cap_must_be_positive_and_reads_as_a_person_writes_it() -> None:
    with pytest.raises(ValueError, match="max_answer_bytes"):
        SlurmClient(session=None, base_url="http://x", token=str, max_answer_bytes=0)  # type: ignore[arg-type]
    assert [describe_size(n) for n in (256 * MIB, GIB, 3 * 1024, 1000, 3 * MIB + 17)] == [
        "256 MiB",
        "1 GiB",
        "3 KiB",
        "1000 bytes",
        f"{3 * MIB + 17} bytes",
    ]
