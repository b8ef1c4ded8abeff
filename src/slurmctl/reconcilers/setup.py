"""Registers one controller per component with the manager, each keyed by the SlurmCluster and sharing informers.

Component controllers react to spec changes (generation), to resyncs, and to their own children (matched by the
component label); status writes of other components do not wake them. The cluster controller also reacts to status
changes: the phase is derived from every component's condition.
"""

from __future__ import annotations

from slurmctl.api.v1 import API_VERSION, KIND
from slurmctl.reconcilers.accounting import AccountingReconciler, password_secret_requests
from slurmctl.reconcilers.base import ComponentReconciler
from slurmctl.reconcilers.benchmark import BenchmarkReconciler, cronjob_api_version
from slurmctl.reconcilers.cluster import ClusterReconciler
from slurmctl.reconcilers.controller import ControllerReconciler
from slurmctl.reconcilers.login import LoginReconciler
from slurmctl.reconcilers.populate_jail import PopulateJailReconciler
from slurmctl.reconcilers.workers import WorkersReconciler
from slurmctl.render import meta
from slurmctl.runtime import Event, Manager, any_of, enqueue_mapped, generation_changed
from slurmctl.runtime.handlers import Predicate

CONFIGMAP = ("v1", "ConfigMap")
SECRET = ("v1", "Secret")
SERVICE = ("v1", "Service")
STATEFULSET = ("apps/v1", "StatefulSet")
DEPLOYMENT = ("apps/v1", "Deployment")
JOB = ("batch/v1", "Job")


def resync(event: Event) -> bool:
    return event.low_priority


def component_is(*components: str) -> Predicate:
    """Only children carrying one of these component labels (a worker StatefulSet does not wake the login)."""

    def predicate(event: Event) -> bool:
        labels = (event.obj.get("metadata") or {}).get("labels") or {}
        return labels.get(meta.LABEL_COMPONENT) in components

    return predicate


async def register(manager: Manager) -> None:
    for_ = (API_VERSION, KIND)
    cronjob = (await cronjob_api_version(manager), "CronJob")
    cluster = manager.controller("cluster", ClusterReconciler(manager), for_=for_)
    cluster.owns(*CONFIGMAP, predicates=[component_is("cluster")]).owns(*SECRET, predicates=[component_is("cluster")])

    # name, reconciler, and the (kind, component label) pairs of the children whose events wake it. Every component
    # also watches the cluster's key Secrets: their appearing is what lets it start.
    components: list[tuple[str, ComponentReconciler, list[tuple[tuple[str, str], str]]]] = [
        ("populate-jail", PopulateJailReconciler(manager), [(JOB, "populate-jail")]),
        ("controller", ControllerReconciler(manager), [(STATEFULSET, "controller"), (SERVICE, "controller")]),
        (
            "workers",
            WorkersReconciler(manager),
            [(STATEFULSET, "worker"), (SERVICE, "worker"), (JOB, "populate-jail")],
        ),
        (
            "login",
            LoginReconciler(manager),
            [(STATEFULSET, "login"), (SERVICE, "login"), (CONFIGMAP, "login"), (JOB, "populate-jail")],
        ),
        (
            "accounting",
            AccountingReconciler(manager),
            [(DEPLOYMENT, "accounting"), (SERVICE, "accounting"), (SECRET, "accounting")],
        ),
        (
            "benchmark",
            BenchmarkReconciler(manager, api_version=cronjob[0]),
            [(cronjob, "benchmark")],
        ),
    ]
    builders = {}
    for name, reconciler, owned in components:
        builder = manager.controller(name, reconciler, for_=for_, predicates=[any_of(generation_changed, resync)])
        for kind, label in owned:
            builder.owns(*kind, predicates=[component_is(label)])
        builders[name] = builder.owns(*SECRET, predicates=[component_is("cluster")])
    # The external database's password Secret is the user's, not ours: map it to the clusters naming it.
    builders["accounting"].watches(*SECRET, enqueue_mapped(password_secret_requests(manager)))
