"""The `cluster` component: the key Secrets (each created once; the JWT key is replaced when spec.jwtKeyRotation asks
for it), the Slurm configs ConfigMap, the `SpecValid` condition and the aggregate phase.

The phase is derived from the conditions of the registered components only (each declares whether it counts for
Available): `Degraded` means something that was ready at this generation no longer is; a spec change that is still
rolling out is `Reconciling`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from slurmctl.api.v1 import (
    SLURM_VERSION,
    SPEC_VALID,
    Condition,
    Phase,
    Reason,
    SlurmCluster,
    SlurmClusterStatus,
    SlurmVersionStatus,
)
from slurmctl.reconcilers.base import ApplyRejected, ComponentReconciler
from slurmctl.reconcilers.component import Component, component_is, owned
from slurmctl.reconcilers.conditions import make_condition
from slurmctl.reconcilers.context import Context
from slurmctl.reconcilers.elastic import stray_elastic_pods
from slurmctl.reconcilers.group_switch import as_fixed_without_nodes, becoming_elastic
from slurmctl.reconcilers.keys import new_jwt_key, new_munge_key, new_ssh_host_keys
from slurmctl.reconcilers.loading import Invalid, Loaded
from slurmctl.reconcilers.observation import Observation
from slurmctl.reconcilers.observed import (
    WorkerPod,
    cluster_of_pod,
    clusters_on,
    generation_of,
    node_labels,
    topology_placement,
)
from slurmctl.reconcilers.plan import Create, Delete, Note, Plan
from slurmctl.reconcilers.views import Cluster, ClusterStatus, Secret, condition
from slurmctl.reconcilers.worker_pods import WORKER_LABELS
from slurmctl.render import meta
from slurmctl.render.accounting import backup_claim_name
from slurmctl.render.cluster import render_jwt_key_secret, render_munge_secret, render_ssh_host_keys_secret
from slurmctl.render.kinds import CONFIGMAP, NODE, POD, SECRET, SLURM_CLUSTER, STATEFULSET
from slurmctl.render.manifests import cluster_objects
from slurmctl.render.slurm_conf import NODES_CONF, hold_elastic_nodes, hold_removed_groups
from slurmctl.runtime import Event, EventType, Request
from slurmctl.runtime.handlers import enqueue_mapped
from slurmctl.runtime.manager import ControllerBuilder
from slurmctl.runtime.objects import meta_of

log = logging.getLogger(__name__)

JWT_KEY_ROTATED = "JWTKeyRotated"  # the Event of a JWT key replaced for spec.jwtKeyRotation
# A Slurm upgrade entered a stage (the reason ends with the stage: SlurmUpgradeBackingUp, ...), or ended. One reason
# per stage: Events of one reason on one object are aggregated into one (runtime/events.py), which would keep only
# the last stage.
UPGRADE_EVENT = "SlurmUpgrade"
UPGRADE_DONE_EVENT = "SlurmUpgradeDone"
UPGRADE_REFUSED_EVENT = "SlurmUpgradeRefused"  # spec.slurm.version asks for a downgrade or an unsupported skip

Mapper = Callable[[Mapping[str, Any]], Iterable[Request]]


def _placed(pod: Mapping[str, Any] | None) -> tuple[object, ...]:
    worker = WorkerPod.of(pod or {})
    return worker.node_name, worker.terminating


def placement_changed(event: Event) -> bool:
    """A worker pod that was scheduled, moved to another Kubernetes node, started going or went: what decides
    whether and where topology.conf names it (not its readiness: see topology_placement). A resync is the
    cluster's own."""
    if event.low_priority:
        return False
    if event.type is not EventType.UPDATED:
        return True
    return _placed(event.old) != _placed(event.obj)


def appeared_or_went(event: Event) -> bool:
    """A worker StatefulSet made or deleted (not its every status update)."""
    return event.type is not EventType.UPDATED and not event.low_priority


