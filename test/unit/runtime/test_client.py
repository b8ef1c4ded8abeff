"""The client's HTTP session consults the environment (proxies, netrc) only when proxy variables are set; what an
apply sends and gets back."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from kubernetes_asyncio.client import ApiClient, Configuration

from slurmctl.runtime import Client

PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


def _without_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


async def test_no_proxy_variables_no_environment_lookups(monkeypatch: pytest.MonkeyPatch) -> None:
    _without_proxies(monkeypatch)
    api = ApiClient(Configuration(host="https://127.0.0.1:6443"))
    try:
        Client(api)
        assert api.rest_client.pool_manager.trust_env is False
    finally:
        await api.close()


async def test_proxy_variables_are_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    _without_proxies(monkeypatch)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    api = ApiClient(Configuration(host="https://127.0.0.1:6443"))
    try:
        Client(api)
        assert api.rest_client.pool_manager.trust_env is True
    finally:
        await api.close()


async def test_an_apply_goes_out_as_compact_json_bytes_and_its_answer_comes_back_as_dicts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The apply body is sent as the client encoded it (kubernetes-asyncio's own walk and json.dumps are skipped by
    the media type's parameter), text outside ASCII intact, and the answer is decoded to plain dicts."""
    _without_proxies(monkeypatch)
    seen: list[tuple[str, str, bytes]] = []

    async def patch(request: web.Request) -> web.Response:
        body = await request.read()
        seen.append((request.method, request.headers["Content-Type"], body))
        answer = {**json.loads(body), "metadata": {"name": "c", "namespace": "ns", "resourceVersion": "7"}}
        return web.json_response(answer)

    app = web.Application()
    app.router.add_patch("/api/v1/namespaces/ns/configmaps/c", patch)
    async with TestServer(app, host="127.0.0.1") as server:
        api = ApiClient(Configuration(host=str(server.make_url(""))))
        try:
            body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"},
                    "data": {"motd": "Grüße, Åsa ✓", "n": "1"}}  # fmt: skip
            applied = await Client(api).apply(body, field_manager="m")
        finally:
            await api.close()
    [(method, content_type, sent)] = seen
    assert (method, content_type.split(";")[0]) == ("PATCH", "application/apply-patch+yaml")
    assert sent == json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    assert applied["data"] == body["data"]
    assert applied["metadata"]["resourceVersion"] == "7"


async def test_the_server_version_is_a_get_of_version(monkeypatch: pytest.MonkeyPatch) -> None:
    _without_proxies(monkeypatch)
    answer = {"major": "1", "minor": "37", "gitVersion": "v1.37.2", "platform": "linux/amd64"}
    seen: list[tuple[str, str]] = []

    async def version(request: web.Request) -> web.Response:
        seen.append((request.method, request.path))
        return web.json_response(answer)

    app = web.Application()
    app.router.add_get("/version", version)
    async with TestServer(app, host="127.0.0.1") as server:
        api = ApiClient(Configuration(host=str(server.make_url(""))))
        try:
            assert await Client(api).server_version() == answer
        finally:
            await api.close()
    assert seen == [("GET", "/version")]


async def test_requests_wait_their_turn_beyond_the_limit_and_watches_do_not(monkeypatch: pytest.MonkeyPatch) -> None:
    """Creating a thousand clusters at once kept a hundred connections to the API server open, each with its TLS
    buffer: at most `requests_in_flight` requests are in flight at once (the others wait, then go), and a watch, which
    holds its connection for minutes, neither waits for a turn nor takes one."""
    _without_proxies(monkeypatch)
    held, release, at_server = asyncio.Event(), asyncio.Event(), [0, 0]  # now, most

    async def get(request: web.Request) -> web.Response:
        at_server[0] += 1
        at_server[1] = max(at_server)
        if at_server[0] == 3:
            held.set()
        await release.wait()
        at_server[0] -= 1
        return web.json_response({"kind": "ConfigMap", "metadata": {"name": request.match_info["name"]}})

    async def watch(request: web.Request) -> web.StreamResponse:
        answer = web.StreamResponse()
        await answer.prepare(request)
        await answer.write(b'{"type":"ADDED","object":{"metadata":{"name":"w"}}}\n')
        return answer

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/ns/configmaps/{name}", get)
    app.router.add_get("/api/v1/namespaces/ns/configmaps", watch)
    async with TestServer(app, host="127.0.0.1") as server:
        api = ApiClient(Configuration(host=str(server.make_url(""))))
        try:
            client = Client(api, requests_in_flight=3)
            gets = [asyncio.create_task(client.get("v1", "ConfigMap", f"c{i}", namespace="ns")) for i in range(8)]
            async with asyncio.timeout(10):
                await held.wait()
                res = await client.resource("v1", "ConfigMap")
                events = client.watch(res, namespace="ns", resource_version="1", timeout_seconds=5)
                assert (await anext(events))["object"]["metadata"]["name"] == "w"
                await events.aclose()
                release.set()
                answers = await asyncio.gather(*gets)
        finally:
            await api.close()
    assert [a["metadata"]["name"] for a in answers] == [f"c{i}" for i in range(8)]
    assert at_server[1] == 3
