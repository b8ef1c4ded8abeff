"""Field building blocks the spec modules share: the image field of every component (its default spelled out in the
description), the schema markers that make a list a Kubernetes map keyed by name or a set, and one token of a
slurm.conf line (partition options and plugin arguments are written as such tokens).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, StringConstraints
from pydantic.config import JsonDict

from .defaults import IMAGE_REGISTRY, Component
from .types import NO_WHITESPACE_PATTERN

# One token of a slurm.conf line: whitespace would start the next option, `#` a comment, control characters (NUL
# included) end or corrupt the line.
OptionValue = Annotated[str, StringConstraints(max_length=1024, pattern=r"^[^\s#\x00-\x1f\x7f]+$")]
LIST_MAP_BY_NAME: JsonDict = {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}
LIST_SET: JsonDict = {"x-kubernetes-list-type": "set"}


def image_field(component: Component) -> Any:
    return Field(
        None,
        max_length=512,
        pattern=NO_WHITESPACE_PATTERN,
        description=f"Container image; empty means {IMAGE_REGISTRY}/{component}:<operator version>"
        " (registry and tag from spec.slurm).",
    )
