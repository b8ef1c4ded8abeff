"""Node states as the drain gate and the SlurmNodeState condition read them (states Slurm sets, beyond the recorded
ones)."""

from __future__ import annotations

import re

import msgspec
import pytest

from slurmctl.slurm import Node
from slurmctl.slurm.models import WireJobs, decode_hook


def node(*state: str) -> Node:
    return Node(
        name="n1",
        state=frozenset(state),
        reason="",
        reason_set_by="",
        reason_changed_at=None,
        features=(),
        partitions=(),
        cpus=2,
        alloc_cpus=0,
    )


@pytest.mark.parametrize(
    ("state", "display", "busy", "drained"),
    [
        (("IDLE",), "Idle", False, False),
        (("MIXED",), "Mixed", True, False),
        (("ALLOCATED",), "Allocated", True, False),
        (("IDLE", "COMPLETING"), "Completing", True, False),
        (("IDLE", "DRAIN"), "Drained", False, True),
        (("IDLE", "DRAIN", "COMPLETING"), "Draining", True, False),
        (("MIXED", "DRAIN"), "Draining", True, False),
        (("DOWN",), "Down", False, False),
        (("DOWN", "NOT_RESPONDING"), "Down", False, False),
        (("DOWN", "DRAIN"), "DownDrained", False, True),
        (("IDLE", "FAIL"), "Fail", False, False),
        (("ALLOCATED", "FAIL"), "Failing", True, False),
        (("FUTURE",), "Future", False, False),
        (("UNKNOWN", "DRAIN"), "Drained", False, True),
        ((), "Unknown", False, False),
    ],
)
def test_state_words(state: tuple[str, ...], display: str, busy: bool, drained: bool) -> None:
    n = node(*state)
    assert (n.display, n.busy, n.drained) == (display, busy, drained)


@pytest.mark.parametrize(
    "state", [("IDLE",), ("DOWN", "DRAIN"), ("MIXED", "DRAIN"), ("ALLOCATED", "FAIL"), ("FUTURE",), ()]
)
def test_display_is_a_valid_kubernetes_condition_reason(state: tuple[str, ...]) -> None:
    assert re.fullmatch(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?", node(*state).display)


def test_a_job_state_list_splits_into_the_base_state_and_its_flags() -> None:
    answer = {"jobs": [{"job_id": 7, "job_state": ["COMPLETING", "CANCELLED"], "nodes": "n[1-2]"}]}
    (job,) = msgspec.convert(answer, WireJobs, dec_hook=decode_hook).parse()
    assert (job.state, job.state_flags, job.nodes) == ("CANCELLED", frozenset({"COMPLETING"}), ("n1", "n2"))
    assert job.exit_code.return_code is None and job.exit_code.status == ()
