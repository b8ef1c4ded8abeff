"""Each controller sends its own Events (reconcilers/events.py): through the manager's one recorder, so the Event is
the same whichever controller decides it, and logged with that controller's name."""

from __future__ import annotations

import logging

import pytest

from slurmctl.reconcilers.events import Events
from test.unit.reconcilers.env import NAME, Env, spec


async def test_an_event_is_posted_about_the_object_and_logged_with_its_controller(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with Env() as env:
        env.create(spec())
        caplog.set_level(logging.INFO, logger="slurmctl.reconcilers.events")
        events = Events(env.manager, "slurm-nodes")
        events.record(env.cluster(), "Normal", "Resumed", "resumed c-worker-cpu-0 in Slurm")
        events.warn(env.cluster(), "NodeLost", "Kubernetes node node-a has been NotReady for 60s")
        await env.manager.recorder.flush()
        assert env.events() == [
            ("Normal", "Resumed", "resumed c-worker-cpu-0 in Slurm"),
            ("Warning", "NodeLost", "Kubernetes node node-a has been NotReady for 60s"),
        ]
        (posted, *_) = env.fake.of_kind("v1", "Event")
        assert posted["involvedObject"]["kind"] == "SlurmCluster"
        assert posted["involvedObject"]["name"] == NAME
        lines = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "slurmctl.reconcilers.events"]
        assert [level for level, _ in lines] == [logging.INFO, logging.WARNING]
        assert all("controller=slurm-nodes" in line and f"name={NAME}" in line for _, line in lines)
