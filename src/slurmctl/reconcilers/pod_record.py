"""A cluster's worker pods read once (observe once): the record every pass of the workers component, the cluster
component and the Slurm node loop derives what it needs of from, kept until one of those pods changes, and then
made again from the last one, group by group.

Why: at 10,240 workers each of those passes read every pod again (the cache's list, `WorkerPod.of` four times over,
the groups with elastic or fixed pods, the pods no StatefulSet selects), also after a spec edit, which changes no pod:
most of what a size edit waited for before its StatefulSet was written (docs/performance.md). The record is kept by the
version of the cluster's worker pods in the cache (`Cache.changed`), so a pass after an edit reads it as it was. A pod
that changed (a new one, a condition the node loop wrote: the last write before an edit, most often) makes a new
record of the one before and the pods the cache names as changed (`PodRecord.updated`), and what was derived of each
group's pods alone (`GroupPods`) is carried into it for every group none of whose pods changed. What an edit waits
for is then a pass over the groups, not over the pods.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar, cast

from slurmctl.reconcilers.drain import statefulset_of
from slurmctl.reconcilers.observed import WorkerPod
from slurmctl.runtime.store import Obj

Selectors = Mapping[str, Mapping[str, str]]  # each live worker StatefulSet's matchLabels, by name
T = TypeVar("T")


def _derive(derived: dict[Hashable, Any], key: Hashable, make: Callable[[], T]) -> T:
    if key not in derived:
        derived[key] = make()
    return cast("T", derived[key])


@dataclass(frozen=True)
class GroupPods:
    """One worker group's pods (its label; in name order, as cached objects and as read) and what was derived of them
    alone, each worked out once: carried into the next record while none of them changed."""

    pods: tuple[Obj, ...]
    seen: tuple[WorkerPod, ...]
    _derived: dict[Hashable, Any] = field(default_factory=dict, compare=False, repr=False)

    def derive(self, key: Hashable, make: Callable[[GroupPods], T]) -> T:
        """What `make` derives of this group's pods (and of what `key` names besides), made once."""
        return _derive(self._derived, key, lambda: make(self))


