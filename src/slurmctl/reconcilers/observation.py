"""A cluster as one pass of a component saw it: the `Observation` a pure `plan()` decides on (reconcilers/plan.py).

Everything a plan reads is read here, before it decides: the loaded cluster, the status as the status writer will
leave it, the key Secrets' ids, the jail gate, the worker children and the nodes that must leave, Slurm's snapshot (or
why Slurm could not be asked) and the API server's admission verdicts. A plan reads no clock but `now` and asks
nothing: given the same observation it decides the same, which is what its tests check without an API server.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from slurmctl.api.v1 import SPEC_VALID, Condition, Reason, SlurmClusterStatus
from slurmctl.reconcilers import conditions
from slurmctl.reconcilers.drain import Leaving
from slurmctl.reconcilers.loading import Loaded
from slurmctl.reconcilers.observed import data_keys, uid
from slurmctl.reconcilers.plan import Delete, Note, Obj, Plan
from slurmctl.reconcilers.pod_record import PodRecord
from slurmctl.reconcilers.slurm_snapshot import SlurmSnapshot
from slurmctl.reconcilers.upgrade import Decision
from slurmctl.render import meta
from slurmctl.render.kinds import SECRET, Kind
from slurmctl.render.manifests import Inputs
from slurmctl.render.network_policy import DEFAULT_NETWORK, NetworkSettings
from slurmctl.render.sshd import DEFAULT_HOST_KEY_TYPES
from slurmctl.render.topology import Placement
from slurmctl.runtime import Cache
from slurmctl.runtime.objects import meta_of


@dataclass(frozen=True)
class Settings:
    """The operator's own settings that plans read (its flags)."""

    cluster_domain: str = meta.DEFAULT_CLUSTER_DOMAIN
    network: NetworkSettings = DEFAULT_NETWORK
    privileged_jobs: bool = False
    host_key_types: tuple[str, ...] = DEFAULT_HOST_KEY_TYPES  # the SSH host keys a new cluster gets


@dataclass(frozen=True)
class Observation:
    """One cluster at `now`. `slurm` is None when nothing this pass decides needs Slurm (it was not asked); an
    unreachable Slurm is a snapshot with its error. `refusals` are the API server's refusals of the pods of live
    workloads, by workload name (reconcilers/admission.py)."""

    loaded: Loaded
    now: datetime
    said: Mapping[str, Any]  # the cluster's status as the status writer will leave it
    settings: Settings = Settings()
    keys: Mapping[str, str] = field(default_factory=dict)  # key Secret -> uid, of those the cluster created
    key_fields: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # key Secret -> the keys of its data
    foreign_keys: frozenset[str] = frozenset()  # key Secrets of the cluster's names that it did not create
    key_rotations: Mapping[str, str] = field(default_factory=dict)  # key Secret -> the rotation it was made for
    jail_open: bool = False
    children: Mapping[Kind, Mapping[str, Obj]] = field(default_factory=dict)  # the component's own, by kind and name
    pods: Mapping[str, Obj] = field(default_factory=dict)  # the component's pods (by its labels), by name
    pod_record: PodRecord | None = None  # `pods` read once, where they are worker pods (reconcilers/pod_record.py)
    leaving: tuple[Leaving, ...] = ()
    slurm: SlurmSnapshot | None = None
    refusals: Mapping[str, str] = field(default_factory=dict)
    placement: Placement = field(default_factory=dict)  # Slurm node -> its Kubernetes node's labels (spec.topology)
    removed_groups: frozenset[str] = frozenset()  # worker groups the spec no longer has whose StatefulSet is there
    # (or, for an elastic group, whose pods are)
    held_nodes: Mapping[str, str] = field(default_factory=dict)  # elastic pod the spec no longer has -> its group
    # A Slurm upgrade: the line each component renders now (reconcilers/upgrade.py); None: the spec's line for all.
    upgrade: Decision | None = None

    @property
    def worker_pods(self) -> PodRecord:
        """The worker pods as the record the observation read, else made of `pods`."""
        return self.pod_record if self.pod_record is not None else PodRecord.of(self.pods.values())

    def owned(self, kind: Kind) -> Mapping[str, Obj]:
        """The component's children of a kind, by name."""
        return self.children.get(kind, {})

    def prune(self, kind: Kind, keep: Iterable[str]) -> list[Delete]:
        """Deletions of the component's children of a kind that the spec no longer asks for (never claims: user
        data), each of the incarnation observed."""
        wanted = set(keep)
        return [
            Delete(kind, name, "no longer in the spec", uid=uid(child))
            for name, child in self.owned(kind).items()
            if name not in wanted
        ]

    def inputs(self, **known: Any) -> Inputs:
        return inputs(self.loaded, self.settings, **known)

    def condition(self, type_: str, *, ok: bool, reason: Reason, message: str) -> Condition:
        """A condition as it will be written: its transition time kept from the status while it does not flip."""
        current = {**self.loaded.obj, "status": self.said}
        return conditions.make_condition(current, type_, ok=ok, reason=reason, message=message, at=self.now)

    def is_news(self, type_: str, reason: Reason, message: str) -> bool:
        return conditions.is_news(self.said, type_, reason, message)

    def warn_once(self, type_: str, reason: Reason, message: str) -> tuple[Note, ...]:
        """The Warning Event of a finding that the component's condition (`type_`) is about to say: only when that is
        news, so a finding is one Event, not one per pass."""
        return (Note("Warning", reason.value, message),) if self.is_news(type_, reason, message) else ()

    def wait_for_keys(self, type_: str, *names: str) -> Plan | None:
        """None when the key Secrets the pods mount are all there; else the plan of a component that waits for them,
        saying which one in its condition (`type_`) once that is news (`missing_key`)."""
        missing = missing_key(self.loaded, self.keys, self.foreign_keys, names)
        if missing is None:
            return None
        if missing[1] is None:
            return Plan(type_)
        return self.report(type_, ok=False, reason=Reason.WAITING_FOR_KEYS, message=missing[1])

    def report(self, type_: str, *, ok: bool, reason: Reason, message: str) -> Plan:
        """A plan that only says something in the component's condition (what it waits for, or why it failed)."""
        cond = self.condition(type_, ok=ok, reason=reason, message=message)
        return Plan(type_, status=SlurmClusterStatus(conditions=[cond]))


