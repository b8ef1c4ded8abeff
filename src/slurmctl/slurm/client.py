"""The operator's client for slurmrestd: a few typed calls, each under one deadline, each failure a `SlurmError`.

Every call goes to `/slurm/{API_VERSION}/...` with the X-SLURM-USER-NAME / X-SLURM-USER-TOKEN headers that
slurmrestd's rest_auth/jwt passes on to slurmctld. How an answer is classified (the reconcilers act on the class):

- no connection, a reset, or no complete answer before the deadline -> `SlurmUnavailable`
- HTTP 401/403, or Slurm's authentication/permission errors -> `SlurmAuthError` (slurmrestd 24.11 answers a token
  slurmctld rejects with HTTP 511 and error 1007 "Protocol authentication error"; a missing token with a plain 401)
- errors[] from Slurm saying slurmctld cannot be reached (1000-1099 communication errors, 1800-1899) ->
  `SlurmUnavailable`; any other errors[] -> `SlurmApiError`
- 5xx without a Slurm error body -> `SlurmUnavailable`; another non-2xx without one, a body that is not JSON, or JSON
  of the wrong shape -> `SlurmProtocolError`
- an answer larger than `max_answer_bytes` (whatever its status) -> `SlurmAnswerTooLargeError`, a
  `SlurmProtocolError`; the read stops at the cap (slurm/answer.py)
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar
from urllib.parse import quote

import aiohttp
import msgspec

from .answer import DEFAULT_MAX_ANSWER_BYTES, read_answer
from .errors import (
    SlurmApiError,
    SlurmAuthError,
    SlurmError,
    SlurmProtocolError,
    SlurmUnavailable,
    SlurmUnknownNodeError,
    one_line,
)
from .models import (
    Job,
    Node,
    Partition,
    WireEnvelope,
    WireError,
    WireJobs,
    WireNodes,
    WirePartitions,
    WirePings,
    decode_hook,
)

log = logging.getLogger(__name__)

# The data parser version the operator speaks; Slurm 24.11 serves v0.0.40, v0.0.41 and v0.0.42.
API_VERSION = "v0.0.42"
DEFAULT_TIMEOUT = 10.0

# Slurm errno values (slurm_errno.h, 24.11) that change how an error answer is classified.
SLURM_PROTOCOL_AUTHENTICATION_ERROR = 1007
ESLURM_ACCESS_DENIED = 2002
ESLURM_INVALID_NODE_NAME = 2018
_AUTH_ERRNOS = frozenset({SLURM_PROTOCOL_AUTHENTICATION_ERROR, ESLURM_ACCESS_DENIED})
_AUTH_ERRNO_RANGE = range(6000, 6100)  # ESLURM_AUTH_*
_UNREACHABLE_ERRNO_RANGES = (range(1000, 1100), range(1800, 1900))  # SLURM_COMMUNICATIONS_*, SLURMCTLD_COMMUNICATIONS_*
# Names Slurm would read as host lists ("n[1-9]") or lists ("a,b"): refused, so a drain never reaches more nodes than
# the caller named.
_HOSTLIST_CHARACTERS = frozenset("[],") | frozenset(" \t\n")

_W = TypeVar("_W", bound=WireEnvelope)
Body = bytes | bytearray  # an answer's body: read into a bytearray (slurm/answer.py), decoded in place

# Query flags. Passing any replaces slurmrestd's defaults, which is how 24.11 behaves (checked against it): without
# MIXED a node with some CPUs allocated reads ALLOCATED. They repeat ("ALL,FUTURE" in one value is refused). ALL
# includes what hidden partitions hold; FUTURE the nodes slurmctld knows that have not registered (a dynamic node made
# with `scontrol create`, State=FUTURE in slurm.conf), which /nodes/ leaves out by default. The operator must see
# every node and job. No DETAIL for /jobs/: it adds each job's allocation core by core (a fifth of the answer) and the
# operator needs only the nodes, which `nodes` names: a running job's allocation, a completing job's nodes still
# completing (slurmctld's pack_job sends node_bitmap_cg's names then).
Query = list[tuple[str, str]]
NODES_QUERY: Query = [("flags", "MIXED"), ("flags", "FUTURE"), ("flags", "ALL")]
JOBS_QUERY: Query = [("flags", "ALL")]
PARTITIONS_QUERY: Query = [("flags", "ALL")]
# The accounting records the operator keeps (/slurmdb/v0.0.42/<kind>/), in the order they depend on each other.
AccountingKind = Literal["qos", "accounts", "associations", "users"]
ACCOUNTING_KINDS: tuple[AccountingKind, ...] = ("qos", "accounts", "associations", "users")
# A user's default account is filled in only when their associations are asked for too. `with_assocs` is a bare
# flag: slurmrestd 24.11 reads "with_assocs=" as false and warns about "with_assocs=1" (checked against it).
_ACCOUNTING_QUERIES: dict[AccountingKind, str] = {"users": "?with_assocs"}


def _is_auth(errno: int) -> bool:
    return errno in _AUTH_ERRNOS or errno in _AUTH_ERRNO_RANGE


def _is_unreachable(errno: int) -> bool:
    return errno != SLURM_PROTOCOL_AUTHENTICATION_ERROR and any(errno in r for r in _UNREACHABLE_ERRNO_RANGES)


def _check_names(names: Sequence[str]) -> list[str]:
    if isinstance(names, str):
        raise TypeError("names must be a sequence of node names, not one string")
    for name in names:
        if not name or _HOSTLIST_CHARACTERS & set(name):
            raise ValueError(f"not a single Slurm node name: {name!r}")
    return list(names)


class SlurmClient:
    """slurmrestd's API as the operator uses it. `token` is called before every request (a `TokenSource`), `user` is
    the Slurm user the token was minted for; `timeout` (seconds) bounds each call from connect to the last byte;
    `max_answer_bytes` caps each answer's body (slurm/answer.py); `on_request(method, path)` is told of every request
    sent (the operator counts them)."""

    def __init__(
        self,
        *,
        session: aiohttp.ClientSession,
        base_url: str,
        token: Callable[[], str],
        user: str = "slurm",
        timeout: float = DEFAULT_TIMEOUT,
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
        on_request: Callable[[str, str], None] | None = None,
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        if max_answer_bytes < 1:
            raise ValueError(f"max_answer_bytes must be positive, got {max_answer_bytes}")
        self._session = session
        self.base_url = base_url.rstrip("/")
        self._token = token
        self.user = user
        self.timeout = timeout
        self.max_answer_bytes = max_answer_bytes
        self._on_request = on_request

    def __repr__(self) -> str:
        return f"SlurmClient(base_url={self.base_url!r}, user={self.user!r}, timeout={self.timeout})"

    # --- the calls ---------------------------------------------------------------------------------------------

    async def ping(self) -> None:
        """Return when slurmrestd answers and a slurmctld answers it; else raise."""
        pings = await self._get("ping/", WirePings)
        if unreachable := pings.unreachable():
            raise SlurmUnavailable(
                f"slurmrestd at {self.base_url}: slurmctld does not answer ({', '.join(unreachable)})"
            )

    async def controllers(self) -> dict[str, bool]:
        """Each SlurmctldHost (by hostname) and whether it answered slurmrestd's ping just now."""
        pings = await self._get("ping/", WirePings)
        return {p.hostname: p.responding for p in pings.pings}

    async def nodes(self) -> list[Node]:
        return (await self._get("nodes/", WireNodes, query=NODES_QUERY)).parse()

    async def jobs(self) -> list[Job]:
        return (await self._get("jobs/", WireJobs, query=JOBS_QUERY)).parse()

    async def partitions(self) -> list[Partition]:
        return (await self._get("partitions/", WirePartitions, query=PARTITIONS_QUERY)).parse()

    async def drain(self, names: Sequence[str], *, reason: str) -> None:
        """Set DRAIN with `reason` on the named nodes (one request; Slurm applies it to all or reports an error)."""
        node_names = _check_names(names)
        if not reason.strip():
            raise ValueError("Slurm needs a reason to drain a node")
        if node_names:
            await self._request("POST", "nodes/", body={"name": node_names, "state": ["DRAIN"], "reason": reason})

    async def set_down(self, names: Sequence[str], *, reason: str) -> None:
        """Set the named nodes DOWN with `reason`: slurmctld ends what runs there at once (a batch job that may be
        requeued is, a job with --no-kill loses the node and runs on, any other ends NODE_FAIL) and starts nothing
        there until the node registers again (ReturnToService=2)."""
        node_names = _check_names(names)
        if not reason.strip():
            raise ValueError("Slurm needs a reason to set a node DOWN")
        if node_names:
            await self._request("POST", "nodes/", body={"name": node_names, "state": ["DOWN"], "reason": reason})

    async def resume(self, names: Sequence[str]) -> None:
        """Undo a drain (or a DOWN) on the named nodes."""
        if node_names := _check_names(names):
            await self._request("POST", "nodes/", body={"name": node_names, "state": ["RESUME"]})

    async def power_up(self, names: Sequence[str]) -> None:
        """Ask Slurm's power saving to resume the named powered-down nodes (`scontrol update state=POWER_UP`)."""
        if node_names := _check_names(names):
            await self._request("POST", "nodes/", body={"name": node_names, "state": ["POWER_UP"]})

    async def power_down_asap(self, names: Sequence[str]) -> None:
        """`scontrol update state=POWER_DOWN_ASAP`: drain the named nodes (no new job starts there) and power each
        down once no job is left on it. Slurm 24.11's node update (node_mgr.c update_node) drains with POWER_DRAIN
        and sets POWER_DOWN; its power saving (power_save.c) powers down only a node whose base state is IDLE and
        that is not COMPLETING, and clears the drain as it does, so the node can be powered up again. Never kills a
        job: a plain POWER_DOWN would leave the node open to new jobs, POWER_DOWN_FORCE requeues them."""
        if node_names := _check_names(names):
            await self._request("POST", "nodes/", body={"name": node_names, "state": ["POWER_DOWN", "POWER_DRAIN"]})

    async def delete_node(self, name: str) -> None:
        """Remove a dynamic node from slurmctld (Slurm refuses nodes from slurm.conf, and nodes with jobs)."""
        (node_name,) = _check_names([name])
        await self._request("DELETE", f"node/{quote(node_name, safe='')}")

    async def reconfigure(self) -> None:
        """`scontrol reconfigure`: slurmctld re-reads slurm.conf and tells every slurmd to."""
        await self._request("GET", "reconfigure/")

    # --- the accounting database (slurmdbd, through slurmrestd's /slurmdb/) ------------------------------------

    async def accounting_records(self, kind: AccountingKind) -> list[dict[str, Any]]:
        """Every record of one kind as slurmrestd answers it (JSON objects in the v0.0.42 shapes): what the caller
        compares with what it wants, field by field."""
        if kind not in ACCOUNTING_KINDS:
            raise ValueError(f"not an accounting record kind: {kind!r}")
        data = await self._request("GET", f"{kind}/{_ACCOUNTING_QUERIES.get(kind, '')}", plugin="slurmdb")
        records = data.get(kind)
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            raise SlurmProtocolError(f"slurmrestd GET {self._path(f'{kind}/', 'slurmdb')}: no list of {kind}")
        return records

    async def update_accounting_records(self, kind: AccountingKind, records: Sequence[dict[str, Any]]) -> None:
        """Create or update records of one kind (slurmrestd's POST adds what is missing and modifies what exists)."""
        if kind not in ACCOUNTING_KINDS:
            raise ValueError(f"not an accounting record kind: {kind!r}")
        if records:
            await self._request("POST", f"{kind}/", body={kind: list(records)}, plugin="slurmdb")

    async def add_associations(self, condition: dict[str, Any]) -> None:
        """Create associations (and the accounts or users they need) as sacctmgr's `add account ... parent=` and
        `add user ... account=` do: users' when `condition` (an association_condition: accounts, users, clusters,
        the association's parent and limits) names users, else accounts'.

        These endpoints place a new association in slurmdbd's hierarchy. One created through /associations/ reads
        back like any other, but slurmdbd 24.11 does not know it as a parent, and under a parent other than root it
        gets a user association's lineage (checked against it): /associations/ is for changing associations that
        exist."""
        body: dict[str, Any] = {"association_condition": condition}
        if condition.get("users"):
            # Required, and left empty: a user who exists keeps their default account (the caller sets it).
            await self._request("POST", "users_association/", body={**body, "user": {}}, plugin="slurmdb")
        else:
            await self._request("POST", "accounts_association/", body=body, plugin="slurmdb")

    # --- plumbing ----------------------------------------------------------------------------------------------

    async def _get(self, path: str, model: type[_W], *, query: Query | None = None) -> _W:
        status, reason, raw = await self._send("GET", path, query=query)
        return _decoded(f"slurmrestd GET {self._path(path)}", model, status=status, reason=reason, raw=raw)

    def _path(self, path: str, plugin: str = "slurm") -> str:
        return f"/{plugin}/{API_VERSION}/{path}"

    async def _request(
        self,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None = None,
        query: Query | None = None,
        plugin: str = "slurm",
    ) -> dict[str, Any]:
        status, reason, raw = await self._send(method, path, body=body, query=query, plugin=plugin)
        return _classify(f"slurmrestd {method} {self._path(path, plugin)}", status=status, reason=reason, raw=raw)

    async def _send(
        self,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None = None,
        query: Query | None = None,
        plugin: str = "slurm",
    ) -> tuple[int, str, bytearray]:
        """One request under the deadline: the answer's status, reason and body (at most `max_answer_bytes`), not yet
        classified."""
        full_path = self._path(path, plugin)
        where = f"slurmrestd {method} {full_path}"
        try:
            token = self._token()
        except Exception as exc:  # a bad key must end as a condition, not a crash
            raise SlurmAuthError(f"{where}: cannot get a token: {type(exc).__name__}: {exc}") from None
        headers = {"X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": token, "Accept": "application/json"}
        started = time.monotonic()
        if self._on_request is not None:
            self._on_request(method, full_path)
        try:
            async with asyncio.timeout(self.timeout):
                async with self._session.request(
                    method,
                    self.base_url + full_path,
                    json=body,
                    params=query,
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(total=self.timeout),
                ) as resp:
                    raw = await read_answer(resp, where=where, limit=self.max_answer_bytes)
                    status, reason = resp.status, resp.reason or ""
        except TimeoutError:
            raise SlurmUnavailable(f"{where}: no answer from {self.base_url} within {self.timeout:g}s") from None
        except (aiohttp.ClientError, OSError) as exc:
            raise SlurmUnavailable(f"{where}: {_describe_connection_error(exc)}") from None
        log.debug(
            "slurmrestd answered method=%s path=%s status=%s seconds=%.3f",
            method,
            full_path,
            status,
            time.monotonic() - started,
        )
        return status, reason, raw


