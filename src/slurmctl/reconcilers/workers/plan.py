"""What the workers component does in one pass, decided purely from an `Observation`: the StatefulSets (their replicas
after the drain gate), the drains, the deletions (a removed group's StatefulSet, a pod re-created for a new template,
an elastic node Slurm powered down), the elastic pods to create, the Events and WorkersReady with the group rows.

Nodes leave Slurm only through the drain gate (reconcilers/drain.py): a shrinking group keeps its replicas, and a
removed group its StatefulSet, until Slurm says the nodes that must go are drained and run no job (or their
drainTimeout passed). When Slurm cannot be asked, nothing goes (fail closed) and WorkersReady says why. Growing and
creating never wait for Slurm.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta

from slurmctl.api.v1 import (
    WORKERS_READY,
    Condition,
    Reason,
    SlurmClusterStatus,
    WorkerGroup,
    WorkerGroupStatus,
    parse_duration,
    ready_summary,
)
from slurmctl.reconcilers.drain import (
    DRAIN_POLL_SECONDS,
    Leaving,
    Verdict,
    drained_by_us,
    jobs_by_node,
    judge,
    replicas_after,
    statefulset_of,
)
from slurmctl.reconcilers.elastic import ElasticMemory, ElasticPlan, plan_elastic
from slurmctl.reconcilers.group_switch import becoming_elastic, becoming_fixed, describe, without_groups
from slurmctl.reconcilers.maintenance_gate import rolls_allowed
from slurmctl.reconcilers.observation import Observation
from slurmctl.reconcilers.observed import deleting, match_labels, ready_replicas, uid, worker_replicas
from slurmctl.reconcilers.plan import Create, Delete, Note, Obj, Plan, SlurmAction
from slurmctl.reconcilers.worker_pods import roll_reasons
from slurmctl.render import meta
from slurmctl.render.kinds import POD, STATEFULSET, Kind
from slurmctl.render.manifests import Inputs, workers_objects
from slurmctl.render.workers import elastic_template_hash, render_elastic_worker_pod
from slurmctl.slurm import Node

# What WorkersReady says when Slurm refuses what the gate or the elastic groups ask of it.
GATE_CLOSED = "nodes must go but Slurm cannot be asked whether they run jobs, so none goes"
ELASTIC_WAIT = "elastic worker groups wait for Slurm's power states"
SELECTOR_CHANGED = (
    "its selector changed (renamed component label); re-created, its pods leave one drained node at a time"
)


@dataclass(frozen=True)
class Gate:
    """The drain gate's answer for one pass: a verdict, or why Slurm could not be asked (then nothing goes)."""

    verdict: Verdict | None
    unreachable: str = ""

    @property
    def released(self) -> frozenset[str]:
        return self.verdict.released if self.verdict else frozenset()


@dataclass(frozen=True)
class Elastic:
    """The elastic groups' pass: its plan, and why Slurm could not be asked."""

    plan: ElasticPlan | None
    unreachable: str = ""


