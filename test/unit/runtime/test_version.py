"""The API server's version, read at start: how a /version answer is read, and which servers the operator refuses."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from slurmctl.runtime import ServerError
from slurmctl.runtime.client import Obj
from slurmctl.runtime.fake import FakeClient
from slurmctl.runtime.version import (
    MIN_KUBERNETES,
    KubernetesVersion,
    check_server_version,
    parse_version,
    version_text,
)

LOGGER = "slurmctl.runtime.version"


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        ({"major": "1", "minor": "37", "gitVersion": "v1.37.2"}, KubernetesVersion(1, 37, "v1.37.2")),
        # GKE and EKS mark minor with a "+"; gitVersion carries the vendor's suffix.
        ({"major": "1", "minor": "32+", "gitVersion": "v1.32.3-eks-1a"}, KubernetesVersion(1, 32, "v1.32.3-eks-1a")),
        ({"major": "1", "minor": "31", "gitVersion": "v1.31.4"}, KubernetesVersion(1, 31, "v1.31.4")),
        ({"major": "1", "minor": "32"}, KubernetesVersion(1, 32)),
        # Empty major/minor (some builds): gitVersion says it.
        ({"major": "", "minor": "", "gitVersion": "v1.33.1+k3s1"}, KubernetesVersion(1, 33, "v1.33.1+k3s1")),
        ({"major": "1", "minor": "x", "gitVersion": "v1.20.15"}, KubernetesVersion(1, 20, "v1.20.15")),
        ({"gitVersion": "1.35.0"}, KubernetesVersion(1, 35, "1.35.0")),
        ({"major": "1", "minor": "", "gitVersion": "unknown"}, None),
        ({}, None),
    ],
)
def test_a_version_answer_is_read_from_major_and_minor_else_from_git_version(
    info: dict[str, Any], expected: KubernetesVersion | None
) -> None:
    assert parse_version(info) == expected


@pytest.mark.parametrize(
    ("version", "supported"),
    [((1, 20), False), ((1, 31), False), ((1, 32), True), ((1, 37), True), ((1, 100), True), ((2, 0), True)],
)
def test_the_minimum_is_1_32_compared_as_numbers(version: tuple[int, int], supported: bool) -> None:
    assert MIN_KUBERNETES == (1, 32)
    assert KubernetesVersion(*version).at_least(MIN_KUBERNETES) is supported


def test_a_version_is_named_as_the_server_spells_it() -> None:
    assert str(KubernetesVersion(1, 31, "v1.31.4")) == "v1.31.4"
    assert str(KubernetesVersion(1, 31)) == "v1.31"
    assert version_text(MIN_KUBERNETES) == "v1.32"


async def test_an_older_api_server_is_refused_with_one_error_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    fake = FakeClient()
    fake.version = {"major": "1", "minor": "31", "gitVersion": "v1.31.4"}
    assert await check_server_version(fake) is False
    (record,) = [r for r in caplog.records if r.name == LOGGER]
    assert record.levelno == logging.ERROR
    assert record.getMessage() == (
        "the API server is older than slurmctl supports kubernetes_version=v1.31.4 minimum=v1.32"
    )


@pytest.mark.parametrize(
    "info",
    [
        {"major": "1", "minor": "32", "gitVersion": "v1.32.0"},
        {"major": "1", "minor": "32+", "gitVersion": "v1.32.9-gke.100"},
        {"major": "1", "minor": "37", "gitVersion": "v1.37.2"},
    ],
)
async def test_a_supported_api_server_lets_the_operator_start(info: Obj, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    fake = FakeClient()
    fake.version = info
    assert await check_server_version(fake) is True
    assert [r.levelno for r in caplog.records if r.name == LOGGER] == [logging.INFO]
    assert f"kubernetes_version={info['gitVersion']}" in caplog.records[-1].getMessage()


async def test_the_fake_answers_a_current_version_by_default() -> None:
    assert await check_server_version(FakeClient()) is True


class _Unreachable(FakeClient):
    async def server_version(self) -> Obj:
        raise ServerError("GET /version: connection refused", status=0, reason="ConnectionFailed")


@pytest.mark.parametrize(
    ("client", "said"),
    [
        (_Unreachable(), "cannot read the API server's version"),
        (FakeClient(), "the API server's version cannot be parsed"),
    ],
)
async def test_a_version_that_cannot_be_read_is_a_warning_not_a_refusal(
    client: FakeClient, said: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An outage at start is the informers' to ride out, as before the check: it must not become a crash loop."""
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    client.version = {"major": "", "minor": "", "gitVersion": ""}
    assert await check_server_version(client) is True
    (record,) = [r for r in caplog.records if r.name == LOGGER]
    assert record.levelno == logging.WARNING
    assert said in record.getMessage()
