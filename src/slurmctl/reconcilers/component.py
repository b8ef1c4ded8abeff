"""How a component is declared (`Component`, one row of registry.COMPONENTS) and what its reconciler is to the
registry (`Reconciler`): everything registration, `slurmctl render` and the phase need to know about it, and the
children that are its (carrying its component label)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, Any, Protocol

from slurmctl.api.v1 import Component as Image
from slurmctl.api.v1 import SlurmCluster
from slurmctl.reconcilers.loading import Loaded
from slurmctl.reconcilers.observed import labels_of
from slurmctl.render import meta
from slurmctl.render.kinds import Kind
from slurmctl.render.manifests import Renderer
from slurmctl.runtime import Cache, Event, Request, Result
from slurmctl.runtime.handlers import Predicate
from slurmctl.runtime.manager import ControllerBuilder

if TYPE_CHECKING:
    from slurmctl.reconcilers.context import Context
    from slurmctl.reconcilers.observation import Observation
    from slurmctl.reconcilers.plan import Plan

Obj = dict[str, Any]


def always(cluster: SlurmCluster) -> bool:
    return True


def never(cluster: SlurmCluster) -> bool:
    return False


class Reconciler(Protocol):
    """A component's reconciler as the registry sees it: what its controller calls, and the watches it adds."""

    async def __call__(self, req: Request) -> Result | None: ...

    def watch(self, builder: ControllerBuilder) -> None: ...

    def follows_slurm(self, c: str, namespace: str) -> bool: ...


@dataclass(frozen=True)
class Component:
    """One component, declared once: everything registration, `slurmctl render` and the phase need to know about it.

    `name` is the controller's name and the value of the component label on every child alike.
    """

    name: str
    condition: str  # the one status condition this component owns
    _: KW_ONLY
    reconciler: Callable[[Context, Component], Reconciler]  # ComponentReconciler or a subclass (reconcilers/base.py)
    render: Renderer  # the objects it applies: its plan calls it (`slurmctl render` too, when it cannot plan offline)
    plan: Callable[[Observation], Plan] | None = None  # its pure decision (reconcilers/plan.py); None: it decides alone
    # Whether its plan decides on what a cluster shows without a server (reconcilers/offline.py); accounting's needs
    # the database password, which only the cluster's Secret holds: `slurmctl render` prints its renderer's objects.
    plans_offline: bool = True
    owns: tuple[Kind, ...] = ()  # kinds of its children, found and watched by its component label
    image: Image | None = None  # the default image its pods run (`<registry>/<image>:<tag>`)
    required: Callable[[SlurmCluster], bool] = always  # whether its condition must be True for Available
    after: tuple[str, ...] = ()  # components whose children's events wake it (keys, the jail gate)
    watch_status: bool = False  # wake on every change of the SlurmCluster, status included (the phase)
    # Wake when the cluster's Slurm snapshot says something new (SlurmAccess.listen) and its reconciler follows it.
    reads_slurm: bool = False
    former_names: tuple[str, ...] = ()  # labels older releases put on its children, still recognised

    @property
    def labels(self) -> tuple[str, ...]:
        return (self.name, *self.former_names)


def owned(cache: Cache, loaded: Loaded, kind: Kind, labels: Iterable[str]) -> list[Obj]:
    """A cluster's children of a kind (owned by it) that carry one of these component labels, by name."""
    found: dict[str, Obj] = {}
    for label in labels:
        selector = meta.selector(loaded.name, label)
        for child in cache.list(
            *kind, namespace=loaded.namespace, labels=selector, owner_uid=loaded.cluster.metadata.uid
        ):
            found[child["metadata"]["name"]] = child
    return [found[name] for name in sorted(found)]


def component_is(*components: str) -> Predicate:
    """Only children carrying one of these component labels (a worker StatefulSet does not wake the login)."""

    def predicate(event: Event) -> bool:
        return labels_of(event.obj).get(meta.LABEL_COMPONENT) in components

    return predicate
