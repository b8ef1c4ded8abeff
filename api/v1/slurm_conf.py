"""slurm.conf text as Slurm's own parser reads it: the keys extraConfig sets, for the contract checks (validation.py)
and the operator's policy (policy.py), which must both see what slurmctld will see, continuations and escapes included.
"""

from __future__ import annotations

import re

# `Key=` anywhere on a line (Slurm allows spaces around `=`, and `+=`, `-=`, `*=`, `/=`); `Include file` is the one
# keyword without `=`.
_CONF_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_]*)\s*[-+*/]?=")
_CONF_INCLUDE = re.compile(r"^\s*include\s", re.IGNORECASE)
_ESCAPE = re.compile(r"\\(.?)", re.DOTALL)
_C_SPACE = " \t\n\v\f\r"  # isspace() in the C locale: what Slurm skips after a continuation's backslash


def _strip_comment(line: str) -> str:
    """The line up to its comment: a `#` after an even number of backslashes (none included) starts one."""
    run = 0
    for index, char in enumerate(line):
        if char == "#" and run % 2 == 0:
            return line[:index]
        run = run + 1 if char == "\\" else 0
    return line


def slurm_conf_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, logical line) as Slurm's parser reads slurm.conf (parse_config.c, _get_next_line).

    Lines end at newlines only. On each line the comment goes first; then an odd number of backslashes at its end
    (trailing blanks aside) joins the next line to it, without the last backslash and without a space; then every
    escape (`\\x`) becomes its character, across the joined line. A comment therefore never continues, and `Plug\\`
    followed by `StackConfig=...` is `PlugStackConfig=...`."""
    lines: list[tuple[int, str]] = []
    logical, start, continuing = "", 0, False
    for number, raw in enumerate(text.split("\n"), start=1):
        if not continuing:
            logical, start = "", number
        line = _strip_comment(raw)
        body = line.rstrip(_C_SPACE)
        continuing = (len(body) - len(body.rstrip("\\"))) % 2 == 1
        if continuing:
            logical += body[:-1]
            continue
        lines.append((start, _ESCAPE.sub(r"\1", logical + line)))
    if continuing:
        lines.append((start, _ESCAPE.sub(r"\1", logical)))
    return lines


def slurm_conf_keys(text: str) -> list[tuple[int, str]]:
    """(line number, key) of every key slurm.conf text sets, as Slurm's parser reads it (`slurm_conf_lines`)."""
    found: list[tuple[int, str]] = []
    for start, line in slurm_conf_lines(text):
        if _CONF_INCLUDE.match(line):
            found.append((start, "Include"))
        found += [(start, key) for key in _CONF_KEY.findall(line)]
    return found
