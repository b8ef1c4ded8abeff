"""The generated CRD: up to date, structural, documented, and in agreement with the models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from slurmctl.api.v1 import OPEN_POLICY, SlurmClusterSpec, SlurmClusterStatus, check_cluster, crd
from slurmctl.api.v1.maintenance import PERCENT_PATTERN
from slurmctl.api.v1.types import QUANTITY_PATTERN
from test.loose_modules import load_module
from test.unit.api.helpers import REPO, apply_defaults, openapi_schema, sample_clusters, schema_nodes, spec_schema

CRD_FILE = REPO / "config" / "crd" / "bases" / "slurm.slurmctl.io_slurmclusters.yaml"
# The only places where the schema lets unknown fields through: Kubernetes objects passed on to pods unchanged.
PASSTHROUGH = {
    "affinity",
    "tolerations[]",
    "topologySpreadConstraints[]",
    "jail.volume.source",
    "jail.subMounts[].volume.source",
}


def _gen_crd_module() -> Any:
    return load_module(REPO / "hack" / "gen_crd.py")


def test_checked_in_crd_equals_a_fresh_generation() -> None:
    gen_crd = _gen_crd_module()
    assert CRD_FILE.read_text() == gen_crd.render(), "run `make manifests` and commit the result"
    assert gen_crd.OUTPUT == CRD_FILE
    # The Helm chart's CRD and RBAC templates come from the same generator, and a stale one fails the check too.
    chart = REPO / "charts" / "slurmctl" / "templates"
    generated = {path for path, _ in gen_crd.outputs()}
    assert {chart / "crd.yaml", chart / "_operator_rules.tpl", chart / "rbac-namespaced.yaml"} <= generated
    assert {REPO / "config" / "rbac" / "role.yaml", REPO / "config" / "cluster-wide" / "cluster_role.yaml"} <= generated
    assert gen_crd.main(["--check"]) == 0


def test_crd_identity_and_printer_columns() -> None:
    manifest = crd()
    names = manifest["spec"]["names"]
    assert manifest["metadata"]["name"] == "slurmclusters.slurm.slurmctl.io"
    assert (names["kind"], names["plural"], names["shortNames"]) == ("SlurmCluster", "slurmclusters", ["slurm"])
    version = manifest["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert list(columns) == ["Phase", "Controller", "Workers", "Login", "Idle", "Alloc", "Drain", "Age"]
    status = openapi_schema()["properties"]["status"]["properties"]
    for name, path in columns.items():
        if name != "Age":
            node: dict[str, Any] = {"properties": status}
            for part in path.removeprefix(".status.").split("."):
                assert part in node.get("properties", {}), f"column {name} reads a field the schema lacks"
                node = node["properties"][part]


def _is_quantity(node: dict[str, Any]) -> bool:
    """An int-or-string node (a quantity, or maxUnavailable's count or percentage), declared untyped."""
    return node.get("pattern") in (QUANTITY_PATTERN, PERCENT_PATTERN) and "type" not in node


def test_schema_is_structural() -> None:
    for path, node in schema_nodes(openapi_schema()):
        assert "$ref" not in node and "$defs" not in node and "title" not in node, path
        assert "allOf" not in node and "anyOf" not in node and "not" not in node, path
        # Kubernetes 1.20's server-side apply treats every list as atomic once int-or-string appears anywhere.
        assert "x-kubernetes-int-or-string" not in node, path
        if _is_quantity(node):
            assert node["x-kubernetes-preserve-unknown-fields"] is True, path
            continue
        assert node.get("type") in {"object", "array", "string", "integer", "number", "boolean"}, path
        for alternative in node.get("oneOf", []):
            assert set(alternative) == {"required"}, path
        assert not ("properties" in node and "additionalProperties" in node), path
        assert node.get("additionalProperties") is not True, path
        if node.get("type") == "array":
            assert isinstance(node.get("items"), dict), path
        if node.get("x-kubernetes-list-type") == "map":
            keys = node["x-kubernetes-list-map-keys"]
            assert set(keys) <= set(node["items"]["required"]), f"{path}: list-map keys must be required"


def test_preserve_unknown_fields_only_on_passthrough_nodes_and_quantities() -> None:
    open_nodes = {
        path.split(".", 1)[1]
        for path, node in schema_nodes(openapi_schema())
        if node.get("x-kubernetes-preserve-unknown-fields") and not _is_quantity(node)
    }
    for path in open_nodes:
        assert any(path == p or path.endswith("." + p) for p in PASSTHROUGH), path
    assert "workers[].tolerations[]" in open_nodes and "jail.volume.source" in open_nodes
    quantities = {path for path, node in schema_nodes(openapi_schema()) if _is_quantity(node)}
    assert {"spec.jail.sharedMemorySize", "spec.workers[].resources.requests{}", "spec.maintenance.maxUnavailable"} <= (
        quantities
    )


def test_named_lists_are_list_maps() -> None:
    nodes = dict(schema_nodes(openapi_schema()))
    for path, key in [
        ("spec.workers", "name"),
        ("spec.partitions", "name"),
        ("spec.jail.subMounts", "name"),
        ("status.conditions", "type"),
        ("status.workers", "name"),
    ]:
        assert nodes[path]["x-kubernetes-list-type"] == "map", path
        assert nodes[path]["x-kubernetes-list-map-keys"] == [key], path


def test_every_field_has_a_one_line_description() -> None:
    for path, node in schema_nodes(openapi_schema()):
        if path.endswith(("[]", "{}")) or path in ("", "metadata", "metadata.name"):
            continue
        description = node.get("description", "")
        assert description.strip(), f"{path} has no description"
        assert "\n" not in description, f"{path} has a multi-line description"


def test_schema_has_nothing_kubernetes_forbids_in_a_crd() -> None:
    """The API server refuses a CRD whose schema has these (e.g. patternProperties, which pydantic writes for a map
    whose keys are constrained): map keys are checked by validation instead."""
    text = json.dumps(openapi_schema())
    for forbidden in ("patternProperties", "propertyNames", "$ref", "definitions", "dependencies", "uniqueItems"):
        assert f'"{forbidden}"' not in text, forbidden


def test_limits_and_patterns_reach_the_schema() -> None:
    nodes = dict(schema_nodes(openapi_schema()))
    assert nodes["metadata.name"]["maxLength"] == 24
    assert nodes["spec.workers[].name"]["maxLength"] == 20
    assert nodes["spec.workers[].name"]["pattern"] == "^[a-z]([-a-z0-9]*[a-z0-9])?$"
    assert (nodes["spec.workers[].size"]["minimum"], nodes["spec.workers[].size"]["maximum"]) == (0, 1000)
    assert nodes["spec.login.service.type"]["enum"] == ["ClusterIP", "NodePort", "LoadBalancer"]
    assert nodes["status.phase"]["enum"] == ["Pending", "Reconciling", "Available", "Degraded", "Failed"]
    assert nodes["spec.jail.sharedMemorySize"]["pattern"] == QUANTITY_PATTERN
    assert nodes["spec.partitions"]["default"] == [{"name": "main", "default": True}]
    assert nodes["spec.controller.size"]["default"] == 1
    assert nodes["spec.accounting.external.port"]["default"] == 3306
    assert nodes["spec.accounting.external.database"]["default"] == "slurm_acct_db"
    assert "default" not in nodes["spec.workers[].image"], "image defaults are resolved by the operator"


def test_status_has_no_defaults() -> None:
    status = openapi_schema()["properties"]["status"]
    assert [path for path, node in schema_nodes(status) if "default" in node] == []


def test_samples_validate_against_the_crd_schema() -> None:
    validator = jsonschema.Draft7Validator(openapi_schema())
    for name, doc in sample_clusters().items():
        errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(doc)]
        assert errors == [], name


