"""Shared by the API tests: the samples, the CRD schema, and the API server's defaulting done the same way here."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from slurmctl.api.v1 import KIND, crd

REPO = Path(__file__).resolve().parents[3]
SAMPLES = REPO / "config" / "samples"


def sample_clusters() -> dict[str, dict[str, Any]]:
    """Every SlurmCluster in config/samples, by file name."""
    found = {}
    for path in sorted(SAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == KIND:
                found[path.name] = doc
    return found


def openapi_schema() -> dict[str, Any]:
    schema: dict[str, Any] = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def spec_schema() -> dict[str, Any]:
    schema: dict[str, Any] = openapi_schema()["properties"]["spec"]
    return schema


def apply_defaults(value: Any, schema: dict[str, Any]) -> Any:
    """Structural defaulting as the API server does it: top-down, a defaulted object then gets its fields' defaults."""
    value = copy.deepcopy(value)
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for name, sub in properties.items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                value[name] = apply_defaults(value[name], sub)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for name in value:
                if name not in properties:
                    value[name] = apply_defaults(value[name], extra)
    elif isinstance(value, list) and "items" in schema:
        value = [apply_defaults(item, schema["items"]) for item in value]
    return value


def schema_nodes(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every node of a CRD schema with its path (`spec.workers[].name`, `{}` for map values), for tests that look
    a node up by path."""
    found = [(path, node)]
    for name, sub in node.get("properties", {}).items():
        found += schema_nodes(sub, f"{path}.{name}" if path else name)
    if isinstance(node.get("items"), dict):
        found += schema_nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        found += schema_nodes(node["additionalProperties"], f"{path}{{}}")
    return found