def worker_pod_went(event: Event) -> bool:
    """A worker pod deleted: an elastic one's node held in nodes.conf is released, and the last pod of a group that
    became elastic lets Slurm know its nodes as CLOUD nodes (reconcilers/group_switch.py)."""
    return event.type is EventType.DELETED


def node_labels_changed(event: Event) -> bool:
    """A Kubernetes node relabelled (its topology may have changed)."""
    return (
        event.type is EventType.UPDATED and event.old is not None and node_labels(event.old) != node_labels(event.obj)
    )


def aggregate_phase(
    cluster: SlurmCluster, *, required: Iterable[str], previous: str | None, previous_generation: int | None
) -> Phase:
    """The phase from the `required` condition types (those of the components that count for Available)."""
    generation = cluster.metadata.generation or 0
    status = cluster.status
    conditions = [status.condition(t) if status else None for t in required]
    if all(c is None for c in conditions):
        return "Pending"
    current = [c for c in conditions if c is not None and c.observed_generation == generation]
    if len(current) == len(conditions) and all(c.status == "True" for c in current):
        return "Available"
    if any(c.status == "False" and not Reason.means_progress(c.reason) for c in current):
        return "Degraded"
    was_available = previous in ("Available", "Degraded") and previous_generation == generation
    return "Degraded" if was_available else "Reconciling"


KeyMakers = Mapping[str, Callable[[], Awaitable[dict[str, Any]]]]


def plan(obs: Observation) -> Plan:
    """The configs (topology.conf from where the workers run), then the key Secrets that are missing (created, never
    applied: POST fails on an existing Secret, so a stale cache can never make the operator overwrite, i.e. rotate, a
    key that pods already use; none while the configs are rejected, so no other component starts on them), and
    SpecValid. The phase is not the plan's: the status writer derives it from the conditions of the status it writes
    (`derive_phase`), which an observation taken before this pass's writes could only make stale."""
    cluster = obs.loaded.cluster
    cond = obs.condition(SPEC_VALID, ok=True, reason=Reason.VALID, message="the spec is valid")
    configs = dict(obs.loaded.configs)
    installed = obs.owned(CONFIGMAP).get(meta.slurm_configs(obs.loaded.name))
    held = Secret.of(installed).data.get(NODES_CONF, "")
    configs[NODES_CONF] = hold_elastic_nodes(
        hold_removed_groups(configs[NODES_CONF], held, obs.removed_groups), held, obs.held_nodes
    )
    makers = key_makers(cluster, obs.settings.host_key_types)
    taken = {*obs.keys, *obs.foreign_keys}
    missing = [Create(None, make=make) for name, make in makers.items() if name not in taken]
    jwt = meta.jwt_key_secret(obs.loaded.name)
    rotation = jwt_key_rotation(obs)
    if rotation is not None:
        missing.append(Create(None, make=makers[jwt]))
    version, version_events = slurm_version(obs)
    status = SlurmClusterStatus(
        observed_generation=obs.loaded.generation,
        conditions=[cond, *version[:1]],
        jwt_key_rotation=cluster.spec.jwt_key_rotation if rotation else obs.key_rotations.get(jwt),
    )
    if version:
        status.slurm = version[1]
    return Plan(
        SPEC_VALID,
        apply=tuple(cluster_objects(obs.inputs(placement=obs.placement, configs=configs))),
        delete=(rotation,) if rotation else (),
        create=tuple(missing),
        events=version_events,
        status=status,
    )


