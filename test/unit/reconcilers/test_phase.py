"""The aggregate phase a user sees in `kubectl get slurm`, derived from the components' conditions."""

from __future__ import annotations

from typing import Any

import pytest

from slurmctl.api.v1 import SlurmCluster
from slurmctl.reconcilers.cluster import aggregate_phase as aggregate
from slurmctl.reconcilers.registry import COMPONENTS
from slurmctl.render.kinds import DEPLOYMENT
from test.unit.reconcilers.env import NAME, NS, Env


def cluster(generation: int, conditions: dict[str, tuple[str, int]]) -> SlurmCluster:
    status: dict[str, Any] = {
        "conditions": [
            {
                "type": t,
                "status": s,
                "observedGeneration": g,
                "lastTransitionTime": "2026-01-01T00:00:00Z",
                "reason": "Ready" if s == "True" else "NotReady",
                "message": "",
            }
            for t, (s, g) in conditions.items()
        ]
    }
    return SlurmCluster.model_validate(
        {
            "metadata": {"name": "c", "namespace": "ns", "generation": generation},
            "spec": {"jail": {"volume": {"claimName": "j"}}, "workers": [{"name": "cpu"}]},
            "status": status,
        }
    )


def aggregate_phase(cluster: SlurmCluster, **kwargs: Any) -> str:
    """The phase over the registered components' required conditions, as the cluster reconciler computes it."""
    required = [c.condition for c in COMPONENTS if c.required(cluster)]
    return aggregate(cluster, required=required, **kwargs)


ALL_TRUE = {
    "JailPopulated": ("True", 2),
    "ControllerReady": ("True", 2),
    "WorkersReady": ("True", 2),
    "LoginReady": ("True", 2),
    "RestReady": ("True", 2),
}


def test_no_component_has_reported_yet_is_pending() -> None:
    assert aggregate_phase(cluster(1, {}), previous=None, previous_generation=None) == "Pending"


def test_every_component_ready_at_this_generation_is_available() -> None:
    assert aggregate_phase(cluster(2, ALL_TRUE), previous="Reconciling", previous_generation=2) == "Available"


def test_a_condition_from_an_older_generation_does_not_count_as_ready() -> None:
    stale = {**ALL_TRUE, "WorkersReady": ("True", 1)}
    assert aggregate_phase(cluster(2, stale), previous="Available", previous_generation=1) == "Reconciling"


@pytest.mark.parametrize(
    ("previous", "previous_generation", "expected"),
    [
        ("Available", 2, "Degraded"),  # was ready at this generation, now is not
        ("Degraded", 2, "Degraded"),
        ("Available", 1, "Reconciling"),  # a spec change is rolling out
        ("Reconciling", 2, "Reconciling"),
        (None, None, "Reconciling"),
    ],
)
def test_not_ready_is_degraded_only_when_it_was_available_at_this_generation(
    previous: Any, previous_generation: int | None, expected: str
) -> None:
    not_ready = {**ALL_TRUE, "WorkersReady": ("False", 2)}
    assert (
        aggregate_phase(cluster(2, not_ready), previous=previous, previous_generation=previous_generation) == expected
    )


def test_a_failed_component_is_degraded_at_once_but_progress_is_not() -> None:
    failed = {**ALL_TRUE, "JailPopulated": ("False", 2)}
    c = cluster(2, failed)
    assert c.status is not None
    c.status.conditions[0].reason = "JobFailed"
    assert aggregate_phase(c, previous="Reconciling", previous_generation=2) == "Degraded"
    c.status.conditions[0].reason = "Populating"
    assert aggregate_phase(c, previous="Reconciling", previous_generation=2) == "Reconciling"


def test_the_benchmark_does_not_decide_availability() -> None:
    with_benchmark = {**ALL_TRUE, "BenchmarkScheduled": ("False", 2)}
    assert aggregate_phase(cluster(2, with_benchmark), previous=None, previous_generation=None) == "Available"


async def test_phase_changes_are_announced_once_each_and_degraded_is_a_warning() -> None:
    async with Env() as env:
        await env.available()
        assert env.phase() == "Available"
        env.fake.set_status(*DEPLOYMENT, f"{NAME}-rest", {"availableReplicas": 0}, namespace=NS)
        await env.converge()
        await env.run("cluster")  # again: no second Event for the same phase
        phases = [(t, m) for t, r, m in env.events() if r == "PhaseChanged"]
        assert phases == [("Normal", "phase Reconciling -> Available"), ("Warning", "phase Available -> Degraded")]