def plan(obs: Observation) -> Plan:
    loaded = obs.loaded
    c = loaded.name
    munge = meta.munge_secret(c)
    if (waiting := obs.wait_for_keys(WORKERS_READY, munge)) is not None:
        return waiting
    if not obs.jail_open and not obs.owned(STATEFULSET):
        message = "waiting for the populate-jail Job to succeed"
        return obs.report(WORKERS_READY, ok=False, reason=Reason.WAITING_FOR_JAIL, message=message)
    groups = sorted(loaded.cluster.spec.workers, key=lambda g: g.name)
    live = worker_replicas(obs.owned(STATEFULSET).values())
    snapshot = obs.slurm if obs.slurm is not None and obs.slurm.error is None else None
    switching = {
        "elastic": becoming_elastic(c, groups, live, obs.worker_pods),
        "fixed": becoming_fixed(c, groups, obs.worker_pods, snapshot.by_name if snapshot else None),
    }
    fixed = [g for g in groups if g.autoscale is None and g.name not in switching["fixed"]]
    gate, slurm, events = _gate(obs)
    replicas: dict[str, int] = {}
    for group in fixed:
        current = live.get(meta.worker_group(c, group.name))
        if current is None or group.size >= current:
            replicas[group.name] = group.size
        else:
            replicas[group.name] = replicas_after(group.size, current, c=c, group=group.name, released=gate.released)
        if current is not None and replicas[group.name] != current:
            message = f"worker group {group.name}: {current} -> {replicas[group.name]} nodes"
            events.append(Note("Normal", "Scaled", message))
    inputs = Inputs(
        cluster=without_groups(loaded.cluster, switching["fixed"]),
        configs=loaded.configs,
        munge_key_id=obs.keys[munge],
        replicas=replicas,
        cluster_domain=obs.settings.cluster_domain,
        network=obs.settings.network,
        privileged_jobs=obs.settings.privileged_jobs,
    )
    apply, deletes = _selectors_hold(obs, workers_objects(inputs))
    # A StatefulSet no fixed group has (a removed group's, or one that became elastic) goes once all its nodes may go.
    held = {statefulset_of(going.node) for going in obs.leaving if going.node not in gate.released}
    keep = {*(meta.worker_group(c, g.name) for g in groups if g.autoscale is None), *held}
    deletes.extend(obs.prune(STATEFULSET, keep))
    for going in obs.leaving:
        if going.recreate and going.node in gate.released:
            why = f"{going.why}; its node is drained and runs no job"
            deletes.append(Delete(POD, going.node, why, uid=uid(obs.pods.get(going.node))))
    elastic = _elastic(obs, [g for g in groups if g.autoscale is not None and g.name not in switching["elastic"]])
    creates: list[Create] = []
    if elastic and elastic.plan:
        if elastic.plan.power_up:
            nodes = elastic.plan.power_up
            announce = f"asked Slurm to power up {', '.join(nodes)} (min)"
            slurm.append(SlurmAction("power_up", nodes, announce, ELASTIC_WAIT, Reason.NOT_READY))
        for retry in elastic.plan.resume:
            announce = (
                f"resumed {retry.node} in Slurm, retry {retry.attempt} after its resumeTimeout: Slurm powers it up "
                "again when a job needs it"
            )
            slurm.append(SlurmAction("resume", (retry.node,), announce, ELASTIC_WAIT, Reason.NOT_READY))
        if elastic.plan.power_down and rolls_allowed(obs.loaded.cluster.spec, obs.now):
            nodes = elastic.plan.power_down
            announce = (
                f"asked Slurm to power down {', '.join(nodes)} once idle (POWER_DOWN_ASAP): pods of an older "
                "template; the next power-up makes them from the group's current one"
            )
            slurm.append(SlurmAction("power_down", nodes, announce, ELASTIC_WAIT, Reason.NOT_READY))
        for group, index in elastic.plan.create:
            pod = render_elastic_worker_pod(
                loaded.cluster,
                group,
                index,
                configs=loaded.configs,
                munge_key_id=obs.keys[munge],
                cluster_domain=obs.settings.cluster_domain,
                privileged_jobs=obs.settings.privileged_jobs,
            )
            creates.append(Create(pod, f"created pod {pod['metadata']['name']}: Slurm powers its node up"))
        for name, why in elastic.plan.delete:
            deletes.append(Delete(POD, name, why, uid=uid(obs.pods.get(name))))
    refused = _refused(obs, fixed, events)
    status, warnings = _status(obs, fixed, gate, elastic, refused, events, describe(switching))
    # Slurm's snapshot wakes this component when it says something new (SlurmAccess.listen; the node loop polls it,
    # every ELASTIC_POLL_SECONDS with elastic groups). Looked at again sooner only while something is on its way: a
    # node that must go (the gate decides on a snapshot no older than GATE_MAX_AGE, and a drainTimeout ends without
    # Slurm saying anything), or a node powering up or down.
    # And when the backoff of a node Slurm set DOWN after its resumeTimeout is over (Slurm says nothing new then).
    requeue = None
    if obs.leaving or any(switching.values()) or (elastic and elastic.plan and elastic.plan.in_flight):
        requeue = DRAIN_POLL_SECONDS
    if elastic and elastic.plan and elastic.plan.retry_in is not None:
        requeue = min(filter(None, (requeue, max(elastic.plan.retry_in, 1.0))))
    return Plan(
        WORKERS_READY,
        apply=tuple(apply),
        slurm=tuple(slurm),
        delete=tuple(deletes),
        create=tuple(creates),
        events=tuple(events),
        warnings=warnings,
        status=status,
        requeue_after=requeue,
    )


