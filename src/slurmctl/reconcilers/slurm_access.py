"""How the operator reaches each cluster's Slurm: its slurmrestd pod, with a JWT minted from the cluster's key.

The address is the ready slurmrestd pod's IP from the pod cache, not the Service's DNS name: the operator may run
where the cluster's DNS does not answer (outside the cluster, as the tests and `make run` do), and pod IPs route
wherever the pod network does. Tokens are minted for SlurmUser, which may drain, resume, set DOWN and delete nodes;
they are cached per key (a new key Secret means a new uid) and never logged.

What each cluster's Slurm says is read here too, once for every reader (`snapshot`, reconcilers/slurm_snapshot.py);
each read sets the `slurm_*` series, and every request to slurmrestd is counted
(`slurmctl_slurmrestd_requests_total`, reconcilers/slurm_metrics.py).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import aiohttp
from prometheus_client import CollectorRegistry

from slurmctl.reconcilers.slurm_metrics import SlurmCollector, collector_for
from slurmctl.reconcilers.slurm_snapshot import PARTITIONS_MAX_AGE, SlurmSnapshot
from slurmctl.reconcilers.views import Pod, Secret
from slurmctl.render import meta
from slurmctl.render.cluster import JWT_KEY
from slurmctl.render.kinds import POD, SECRET
from slurmctl.runtime.cache import Cache
from slurmctl.runtime.clock import REAL_CLOCK, Clock
from slurmctl.runtime.objects import meta_of
from slurmctl.slurm import (
    DEFAULT_MAX_ANSWER_BYTES,
    AccountingKind,
    Job,
    Node,
    Partition,
    SlurmClient,
    SlurmError,
    SlurmUnavailable,
    TokenSource,
    new_session,
)

REST_COMPONENT = "rest"
TOKEN_USER = "slurm"  # noqa: S105 - a user name: tokens are minted for SlurmUser


class SlurmApi(Protocol):
    """What the reconcilers ask Slurm (`slurm.SlurmClient`; tests pass a fake)."""

    async def controllers(self) -> dict[str, bool]: ...

    async def nodes(self) -> list[Node]: ...

    async def jobs(self) -> list[Job]: ...

    async def partitions(self) -> list[Partition]: ...

    async def drain(self, names: Sequence[str], *, reason: str) -> None: ...

    async def resume(self, names: Sequence[str]) -> None: ...

    async def power_up(self, names: Sequence[str]) -> None: ...

    async def power_down_asap(self, names: Sequence[str]) -> None: ...

    async def set_down(self, names: Sequence[str], *, reason: str) -> None: ...

    async def delete_node(self, name: str) -> None: ...

    async def accounting_records(self, kind: AccountingKind) -> list[dict[str, Any]]: ...

    async def update_accounting_records(self, kind: AccountingKind, records: Sequence[dict[str, Any]]) -> None: ...

    async def add_associations(self, condition: dict[str, Any]) -> None: ...


Connect = Callable[[str, Callable[[], str]], SlurmApi]  # (base URL, token source) -> client


def _ready(live: Mapping[str, Any]) -> bool:
    pod = Pod.of(live)
    return pod.ready and bool(pod.status.pod_ip) and not pod.terminating


def _of_deployment(pod: Mapping[str, Any], deployment: str) -> bool:
    """Whether a ReplicaSet of `deployment` controls the pod: a pod that only carries slurmrestd's labels (a copy
    someone made to debug, a look-alike) never gets the operator's SlurmUser token or its questions. This is not
    authentication: whoever may create pods in the namespace may also mount the cluster's key Secrets, so they are
    trusted with the cluster already (docs/security.md, "Who may create SlurmClusters")."""
    return any(
        ref.controller
        and ref.kind == "ReplicaSet"
        and ref.api_version.startswith("apps/")
        and ref.name.startswith(f"{deployment}-")
        for ref in meta_of(pod).owner_references
    )


class SlurmAccess:
    """One per operator: the HTTP session all clusters' clients share, each cluster's token source, and each
    cluster's latest snapshot of Slurm. `max_answer_bytes` caps each answer from a slurmrestd (--slurm-max-answer-size):
    one cluster's slurmrestd cannot run the operator, which serves them all, out of memory."""

    def __init__(
        self,
        cache: Cache,
        *,
        timeout: float = 10.0,
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
        connect: Connect | None = None,
        clock: Clock = REAL_CLOCK,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self._cache = cache
        self._timeout = timeout
        self._max_answer_bytes = max_answer_bytes
        self._connect = connect
        self._clock = clock
        self._session: aiohttp.ClientSession | None = None
        self._tokens: dict[tuple[str, str], tuple[str, TokenSource]] = {}  # (ns, cluster) -> (key uid, source)
        self._snapshots: dict[tuple[str, str], SlurmSnapshot] = {}
        self._reading: dict[tuple[str, str], asyncio.Lock] = {}
        self._seen: dict[tuple[str, str], int] = {}  # the digest the listeners were last told of, per cluster
        self._listeners: list[Callable[[str, str], None]] = []
        self.metrics: SlurmCollector | None = collector_for(registry) if registry is not None else None

    def address(self, c: str, namespace: str) -> str | None:
        """The IP of a ready slurmrestd pod of the cluster's own Deployment, if there is one (its readiness changes
        wake the callers)."""
        for pod in self._cache.list(*POD, namespace=namespace, labels=meta.selector(c, REST_COMPONENT)):
            if _ready(pod) and _of_deployment(pod, meta.rest(c)):
                return str(pod["status"]["podIP"])
        return None

    def client(self, c: str, namespace: str) -> SlurmApi:
        """A client for the cluster's slurmrestd; SlurmUnavailable (saying why) when it cannot be reached now."""
        ip = self.address(c, namespace)
        if ip is None:
            raise SlurmUnavailable(f"slurmrestd ({meta.rest(c)}) has no ready pod")
        base_url = f"http://{ip}:{meta.SLURMRESTD_PORT}"
        token = self._token(c, namespace)
        if self._connect is not None:
            return self._connect(base_url, token)
        if self._session is None or self._session.closed:
            # Slurm is reached on pod IPs only: no proxy lookups, no netrc; slurmrestd 26.05's double error answers
            # are read (slurmctl.slurm.session).
            self._session = new_session()
        metrics = self.metrics
        return SlurmClient(
            session=self._session,
            base_url=base_url,
            token=token,
            user=TOKEN_USER,
            timeout=self._timeout,
            max_answer_bytes=self._max_answer_bytes,
            on_request=None if metrics is None else lambda method, path: metrics.count(namespace, c, method, path),
        )

    # --- the shared snapshot -------------------------------------------------------------------------------------

    async def snapshot(self, c: str, namespace: str, *, max_age: float) -> SlurmSnapshot:
        """The cluster's latest snapshot if it is no older than `max_age` seconds (and nothing changed Slurm since),
        else a new one, read once for every reader that asks meanwhile. An outage comes back as a snapshot whose
        `error` says why; it is never raised here."""
        key = (namespace, c)
        found = self._snapshots.get(key)
        if found is not None and found.fresh(self._clock.monotonic(), max_age):
            return found
        async with self._reading.setdefault(key, asyncio.Lock()):
            found = self._snapshots.get(key)
            if found is not None and found.fresh(self._clock.monotonic(), max_age):
                return found  # taken by the reader this one waited for
            taken = await self._read(c, namespace, found)
            self._keep(key, taken)
            return taken

    def latest(self, c: str, namespace: str) -> SlurmSnapshot | None:
        """The cluster's latest snapshot, however old (None before the first): what a reader that must not cause a
        read looks at (an outage every reader saw)."""
        return self._snapshots.get((namespace, c))

    def unreachable(self, c: str, namespace: str, why: str) -> None:
        """Slurm cannot be asked at all now (slurmrestd disabled, or no ready pod): the snapshot every reader sees
        until the next one looks again (which costs no request while there is no address)."""
        self._keep((namespace, c), SlurmSnapshot(self._clock.monotonic(), error=SlurmUnavailable(why), stale=True))

    def changed(self, c: str, namespace: str) -> None:
        """Someone changed Slurm (a drain, a resume, a node set DOWN or deleted): the next reader reads again."""
        key = (namespace, c)
        if (found := self._snapshots.get(key)) is not None:
            self._snapshots[key] = dataclasses.replace(found, stale=True)

    async def _read(self, c: str, namespace: str, previous: SlurmSnapshot | None) -> SlurmSnapshot:
        started = self._clock.monotonic()
        try:
            api = self.client(c, namespace)
            nodes = tuple(await api.nodes())
            jobs = tuple(await api.jobs())
            partitions: tuple[Partition, ...] = ()
            partitions_at: float | None = None
            if previous is not None and previous.partitions_at is not None:
                partitions, partitions_at = previous.partitions, previous.partitions_at
            if partitions_at is None or started - partitions_at > PARTITIONS_MAX_AGE:
                partitions, partitions_at = tuple(await api.partitions()), started
        except SlurmError as exc:
            return SlurmSnapshot(started, error=exc)
        return SlurmSnapshot(started, nodes, jobs, partitions, partitions_at)

    def listen(self, listener: Callable[[str, str], None]) -> None:
        """Call `listener(cluster, namespace)` whenever a snapshot says something new of the cluster's nodes and their
        jobs (`SlurmSnapshot.digest`): the snapshot is a source, as an informer is, and whoever took it (the node
        loop's poll, the drain gate) wakes every component that decides on it. An outage wakes nobody (a cluster
        without slurmrestd is one, from its first pass on): each reader sees it when it next asks."""
        self._listeners.append(listener)

    @property
    def listeners(self) -> tuple[Callable[[str, str], None], ...]:
        """Who a new snapshot wakes (`listen`): what another access that replaces this one (a test's, routed to a
        fake Slurm) must wake too."""
        return tuple(self._listeners)

    def _keep(self, key: tuple[str, str], snapshot: SlurmSnapshot) -> None:
        self._snapshots[key] = snapshot
        if self.metrics is not None:
            self.metrics.set(*key, snapshot)
        if snapshot.error is not None:  # an outage wakes nobody: each reader sees it when it next asks
            return
        digest = snapshot.digest
        if self._seen.get(key) != digest:
            self._seen[key] = digest
            for listener in self._listeners:
                listener(key[1], key[0])

    def _token(self, c: str, namespace: str) -> TokenSource:
        name = meta.jwt_key_secret(c)
        live = self._cache.get(*SECRET, name, namespace=namespace)
        secret = Secret.of(live)
        if live is None or JWT_KEY not in secret.data:
            raise SlurmUnavailable(f"the JWT key Secret {name} is missing")
        key_uid = secret.metadata.uid
        cached = self._tokens.get((namespace, c))
        if cached is None or cached[0] != key_uid:
            key = base64.b64decode(secret.data[JWT_KEY])
            cached = self._tokens[(namespace, c)] = (key_uid, TokenSource(key, user=TOKEN_USER))
        return cached[1]

    def forget(self, c: str, namespace: str) -> None:
        """The cluster is gone: its token, its snapshot and its series with it."""
        self._tokens.pop((namespace, c), None)
        self._snapshots.pop((namespace, c), None)
        self._reading.pop((namespace, c), None)
        self._seen.pop((namespace, c), None)
        if self.metrics is not None:
            self.metrics.forget(namespace, c)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
