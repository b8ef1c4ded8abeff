"""Every benchmark under bench/ imports: `make bench` is not part of `make test`, so a name a refactor moved or removed
would otherwise surface only when someone runs the benchmarks (bench_operator_create and bench_cache_memory lost
`desired_objects` that way once)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

BENCHES = sorted(p.stem for p in (Path(__file__).parents[2] / "bench").glob("bench_*.py"))


def test_there_are_benchmarks() -> None:
    assert len(BENCHES) >= 5, BENCHES


@pytest.mark.parametrize("name", BENCHES)
def test_each_benchmark_imports(name: str) -> None:
    module = importlib.import_module(f"bench.{name}")
    assert callable(getattr(module, "run", None)), f"{name}: no run() for bench/__main__.py to call"
