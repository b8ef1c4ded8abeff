"""The Slurm client against slurmrestd 24.11's recorded answers, and against answers that go wrong."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import aiohttp
import aiohttp.abc
import pytest
from aiohttp import web

from slurmctl.slurm import (
    API_VERSION,
    SlurmApiError,
    SlurmAuthError,
    SlurmClient,
    SlurmError,
    SlurmProtocolError,
    SlurmUnavailable,
)
from test.unit.slurm.replay import Handler, recording, replay, route, serve

P = f"/slurm/{API_VERSION}"
# The paths with the query flags the client sends, as recorded.
NODES = recording("nodes_idle")["request"]["path"]
JOBS = recording("jobs")["request"]["path"]
TOKEN = "tok.en.value"


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def client(
    session: aiohttp.ClientSession, url: str, *, timeout: float = 5.0, token: Callable[[], str] | None = None
) -> SlurmClient:
    return SlurmClient(session=session, base_url=url, token=token or (lambda: TOKEN), user="root", timeout=timeout)


def assert_one_line(exc: SlurmError) -> str:
    text = str(exc)
    assert text and "\n" not in text and len(text) <= 300, text
    assert TOKEN not in text
    return text


# --- recorded answers ----------------------------------------------------------------------------------------------


async def test_ping_sends_the_user_and_token_headers(session: aiohttp.ClientSession) -> None:
    async with serve({("GET", f"{P}/ping/"): replay("ping")}) as (url, seen):
        await client(session, url).ping()
    headers = seen.requests[0]["headers"]
    assert headers["X-SLURM-USER-NAME"] == "root"
    assert headers["X-SLURM-USER-TOKEN"] == TOKEN


async def test_a_token_is_asked_for_on_every_request(session: aiohttp.ClientSession) -> None:
    tokens = iter(["first", "second"])
    async with serve({("GET", f"{P}/ping/"): replay("ping")}) as (url, seen):
        c = client(session, url, token=lambda: next(tokens))
        await c.ping()
        await c.ping()
    assert [r["headers"]["X-SLURM-USER-TOKEN"] for r in seen.requests] == ["first", "second"]


@pytest.mark.parametrize(
    ("recorded", "base", "display", "drain", "busy", "drained", "alloc_cpus"),
    [
        ("nodes_idle", "IDLE", "Idle", False, False, False, 0),
        ("nodes_mixed", "MIXED", "Mixed", False, True, False, 1),
        ("nodes_allocated", "ALLOCATED", "Allocated", False, True, False, 2),
        ("nodes_drained", "IDLE", "Drained", True, False, True, 0),
        ("nodes_draining", "ALLOCATED", "Draining", True, True, False, 2),
    ],
)
async def test_nodes_in_each_recorded_state(
    session: aiohttp.ClientSession,
    recorded: str,
    base: str,
    display: str,
    drain: bool,
    busy: bool,
    drained: bool,
    alloc_cpus: int,
) -> None:
    async with serve(dict([route(recorded)])) as (url, _):
        (node,) = await client(session, url).nodes()
    wire = recording(recorded)["json"]["nodes"][0]
    assert node.name == wire["name"]
    assert node.state == frozenset(wire["state"])
    assert (node.base, node.display, node.drain, node.busy, node.drained) == (base, display, drain, busy, drained)
    assert (node.cpus, node.alloc_cpus) == (2, alloc_cpus)
    assert node.partitions == ("debug",)


async def test_a_drained_node_carries_the_reason_and_who_set_it(session: aiohttp.ClientSession) -> None:
    async with serve(dict([route("nodes_drained")])) as (url, _):
        (node,) = await client(session, url).nodes()
    assert node.reason == "slurmctl: recorded drain"
    assert node.reason_set_by == "root"
    # When the drain began: the drain gate's drainTimeout counts from it.
    assert node.reason_changed_at == datetime.fromtimestamp(1795449428, UTC)


async def test_an_idle_node_has_no_reason_and_nobody_set_it(session: aiohttp.ClientSession) -> None:
    assert recording("nodes_idle")["json"]["nodes"][0]["reason_set_by_user"] == "root", "Slurm's own quirk"
    async with serve(dict([route("nodes_idle")])) as (url, _):
        (node,) = await client(session, url).nodes()
    assert (node.reason, node.reason_set_by, node.reason_changed_at) == ("", "", None)


async def test_a_resumed_node_does_not_keep_its_old_drain_reason(session: aiohttp.ClientSession) -> None:
    # Slurm 24.11 keeps the reason on a resumed node (scontrol show node still prints it; sinfo -R does not).
    rec = recording("nodes_drained")["json"]
    resumed = {**rec, "nodes": [{**rec["nodes"][0], "state": ["IDLE"]}]}
    assert resumed["nodes"][0]["reason"] == "slurmctl: recorded drain"
    async with serve({("GET", NODES): answer(200, json.dumps(resumed))}) as (url, _):
        (node,) = await client(session, url).nodes()
    assert (node.reason, node.reason_set_by, node.display) == ("", "", "Idle")


async def test_jobs_completed_failed_running_pending(session: aiohttp.ClientSession) -> None:
    async with serve(dict([route("jobs")])) as (url, _):
        jobs = {j.name: j for j in await client(session, url).jobs()}
    node = recording("nodes_idle")["json"]["nodes"][0]["name"]
    assert {name: j.state for name, j in jobs.items()} == {
        "done": "COMPLETED",
        "fails": "FAILED",
        "one-cpu": "RUNNING",
        "rest": "RUNNING",
        "waiting": "PENDING",
    }
    assert jobs["one-cpu"].nodes == (node,)
    assert jobs["waiting"].nodes == ()
    assert (jobs["waiting"].reason, jobs["waiting"].partition, jobs["waiting"].node_count) == ("", "debug", 1)
    assert jobs["fails"].reason == "NonZeroExitCode"
    assert jobs["done"].exit_code.return_code == 0
    assert jobs["done"].exit_code.status == ("SUCCESS",)
    assert jobs["fails"].exit_code.return_code == 3
    assert jobs["fails"].exit_code.status == ("ERROR",)
    assert jobs["fails"].exit_code.signal is None
    assert {j.user for j in jobs.values()} == {"root"}
    assert len({j.job_id for j in jobs.values()}) == 5


async def test_a_dynamic_node_not_yet_registered_is_listed_as_future(session: aiohttp.ClientSession) -> None:
    # GET /nodes/ leaves FUTURE nodes out unless asked: the client asks (the route exists only with its flags).
    async with serve(dict([route("nodes_future")])) as (url, _):
        nodes = {n.name: n for n in await client(session, url).nodes()}
    assert nodes["dyn1"].display == "Future"
    assert "DYNAMIC_NORM" in nodes["dyn1"].state
    assert nodes["dyn1"].partitions == ()
    assert not nodes["dyn1"].busy


async def test_without_job_resources_the_host_list_names_the_nodes(session: aiohttp.ClientSession) -> None:
    rec = recording("jobs")["json"]
    running = next(j for j in rec["jobs"] if j["job_state"] == ["RUNNING"])
    bare = {**rec, "jobs": [{**running, "job_resources": None, "nodes": "gpu[01-02],cpu7"}]}
    async with serve({("GET", JOBS): answer(200, json.dumps(bare))}) as (url, _):
        (job,) = await client(session, url).jobs()
    assert job.nodes == ("gpu01", "gpu02", "cpu7")


async def test_a_host_list_that_does_not_parse_is_a_protocol_error(session: aiohttp.ClientSession) -> None:
    rec = recording("jobs")["json"]
    bad = {**rec, "jobs": [{**rec["jobs"][0], "job_resources": None, "nodes": "gpu[01-"}]}
    async with serve({("GET", JOBS): answer(200, json.dumps(bad))}) as (url, _):
        with pytest.raises(SlurmProtocolError, match="gpu"):
            await client(session, url).jobs()


async def test_partitions(session: aiohttp.ClientSession) -> None:
    sent: list[tuple[str, str]] = []
    async with serve(dict([route("partitions")])) as (url, _):
        slurm = SlurmClient(session=session, base_url=url, token=lambda: TOKEN, on_request=lambda *r: sent.append(r))
        (part,) = await slurm.partitions()
    assert sent == [("GET", "/slurm/v0.0.42/partitions/")], "every request is told (the operator counts them)"
    node = recording("nodes_idle")["json"]["nodes"][0]["name"]
    assert (part.name, part.nodes, part.total_nodes, part.total_cpus) == ("debug", (node,), 1, 2)


@pytest.mark.parametrize(("call", "recorded"), [("drain", "drain"), ("resume", "resume")])
async def test_drain_and_resume_send_what_slurmrestd_accepted(
    session: aiohttp.ClientSession, call: str, recorded: str
) -> None:
    rec = recording(recorded)
    sent = rec["request"]["json"]
    async with serve({("POST", f"{P}/nodes/"): replay(recorded)}) as (url, seen):
        c = client(session, url)
        if call == "drain":
            await c.drain(sent["name"], reason=sent["reason"])
        else:
            await c.resume(sent["name"])
    assert seen.requests[0]["json"] == sent


async def test_set_down_sends_the_drain_body_with_state_down(session: aiohttp.ClientSession) -> None:
    """slurmrestd answers a DOWN as it answers a DRAIN (the same POST /nodes/, another state)."""
    sent = {**recording("drain")["request"]["json"], "state": ["DOWN"], "reason": "slurmctl: node k1 NotReady"}
    async with serve({("POST", f"{P}/nodes/"): replay("drain")}) as (url, seen):
        c = client(session, url)
        await c.set_down(sent["name"], reason=sent["reason"])
        await c.set_down([], reason="slurmctl: nothing")
        with pytest.raises(ValueError, match="reason"):
            await c.set_down(["vm"], reason="")
    assert [r["json"] for r in seen.requests] == [sent]


async def test_power_down_asap_sends_power_down_and_power_drain(session: aiohttp.ClientSession) -> None:
    """What scontrol sends for state=POWER_DOWN_ASAP (both flags: drained, powered down once idle); slurmrestd
    answers it as a DRAIN (the same POST /nodes/, another state)."""
    name = recording("drain")["request"]["json"]["name"]
    async with serve({("POST", f"{P}/nodes/"): replay("drain")}) as (url, seen):
        c = client(session, url)
        await c.power_down_asap(name)
        await c.power_down_asap([])
        with pytest.raises(ValueError, match="node name"):
            await c.power_down_asap(["n[1-2]"])
    assert [r["json"] for r in seen.requests] == [{"name": name, "state": ["POWER_DOWN", "POWER_DRAIN"]}]


async def test_drain_or_resume_of_no_nodes_sends_nothing(session: aiohttp.ClientSession) -> None:
    async with serve({}) as (url, seen):
        c = client(session, url)
        await c.drain([], reason="slurmctl: nothing")
        await c.resume([])
    assert seen.requests == []


@pytest.mark.parametrize("name", ["n[1-3]", "a,b", "", "with space"])
async def test_a_name_slurm_would_read_as_several_nodes_is_refused(session: aiohttp.ClientSession, name: str) -> None:
    async with serve({}) as (url, seen):
        with pytest.raises(ValueError, match="node name"):
            await client(session, url).drain([name], reason="slurmctl: x")
    assert seen.requests == []


async def test_drain_needs_a_reason_and_a_list(session: aiohttp.ClientSession) -> None:
    async with serve({}) as (url, seen):
        c = client(session, url)
        with pytest.raises(ValueError, match="reason"):
            await c.drain(["vm"], reason=" ")
        with pytest.raises(TypeError):
            await c.resume("vm")
    assert seen.requests == []


async def test_delete_node_and_reconfigure(session: aiohttp.ClientSession) -> None:
    deleted = recording("delete_node")["request"]["path"]
    routes = {("DELETE", deleted): replay("delete_node"), ("GET", f"{P}/reconfigure/"): replay("reconfigure")}
    async with serve(routes) as (url, seen):
        c = client(session, url)
        await c.delete_node(deleted.rsplit("/", 1)[1])
        await c.reconfigure()
    assert [(r["method"], r["path"]) for r in seen.requests] == [("DELETE", deleted), ("GET", f"{P}/reconfigure/")]


# --- recorded refusals -----------------------------------------------------------------------------------------------


async def test_draining_an_unknown_node_is_slurms_error(session: aiohttp.ClientSession) -> None:
    async with serve({("POST", f"{P}/nodes/"): replay("error_drain")}) as (url, _):
        with pytest.raises(SlurmApiError) as info:
            await client(session, url).drain(["nosuch"], reason="x")
    assert info.value.status == 500
    assert info.value.errors == ["Failure to update node nosuch: Invalid node name specified"]
    text = assert_one_line(info.value)
    assert f"POST {P}/nodes/" in text and "Invalid node name specified" in text


async def test_deleting_a_node_from_slurm_conf_is_slurms_error(session: aiohttp.ClientSession) -> None:
    path = recording("error_delete_static")["request"]["path"]
    async with serve({("DELETE", path): replay("error_delete_static")}) as (url, _):
        with pytest.raises(SlurmApiError, match="Invalid node state specified"):
            await client(session, url).delete_node(path.rsplit("/", 1)[1])


async def test_no_token_is_an_auth_error(session: aiohttp.ClientSession) -> None:
    assert recording("unauthorized")["status"] == 401
    async with serve(dict([route("unauthorized")])) as (url, _):
        with pytest.raises(SlurmAuthError) as info:
            await client(session, url).nodes()
    assert "HTTP 401" in assert_one_line(info.value)


async def test_a_token_signed_with_another_key_is_an_auth_error(session: aiohttp.ClientSession) -> None:
    # slurmrestd 24.11 answers 511 with Slurm's error 1007, not 401.
    assert recording("bad_token")["status"] == 511
    async with serve(dict([route("bad_token")])) as (url, _):
        with pytest.raises(SlurmAuthError) as info:
            await client(session, url).nodes()
    assert "Protocol authentication error" in assert_one_line(info.value)


# --- bad answers -----------------------------------------------------------------------------------------------------


def answer(status: int, body: str, content_type: str = "application/json") -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.Response(status=status, text=body, content_type=content_type)

    return handler


def with_errors(*errors: dict[str, Any], status: int = 500) -> Handler:
    return answer(status, json.dumps({"errors": list(errors), "warnings": [], "meta": {}}))


@pytest.mark.parametrize(
    ("handler", "error", "words"),
    [
        (answer(200, "{not json"), SlurmProtocolError, "not JSON"),
        (answer(200, "<html>proxy</html>", "text/html"), SlurmProtocolError, "not JSON"),
        (answer(200, ""), SlurmProtocolError, "empty body"),
        (answer(200, "[1, 2]"), SlurmProtocolError, "not a JSON object"),
        (answer(200, '{"errors": []}'), SlurmProtocolError, "nodes"),
        (answer(200, '{"nodes": "vm"}'), SlurmProtocolError, "nodes"),
        (
            answer(200, '{"nodes": [{"name": "vm", "state": ["IDLE"]}]}'),
            SlurmProtocolError,
            "missing required field `cpus` - at `$.nodes[0]`",
        ),
        (answer(200, '{"nodes": [{"name": "vm", "state": "IDLE", "cpus": 2}]}'), SlurmProtocolError, "state"),
        (answer(500, "Internal Server Error", "text/plain"), SlurmUnavailable, "HTTP 500"),
        (answer(502, "<html>\n<body>Bad Gateway</body>\n</html>", "text/html"), SlurmUnavailable, "HTTP 502"),
        (answer(503, ""), SlurmUnavailable, "no body"),
        (answer(404, "Unable to find requested URL", "text/plain"), SlurmProtocolError, "HTTP 404"),
        (answer(403, "Forbidden", "text/plain"), SlurmAuthError, "HTTP 403"),
        (
            with_errors({"description": "x", "error": "Unable to contact slurm controller", "error_number": 1001}),
            SlurmUnavailable,
            "cannot reach slurmctld",
        ),
        (
            with_errors({"description": "y", "error": "Access/permission denied", "error_number": 2002}),
            SlurmAuthError,
            "permission denied",
        ),
        (with_errors({"error": "Something\nodd", "error_number": 9999}, status=200), SlurmApiError, "Something odd"),
    ],
)
async def test_a_bad_answer_is_the_right_error_on_one_line(
    session: aiohttp.ClientSession, handler: Handler, error: type[SlurmError], words: str
) -> None:
    async with serve({("GET", NODES): handler}) as (url, _):
        with pytest.raises(SlurmError) as info:
            await client(session, url).nodes()
    assert type(info.value) is error
    text = assert_one_line(info.value)
    assert words in text
    assert f"GET {P}/nodes/" in text


async def test_a_huge_error_body_is_cut_to_one_short_line(session: aiohttp.ClientSession) -> None:
    async with serve({("GET", NODES): answer(500, "x\n" * 100_000, "text/plain")}) as (url, _):
        with pytest.raises(SlurmUnavailable) as info:
            await client(session, url).nodes()
    assert_one_line(info.value)


async def test_slurmctld_gone_fails_ping_though_slurmrestd_answers_200(session: aiohttp.ClientSession) -> None:
    assert recording("ctld_down_ping")["status"] == 200
    async with serve(dict([route("ctld_down_ping")])) as (url, _):
        with pytest.raises(SlurmUnavailable) as info:
            await client(session, url).ping()
    assert "slurmctld does not answer" in assert_one_line(info.value)


async def test_controllers_says_which_slurmctld_host_answered_slurmrestds_ping(session: aiohttp.ClientSession) -> None:
    async with serve(dict([route("ping")])) as (url, _):
        assert await client(session, url).controllers() == {"vm": True}
    async with serve(dict([route("ctld_down_ping")])) as (url, _):
        assert await client(session, url).controllers() == {"vm": False}, "an answer, not an error: the host is down"


async def test_slurmctld_gone_makes_nodes_unavailable_not_a_slurm_refusal(session: aiohttp.ClientSession) -> None:
    assert recording("ctld_down_nodes")["status"] == 502
    async with serve(dict([route("ctld_down_nodes")])) as (url, _):
        with pytest.raises(SlurmUnavailable) as info:
            await client(session, url).nodes()
    assert "Unable to contact slurm controller" in assert_one_line(info.value)


async def test_a_server_that_never_answers_runs_into_the_deadline(session: aiohttp.ClientSession) -> None:
    never = asyncio.Event()

    async def stall(request: web.Request) -> web.StreamResponse:
        await never.wait()
        raise AssertionError("unreachable")

    async with serve({("GET", NODES): stall}) as (url, _):
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(SlurmUnavailable) as info:
            await client(session, url, timeout=0.3).nodes()
        assert loop.time() - started < 5
    assert "no answer" in assert_one_line(info.value) and "0.3s" in str(info.value)


async def test_a_body_that_stops_half_way_runs_into_the_deadline(session: aiohttp.ClientSession) -> None:
    never = asyncio.Event()

    async def half(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json", "Content-Length": "100"})
        await resp.prepare(request)
        await resp.write(b'{"nodes": [')
        await never.wait()
        return resp

    async with serve({("GET", NODES): half}) as (url, _):
        with pytest.raises(SlurmUnavailable, match="no answer"):
            await client(session, url, timeout=0.3).nodes()


async def test_a_connection_closed_mid_answer_is_unavailable(session: aiohttp.ClientSession) -> None:
    async def cut(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json", "Content-Length": "100"})
        await resp.prepare(request)
        await resp.write(b'{"nodes": [')
        assert request.transport is not None
        request.transport.close()
        return resp

    async with serve({("GET", NODES): cut}) as (url, _):
        with pytest.raises(SlurmUnavailable) as info:
            await client(session, url).nodes()
    assert_one_line(info.value)


async def test_connection_refused_is_unavailable(session: aiohttp.ClientSession) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(SlurmUnavailable) as info:
        await client(session, f"http://127.0.0.1:{port}").ping()
    text = assert_one_line(info.value)
    assert f"127.0.0.1:{port}" in text


class _FailingResolver(aiohttp.abc.AbstractResolver):
    """A resolver that knows no name, so the test sends no DNS query anywhere."""

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET) -> list[Any]:
        raise OSError(-2, "Name or service not known")

    async def close(self) -> None:
        return None


async def test_a_name_that_does_not_resolve_is_unavailable() -> None:
    connector = aiohttp.TCPConnector(resolver=_FailingResolver())
    async with aiohttp.ClientSession(connector=connector) as session:
        with pytest.raises(SlurmUnavailable) as info:
            await client(session, "http://slurmrestd.example:6820").ping()
    assert "slurmrestd.example" in assert_one_line(info.value)


async def test_a_token_source_that_fails_is_an_auth_error_not_a_crash(session: aiohttp.ClientSession) -> None:
    def broken() -> str:
        raise ValueError("the JWT key is empty")

    async with serve({}) as (url, seen):
        with pytest.raises(SlurmAuthError, match="cannot get a token: ValueError: the JWT key is empty"):
            await client(session, url, token=broken).nodes()
    assert seen.requests == []