@pytest.mark.parametrize(
    "bad",
    [
        {"workers": [{"name": "cpu", "size": -1}]},
        {"workers": [{"name": "Bad_Name"}]},
        {"workers": [{"name": "cpu", "gpus": "8"}]},
        {"workers": []},
        {"jail": {"volume": {"source": {"nfs": {}, "emptyDir": {}}}}},
        {"login": {"service": {"type": "External"}}},
        {"accounting": {"enabled": True, "qos": [{"name": "small", "maxJobsPerUser": -5}]}},
        {"accounting": {"enabled": True, "accounts": [{"name": "a", "maxTRESPerJob": {"cpu": -1}}]}},
        {"accounting": {"enabled": True, "accounts": [{"name": "Physics"}]}},
        {"accounting": {"enabled": True, "accounts": [{"name": "a", "users": ["Alice Smith"]}]}},
        {"containers": {"pyxis": {"enabled": True, "arguments": {"x": "a b"}}}},
        {"workers": [{"name": "cpu", "topologySpreadConstraints": {"maxSkew": 1}}]},
        {"login": {"topologySpreadConstraints": ["kubernetes.io/hostname"]}},
        {"controller": {"topologySpreadConstraints": [{"maxSkew": 1}] * 17}},
    ],
)
def test_schema_and_models_reject_the_same_manifests(bad: dict[str, Any]) -> None:
    """What the schema alone refuses (the CEL rules' cases are test/api_rules.py, checked in test_cel.py)."""
    spec = {"jail": {"volume": {"claimName": "jail"}}, "workers": [{"name": "cpu"}], **bad}
    assert list(jsonschema.Draft7Validator(spec_schema()).iter_errors(spec)), "schema accepted it"
    _, problems = check_cluster(
        {"apiVersion": "slurm.slurmctl.io/v1", "kind": "SlurmCluster", "metadata": {"name": "x"}, "spec": spec},
        policy=OPEN_POLICY,
    )
    assert problems, "the models accepted it"


