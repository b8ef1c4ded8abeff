"""The read side reconcilers use: get/list from the shared informers' stores, never from the API server."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from slurmctl.runtime.apply import Cached
from slurmctl.runtime.informer import Informer
from slurmctl.runtime.store import Label, Obj, Store, Version


class NotWatched(LookupError):  # noqa: N818
    """The kind has no informer: register it (`Manager.informer` / `owns` / `watches`) before reading it."""


class Cache:
    def __init__(
        self, informers: Mapping[tuple[str, str], Informer], *, namespace: str | Collection[str] | None = None
    ) -> None:
        self._informers = informers
        # The namespaces the manager watches (None: all).
        self._namespaces = (
            (namespace,) if isinstance(namespace, str) else None if namespace is None else tuple(namespace)
        )

    def store(self, api_version: str, kind: str) -> Store:
        """The local copy of a watched kind; NotWatched when no informer watches it."""
        informer = self._informers.get((api_version, kind))
        if informer is None:
            raise NotWatched(f"{kind} ({api_version}) is not watched by this manager")
        return informer.store

    def synced(self, api_version: str, kind: str, namespace: str) -> bool:
        """Whether the copy of this kind in this namespace is complete enough to answer "absent"."""
        informer = self._informers.get((api_version, kind))
        watched = self._namespaces is None or not namespace or namespace in self._namespaces
        return informer is not None and informer.has_synced and watched

    def get(self, api_version: str, kind: str, name: str, *, namespace: str | None = None) -> Obj | None:
        """The cached object (read-only: deep-copy before changing it), or None."""
        key = f"{namespace}/{name}" if namespace else name
        return self.store(api_version, kind).get(key)

    def list(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        owner_uid: str | None = None,
        node_name: str | None = None,
    ) -> list[Obj]:
        """Cached objects matching all filters (read-only), sorted by namespace/name; `node_name`: pods bound to that
        Kubernetes node."""
        return self.store(api_version, kind).list(
            namespace=namespace, labels=labels, owner_uid=owner_uid, node_name=node_name
        )

    def changed(
        self, api_version: str, kind: str, *, namespace: str, label: Label, since: Version | None
    ) -> tuple[Version, frozenset[str] | None]:
        """The version of the cached objects in `namespace` carrying `label` and the keys of those that changed after
        `since` (Store.changed): what derived from them stays true while the version does not move, and only the
        changed ones need reading again."""
        return self.store(api_version, kind).changed(namespace, label, since)

    def lookup(self, api_version: str, kind: str, namespace: str, name: str) -> Obj | Cached | None:
        """For the applier: the cached object, None when absent, NOT_WATCHED when the kind has no synced informer."""
        if not self.synced(api_version, kind, namespace):
            return Cached.NOT_WATCHED
        return self.store(api_version, kind).get(f"{namespace}/{name}" if namespace else name)
