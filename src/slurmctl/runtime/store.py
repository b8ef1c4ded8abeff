"""The informer's local copy of one resource type, keyed by namespace/name, with secondary indexes: namespace, owner,
label and, for pods, the Kubernetes node (`spec.nodeName`, the field Kubernetes itself indexes pods by). Why the node:
a Node's event maps to the clusters with a pod there, and scanning every pod for it made a thousand simulated nodes
times 3,584 worker pods a backlog of minutes (docs/performance.md).

Objects are shared, not copied, on read: callers must treat them as read-only (`copy.deepcopy` before changing). A
store holds each as `objects.Shared`, which keeps the views decoded of it (each decoded once).

An informer's store keeps its objects encoded (`encoded=True`: compact JSON bytes, `wire.encode`) and only the most
recently read or written ones also as dicts (`HOT_OBJECTS`). Why: a Kubernetes object as Python dicts and strings
takes four to five times its JSON size (a worker StatefulSet: 22 KB against 4.7 KB), and the caches of the owned
kinds were most of the operator's memory at a thousand clusters (over the 512 MiB its Deployment allows). What one
reconcile pass reads stays decoded between its reads; a cold read costs one decode (~20 us for a StatefulSet, ~80 us
for a worker pod). A store grows its decoded set to hold its largest single list (up to `MAX_HOT_OBJECTS`): a pass
over a cluster of 3,584 worker pods lists them several times, and with 512 decoded each list decoded all of them again
(most of the operator's CPU while such a cluster came up); kept decoded they cost ~28 KB a pod.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import count
from typing import Any

from cachetools import LRUCache

from slurmctl.runtime.objects import ObjectMeta, Shared, meta_of
from slurmctl.runtime.wire import decode, encode

Obj = dict[str, Any]
# Decoded objects a store keeps beside the encoded ones: a few hundred clusters' worth of one kind, so that the
# clusters being reconciled at once read their objects decoded (their passes read each several times).
HOT_OBJECTS = 512
# The most a store keeps decoded however large its lists: the pods of a cluster at the API's 16,384 workers and a few
# thousand more.
MAX_HOT_OBJECTS = 20_480
# The labels (namespace, label pair) whose changed keys a store recalls (`Store.changed`): those asked of last, the
# clusters whose passes run about now; and how many changes it recalls of each. A reader asking of another label, or
# after more changes, reads its objects anew.
LOGGED_LABELS = 32
CHANGE_LOG = 4096
Index = tuple[str, list[str], list[tuple[str, str]], str]
Label = tuple[str, str]
Version = tuple[int, ...]
_STORES = count()  # each store's number: a version is only ever compared with its own store's


def object_key(obj: Mapping[str, Any]) -> str:
    return meta_of(obj).key


def node_name_of(obj: Mapping[str, Any]) -> str:
    """The Kubernetes node a pod is bound to; "" for an unscheduled pod or another kind."""
    spec = obj.get("spec")
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    return node if isinstance(node, str) else ""


def _index_values(meta: ObjectMeta, obj: Mapping[str, Any]) -> Index:
    owners = [ref.uid for ref in meta.owner_references if ref.uid]
    return meta.namespace, owners, list(meta.labels.items()), node_name_of(obj)


class Store:
    def __init__(self, *, encoded: bool = False, hot: int = HOT_OBJECTS) -> None:
        # key -> the object, as a dict or (encoded) as JSON bytes; encoded stores keep hot objects decoded too.
        self._items: dict[str, Obj | bytes] = {}
        self._encoded = encoded
        self._hot: LRUCache[str, Obj] = LRUCache(maxsize=hot if encoded else 1)
        self._margin = hot  # what a grown decoded set holds beside its largest list
        self._indexed: dict[str, Index] = {}
        self._by_namespace: defaultdict[str, set[str]] = defaultdict(set)
        self._by_owner: defaultdict[str, set[str]] = defaultdict(set)
        self._by_label: defaultdict[tuple[str, str], set[str]] = defaultdict(set)
        self._by_node: defaultdict[str, set[str]] = defaultdict(set)
        # (namespace, label pair) -> the number of the last put or removal of an object there carrying it, for the
        # pairs `changed` was asked of (only those: a pod's name is a label too), and the keys put or removed since,
        # for those asked of last
        self._changed: dict[tuple[str, Label], int] = {}
        self._logs: LRUCache[tuple[str, Label], _Log] = LRUCache(maxsize=LOGGED_LABELS)
        self._changes = 0
        self._number = next(_STORES)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Obj]:
        return iter([self._decoded(key, item) for key, item in list(self._items.items())])

    def get(self, key: str) -> Obj | None:
        item = self._items.get(key)
        return None if item is None else self._decoded(key, item)

    def _decoded(self, key: str, item: Obj | bytes) -> Obj:
        if not isinstance(item, bytes):
            return item
        obj = self._hot.get(key)
        if obj is None:
            obj = Shared(decode(item))
            self._hot[key] = obj
        return obj

    def keys(self) -> set[str]:
        return set(self._items)

    def changed(self, namespace: str, label: Label, since: Version | None) -> tuple[Version, frozenset[str] | None]:
        """The version of the objects in `namespace` carrying `label`, which moves whenever one of them is put or
        removed, and the keys of those put or removed after `since` (a version this method returned): None when
        `since` is None, another store's (an informer's store is its own for its lifetime) or older than what the
        store recalls. What a reader deriving something of those objects keeps
        it by: it derives it again only once they changed, and only of those that did (a pass over a cluster of
        10,240 worker pods read each of them after every spec edit, which changes none, and after each change of
        one)."""
        at = (namespace, label)
        version = self._changed.setdefault(at, self._changes)
        log = self._logs.get(at)
        if log is None:
            self._logs[at] = log = _Log(floor=version)  # nothing there changed after `version`
        if since is None or len(since) != 2 or since[0] != self._number:  # not a version of this store
            return (self._number, version), None
        return (self._number, version), log.since(since[1])

    def _changing(self, index: Index, key: str) -> None:
        self._changes += 1
        namespace, _, labels, _ = index
        for pair in labels:
            at = (namespace, pair)
            if at in self._changed:
                self._changed[at] = self._changes
                if (log := self._logs.get(at)) is not None:
                    log.add(self._changes, key)

    def put(self, obj: Obj) -> Obj | None:
        """Insert or replace; returns the previous object. `obj` is held as it is when it is `Shared` (an informer's),
        else a shallow copy of it."""
        held = obj if isinstance(obj, Shared) else Shared(obj)
        meta = meta_of(held)  # read once: the key and the indexes
        key = meta.key
        old = self.get(key)
        if old is not None:
            self._unindex(key)
        if self._encoded:
            self._items[key] = encode(obj)
            self._hot[key] = held
        else:
            self._items[key] = held
        self._indexed[key] = index = _index_values(meta, obj)
        self._changing(index, key)
        namespace, owners, labels, node = index
        self._by_namespace[namespace].add(key)
        for uid in owners:
            self._by_owner[uid].add(key)
        for pair in labels:
            self._by_label[pair].add(key)
        if node:
            self._by_node[node].add(key)
        return old

    def remove(self, key: str) -> Obj | None:
        old = self.get(key)
        if old is not None:
            del self._items[key]
            self._hot.pop(key, None)
            self._unindex(key)
        return old

    def _unindex(self, key: str) -> None:
        index = self._indexed.pop(key)
        self._changing(index, key)
        namespace, owners, labels, node = index
        _discard(self._by_namespace, namespace, key)
        for uid in owners:
            _discard(self._by_owner, uid, key)
        for pair in labels:
            _discard(self._by_label, pair, key)
        if node:
            _discard(self._by_node, node, key)

    def list(
        self,
        *,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        owner_uid: str | None = None,
        node_name: str | None = None,
    ) -> list[Obj]:
        """Objects matching every given filter (labels: all pairs must match; node_name: pods bound to that Kubernetes
        node), in key order."""
        candidates: set[str] | None = None
        filters: list[Iterable[str]] = []
        if namespace is not None:
            filters.append(self._by_namespace.get(namespace, ()))
        if owner_uid is not None:
            filters.append(self._by_owner.get(owner_uid, ()))
        if node_name is not None:
            filters.append(self._by_node.get(node_name, ()))
        for pair in (labels or {}).items():
            filters.append(self._by_label.get(pair, ()))
        for keys in sorted(filters, key=lambda k: len(k) if isinstance(k, set) else 0):
            candidates = set(keys) if candidates is None else candidates.intersection(keys)
        if candidates is None:
            candidates = set(self._items)
        if self._encoded and len(candidates) > self._hot.maxsize:
            self._grow(len(candidates) + self._margin)
        return [self._decoded(k, self._items[k]) for k in sorted(candidates)]

    def _grow(self, wanted: int) -> None:
        """Keep up to `wanted` objects decoded (at most MAX_HOT_OBJECTS): a list larger than the decoded set, read again
        in the same pass, then finds its objects decoded instead of pushing each other out."""
        size = min(wanted, MAX_HOT_OBJECTS)
        if size <= self._hot.maxsize:
            return
        hot: LRUCache[str, Obj] = LRUCache(maxsize=size)
        hot.update(self._hot)
        self._hot = hot


@dataclass
class _Log:
    """The keys put or removed under one label, by the number of the change, after `floor` (at most CHANGE_LOG)."""

    floor: int
    numbers: list[int] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)

    def add(self, number: int, key: str) -> None:
        self.numbers.append(number)
        self.keys.append(key)
        if len(self.numbers) > CHANGE_LOG:
            half = CHANGE_LOG // 2
            self.floor = self.numbers[half - 1]
            del self.numbers[:half], self.keys[:half]

    def since(self, number: int) -> frozenset[str] | None:
        if number < self.floor:
            return None
        return frozenset(self.keys[bisect_right(self.numbers, number) :])


def _discard(index: defaultdict[Any, set[str]], value: Any, key: str) -> None:
    keys = index.get(value)
    if keys is not None:
        keys.discard(key)
        if not keys:
            del index[value]
