"""Where a run of the suite spends its time: a table, one line per test module, printed at the end of every pytest run
(before pytest's own summary line, which stays the last line of the output).

The suite's time goes mostly to a few modules that bring up real clusters, and within them mostly to waiting for a
SlurmCluster to become Available; the table says which modules those are and how much of their time was that wait,
so that a slower run points at its cause without rerunning anything with `--durations`.

Columns: the module (its path as pytest names it, relative to the repository), how many of its tests ran (their call
phase: tests skipped or erroring in setup are not counted), its wall time (from the first setup of its first test to
the last teardown of its last test, so module and package fixtures count towards the module that set them up or tore
them down), when it started and ended (seconds since the session began: with pytest-xdist they show how the workers'
queues were filled, which decides the run's length), and the seconds it spent waiting for SlurmClusters to become
Available (the sum over its clusters; blank when it made none). The helpers that wait for Available report their waits
through `record_available`.

Registered by test/conftest.py (`pytest_plugins`); each pytest session (pytester's inner sessions too) gets its own
`Timing`, which reads the clock that `clock` holds when the session is configured (tests substitute a fake one).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass

import pytest

from test.nodeids import module_of

# The time source a session's Timing reads, taken when the session is configured: a test swaps in a fake before it
# starts an inner session, so the table's figures are exact and no test sleeps.
clock: Callable[[], float] = time.monotonic

# Modules faster than this share one "other (N modules)" row: the unit tests are a hundred modules of seconds or less
# each, and one line each would bury the few modules (real clusters) that matter.
FOLD_BELOW = 10.0

_KEY = pytest.StashKey["Timing"]()
# The user property of a teardown report that carries its test's seconds and waits for Available.
_PROPERTY = "slurmctl-timing"

# The configured sessions, innermost last: `record_available` reports to the one running now (a pytester session
# runs inside a test of the outer one, and its waits belong to its own table).
_sessions: list[Timing] = []


@dataclass
class ModuleTime:
    """What one module cost: its tests' protocols (setup, call, teardown) end to end, and its waits for Available."""

    wall: float = 0.0
    tests: int = 0
    available: float | None = None
    start: float | None = None  # the clock when its first test's protocol began
    end: float | None = None  # the clock when its last test's protocol ended

    def add(self, wall: float, available: float | None, started: float) -> None:
        """Add one test's protocol: `wall` seconds from `started`, of which `available` waiting for clusters."""
        self.wall += wall
        if available is not None:
            self.available = (self.available or 0.0) + available
        self.start = _either(min, self.start, started)
        self.end = _either(max, self.end, started + wall)


class Timing:
    """One session's per-module times, kept by hooks around each test's whole protocol."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._began = clock()  # the session's start, which the start and end columns count from
        self._lock = threading.Lock()  # helpers may wait for clusters in threads of their own
        self._current: str | None = None  # the module of the test running now
        self._started: float | None = None  # when that test's protocol began
        self._available: float | None = None  # its waits for Available so far
        self.modules: dict[str, ModuleTime] = {}

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, object, object]:
        """Time the test's setup, call and teardown. Module fixtures are set up in the first test's setup and torn
        down in the last one's teardown, so the sum over a module's tests is its wall time from the first setup to the
        last teardown (pytest runs a module's tests one after another, xdist too: on one worker)."""
        self._started = self._clock()
        self._available = None
        self._current = module_of(item.nodeid)
        try:
            return (yield)
        finally:
            self._current = None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        """The teardown report carries the test's time and its waits for Available, so that the xdist controller,
        which sees only reports, can add them up as a plain run does."""
        report = yield
        if report.when == "teardown" and self._started is not None:
            with self._lock:
                wall = self._clock() - self._started
                report.user_properties.append((_PROPERTY, (wall, self._available, self._started)))
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Count a test once its call phase ran (passed, failed or skipped from its body); add its time at its
        teardown."""
        module = module_of(report.nodeid)
        with self._lock:
            if report.when == "call":
                self.modules.setdefault(module, ModuleTime()).tests += 1
            for name, value in report.user_properties:
                if name == _PROPERTY and isinstance(value, (tuple, list)):
                    wall, available, started = value
                    self.modules.setdefault(module, ModuleTime()).add(wall, available, started)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        """Print the table. pytest calls this before its final summary line, so that line stays the last one."""
        if not self.modules:
            return
        terminalreporter.write_sep("-", "time per module")
        for line in table(self.modules, self._began):
            terminalreporter.write_line(line)

    def record_available(self, seconds: float) -> None:
        with self._lock:
            if self._current is None:
                return  # outside any test's protocol: no module to charge it to
            self._available = (self._available or 0.0) + seconds


def record_available(seconds: float) -> None:
    """Charge `seconds` spent waiting for a SlurmCluster to become Available to the module whose test runs now.
    Called by the helpers that wait for Available; does nothing outside a pytest session with this plugin."""
    if _sessions:
        _sessions[-1].record_available(seconds)


def table(modules: dict[str, ModuleTime], began: float) -> list[str]:
    """The table's lines: a header, one row per module by wall time (slowest first), the modules faster than
    FOLD_BELOW in one row after them (when there are at least two of them), and a total row; start and end count
    from `began`."""
    fold_below = FOLD_BELOW
    rows = sorted(modules.items(), key=lambda kv: (-kv[1].wall, kv[0]))
    fast = [(name, t) for name, t in rows if t.wall < fold_below]
    if len(fast) >= 2:
        rows = [(name, t) for name, t in rows if t.wall >= fold_below]
        rows.append((f"other ({len(fast)} modules)", total(t for _, t in fast)))
    rows.append(("total", total(modules.values())))
    width = max(len("module"), *(len(name) for name, _ in rows))
    lines = [f"{'module':<{width}}  {'tests':>5}  {'wall s':>8}  {'start s':>8}  {'end s':>8}  {'to Available s':>14}"]
    for name, t in rows:
        start, end = (f"{x - began:.1f}" if x is not None else "" for x in (t.start, t.end))
        available = "" if t.available is None else f"{t.available:.1f}"
        lines.append(f"{name:<{width}}  {t.tests:>5}  {t.wall:>8.1f}  {start:>8}  {end:>8}  {available:>14}".rstrip())
    return lines


def total(times: Iterable[ModuleTime]) -> ModuleTime:
    """The sum of several modules' times, from the first one's start to the last one's end; Available stays blank
    when none of them waited for a cluster."""
    out = ModuleTime()
    for t in times:
        out.tests += t.tests
        out.wall += t.wall
        if t.available is not None:
            out.available = (out.available or 0.0) + t.available
        out.start = _either(min, out.start, t.start)
        out.end = _either(max, out.end, t.end)
    return out


def _either(pick: Callable[[float, float], float], a: float | None, b: float | None) -> float | None:
    """`pick` of two times either of which may be unknown yet."""
    return b if a is None else a if b is None else pick(a, b)


def pytest_configure(config: pytest.Config) -> None:
    """Give the session its own Timing (hooks as a registered object, so nested sessions keep separate tables)."""
    timing = Timing(clock)
    config.stash[_KEY] = timing
    _sessions.append(timing)
    config.pluginmanager.register(timing, "slurmctl-timing")


def pytest_unconfigure(config: pytest.Config) -> None:
    timing = config.stash.get(_KEY, None)
    if timing is not None and timing in _sessions:
        _sessions.remove(timing)
