"""Discover `bench_*` modules next to this file, run each, print `name value unit` lines."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import logging
import pkgutil
import sys
import traceback
from collections.abc import Iterable
from pathlib import Path

Figure = tuple[str, float, str]


def discover(filters: list[str]) -> list[str]:
    names = sorted(m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if m.name.startswith("bench_"))
    return [n for n in names if not filters or any(f in n for f in filters)]


def run_module(name: str) -> Iterable[Figure]:
    module = importlib.import_module(f"bench.{name}")
    result = module.run()
    if inspect.iscoroutine(result):
        result = asyncio.run(result)
    return list(result)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("filters", nargs="*", help="run only modules whose name contains one of these")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    failed = 0
    for name in discover(args.filters):
        try:
            for figure, value, unit in run_module(name):
                print(f"{figure} {value:.6g} {unit}", flush=True)
        except Exception as exc:  # one broken benchmark must not hide the others' figures
            print(f"# {name} failed: {exc!r}", file=sys.stderr, flush=True)
            traceback.print_exc()
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
