"""How the operator reaches each cluster's Slurm: its slurmrestd pod, with a JWT minted from the cluster's key.

The address is the ready slurmrestd pod's IP from the pod cache, not the Service's DNS name: the operator may run
where the cluster's DNS does not answer (outside the cluster, as the tests and `make run` do), and pod IPs route
wherever the pod network does. Tokens are minted for SlurmUser, which may drain, resume, set DOWN and delete nodes;
they are cached per key (a new key Secret means a new uid) and never logged.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import aiohttp

from slurmctl.reconcilers.observed import deleting, pod_ready, uid
from slurmctl.render import meta
from slurmctl.render.cluster import JWT_KEY
from slurmctl.render.kinds import POD, SECRET
from slurmctl.runtime.cache import Cache
from slurmctl.slurm import AccountingKind, Job, Node, Partition, SlurmClient, SlurmUnavailable, TokenSource

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

    async def set_down(self, names: Sequence[str], *, reason: str) -> None: ...

    async def delete_node(self, name: str) -> None: ...

    async def accounting_records(self, kind: AccountingKind) -> list[dict[str, Any]]: ...

    async def update_accounting_records(self, kind: AccountingKind, records: Sequence[dict[str, Any]]) -> None: ...

    async def add_associations(self, condition: dict[str, Any]) -> None: ...


Connect = Callable[[str, Callable[[], str]], SlurmApi]  # (base URL, token source) -> client


def _ready(pod: Mapping[str, Any]) -> bool:
    return pod_ready(pod) and bool((pod.get("status") or {}).get("podIP")) and not deleting(pod)


class SlurmAccess:
    """One per operator: the HTTP session all clusters' clients share, and each cluster's token source."""

    def __init__(self, cache: Cache, *, timeout: float = 10.0, connect: Connect | None = None) -> None:
        self._cache = cache
        self._timeout = timeout
        self._connect = connect
        self._session: aiohttp.ClientSession | None = None
        self._tokens: dict[tuple[str, str], tuple[str, TokenSource]] = {}  # (ns, cluster) -> (key uid, source)

    def address(self, c: str, namespace: str) -> str | None:
        """The ready slurmrestd pod's IP, if there is one (its readiness changes wake the callers)."""
        for pod in self._cache.list(*POD, namespace=namespace, labels=meta.selector(c, REST_COMPONENT)):
            if _ready(pod):
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
            # Slurm is reached on pod IPs only: no proxy lookups, no netrc.
            self._session = aiohttp.ClientSession(trust_env=False)
        return SlurmClient(
            session=self._session, base_url=base_url, token=token, user=TOKEN_USER, timeout=self._timeout
        )

    def _token(self, c: str, namespace: str) -> TokenSource:
        name = meta.jwt_key_secret(c)
        secret = self._cache.get(*SECRET, name, namespace=namespace)
        data = (secret or {}).get("data") or {}
        if secret is None or JWT_KEY not in data:
            raise SlurmUnavailable(f"the JWT key Secret {name} is missing")
        key_uid = uid(secret)
        cached = self._tokens.get((namespace, c))
        if cached is None or cached[0] != key_uid:
            key = base64.b64decode(data[JWT_KEY])
            cached = self._tokens[(namespace, c)] = (key_uid, TokenSource(key, user=TOKEN_USER))
        return cached[1]

    def forget(self, c: str, namespace: str) -> None:
        self._tokens.pop((namespace, c), None)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
