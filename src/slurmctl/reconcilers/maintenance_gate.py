"""The maintenance gate: whether a change that restarts a Slurm daemon's pod may be rolled out now
(spec.maintenance.windows), shared by every component with such pods. Pure: it decides on the spec, `now` and the
live workloads of an observation.

What the gate holds is the roll, never the rendering: every object is applied as the spec says, and outside a window
the step that replaces pods is stopped instead.

- The controller's and login's StatefulSets (RollingUpdate) get `partition: replicas`: the StatefulSet records the new
  template (its updateRevision) and replaces no pod; a pod deleted meanwhile comes back at its current revision.
- slurmrestd's and slurmdbd's Deployments are `paused`: the Deployment controller makes no new ReplicaSet.
- Workers (OnDelete StatefulSets, re-created by the operator one drained node at a time) and elastic workers (powered
  down through Slurm once idle) are held by their component, which takes no roll step (`rolls_allowed`).

Only a workload that exists is held: a new one (a new cluster, a new group, a standby just enabled) is created at once.
Inside a window, and without windows, the objects are exactly what the renderers give (no partition, not paused), so
a cluster without windows behaves as before. A roll that the window's end interrupts stops after the pod it is on.
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
from slurmctl.render.kinds import DEPLOYMENT, STATEFULSET

O = TypeVar("O", bound=Observation)  # noqa: E741 - the observation type a plan takes


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
    """The objects as applied while the gate is closed: each live RollingUpdate StatefulSet partitioned at its replicas,
    each live Deployment paused; everything else as rendered."""
    if rolls_allowed(obs.loaded.cluster.spec, obs.now):
        return objects
    return tuple(_held(obs, obj) for obj in objects)


def _held(obs: Observation, obj: Obj) -> Obj:
    name = obj["metadata"]["name"]
    kind = obj.get("kind")
    if kind == STATEFULSET.kind and name in obs.owned(STATEFULSET):
        strategy = obj["spec"].get("updateStrategy", {})
        if strategy.get("type", "RollingUpdate") != "RollingUpdate":
            return obj  # OnDelete: the operator itself replaces the pods (rolls_allowed)
        held: dict[str, Any] = copy.deepcopy(obj)
        replicas = int(obj["spec"].get("replicas", 1))
        held["spec"]["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"partition": replicas}}
        return held
    live = obs.owned(DEPLOYMENT).get(name)
    # A Deployment paused before its first ReplicaSet would never get one: only one that has pods is held.
    if kind == DEPLOYMENT.kind and live is not None and int((live.get("status") or {}).get("replicas", 0)) > 0:
        held = copy.deepcopy(obj)
        held["spec"]["paused"] = True
        return held
    return obj


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
