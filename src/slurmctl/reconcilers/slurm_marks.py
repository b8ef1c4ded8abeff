"""What the Slurm node loop (reconcilers/slurm_nodes.py) writes on worker pods, each from one Slurm snapshot and only
where it changes:

- the `SlurmNodeState` condition (reason: the Slurm state, e.g. Idle, Allocated, Drained; message: Slurm's reason),
  applied to pods/status;
- the evictable label (`slurm.slurmctl.io/evictable=true`, render/disruption.py), set while Slurm says no job can
  run on the pod's node and taken off otherwise (and whenever Slurm cannot be asked).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping
from datetime import datetime
from typing import Any

from slurmctl.reconcilers.observed import SLURM_NODE_STATE, WorkerPod
from slurmctl.reconcilers.plan import Obj
from slurmctl.reconcilers.views import Condition
from slurmctl.render import meta
from slurmctl.render.kinds import POD
from slurmctl.runtime import Event, EventType, Manager, NotFound
from slurmctl.runtime.concurrency import bounded
from slurmctl.runtime.errors import Invalid as InvalidObject
from slurmctl.runtime.logs import kv
from slurmctl.slurm import Node

log = logging.getLogger(__name__)

FIELD_MANAGER = "slurmctl-slurm-nodes"
# The evictable label is applied to the pod itself, not /status: a field manager of its own, so that neither apply
# drops the other's fields (API servers before 1.22 do not tell a manager's /status fields from its others).
EVICTABLE_FIELD_MANAGER = "slurmctl-evictable"
_USABLE = frozenset({"Idle", "Allocated", "Mixed"})


def only_marks_changed(event: Event) -> bool:
    """A pod update that changed nothing but these marks: the node loop's own writes, which wake no other component.
    At 10,240 workers each condition written woke the workers component, whose pass over every pod (about a second)
    then ran back to back and took the CPU the node loop needed for the next writes."""
    if event.type is not EventType.UPDATED or event.old is None or event.low_priority:
        return False
    return _without_marks(event.old) == _without_marks(event.obj)


def _without_marks(pod: Mapping[str, Any]) -> dict[str, Any]:
    metadata = {k: v for k, v in (pod.get("metadata") or {}).items() if k not in ("resourceVersion", "managedFields")}
    metadata["labels"] = {k: v for k, v in (metadata.get("labels") or {}).items() if k != meta.LABEL_EVICTABLE}
    status = dict(pod.get("status") or {})
    status["conditions"] = [c for c in status.get("conditions") or () if c.get("type") != SLURM_NODE_STATE]
    return {**pod, "metadata": metadata, "status": status}


def node_state(node: Node | None) -> tuple[str, str, str]:
    """What a pod's condition says of its Slurm node: status, reason (the Slurm state) and message (Slurm's reason)."""
    if node is None:
        return "False", "NotRegistered", "slurmd has not registered this node with slurmctld"
    display = node.display
    return ("True" if display in _USABLE else "False"), display, node.reason  # CamelCase: a valid condition reason


def node_condition(node: Node | None, live: Condition | None, at: datetime) -> dict[str, Any]:
    """The pod condition for a Slurm node; lastTransitionTime (`at` when it flips) is kept while the status does not
    flip, so an unchanged state renders an identical intent (and no write)."""
    status, reason, message = node_state(node)
    since = live.last_transition_time if live is not None and live.status == status else ""
    return {
        "type": SLURM_NODE_STATE,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since or at.isoformat().replace("+00:00", "Z"),
    }


def condition_intents(namespace: str, pods: Iterable[WorkerPod], nodes: Mapping[str, Node], at: datetime) -> list[Obj]:
    """Each started pod's SlurmNodeState condition, from its Slurm node in `nodes` (by the pod's name), where it
    differs from what the pod carries. Compared before it is built: at 10,240 workers nearly every pod's is unchanged
    on each pass."""
    out = []
    for pod in pods:
        if pod.terminating or not pod.has_address:
            continue
        live, node = pod.slurm_state, nodes.get(pod.name)
        if (
            live is not None
            and live.last_transition_time
            and (live.status, live.reason, live.message) == node_state(node)
        ):
            continue  # what node_condition would build, lastTransitionTime kept
        out.append(_pod(pod.name, namespace, status={"conditions": [node_condition(node, live, at)]}))
    return out


def evictable_intents(namespace: str, pods: Iterable[WorkerPod], may_go: Collection[str]) -> list[Obj]:
    """Label the pods in `may_go` evictable and take the label off every other one, only where that changes. A pod
    without an address (not started: an eviction does not wait for a pending pod) is not labelled; a pod being
    deleted is left as it is (it is going: an eviction changes nothing)."""
    out = []
    for pod in pods:
        wanted = pod.name in may_go and pod.has_address
        if pod.terminating or wanted == pod.evictable:
            continue
        labels = {meta.LABEL_EVICTABLE: "true"} if wanted else None
        out.append(_pod(pod.name, namespace, labels=labels))
    return out


def _pod(name: str, namespace: str, *, labels: dict[str, str] | None = None, status: Obj | None = None) -> Obj:
    md: Obj = {"name": name, "namespace": namespace, **({"labels": labels} if labels else {})}
    return {"apiVersion": POD.api_version, "kind": POD.kind, "metadata": md, **({"status": status} if status else {})}


async def write_marks(manager: Manager, conditions: Iterable[Obj], evictable: Iterable[Obj]) -> None:
    """Apply the pods' conditions (to pods/status) and evictable labels (to the pods), a few at once (a thousand
    workers registering are a thousand conditions); the first failure is raised once all have ended."""
    writes = [
        *(_condition(manager, body) for body in conditions),
        *(_label(manager, body) for body in evictable),
    ]
    for result in await bounded(writes):
        if isinstance(result, BaseException):
            raise result


async def _condition(manager: Manager, body: Obj) -> None:
    md = body["metadata"]
    try:
        await manager.apply_status(body, field_manager=FIELD_MANAGER)
    except NotFound as exc:
        # Gone since the cache saw it (a scale-in or a roll deleted it): its node's state has no pod to be told on.
        log.debug(
            "pod gone before its condition was written %s", kv(namespace=md["namespace"], pod=md["name"], error=exc)
        )


async def _label(manager: Manager, body: Obj) -> None:
    md = body["metadata"]
    try:
        await manager.apply(body, field_manager=EVICTABLE_FIELD_MANAGER)
    except (NotFound, InvalidObject) as exc:
        # Gone since the cache saw it (an apply to a missing pod is refused: it has no spec).
        log.debug("pod gone before its label was written %s", kv(namespace=md["namespace"], pod=md["name"], error=exc))
        return
    log.info("pod evictability %s", kv(namespace=md["namespace"], pod=md["name"], evictable="labels" in md))
