"""The Slurm client's accounting calls (/slurmdb/): the records of one kind, and updates sent as one POST. The answers
here are hand-made in slurmrestd 24.11's shapes (no recording of a slurmdbd-backed slurmrestd yet)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from slurmctl.slurm import API_VERSION, SlurmApiError, SlurmClient, SlurmProtocolError
from test.unit.slurm.replay import Handler, serve

DB = f"/slurmdb/{API_VERSION}"


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def answer(body: dict[str, Any], status: int = 200) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.json_response(body, status=status)

    return handler


def client(session: aiohttp.ClientSession, url: str) -> SlurmClient:
    return SlurmClient(session=session, base_url=url, token=lambda: "t", user="slurm", timeout=5.0)


QOS = {"name": "small", "limits": {"max": {"jobs": {"active_jobs": {"per": {"user": {"set": True, "number": 1}}}}}}}


async def test_records_of_one_kind_come_back_as_slurm_sent_them(session: aiohttp.ClientSession) -> None:
    async with serve({("GET", f"{DB}/qos/"): answer({"qos": [QOS], "errors": [], "warnings": []})}) as (url, seen):
        assert await client(session, url).accounting_records("qos") == [QOS]
    assert seen.requests[0]["headers"]["X-SLURM-USER-NAME"] == "slurm"


async def test_updates_are_one_post_and_nothing_is_sent_for_none(session: aiohttp.ClientSession) -> None:
    async with serve({("POST", f"{DB}/qos/"): answer({"errors": []})}) as (url, seen):
        c = client(session, url)
        await c.update_accounting_records("qos", [QOS])
        await c.update_accounting_records("qos", [])
    assert [r["json"] for r in seen.requests] == [{"qos": [QOS]}]


async def test_slurm_refusing_an_update_is_slurms_error(session: aiohttp.ClientSession) -> None:
    refused = {"errors": [{"error_number": 9002, "error": "Invalid TRES", "description": "gres/fpga not found"}]}
    async with serve({("POST", f"{DB}/qos/"): answer(refused, status=500)}) as (url, _):
        with pytest.raises(SlurmApiError, match="gres/fpga"):
            await client(session, url).update_accounting_records("qos", [QOS])


async def test_an_answer_without_the_list_is_a_protocol_error(session: aiohttp.ClientSession) -> None:
    async with serve({("GET", f"{DB}/accounts/"): answer({"errors": []})}) as (url, _):
        with pytest.raises(SlurmProtocolError, match="no list of accounts"):
            await client(session, url).accounting_records("accounts")


async def test_only_the_kinds_the_operator_keeps(session: aiohttp.ClientSession) -> None:
    with pytest.raises(ValueError, match="not an accounting record kind"):
        await client(session, "http://127.0.0.1:9").accounting_records("clusters")  # type: ignore[arg-type]


async def test_users_are_read_with_their_associations_so_that_the_default_account_is_filled_in(
    session: aiohttp.ClientSession,
) -> None:
    carol = {"name": "carol", "default": {"account": "physics", "wckey": ""}}
    routes = {("GET", f"{DB}/users/?with_assocs"): answer({"users": [carol], "errors": []})}
    async with serve(routes) as (url, seen):
        assert await client(session, url).accounting_records("users") == [carol]
    assert [r["path"] for r in seen.requests] == [f"{DB}/users/?with_assocs"]


async def test_new_associations_go_where_sacctmgr_makes_them(session: aiohttp.ClientSession) -> None:
    routes = {
        ("POST", f"{DB}/accounts_association/"): answer({"added_accounts": "", "errors": []}),
        ("POST", f"{DB}/users_association/"): answer({"added_users": "", "errors": []}),
    }
    account = {"accounts": ["theory"], "clusters": ["hpc"], "association": {"parent": "physics"}}
    user = {"accounts": ["theory"], "clusters": ["hpc"], "users": ["alice"]}
    async with serve(routes) as (url, seen):
        c = client(session, url)
        await c.add_associations(account)
        await c.add_associations(user)
    assert [(r["path"], r["json"]) for r in seen.requests] == [
        (f"{DB}/accounts_association/", {"association_condition": account}),
        (f"{DB}/users_association/", {"association_condition": user, "user": {}}),
    ]
