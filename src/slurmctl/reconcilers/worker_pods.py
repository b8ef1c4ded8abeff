"""A cluster's worker pods and StatefulSets as the informer cache holds them, and the nodes that must leave Slurm now:
what the workers component acts on (the drain gate, the roll) and what the Slurm node loop must know of them (whose
pods to watch and label, which drained nodes not to resume). Both read them here; neither asks the other.

Every node that must go (`WorkerPods.leaving`) is one of: a shrinking group's nodes above its new size, a removed
group's nodes (drain.leaving_nodes), an elastic node whose group is gone, a pod left behind by a re-created
StatefulSet (its selector changed), or the pods re-created next for a new pod template (the roll: at most
spec.maintenance.maxUnavailable of the cluster's nodes out at a time).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from slurmctl.reconcilers.component import Obj, owned
from slurmctl.reconcilers.drain import Leaving, leaving_nodes, statefulset_of
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
from slurmctl.render import meta
from slurmctl.render.kinds import POD, STATEFULSET
from slurmctl.runtime import Cache, Request

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
    labels: tuple[str, ...]

    def pods(self, c: str, namespace: str, group: str | None = None) -> list[Obj]:
        """A cluster's worker pods (also those labelled by releases before the component rename), of one group or
        all, by name."""
        extra = {meta.LABEL_WORKER_GROUP: group} if group else {}
        found: dict[str, Obj] = {}
        for label in self.labels:
            for pod in self.cache.list(*POD, namespace=namespace, labels=meta.selector(c, label, **extra)):
                found[pod["metadata"]["name"]] = pod
        return [found[name] for name in sorted(found)]

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
        pods: Iterable[Obj] | None = None,
        *,
        rolls: bool = True,
    ) -> list[Leaving]:
        """Every node that must go now (scale-in, removed groups, the node being re-created): what the drain gate
        drains, and what the Slurm node loop must not resume. `live`: each live worker StatefulSet's replicas by
        name, and `pods`: the cluster's worker pods in name order (as the cache lists them), when the caller has read
        them already. `rolls`: whether pods may be re-created for a new template now (the maintenance gate,
        reconcilers/maintenance_gate.py); when not, no worker is rolled. Each pod is read once of its cache
        (`WorkerPod`: a pass looks at thousands)."""
        statefulsets = self.statefulsets(loaded)
        live = worker_replicas(statefulsets) if live is None else live
        found_pods = self.pods(loaded.name, loaded.namespace) if pods is None else list(pods)
        seen = [WorkerPod.of(pod) for pod in found_pods]
        selectors = {_name(sts): match_labels(sts) for sts in statefulsets if not deleting(sts)}
        unselected = _unselected(seen, selectors)
        spec = loaded.cluster.spec
        strays = stray_elastic_pods(loaded.name, spec.elastic_groups, found_pods)
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
            *(self._roll(loaded, live, seen, unselected) if rolls else ()),
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
        seen: Sequence[WorkerPod],
        unselected: Mapping[str, list[WorkerPod]],
    ) -> list[Leaving]:
        """The workers to re-create next (only the operator deletes worker pods: OnDelete StatefulSets), so that at
        most the roll's limit (spec.maintenance.maxUnavailable) of the cluster's fixed workers are out at a time: in
        the groups that are not shrinking, by name, pods left behind by their re-created StatefulSet (which creates one
        of the same name once it is gone), else the highest outdated ordinals (a new pod template). A fixed worker
        that is missing, not ready or going counts as out, as a Deployment counts unavailable pods; a due pod out
        already costs no place to re-create."""
        c, ns = loaded.name, loaded.namespace
        by_group: dict[str, list[WorkerPod]] = defaultdict(list)
        for pod in seen:
            by_group[pod.group].append(pod)
        out, in_service, due_now = 0, set[str](), list[Leaving]()
        for group in sorted(loaded.cluster.spec.workers, key=lambda g: g.name):
            name = meta.worker_group(c, group.name)
            replicas = live.get(name)
            if replicas is None or group.autoscale is not None:
                continue  # an elastic group's StatefulSet (it was fixed) only leaves
            pods = by_group.get(group.name, [])
            kept = min(replicas, group.size)
            ready = {pod.name for pod in pods if pod.ordinal < kept and pod.ready and not pod.terminating}
            out += kept - len(ready)
            in_service |= ready
            if group.size < replicas:
                continue  # shrinking: its nodes above the new size leave first
            sts = self.cache.get(*STATEFULSET, name, namespace=ns)
            wanted = match_labels(sts)
            behind = [pod.name for pod in sorted(unselected.get(name, []), key=_ordinal) if pod.ordinal < replicas]
            due = behind or outdated_pods(sts, [pod for pod in pods if pod.selected_by(wanted)])
            if not due:
                continue
            why = _behind_why(name) if behind else _template_why(group.name)
            due_now += [Leaving(pod, group.name, why, recreate=True) for pod in reversed(due)]
        room = loaded.cluster.spec.roll_limit() - out
        picked = []
        for going in due_now:
            if going.node not in in_service:
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


def _unselected(seen: Iterable[WorkerPod], selectors: Mapping[str, Mapping[str, str]]) -> dict[str, list[WorkerPod]]:
    """Worker pods that no live StatefulSet selects, by the StatefulSet name in theirs: left behind (orphaned) when a
    StatefulSet whose selector changed was deleted. `selectors`: each live StatefulSet's, by name."""
    out: dict[str, list[WorkerPod]] = defaultdict(list)
    for pod in seen:
        owner = statefulset_of(pod.name)
        if not pod.terminating and not pod.elastic and not pod.selected_by(selectors.get(owner, {})):
            out[owner].append(pod)
    return out


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
