"""Leader election on a `coordination.k8s.io/v1` Lease, following client-go's leaderelection package.

Only the holder runs controllers. A candidate takes the lease once the holder has not renewed it for a whole lease
duration, measured on the candidate's own monotonic clock from when it last saw the lease record change (so clock
skew between machines does not matter). The holder renews every retry period and gives up, stopping its controllers,
when it cannot renew within the renew deadline. A clean shutdown releases the lease so a successor takes over at once.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import socket
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec

from slurmctl.runtime.client import Client, Obj
from slurmctl.runtime.clock import REAL_CLOCK, Clock
from slurmctl.runtime.errors import ApiError, NotFound
from slurmctl.runtime.logs import kv
from slurmctl.runtime.metrics import Metrics, default_metrics
from slurmctl.runtime.objects import view

log = logging.getLogger(__name__)

LEASE = ("coordination.k8s.io/v1", "Lease")


class LeaderElectionLost(Exception):  # noqa: N818
    """The lease could not be renewed in time: stop everything and exit non-zero so Kubernetes restarts us."""


def default_identity() -> str:
    return f"{socket.gethostname()}_{secrets.token_hex(4)}"


@dataclass(frozen=True)
class LeaderElectionConfig:
    namespace: str
    name: str
    identity: str = field(default_factory=default_identity)
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


def _micro_time(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseSpec(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    """What the elector reads of a Lease's spec."""

    holder_identity: str = ""  # "" once released
    lease_duration_seconds: int | None = None
    lease_transitions: int = 0


def _spec(lease: Obj) -> tuple[dict[str, Any], LeaseSpec]:
    """A Lease's spec as the API server sent it (what is written back, with the fields this elector does not know,
    and what tells one record from the next) and as read."""
    spec: dict[str, Any] = lease.get("spec") or {}
    return spec, view(spec, LeaseSpec)


class LeaderElector:
    def __init__(
        self,
        client: Client,
        config: LeaderElectionConfig,
        *,
        clock: Clock = REAL_CLOCK,
        metrics: Metrics | None = None,
    ) -> None:
        self._client = client
        self.config = config
        self._clock = clock
        self.is_leader = False
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._status = (metrics or default_metrics()).leader_election_status.labels(config.name)
        self._status.set(0)

    def _observe(self, spec: dict[str, Any]) -> None:
        record = tuple(sorted(spec.items()))
        if record != self._observed:
            self._observed = record
            self._observed_at = self._clock.monotonic()

    async def _try_acquire_or_renew(self) -> tuple[bool, float]:
        """One attempt; returns (holding the lease now, seconds until the current holder's lease would expire)."""
        cfg = self.config
        now = _micro_time(datetime.now(UTC))
        mine = {"holderIdentity": cfg.identity, "leaseDurationSeconds": round(cfg.lease_duration), "renewTime": now}
        try:
            lease = await self._client.get(*LEASE, cfg.name, namespace=cfg.namespace)
        except NotFound:
            body: Obj = {
                "apiVersion": LEASE[0],
                "kind": LEASE[1],
                "metadata": {"name": cfg.name, "namespace": cfg.namespace},
                "spec": {**mine, "acquireTime": now, "leaseTransitions": 0},
            }
            created = await self._client.create(body)
            self._observe(created["spec"])
            return True, 0.0
        spec, read = _spec(lease)
        self._observe(spec)
        holder = read.holder_identity
        if holder and holder != cfg.identity:
            remaining = self._observed_at + float(read.lease_duration_seconds or cfg.lease_duration)
            remaining -= self._clock.monotonic()
            if remaining > 0:
                return False, remaining
        if holder == cfg.identity:
            new_spec = {**spec, **mine}
        else:
            transitions = read.lease_transitions + 1
            new_spec = {**spec, **mine, "acquireTime": now, "leaseTransitions": transitions}
        updated = await self._client.replace({**lease, "spec": new_spec})  # carries resourceVersion: CAS
        self._observe(updated["spec"])
        return True, 0.0

    async def _attempt(self) -> tuple[bool, float]:
        try:
            async with asyncio.timeout(self.config.renew_deadline):
                return await self._try_acquire_or_renew()
        except (ApiError, TimeoutError) as exc:
            log.info("lease attempt failed %s", kv(lease=self.config.name, error=exc))
            return False, self.config.retry_period

    async def acquire(self) -> None:
        """Return once this process holds the lease."""
        log.info("waiting for leadership %s", kv(lease=self.config.name, identity=self.config.identity))
        while True:
            ok, remaining = await self._attempt()
            if ok:
                break
            # Poll every retry period, but wake right when the holder's lease would run out.
            await self._clock.sleep(min(self.config.retry_period, remaining + 0.05))
        self.is_leader = True
        self._status.set(1)
        log.info("became leader %s", kv(lease=self.config.name, identity=self.config.identity))

    async def hold(self) -> None:
        """Renew until cancelled; raise `LeaderElectionLost` when a renewal does not succeed within the deadline."""
        cfg = self.config
        while True:
            await self._clock.sleep(cfg.retry_period)
            deadline = self._clock.monotonic() + cfg.renew_deadline
            while not (await self._attempt())[0]:
                if self._clock.monotonic() + cfg.retry_period >= deadline:
                    self.is_leader = False
                    self._status.set(0)
                    log.error("lost leadership %s", kv(lease=cfg.name, identity=cfg.identity))
                    raise LeaderElectionLost(f"could not renew lease {cfg.namespace}/{cfg.name}")
                await self._clock.sleep(cfg.retry_period)

    async def release(self) -> None:
        """Give the lease up (clean shutdown) so the next candidate need not wait for it to expire."""
        if not self.is_leader:
            return
        cfg = self.config
        self.is_leader = False
        self._status.set(0)
        try:
            lease = await self._client.get(*LEASE, cfg.name, namespace=cfg.namespace)
            spec, read = _spec(lease)
            if read.holder_identity != cfg.identity:
                return
            now = _micro_time(datetime.now(UTC))
            released = {**spec, "holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": now, "acquireTime": now}
            await self._client.replace({**lease, "spec": released})
            log.info("released leadership %s", kv(lease=cfg.name, identity=cfg.identity))
        except ApiError as exc:
            log.warning("could not release the lease %s", kv(lease=cfg.name, error=exc))
