"""Golden files: every rendered object and config file of each sample, compared as text.

After an intended change, regenerate with `UPDATE_GOLDEN=1 .venv/bin/pytest test/unit/render` and review the diff.
"""

from __future__ import annotations

import difflib
import os

import pytest

from test.unit.render.samples import GOLDEN, VARIANTS, all_objects, golden_files, object_key, sample

UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_rendered_output_matches_the_golden_files(variant: str) -> None:
    rendered = golden_files(sample(variant))
    directory = GOLDEN / variant
    if UPDATE:
        directory.mkdir(parents=True, exist_ok=True)
        for stale in set(p.name for p in directory.iterdir()) - set(rendered):
            (directory / stale).unlink()
        for name, text in rendered.items():
            (directory / name).write_text(text)
    on_disk = {p.name: p.read_text() for p in directory.iterdir()} if directory.is_dir() else {}
    problems = [f"{name}: rendered but no golden file" for name in sorted(set(rendered) - set(on_disk))]
    problems += [f"{name}: golden file but no longer rendered" for name in sorted(set(on_disk) - set(rendered))]
    for name in sorted(set(rendered) & set(on_disk)):
        if rendered[name] != on_disk[name]:
            diff = difflib.unified_diff(
                on_disk[name].splitlines(keepends=True),
                rendered[name].splitlines(keepends=True),
                fromfile=f"golden/{variant}/{name}",
                tofile="rendered",
            )
            problems.append("".join(diff))
    assert not problems, "\n".join(problems) + "\n(regenerate with UPDATE_GOLDEN=1 if the change is intended)"


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_object_has_its_own_golden_file(variant: str) -> None:
    keys = [object_key(obj) for obj in all_objects(sample(variant))]
    assert len(keys) == len(set(keys))
