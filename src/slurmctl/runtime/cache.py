"""The read side reconcilers use: get/list from the shared informers' stores, never from the API server."""

from __future__ import annotations

from collections.abc import Mapping

from slurmctl.runtime.apply import Cached
from slurmctl.runtime.informer import Informer
from slurmctl.runtime.store import Obj


class NotWatched(LookupError):  # noqa: N818
    """The kind has no informer: register it (`Manager.informer` / `owns` / `watches`) before reading it."""


class Cache:
    def __init__(self, informers: Mapping[tuple[str, str], Informer], *, namespace: str | None = None) -> None:
        self._informers = informers
        self._namespace = namespace  # the manager watches only this namespace (None: all)

    def _store_of(self, api_version: str, kind: str) -> Informer:
        informer = self._informers.get((api_version, kind))
        if informer is None:
            raise NotWatched(f"{kind} ({api_version}) is not watched by this manager")
        return informer

    def get(self, api_version: str, kind: str, name: str, *, namespace: str | None = None) -> Obj | None:
        """The cached object (read-only: deep-copy before changing it), or None."""
        key = f"{namespace}/{name}" if namespace else name
        return self._store_of(api_version, kind).store.get(key)

    def list(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        owner_uid: str | None = None,
    ) -> list[Obj]:
        """Cached objects matching all filters (read-only), sorted by namespace/name."""
        return self._store_of(api_version, kind).store.list(namespace=namespace, labels=labels, owner_uid=owner_uid)

    def lookup(self, api_version: str, kind: str, namespace: str, name: str) -> Obj | Cached | None:
        """For the applier: the cached object, None when absent, NOT_WATCHED when the kind has no synced informer."""
        informer = self._informers.get((api_version, kind))
        if informer is None or not informer.has_synced or (namespace and self._namespace not in (None, namespace)):
            return Cached.NOT_WATCHED
        return informer.store.get(f"{namespace}/{name}" if namespace else name)
