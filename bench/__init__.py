"""Benchmarks: `python -m bench [FILTER...]` runs every `bench/bench_*.py` module's `run()`.

A module adds a benchmark by defining `run()` (sync or async) that returns or yields `(name, value, unit)`
tuples; the runner prints one `name value unit` line per figure.
"""
