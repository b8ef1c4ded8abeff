"""Registers one controller per component with the manager, each keyed by the SlurmCluster and sharing informers.

Component controllers react to spec changes (generation), to resyncs, and to their own children; status writes of
other components do not wake them. The cluster controller also reacts to status changes: the phase is derived
from every component's condition.
"""

from __future__ import annotations

from collections.abc import Callable

from slurmctl.api.v1 import API_VERSION, KIND
from slurmctl.reconcilers.base import ComponentReconciler
from slurmctl.reconcilers.cluster import ClusterReconciler
from slurmctl.reconcilers.controller import ControllerReconciler
from slurmctl.reconcilers.login import LoginReconciler
from slurmctl.reconcilers.workers import WorkersReconciler
from slurmctl.render import meta
from slurmctl.runtime import Event, Manager, any_of, generation_changed
from slurmctl.runtime.handlers import Predicate

CONFIGMAP = ("v1", "ConfigMap")
SECRET = ("v1", "Secret")
SERVICE = ("v1", "Service")
STATEFULSET = ("apps/v1", "StatefulSet")


def resync(event: Event) -> bool:
    return event.low_priority


def component_is(*components: str) -> Predicate:
    """Only children carrying one of these component labels (a worker StatefulSet does not wake the login)."""

    def predicate(event: Event) -> bool:
        labels = (event.obj.get("metadata") or {}).get("labels") or {}
        return labels.get(meta.LABEL_COMPONENT) in components

    return predicate


# name, reconciler class, the component label of its children, and the kinds it owns. Every component also watches
# the cluster's Secrets: the munge key appearing is what lets it start.
COMPONENTS: list[tuple[str, Callable[[Manager], ComponentReconciler], str, list[tuple[str, str]]]] = [
    ("controller", ControllerReconciler, "controller", [STATEFULSET, SERVICE]),
    ("workers", WorkersReconciler, "worker", [STATEFULSET, SERVICE]),
    ("login", LoginReconciler, "login", [STATEFULSET, SERVICE, CONFIGMAP]),
]


async def register(manager: Manager) -> None:
    for_ = (API_VERSION, KIND)
    cluster = manager.controller("cluster", ClusterReconciler(manager), for_=for_)
    cluster.owns(*CONFIGMAP, predicates=[component_is("cluster")]).owns(*SECRET, predicates=[component_is("cluster")])
    for name, reconciler, label, owned in COMPONENTS:
        builder = manager.controller(
            name, reconciler(manager), for_=for_, predicates=[any_of(generation_changed, resync)]
        )
        for kind in owned:
            builder.owns(*kind, predicates=[component_is(label)])
        builder.owns(*SECRET, predicates=[component_is("cluster")])
