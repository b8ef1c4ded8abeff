"""Metrics go to the registry they are given; importing the runtime registers nothing and switches nothing off."""

from __future__ import annotations

import subprocess
import sys

from prometheus_client import REGISTRY, CollectorRegistry

from slurmctl.runtime.controller import Controller
from slurmctl.runtime.metrics import Metrics, exposition


def test_importing_the_runtime_leaves_the_process_wide_registry_alone() -> None:
    code = (
        "import slurmctl.runtime, prometheus_client as p\n"
        "names = [m.name for m in p.REGISTRY.collect()]\n"
        "assert not [n for n in names if n.startswith(('controller_runtime', 'workqueue', 'rest_client'))], names\n"
        "c = p.Counter('other_total', 'someone else', registry=p.CollectorRegistry())\n"
        "c.inc()\n"
        "assert any(s.name.endswith('_created') for s in c.collect()[0].samples), '_created switched off'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


async def _noop(request: object) -> None:
    return None


def test_a_controller_records_into_the_registry_it_is_given_and_exposition_has_no_created_series() -> None:
    registry = CollectorRegistry()
    Controller("private-metrics", _noop, metrics=Metrics(registry))  # type: ignore[arg-type]
    assert (
        registry.get_sample_value("controller_runtime_max_concurrent_reconciles", {"controller": "private-metrics"})
        == 1
    )
    assert (
        REGISTRY.get_sample_value("controller_runtime_max_concurrent_reconciles", {"controller": "private-metrics"})
        is None
    )
    text = exposition(registry).decode()
    assert "workqueue_adds_total" in text
    assert "_created" not in text
