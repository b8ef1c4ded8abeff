"""The component registry: one declaration per component, and the loops that use it.

`register` builds one controller per entry (its children watched by its component label, its dependencies' children
waking it), `planned_objects` is what `slurmctl render` prints (the objects of the same plans the reconcilers carry
out), and the cluster reconciler derives the phase from the entries' `required`. Adding a component means: spec,
renderer, plan, reconciler, image, tests, and one entry here.

Component controllers react to spec changes (generation), to resyncs, and to their own and their dependencies'
children; status writes do not wake them. The phase is derived from every component's condition by the status
writer, in the write that changes them (see reconcilers/status.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from slurmctl.api.v1 import (
    ACCOUNTING_READY,
    BENCHMARK_SCHEDULED,
    CONTROLLER_READY,
    DIRECTORY_REACHABLE,
    IDENTITY_SYNCED,
    JAIL_POPULATED,
    LOGIN_READY,
    MAINTENANCE_PENDING,
    REST_READY,
    SPEC_VALID,
    WORKERS_READY,
    Policy,
    SlurmCluster,
)
from slurmctl.reconcilers import (
    accounting,
    benchmark,
    cluster,
    controller,
    directory,
    identity,
    login,
    maintenance,
    populate_jail,
    rest,
    upgrade,
    workers,
)
from slurmctl.reconcilers.accounting import AccountingReconciler
from slurmctl.reconcilers.base import ComponentReconciler
from slurmctl.reconcilers.benchmark import BenchmarkReconciler
from slurmctl.reconcilers.cluster import ClusterReconciler
from slurmctl.reconcilers.component import Component, component_is, never
from slurmctl.reconcilers.context import Context
from slurmctl.reconcilers.directory import DirectoryReconciler
from slurmctl.reconcilers.identity import IdentityReconciler
from slurmctl.reconcilers.loading import Loader
from slurmctl.reconcilers.lost_nodes import DEFAULT_NODE_LOST_AFTER
from slurmctl.reconcilers.maintenance import MaintenanceReconciler
from slurmctl.reconcilers.maintenance_gate import gated
from slurmctl.reconcilers.observation import Observation
from slurmctl.reconcilers.observed import cluster_of_pod, trimmed_node
from slurmctl.reconcilers.populate_jail import PopulateJailReconciler
from slurmctl.reconcilers.preemption import DEFAULT_PREEMPTION_TAINTS
from slurmctl.reconcilers.slurm_access import REST_COMPONENT
from slurmctl.reconcilers.slurm_nodes import NAME as SLURM_NODES
from slurmctl.reconcilers.slurm_nodes import (
    SlurmNodesReconciler,
    cordon_changed,
    ready_changed,
    taints_changed,
    worker_pod_changed,
)
from slurmctl.reconcilers.worker_pods import BATCH_SECONDS
from slurmctl.reconcilers.workers import WorkersReconciler
from slurmctl.render import manifests, meta
from slurmctl.render.kinds import (
    CONFIGMAP,
    CRONJOB,
    DEPLOYMENT,
    JOB,
    NETWORK_POLICY,
    NODE,
    PDB,
    POD,
    SECRET,
    SERVICE,
    SLURM_CLUSTER,
    STATEFULSET,
    Kind,
)
from slurmctl.render.network_policy import DEFAULT_NETWORK, NetworkSettings
from slurmctl.render.sshd import DEFAULT_HOST_KEY_TYPES, HOST_KEY_TYPES
from slurmctl.render.workers import FORMER_COMPONENTS
from slurmctl.runtime import Event, Manager, Request, all_of, any_of, generation_changed
from slurmctl.runtime.handlers import enqueue_mapped
from slurmctl.runtime.workqueue import WorkQueue
from slurmctl.slurm import DEFAULT_MAX_ANSWER_BYTES


def _accounting_enabled(cluster: SlurmCluster) -> bool:
    return cluster.spec.accounting.enabled


def _rest_enabled(cluster: SlurmCluster) -> bool:
    return cluster.spec.rest.enabled


# The component whose controller is registered first. An informer calls its listeners in the order they were added,
# so after a spec edit this component's pass starts before the others': a size edit waits for it (the StatefulSets),
# and at 10,240 workers the cluster component's pass, which used to start first and reads every worker pod, held it
# back by ~110 ms (docs/performance.md).
FIRST_AFTER_AN_EDIT: Final = "workers"

# One row per component, in the order `slurmctl render` prints their objects. Not required for Available: the cluster
# (SpecValid has its own phase, Failed) and the benchmark (a failing benchmark drains nodes, the cluster stays up).
# fmt: off
COMPONENTS: Final[tuple[Component, ...]] = (
    Component("cluster", SPEC_VALID, reconciler=ClusterReconciler, plan=cluster.plan, render=manifests.cluster_objects,
              owns=(CONFIGMAP, SECRET, NETWORK_POLICY), required=never),
    Component("populate-jail", JAIL_POPULATED, reconciler=PopulateJailReconciler, plan=populate_jail.plan,
              render=manifests.populate_jail_objects, owns=(JOB,), image="populate-jail"),
    Component("identity", IDENTITY_SYNCED, reconciler=IdentityReconciler, plan=identity.plan,
              render=manifests.identity_objects, owns=(JOB,), image="populate-jail", required=never,
              after=("populate-jail",)),
    Component("controller", CONTROLLER_READY, reconciler=ComponentReconciler, plan=gated(controller.plan),
              render=manifests.controller_objects, owns=(STATEFULSET, SERVICE), image="controller", after=("cluster",)),
    Component("workers", WORKERS_READY, reconciler=WorkersReconciler, plan=gated(workers.plan),
              render=manifests.workers_objects, owns=(STATEFULSET, SERVICE, PDB), image="worker",
              after=("cluster", "populate-jail"),
              former_names=FORMER_COMPONENTS, reads_slurm=True),
    Component("login", LOGIN_READY, reconciler=ComponentReconciler, plan=gated(login.plan),
              render=manifests.login_objects, owns=(STATEFULSET, SERVICE, CONFIGMAP), image="login",
              after=("cluster", "populate-jail")),
    Component("accounting", ACCOUNTING_READY, reconciler=AccountingReconciler, plan=gated(accounting.plan),
              render=manifests.accounting_objects, plans_offline=False,
              owns=(DEPLOYMENT, SERVICE, SECRET, JOB), image="accounting", required=_accounting_enabled,
              after=("cluster",)),
    Component("rest", REST_READY, reconciler=ComponentReconciler, plan=gated(rest.plan), render=manifests.rest_objects,
              owns=(DEPLOYMENT, SERVICE), image="rest", required=_rest_enabled),
    Component("maintenance", MAINTENANCE_PENDING, reconciler=MaintenanceReconciler, plan=maintenance.plan,
              render=maintenance.maintenance_objects, plans_offline=False, owns=(JOB,), required=never,
              after=("controller", "workers", "login", "accounting", "rest")),
    Component("benchmark", BENCHMARK_SCHEDULED, reconciler=BenchmarkReconciler, plan=benchmark.plan,
              render=manifests.benchmark_objects, owns=(CRONJOB,), image="nccl-benchmark", required=never,
              after=("cluster",)),
    Component("directory", DIRECTORY_REACHABLE, reconciler=DirectoryReconciler, plan=directory.plan,
              render=manifests.directory_objects, plans_offline=False, required=never),
)
# fmt: on


def desired_objects(inputs: manifests.Inputs, components: Iterable[Component] | None = None) -> list[dict[str, Any]]:
    """Every object the components' renderers (default: the registry's) give for these inputs, in registry order: what
    their plans apply for a new cluster once its keys exist (test_offline checks that `slurmctl render` prints exactly
    these), and what the benchmarks' plain server-side-apply loop applies as its baseline."""
    return [obj for component in (COMPONENTS if components is None else components) for obj in component.render(inputs)]


