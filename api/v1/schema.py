"""The CustomResourceDefinition of SlurmCluster, generated from the models so the two cannot drift apart.

pydantic's JSON Schema is made structural here (see ../shared/notes/crd-from-pydantic.md): definitions are inlined,
`Optional` loses its null branch (absence is how Kubernetes says "unset"), titles go, and defaults come from the
models. Defaults of nested objects are written as `{}`: the API server then fills in the fields' own defaults, so
each default value is stated exactly once.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue, NoDefault
from pydantic_core import PydanticUndefined, core_schema

from .cluster import CRD_NAME, GROUP, KIND, PLURAL, SHORT_NAMES, SINGULAR, VERSION
from .defaults import MAX_CLUSTER_NAME_LENGTH
from .spec import SlurmClusterSpec
from .status import SlurmClusterStatus
from .types import DNS_LABEL_PATTERN

PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase", "description": "Summary of the cluster's state."},
    {
        "name": "Controller",
        "type": "string",
        "jsonPath": ".status.controllerReady",
        "description": "Ready/desired slurmctld pods.",
    },
    {
        "name": "Workers",
        "type": "string",
        "jsonPath": ".status.workersReady",
        "description": "Ready/desired worker pods over all groups.",
    },
    {"name": "Login", "type": "string", "jsonPath": ".status.loginReady", "description": "Ready/desired login pods."},
    {
        "name": "Idle",
        "type": "integer",
        "jsonPath": ".status.slurmNodes.idle",
        "description": "Slurm nodes idle (as Slurm reports them).",
    },
    {
        "name": "Alloc",
        "type": "integer",
        "jsonPath": ".status.slurmNodes.allocated",
        "description": "Slurm nodes running jobs (allocated or mixed).",
    },
    {
        "name": "Drain",
        "type": "integer",
        "jsonPath": ".status.slurmNodes.drained",
        "description": "Slurm nodes drained or draining.",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def _prune_empty(value: Any) -> Any:
    """Drop empty lists and objects: the server treats them as absent, and a default is stated once."""
    if isinstance(value, dict):
        pruned = {key: _prune_empty(item) for key, item in value.items()}
        return {key: item for key, item in pruned.items() if item not in ([], {})}
    if isinstance(value, list):
        return [_prune_empty(item) for item in value]
    return value


def _encode_default(value: Any) -> Any:
    """A default as the schema states it; a nested object whose fields all keep their own defaults becomes `{}`."""
    if isinstance(value, BaseModel):
        try:
            is_empty = value == type(value)()
        except ValueError:  # a model with required fields has no empty form
            is_empty = False
        return {} if is_empty else _prune_empty(value.model_dump(mode="json", by_alias=True, exclude_none=True))
    if isinstance(value, list):
        return [_encode_default(item) for item in value]
    return value


def _fills_anything(value: Any) -> bool:
    """Whether a default would add data the server stores (an empty model's `{}` only matters if fields default)."""
    if isinstance(value, BaseModel):
        value = _prune_empty(value.model_dump(mode="json", by_alias=True, exclude_none=True))
    return value is not None and not (isinstance(value, list | dict) and not value)


class _StructuralSchema(GenerateJsonSchema):
    """pydantic's generator, adjusted where Kubernetes' structural schemas differ from JSON Schema."""

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        json_schema = self.generate_inner(schema["schema"])
        factory = schema.get("default_factory")
        default = factory() if factory is not None else schema.get("default", NoDefault)  # type: ignore[call-arg]
        # None and empty containers mean the same as an absent field: no default keeps stored objects small.
        if default is NoDefault or default is PydanticUndefined or not _fills_anything(default):
            return json_schema
        json_schema["default"] = _encode_default(default)
        return json_schema


def _inline(node: Any, definitions: dict[str, Any]) -> Any:
    """Resolve every $ref into a copy of its definition (field-level keys such as description win); drop titles."""
    if isinstance(node, list):
        return [_inline(item, definitions) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = definitions[node["$ref"].rsplit("/", 1)[-1]]
        siblings = {key: value for key, value in node.items() if key != "$ref"}
        return _inline({**target, **siblings}, definitions)
    result: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            result[key] = {name: _inline(prop, definitions) for name, prop in value.items()}
        elif key not in ("title", "$defs"):
            result[key] = _inline(value, definitions)
    return result


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """A model's structural OpenAPI v3 schema, as the CRD holds it."""
    raw = model.model_json_schema(by_alias=True, mode="validation", schema_generator=_StructuralSchema)
    return dict(_inline(raw, raw.get("$defs", {})))


def openapi_schema() -> dict[str, Any]:
    """The whole SlurmCluster schema: apiVersion, kind, metadata (name limits), spec and status."""
    return {
        "type": "object",
        "description": "SlurmCluster is a Slurm cluster run by slurmctl: a controller, groups of workers, login "
        "nodes and optional accounting, all sharing one root filesystem (the jail).",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": "APIVersion of this object: slurm.slurmctl.io/v1."},
            "kind": {"type": "string", "description": "Kind of this object: SlurmCluster."},
            "metadata": {
                "type": "object",
                "properties": {
                    "name": {
                        "type": "string",
                        "maxLength": MAX_CLUSTER_NAME_LENGTH,
                        "pattern": DNS_LABEL_PATTERN,
                    }
                },
            },
            "spec": model_schema(SlurmClusterSpec),
            "status": model_schema(SlurmClusterStatus),
        },
    }


def crd() -> dict[str, Any]:
    """The CustomResourceDefinition manifest (apiextensions.k8s.io/v1) for SlurmCluster."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": openapi_schema()},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                }
            ],
        },
    }
