#!/usr/bin/env python3
"""A Slurm line's Dockerfile, from the repository's Dockerfile and the line's pin file.

    python3 hack/image_line.py PINS get suite|tag-suffix|no-valid-until
    python3 hack/image_line.py PINS render DOCKERFILE [OUT]

The Dockerfiles under images/ carry the default line's pins (Slurm 24.11 on Debian 13, enforced by hadolint). Another
line (images/lines/<line>.pins) is the same Dockerfiles with every apt `package=version` pin replaced by the pin file's
version and the file's renames applied: one recipe per image, one list of versions per line, and the default line's
Dockerfiles (and so their cache keys) untouched. `render` fails, naming them, when the Dockerfile pins a package the pin
file does not, so a package added to a Dockerfile cannot silently stay at the default line's version. `get` prints a
setting (`no-valid-until`: "true" or "false"). Standard library only: hack/images.sh runs it with the system python3.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

# `name=version` words of an `apt-get install` (options such as --chmod=0644 start with '-', so they never match).
_PIN = re.compile(r"(?<![\w.+=-])([a-z0-9][a-z0-9.+-]*)=([0-9][^\s\\]*)")
_SETTINGS = ("suite", "tag-suffix", "no-valid-until")


class LineError(Exception):
    """A pin file or Dockerfile this line cannot be built from."""


@dataclass
class Line:
    settings: dict[str, str] = field(default_factory=dict)
    renames: list[tuple[str, str]] = field(default_factory=list)
    pins: dict[str, str] = field(default_factory=dict)


def parse(text: str, name: str = "pins") -> Line:
    line = Line(settings={"no-valid-until": "false"})
    for number, raw in enumerate(text.splitlines(), 1):
        words = raw.split("#", 1)[0].split()
        if not words:
            continue
        where = f"{name}:{number}"
        if len(words) == 1 and "=" in words[0]:
            package, version = words[0].split("=", 1)
            if not package or not version or package in line.pins:
                raise LineError(f"{where}: bad or repeated pin {words[0]!r}")
            line.pins[package] = version
        elif words[0] == "rename" and len(words) == 3:
            line.renames.append((words[1], words[2]))
        elif words[0] == "no-valid-until" and len(words) == 1:
            line.settings["no-valid-until"] = "true"
        elif words[0] in ("suite", "tag-suffix") and len(words) == 2:
            line.settings[words[0]] = words[1]
        else:
            raise LineError(f"{where}: not a setting, rename or PACKAGE=VERSION: {raw.strip()!r}")
    for needed in ("suite", "tag-suffix"):
        if needed not in line.settings:
            raise LineError(f"{name}: no {needed}")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", line.settings["tag-suffix"]):
        raise LineError(f"{name}: tag-suffix {line.settings['tag-suffix']!r} cannot be part of an image tag")
    return line


def render(line: Line, dockerfile: str, name: str = "Dockerfile") -> str:
    """The Dockerfile for the line: its pins replaced, its renames applied."""
    missing = sorted({m.group(1) for m in _PIN.finditer(dockerfile) if m.group(1) not in line.pins})
    if missing:
        raise LineError(f"{name}: no pin for {', '.join(missing)} in the line's pin file")
    out = _PIN.sub(lambda m: f"{m.group(1)}={line.pins[m.group(1)]}", dockerfile)
    for old, new in line.renames:
        out = out.replace(old, new)
    return out


def main(argv: list[str]) -> int:
    try:
        if len(argv) == 3 and argv[1] == "get" and argv[2] in _SETTINGS:
            print(parse(Path(argv[0]).read_text(), argv[0]).settings[argv[2]])
            return 0
        if len(argv) in (3, 4) and argv[1] == "render":
            line = parse(Path(argv[0]).read_text(), argv[0])
            text = render(line, Path(argv[2]).read_text(), argv[2])
            if len(argv) == 4:
                Path(argv[3]).parent.mkdir(parents=True, exist_ok=True)
                Path(argv[3]).write_text(text)
            else:
                sys.stdout.write(text)
            return 0
    except (LineError, OSError) as exc:
        print(f"image_line: {exc}", file=sys.stderr)
        return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