@dataclass(frozen=True)
class PodRecord:
    """The worker pods (`pods`: by name, in name order; `seen`: read, in the same order), each group's (`groups`) and
    what passes derive of them, each worked out once."""

    pods: Mapping[str, Obj] = field(default_factory=dict)
    seen: tuple[WorkerPod, ...] = ()
    groups: Mapping[str, GroupPods] = field(default_factory=dict)
    _derived: dict[Hashable, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, pods: Iterable[Obj]) -> PodRecord:
        """`pods` in name order (as the cache lists them)."""
        by_name = {pod["metadata"]["name"]: pod for pod in pods}
        seen = tuple(map(WorkerPod.of, by_name.values()))
        members: defaultdict[str, list[str]] = defaultdict(list)
        for read in seen:
            members[read.group].append(read.name)
        reads = dict(zip(by_name, seen, strict=True))
        return cls(by_name, seen, dict(sorted(_grouped(members, by_name, reads).items())))

    def updated(self, changed: Mapping[str, Obj | None]) -> PodRecord:
        """This record with the pods that `changed` (by name: the pod now, None when gone) read anew: the groups none
        of whose pods changed are carried over with what was derived of them. What it costs is the changed pods' and
        their groups', but for copying the record's maps."""
        pods, reads = dict(self.pods), dict(zip(self.pods, self.seen, strict=True))
        touched, came = set[str](), False
        for name, pod in changed.items():
            if (before := reads.get(name)) is not None:
                touched.add(before.group)
            if pod is None:
                pods.pop(name, None)
                reads.pop(name, None)
                continue
            came = came or before is None
            pods[name] = pod
            reads[name] = read = WorkerPod.of(pod)
            touched.add(read.group)
        if came:  # a new pod is last: in name order again
            pods = {name: pods[name] for name in sorted(pods)}
            reads = {name: reads[name] for name in pods}
        members: dict[str, list[str]] = {}
        for group in touched:
            names = {read.name for read in self.groups[group].seen} if group in self.groups else set()
            found = (name for name in names.union(changed) if name in reads and reads[name].group == group)
            members[group] = sorted(found)
        groups = {name: group for name, group in self.groups.items() if name not in touched}
        groups.update(_grouped(members, pods, reads))
        return PodRecord(pods, tuple(reads.values()), dict(sorted(groups.items())))

    @cached_property
    def by_group(self) -> Mapping[str, tuple[WorkerPod, ...]]:
        """The pods of each worker group (its label), in name order."""
        return {name: group.seen for name, group in self.groups.items()}

    @cached_property
    def elastic(self) -> tuple[WorkerPod, ...]:
        """The elastic groups' pods (reconcilers/elastic.py), those being deleted too, in name order."""
        each = self.derive_each("elastic", lambda group: [pod for pod in group.seen if pod.elastic])
        return tuple(sorted((pod for pods in each.values() for pod in pods), key=_name))

    def groups_with(self, *, elastic: bool) -> frozenset[str]:
        """The groups with an elastic pod (`elastic`), or with a pod a StatefulSet made (not `elastic`): what tells a
        group switching between the two kinds (reconcilers/group_switch.py)."""
        return self._elastic_groups if elastic else self._fixed_groups

    @cached_property
    def _elastic_groups(self) -> frozenset[str]:
        return frozenset(pod.group for pod in self.elastic)

    @cached_property
    def _fixed_groups(self) -> frozenset[str]:
        return frozenset(group for group, pods in self.by_group.items() if any(not pod.elastic for pod in pods))

    def derive(self, key: Hashable, make: Callable[[], T]) -> T:
        """What `make` derives of these pods (and of what `key` names besides), made once: `key` must name all it
        reads but the pods."""
        return _derive(self._derived, key, make)

    def derive_each(self, key: Hashable, make: Callable[[GroupPods], T]) -> dict[str, T]:
        """What `make` derives of each group's pods alone (and of what `key` names besides), by group: made once a
        group, and made again only for the groups whose pods changed since the record before."""
        return {name: group.derive(key, make) for name, group in self.groups.items()}

    def unselected(self, selectors: Selectors) -> Mapping[str, list[WorkerPod]]:
        """Worker pods that no live StatefulSet selects, by the StatefulSet name in theirs (in name order): left behind
        (orphaned) when a StatefulSet whose selector changed was deleted."""
        key = ("unselected", _frozen(selectors))

        def of_group(group: GroupPods) -> Mapping[str, list[WorkerPod]]:
            out: defaultdict[str, list[WorkerPod]] = defaultdict(list)
            for pod in group.seen:
                owner = statefulset_of(pod.name)
                if not pod.terminating and not pod.elastic and not pod.selected_by(selectors.get(owner, {})):
                    out[owner].append(pod)
            return dict(out)

        def make() -> Mapping[str, list[WorkerPod]]:
            out: defaultdict[str, list[WorkerPod]] = defaultdict(list)
            for found in self.derive_each(key, of_group).values():
                for owner, pods in found.items():
                    out[owner].extend(pods)
            return {owner: sorted(pods, key=_name) for owner, pods in out.items()}

        return self.derive(key, make)

    def selected(self, group: str, match_labels: Mapping[str, str]) -> tuple[WorkerPod, ...]:
        """The group's pods that a StatefulSet's selector (its matchLabels) selects."""
        found = self.groups.get(group)
        if found is None:
            return ()
        return found.derive(
            ("selected", frozenset(match_labels.items())),
            lambda g: tuple(pod for pod in g.seen if pod.selected_by(match_labels)),
        )

    def in_service(self, group: str, below: int) -> frozenset[str]:
        """The group's pods below ordinal `below` that are ready and not going."""
        found = self.groups.get(group)
        if found is None:
            return frozenset()
        return found.derive(
            ("in service", below),
            lambda g: frozenset(p.name for p in g.seen if p.ordinal < below and p.ready and not p.terminating),
        )


def _grouped(
    members: Mapping[str, list[str]], pods: Mapping[str, Obj], reads: Mapping[str, WorkerPod]
) -> dict[str, GroupPods]:
    """Each group of `members` (its pods' names, in name order) that has a pod."""
    return {
        group: GroupPods(tuple(pods[name] for name in names), tuple(reads[name] for name in names))
        for group, names in members.items()
        if names
    }


def _name(pod: WorkerPod) -> str:
    return pod.name


def _frozen(selectors: Selectors) -> frozenset[tuple[str, frozenset[tuple[str, str]]]]:
    return frozenset((name, frozenset(labels.items())) for name, labels in selectors.items())