def test_schema_defaults_equal_model_defaults_for_the_samples() -> None:
    for doc in [{"jail": {"volume": {"claimName": "j"}}, "workers": [{"name": "cpu"}]}] + [
        d["spec"] for d in sample_clusters().values()
    ]:
        defaulted = apply_defaults(doc, spec_schema())
        model = SlurmClusterSpec.model_validate(doc)
        assert SlurmClusterSpec.model_validate(defaulted) == model
        assert apply_defaults(model.to_dict(), spec_schema()) == model.to_dict()


@pytest.mark.parametrize("component", ["workers[]", "controller", "login", "populateJail", "accounting", "rest"])
def test_spread_constraints_have_no_default_so_absent_and_empty_stay_apart(component: str) -> None:
    """Absent means the component's default spread, [] none: a schema default would make the two one."""
    node = dict(schema_nodes(openapi_schema()))[f"spec.{component}.topologySpreadConstraints"]
    assert node["type"] == "array" and "default" not in node and not node.get("nullable")
    spec = {"jail": {"volume": {"claimName": "jail"}}, "workers": [{"name": "cpu"}, {"name": "off"}]}
    spec["workers"][1]["topologySpreadConstraints"] = []
    defaulted = apply_defaults(spec, spec_schema())
    jsonschema.Draft7Validator(spec_schema()).validate(defaulted)
    assert "topologySpreadConstraints" not in defaulted["workers"][0]
    assert defaulted["workers"][1]["topologySpreadConstraints"] == []
    model = SlurmClusterSpec.model_validate(defaulted)
    assert [g.topology_spread_constraints for g in model.workers] == [None, []]
    wire = model.to_dict()
    assert "topologySpreadConstraints" not in wire["workers"][0]
    assert wire["workers"][1]["topologySpreadConstraints"] == []
    # null is how a merge patch removes a field; the API server prunes it (no nullable), the models read it as unset.
    spec["workers"][1]["topologySpreadConstraints"] = None
    assert SlurmClusterSpec.model_validate(spec).workers[1].topology_spread_constraints is None


def test_status_round_trips_through_its_schema() -> None:
    status = {
        "phase": "Degraded",
        "observedGeneration": 2,
        "conditions": [
            {
                "type": "LoginReady",
                "status": "False",
                "reason": "PodsNotReady",
                "message": "1/2 login pods ready",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
        "workers": [{"name": "cpu", "desired": 2, "ready": 2}],
        "controllerReady": "1/1",
        "workersReady": "2/2",
        "loginReady": "1/2",
    }
    jsonschema.Draft7Validator(openapi_schema()["properties"]["status"]).validate(status)
    assert SlurmClusterStatus.model_validate(status).to_dict() == status


def test_kustomization_lists_the_crd() -> None:
    text = (REPO / "config" / "crd" / "kustomization.yaml").read_text()
    assert f"bases/{CRD_FILE.name}" in text
    assert Path(CRD_FILE).exists()
