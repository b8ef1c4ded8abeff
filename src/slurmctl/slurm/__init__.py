"""STUB of the Slurm client contract (branch slurmclient replaces this file)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import aiohttp


class SlurmError(Exception):
    pass


class SlurmUnavailable(SlurmError):  # noqa: N818
    pass


class SlurmAuthError(SlurmError):
    pass


class SlurmApiError(SlurmError):
    pass


class SlurmProtocolError(SlurmError):
    pass


@dataclass(frozen=True)
class Node:
    name: str
    state: frozenset[str]
    reason: str = ""
    reason_set_by: str = ""
    reason_changed_at: datetime | None = None
    features: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    cpus: int = 0
    alloc_cpus: int = 0

    @property
    def base(self) -> str:
        for s in ("ALLOCATED", "MIXED", "IDLE", "DOWN", "FUTURE", "UNKNOWN", "ERROR"):
            if s in self.state:
                return s
        return "UNKNOWN"

    @property
    def drain(self) -> bool:
        return "DRAIN" in self.state

    @property
    def busy(self) -> bool:
        return bool({"ALLOCATED", "MIXED", "COMPLETING"} & self.state)

    @property
    def drained(self) -> bool:
        return self.drain and not self.busy

    @property
    def display(self) -> str:
        if self.drain:
            return "Draining" if self.busy else "Drained"
        return self.base.capitalize()


@dataclass(frozen=True)
class Job:
    job_id: int
    name: str
    user: str
    state: str
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class Partition:
    name: str
    nodes: tuple[str, ...]
    total_nodes: int
    total_cpus: int


class TokenSource:
    def __init__(self, key: bytes, *, user: str, lifetime: timedelta = timedelta(minutes=30)) -> None:
        self.key = key
        self.user = user

    def __call__(self) -> str:
        raise NotImplementedError


class SlurmClient:
    def __init__(
        self,
        *,
        session: aiohttp.ClientSession,
        base_url: str,
        token: Callable[[], str],
        user: str = "slurm",
        timeout: float = 10.0,
    ) -> None:
        raise NotImplementedError

    async def nodes(self) -> list[Node]:
        raise NotImplementedError

    async def jobs(self) -> list[Job]:
        raise NotImplementedError

    async def partitions(self) -> list[Partition]:
        raise NotImplementedError

    async def drain(self, names: Sequence[str], *, reason: str) -> None:
        raise NotImplementedError

    async def resume(self, names: Sequence[str]) -> None:
        raise NotImplementedError

    async def reconfigure(self) -> None:
        raise NotImplementedError
