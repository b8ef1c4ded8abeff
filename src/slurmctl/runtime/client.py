"""The one door to the API server: a generic, dict-based REST client over a shared kubernetes-asyncio ApiClient.

Objects go in and come out as plain dicts (no generated model classes: cheaper to cache, uniform for custom
resources). Every call has a finite timeout, errors are translated once into `slurmctl.runtime.errors`, and only
idempotent reads are retried. Resource paths come from a small built-in table of the kinds an operator usually
touches, and from API discovery for everything else; discovery also answers "is this API version served?".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit
from urllib.request import getproxies

import aiohttp
from kubernetes_asyncio.client import ApiClient
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential, wait_random

from slurmctl.runtime.clock import REAL_CLOCK, Clock
from slurmctl.runtime.errors import (
    ApiError,
    Gone,
    NotFound,
    OutageWindow,
    ServerError,
    Timeout,
    error_for_status,
    is_transient,
)
from slurmctl.runtime.logs import kv
from slurmctl.runtime.metrics import Metrics, default_metrics
from slurmctl.runtime.objects import meta_of
from slurmctl.runtime.wire import decode, encode

log = logging.getLogger(__name__)

Obj = dict[str, Any]
T = TypeVar("T")

APPLY_PATCH = "application/apply-patch+yaml"
# The same media type with a parameter, which the API server drops before it reads the patch type. kubernetes-asyncio
# runs its own encoding (a walk of the whole body in Python, then json.dumps) only for a content type that names JSON
# or is exactly APPLY_PATCH, and sends bytes of any other as they are: so an apply body goes out as `encode` made it
# (that walk, with a second `drop_nones`, was a sixth of the operator's CPU in the many-clusters benchmark).
_APPLY_PATCH_AS_IS = f"{APPLY_PATCH}; charset=utf-8"


MERGE_PATCH = "application/merge-patch+json"
# A discovery answer of "not served" is re-checked after this long, so a CRD installed later is picked up.
NEGATIVE_DISCOVERY_TTL = 60.0
# API requests in flight at once, watches aside (each holds a connection of its own while it lasts). Why: every
# connection to the API server keeps a TLS buffer for its life, and creating a thousand clusters at once kept about a
# hundred open (kubernetes-asyncio's pool), a tenth of the operator's peak memory (bench_many_clusters); two cores
# serve no more at once, and the create took as long with about 26.
REQUESTS_IN_FLIGHT = 24


@dataclass(frozen=True)
class Resource:
    api_version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        path = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if self.namespaced and namespace:
            path += f"/namespaces/{quote(namespace, safe='')}"
        path += f"/{self.plural}"
        if name:
            path += f"/{quote(name, safe='')}"
            if subresource:
                path += f"/{subresource}"
        return path


def _known(api_version: str, kind: str, plural: str, *, namespaced: bool = True) -> tuple[tuple[str, str], Resource]:
    return (api_version, kind), Resource(api_version, kind, plural, namespaced)


# Kinds an operator reads and writes all the time: no discovery round-trip needed to build their paths.
KNOWN: dict[tuple[str, str], Resource] = dict(
    [
        _known("v1", "ConfigMap", "configmaps"),
        _known("v1", "Secret", "secrets"),
        _known("v1", "Service", "services"),
        _known("v1", "Pod", "pods"),
        _known("v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
        _known("v1", "ServiceAccount", "serviceaccounts"),
        _known("v1", "Event", "events"),
        _known("v1", "Namespace", "namespaces", namespaced=False),
        _known("v1", "Node", "nodes", namespaced=False),
        _known("apps/v1", "StatefulSet", "statefulsets"),
        _known("apps/v1", "Deployment", "deployments"),
        _known("apps/v1", "DaemonSet", "daemonsets"),
        _known("batch/v1", "Job", "jobs"),
        _known("batch/v1", "CronJob", "cronjobs"),
        _known("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets"),
        _known("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies"),
        _known("coordination.k8s.io/v1", "Lease", "leases"),
        _known("rbac.authorization.k8s.io/v1", "Role", "roles"),
        _known("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings"),
        _known("events.k8s.io/v1", "Event", "events"),
        _known("apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions", namespaced=False),
    ]
)


def cluster_scoped(api_version: str, kind: str) -> bool:
    """Whether a built-in kind lives outside namespaces (Nodes, Namespaces, CRDs): such a kind is listed and watched
    once, whatever namespaces a manager is limited to (a namespace-scoped list of it does not exist)."""
    known = KNOWN.get((api_version, kind))
    return known is not None and not known.namespaced


@contextlib.contextmanager
def _translated(what: str) -> Iterator[None]:
    """Client-side failures become `Timeout` or `ServerError` (no answer at all) in one place."""
    try:
        yield
    except TimeoutError as exc:
        raise Timeout(f"{what}: timed out") from exc
    except aiohttp.ClientError as exc:
        raise ServerError(f"{what}: {exc}", status=0, reason="ConnectionFailed") from exc


def drop_nones(value: Any) -> Any:
    """The apply body must not contain `null`s (SSA would read them as "remove this field"). Plain dicts and lists
    and JSON's scalars are told by their type before any other mapping: an apply of every StatefulSet of 64 groups
    asked `isinstance(_, Mapping)` (an ABC, slow) of each of their 14,000 values."""
    if isinstance(value, dict):
        return {k: drop_nones(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [drop_nones(v) for v in value if v is not None]
    if isinstance(value, (str, int, float)) or not isinstance(value, Mapping):
        return value
    return {k: drop_nones(v) for k, v in value.items() if v is not None}


def trust_env_only_for_proxies(api: ApiClient) -> None:
    """kubernetes-asyncio's session has `trust_env=True`: every request then looks up proxy variables and reads
    `~/.netrc` in a thread (11 % of the event loop in the many-clusters benchmark). The API server's credentials come
    from the kubeconfig, never from netrc, so the environment is consulted only when proxy variables are set."""
    if not getproxies():
        api.rest_client.pool_manager._trust_env = False  # no setter; `_trust_env` is in ClientSession.ATTRS


class Client:
    def __init__(
        self,
        api: ApiClient,
        *,
        timeout: float = 30.0,
        read_attempts: int = 4,
        clock: Clock = REAL_CLOCK,
        metrics: Metrics | None = None,
        requests_in_flight: int = REQUESTS_IN_FLIGHT,
    ) -> None:
        self._metrics = metrics or default_metrics()
        self.api = api
        trust_env_only_for_proxies(api)
        self.outages = OutageWindow(clock=clock)
        self.timeout = timeout
        self.read_attempts = read_attempts
        self.host = urlsplit(api.configuration.host).netloc or api.configuration.host
        self._discovered: dict[str, tuple[float, dict[str, Resource] | None]] = {}
        self._discovery_lock = asyncio.Lock()
        self._slots = asyncio.Semaphore(requests_in_flight)

    # ---- resource table and discovery -------------------------------------------------------------------------
    async def _discover(self, api_version: str) -> dict[str, Resource] | None:
        """Kinds served under a group/version, or None when the group/version itself is not served."""
        async with self._discovery_lock:
            cached = self._discovered.get(api_version)
            if cached is not None and (cached[1] is not None or time.monotonic() - cached[0] < NEGATIVE_DISCOVERY_TTL):
                return cached[1]
            path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            try:
                listing = await self._read("GET", path)
            except NotFound:
                kinds = None
            else:
                kinds = {
                    r["kind"]: Resource(api_version, r["kind"], r["name"], bool(r.get("namespaced")))
                    for r in listing.get("resources", [])
                    if "/" not in r["name"]
                }
            self._discovered[api_version] = (time.monotonic(), kinds)
            return kinds

    async def is_served(self, api_version: str, kind: str) -> bool:
        """Whether the server serves `kind` at `api_version` (e.g. a CRD that may be installed after the operator)."""
        kinds = await self._discover(api_version)
        return kinds is not None and kind in kinds

    def forget_discovery(self) -> None:
        self._discovered.clear()

    async def resource(self, api_version: str, kind: str) -> Resource:
        known = KNOWN.get((api_version, kind))
        if known is not None:
            return known
        kinds = await self._discover(api_version)
        if kinds is None or kind not in kinds:
            raise NotFound(f"{kind} is not served at {api_version}", status=404, reason="NotServed")
        return kinds[kind]

    # ---- the one request function -----------------------------------------------------------------------------
    async def _open(
        self, method: str, path: str, *, query: Mapping[str, str], headers: dict[str, str], body: Any, http_timeout: Any
    ) -> aiohttp.ClientResponse:
        """Send a request and return the unread response; counts it in the rest_client metrics."""
        started = time.perf_counter()
        code = "<error>"
        try:
            with _translated(f"{method} {path}"):
                resp: aiohttp.ClientResponse = await self.api.call_api(
                    path,
                    method,
                    query_params=list(query.items()),
                    header_params=headers,
                    body=body,
                    auth_settings=["BearerToken"],
                    _preload_content=False,
                    _request_timeout=http_timeout,
                )
            code = str(resp.status)
            return resp
        finally:
            self._observe(method, code, started)

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        request_timeout: float | None = None,
    ) -> Any:
        """One HTTP request; returns the decoded JSON body; raises an `ApiError` subclass. Never retried. At most
        `requests_in_flight` at once: the others wait their turn, each within its timeout."""
        headers = {"Accept": "application/json", "Content-Type": content_type}
        # aiohttp's total timeout covers sending the request and reading the whole answer.
        timeout = request_timeout or self.timeout
        with self._observed():
            with _translated(f"{method} {path}: waiting for a free connection"):
                async with asyncio.timeout(timeout):
                    await self._slots.acquire()
            try:
                resp = await self._open(
                    method, path, query=query or {}, headers=headers, body=body, http_timeout=timeout
                )
                try:
                    with _translated(f"{method} {path}"):
                        data = await resp.read()
                finally:
                    resp.release()
            finally:
                self._slots.release()
            if not 200 <= resp.status < 300:
                raise error_for_status(resp.status, data, context=f"{method} {path}")
        try:
            return decode(data) if data else None
        except ValueError as exc:
            raise ServerError(f"{method} {path}: answer is not JSON", status=resp.status, reason="BadBody") from exc

    @contextlib.contextmanager
    def _observed(self) -> Iterator[None]:
        """Every API failure passes here once, so a 403 just after an outage is marked as part of it."""
        try:
            yield
        except ApiError as exc:
            self.outages.observe(exc)
            raise

    def _observe(self, method: str, code: str, started: float) -> None:
        self._metrics.rest_client_requests.labels(code, method, self.host).inc()
        self._metrics.rest_client_duration.labels(method, self.host).observe(time.perf_counter() - started)

    async def _read(self, method: str, path: str, query: Mapping[str, str] | None = None) -> Any:
        return await self.retrying_read(lambda: self.request(method, path, query=query))

    async def retrying_read(self, call: Callable[[], Awaitable[T]]) -> T:
        """Retry an idempotent read on 429, 5xx, timeouts and connection failures, with jittered backoff."""
        async for attempt in AsyncRetrying(
            stop=stop_after_attempt(self.read_attempts),
            wait=wait_exponential(multiplier=0.2, max=5.0) + wait_random(0, 0.2),
            retry=retry_if_exception(is_transient),
            reraise=True,
        ):
            with attempt:
                return await call()
        raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover

    # ---- verbs ------------------------------------------------------------------------------------------------
    async def server_version(self) -> Obj:
        """The API server's `/version` answer (`major`, `minor`, `gitVersion`, ...): a read like any other, with the
        client's timeout and retries, so a server that does not answer cannot hold the caller forever."""
        info: Obj = await self._read("GET", "/version")
        return info

    async def get(self, api_version: str, kind: str, name: str, *, namespace: str | None = None) -> Obj:
        res = await self.resource(api_version, kind)
        obj: Obj = await self._read("GET", res.path(namespace, name))
        return obj

    async def list(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
    ) -> Obj:
        """One page of a LIST, as the API returns it (`items`, `metadata.resourceVersion`, `metadata.continue`)."""
        res = await self.resource(api_version, kind)
        query = {
            k: v
            for k, v in {
                "labelSelector": label_selector,
                "limit": str(limit) if limit else None,
                "continue": continue_token,
                "resourceVersion": resource_version,
            }.items()
            if v
        }
        page: Obj = await self._read("GET", res.path(namespace), query)
        return page

    async def watch(
        self,
        res: Resource,
        *,
        namespace: str | None,
        resource_version: str,
        timeout_seconds: int,
        on_open: Callable[[], None] | None = None,
        label_selector: str | None = None,
    ) -> AsyncIterator[Obj]:
        """Watch events (`{"type", "object"}`) from `resource_version`, with bookmarks, until the server ends it.

        An ERROR event carrying 410 raises `Gone`; the client read timeout sits just above the server's.
        `on_open` is called once the server has accepted the watch (a sign of life for staleness checks).
        """
        query = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(timeout_seconds),
        }
        if label_selector:
            query["labelSelector"] = label_selector
        what = f"watch {res.plural}"
        timeout = aiohttp.ClientTimeout(total=timeout_seconds + 10, connect=self.timeout, sock_connect=self.timeout)
        headers = {"Accept": "application/json"}
        with self._observed():
            resp = await self._open(
                "GET", res.path(namespace), query=query, headers=headers, body=None, http_timeout=timeout
            )
        try:
            if resp.status != 200:
                with self._observed(), _translated(what):
                    raise error_for_status(resp.status, await resp.read(), context=what)
            if on_open is not None:
                on_open()
            while True:
                with _translated(what):
                    line = await resp.content.readline()
                if not line:
                    return
                try:
                    event = decode(line)
                except ValueError as exc:
                    raise ServerError(f"{what}: malformed event", status=0, reason="BadEvent") from exc
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    raise error_for_status(int(status.get("code") or 500), status, context=what)
                yield event
        finally:
            resp.close()

    async def apply(
        self, body: Mapping[str, Any], *, field_manager: str, subresource: str | None = None, force: bool = True
    ) -> Obj:
        """Server-side apply (`application/apply-patch+yaml`) of `body` under `field_manager`. Not retried. `body`
        is sent as it is: no `None`s (SSA reads `null` as "remove this field"; `Applier` drops them)."""
        meta = body["metadata"]
        res = await self.resource(body["apiVersion"], body["kind"])
        query = {"fieldManager": field_manager, "force": "true" if force else "false"}
        path = res.path(meta.get("namespace"), meta["name"], subresource)
        obj: Obj = await self.request("PATCH", path, query=query, body=encode(body), content_type=_APPLY_PATCH_AS_IS)
        return obj

    async def create(self, body: Mapping[str, Any], *, dry_run: bool = False) -> Obj:
        """POST `body`. `dry_run`: every admission check runs and nothing is stored (`dryRun=All`), which is how to
        learn whether the API server would admit an object without making it."""
        res = await self.resource(body["apiVersion"], body["kind"])
        path = res.path(meta_of(body).namespace)
        obj: Obj = await self.request("POST", path, query={"dryRun": "All"} if dry_run else None, body=body)
        return obj

    async def replace(self, body: Mapping[str, Any]) -> Obj:
        """PUT with the body's resourceVersion: optimistic concurrency (used by leader election, not reconcilers)."""
        meta = body["metadata"]
        res = await self.resource(body["apiVersion"], body["kind"])
        obj: Obj = await self.request("PUT", res.path(meta.get("namespace"), meta["name"]), body=body)
        return obj

    async def merge_patch(
        self, api_version: str, kind: str, name: str, patch: Mapping[str, Any], *, namespace: str | None = None
    ) -> Obj:
        res = await self.resource(api_version, kind)
        obj: Obj = await self.request("PATCH", res.path(namespace, name), body=patch, content_type=MERGE_PATCH)
        return obj

    async def delete(
        self,
        api_version: str,
        kind: str,
        name: str,
        *,
        namespace: str | None = None,
        propagation: str = "Background",
        grace_period_seconds: int | None = None,
        uid: str | None = None,
    ) -> None:
        """Delete (dependents by `propagation`: Background, Foreground or Orphan); an object already gone is not an
        error. `grace_period_seconds` overrides the object's own (0: removed at once, without waiting for a kubelet:
        `kubectl delete --force --grace-period=0`); `uid` deletes only that incarnation of the name (a precondition:
        Conflict when the object is another one now)."""
        res = await self.resource(api_version, kind)
        body: dict[str, Any] | None = None
        if grace_period_seconds is not None or uid:
            body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": propagation}
            if grace_period_seconds is not None:
                body["gracePeriodSeconds"] = grace_period_seconds
            if uid:
                body["preconditions"] = {"uid": uid}
        try:
            await self.request("DELETE", res.path(namespace, name), query={"propagationPolicy": propagation}, body=body)
        except NotFound:
            log.debug("delete of a missing object %s", kv(kind=kind, namespace=namespace or "", name=name))


__all__ = ["KNOWN", "ApiError", "Client", "Gone", "Resource", "drop_nones"]
