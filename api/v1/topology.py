"""`spec.topology`: Slurm's network topology (topology.conf) as the node labels it is read from, a switch
hierarchy (tree) or blocks of nodes (block).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field, StringConstraints

from .defaults import MAX_TOPOLOGY_LEVELS
from .fields import LIST_SET
from .types import ApiModel

# A Kubernetes label key: an optional DNS-subdomain prefix and "/", then a name of at most 63 characters.
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LabelKey = Annotated[str, StringConstraints(max_length=317, pattern=LABEL_KEY_PATTERN)]


class TopologyTree(ApiModel):
    """A switch hierarchy read from node labels: one level per label, the topmost first."""

    levels: list[LabelKey] = Field(
        min_length=1,
        max_length=MAX_TOPOLOGY_LEVELS,
        description="Node label keys from the top of the network to the leaf switches, e.g. "
        "[topology.kubernetes.io/zone, example.com/switch]: nodes with the same values share a switch.",
        json_schema_extra=LIST_SET,
    )


class TopologyBlock(ApiModel):
    """Blocks of nodes with a fast interconnect (e.g. NVLink domains) read from one node label."""

    label: LabelKey = Field(
        description="Node label key whose value names a node's block, e.g. nvidia.com/gpu.clique. On Slurm 24.11 "
        "it is rendered as a one-level topology/tree (a switch per block): topology/block cannot run with dynamic "
        "nodes there.",
    )


class TopologySpec(ApiModel):
    """Slurm's network topology (topology.conf), rendered from the labels of the Kubernetes nodes the workers run on
    and updated in place when pods move. Exactly one of tree and block."""

    model_config = ConfigDict(**ApiModel.model_config, json_schema_extra={"minProperties": 1, "maxProperties": 1})

    tree: TopologyTree | None = Field(None, description="A switch hierarchy (topology/tree) from node labels.")
    block: TopologyBlock | None = Field(None, description="Blocks of nodes from one node label.")

    @property
    def levels(self) -> tuple[str, ...]:
        """The label keys of the switch levels, top first (a block label is one level)."""
        if self.tree is not None:
            return tuple(self.tree.levels)
        return (self.block.label,) if self.block is not None else ()
