"""The `workers` component: one StatefulSet per worker group, the workers' headless Service, the elastic groups' pods,
WorkersReady. Each pass observes the cluster (`observe`), decides purely (workers/plan.py) and has the generic
executor carry the plan out (reconcilers/executor.py).

Every deletion of a worker pod or StatefulSet goes through the drain gate (workers/plan.py): scale-in (the StatefulSet
loses its highest ordinals only once they are released), a removed group (its StatefulSet is pruned once all its nodes
are), a pod re-created for a new template (deleted by the operator, spec.maintenance.maxUnavailable nodes at a
time), and the pods a re-created StatefulSet left behind (below). Which nodes must go is read from
reconcilers/worker_pods.py, as the Slurm node loop reads it.

A StatefulSet's selector is immutable. Releases before 0.2 labelled worker children `component: worker`; the
component is now `workers` everywhere (controller, label, field manager). A live StatefulSet whose selector differs
from the rendered one is therefore deleted with orphan propagation (its pods keep running their jobs) and applied anew
once it is gone (its deletion event wakes this reconciler). The pods it left behind, which the new StatefulSet does
not select, then leave like a roll: one at a time, drained, deleted by the operator once Slurm says their node runs
no job (or its drainTimeout passed), and the new StatefulSet creates a pod of the same name once the name is free.

The elastic groups' resume signal (render/power.py): Slurm's ResumeProgram writes the cluster's `<c>-power` ConfigMap
when it powers nodes up; that change wakes this reconciler (the ConfigMap is the cluster component's child), and the
first pass that sees a new write reads Slurm afresh instead of taking a snapshot up to NODE_LOOP_MAX_AGE old, which
could predate the power-up. What to create is still decided from that snapshot alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from slurmctl.reconcilers.base import ComponentReconciler
from slurmctl.reconcilers.component import Component, Obj, component_is
from slurmctl.reconcilers.context import Context
from slurmctl.reconcilers.drain import Leaving
from slurmctl.reconcilers.loading import Loaded
from slurmctl.reconcilers.maintenance_gate import rolls_allowed
from slurmctl.reconcilers.observation import Observation
from slurmctl.reconcilers.observed import cluster_of_pod, worker_replicas
from slurmctl.reconcilers.slurm_marks import only_marks_changed
from slurmctl.reconcilers.slurm_snapshot import GATE_MAX_AGE, NODE_LOOP_MAX_AGE, SlurmSnapshot
from slurmctl.reconcilers.views import Secret
from slurmctl.reconcilers.worker_pods import BATCH_SECONDS
from slurmctl.render import meta
from slurmctl.render.kinds import CONFIGMAP, POD, SLURM_CLUSTER, STATEFULSET
from slurmctl.render.power import AT_KEY, power_name
from slurmctl.runtime import Request, Result
from slurmctl.runtime.handlers import enqueue_mapped, negate
from slurmctl.runtime.manager import ControllerBuilder
from slurmctl.slurm import SlurmUnavailable

# Why the drain gate cannot ask a cluster without slurmrestd.
REST_DISABLED = "slurmrestd is disabled (spec.rest.enabled is false)"


class WorkersReconciler(ComponentReconciler):
    def __init__(self, ctx: Context, component: Component) -> None:
        super().__init__(ctx, component)
        self.workers = ctx.worker_pods
        self._signals: dict[tuple[str, str], str] = {}  # the resume signal each cluster's last fresh read followed
        self._following: set[tuple[str, str]] = set()  # the clusters whose last pass decided on Slurm's snapshot

    async def __call__(self, req: Request) -> Result | None:
        if self.cache.get(*SLURM_CLUSTER, req.name, namespace=req.namespace) is None:
            self._signals.pop((req.namespace, req.name), None)
            self._following.discard((req.namespace, req.name))
        return await super().__call__(req)

    def follows_slurm(self, c: str, namespace: str) -> bool:
        """Only while its last pass read Slurm (a node must go, elastic groups, a group switching): a pass that read
        nothing of it would decide the same. At 10,240 workers each batch of nodes registering woke a pass over every
        pod (about a second) that asked Slurm nothing, back to back while the node loop wrote the pods' conditions."""
        return (namespace, c) in self._following

    def resume_signalled(self, loaded: Loaded) -> bool:
        """Whether Slurm's ResumeProgram wrote the cluster's power ConfigMap since the last pass that followed a
        write (its `at`, which each write changes): this pass must then read Slurm afresh. The first pass after the
        operator starts follows the write it finds (one fresh read)."""
        live = self.cache.get(*CONFIGMAP, power_name(loaded.name), namespace=loaded.namespace)
        at = Secret.of(live).data.get(AT_KEY)  # a ConfigMap: the same `data`
        key = (loaded.namespace, loaded.name)
        if not at or self._signals.get(key) == at:
            return False
        self._signals[key] = at
        return True

    def watch(self, builder: ControllerBuilder) -> None:
        """Worker pods (owned by the StatefulSets, not the cluster): a re-created pod turning ready lets the next
        node of a roll go. Not what the Slurm node loop writes on them (its condition and label say what Slurm says,
        which the pass reads from Slurm). Their changes wake one pass a batch (BATCH_SECONDS)."""
        builder.watches(
            *POD,
            enqueue_mapped(cluster_of_pod),
            predicates=[component_is(*self.decl.labels), negate(only_marks_changed)],
            batch=BATCH_SECONDS,
        )

    def read_pods(self, loaded: Loaded) -> Mapping[str, Obj]:
        """The cluster's worker pods, read once while none of them changes (reconcilers/pod_record.py)."""
        return self.workers.record(loaded.name, loaded.namespace).pods

    async def observe(self, loaded: Loaded) -> Observation:
        """What the plan reads, read once: the component's observation, plus the nodes that must go and Slurm's
        snapshot. Slurm is asked only when a node must go (the drain gate) or elastic groups follow its
        power states: a new cluster waiting for its keys or its jail asks nothing."""
        obs = await super().observe(loaded)
        statefulsets = obs.owned(STATEFULSET)
        if meta.munge_secret(loaded.name) not in obs.keys or not (obs.jail_open or statefulsets):
            return obs
        rolls = rolls_allowed(loaded.cluster.spec, obs.now)
        record = self.workers.record(loaded.name, loaded.namespace)
        leaving = tuple(self.workers.leaving(loaded, worker_replicas(statefulsets.values()), record, rolls=rolls))
        # A fixed group the status knows (not a new one) without its StatefulSet may have been elastic: it is made
        # only once Slurm no longer lists its nodes as CLOUD nodes (reconcilers/group_switch.py).
        known = {row.get("name") for row in obs.said.get("workers") or ()}
        unmade = any(
            g.autoscale is None and g.name in known and meta.worker_group(loaded.name, g.name) not in statefulsets
            for g in loaded.cluster.spec.workers
        )
        slurm = await self._slurm(loaded, leaving, unmade=unmade)
        return dataclasses.replace(obs, pod_record=record, leaving=leaving, slurm=slurm)

    async def _slurm(self, loaded: Loaded, leaving: tuple[Leaving, ...], *, unmade: bool) -> SlurmSnapshot | None:
        """Slurm's snapshot, no older than the drain gate allows while a node must go (else than the node loop's, for
        the elastic groups and a fixed group whose StatefulSet is not made yet); None when nothing needs it."""
        elastic = any(g.autoscale is not None for g in loaded.cluster.spec.workers)
        key = (loaded.namespace, loaded.name)
        if not leaving and not elastic and not unmade:
            self._following.discard(key)
            return None
        self._following.add(key)
        if leaving and not loaded.cluster.spec.rest.enabled:
            return SlurmSnapshot(self.manager.clock.monotonic(), error=SlurmUnavailable(REST_DISABLED))
        max_age = GATE_MAX_AGE if leaving else NODE_LOOP_MAX_AGE
        if elastic and self.resume_signalled(loaded):
            self.ctx.slurm.changed(loaded.name, loaded.namespace)  # Slurm powers nodes up: read it again
        return await self.ctx.slurm.snapshot(loaded.name, loaded.namespace, max_age=max_age)