def planned_objects(obs: Observation, components: Iterable[Component] | None = None) -> list[dict[str, Any]]:
    """The objects the components (default: the registry), in their order, write for this observation: what
    `slurmctl render` prints for an offline one (reconcilers/offline.py). Each component's are those of its plan
    (`Plan.objects`); one that cannot plan offline (`Component.plans_offline`) contributes its renderer's objects, so
    the output stays whole."""
    objects: list[dict[str, Any]] = []
    for component in COMPONENTS if components is None else components:
        if component.plan is None or not component.plans_offline:
            objects.extend(component.render(obs.inputs()))
        else:
            objects.extend(component.plan(obs).objects)
    return objects


def select_owned(manager: Manager, owned: Iterable[Kind]) -> None:
    """List and watch every kind the operator owns, and Pods, through the owned-children selector only: the API
    server then sends none of the cluster's other ConfigMaps, Services, Deployments, Jobs..., so the caches grow
    with the SlurmClusters, not with the Kubernetes cluster. Every child is rendered with these
    labels (`meta.object_meta`), workload pods inherit them from their templates, and no reconciler reads an object of
    these kinds that it did not create: the one user object read, the database password Secret, is read by name
    (a GET). A child someone strips of the labels leaves the cache (the watch says DELETED), so the next apply
    restores them."""
    for kind in {SECRET, POD, *owned}:
        manager.select(*kind, label_selector=meta.OWNED_SELECTOR)


