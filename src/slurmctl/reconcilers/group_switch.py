"""A worker group switched between fixed and elastic in the spec keeps its old kind until the old kind's pods are gone.

Both kinds use the same node names, made two ways: a fixed group's pods are its StatefulSet's and their slurmd
registers a dynamic node; an elastic group's pods are the operator's own and Slurm knows their nodes as CLOUD nodes of
nodes.conf. Both at once would end jobs: a CLOUD line for the name of a dynamic node that runs a job (slurmctld's next
reconfigure), or a StatefulSet that cannot create a pod whose name an elastic pod holds and then registers a dynamic
node while Slurm still has the CLOUD one. So, as for a removed group, the old kind's nodes leave through the drain gate
(drained, their jobs run to the end or to the group's drainTimeout; reconcilers/worker_pods.py), and only then does
the new kind start:

- becoming elastic: Slurm's configuration keeps the group fixed with no node (no CLOUD line, no power partition)
  while its StatefulSet or a pod of it is there, and the elastic plan leaves the group alone; the StatefulSet is
  pruned once the gate released all its nodes.
- becoming fixed: the StatefulSet is not made while an elastic pod of the group is there (its CLOUD line is held in
  nodes.conf meanwhile: render/slurm_conf.py hold_elastic_nodes), nor while Slurm still lists one of the group's
  nodes as a CLOUD node (the held line gone from the files but not yet from slurmctld).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from slurmctl.api.v1 import SlurmCluster, WorkerGroup
from slurmctl.reconcilers.pod_record import PodRecord
from slurmctl.render import meta
from slurmctl.slurm import Node


def becoming_elastic(
    c: str, groups: Iterable[WorkerGroup], statefulsets: Collection[str], record: PodRecord
) -> frozenset[str]:
    """The elastic groups of the spec whose StatefulSet (`statefulsets`: the live ones' names) or a pod it made is
    still there."""
    elastic = {g.name for g in groups if g.autoscale is not None}
    found = {g for g in elastic if meta.worker_group(c, g) in statefulsets}
    return frozenset(found | (elastic & record.groups_with(elastic=False)))


def becoming_fixed(
    c: str, groups: Iterable[WorkerGroup], record: PodRecord, nodes: Mapping[str, Node] | None
) -> frozenset[str]:
    """The fixed groups of the spec with an elastic pod still there (one being deleted too), or a node Slurm still
    lists as a CLOUD node (`nodes`: Slurm's by name; None when Slurm did not answer, so a new cluster, whose Slurm is
    not up yet, is not held)."""
    fixed = {g.name for g in groups if g.autoscale is None}
    found = set(fixed & record.groups_with(elastic=True))
    prefix = meta.worker_group(c, "")
    for name, node in (nodes or {}).items():
        if "CLOUD" in node.state and name.startswith(prefix):
            group = name.removeprefix(prefix).rpartition("-")[0]
            if group in fixed:
                found.add(group)
    return frozenset(found)


def as_fixed_without_nodes(cluster: SlurmCluster, groups: Collection[str]) -> SlurmCluster:
    """The cluster as Slurm must know it while `groups` become elastic: those groups fixed, with no node (their
    node sets and partitions stay; the nodes of their StatefulSet are dynamic nodes meanwhile)."""
    if not groups:
        return cluster
    workers = [
        g.model_copy(update={"autoscale": None, "size": 0}) if g.name in groups else g for g in cluster.spec.workers
    ]
    return cluster.model_copy(update={"spec": cluster.spec.model_copy(update={"workers": workers})})


def without_groups(cluster: SlurmCluster, groups: Collection[str]) -> SlurmCluster:
    """The cluster without `groups`: what the workers' objects are made from while those groups become fixed (no
    StatefulSet for them yet)."""
    if not groups:
        return cluster
    workers = [g for g in cluster.spec.workers if g.name not in groups]
    return cluster.model_copy(update={"spec": cluster.spec.model_copy(update={"workers": workers})})


def describe(becoming: Mapping[str, frozenset[str]]) -> list[str]:
    """What WorkersReady says of the groups still switching (`becoming`: the new kind -> the groups)."""
    return [
        f"worker group {group} becomes {kind} once the nodes of its {'fixed' if kind == 'elastic' else 'elastic'} "
        "pods have left (drained, after their jobs)"
        for kind, groups in sorted(becoming.items())
        for group in sorted(groups)
    ]