def _gate(obs: Observation) -> tuple[Gate, list[SlurmAction], list[Note]]:
    """Judge the nodes that must go on the observation's Slurm snapshot, and drain those not drained yet. Slurm is not
    asked at all when no node must go, so a Slurm outage never holds scaling out or a new cluster."""
    if not obs.leaving:
        return Gate(Verdict(frozenset(), (), {}, {})), [], []
    limits = {g.name: parse_duration(g.drain_timeout) for g in obs.loaded.cluster.spec.workers if g.drain_timeout}
    timeouts: dict[str, timedelta | None] = {going.node: limits.get(going.group) for going in obs.leaving}
    snapshot = obs.slurm
    if snapshot is None or snapshot.error is not None:
        return Gate(None, unreachable=str(snapshot.error) if snapshot else "Slurm was not asked"), [], []
    leaving = _within_roll_limit(obs, snapshot.by_name)
    verdict = judge(leaving, nodes=snapshot.by_name, jobs=snapshot.jobs, now=obs.now, timeout=timeouts)
    by_reason: dict[str, list[str]] = defaultdict(list)
    for going in verdict.to_drain:
        by_reason[going.reason].append(going.node)
    drains = [
        SlurmAction(
            "drain",
            tuple(names),
            f"draining {', '.join(names)} in Slurm ({reason})",
            GATE_CLOSED,
            Reason.SLURM_UNREACHABLE,
            reason=reason,
        )
        for reason, names in sorted(by_reason.items())
    ]
    notes = [
        Note("Warning", "DrainTimedOut", f"{node}: its drainTimeout passed; it goes with jobs {_ids(jobs)} running")
        for node, jobs in sorted(verdict.timed_out.items())
    ]
    return Gate(verdict), drains, notes


def _within_roll_limit(obs: Observation, nodes: Mapping[str, Node]) -> tuple[Leaving, ...]:
    """The nodes that must go, less the roll's next ones beyond its limit (spec.maintenance.maxUnavailable) of the
    cluster's workers out of service in Slurm: a worker whose slurmd has not registered (as this snapshot says; a
    node the roll re-created is out until it has), or one that registered under a node its preStop could not delete
    and still has the roll's drain (until the Slurm node loop resumes it). A roll's node drained already is out
    already and judged as usual; each other one takes a place."""
    reasons = roll_reasons(obs.loaded.name, (g.name for g in obs.loaded.cluster.spec.workers))
    rolled = [g for g in obs.leaving if g.reason in reasons]
    if not rolled:
        return obs.leaving
    going = {g.node for g in obs.leaving}

    def out_of_service(name: str) -> bool:
        node = nodes.get(name)
        return node is None or (drained_by_us(node) and node.reason in reasons)

    drained = [g for g in rolled if (node := nodes.get(g.node)) is not None and node.drain]
    room = obs.loaded.cluster.spec.roll_limit() - len(drained)
    room -= sum(1 for name in obs.pods if name not in going and out_of_service(name))
    fresh = [g.node for g in rolled if g not in drained][: max(0, room)]
    keep = {*(g.node for g in drained), *fresh}
    return tuple(g for g in obs.leaving if g not in rolled or g.node in keep)


def _ids(jobs: Sequence[int]) -> str:
    return ", ".join(map(str, jobs)) or "unknown"


def _elastic(obs: Observation, groups: list[WorkerGroup]) -> Elastic | None:
    """Follow Slurm's power saving for the elastic groups (reconcilers/elastic.py): create the pods of nodes Slurm
    powers up, delete those of nodes it powered down, power up nodes while fewer than `min` are up, resume nodes
    Slurm gave up on once their backoff is over, power down idle nodes whose pod is of an older template. Nothing at
    all while Slurm cannot be asked."""
    if not groups:
        return None
    snapshot = obs.slurm
    if snapshot is None or snapshot.error is not None:
        return Elastic(None, unreachable=str(snapshot.error) if snapshot else "Slurm was not asked")
    loaded = obs.loaded
    templates = {
        group.name: elastic_template_hash(
            loaded.cluster,
            group,
            configs=loaded.configs,
            munge_key_id=obs.keys[meta.munge_secret(loaded.name)],
            cluster_domain=obs.settings.cluster_domain,
            privileged_jobs=obs.settings.privileged_jobs,
        )
        for group in groups
    }
    found = plan_elastic(
        loaded.name,
        groups,
        dict(obs.pods),
        snapshot.by_name,
        jobs_by_node(snapshot.jobs),
        now=obs.now,
        templates=templates,
        memory=ElasticMemory.of(obs.said),
    )
    return Elastic(found)


