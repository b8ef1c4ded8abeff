"""A cluster's worker pods read once (observe once): the record every pass of the workers component, the cluster
component and the Slurm node loop derives what it needs of from, kept until one of those pods changes.

Why: at 10,240 workers each of those passes read every pod again (the cache's list, `WorkerPod.of` four times over,
the groups with elastic or fixed pods, the pods no StatefulSet selects), also after a spec edit, which changes no pod:
most of what a size edit waited for before its StatefulSet was written (docs/performance.md). The record is kept by the
cache's change count of the cluster's worker pods (`Cache.changes`), so a pass after an edit reads it as it was.
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


@dataclass(frozen=True)
class PodRecord:
    """The worker pods (`pods`: by name, in name order) and what passes derive of them, each worked out once."""

    pods: Mapping[str, Obj] = field(default_factory=dict)
    _derived: dict[Hashable, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, pods: Iterable[Obj]) -> PodRecord:
        """`pods` in name order (as the cache lists them)."""
        return cls({pod["metadata"]["name"]: pod for pod in pods})

    @cached_property
    def seen(self) -> tuple[WorkerPod, ...]:
        """Every pod, read (`WorkerPod`), in name order."""
        return tuple(map(WorkerPod.of, self.pods.values()))

    @cached_property
    def by_group(self) -> Mapping[str, tuple[WorkerPod, ...]]:
        """The pods of each worker group (its label), in name order."""
        out: defaultdict[str, list[WorkerPod]] = defaultdict(list)
        for pod in self.seen:
            out[pod.group].append(pod)
        return {group: tuple(pods) for group, pods in out.items()}

    @cached_property
    def elastic(self) -> tuple[WorkerPod, ...]:
        """The elastic groups' pods (reconcilers/elastic.py), those being deleted too."""
        return tuple(pod for pod in self.seen if pod.elastic)

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
        if key not in self._derived:
            self._derived[key] = make()
        return cast("T", self._derived[key])

    def unselected(self, selectors: Selectors) -> Mapping[str, list[WorkerPod]]:
        """Worker pods that no live StatefulSet selects, by the StatefulSet name in theirs: left behind (orphaned) when
        a StatefulSet whose selector changed was deleted."""

        def make() -> Mapping[str, list[WorkerPod]]:
            out: defaultdict[str, list[WorkerPod]] = defaultdict(list)
            for pod in self.seen:
                owner = statefulset_of(pod.name)
                if not pod.terminating and not pod.elastic and not pod.selected_by(selectors.get(owner, {})):
                    out[owner].append(pod)
            return dict(out)

        return self.derive(("unselected", _frozen(selectors)), make)

    def selected(self, group: str, match_labels: Mapping[str, str]) -> tuple[WorkerPod, ...]:
        """The group's pods that a StatefulSet's selector (its matchLabels) selects."""
        pods = self.by_group.get(group, ())
        key = ("selected", group, frozenset(match_labels.items()))
        return self.derive(key, lambda: tuple(pod for pod in pods if pod.selected_by(match_labels)))

    def in_service(self, group: str, below: int) -> frozenset[str]:
        """The group's pods below ordinal `below` that are ready and not going."""
        pods = self.by_group.get(group, ())
        return self.derive(
            ("in service", group, below),
            lambda: frozenset(p.name for p in pods if p.ordinal < below and p.ready and not p.terminating),
        )


def _frozen(selectors: Selectors) -> frozenset[tuple[str, frozenset[tuple[str, str]]]]:
    return frozenset((name, frozenset(labels.items())) for name, labels in selectors.items())
