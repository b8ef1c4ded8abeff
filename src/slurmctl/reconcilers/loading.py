"""Reading a SlurmCluster once per change: the parsed, validated cluster and its Slurm configs (`Loaded`), or why its
spec cannot be used (`Invalid`). Every component controller reconciles the same object after each change; the
`Loader` shares that work between them."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError

from slurmctl.api.v1 import Condition, ObjectMeta, Policy, SlurmCluster, SlurmClusterStatus, check_cluster
from slurmctl.reconcilers.observed import resource_version
from slurmctl.render import meta
from slurmctl.render.slurm_conf import render_slurm_configs
from slurmctl.runtime.objects import meta_of


@dataclass(frozen=True)
class Loaded:
    """A valid SlurmCluster as read from the cache: the live object (for status and events), its parsed model and its
    Slurm config set, rendered once and shared by every config hash."""

    obj: Mapping[str, Any]
    cluster: SlurmCluster
    configs: Mapping[str, str]

    @property
    def name(self) -> str:
        return meta.cluster_name(self.cluster)

    @property
    def namespace(self) -> str:
        return self.cluster.metadata.namespace or ""

    @property
    def generation(self) -> int:
        return self.cluster.metadata.generation or 0

    @property
    def status(self) -> SlurmClusterStatus:
        return self.cluster.status or SlurmClusterStatus()

    def condition(self, type_: str) -> Condition | None:
        return self.status.condition(type_)

    @classmethod
    def of(cls, obj: Mapping[str, Any], cluster: SlurmCluster, policy: Policy) -> Loaded:
        """A valid cluster with its configs rendered as the operator's `policy` says (DisableRootJobs)."""
        return cls(obj, cluster, MappingProxyType(render_slurm_configs(cluster, root_jobs=policy.allow_root_jobs)))


@dataclass(frozen=True)
class Invalid:
    """A SlurmCluster whose spec cannot be used, and why (each problem names its field)."""

    obj: Mapping[str, Any]
    problems: tuple[str, ...]


class Loader:
    """Parses, validates and renders the configs of a SlurmCluster once per spec (uid, generation): every component
    controller reconciles the same object after each change, and they share this work. A new resourceVersion of the
    same generation (a status write, a label) costs only its metadata and status, and shares the rest."""

    def __init__(self, maxsize: int = 1024, *, policy: Policy | None = None) -> None:
        self._maxsize = maxsize
        self.policy = policy or Policy()  # the operator's policy (its flags): what it refuses, and DisableRootJobs
        self._memo: OrderedDict[tuple[str, str], Loaded | Invalid] = OrderedDict()
        self.parsed = 0  # how many times an object was actually parsed (tests check the memo works)

    def load(self, obj: Mapping[str, Any]) -> Loaded | Invalid:
        md = meta_of(obj)
        key = (md.uid, "" if md.generation is None else str(md.generation))
        known = self._memo.get(key) if key[1] else None
        if known is not None:
            self._memo.move_to_end(key)
            rv = resource_version(known.obj)
            if known.obj is obj or (rv and rv == resource_version(obj)):
                return known
            renewed = _renewed(known, obj)
            if renewed is not None:
                self._memo[key] = renewed
                return renewed
        self.parsed += 1
        cluster, problems = check_cluster(obj, policy=self.policy)
        result: Loaded | Invalid
        if cluster is None or problems:
            result = Invalid(obj, tuple(str(p) for p in problems) or ("the spec could not be read",))
        else:
            result = Loaded.of(obj, cluster, self.policy)
        if key[1]:
            self._memo[key] = result
            while len(self._memo) > self._maxsize:
                self._memo.popitem(last=False)
        return result


def _renewed(known: Loaded | Invalid, obj: Mapping[str, Any]) -> Loaded | Invalid | None:
    """`known` for a newer resourceVersion of the same spec: its metadata and status read anew, the parsed spec and
    its configs shared. None when they do not parse (the whole object is checked again then)."""
    if isinstance(known, Invalid):
        return Invalid(obj, known.problems)
    try:
        update = {
            "metadata": ObjectMeta.model_validate(obj.get("metadata") or {}),
            "status": SlurmClusterStatus.model_validate(obj["status"]) if obj.get("status") is not None else None,
        }
    except ValidationError:
        return None
    return Loaded(obj, known.cluster.model_copy(update=update), known.configs)
