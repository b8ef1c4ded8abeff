"""The cache key of hack/images.sh (hack/image_key.py): it changes exactly when something the build reads changes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from test.loose_modules import load_module
from test.unit.images.conftest import ROOT

ik = load_module(ROOT / "hack" / "image_key.py")

DOCKERFILE = """\
# syntax=docker/dockerfile:1
ARG DEBIAN_IMAGE=localhost/debian:trixie
FROM ${DEBIAN_IMAGE} AS build
COPY --from=other /x /y
COPY native/plugin/ ./
FROM ${DEBIAN_IMAGE}
COPY --chmod=0755 scripts/entry-* \\
    scripts/tool /usr/lib/x/
COPY ["data/conf.txt", "/etc/x/"]
"""


@pytest.fixture
def context(tmp_path: Path) -> Path:
    ctx = tmp_path / "ctx"
    (ctx / "native" / "plugin" / "sub").mkdir(parents=True)
    (ctx / "native" / "plugin" / "a.c").write_text("int a;\n")
    (ctx / "native" / "plugin" / "sub" / "b.h").write_text("#define B\n")
    (ctx / "scripts").mkdir()
    for name in ("entry-one", "entry-two", "tool", "unrelated"):
        (ctx / "scripts" / name).write_text(f"#!/bin/sh\necho {name}\n")
    (ctx / "data").mkdir()
    (ctx / "data" / "conf.txt").write_text("x=1\n")
    (ctx / "images").mkdir()
    (ctx / "images" / "Dockerfile").write_text(DOCKERFILE)
    return ctx


def key(ctx: Path, args: tuple[str, ...] = (), parents: tuple[str, ...] = ()) -> str:
    k, _ = ik.image_key(ctx, ctx / "images" / "Dockerfile", args, parents)
    assert isinstance(k, str)
    return k


def test_copy_sources_skip_other_stages_and_join_continuations() -> None:
    assert ik.copy_sources(DOCKERFILE) == ["native/plugin/", "scripts/entry-*", "scripts/tool", "data/conf.txt"]


def test_files_cover_globs_directories_and_nothing_else(context: Path) -> None:
    _, files = ik.image_key(context, context / "images" / "Dockerfile")

    assert files == [
        "data/conf.txt",
        "native/plugin/a.c",
        "native/plugin/sub",
        "native/plugin/sub/b.h",
        "scripts/entry-one",
        "scripts/entry-two",
        "scripts/tool",
    ]


def test_key_is_stable(context: Path) -> None:
    assert key(context) == key(context)
    assert len(key(context)) == 64


@pytest.mark.parametrize(
    "change",
    [
        lambda c: (c / "native" / "plugin" / "sub" / "b.h").write_text("#define C\n"),
        lambda c: (c / "native" / "plugin" / "new.c").write_text(""),
        lambda c: (c / "scripts" / "entry-three").write_text(""),
        lambda c: (c / "scripts" / "tool").chmod(0o755),
        lambda c: (c / "data" / "conf.txt").unlink() or (c / "data" / "conf.txt").symlink_to("elsewhere"),
        lambda c: (c / "images" / "Dockerfile").write_text(DOCKERFILE + "RUN true\n"),
    ],
    ids=["content", "new-file-in-dir", "new-glob-match", "mode", "symlink", "dockerfile"],
)
def test_key_changes_with_what_the_build_reads(context: Path, change: object) -> None:
    before = key(context)
    change(context)  # type: ignore[operator]
    assert key(context) != before


def test_key_ignores_what_the_build_does_not_read(context: Path) -> None:
    before = key(context)
    (context / "scripts" / "unrelated").write_text("changed\n")
    (context / "README").write_text("x\n")
    os.utime(context / "scripts" / "tool", (0, 0))  # timestamps are not content
    assert key(context) == before


def test_key_changes_with_build_args_and_parents(context: Path) -> None:
    base = key(context)
    assert key(context, args=("DEBIAN_IMAGE=a",)) != base
    assert key(context, args=("DEBIAN_IMAGE=a",)) != key(context, args=("DEBIAN_IMAGE=b",))
    assert key(context, parents=("base=1",)) != key(context, parents=("base=2",))
    assert key(context, args=("A=1", "B=2")) == key(context, args=("B=2", "A=1"))


def test_dockerignore_excludes_like_the_builder(context: Path) -> None:
    before = key(context)
    (context / ".dockerignore").write_text("**/__pycache__\n**/*.so\n!native/plugin/keep.so\n")
    ignored_before = key(context)
    assert ignored_before == before  # the rules alone exclude nothing that exists
    (context / "native" / "plugin" / "__pycache__").mkdir()
    (context / "native" / "plugin" / "__pycache__" / "a.pyc").write_text("x")
    (context / "native" / "plugin" / "chroot.so").write_text("built locally")
    assert key(context) == before
    (context / "native" / "plugin" / "keep.so").write_text("negated: copied")
    assert key(context) != before


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("**/__pycache__", "__pycache__", True),
        ("**/__pycache__", "src/a/__pycache__/x.pyc", True),
        (".venv", ".venv/bin/python", True),
        (".venv", "src/.venv", False),
        ("*.md", "README.md", True),
        ("*.md", "docs/README.md", False),
        ("build", "native/build", False),
        ("images/*/tmp?", "images/a/tmp1/x", True),
    ],
)
def test_ignore_patterns(pattern: str, path: str, expected: bool) -> None:
    assert ik.ignored(path, ik.parse_ignore(pattern)) is expected


def test_missing_source_is_an_error(context: Path) -> None:
    (context / "scripts" / "tool").unlink()
    with pytest.raises(ik.ImageKeyError, match="scripts/tool"):
        key(context)


def test_remote_and_variable_sources_are_refused() -> None:
    with pytest.raises(ik.ImageKeyError):
        ik.copy_sources("FROM x\nADD https://example.org/f /f\n")
    with pytest.raises(ik.ImageKeyError):
        ik.copy_sources("FROM x\nCOPY ${SRC} /f\n")


def test_repository_images_have_keys() -> None:
    """Every Dockerfile under images/ is one the key can be computed for (the CLI as hack/images.sh calls it)."""
    # The operator's and the NCCL benchmark's wheelhouses are made by hack/images.sh before it keys those images; empty
    # ones stand in here (each fetch is keyed by a stamp, so an empty directory never passes for a fetched one).
    for wheels in ("operator-wheels", "nccl-wheels"):
        (ROOT / "build" / wheels).mkdir(parents=True, exist_ok=True)
    # images/pause is the node's (hack/node.sh compiles it on the host into a context of its own), not images.sh's.
    for dockerfile in sorted(d for d in (ROOT / "images").glob("*/Dockerfile") if d.parent.name != "pause"):
        done = subprocess.run(
            [
                sys.executable,
                str(ROOT / "hack" / "image_key.py"),
                "--context",
                str(ROOT),
                "--dockerfile",
                str(dockerfile),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert len(done.stdout.strip()) == 64
