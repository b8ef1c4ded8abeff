#!/usr/bin/env python3
"""The lock files slurmctl's Python packages are installed from, made from pyproject.toml's ranges.

    .venv/bin/python hack/lock.py update [UV_ARGS...]   `make lock`: re-lock both files with uv
    .venv/bin/python hack/lock.py check                 `make lint`: exit 1, naming the package, on a drifted lock

requirements/dev.lock is what hack/setup.sh installs into .venv (`pip install --require-hashes`, then slurmctl itself
with `--no-deps`): the runtime and dev requirements, the build backend (setuptools, wheel: the editable install is
built without isolation, so nothing unlocked is fetched for it) and pip. requirements/operator.lock is what the
operator image installs: the runtime requirements and the build backend, at dev.lock's versions (uv is given dev.lock
as constraints), so the image runs the versions the tests ran. Both are universal (uv's markers, every file's hash):
the venv is CPython 3.11 on x86_64, the image CPython 3.13.

uv re-uses a lock's existing pins, so `update` moves only what pyproject.toml's change needs; UV_ARGS such as
`--upgrade-package aiohttp` or `--upgrade` move the others. Each lock's header records the requirements it was made
from, which is how `check` tells, offline, that pyproject.toml changed since (a requirement added, removed or given
another range) or that a pin no longer satisfies pyproject.toml (a hand edit).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
DEV_LOCK = "requirements/dev.lock"
OPERATOR_LOCK = "requirements/operator.lock"
# A pin line as uv writes it: `name==version`, then an optional `; marker` and the continuation to its hashes.
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")
_REQUIRES_PYTHON = "# requires-python: "
_REQUIREMENT = "# requirement: "


@dataclass(frozen=True)
class Lock:
    """One lock file, what it is for (its header says it) and what it is locked from."""

    path: str
    purpose: str
    # uv reads pyproject.toml's own requirements from it (annotating them `via slurmctl`), the others from stdin.
    uv_args: tuple[str, ...]
    others: tuple[str, ...]
    # Everything the lock is made from, normalised by packaging (the header's `requirement:` lines).
    requirements: tuple[str, ...]


def locks(root: Path) -> tuple[Lock, Lock]:
    """The two locks, with their requirements as root's pyproject.toml has them now."""
    pyproject = _pyproject(root)
    project = pyproject["project"]
    build = list(pyproject["build-system"]["requires"])
    dev_others = (*build, "pip")
    return (
        Lock(
            DEV_LOCK,
            "what hack/setup.sh installs into .venv",
            ("--extra", "dev"),
            dev_others,
            _normalise([*project["dependencies"], *project["optional-dependencies"]["dev"], *dev_others]),
        ),
        Lock(
            OPERATOR_LOCK,
            "what the operator image installs (hack/images.sh, images/operator/Dockerfile)",
            ("--constraint", DEV_LOCK),
            tuple(build),
            _normalise([*project["dependencies"], *build]),
        ),
    )


def requires_python(root: Path) -> str:
    return str(SpecifierSet(_pyproject(root)["project"]["requires-python"]))


