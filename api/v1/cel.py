"""CEL validation rules (`x-kubernetes-validations`): the cross-field checks the API server runs itself, so that
`kubectl apply` refuses a spec that breaks one before the operator ever sees it.

Each rule is declared once, on the model (or list field) it is about, with `validations(...)` in that model's
`json_schema_extra`; schema.py emits it into the CRD with the rest of the model's schema. validation.py keeps its own
check for every rule: a CRD installed by an older release, or an API server that skips the rules, lets such a spec
through, and the operator must still report it (SpecValid=False) rather than act on it. docs/api-validation.md lists
which checks the API server makes and which only the operator can.

How a rule is written, and why:
- The message names the field as the operator's Problem does. `fieldPath` points at the field within the node the
  rule sits on, so the API server's refusal starts with the whole path, indices included
  (`spec.workers[0].autoscale.min: Invalid value: min is more than max`); where the fault is in one item
  of a list the rule iterates, the path is the list's, which no static fieldPath can index.
- Messages are fixed text; a `messageExpression` only picks between fixed texts. The API server prices a message
  built from the object's values (`string(self.min)`, `join`) as if it could be any length, and refuses the CRD
  ("estimated messageExpression cost exceeds budget by factor of more than 100x"). The values at fault are in the
  operator's Problem (the SpecValid condition, `slurmctl render`).
- Only the Kubernetes 1.32 CEL environment (the oldest supported release): the lists library (`sum`), the sets
  extension (`sets.contains`), optional field selection (`self.?field`), nothing newer (`flatten` and `distinct`
  came in 1.34).
- Fields that have a schema default are read directly: the API server applies defaults before it validates. Fields
  without one are guarded with `has()` (or read as `self.?field.orValue(...)`). So is every field a rule reads on a
  node that has a default itself (`accounting: {}`): the API server checks that default against the node's rules as
  it stands, its fields' own defaults not filled in, and refuses the CRD when a rule cannot be evaluated on it.
- Every list or string a rule iterates or compares is bounded in the schema (maxItems, maxLength): the API server
  estimates each rule's worst-case cost from those bounds, times the bounds of the lists the node sits in, and
  refuses a CRD whose rules could cost too much. Nested loops add up fast: prefer `sets.contains` to an `all` in an
  `exists`.
- No `FieldValueDuplicate` reason: the API server prints the value instead of the message for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic.config import JsonDict, JsonValue

RuleReason = Literal["FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired"]


@dataclass(frozen=True)
class Rule:
    """One `x-kubernetes-validations` entry: `rule` must hold for the node it sits on (`self`)."""

    rule: str
    message: str
    message_expression: str | None = None
    field_path: str | None = None
    reason: RuleReason = "FieldValueInvalid"

    def to_schema(self) -> JsonDict:
        """The entry as the CRD holds it."""
        entry: JsonDict = {"rule": self.rule, "message": self.message}
        if self.message_expression is not None:
            entry["messageExpression"] = self.message_expression
        if self.field_path is not None:
            entry["fieldPath"] = self.field_path
        entry["reason"] = self.reason
        return entry


def validations(*rules: Rule) -> JsonDict:
    """The schema fragment carrying `rules`, for a model's or a field's `json_schema_extra`."""
    entries: list[JsonValue] = [rule.to_schema() for rule in rules]
    return {"x-kubernetes-validations": entries}
