"""A problem with a SlurmCluster: the field path it is about and what is wrong there (validation.py, policy.py)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pydantic import ValidationError


@dataclass(frozen=True, order=True)
class Problem:
    """One thing wrong with a SlurmCluster: the field path (`spec.workers[0].name`) and what is wrong there."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def format_path(location: Iterable[str | int]) -> str:
    """('spec', 'workers', 0, 'name') -> 'spec.workers[0].name'."""
    text = ""
    for part in location:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def problems_from_error(error: ValidationError, *, prefix: Sequence[str | int] = ()) -> list[Problem]:
    """pydantic's errors as problems, with camelCase paths as the user wrote them."""
    problems = []
    for item in error.errors(include_url=False, include_input=False):
        message = item["msg"]
        problems.append(Problem(format_path([*prefix, *item["loc"]]) or "<root>", message[:1].lower() + message[1:]))
    return sorted(set(problems), key=lambda p: (p.path, p.message))


def duplicates(names: Sequence[str], path: str, what: str) -> list[Problem]:
    """A problem for each entry of a list whose name an earlier entry has (the list at `path`, of `what`s)."""
    first: dict[str, int] = {}
    problems = []
    for index, name in enumerate(names):
        if name in first:
            problems.append(Problem(f"{path}[{index}].name", f'duplicate {what} "{name}" (also {path}[{first[name]}])'))
        else:
            first[name] = index
    return problems