def inputs(loaded: Loaded, settings: Settings, **known: Any) -> Inputs:
    """The renderer's inputs: the loaded cluster and its configs, what was observed (`known`: key ids, replicas, the
    configs as the cluster component holds them), and the operator's settings."""
    known.setdefault("configs", loaded.configs)
    return Inputs(
        cluster=loaded.cluster,
        cluster_domain=settings.cluster_domain,
        network=settings.network,
        privileged_jobs=settings.privileged_jobs,
        **known,
    )


@dataclass(frozen=True)
class Keys:
    """The cluster's key Secrets as the cache holds them: the uid of each it created (a new key means a new Secret,
    so its uid in the config hash rolls the pods), the keys of their data, the names taken by a Secret it did not
    create, and the rotation request each was made for (meta.JWT_KEY_ROTATION_ANNOTATION; none: the first key)."""

    ids: Mapping[str, str]
    fields: Mapping[str, tuple[str, ...]]
    foreign: frozenset[str]
    rotations: Mapping[str, str] = field(default_factory=dict)


def read_keys(cache: Cache, loaded: Loaded, names: Iterable[str]) -> Keys:
    ids: dict[str, str] = {}
    fields: dict[str, tuple[str, ...]] = {}
    foreign: set[str] = set()
    rotations: dict[str, str] = {}
    for name in names:
        secret = cache.get(*SECRET, name, namespace=loaded.namespace)
        if secret is not None and meta.controlled_by(secret, loaded.cluster):
            ids[name] = uid(secret)
            fields[name] = tuple(data_keys(secret))
            if rotation := meta_of(secret).annotations.get(meta.JWT_KEY_ROTATION_ANNOTATION):
                rotations[name] = rotation
        elif secret is not None:
            foreign.add(name)
    return Keys(ids, fields, frozenset(foreign), rotations)


def key_secrets(c: str) -> tuple[str, ...]:
    """The key Secrets the cluster component creates for a cluster, which other components' pods mount."""
    return meta.munge_secret(c), meta.jwt_key_secret(c), meta.ssh_host_keys_secret(c)


def missing_key(
    loaded: Loaded, keys: Mapping[str, str], foreign: Collection[str], names: Iterable[str]
) -> tuple[str, str | None] | None:
    """The first of these key Secrets that is not there, and what the component's condition says of it (None while
    that is not news); None when all are there.

    A Secret of the name that this cluster did not create (a deleted cluster's the garbage collector has not removed
    yet, or one someone else made) is never adopted: its key would change under running pods when it goes, or be known
    to whoever planted it; its deletion wakes the cluster reconciler, which makes ours. A missing one is news only once
    the cluster component has passed over this generation (it creates the keys before it reports SpecValid): before
    that every component of a new cluster would write a "waiting" condition made stale milliseconds later."""
    for name in names:
        if name in keys:
            continue
        if name in foreign:
            message = (
                f"waiting for Secret {name} to be deleted: this cluster (uid {loaded.cluster.metadata.uid}) "
                "did not create it, and slurmctl uses only key material it created for the cluster"
            )
            return name, message
        valid = loaded.condition(SPEC_VALID)
        due = valid is not None and valid.observed_generation == loaded.generation
        return name, f"waiting for Secret {name}" if due else None
    return None
