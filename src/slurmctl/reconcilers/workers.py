"""The `workers` component: one StatefulSet per worker group, the workers' headless Service, WorkersReady.

Nodes leave Slurm only through the drain gate (reconcilers/drain.py): a shrinking group keeps its replicas, and a
removed group its StatefulSet, until Slurm says the nodes that must go are drained and run no job (or their
drainTimeout passed). When Slurm cannot be asked, nothing goes (fail closed) and WorkersReady says why. Growing
and creating never wait for Slurm.

Every deletion of a worker pod or StatefulSet goes through that gate: scale-in (the StatefulSet loses its highest
ordinals only once they are released), a removed group (its StatefulSet is pruned once all its nodes are), a pod
re-created for a new template (deleted by the operator, one node at a time), and the pods a re-created StatefulSet
left behind (below). Which nodes must go is read from reconcilers/worker_pods.py, as the Slurm node loop reads it.

A StatefulSet's selector is immutable. Releases before 0.2 labelled worker children `component: worker`; the
component is now `workers` everywhere (controller, label, field manager). A live StatefulSet whose selector differs
from the rendered one is therefore deleted with orphan propagation (its pods keep running their jobs) and applied anew
once it is gone (its deletion event wakes this reconciler). The pods it left behind, which the new StatefulSet does
not select, then leave like a roll: one at a time, drained, deleted by the operator once Slurm says their node runs
no job (or its drainTimeout passed), and the new StatefulSet creates a pod of the same name once the name is free.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta

from slurmctl.api.v1 import (
    Condition,
    Reason,
    SlurmClusterStatus,
    WorkerGroup,
    WorkerGroupStatus,
    parse_duration,
    ready_summary,
)
from slurmctl.reconcilers.base import ComponentReconciler, now
from slurmctl.reconcilers.component import Component, Obj, component_is
from slurmctl.reconcilers.context import Context
from slurmctl.reconcilers.drain import (
    DRAIN_POLL_SECONDS,
    Leaving,
    Verdict,
    jobs_by_node,
    judge,
    replicas_after,
    statefulset_of,
)
from slurmctl.reconcilers.elastic import ElasticPlan, plan_elastic
from slurmctl.reconcilers.jail_gate import jail_gate_open
from slurmctl.reconcilers.loading import Loaded
from slurmctl.reconcilers.observed import cluster_of_pod, deleting, match_labels, ready_replicas, worker_replicas
from slurmctl.reconcilers.slurm_snapshot import GATE_MAX_AGE, NODE_LOOP_MAX_AGE
from slurmctl.reconcilers.worker_pods import WorkerPods
from slurmctl.render import meta
from slurmctl.render.kinds import POD, STATEFULSET, Kind
from slurmctl.render.workers import render_elastic_worker_pod
from slurmctl.runtime import Result
from slurmctl.runtime.handlers import enqueue_mapped
from slurmctl.runtime.logs import kv
from slurmctl.runtime.manager import ControllerBuilder
from slurmctl.slurm import SlurmError

log = logging.getLogger(__name__)

# With elastic groups, Slurm's power states are looked at this often while nothing is on its way (Slurm's power saving
# itself acts about every 10 s), and every DRAIN_POLL_SECONDS while a node powers up or down.
ELASTIC_POLL_SECONDS = 10.0


@dataclass(frozen=True)
class Elastic:
    """The elastic groups' pass: its plan, and why Slurm could not be asked (or refused a power-up)."""

    plan: ElasticPlan | None
    unreachable: str = ""


@dataclass(frozen=True)
class Gate:
    """The drain gate's answer for one pass: a verdict, or why Slurm could not be asked (then nothing goes)."""

    verdict: Verdict | None
    unreachable: str = ""

    @property
    def released(self) -> frozenset[str]:
        return self.verdict.released if self.verdict else frozenset()