@functools.cache
def _decoder(model: type[_W]) -> msgspec.json.Decoder[_W]:
    return msgspec.json.Decoder(model, dec_hook=decode_hook)


def _decoded(where: str, model: type[_W], *, status: int, reason: str, raw: Body) -> _W:
    """The answer as `model`, else the `SlurmError` that `_classify` and `_validated` make of it.

    A success is decoded straight from the bytes into `model` (msgspec): the fields the model does not declare (most
    of slurmrestd's, ~130 per job) are skipped, never made into Python objects (bench_slurm_observation). Only an
    answer that decodes with no Slurm error is taken that way, and the slower path would have returned the same
    model for it; anything else (an error status, Slurm's errors[], a body that is not JSON or not the shape) goes the
    slower path, so it is classified exactly as before."""
    if 200 <= status < 300:
        parsed: _W | None
        try:
            parsed = _decoder(model).decode(raw)
        except msgspec.DecodeError:  # ValidationError included: not JSON, or not this shape
            parsed = None
        if parsed is not None and not parsed.errors:
            return parsed
    return _validated(where, model, _classify(where, status=status, reason=reason, raw=raw))


def _validated(where: str, model: type[_W], data: dict[str, Any]) -> _W:
    try:
        validated: _W = msgspec.convert(data, model, dec_hook=decode_hook)
    except msgspec.ValidationError as exc:
        raise SlurmProtocolError(f"{where}: unexpected answer: {exc}") from None
    return validated