def slurm_version(obs: Observation) -> tuple[tuple[Condition, SlurmVersionStatus] | tuple[()], tuple[Note, ...]]:
    """The SlurmVersion condition and status.slurm from the upgrade decision (reconcilers/upgrade.py), and an Event
    each time an upgrade enters a stage, ends, or is refused."""
    decision = obs.upgrade
    if decision is None:
        return (), ()
    if decision.refusal is not None:
        ok, reason = False, Reason.UPGRADE_REFUSED
    elif decision.upgrading:
        ok, reason = False, Reason.UPGRADING
    else:
        ok, reason = True, Reason.CURRENT
    cond = obs.condition(SLURM_VERSION, ok=ok, reason=reason, message=decision.message)
    lines = set(decision.running.values())
    current = decision.phase == "Current"
    c = obs.loaded.name
    said = SlurmVersionStatus.model_validate(obs.said.get("slurm") or {})
    backup = backup_claim_name(c) if decision.from_ is not None and decision.upgrading else said.backup_claim
    status = SlurmVersionStatus(
        version=decision.wanted if current and lines <= {decision.wanted} else None,
        components=dict(decision.running),
        phase=decision.phase,
        upgrade_from=decision.from_ if not current else None,
        backup_claim=backup if obs.loaded.cluster.spec.accounting.enabled else None,
    )
    events: tuple[Note, ...] = ()
    if obs.said.get("slurm") is not None and said.phase != decision.phase:
        if decision.refusal is not None:
            events = (Note("Warning", UPGRADE_REFUSED_EVENT, decision.message),)
        elif current:
            events = (Note("Normal", UPGRADE_DONE_EVENT, f"Slurm upgrade done: {decision.message}"),)
        else:
            events = (Note("Normal", UPGRADE_EVENT + decision.phase, f"{decision.phase}: {decision.message}"),)
    return (cond, status), events


def jwt_key_rotation(obs: Observation) -> Delete | None:
    """The JWT key Secret to delete when spec.jwtKeyRotation asks for a key it was not made for (the Secret records
    the request it was made for: meta.JWT_KEY_ROTATION_ANNOTATION); the plan creates the new one in the same pass,
    after the delete, with a new key and the request's value. None without a request, for a key made for it (a request
    is handled once), or while there is no key of ours (a missing one is made with the request's value anyway).

    A key Secret is immutable, so a new key is a new Secret: its new uid rolls slurmctld and slurmdbd (their config
    hashes carry it), which load the key only when they start, and makes the operator mint its tokens with it
    (slurm_access caches them per key uid). slurmrestd and slurmd never read the key."""
    wanted = obs.loaded.cluster.spec.jwt_key_rotation
    name = meta.jwt_key_secret(obs.loaded.name)
    if not wanted or name not in obs.keys or obs.key_rotations.get(name) == wanted:
        return None
    before = obs.key_rotations.get(name)
    message = (
        f"replaced the JWT key for spec.jwtKeyRotation {wanted!r} "
        f"(the old key was made for {'the cluster' if before is None else repr(before)}): slurmctld and slurmdbd "
        "restart with the new key, tokens signed with the old one are refused"
    )
    return Delete(SECRET, name, message, uid=obs.keys[name], event=Note("Normal", JWT_KEY_ROTATED, message))


def key_makers(cluster: SlurmCluster, host_key_types: tuple[str, ...]) -> KeyMakers:
    """How each key Secret is made, by name: called only by the executor, when it creates the Secret (never over an
    existing one: the JWT key is replaced by deleting its Secret first), so a plan that holds them stays a pure
    decision."""

    async def munge() -> dict[str, Any]:
        return render_munge_secret(cluster, new_munge_key())

    async def jwt() -> dict[str, Any]:
        return render_jwt_key_secret(cluster, new_jwt_key())

    async def host_keys() -> dict[str, Any]:
        if "rsa" in host_key_types:  # RSA-3072 takes ~0.2 s of CPU: keep it off the event loop
            return render_ssh_host_keys_secret(cluster, await asyncio.to_thread(new_ssh_host_keys, host_key_types))
        return render_ssh_host_keys_secret(cluster, new_ssh_host_keys(host_key_types))  # well under a millisecond

    c = meta.cluster_name(cluster)
    return {meta.munge_secret(c): munge, meta.jwt_key_secret(c): jwt, meta.ssh_host_keys_secret(c): host_keys}