def resync(event: Event) -> bool:
    return event.low_priority


async def register(
    manager: Manager,
    components: Sequence[Component] | None = None,
    *,
    policy: Policy | None = None,
    rsa_host_keys: bool = False,
    node_lost_after: float = DEFAULT_NODE_LOST_AFTER,
    cluster_domain: str = meta.DEFAULT_CLUSTER_DOMAIN,
    slurm_max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    network: NetworkSettings = DEFAULT_NETWORK,
    max_eviction_hold: float = 0.0,
    preemption_taints: tuple[str, ...] = DEFAULT_PREEMPTION_TAINTS,
) -> Context:
    """One controller per component (default: the registry), all keyed by the SlurmCluster and sharing the
    manager's informers. `policy` is the operator's (its flags, api/v1/policy.py; default: the default flags);
    `rsa_host_keys`:
    new clusters get an RSA SSH host key besides ed25519 and ECDSA; `node_lost_after`: seconds a Kubernetes node
    stays NotReady before its workers are handled as lost (reconcilers/lost_nodes.py; 0: never); `cluster_domain`:
    the kubelets' clusterDomain, in the DNS names Slurm pods search (meta.workers_domain); `slurm_max_answer_bytes`:
    the cap on each slurmrestd answer (slurm/answer.py); `network`: what the clusters' NetworkPolicies admit
    (render/network_policy.py); `max_eviction_hold`: seconds an eviction waits for jobs (reconcilers/eviction_hold.py;
    0: for ever); `preemption_taints`: the taint keys of Kubernetes nodes about to go away
    (reconcilers/preemption.py)."""
    components = COMPONENTS if components is None else components
    by_name = {c.name: c for c in components}
    select_owned(manager, {kind for c in components for kind in c.owns})
    # Nodes are read cluster-wide: only their names, labels (spec.topology) and whether they are cordoned are kept.
    manager.trim(*NODE, trimmed_node)
    host_key_types = HOST_KEY_TYPES if rsa_host_keys else DEFAULT_HOST_KEY_TYPES
    ctx = Context(
        manager,
        tuple(components),
        loader=Loader(policy=policy),
        host_key_types=host_key_types,
        node_lost_after=node_lost_after,
        cluster_domain=cluster_domain,
        slurm_max_answer_bytes=slurm_max_answer_bytes,
        network=network,
        max_eviction_hold=max_eviction_hold,
        preemption_taints=preemption_taints,
    )
    for component in components:
        ctx.reconcilers[component.name] = component.reconciler(ctx, component)
    for component in sorted(components, key=lambda c: c.name != FIRST_AFTER_AN_EDIT):
        reconciler = ctx.reconcilers[component.name]
        predicates = [] if component.watch_status else [any_of(generation_changed, resync)]
        builder = manager.controller(component.name, reconciler, for_=SLURM_CLUSTER, predicates=predicates)
        for source in (component, *(by_name[name] for name in component.after)):
            for kind in source.owns:
                builder.owns(*kind, predicates=[component_is(*source.labels)])
        reconciler.watch(builder)
        if component.name in upgrade.STAGED or component.name == "cluster":
            # A Slurm upgrade moves stage by stage: each stage's pods turning ready on the new line wake the next.
            staged = [label for c in components if c.name in upgrade.STAGED for label in c.labels]
            builder.watches(
                *POD,
                enqueue_mapped(_upgrading(manager)),
                predicates=[component_is(*staged), upgrade.pod_line_changed],
            )
        if component.reads_slurm:
            ctx.slurm.listen(_enqueue(builder.controller.queue, reconciler.follows_slurm))
    if "workers" in by_name:
        _register_slurm_nodes(manager, ctx)
    return ctx


