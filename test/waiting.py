"""Waiting in tests that run real processes: `until` waits for a change with a deadline, `holds` checks that nothing
changes during a window (where the waiting itself is the behaviour under test)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def until(probe: Callable[[], T | None], *, timeout: float, what: str, interval: float = 1.0) -> T:
    """Poll `probe` until it returns something truthy; fail naming `what` and the last value at the deadline."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = probe()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last value: {last!r}")
        time.sleep(interval)


def holds(
    invariant: Callable[[], bool],
    *,
    what: str,
    seconds: float | None = None,
    while_: Callable[[], bool] | None = None,
    timeout: float = 300,
    interval: float = 2.0,
) -> None:
    """Check that `invariant` stays true for `seconds`, or for as long as `while_()` is true (bounded by `timeout`),
    sampling every `interval`; fail at the first sample where it is false. Here the waiting is the behaviour under
    test (nothing may change during the window), unlike `until`, which waits for a change."""
    window_end = time.monotonic() + (seconds or 0.0)

    def window_over() -> bool:
        if not invariant():
            # With `while_`, the window may have closed since the last sample (a job ended, then its pod went within
            # one interval): only a window still open after the invariant failed is a breach.
            assert while_ is not None and not while_(), what
            return True
        return not while_() if while_ is not None else time.monotonic() >= window_end

    until(window_over, timeout=timeout if while_ is not None else (seconds or 0.0), what=what, interval=interval)
