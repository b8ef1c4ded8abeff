"""hadolint and shellcheck (through hack/images-lint.sh, as `make lint` runs it) find nothing in images/."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from test.unit.images.conftest import ROOT


def lint(images_dir: Path | None = None) -> subprocess.CompletedProcess[str]:
    venv_bin = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{venv_bin}:{os.environ.get('PATH', '')}"}
    if images_dir is not None:
        env["IMAGES_DIR"] = str(images_dir)
    return subprocess.run(
        [str(ROOT / "hack" / "images-lint.sh")], env=env, capture_output=True, text=True, timeout=180, check=False
    )


def test_images_are_lint_clean() -> None:
    done = lint()

    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(list((ROOT / 'images').rglob('Dockerfile')))} Dockerfiles" in done.stdout


def test_findings_fail_the_lint(tmp_path: Path) -> None:
    images = tmp_path / "images"
    shutil.copytree(ROOT / "images", images, symlinks=True)
    with (images / "worker" / "Dockerfile").open("a") as f:
        f.write("RUN apt-get update && apt-get install -y curl\n")
    (images / "scripts" / "lib.sh").write_text((images / "scripts" / "lib.sh").read_text() + "cd $HOME\n")

    done = lint(images)

    assert done.returncode == 1
    assert "DL3008" in done.stdout  # unpinned apt package
    assert "SC2086" in done.stdout  # unquoted expansion
