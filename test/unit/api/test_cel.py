"""The CEL rules in the generated CRD: where each sits, that each is well formed, and that the operator's own
validation refuses every spec the API server refuses (test/api_rules.py; the API server's side is
test/e2e/test_api_cel.py)."""

from __future__ import annotations

import re
from typing import Any

import jsonschema
import pytest

from slurmctl.api.v1 import OPEN_POLICY, check_cluster
from test.api_rules import CASES, RICH_VALID_SPEC, VALID_SPEC, Case
from test.unit.api.helpers import apply_defaults, openapi_schema, schema_nodes, spec_schema

REASONS = {"FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired"}


def _rules(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(schema path with `[]` for list items, the node, one rule) for every rule in the schema."""
    found = [(path, node, rule) for rule in node.get("x-kubernetes-validations", [])]
    for name, sub in node.get("properties", {}).items():
        found += _rules(sub, f"{path}.{name}" if path else name)
    if isinstance(node.get("items"), dict):
        found += _rules(node["items"], f"{path}[]")
    return found


def _generic(field: str) -> str:
    """spec.workers[0].autoscale.min -> spec.workers[].autoscale.min"""
    return re.sub(r"\[\d+\]", "[]", field)


def _cluster(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "slurm.slurmctl.io/v1", "kind": "SlurmCluster", "metadata": {"name": "x"}, "spec": spec}


def test_every_rule_sits_on_its_field_and_has_a_case() -> None:
    """Each rule of the CRD is reported at the field its case names, and the table has no case for a rule that is
    not there: the e2e table then tries every rule against the API server."""
    in_crd = [
        (_generic(path + rule.get("fieldPath", "")), rule["message"])
        for path, _, rule in _rules(openapi_schema())
        if "oldSelf" not in rule["rule"]
    ]
    assert len(in_crd) == len(set(in_crd)), "two rules share a field and a message: the table cannot tell them apart"
    assert set(in_crd) == {(_generic(case.field), case.rule) for case in CASES if case.by == "cel"}


def test_the_transition_rules_are_the_known_ones() -> None:
    """Rules on oldSelf hold only on updates, so no create in the table can break them: each has its own test
    (spec.slurm.version: test/e2e/test_api_cel.py, a downgrade refused)."""
    transitions = [(path, rule["rule"]) for path, _, rule in _rules(openapi_schema()) if "oldSelf" in rule["rule"]]
    assert transitions == [("spec.slurm.version", "self >= oldSelf")]


def test_rules_are_well_formed() -> None:
    for path, node, rule in _rules(openapi_schema()):
        where = f"{path}: {rule['rule']}"
        assert set(rule) <= {"rule", "message", "messageExpression", "fieldPath", "reason"}, where
        assert rule["message"].strip() and "\n" not in rule["message"], where
        # FieldValueDuplicate would print the value instead of the message.
        assert rule["reason"] in REASONS, where
        if "fieldPath" in rule:  # a path of properties below the node (the API server refuses any other)
            assert rule["fieldPath"].startswith("."), where
            target = node
            for name in rule["fieldPath"].split(".")[1:]:
                assert name in target.get("properties", {}), where
                target = target["properties"][name]
        # One transition rule: spec.slurm.version never goes back (a Slurm downgrade); the operator treats no other
        # field as immutable (docs/api-validation.md).
        assert "oldSelf" not in rule["rule"] or path == "spec.slurm.version", where


def test_what_the_rules_iterate_is_bounded() -> None:
    """The API server estimates a rule's cost from these bounds and refuses a CRD whose rules could cost too much."""
    nodes = dict(schema_nodes(openapi_schema()))
    for path in (
        "spec.workers",
        "spec.partitions",
        "spec.partitions[].workers",
        "spec.jail.subMounts",
        "spec.accounting.accounts",
        "spec.accounting.accounts[].qos",
        "spec.accounting.qos",
    ):
        assert isinstance(nodes[path].get("maxItems"), int), path
    for path in (
        "spec.workers[].name",
        "spec.partitions[].name",
        "spec.partitions[].workers[]",
        "spec.jail.subMounts[].mountPath",
        "spec.accounting.accounts[].name",
        "spec.accounting.accounts[].parent",
        "spec.accounting.accounts[].qos[]",
        "spec.accounting.accounts[].defaultQos",
        "spec.accounting.qos[].name",
    ):
        assert isinstance(nodes[path].get("maxLength"), int), path


@pytest.mark.parametrize("spec", [VALID_SPEC, RICH_VALID_SPEC], ids=["valid", "rich"])
def test_the_valid_specs_break_nothing(spec: dict[str, Any]) -> None:
    _, problems = check_cluster(_cluster(spec), policy=OPEN_POLICY)
    assert problems == []
    jsonschema.Draft7Validator(spec_schema()).validate(apply_defaults(spec, spec_schema()))


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_the_operator_refuses_what_the_api_server_refuses(case: Case) -> None:
    """The operator's Problem is on the field the API server names, or inside it (a rule on a list cannot index the
    item at fault), and says the same."""
    _, problems = check_cluster(_cluster(case.spec), policy=OPEN_POLICY)
    if case.operator_says is None:
        assert problems == [], "the operator checks this now: say what it says in test/api_rules.py"
        return
    on_field = [p for p in problems if p.path == case.field or p.path.startswith((f"{case.field}.", f"{case.field}["))]
    assert any(case.operator_says in p.message for p in on_field), problems


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_only_the_named_check_refuses_the_spec(case: Case) -> None:
    """Apart from what the case is about, the spec is valid against the schema: the API server's refusal then comes
    from that rule (a schema error that stops validation would keep the CEL rules from running at all)."""
    defaulted = apply_defaults(case.spec, spec_schema())
    errors = list(jsonschema.Draft7Validator(spec_schema()).iter_errors(defaulted))
    if case.by == "schema":
        assert [".".join(["spec", *map(str, e.absolute_path)]) for e in errors] == [case.field]
    else:
        assert errors == []
