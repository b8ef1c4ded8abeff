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

from slurmctl.reconcilers.observed import Live
from slurmctl.reconcilers.views import PodTemplate, Workload, condition
from slurmctl.runtime import ApiError, Conflict, Forbidden, Invalid
from slurmctl.runtime.clock import Clock
from slurmctl.runtime.objects import ObjectMeta

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
        live = Workload.of(workload)
        kind, md = live.kind, live.metadata
        if workload is None or md.deletion_timestamp:
            return None
        if kind == "Deployment":
            failure = condition(live.status.conditions, "ReplicaFailure")
            return _said(kind, md, failure.message) if failure is not None and failure.true else None
        pod = _next_pod(live)
        if pod is None:
            return None
        identity = (kind, md.namespace, md.name, md.uid, md.generation)
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


def _said(kind: str, md: ObjectMeta, detail: str) -> str:
    return f"the API server refuses the pods of {kind} {md.name}: {detail}"


def _next_pod(workload: Workload) -> dict[str, Any] | None:
    """The pod a StatefulSet or Job short of pods would create next, as its controller would make it (enough for
    admission: name, labels, spec, the claims of a StatefulSet's volumeClaimTemplates); None when it is not short."""
    md, spec, status = workload.metadata, workload.spec, workload.status
    if workload.kind == "StatefulSet":
        wanted = 1 if spec.replicas is None else spec.replicas  # the API server's default
        have = status.replicas
        if have >= wanted or status.observed_generation != md.generation:
            return None  # complete, or its controller has not looked at this generation yet
        claims = [
            {
                "name": c.metadata.name,
                "persistentVolumeClaim": {"claimName": f"{c.metadata.name}-{md.name}-{have}"},
            }
            for c in spec.volume_claim_templates
        ]
        return _pod(spec.template, md, name=f"{md.name}-{have}", claims=claims)
    if workload.kind == "Job":
        finished = any((c := condition(status.conditions, t)) is not None and c.true for t in ("Complete", "Failed"))
        if finished or spec.suspend or status.active or not status.start_time:
            return None  # done, suspended, running, or not yet seen by its controller
        return _pod(spec.template, md, generate_name=f"{md.name}-")
    return None


def _pod(
    template: PodTemplate,
    owner: ObjectMeta,
    *,
    name: str = "",
    generate_name: str = "",
    claims: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The pod made from `template` (its spec copied as JSON); `claims`: volumes added for a StatefulSet's claims."""
    metadata: dict[str, Any] = {"namespace": owner.namespace}
    metadata |= {"name": name} if name else {"generateName": generate_name}
    for field, value in (("labels", template.metadata.labels), ("annotations", template.metadata.annotations)):
        if value:
            metadata[field] = value
    spec = copy.deepcopy(template.spec)
    if claims is not None:
        spec.setdefault("volumes", []).extend(claims)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
