"""hack/lock.py check: the locks under requirements/ match pyproject.toml; a drifted one fails, naming the package."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test.loose_modules import REPO, load_module

lock = load_module(REPO / "hack" / "lock.py")


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """pyproject.toml and the locks as the repository has them, to drift."""
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copytree(REPO / "requirements", tmp_path / "requirements")
    return tmp_path


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def test_repository_locks_match_pyproject() -> None:
    assert lock.check(REPO) == []


def test_copy_matches(copy: Path) -> None:
    assert lock.check(copy) == []


def test_changed_range_fails_naming_the_package(copy: Path) -> None:
    edit(copy / "pyproject.toml", '"aiohttp>=3.9,<4"', '"aiohttp>=3.10,<4"')
    problems = lock.check(copy)
    assert (
        "aiohttp: pyproject.toml requires aiohttp<4,>=3.10, requirements/dev.lock was locked for aiohttp<4,>=3.9"
        in (problems)
    )
    assert any(p.startswith("aiohttp: ") and "requirements/operator.lock" in p for p in problems)
    assert "make lock" in problems[-1]


def test_added_requirement_fails(copy: Path) -> None:
    edit(copy / "pyproject.toml", '"PyJWT>=2.8,<3",', '"PyJWT>=2.8,<3",\n    "requests>=2",')
    problems = lock.check(copy)
    assert "requests: pyproject.toml requires requests>=2, requirements/dev.lock was not locked with it" in problems
    assert (
        "requests: pyproject.toml requires requests>=2, requirements/operator.lock was not locked with it" in problems
    )


def test_added_dev_requirement_fails_only_the_dev_lock(copy: Path) -> None:
    edit(copy / "pyproject.toml", '"pytest>=8,<10",', '"pytest>=8,<10",\n    "pytest-cov>=5",')
    problems = lock.check(copy)
    assert [p for p in problems if p.startswith("pytest-cov")] == [
        "pytest-cov: pyproject.toml requires pytest-cov>=5, requirements/dev.lock was not locked with it"
    ]


def test_removed_requirement_fails(copy: Path) -> None:
    edit(copy / "pyproject.toml", '    "tenacity>=8.2,<10",\n', "")
    problems = lock.check(copy)
    assert "tenacity: requirements/dev.lock was locked with tenacity<10,>=8.2, pyproject.toml no longer has it" in (
        problems
    )


def test_changed_build_backend_fails(copy: Path) -> None:
    edit(copy / "pyproject.toml", '"setuptools>=77"', '"setuptools>=78"')
    assert any(p.startswith("setuptools: pyproject.toml requires setuptools>=78") for p in lock.check(copy))


def test_changed_requires_python_fails(copy: Path) -> None:
    edit(copy / "pyproject.toml", 'requires-python = ">=3.11"', 'requires-python = ">=3.12"')
    assert (
        "requirements/dev.lock was locked for Python >=3.11, pyproject.toml now requires >=3.12: run `make lock`"
        in lock.check(copy)
    )


def test_hand_edited_pin_outside_the_range_fails(copy: Path) -> None:
    pinned = lock.pins((copy / "requirements" / "dev.lock").read_text())["pydantic"]
    edit(copy / "requirements" / "dev.lock", f"\npydantic=={pinned} ", "\npydantic==1.10.0 ")
    problems = lock.check(copy)
    assert "pydantic: requirements/dev.lock pins 1.10.0, outside pyproject.toml's pydantic<3,>=2.7" in problems
    assert f"pydantic: requirements/operator.lock pins {pinned}, requirements/dev.lock pins 1.10.0" in problems


def test_missing_lock_fails(copy: Path) -> None:
    (copy / "requirements" / "operator.lock").unlink()
    assert "requirements/operator.lock is missing: run `make lock`" in lock.check(copy)


def test_pins_reads_markers_and_hashes() -> None:
    text = "".join(
        [
            "# requirement: cffi\n",
            "cffi==2.1.1 ; platform_python_implementation != 'PyPy' \\\n",
            "    --hash=sha256:ab\n",
            "rich==15.0.0 \\\n",
        ]
    )
    assert lock.pins(text) == {"cffi": "2.1.1", "rich": "15.0.0"}


def test_cli_exits_1_on_a_drifted_lock(copy: Path) -> None:
    """`make lint` runs the script: it fails there, printing the package, when the lock drifted."""
    shutil.copytree(REPO / "hack", copy / "hack")
    edit(copy / "pyproject.toml", '"msgspec>=0.19,<1"', '"msgspec>=0.19,<2"')
    done = subprocess.run(
        [sys.executable, str(copy / "hack" / "lock.py"), "check"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 1
    assert "lock: msgspec: pyproject.toml requires msgspec<2,>=0.19, requirements/dev.lock was locked for" in (
        done.stderr
    )
