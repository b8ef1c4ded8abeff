"""A cluster's worker pods and StatefulSets as the informer cache holds them, and the nodes that must leave Slurm now:
what the workers component acts on (the drain gate, the roll) and what the Slurm node loop must know of them (whose
pods to watch and label, which drained nodes not to resume). Both read them here; neither asks the other.

Every node that must go (`WorkerPods.leaving`) is one of: a shrinking group's nodes above its new size, a removed
group's nodes (drain.leaving_nodes), an elastic node whose group is gone, a pod left behind by a re-created
StatefulSet (its selector changed), or the pods re-created next for a new pod template (the roll: at most
spec.maintenance.maxUnavailable of the cluster's nodes out at a time).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from cachetools import LRUCache

from slurmctl.reconcilers.component import Obj, owned
from slurmctl.reconcilers.drain import Leaving, leaving_nodes
from slurmctl.reconcilers.elastic import stray_elastic_pods
from slurmctl.reconcilers.loading import Loaded
from slurmctl.reconcilers.observed import (
    Live,
    WorkerPod,
    clusters_on,
    deleting,
    match_labels,
    outdated_pods,
    worker_replicas,
)
from slurmctl.reconcilers.pod_record import PodRecord
from slurmctl.render import meta
from slurmctl.render.kinds import POD, STATEFULSET
from slurmctl.render.workers import COMPONENT, FORMER_COMPONENTS
from slurmctl.runtime import Cache, Request
from slurmctl.runtime.objects import meta_of
from slurmctl.runtime.store import Version

# The component labels worker pods carry: the workers component's, and those releases before 0.2 put on them.
WORKER_LABELS: Final = (COMPONENT, *FORMER_COMPONENTS)
# The clusters whose worker-pod record is kept (pod_record.py): those whose passes run about now. A record holds the
# pods the cache's decoded set holds anyway; a thousand small clusters each read theirs anew, as before.
RECORDS = 16

# How long a change of a worker pod waits for the changes after it before it wakes a pass that reads every worker pod
# of its cluster (the workers component's, the Slurm node loop's): while 10,240 pods started, one pass after another
# (each woken by the pods that changed during the last) kept the operator busy three quarters of the time, on the
# two cores it shares with the API server and the controllers that start the pods. A spec edit waits for no batch.
BATCH_SECONDS = 0.5


@dataclass(frozen=True)
class WorkerPods:
    """The worker children in `cache`: `labels` are the workers component's label and those older releases put on its
    children (`Component.labels`), all recognised."""

    cache: Cache
    labels: tuple[str, ...] = WORKER_LABELS
    _records: LRUCache[tuple[str, str], tuple[Version, PodRecord]] = field(
        default_factory=lambda: LRUCache(maxsize=RECORDS), compare=False, repr=False
    )

    def record(self, c: str, namespace: str) -> PodRecord:
        """A cluster's worker pods (also those labelled by releases before the component rename), read once: the
        record made when one of the cluster's pods last changed (pod_record.py; other clusters' pods do not count),
        from the one before it and the pods that changed since, when the cache recalls which."""
        kept = self._records.get((namespace, c))
        version, changed = self.cache.changed(
            *POD, namespace=namespace, label=(meta.LABEL_INSTANCE, c), since=None if kept is None else kept[0]
        )
        if kept is not None and changed is not None:
            record = (
                kept[1].updated({key.partition("/")[2]: self._worker(c, key) for key in changed})
                if changed
                else kept[1]
            )
        else:
            selectors = [meta.selector(c, label) for label in self.labels]
            lists = [self.cache.list(*POD, namespace=namespace, labels=selector) for selector in selectors]
            found = [pod for pods in lists for pod in pods]
            if sum(map(bool, lists)) > 1:  # each list is in name order: only pods under two labels need a sort
                found.sort(key=lambda pod: str(pod["metadata"]["name"]))
            record = PodRecord.of(found)
        self._records[(namespace, c)] = (version, record)
        return record

    def _worker(self, c: str, key: str) -> Obj | None:
        """The cached pod of `key` (namespace/name) when it is one of the cluster's worker pods."""
        namespace, _, name = key.partition("/")
        pod = self.cache.get(*POD, name, namespace=namespace)
        labels = meta_of(pod).labels if pod is not None else {}
        return pod if labels.get(meta.LABEL_COMPONENT) in self.labels and labels.get(meta.LABEL_INSTANCE) == c else None

    def pods(self, c: str, namespace: str) -> list[Obj]:
        """A cluster's worker pods, by name."""
        return list(self.record(c, namespace).pods.values())

    def statefulsets(self, loaded: Loaded) -> list[Obj]:
        """The cluster's worker StatefulSets (its own: owned by it), by name."""
        return owned(self.cache, loaded, STATEFULSET, self.labels)

    def clusters_on(self, node: Live) -> list[Request]:
        """The clusters with a worker pod on a Kubernetes node (any namespace): those its cordon concerns."""
        return clusters_on(self.cache, node, self.labels)

    def leaving(
        self,
        loaded: Loaded,
        live: Mapping[str, int] | None = None,
        record: PodRecord | None = None,
        *,
        rolls: bool = True,
    ) -> list[Leaving]:
        """Every node that must go now (scale-in, removed groups, the node being re-created): what the drain gate
        drains, and what the Slurm node loop must not resume. `live`: each live worker StatefulSet's replicas by
        name, and `record`: the cluster's worker pods, when the caller has read them already. `rolls`: whether pods
        may be re-created for a new template now (the maintenance gate, reconcilers/maintenance_gate.py); when not,
        no worker is rolled."""
        statefulsets = self.statefulsets(loaded)
        live = worker_replicas(statefulsets) if live is None else live
        record = self.record(loaded.name, loaded.namespace) if record is None else record
        selectors = {_name(sts): match_labels(sts) for sts in statefulsets if not deleting(sts)}
        unselected = record.unselected(selectors)
        spec = loaded.cluster.spec
        strays = stray_elastic_pods(loaded.name, spec.elastic_groups, record.elastic)
        fixed = {g.name for g in spec.workers if g.autoscale is None}
        everything = (
            *leaving_nodes(
                loaded.name,
                [g for g in spec.workers if g.autoscale is None],
                live,
                elastic={g.name for g in spec.elastic_groups},
            ),
            *(Leaving(pod, group, _stray_why(group, fixed), recreate=True) for pod, group in strays),
            *_left_behind(loaded, live, unselected),
            *(self._roll(loaded, live, record, unselected) if rolls else ()),
        )
        found: dict[str, Leaving] = {}
        for going in everything:
            if going.node not in found or going.recreate:  # a pod no StatefulSet selects is the operator's to delete
                found[going.node] = going
        return list(found.values())

    def _roll(
        self,
        loaded: Loaded,
        live: Mapping[str, int],
        record: PodRecord,
        unselected: Mapping[str, list[WorkerPod]],
    ) -> list[Leaving]:
        """The workers to re-create next (only the operator deletes worker pods: OnDelete StatefulSets), so that at
        most the roll's limit (spec.maintenance.maxUnavailable) of the cluster's fixed workers are out at a time: in
        the groups that are not shrinking, by name, pods left behind by their re-created StatefulSet (which creates one
        of the same name once it is gone), else the highest outdated ordinals (a new pod template). A fixed worker
        that is missing, not ready or going counts as out, as a Deployment counts unavailable pods; a due pod out
        already costs no place to re-create."""
        c, ns = loaded.name, loaded.namespace
        out, in_service, due_now = 0, list[frozenset[str]](), list[Leaving]()
        for group in sorted(loaded.cluster.spec.workers, key=lambda g: g.name):
            name = meta.worker_group(c, group.name)
            replicas = live.get(name)
            if replicas is None or group.autoscale is not None:
                continue  # an elastic group's StatefulSet (it was fixed) only leaves
            kept = min(replicas, group.size)
            ready = record.in_service(group.name, kept)
            in_service.append(ready)
            out += kept - len(ready)
            if group.size < replicas:
                continue  # shrinking: its nodes above the new size leave first
            sts = self.cache.get(*STATEFULSET, name, namespace=ns)
            wanted = match_labels(sts)
            behind = [pod.name for pod in sorted(unselected.get(name, []), key=_ordinal) if pod.ordinal < replicas]
            due = behind or outdated_pods(sts, record.selected(group.name, wanted))
            if not due:
                continue
            why = _behind_why(name) if behind else _template_why(group.name)
            due_now += [Leaving(pod, group.name, why, recreate=True) for pod in reversed(due)]
        room = loaded.cluster.spec.roll_limit() - out
        serving = frozenset[str]().union(*in_service) if due_now else frozenset[str]()
        picked = []
        for going in due_now:
            if going.node not in serving:
                picked.append(going)
            elif room > 0:
                picked.append(going)
                room -= 1
        return picked


