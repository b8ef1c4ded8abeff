"""Whatever comes back over HTTP, decoding it ends in typed values or a one-line SlurmError, never anything else."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from slurmctl.slurm import SlurmError
from slurmctl.slurm.client import _classify, _validated
from slurmctl.slurm.models import WireJobs, WireNodes, WirePartitions, WirePings
from test.unit.slurm.replay import recording

MODELS: list[type[BaseModel]] = [WireNodes, WireJobs, WirePartitions, WirePings]

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


def decode(status: int, raw: bytes, model: type[BaseModel]) -> None:
    try:
        answer = _classify("slurmrestd GET /x", status=status, reason="", raw=raw)
        parsed = _validated("slurmrestd GET /x", model, answer)
        parse = getattr(parsed, "parse", None)
        if parse is not None:
            parse()
    except SlurmError as exc:
        assert "\n" not in str(exc) and len(str(exc)) <= 300


@settings(max_examples=300)
@given(
    status=st.integers(min_value=100, max_value=599),
    body=json_values,
    model=st.sampled_from(MODELS),
)
def test_random_json_is_a_value_or_a_slurm_error(status: int, body: Any, model: type[BaseModel]) -> None:
    decode(status, json.dumps(body).encode(), model)


@settings(max_examples=100)
@given(status=st.integers(min_value=100, max_value=599), raw=st.binary(max_size=200), model=st.sampled_from(MODELS))
def test_random_bytes_are_a_value_or_a_slurm_error(status: int, raw: bytes, model: type[BaseModel]) -> None:
    decode(status, raw, model)


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(["nodes_draining", "jobs", "partitions", "ping", "nodes_future"]),
    data=st.data(),
)
def test_near_misses_of_recorded_answers_are_a_value_or_a_slurm_error(name: str, data: st.DataObject) -> None:
    models: dict[str, type[BaseModel]] = {"jobs": WireJobs, "partitions": WirePartitions, "ping": WirePings}
    model = models.get(name, WireNodes)
    decode(200, json.dumps(mutate(recording(name)["json"], data)).encode(), model)
