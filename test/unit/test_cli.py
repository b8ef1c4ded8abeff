"""The console script's user-facing surface."""

from __future__ import annotations

import subprocess
import sys

import pytest

from slurmctl import __version__
from slurmctl.cli import _split_address, main


def test_version_flag_prints_the_package_version() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "slurmctl.cli", "--version"], capture_output=True, text=True, timeout=30, check=False
    )
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"slurmctl {__version__}"


def test_no_command_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "run" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("address", "expected"),
    [(":8080", ("0.0.0.0", 8080)), ("127.0.0.1:9000", ("127.0.0.1", 9000))],
)
def test_bind_addresses_are_parsed_like_kubebuilder_flags(address: str, expected: tuple[str, int]) -> None:
    assert _split_address(address) == expected
