"""A Slurm line's Dockerfiles (hack/image_line.py): the repository's recipe with the line's pins, never a default-line
version left behind, and the default line's Dockerfiles untouched."""

from __future__ import annotations

import subprocess
import sys

import pytest

from test.loose_modules import load_module
from test.unit.images.conftest import ROOT

il = load_module(ROOT / "hack" / "image_line.py")
PINS_2605 = ROOT / "images" / "lines" / "26.05.pins"
SLURM_IMAGES = ("slurm-base", "controller", "worker", "login", "accounting", "rest", "jail", "populate_jail")

PINS = """\
suite forky
no-valid-until
tag-suffix -slurm26.05
rename job_container_jail.so namespace_jail.so
slurmd=26.05.5-1
crun=1.28-1  # a comment
"""
DOCKERFILE = """\
FROM ${SLURM_BASE}
RUN apt-get update \\
    && apt-get install -y --no-install-recommends crun=1.21-1 slurmd=24.11.5-4+deb13u1 \\
    && rm -rf /var/lib/apt/lists/*
COPY --chmod=0755 job_container_jail.so /x/
"""


def test_render_takes_every_pin_from_the_line_and_applies_the_renames() -> None:
    out = il.render(il.parse(PINS), DOCKERFILE)
    assert "crun=1.28-1 slurmd=26.05.5-1" in out
    assert "COPY --chmod=0755 namespace_jail.so /x/" in out
    assert "24.11" not in out and "1.21-1" not in out


def test_a_package_the_line_does_not_pin_is_an_error_naming_it() -> None:
    with pytest.raises(il.LineError, match="no pin for tini"):
        il.render(il.parse(PINS), DOCKERFILE.replace("slurmd=", "tini=0.19.0-3+b8 slurmd="))


@pytest.mark.parametrize(
    "bad", ["suite forky\n", "tag-suffix -x\n", PINS + "slurmd=1\n", PINS + "what is this\n", PINS + "tag-suffix a/b\n"]
)
def test_a_bad_pin_file_is_refused(bad: str) -> None:
    with pytest.raises(il.LineError):
        il.parse(bad)


def test_the_settings_hack_images_sh_reads() -> None:
    def get(name: str) -> str:
        args = [sys.executable, str(ROOT / "hack" / "image_line.py"), str(PINS_2605), "get", name]
        return subprocess.run(args, capture_output=True, text=True, check=True).stdout.strip()

    assert (get("suite"), get("tag-suffix"), get("no-valid-until")) == ("forky", "-slurm26.05", "true")


@pytest.mark.parametrize("image", SLURM_IMAGES)
def test_every_slurm_image_renders_for_26_05_with_no_24_11_version_left(image: str) -> None:
    dockerfile = ROOT / "images" / image / "Dockerfile"
    before = dockerfile.read_text()
    out = il.render(il.parse(PINS_2605.read_text()), before)
    assert "deb13" not in out and "24.11" not in out and "job_container_jail.so" not in out
    assert dockerfile.read_text() == before
