#!/usr/bin/env python3
"""The cache key of one image build: a hash of everything the build reads.

    python3 hack/image_key.py --dockerfile images/x/Dockerfile [--context .] [--build-arg K=V]... [--parent ID]...

prints a sha256 hex digest over the Dockerfile's text, every file its `COPY`/`ADD` instructions take from the build
context (path, type, executable bit, content or link target; directories walked recursively; `.dockerignore` at the
context root applied the way the builder applies it), the build args and the parent images' ids. `--files` prints the
context files instead. Standard library only: hack/images.sh runs it with the system python3, before any venv exists.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import re
import stat
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

# Bump when the meaning of the key changes, so every image is rebuilt once.
KEY_VERSION = 1


class ImageKeyError(Exception):
    """A Dockerfile or context the key cannot be computed for (the build would fail too)."""


def logical_lines(text: str) -> list[str]:
    """Dockerfile instructions with `\\` continuations joined; comments and blank lines dropped."""
    out: list[str] = []
    cur = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not cur and (not line or line.startswith("#")):
            continue
        if cur and line.startswith("#"):  # comment lines inside a continuation are skipped by the builder
            continue
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        cur += line
        if cur.strip():
            out.append(cur.strip())
        cur = ""
    if cur.strip():
        out.append(cur.strip())
    return out


def copy_sources(dockerfile_text: str) -> list[str]:
    """Context paths (possibly globs) that `COPY`/`ADD` read; copies from another stage or image are left out."""
    sources: list[str] = []
    for line in logical_lines(dockerfile_text):
        parts = line.split(None, 1)
        if len(parts) < 2 or parts[0].upper() not in ("COPY", "ADD"):
            continue
        rest = parts[1].strip()
        flags: list[str] = []
        while rest.startswith("--"):
            flag, _, rest = rest.partition(" ")
            flags.append(flag)
            rest = rest.strip()
        if any(f.startswith("--from") for f in flags):
            continue
        if rest.startswith("["):
            try:
                args = json.loads(rest)
            except json.JSONDecodeError as e:
                raise ImageKeyError(f"cannot parse {line!r}: {e}") from e
            if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
                raise ImageKeyError(f"cannot parse {line!r}")
            words = list(args)
        else:
            words = rest.split()
        if len(words) < 2:
            raise ImageKeyError(f"{parts[0]} needs a source and a destination: {line!r}")
        for src in words[:-1]:
            if "://" in src:
                raise ImageKeyError(f"remote sources are not cacheable (nothing is fetched here): {src}")
            if "$" in src:
                raise ImageKeyError(f"variables in COPY sources are not supported by the cache key: {src}")
            sources.append(src)
    return sources


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go filepath.Match plus `**`) as a regex over slash-separated relative paths."""
    i, out = 0, ""
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
            continue
        if pattern.startswith("**", i):
            out += ".*"
            i += 2
            continue
        if c == "*":
            out += "[^/]*"
        elif c == "?":
            out += "[^/]"
        elif c == "[":
            end = pattern.find("]", i + 1)
            if end < 0:
                out += re.escape(c)
            else:
                body = pattern[i + 1 : end]
                if body.startswith("^") or body.startswith("!"):
                    body = "^" + body[1:]
                out += "[" + body.replace("\\", "\\\\") + "]"
                i = end
        elif c == "\\" and i + 1 < len(pattern):
            i += 1
            out += re.escape(pattern[i])
        else:
            out += re.escape(c)
        i += 1
    return re.compile(out + r"\Z")


@dataclass(frozen=True)
class IgnoreRule:
    regex: re.Pattern[str]
    negate: bool


def parse_ignore(text: str) -> list[IgnoreRule]:
    rules: list[IgnoreRule] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        if negate:
            line = line[1:].strip()
        line = os.path.normpath(line).lstrip("/")
        if line in ("", "."):
            continue
        rules.append(IgnoreRule(_pattern_regex(line), negate))
    return rules


def ignored(rel: str, rules: Sequence[IgnoreRule]) -> bool:
    """Whether a context path is excluded: the last rule matching the path or one of its parent directories wins."""
    parts = rel.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    result = False
    for rule in rules:
        if any(rule.regex.match(p) for p in prefixes):
            result = not rule.negate
    return result


def context_files(context: Path, sources: Iterable[str], rules: Sequence[IgnoreRule]) -> list[str]:
    """Sorted relative paths of every file, link and directory the sources take from the context."""
    found: set[str] = set()
    root = context.resolve()
    for src in sources:
        pattern = os.path.normpath(src).lstrip("/")
        if pattern.startswith(".."):
            raise ImageKeyError(f"source outside the build context: {src}")
        matches = sorted(glob.glob(pattern, root_dir=root)) if glob.has_magic(pattern) else [pattern]
        matches = [m for m in matches if os.path.lexists(root / m)]
        if not matches:
            raise ImageKeyError(f"no such file in the build context: {src}")
        for match in matches:
            m = "" if match == "." else match
            full = root / m
            if full.is_dir() and not full.is_symlink():
                for dirpath, dirnames, filenames in os.walk(full):
                    reldir = os.path.relpath(dirpath, root)
                    for name in sorted(dirnames + filenames):
                        rel = os.path.normpath(os.path.join(reldir, name))
                        if not ignored(rel, rules):
                            found.add(rel)
            elif not ignored(m, rules):
                found.add(m)
    return sorted(found)


def file_entry(root: Path, rel: str) -> list[str]:
    full = root / rel
    st = os.lstat(full)
    if stat.S_ISLNK(st.st_mode):
        return [rel, "link", os.readlink(full)]
    if stat.S_ISDIR(st.st_mode):
        return [rel, "dir", oct(stat.S_IMODE(st.st_mode))]
    if not stat.S_ISREG(st.st_mode):
        raise ImageKeyError(f"not a regular file: {rel}")
    digest = hashlib.sha256(full.read_bytes()).hexdigest()
    return [rel, "file", oct(stat.S_IMODE(st.st_mode)), digest]


def image_key(
    context: Path, dockerfile: Path, build_args: Sequence[str] = (), parents: Sequence[str] = ()
) -> tuple[str, list[str]]:
    """(key, context files) for one build."""
    text = dockerfile.read_text()
    ignore_file = context / ".dockerignore"
    rules = parse_ignore(ignore_file.read_text()) if ignore_file.is_file() else []
    files = context_files(context, copy_sources(text), rules)
    root = context.resolve()
    doc = {
        "version": KEY_VERSION,
        "dockerfile": text,
        "build_args": sorted(build_args),
        "parents": list(parents),
        "files": [file_entry(root, f) for f in files],
    }
    blob = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest(), files


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--context", default=".", type=Path)
    ap.add_argument("--dockerfile", required=True, type=Path)
    ap.add_argument("--build-arg", action="append", default=[], dest="build_args")
    ap.add_argument("--parent", action="append", default=[], dest="parents")
    ap.add_argument("--files", action="store_true", help="print the context files the key covers")
    args = ap.parse_args(argv)
    try:
        key, files = image_key(args.context, args.dockerfile, args.build_args, args.parents)
    except (ImageKeyError, OSError) as e:
        print(f"image_key: {args.dockerfile}: {e}", file=sys.stderr)
        return 1
    print("\n".join(files) if args.files else key)
    return 0


if __name__ == "__main__":
    sys.exit(main())