def _selectors_hold(obs: Observation, intents: Sequence[Obj]) -> tuple[list[Obj], list[Delete]]:
    """The intents to apply, leaving out a StatefulSet whose live selector differs from the intent's: it is being
    re-created (deleted here, once, with orphan propagation: its pods and their jobs keep running), and applying over
    it would be rejected (the selector is immutable)."""
    apply: list[Obj] = []
    deletes: list[Delete] = []
    for intent in intents:
        live = obs.owned(STATEFULSET).get(intent["metadata"]["name"])
        if (
            Kind(intent["apiVersion"], intent["kind"]) != STATEFULSET
            or live is None
            or match_labels(live) == intent["spec"]["selector"]["matchLabels"]
        ):
            apply.append(intent)
        elif not deleting(live):
            name = intent["metadata"]["name"]
            deletes.append(Delete(STATEFULSET, name, SELECTOR_CHANGED, uid=uid(live), propagation="Orphan"))
    return apply, deletes


def _refused(obs: Observation, fixed: Sequence[WorkerGroup], events: list[Note]) -> Condition | None:
    """PodRefused when the API server refuses the pods of a fixed group's StatefulSet at admission, with one Warning
    Event when that is news."""
    for group in fixed:
        message = obs.refusals.get(meta.worker_group(obs.loaded.name, group.name))
        if message is None:
            continue
        events.extend(obs.warn_once(WORKERS_READY, Reason.POD_REFUSED, message))
        return obs.condition(WORKERS_READY, ok=False, reason=Reason.POD_REFUSED, message=message)
    return None


def _status(  # noqa: PLR0917 - one pass's findings, each its own
    obs: Observation,
    groups: Sequence[WorkerGroup],
    gate: Gate,
    elastic: Elastic | None,
    refused: Condition | None,
    events: list[Note],
    switching: Sequence[str] = (),
) -> tuple[SlurmClusterStatus, tuple[tuple[str, dict[str, str]], ...]]:
    loaded, c = obs.loaded, obs.loaded.name
    rows = [
        WorkerGroupStatus(
            name=group.name,
            desired=group.size,
            ready=min(group.size, ready_replicas(obs.owned(STATEFULSET).get(meta.worker_group(c, group.name)))),
        )
        for group in groups
    ]
    total_ready, total = sum(r.ready for r in rows), sum(r.desired for r in rows)
    # An elastic group's nodes coming up for a job are its normal course, not the cluster's unreadiness.
    waiting = [f"{r.name} {r.ready}/{r.desired}" for r in rows if r.ready < r.desired]
    if elastic and elastic.plan:
        rows.extend(elastic.plan.rows)
    rows.sort(key=lambda r: r.name)
    problems = elastic.plan.problems if elastic and elastic.plan else ()
    warnings: tuple[tuple[str, dict[str, str]], ...] = ()
    previous = loaded.condition(WORKERS_READY)
    cond: Condition
    if problems:
        message = "; ".join(problems)
        if previous is None or previous.message != message:
            events.extend(Note("Warning", Reason.UNSCHEDULABLE.value, problem) for problem in problems)
        cond = obs.condition(WORKERS_READY, ok=False, reason=Reason.UNSCHEDULABLE, message=message)
    elif gate.verdict is None:
        message = f"{GATE_CLOSED}: {gate.unreachable}"
        if previous is None or previous.message != message:
            warnings = (("drain gate closed", {"error": gate.unreachable}),)
        cond = obs.condition(WORKERS_READY, ok=False, reason=Reason.SLURM_UNREACHABLE, message=message)
    elif gate.verdict.waiting:
        message = "draining, waiting for jobs to finish: " + gate.verdict.describe_waiting()
        cond = obs.condition(WORKERS_READY, ok=False, reason=Reason.DRAINING, message=message)
    elif switching:
        cond = obs.condition(WORKERS_READY, ok=False, reason=Reason.NOT_READY, message="; ".join(switching))
    elif waiting and refused is not None:
        cond = refused
    elif waiting:
        message = "worker groups not ready: " + ", ".join(waiting)
        cond = obs.condition(WORKERS_READY, ok=False, reason=Reason.NOT_READY, message=message)
    elif elastic and elastic.unreachable:
        message = f"{ELASTIC_WAIT}: {elastic.unreachable}"
        cond = obs.condition(WORKERS_READY, ok=False, reason=Reason.NOT_READY, message=message)
    else:
        message = f"all {total} worker nodes are ready"
        cond = obs.condition(WORKERS_READY, ok=True, reason=Reason.READY, message=message)
    status = SlurmClusterStatus(conditions=[cond], workers=rows, workers_ready=ready_summary(total_ready, total))
    return status, warnings