def roll_reasons(c: str, groups: Iterable[str]) -> frozenset[str]:
    """The drain reasons the roll (`WorkerPods._roll`) gives the nodes of these groups: a node drained with one of
    them whose pod is not leaving now was re-created and is not resumed yet, so still out of service."""
    whys = ((_template_why(g), _behind_why(meta.worker_group(c, g))) for g in groups)
    return frozenset(Leaving("", "", why).reason for pair in whys for why in pair)


def _template_why(group: str) -> str:
    return f"re-created for a new pod template of worker group {group}"


def _behind_why(statefulset: str) -> str:
    return f"left behind by the re-created StatefulSet {statefulset}, which re-creates it"


def _stray_why(group: str, fixed: Collection[str]) -> str:
    if group in fixed:
        return f"worker group {group} becomes fixed"
    return f"worker group {group} no longer has this elastic node"


def _left_behind(loaded: Loaded, live: Mapping[str, int], unselected: Mapping[str, list[WorkerPod]]) -> list[Leaving]:
    """Left-behind pods no StatefulSet will re-create (a removed group's, or past its group's size): all leave at
    once, as in a scale-in. Those it will re-create leave one at a time (`_roll`); none leaves while its group's new
    StatefulSet is not there yet."""
    sizes = {meta.worker_group(loaded.name, g.name): g.name for g in loaded.cluster.spec.workers}
    out = []
    for owner, pods in sorted(unselected.items()):
        if owner in sizes and owner not in live:
            continue
        for pod in pods:
            name = pod.name
            if owner in sizes and pod.ordinal < live[owner]:
                continue
            group = sizes.get(owner, owner.removeprefix(meta.worker_group(loaded.name, "")))
            why = f"left behind by the re-created StatefulSet {owner} (worker group {group})"
            out.append(Leaving(name, group, why, recreate=True))
    return out


def _name(obj: Obj) -> str:
    return str(obj["metadata"]["name"])


def _ordinal(pod: WorkerPod) -> int:
    return pod.ordinal
