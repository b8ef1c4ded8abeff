"""Whatever comes back over HTTP, decoding it ends in typed values or a one-line SlurmError, never anything else."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmctl.slurm import SlurmError
from slurmctl.slurm.client import _classify, _decoded, _validated
from slurmctl.slurm.models import WireEnvelope, WireJobs, WireNodes, WirePartitions, WirePings
from test.unit.slurm.replay import RECORDED, recording

MODELS: list[type[WireEnvelope]] = [WireNodes, WireJobs, WirePartitions, WirePings]

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)


def mutate(value: Any, data: st.DataObject) -> Any:
    """The recorded answer with some values swapped for random JSON: near-misses of the real shape."""
    if isinstance(value, dict):
        return {
            k: (data.draw(json_values) if data.draw(st.booleans()) and data.draw(st.booleans()) else mutate(v, data))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [mutate(v, data) for v in value]
    return value


def _outcome(decoding: Callable[[], WireEnvelope]) -> tuple[str, Any]:
    """What a decoding ends in: the model (dumped, and parsed where it parses) or the error's class and message."""
    try:
        parsed = decoding()
        parse = getattr(parsed, "parse", None)
        return "value", (msgspec.to_builtins(parsed), parse() if parse is not None else None)
    except SlurmError as exc:
        assert "\n" not in str(exc) and len(str(exc)) <= 300
        return type(exc).__name__, str(exc)


def decode(status: int, raw: bytes, model: type[WireEnvelope]) -> None:
    """`_decoded` (the client's path: a success validated straight from the bytes) ends exactly where classifying the
    whole parsed answer first and validating it then (`_classify`, `_validated`) does: the same model, or the same
    error with the same message."""
    where = "slurmrestd GET /x"
    fast = _outcome(lambda: _decoded(where, model, status=status, reason="", raw=raw))
    slow = _outcome(lambda: _validated(where, model, _classify(where, status=status, reason="", raw=raw)))
    assert fast == slow


@settings(max_examples=300)
@given(
    status=st.integers(min_value=100, max_value=599),
    body=json_values,
    model=st.sampled_from(MODELS),
)
def test_random_json_is_a_value_or_a_slurm_error(status: int, body: Any, model: type[WireEnvelope]) -> None:
    decode(status, json.dumps(body).encode(), model)


@settings(max_examples=100)
@given(status=st.integers(min_value=100, max_value=599), raw=st.binary(max_size=200), model=st.sampled_from(MODELS))
def test_random_bytes_are_a_value_or_a_slurm_error(status: int, raw: bytes, model: type[WireEnvelope]) -> None:
    decode(status, raw, model)


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(["nodes_draining", "jobs", "partitions", "ping", "nodes_future"]),
    data=st.data(),
)
def test_near_misses_of_recorded_answers_are_a_value_or_a_slurm_error(name: str, data: st.DataObject) -> None:
    models: dict[str, type[WireEnvelope]] = {"jobs": WireJobs, "partitions": WirePartitions, "ping": WirePings}
    model = models.get(name, WireNodes)
    decode(200, json.dumps(mutate(recording(name)["json"], data)).encode(), model)


@pytest.mark.parametrize("name", sorted(p.stem for p in RECORDED.glob("*.json")))
def test_every_recorded_answer_decodes_the_same_from_the_bytes(name: str) -> None:
    """Successes, Slurm's errors[] (with 200 or an error status), 401s without a body: as every model."""
    rec = recording(name)
    raw = (json.dumps(rec["json"]) if "json" in rec else rec["text"]).encode()
    for model in MODELS:
        decode(rec["status"], raw, model)
