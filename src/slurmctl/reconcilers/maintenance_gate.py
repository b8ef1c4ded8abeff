"""The maintenance gate: whether a change that restarts a Slurm daemon's pod may be rolled out now
(spec.maintenance.windows), shared by every component with such pods. Pure: it decides on the spec, `now` and the
live workloads of an observation.

What the gate holds is the roll, never the rendering: every object is applied as the spec says, and outside a window
the step that replaces pods is stopped instead.

- The controller's and login's StatefulSets (RollingUpdate) get `partition: replicas`: the StatefulSet records the new
  template (its updateRevision) and replaces no pod; a pod deleted meanwhile comes back at its current revision.
- slurmrestd's and slurmdbd's Deployments are `paused`: the Deployment controller makes no new ReplicaSet.
- Workers (OnDelete StatefulSets, re-created by the operator a drained node at a time, spec.maintenance.maxUnavailable
  at once) and elastic workers (powered down through Slurm once idle) are held by their component, which takes no
  roll step (`rolls_allowed`).

Only a workload that exists is held: a new one (a new cluster, a new group, a standby just enabled) is created at once.
Neither is a roll already under way when the window closes (it runs to its end), nor one whose pods must follow a new
key Secret (a JWT key rotation: the operator signs its Slurm calls with the new key at once). Without windows the
objects are exactly what the renderers give; with windows they carry KEY_IDS_ANNOTATION besides, and inside a window
nothing else (no partition, not paused).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from slurmctl.api.v1 import SlurmClusterSpec, current_window, next_window
from slurmctl.reconcilers.observation import Observation
from slurmctl.reconcilers.plan import Obj, Plan
from slurmctl.render import meta
from slurmctl.render.kinds import DEPLOYMENT, STATEFULSET
from slurmctl.runtime.objects import meta_of

O = TypeVar("O", bound=Observation)  # noqa: E741 - the observation type a plan takes
# On each gated workload: a hash of the key Secrets (their uids) its pods are rendered for. A workload whose pods must
# follow a new key is not held (a JWT key rotation is applied at once, window or not).
KEY_IDS_ANNOTATION = "slurm.slurmctl.io/key-ids"


def rolls_allowed(spec: SlurmClusterSpec, now: datetime) -> bool:
    """Whether pods may be replaced for a new template now: always without windows, else inside one."""
    windows = spec.maintenance.windows
    return not windows or current_window(windows, now) is not None


def seconds_to_change(spec: SlurmClusterSpec, now: datetime) -> float | None:
    """Seconds until the gate opens or closes next (a second past the boundary); None without windows or when no
    window opens again."""
    windows = spec.maintenance.windows
    if not windows:
        return None
    current = current_window(windows, now)
    upcoming = next_window(windows, now)
    boundaries = [span for span in (current.end if current else None, upcoming.start if upcoming else None) if span]
    if not boundaries:
        return None
    return max(1.0, (min(boundaries) - now).total_seconds() + 1.0)


def hold(obs: Observation, objects: tuple[Obj, ...]) -> tuple[Obj, ...]:
    """The objects as applied while the cluster has windows: each RollingUpdate StatefulSet and Deployment stamped
    with the key Secrets its pods were rendered for, and, outside a window, held (`_gated`)."""
    if not obs.loaded.cluster.spec.maintenance.windows:
        return objects
    allowed = rolls_allowed(obs.loaded.cluster.spec, obs.now)
    keys = meta.content_hash(sorted(obs.keys.items()))
    return tuple(_gated(obs, obj, allowed, keys) for obj in objects)


def _gated(obs: Observation, obj: Obj, allowed: bool, keys: str) -> Obj:
    kind, name = obj.get("kind"), obj["metadata"]["name"]
    if kind == STATEFULSET.kind:
        if obj["spec"].get("updateStrategy", {}).get("type", "RollingUpdate") != "RollingUpdate":
            return obj  # OnDelete: the operator itself replaces the pods (rolls_allowed)
        live = obs.owned(STATEFULSET).get(name)
    elif kind == DEPLOYMENT.kind:
        live = obs.owned(DEPLOYMENT).get(name)
    else:
        return obj
    out: dict[str, Any] = copy.deepcopy(obj)
    out["metadata"].setdefault("annotations", {})[KEY_IDS_ANNOTATION] = keys
    if allowed or live is None or not _holdable(live, keys):
        return out
    if kind == STATEFULSET.kind:
        replicas = int(obj["spec"].get("replicas", 1))
        out["spec"]["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"partition": replicas}}
    else:
        out["spec"]["paused"] = True
    return out


def _holdable(live: Obj, keys: str) -> bool:
    """Whether a live workload's roll may be held: not when its pods must follow a new key Secret (a JWT key rotation:
    slurmctld and slurmdbd load the key only when they start, and the operator already signs its Slurm calls with the
    new one), nor while a roll it was let run is still under way (the StatefulSet controller re-creates a deleted pod
    at the revision the partition says at that moment: holding it mid-roll would bring back the old template, whose
    key Secret may be gone), nor a Deployment without pods yet (paused before its first ReplicaSet, it would get none).
    """
    md = meta_of(live)
    stamped = md.annotations.get(KEY_IDS_ANNOTATION)
    if stamped is not None and stamped != keys:
        return False
    spec, status = live.get("spec") or {}, live.get("status") or {}
    unseen = int(status.get("observedGeneration", 0)) < (md.generation or 0)
    if live.get("kind") == DEPLOYMENT.kind:
        if int(status.get("replicas", 0)) == 0:
            return False
        rolling = not spec.get("paused") and (
            unseen or int(status.get("updatedReplicas", 0)) < int(spec.get("replicas", 1))
        )
        return not rolling
    partition = ((spec.get("updateStrategy") or {}).get("rollingUpdate") or {}).get("partition", 0)
    rolling = not partition and (unseen or status.get("updateRevision") != status.get("currentRevision"))
    return not rolling


def gated(plan: Callable[[O], Plan]) -> Callable[[O], Plan]:
    """A component's plan with the maintenance gate: its applies held outside a window, and a pass due when the gate
    next opens or closes."""

    def gated_plan(obs: O) -> Plan:
        decided = plan(obs)
        spec = obs.loaded.cluster.spec
        if not spec.maintenance.windows:
            return decided
        again = seconds_to_change(spec, obs.now)
        requeue = min(filter(None, (decided.requeue_after, again)), default=None)
        return dataclasses.replace(decided, apply=hold(obs, decided.apply), requeue_after=requeue)

    gated_plan.__name__ = getattr(plan, "__name__", "plan")
    gated_plan.__doc__ = plan.__doc__
    return gated_plan