class ClusterReconciler(ComponentReconciler):
    def __init__(self, ctx: Context, component: Component) -> None:
        super().__init__(ctx, component)
        self._announced: dict[tuple[str, str], str] = {}  # the last phase an Event announced, per cluster
        ctx.status.derive = self.derive_phase
        ctx.status.written = self.phase_written

    def watch(self, builder: ControllerBuilder) -> None:
        """topology.conf follows the workers: their pods' readiness and Kubernetes nodes, and those nodes' labels.
        nodes.conf follows the worker StatefulSets and elastic pods: a removed group's node set is held there until its
        StatefulSet is gone, an elastic node the spec no longer has until its pod is."""
        workers = component_is(*WORKER_LABELS)
        builder.watches(*STATEFULSET, enqueue_mapped(cluster_of_pod), predicates=[workers, appeared_or_went])
        builder.watches(
            *POD, enqueue_mapped(self._with_topology(cluster_of_pod)), predicates=[workers, placement_changed]
        )
        builder.watches(*POD, enqueue_mapped(cluster_of_pod), predicates=[workers, worker_pod_went])
        builder.watches(*NODE, enqueue_mapped(self._with_topology(self.clusters_on)), predicates=[node_labels_changed])

    def _with_topology(self, mapper: Mapper) -> Mapper:
        """Only clusters with spec.topology: the others' configs do not depend on where their workers run."""

        def mapped(obj: Mapping[str, Any]) -> list[Request]:
            out = []
            for req in mapper(obj):
                live = self.cache.get(*SLURM_CLUSTER, req.name, namespace=req.namespace)
                if live is not None and Cluster.of(live).spec.topology:
                    out.append(req)
            return out

        return mapped

    def clusters_on(self, node: Mapping[str, Any]) -> list[Request]:
        """The clusters with a worker pod on a Kubernetes node (from the pod cache)."""
        return clusters_on(self.cache, node, WORKER_LABELS)

    def placement(self, loaded: Loaded) -> dict[str, dict[str, str]]:
        """Where the cluster's scheduled workers run, for topology.conf (nothing without spec.topology)."""
        if loaded.cluster.spec.topology is None:
            return {}
        pods = self.ctx.worker_pods.record(loaded.name, loaded.namespace).pods
        return topology_placement(pods.values(), lambda name: self.cache.get(*NODE, name))

    def derive_phase(self, obj: Mapping[str, Any], before: Mapping[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        """The phase of the status about to be written, from its conditions: it moves in the same write as the
        condition that moves it. Left as it is while the spec is not (yet) valid at this generation."""
        loaded = self.ctx.loader.load(obj)
        if isinstance(loaded, Invalid):
            return status
        parsed = SlurmClusterStatus.model_validate(status)
        valid = parsed.condition(SPEC_VALID)
        if valid is None or valid.status != "True" or valid.observed_generation != loaded.generation:
            return status
        phase = aggregate_phase(
            loaded.cluster.model_copy(update={"status": parsed}),
            required=self._required(loaded.cluster),
            previous=before.get("phase"),
            previous_generation=before.get("observedGeneration"),
        )
        return {**status, "phase": phase}

    def _required(self, cluster: SlurmCluster) -> list[str]:
        return [c.condition for c in self.ctx.components if c.required(cluster)]

    async def invalid(self, invalid: Invalid) -> None:
        """An invalid spec changes no child: only the status says what is wrong, naming each field."""
        message = "; ".join(invalid.problems)
        # What the status says once what is pending or just written is written: the cached object can lag a status
        # write still in the writer's window, and a second pass in that window must not repeat the Event.
        current = {**invalid.obj, "status": self.ctx.status.view(invalid.obj)}
        cond = make_condition(current, self.condition_type, ok=False, reason=Reason.INVALID_SPEC, message=message)
        previous = condition(ClusterStatus.of(current["status"]).conditions, self.condition_type)
        if previous is None or previous.message != message or previous.status != "False":
            self.warn(invalid, Reason.INVALID_SPEC.value, message)  # logged as a warning too
        generation = generation_of(invalid.obj)
        status = SlurmClusterStatus(phase="Failed", observed_generation=generation, conditions=[cond])
        await self.write_status(invalid, status)

    def rejected_status(self, loaded: Loaded, rejected: ApplyRejected) -> SlurmClusterStatus:
        """The shared configs or keys could not be applied: no component can run, as with an invalid spec."""
        cond = self.condition(loaded, ok=False, reason=Reason.APPLY_REJECTED, message=rejected.message)
        return SlurmClusterStatus(phase="Failed", observed_generation=loaded.generation, conditions=[cond])

    async def observe(self, loaded: Loaded) -> Observation:
        """The component's observation, where the workers run (topology.conf), the worker groups removed from the
        spec whose StatefulSet or elastic pods are still there (their node sets and partitions are held in nodes.conf
        meanwhile), and the elastic nodes the spec no longer has whose pods are there (held there too)."""
        obs = await super().observe(loaded)
        held = self.held_nodes(loaded)
        removed = self.removed_groups(loaded) | (set(held.values()) - {g.name for g in loaded.cluster.spec.workers})
        switching = self.becoming_elastic(loaded)
        if switching:  # Slurm keeps knowing those groups as fixed ones (no node) until their StatefulSet's pods left
            effective = as_fixed_without_nodes(loaded.cluster, switching)
            obs = dataclasses.replace(obs, loaded=Loaded.of(loaded.obj, effective, self.ctx.loader.policy))
        return dataclasses.replace(
            obs, placement=self.placement(loaded), removed_groups=frozenset(removed), held_nodes=held
        )

    def becoming_elastic(self, loaded: Loaded) -> frozenset[str]:
        statefulsets = self.worker_statefulsets(loaded)
        record = self.ctx.worker_pods.record(loaded.name, loaded.namespace)
        return becoming_elastic(loaded.name, loaded.cluster.spec.workers, statefulsets, record)

    def removed_groups(self, loaded: Loaded) -> frozenset[str]:
        prefix = meta.worker_group(loaded.name, "")
        live = {name.removeprefix(prefix) for name in self.worker_statefulsets(loaded) if name.startswith(prefix)}
        return frozenset(live - {g.name for g in loaded.cluster.spec.workers})

    def worker_statefulsets(self, loaded: Loaded) -> set[str]:
        return {
            meta_of(sts).name for label in WORKER_LABELS for sts in owned(self.cache, loaded, STATEFULSET, (label,))
        }

    def held_nodes(self, loaded: Loaded) -> dict[str, str]:
        """Elastic pods (going ones too) that no elastic group of the spec has, with their groups."""
        pods = self.ctx.worker_pods.record(loaded.name, loaded.namespace).elastic
        return dict(stray_elastic_pods(loaded.name, loaded.cluster.spec.elastic_groups, pods, going=True))

    def phase_written(self, obj: Mapping[str, Any], before: Mapping[str, Any], after: Mapping[str, Any]) -> None:
        """The status writer wrote `after` over `before`: an Event when that moved a phase derived from the
        conditions of a valid spec."""
        loaded = self.ctx.loader.load(obj)
        written = ClusterStatus.of(after)
        phase = written.phase
        valid = condition(written.conditions, SPEC_VALID)
        if isinstance(loaded, Invalid) or phase is None or valid is None or not valid.true:
            return
        if valid.observed_generation == loaded.generation:
            self._phase_event(loaded, ClusterStatus.of(before).phase, phase)

    def _phase_event(self, loaded: Loaded, previous: str | None, phase: str) -> None:
        """An Event when the phase moves (a Warning into Degraded). Writes of the same cluster can follow each other
        closely, so the last phase announced per cluster is remembered too."""
        key = (loaded.namespace, loaded.name)
        if previous is None or phase == previous or self._announced.get(key) == phase:
            self._announced.setdefault(key, previous or phase)
            return
        self._announced[key] = phase
        type_ = "Warning" if phase == "Degraded" else "Normal"
        self.event(loaded, type_, "PhaseChanged", f"phase {previous} -> {phase}")
