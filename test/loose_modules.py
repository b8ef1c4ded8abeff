"""Importing the project's Python files that are in no package (hack/*.py, images/scripts/*.py): tests call their
functions directly, and one loader keeps them all registered the same way (under the file's stem, in sys.modules,
so that dataclasses and pickling inside them resolve their own module)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def load_module(path: Path) -> ModuleType:
    """The file at `path` imported under its file name."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module