class WorkersReconciler(ComponentReconciler):
    def __init__(self, ctx: Context, component: Component) -> None:
        super().__init__(ctx, component)
        self.workers = WorkerPods(self.cache, component.labels)

    async def reconcile_valid(self, loaded: Loaded) -> Result | None:
        c = loaded.name
        ids = await self.secret_ids(loaded, meta.munge_secret(c))
        if ids is None:
            return None
        (munge_key_id,) = ids
        if not jail_gate_open(self.cache, loaded) and not self.owned(loaded, STATEFULSET):
            message = "waiting for the populate-jail Job to succeed"
            await self.report(loaded, ok=False, reason=Reason.WAITING_FOR_JAIL, message=message)
            return None
        groups = sorted(loaded.cluster.spec.workers, key=lambda g: g.name)
        fixed = [g for g in groups if g.autoscale is None]
        live = worker_replicas(self.owned(loaded, STATEFULSET))
        leaving = self.workers.leaving(loaded, live)
        gate = await self._gate(loaded, leaving)
        replicas: dict[str, int] = {}
        for group in fixed:
            current = live.get(meta.worker_group(c, group.name))
            if current is None or group.size >= current:
                replicas[group.name] = group.size
            else:
                released = gate.released
                replicas[group.name] = replicas_after(group.size, current, c=c, group=group.name, released=released)
            if current is not None and replicas[group.name] != current:
                message = f"worker group {group.name}: {current} -> {replicas[group.name]} nodes"
                self.event(loaded, "Normal", "Scaled", message)
        intents = [
            obj
            for obj in self.desired(self.inputs(loaded, munge_key_id=munge_key_id, replicas=replicas))
            if await self._selector_holds(loaded, obj)
        ]
        await self.apply(loaded, intents)
        # A StatefulSet no group has (a removed group's) goes once all its nodes may go.
        held = {statefulset_of(going.node) for going in leaving if going.node not in gate.released}
        await self.prune(loaded, STATEFULSET, keep={*(meta.worker_group(c, g.name) for g in groups), *held})
        for going in leaving:
            if going.recreate and going.node in gate.released:
                await self.delete(loaded, POD, going.node, why=f"{going.why}; its node is drained and runs no job")
        elastic = await self._elastic(loaded, [g for g in groups if g.autoscale is not None], munge_key_id)
        statefulsets = (self.live(STATEFULSET, meta.worker_group(c, g.name), loaded.namespace) for g in fixed)
        refused = await self.pods_refused(loaded, *statefulsets)
        await self.write_status(loaded, self._status(loaded, fixed, gate, elastic, refused))
        if leaving or (elastic and elastic.plan and elastic.plan.in_flight):
            return Result(requeue_after=DRAIN_POLL_SECONDS)
        return Result(requeue_after=ELASTIC_POLL_SECONDS) if elastic else None

    def watch(self, builder: ControllerBuilder) -> None:
        """Worker pods (owned by the StatefulSets, not the cluster): a re-created pod turning ready lets the next
        node of a roll go."""
        builder.watches(*POD, enqueue_mapped(cluster_of_pod), predicates=[component_is(*self.decl.labels)])

    async def _gate(self, loaded: Loaded, leaving: list[Leaving]) -> Gate:
        """Judge the nodes that must go on a Slurm snapshot no older than GATE_MAX_AGE, and drain those not drained
        yet. Slurm is not asked at all when no node must go, so a Slurm outage never holds scaling out or a new
        cluster."""
        if not leaving:
            return Gate(Verdict(frozenset(), (), {}, {}))
        c, ns = loaded.name, loaded.namespace
        limits = {g.name: parse_duration(g.drain_timeout) for g in loaded.cluster.spec.workers if g.drain_timeout}
        timeouts: dict[str, timedelta | None] = {going.node: limits.get(going.group) for going in leaving}
        if not loaded.cluster.spec.rest.enabled:
            return Gate(None, unreachable="slurmrestd is disabled (spec.rest.enabled is false)")
        try:
            snapshot = (await self.ctx.slurm.snapshot(c, ns, max_age=GATE_MAX_AGE)).check()
            verdict = judge(leaving, nodes=snapshot.by_name, jobs=snapshot.jobs, now=now(), timeout=timeouts)
            by_reason: dict[str, list[str]] = defaultdict(list)
            for going in verdict.to_drain:
                by_reason[going.reason].append(going.node)
            if by_reason:
                api = self.ctx.slurm.client(c, ns)
                self.ctx.slurm.changed(c, ns)
                for reason, names in sorted(by_reason.items()):
                    await api.drain(names, reason=reason)
                    self.event(loaded, "Normal", "Draining", f"draining {', '.join(names)} in Slurm ({reason})")
        except SlurmError as exc:
            return Gate(None, unreachable=str(exc))
        for node, jobs in sorted(verdict.timed_out.items()):
            running = ", ".join(map(str, jobs)) or "unknown"
            self.warn(loaded, "DrainTimedOut", f"{node}: its drainTimeout passed; it goes with jobs {running} running")
        return Gate(verdict)

    async def _elastic(self, loaded: Loaded, groups: list[WorkerGroup], munge_key_id: str) -> Elastic | None:
        """Follow Slurm's power saving for the elastic groups (reconcilers/elastic.py) on a snapshot no older than
        the node loop's: create the pods of nodes Slurm powers up, delete those of nodes it powered down, power up
        nodes while fewer than `min` are up. Nothing at all while Slurm cannot be asked."""
        if not groups:
            return None
        c, ns = loaded.name, loaded.namespace
        try:
            snapshot = (await self.ctx.slurm.snapshot(c, ns, max_age=NODE_LOOP_MAX_AGE)).check()
        except SlurmError as exc:
            return Elastic(None, unreachable=str(exc))
        pods = {pod["metadata"]["name"]: pod for pod in self.workers.pods(c, ns)}
        plan = plan_elastic(c, groups, pods, snapshot.by_name, jobs_by_node(snapshot.jobs))
        if plan.power_up:
            self.ctx.slurm.changed(c, ns)
            try:
                await self.ctx.slurm.client(c, ns).power_up(plan.power_up)
            except SlurmError as exc:
                return Elastic(plan, unreachable=str(exc))
            self.event(loaded, "Normal", "PoweringUp", f"asked Slurm to power up {', '.join(plan.power_up)} (min)")
        for group, index in plan.create:
            pod = render_elastic_worker_pod(
                loaded.cluster,
                group,
                index,
                configs=loaded.configs,
                munge_key_id=munge_key_id,
                cluster_domain=self.ctx.cluster_domain,
                privileged_jobs=self.ctx.loader.policy.allow_privileged_jobs,
            )
            if await self.create(loaded, pod):
                name = pod["metadata"]["name"]
                self.event(loaded, "Normal", "Created", f"created pod {name}: Slurm powers its node up")
        for name, why in plan.delete:
            await self.delete(loaded, POD, name, why=why)
        return Elastic(plan)

    def _status(
        self, loaded: Loaded, groups: list[WorkerGroup], gate: Gate, elastic: Elastic | None, refused: Condition | None
    ) -> SlurmClusterStatus:
        c, ns = loaded.name, loaded.namespace
        rows = [
            WorkerGroupStatus(
                name=group.name,
                desired=group.size,
                ready=min(group.size, ready_replicas(self.live(STATEFULSET, meta.worker_group(c, group.name), ns))),
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
        cond: Condition
        if problems:
            message = "; ".join(problems)
            if (previous := loaded.condition(self.condition_type)) is None or previous.message != message:
                for problem in problems:
                    self.warn(loaded, Reason.UNSCHEDULABLE.value, problem)
            cond = self.condition(loaded, ok=False, reason=Reason.UNSCHEDULABLE, message=message)
        elif gate.verdict is None:
            message = f"nodes must go but Slurm cannot be asked whether they run jobs, so none goes: {gate.unreachable}"
            if (previous := loaded.condition(self.condition_type)) is None or previous.message != message:
                log.warning("drain gate closed %s", kv(namespace=ns, name=c, error=gate.unreachable))
            cond = self.condition(loaded, ok=False, reason=Reason.SLURM_UNREACHABLE, message=message)
        elif gate.verdict.waiting:
            message = "draining, waiting for jobs to finish: " + gate.verdict.describe_waiting()
            cond = self.condition(loaded, ok=False, reason=Reason.DRAINING, message=message)
        elif waiting and refused is not None:
            cond = refused
        elif waiting:
            message = "worker groups not ready: " + ", ".join(waiting)
            cond = self.condition(loaded, ok=False, reason=Reason.NOT_READY, message=message)
        elif elastic and elastic.unreachable:
            message = f"elastic worker groups wait for Slurm's power states: {elastic.unreachable}"
            cond = self.condition(loaded, ok=False, reason=Reason.NOT_READY, message=message)
        else:
            message = f"all {total} worker nodes are ready"
            cond = self.condition(loaded, ok=True, reason=Reason.READY, message=message)
        return SlurmClusterStatus(conditions=[cond], workers=rows, workers_ready=ready_summary(total_ready, total))

    async def _selector_holds(self, loaded: Loaded, intent: Obj) -> bool:
        """False for a StatefulSet whose live selector differs from the intent's: it is being re-created (deleted
        here, once, leaving its pods and their jobs running), and applying over it would be rejected (the selector
        is immutable)."""
        if Kind(intent["apiVersion"], intent["kind"]) != STATEFULSET:
            return True
        name = intent["metadata"]["name"]
        live = self.live(STATEFULSET, name, loaded.namespace)
        if live is None or match_labels(live) == intent["spec"]["selector"]["matchLabels"]:
            return True
        if not deleting(live):
            why = (
                "its selector changed (renamed component label); re-created, its pods leave one drained node at a time"
            )
            await self.delete(loaded, STATEFULSET, name, why=why, propagation="Orphan")
        return False