def _upgrading(manager: Manager) -> Callable[[Any], Iterable[Request]]:
    """The cluster of a pod, only when that cluster may be in a Slurm upgrade (upgrade.may_be_upgrading)."""

    def mapped(pod: Any) -> list[Request]:
        out = []
        for req in cluster_of_pod(pod):
            live = manager.cache.get(*SLURM_CLUSTER, req.name, namespace=req.namespace)
            if live is not None and upgrade.may_be_upgrading(live):
                out.append(req)
        return out

    return mapped


def _enqueue(queue: WorkQueue[Request], follows: Callable[[str, str], bool]) -> Callable[[str, str], None]:
    def enqueue(c: str, namespace: str) -> None:
        if follows(c, namespace):
            queue.add(Request(namespace, c))

    return enqueue


def _register_slurm_nodes(manager: Manager, ctx: Context) -> None:
    """Slurm's view on the pods: polls each cluster's slurmrestd (it sends no events); the slurmrestd pod turning
    ready starts the first poll at once, as does a Kubernetes node being cordoned or uncordoned or turning Ready or
    NotReady, and a worker pod turning ready or not within a batch (worker_pods.BATCH_SECONDS). Pods are listed
    through the owned-children selector only; of Nodes (read cluster-wide) only their identity and labels, whether
    they are cordoned and their Ready condition are kept."""
    worker_labels = next(c for c in ctx.components if c.name == "workers").labels
    loop = ctx.loops[SLURM_NODES] = SlurmNodesReconciler(ctx)
    # A spec edit waits a batch here, so that the components' passes for it (a size edit's StatefulSet) run first: a
    # pass of this loop at 10,240 workers is over half a second of CPU.
    edits = [any_of(generation_changed, resync)]
    builder = manager.controller(SLURM_NODES, loop, for_=SLURM_CLUSTER, predicates=edits, batch=BATCH_SECONDS)
    builder.watches(*POD, enqueue_mapped(cluster_of_pod), predicates=[component_is(REST_COMPONENT)])
    workers = component_is(*worker_labels)
    builder.watches(
        *POD, enqueue_mapped(cluster_of_pod), predicates=[all_of(workers, worker_pod_changed)], batch=BATCH_SECONDS
    )
    builder.watches(
        *NODE, enqueue_mapped(loop.clusters_on), predicates=[any_of(cordon_changed, taints_changed, ready_changed)]
    )
