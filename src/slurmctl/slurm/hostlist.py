"""Slurm host lists ("node[1-3,07],login") expanded to names, for the answers that carry only the compact form.

Written here rather than imported: the one maintained Python implementation (python-hostlist) is GPL, and the part
Slurm's answers use is small: comma-separated names, each with any number of bracketed ranges whose zero padding is
kept ("n[08-10]" -> n08, n09, n10).
"""

from __future__ import annotations

import itertools
import re

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_BRACKETS = re.compile(r"\[([^\]]*)\]")
# Never expand more than this many names from one expression: a corrupt answer must not eat the operator's memory.
MAX_NAMES = 100_000


class HostlistError(ValueError):
    pass


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"nested brackets in {text!r}")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in {text!r}")
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth != 0:
        raise HostlistError(f"unbalanced '[' in {text!r}")
    parts.append(text[start:])
    return [p for p in (part.strip() for part in parts) if p]


def _range_values(spec: str, whole: str) -> list[str]:
    values: list[str] = []
    for item in spec.split(","):
        match = _RANGE.match(item.strip())
        if match is None:
            raise HostlistError(f"bad range {item!r} in {whole!r}")
        first, last = match.group(1), match.group(2) or match.group(1)
        low, high = int(first), int(last)
        if high < low:
            raise HostlistError(f"descending range {item!r} in {whole!r}")
        if high - low >= MAX_NAMES:
            raise HostlistError(f"range {item!r} in {whole!r} is too large")
        width = len(first) if first.startswith("0") and len(first) > 1 else 0
        values.extend(str(n).zfill(width) for n in range(low, high + 1))
    return values


def _expand_one(name: str) -> list[str]:
    # Literals at even indexes, bracket contents at odd ones: "n[1-2]x[3]" -> ["n", "1-2", "x", "3", ""].
    split = _BRACKETS.split(name)
    pieces = [[part] if i % 2 == 0 else _range_values(part, name) for i, part in enumerate(split)]
    total = 1
    for piece in pieces:
        total *= len(piece)
        if total > MAX_NAMES:
            raise HostlistError(f"{name!r} names more than {MAX_NAMES} hosts")
    return ["".join(combo) for combo in itertools.product(*pieces)]


def expand(hostlist: str) -> tuple[str, ...]:
    """All names in `hostlist`, in order, duplicates kept once; "" gives ()."""
    if "[" not in hostlist and "]" not in hostlist:
        # Most answers' lists (a job on one node, a pending job's ""): the same result without the general walk, which
        # cost a third of decoding 10,000 jobs (bench_slurm_observation).
        plain = dict.fromkeys(name for name in (part.strip() for part in hostlist.split(",")) if name)
        if len(plain) > MAX_NAMES:
            raise HostlistError(f"{hostlist[:80]!r} names more than {MAX_NAMES} hosts")
        return tuple(plain)
    names: dict[str, None] = {}
    for part in _split_top_level(hostlist):
        for name in _expand_one(part):
            names[name] = None
            if len(names) > MAX_NAMES:
                raise HostlistError(f"{hostlist[:80]!r} names more than {MAX_NAMES} hosts")
    return tuple(names)
