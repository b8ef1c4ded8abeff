"""The informer's local copy of one resource type: plain dicts keyed by namespace/name, with secondary indexes.

Objects are shared, not copied, on read: callers must treat them as read-only (`copy.deepcopy` before changing).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

Obj = dict[str, Any]


def object_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or ""
    return f"{namespace}/{meta.get('name', '')}" if namespace else str(meta.get("name", ""))


def _index_values(obj: Obj) -> tuple[str, list[str], list[tuple[str, str]]]:
    meta = obj.get("metadata") or {}
    owners = [ref["uid"] for ref in meta.get("ownerReferences") or () if isinstance(ref, dict) and "uid" in ref]
    labels = [(k, str(v)) for k, v in (meta.get("labels") or {}).items()]
    return meta.get("namespace") or "", owners, labels


class Store:
    def __init__(self) -> None:
        self._items: dict[str, Obj] = {}
        self._by_namespace: defaultdict[str, set[str]] = defaultdict(set)
        self._by_owner: defaultdict[str, set[str]] = defaultdict(set)
        self._by_label: defaultdict[tuple[str, str], set[str]] = defaultdict(set)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Obj]:
        return iter(list(self._items.values()))

    def get(self, key: str) -> Obj | None:
        return self._items.get(key)

    def keys(self) -> set[str]:
        return set(self._items)

    def put(self, obj: Obj) -> Obj | None:
        """Insert or replace; returns the previous object."""
        key = object_key(obj)
        old = self._items.get(key)
        if old is not None:
            self._unindex(key, old)
        self._items[key] = obj
        namespace, owners, labels = _index_values(obj)
        self._by_namespace[namespace].add(key)
        for uid in owners:
            self._by_owner[uid].add(key)
        for pair in labels:
            self._by_label[pair].add(key)
        return old

    def remove(self, key: str) -> Obj | None:
        old = self._items.pop(key, None)
        if old is not None:
            self._unindex(key, old)
        return old

    def _unindex(self, key: str, obj: Obj) -> None:
        namespace, owners, labels = _index_values(obj)
        _discard(self._by_namespace, namespace, key)
        for uid in owners:
            _discard(self._by_owner, uid, key)
        for pair in labels:
            _discard(self._by_label, pair, key)

    def list(
        self,
        *,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        owner_uid: str | None = None,
    ) -> list[Obj]:
        """Objects matching every given filter (labels: all pairs must match), in key order."""
        candidates: set[str] | None = None
        filters: list[Iterable[str]] = []
        if namespace is not None:
            filters.append(self._by_namespace.get(namespace, ()))
        if owner_uid is not None:
            filters.append(self._by_owner.get(owner_uid, ()))
        for pair in (labels or {}).items():
            filters.append(self._by_label.get(pair, ()))
        for keys in sorted(filters, key=lambda k: len(k) if isinstance(k, set) else 0):
            candidates = set(keys) if candidates is None else candidates.intersection(keys)
        if candidates is None:
            candidates = set(self._items)
        return [self._items[k] for k in sorted(candidates)]


def _discard(index: defaultdict[Any, set[str]], value: Any, key: str) -> None:
    keys = index.get(value)
    if keys is not None:
        keys.discard(key)
        if not keys:
            del index[value]
