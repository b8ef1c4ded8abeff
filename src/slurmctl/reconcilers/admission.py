"""Pods the API server will not admit, found and said where the user looks.

A workload whose pods are refused at admission (the namespace's Pod Security `enforce` level, a ResourceQuota, a
validating webhook) stays short of the pods it asks for, and nothing on it says why: the StatefulSet and Job
controllers record the refusal only as Events on the workload and retry with a back-off. So for a StatefulSet or a Job
that is short of pods the API server itself is asked: a dry-run create of the pod the workload would make
(`dryRun=All`: every admission check runs, nothing is stored), whose refusal names the pod, the Pod Security level and
each violation. A Deployment says it on its own (its ReplicaFailure condition carries the ReplicaSet's refusal), so it
is read, not asked.

Only workloads short of pods are asked, and each answer is kept for `MEMO_SECONDS` per workload generation: a refused
workload does not change, and every pass over its cluster would otherwise ask again. When the refusal ends (the
namespace relabelled, the quota raised) the workload's controller creates its pods, whose status change is what
reconciles the component again.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Protocol

from cachetools import TTLCache

from slurmctl.reconcilers.observed import Live, condition_of, deleting
from slurmctl.runtime import ApiError, Conflict, Forbidden, Invalid
from slurmctl.runtime.clock import Clock

MEMO_SECONDS = 60.0
# A 403 that is the operator's own missing permission, not the pod's refusal: nothing to tell the cluster's owner.
_RBAC_DENIAL = "cannot create resource"


class Creates(Protocol):
    async def create(self, body: Mapping[str, Any], *, dry_run: bool = False) -> Any: ...


class Admission:
    """Asks the API server whether a short workload's next pod would be admitted (see the module's docstring)."""

    def __init__(self, client: Creates, clock: Clock, *, maxsize: int = 4096) -> None:
        self._client = client
        self._memo: TTLCache[tuple[str, ...], str | None] = TTLCache(
            maxsize=maxsize, ttl=MEMO_SECONDS, timer=clock.monotonic
        )
        self.asked = 0  # dry-run creates sent (tests check the memo holds)

    async def refusal(self, workload: Live | None) -> str | None:
        """Why the API server refuses the pods of a live StatefulSet, Deployment or Job, naming the workload; None
        when it is not short of pods, or its next pod would be admitted."""
        if workload is None or deleting(workload):
            return None
        kind = str(workload.get("kind", ""))
        md = workload.get("metadata") or {}
        if kind == "Deployment":
            failure = condition_of(workload, "ReplicaFailure")
            refused = failure is not None and failure.get("status") == "True"
            return _said(kind, md, str(failure.get("message") or "")) if failure and refused else None
        pod = _next_pod(workload)
        if pod is None:
            return None
        identity = (kind, md.get("namespace"), md.get("name"), md.get("uid"), md.get("generation"))
        key = tuple(str(v) for v in (*identity, pod["metadata"].get("name")))
        if key in self._memo:
            return self._memo[key]
        self.asked += 1
        try:
            await self._client.create(pod, dry_run=True)
            detail = None
        except Conflict:  # the pod exists: the workload's status lags it
            detail = None
        except (Forbidden, Invalid) as exc:
            detail = None if _RBAC_DENIAL in exc.detail else exc.detail
        except ApiError:  # unavailable: not the pod's refusal, and the next pass asks again
            return None
        said = _said(kind, md, detail) if detail else None
        self._memo[key] = said
        return said


def _said(kind: str, md: Mapping[str, Any], detail: str) -> str:
    return f"the API server refuses the pods of {kind} {md.get('name', '')}: {detail}"


def _next_pod(workload: Live) -> dict[str, Any] | None:
    """The pod a StatefulSet or Job short of pods would create next, as its controller would make it (enough for
    admission: name, labels, spec, the claims of a StatefulSet's volumeClaimTemplates); None when it is not short."""
    kind = workload.get("kind")
    md = workload.get("metadata") or {}
    spec = workload.get("spec") or {}
    status = workload.get("status") or {}
    name = str(md.get("name", ""))
    if kind == "StatefulSet":
        wanted = int(spec.get("replicas", 1))
        have = int(status.get("replicas") or 0)
        if have >= wanted or status.get("observedGeneration") != md.get("generation"):
            return None  # complete, or its controller has not looked at this generation yet
        template = spec.get("template") or {}
        pod = _pod(template, md, name=f"{name}-{have}")
        claims = [
            {
                "name": c["metadata"]["name"],
                "persistentVolumeClaim": {"claimName": f"{c['metadata']['name']}-{name}-{have}"},
            }
            for c in spec.get("volumeClaimTemplates") or []
        ]
        pod["spec"]["volumes"] = [*(pod["spec"].get("volumes") or []), *claims]
        return pod
    if kind == "Job":
        finished = any(
            (c := condition_of(workload, t)) is not None and c.get("status") == "True" for t in ("Complete", "Failed")
        )
        if finished or spec.get("suspend") or status.get("active") or not status.get("startTime"):
            return None  # done, suspended, running, or not yet seen by its controller
        return _pod(spec.get("template") or {}, md, generate_name=f"{name}-")
    return None


def _pod(
    template: Mapping[str, Any], owner: Mapping[str, Any], *, name: str = "", generate_name: str = ""
) -> dict[str, Any]:
    tmd = template.get("metadata") or {}
    metadata: dict[str, Any] = {"namespace": owner.get("namespace", "")}
    metadata |= {"name": name} if name else {"generateName": generate_name}
    for field in ("labels", "annotations"):
        if tmd.get(field):
            metadata[field] = dict(tmd[field])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": copy.deepcopy(dict(template.get("spec") or {})),
    }
