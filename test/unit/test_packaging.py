"""The wheel the operator image installs lists its packages by name (pyproject.toml, `[tool.setuptools] packages`):
a new sub-package missing there installs nowhere but in editable checkouts, and the operator pod fails at import."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_of_the_source_tree_ships_in_the_wheel() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    src = ROOT / "src"
    found = {
        ".".join(init.parent.relative_to(src).parts)
        for init in src.rglob("__init__.py")
        if "api" not in init.parent.relative_to(src).parts  # the API ships from api/ (package-dir), checked below
    }
    api = {
        ".".join(("slurmctl", "api", *init.parent.relative_to(ROOT / "api").parts)).rstrip(".")
        for init in (ROOT / "api").rglob("__init__.py")
    }
    missing = (found | api) - listed
    assert not missing, f"packages not in pyproject.toml [tool.setuptools] packages: {sorted(missing)}"
