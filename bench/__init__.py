"""Benchmarks: `python -m bench [FILTER...]` runs every `bench/bench_*.py` module's `run()`.

A module adds a benchmark by defining `run()` (sync or async) that returns or yields `(name, value, unit)`
tuples; the runner prints one `name value unit` line per figure.
"""


def versus(unit: str, value: float, plain: float, *, goal: str = "") -> str:
    """A figure's unit followed by the plain loop's figure and the ratio, so that a reader needs no arithmetic."""
    ratio = f"{value / plain:.3g}x" if plain else "-"
    return f"{unit} | plain loop {plain:.6g} {unit} | ratio {ratio}" + (f" | goal {goal}" if goal else "")


def goal(unit: str, text: str) -> str:
    """A figure that has no plain-loop counterpart: its unit and the goal it is measured against."""
    return f"{unit} | goal {text}"