def _describe_connection_error(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if type(exc).__name__ not in text else text


def _classify(where: str, *, status: int, reason: str, raw: Body) -> dict[str, Any]:
    """The answer's JSON object when it is a success, else the matching `SlurmError`."""
    data: Any = None
    try:
        data = json.loads(raw) if raw.strip() else None
    except ValueError:
        data = None
    errors: tuple[WireError, ...] = ()
    if isinstance(data, dict):
        try:
            errors = msgspec.convert(data, WireEnvelope).errors
        except msgspec.ValidationError:
            errors = ()
    text = raw.decode(errors="replace").strip()
    if errors:
        joined = "; ".join(e.text() for e in errors)
        if status in (401, 403) or any(_is_auth(e.error_number) for e in errors):
            raise SlurmAuthError(f"{where}: rejected (HTTP {status}): {joined}")
        if any(_is_unreachable(e.error_number) for e in errors):
            raise SlurmUnavailable(f"{where}: slurmrestd cannot reach slurmctld (HTTP {status}): {joined}")
        refused = (
            SlurmUnknownNodeError if any(e.error_number == ESLURM_INVALID_NODE_NAME for e in errors) else SlurmApiError
        )
        raise refused(
            f"{where}: Slurm refused (HTTP {status}): {joined}", status=status, errors=[e.text() for e in errors]
        )
    if status in (401, 403):
        raise SlurmAuthError(f"{where}: rejected (HTTP {status} {reason}): {one_line(text, limit=120) or 'no details'}")
    if status >= 500:
        raise SlurmUnavailable(f"{where}: HTTP {status} {reason}: {one_line(text, limit=120) or 'no body'}")
    if not 200 <= status < 300:
        raise SlurmProtocolError(
            f"{where}: unexpected HTTP {status} {reason}: {one_line(text, limit=120) or 'no body'}"
        )
    if data is None and text:
        raise SlurmProtocolError(f"{where}: answer is not JSON: {one_line(text, limit=80)!r}")
    if not isinstance(data, dict):
        raise SlurmProtocolError(f"{where}: answer is not a JSON object: {one_line(text, limit=80) or 'empty body'}")
    return data


__all__ = [
    "ACCOUNTING_KINDS",
    "API_VERSION",
    "DEFAULT_TIMEOUT",
    "AccountingKind",
    "SlurmClient",
    "SlurmError",
]
