"""Typed views of the Kubernetes objects the reconcilers read: a Pod, a workload (StatefulSet, Deployment, Job), a
Node, a Secret, and the parts of a SlurmCluster read as JSON (its status as the status writer merges it, whether its
spec asks for a topology) rather than through the parsed model.

Each view declares only the fields some reader uses, with the API's own zero value for an absent one (None where
absent and zero mean different things); `of` decodes one from an object's JSON, `None` (an object that does not
exist) reading as an empty one. runtime/objects.py says why views and why msgspec. observed.py turns these into the
answers the reconcilers branch on; the other reconcilers read the views directly where they read a field or two.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Self

import msgspec

from slurmctl.runtime.objects import ObjectMeta, view


class _View(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    """Base of the top-level views (each says frozen etc. again: msgspec and mypy read the flags per class)."""

    @classmethod
    def of(cls, obj: Mapping[str, Any] | None) -> Self:
        return view(obj, cls)


class Condition(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    """A status condition, of any kind of object."""

    type: str = ""
    status: str = ""  # True, False or Unknown
    reason: str = ""
    message: str = ""
    last_transition_time: str = ""  # as the API wrote it
    observed_generation: int | None = None

    @property
    def true(self) -> bool:
        return self.status == "True"


def condition(conditions: Iterable[Condition], type_: str) -> Condition | None:
    """The condition of a type among an object's; None without one."""
    return next((c for c in conditions if c.type == type_), None)


# ---- Pod ------------------------------------------------------------------------------------------------------------
class Terminated(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    exit_code: int = 0
    message: str = ""  # the termination message (the container's own, or the kubelet's fallback: the log's tail)
    finished_at: str = ""


class Waiting(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    reason: str = ""  # ContainerCreating, ImagePullBackOff, CrashLoopBackOff, ...
    message: str = ""


class ContainerState(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    running: dict[str, Any] | None = None  # None: not running
    terminated: Terminated | None = None  # None: not ended
    waiting: Waiting | None = None  # None: not waiting


class ContainerStatus(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    name: str = ""
    state: ContainerState = ContainerState()


class PodSpec(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    node_name: str = ""  # "" while unscheduled


class PodStatus(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    pod_ip: str = msgspec.field(name="podIP", default="")  # "" until its sandbox is up
    conditions: tuple[Condition, ...] = ()
    init_container_statuses: tuple[ContainerStatus, ...] = ()
    container_statuses: tuple[ContainerStatus, ...] = ()


class Pod(_View, frozen=True, kw_only=True, rename="camel", gc=False):
    metadata: ObjectMeta = ObjectMeta()
    spec: PodSpec = PodSpec()
    status: PodStatus = PodStatus()

    @property
    def ready(self) -> bool:
        return (c := condition(self.status.conditions, "Ready")) is not None and c.true

    @property
    def terminating(self) -> bool:
        return bool(self.metadata.deletion_timestamp)

    def container(self, name: str) -> ContainerStatus | None:
        return next((c for c in self.status.container_statuses if c.name == name), None)


# ---- Workloads: StatefulSet, Deployment, Job ------------------------------------------------------------------------
class LabelSelector(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    match_labels: dict[str, str] = {}


class PodTemplate(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    metadata: ObjectMeta = ObjectMeta()
    spec: dict[str, Any] = {}  # as JSON: admission copies it into the pod it asks the API server about


class ClaimTemplate(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    metadata: ObjectMeta = ObjectMeta()


class WorkloadSpec(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    replicas: int | None = None  # None: unset (the API server defaults it to 1 on create)
    selector: LabelSelector = LabelSelector()
    template: PodTemplate = PodTemplate()
    volume_claim_templates: tuple[ClaimTemplate, ...] = ()  # a StatefulSet's
    suspend: bool = False  # a Job's


class WorkloadStatus(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    replicas: int = 0
    ready_replicas: int = 0
    available_replicas: int = 0  # a Deployment's
    update_revision: str = ""  # a StatefulSet's; "" until its controller has seen it
    observed_generation: int | None = None
    succeeded: int = 0  # a Job's pods that succeeded
    active: int = 0  # a Job's running pods
    start_time: str = ""  # a Job's; "" until its controller has seen it
    conditions: tuple[Condition, ...] = ()


class Workload(_View, frozen=True, kw_only=True, rename="camel", gc=False):
    """A StatefulSet, a Deployment or a Job: one view, each kind's own fields left at their zero in the others."""

    kind: str = ""
    metadata: ObjectMeta = ObjectMeta()
    spec: WorkloadSpec = WorkloadSpec()
    status: WorkloadStatus = WorkloadStatus()


# ---- Node, Secret ---------------------------------------------------------------------------------------------------
class NodeSpec(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    unschedulable: bool = False  # cordoned


class NodeStatus(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    conditions: tuple[Condition, ...] = ()


class Node(_View, frozen=True, kw_only=True, rename="camel", gc=False):
    metadata: ObjectMeta = ObjectMeta()
    spec: NodeSpec = NodeSpec()
    status: NodeStatus = NodeStatus()


class Secret(_View, frozen=True, kw_only=True, rename="camel", gc=False):
    """A Secret (or a ConfigMap: the same `data`, not base64 there)."""

    metadata: ObjectMeta = ObjectMeta()
    data: dict[str, str] = {}  # base64 values


# ---- SlurmCluster, read as JSON -------------------------------------------------------------------------------------
class ClusterStatus(_View, frozen=True, kw_only=True, rename="camel", gc=False):
    """A SlurmCluster's status as JSON (the cached one, a part a component submits, what the writer wrote), where the
    parsed model (api/v1's SlurmClusterStatus) would cost a validation of it all for a field or two."""

    phase: str | None = None
    observed_generation: int | None = None
    conditions: tuple[Condition, ...] = ()


class ClusterSpec(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    topology: dict[str, Any] | None = None


class Cluster(_View, frozen=True, kw_only=True, rename="camel", gc=False):
    """What is read of a cached SlurmCluster without loading it (reconcilers/loading.py): in event handlers, which
    run for every pod and node event and must not parse a cluster's whole spec."""

    metadata: ObjectMeta = ObjectMeta()
    spec: ClusterSpec = ClusterSpec()
