"""The CronJob's API version follows discovery: batch/v1 where served, batch/v1beta1 only on older clusters."""

from __future__ import annotations

from typing import Any

import pytest

from slurmctl.reconcilers.registry import resolve_kinds
from slurmctl.render.kinds import CRONJOB, JOB, Kind


class Discovery:
    """Stands in for the manager: answers `is_served` from a fixed set of (apiVersion, kind)."""

    def __init__(self, *served: tuple[str, str]) -> None:
        self.served = set(served)
        self.asked: list[tuple[str, str]] = []

    async def is_served(self, api_version: str, kind: str) -> bool:
        self.asked.append((api_version, kind))
        return (api_version, kind) in self.served


@pytest.mark.parametrize(
    ("served", "expected"),
    [
        ([("batch/v1", "CronJob"), ("batch/v1beta1", "CronJob")], "batch/v1"),  # 1.21 to 1.24
        ([("batch/v1", "CronJob")], "batch/v1"),  # 1.25 and later
        ([("batch/v1beta1", "CronJob"), ("batch/v1", "Job")], "batch/v1beta1"),  # 1.20
    ],
)
async def test_cronjob_version_comes_from_discovery(served: list[tuple[str, str]], expected: str) -> None:
    manager: Any = Discovery(*served)
    resolved = await resolve_kinds(manager, [CRONJOB, JOB])
    assert resolved[CRONJOB] == Kind(expected, "CronJob")
    assert resolved[JOB] == JOB
    assert all(kind == "CronJob" for _, kind in manager.asked), "kinds without older versions need no discovery"