def _pyproject(root: Path) -> dict[str, Any]:
    with (root / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


def _normalise(requirements: list[str]) -> tuple[str, ...]:
    return tuple(sorted({str(Requirement(r)) for r in requirements}, key=lambda r: canonicalize_name(_name(r))))


def _name(requirement: str) -> str:
    return Requirement(requirement).name


def _by_name(requirements: tuple[str, ...] | list[str]) -> dict[str, str]:
    return {canonicalize_name(_name(r)): r for r in requirements}


def header(lock: Lock, python: str) -> str:
    return "".join(
        [
            f"# {lock.path}: {lock.purpose}.\n",
            "# Made by `make lock` (hack/lock.py, with uv) from pyproject.toml's requirements below: do not edit it,\n",
            "# change pyproject.toml and run `make lock` (docs/testing.md).\n",
            f"{_REQUIRES_PYTHON}{python}\n",
            *(f"{_REQUIREMENT}{r}\n" for r in lock.requirements),
        ]
    )


def pins(text: str) -> dict[str, str]:
    """Canonical name → pinned version of every package in a lock's text."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        m = _PIN.match(line)
        if m:
            found[canonicalize_name(m.group(1))] = m.group(2)
    return found


def check(root: Path) -> list[str]:
    """Every way root's locks differ from its pyproject.toml (empty when they match), each naming the package."""
    problems: list[str] = []
    python = requires_python(root)
    pinned: dict[str, dict[str, str]] = {}
    for lock in locks(root):
        path = root / lock.path
        if not path.is_file():
            problems.append(f"{lock.path} is missing: run `make lock`")
            continue
        text = path.read_text()
        comments = text.splitlines()
        made_for = [line.removeprefix(_REQUIREMENT) for line in comments if line.startswith(_REQUIREMENT)]
        made_python = [line.removeprefix(_REQUIRES_PYTHON) for line in comments if line.startswith(_REQUIRES_PYTHON)]
        if made_python != [python]:
            problems.append(
                f"{lock.path} was locked for Python {made_python[0] if made_python else '(none)'}, pyproject.toml "
                f"now requires {python}: run `make lock`"
            )
        now, then = _by_name(lock.requirements), _by_name(made_for)
        changed = {name for name in now.keys() | then.keys() if now.get(name) != then.get(name)}
        for name in sorted(changed):
            if name not in then:
                problems.append(f"{name}: pyproject.toml requires {now[name]}, {lock.path} was not locked with it")
            elif name not in now:
                problems.append(f"{name}: {lock.path} was locked with {then[name]}, pyproject.toml no longer has it")
            else:
                problems.append(f"{name}: pyproject.toml requires {now[name]}, {lock.path} was locked for {then[name]}")
        # What the header does not tell: a pin edited by hand (or a header edited to match pyproject.toml).
        pinned[lock.path] = pins(text)
        for requirement in map(Requirement, lock.requirements):
            name = canonicalize_name(requirement.name)
            if name in changed or (requirement.marker is not None and not requirement.marker.evaluate()):
                continue
            version = pinned[lock.path].get(name)
            if version is None:
                problems.append(f"{name}: pyproject.toml requires {requirement}, {lock.path} pins no version of it")
            elif not requirement.specifier.contains(version, prereleases=True):
                problems.append(f"{name}: {lock.path} pins {version}, outside pyproject.toml's {requirement}")
    dev, operator = pinned.get(DEV_LOCK, {}), pinned.get(OPERATOR_LOCK, {})
    for name in sorted(dev.keys() & operator.keys()):
        if dev[name] != operator[name]:
            problems.append(f"{name}: {OPERATOR_LOCK} pins {operator[name]}, {DEV_LOCK} pins {dev[name]}")
    if problems:
        problems.append("the locks are made from pyproject.toml by `make lock` (docs/testing.md)")
    return problems


def update(root: Path, uv_args: list[str]) -> None:
    """Re-lock both files with the uv installed beside this Python (from dev.lock, so itself pinned by hash)."""
    uv = Path(sys.executable).parent / "uv"
    if not uv.exists():
        uv = Path(shutil.which("uv") or "uv")
    python = requires_python(root)
    # uv resolves for the oldest Python pyproject.toml allows (as pip on it would); the markers keep it universal.
    oldest = next(s.version for s in SpecifierSet(python) if s.operator == ">=")
    for lock in locks(root):  # dev.lock first: operator.lock is constrained to its pins
        path = root / lock.path
        path.parent.mkdir(exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        try:
            if path.exists():
                shutil.copyfile(path, tmp)  # uv keeps the output file's pins unless told to upgrade them
            cmd = [str(uv), "pip", "compile", "--quiet", "--universal", "--python-version", oldest, "--generate-hashes"]
            cmd += ["--no-header", *lock.uv_args, *uv_args, "pyproject.toml", "-", "--output-file", str(tmp)]
            stdin = "".join(f"{r}\n" for r in lock.others)
            subprocess.run(cmd, input=stdin, text=True, check=True, cwd=root)
            text = header(lock, python) + tmp.read_text()
            changed = not path.exists() or path.read_text() != text
            if changed:  # an unchanged lock keeps its mtime: make does not set .venv up again for it
                path.write_text(text)
        finally:
            tmp.unlink(missing_ok=True)
        print(f"lock: {lock.path}: {len(pins(text))} packages{'' if changed else ', unchanged'}")


def main(argv: list[str]) -> int:
    if argv[:1] == ["update"]:
        update(REPO, argv[1:])
        return 0
    if argv == ["check"]:
        problems = check(REPO)
        for problem in problems:
            print(f"lock: {problem}", file=sys.stderr)
        return 1 if problems else 0
    print("usage: hack/lock.py update [UV_ARGS...] | check", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
