"""The SlurmCluster resource as a whole: identity of the API, object metadata, and parsing of live objects."""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import ConfigDict, Field

from .spec import SlurmClusterSpec
from .status import SlurmClusterStatus
from .types import ApiModel

GROUP: Final = "slurm.slurmctl.io"
VERSION: Final = "v1"
API_VERSION: Final = "slurm.slurmctl.io/v1"  # f"{GROUP}/{VERSION}", spelled out for the Literal below
KIND: Final = "SlurmCluster"
PLURAL: Final = "slurmclusters"
SINGULAR: Final = "slurmcluster"
SHORT_NAMES: Final = ("slurm",)
CRD_NAME: Final = f"{PLURAL}.{GROUP}"


class ObjectMeta(ApiModel):
    """The metadata fields the operator reads; everything else the server adds is kept as is."""

    model_config = ConfigDict(extra="allow")

    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    generation: int | None = None
    resource_version: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class SlurmCluster(ApiModel):
    """A Slurm cluster run by slurmctl; `SlurmCluster.model_validate(live_object)` reads one from the API server."""

    api_version: Literal["slurm.slurmctl.io/v1"] = API_VERSION
    kind: Literal["SlurmCluster"] = KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: SlurmClusterSpec
    status: SlurmClusterStatus | None = None

    @property
    def key(self) -> tuple[str, str]:
        """(namespace, name), the key reconcile requests use."""
        return self.metadata.namespace or "", self.metadata.name or ""

    def spec_dict(self) -> dict[str, Any]:
        """The spec in wire form (camelCase, no None values), e.g. to hash it or to render from it."""
        return self.spec.to_dict()
