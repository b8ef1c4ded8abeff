"""Informers survive an API server restart and a forced `410 Gone` on a control plane of this module's own."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import config

from slurmctl.runtime import Client, Conflict, Informer
from slurmctl.runtime.informer import ClientSource
from test.e2e.harness import control_plane_script, eventually
from test.e2e.test_runtime_manager import Proc

pytestmark = pytest.mark.e2e
NS = "restarts"


@pytest.fixture(scope="module")
def own_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Restarting the API server or compacting etcd must never touch the session's shared control plane."""
    state = tmp_path_factory.mktemp("own-control-plane")
    try:
        up = control_plane_script("up", state)
        assert up.returncode == 0, up.stderr
        yield state
    finally:
        control_plane_script("down", state)


def plane(state: Path, command: str) -> None:
    proc = control_plane_script(command, state)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture
async def rt(own_plane: Path) -> AsyncIterator[Client]:
    api = await config.new_client_from_config(config_file=str(own_plane / "kubeconfig"))
    try:
        c = Client(api, timeout=5)
        with contextlib.suppress(Conflict):  # already there from the other test
            await c.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        yield c
    finally:
        await api.close()


@pytest.fixture
async def watched(rt: Client) -> AsyncIterator[tuple[Informer, list[tuple[str, str]]]]:
    inf = Informer(ClientSource(rt, "v1", "ConfigMap", namespace=NS), name="cm")
    seen: list[tuple[str, str]] = []
    inf.add_listener(lambda e: seen.append((e.type.value, e.obj["metadata"]["name"])))
    task = asyncio.create_task(inf.run())
    try:
        await asyncio.wait_for(inf.wait_synced(), 30)
        yield inf, seen
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def cm(name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS}, "data": data}


async def cache_matches_server(rt: Client, inf: Informer) -> bool:
    listed = await rt.list("v1", "ConfigMap", namespace=NS)
    live = {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in listed["items"]}
    cached = {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in inf.store}
    return live == cached


def etcd(state: Path, path: str, body: dict[str, Any]) -> dict[str, Any]:
    endpoint = (state / "etcd-endpoint").read_text().strip()
    req = urllib.request.Request(endpoint + path, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        result: dict[str, Any] = json.loads(resp.read())
        return result


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


async def test_cache_converges_after_an_apiserver_restart_with_nothing_missed(
    own_plane: Path, rt: Client, watched: tuple[Informer, list[tuple[str, str]]]
) -> None:
    inf, seen = watched
    for name in ("keep", "change", "remove"):
        await rt.apply(cm(name, v="1"), field_manager="e2e")
    await eventually(lambda: cache_matches_server(rt, inf), timeout=30, what="initial convergence")

    await asyncio.to_thread(plane, own_plane, "stop-apiserver")
    await asyncio.to_thread(plane, own_plane, "start-apiserver")
    # Change things at once: the informer is most likely still backing off, so it must catch up on reconnect.
    await rt.apply(cm("change", v="2"), field_manager="e2e")
    await rt.delete("v1", "ConfigMap", "remove", namespace=NS)
    await rt.apply(cm("added", v="1"), field_manager="e2e")

    await eventually(lambda: cache_matches_server(rt, inf), timeout=60, what="the cache to converge after restart")
    assert inf.store.get(f"{NS}/change")["data"] == {"v": "2"}  # type: ignore[index]
    assert ("delete", "remove") in seen and ("add", "added") in seen
    assert not inf.is_stale()


async def test_410_gone_relists_and_emits_deletes_for_objects_that_vanished(
    own_plane: Path, rt: Client, watched: tuple[Informer, list[tuple[str, str]]]
) -> None:
    inf, seen = watched
    await rt.apply(cm("gone-a", v="1"), field_manager="e2e")
    await rt.apply(cm("gone-b", v="1"), field_manager="e2e")
    await eventually(lambda: cache_matches_server(rt, inf), timeout=30, what="initial convergence")
    relists = inf.relists
    old_rv = inf.resource_version

    await asyncio.to_thread(plane, own_plane, "stop-apiserver")
    # Behind the API server's back: delete one object in etcd, then compact the history, so the informer's
    # resourceVersion is too old and nothing but a relist can reveal the deletion.
    deleted = etcd(own_plane, "/v3/kv/deleterange", {"key": b64(f"/registry/configmaps/{NS}/gone-b")})
    assert deleted.get("deleted") == "1", deleted
    revision = int(etcd(own_plane, "/v3/kv/range", {"key": b64("/"), "limit": 1})["header"]["revision"])
    etcd(own_plane, "/v3/kv/compaction", {"revision": revision, "physical": True})
    assert revision > int(old_rv)
    await asyncio.to_thread(plane, own_plane, "start-apiserver")

    await eventually(lambda: asyncio.sleep(0, inf.relists > relists), timeout=60, what="a relist after 410")
    await eventually(lambda: cache_matches_server(rt, inf), timeout=60, what="the relisted cache to match")
    assert inf.store.get(f"{NS}/gone-b") is None
    assert ("delete", "gone-b") in seen
    assert int(inf.resource_version) >= revision


async def test_losing_the_lease_stops_the_controllers_and_exits_non_zero(
    own_plane: Path, rt: Client, tmp_path: Path
) -> None:
    proc = Proc(tmp_path, "loser", own_plane / "kubeconfig", NS)
    try:
        await proc.logged("became leader", 30)
        await asyncio.to_thread(plane, own_plane, "stop-apiserver")
        started = time.monotonic()
        code = await asyncio.to_thread(proc.popen.wait, 30)
        assert code == 1, proc.stderr()
        assert time.monotonic() - started < 15  # renew deadline 10 s
        assert "lost leadership" in proc.stderr()
    finally:
        proc.kill()
        await asyncio.to_thread(plane, own_plane, "start-apiserver")
