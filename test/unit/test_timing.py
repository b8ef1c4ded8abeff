"""The per-module timing table (test.timing) as a run of the suite prints it: inner pytest sessions (pytester) with a
fake clock that only the inner tests move, so every figure in the table is exact and nothing sleeps."""

from __future__ import annotations

import re

import pytest

from test import timing
from test.nodeids import module_of

pytest_plugins = ["pytester"]

# The inner session registers the plugin as test/conftest.py does; `advance` moves the fake clock the plugin reads.
CONFTEST = """
import pytest

from test import timing

pytest_plugins = ["test.timing"]


@pytest.fixture(scope="session")
def advance():
    return timing.clock.advance
"""

# Slow: a module fixture that takes 5 s to set up, of which 4 s waiting for a cluster to become Available (twice:
# the column sums the waits), 1 s to tear down, and two tests of 1 s each: 5 + 2 + 1 = 8 s.
SLOW = """
import pytest

from test import timing


@pytest.fixture(scope="module")
def cluster(advance):
    advance(5)
    timing.record_available(3.0)
    timing.record_available(1.0)
    yield
    advance(1)


def test_one(cluster, advance):
    advance(1)


def test_two(cluster, advance):
    advance(1)
"""

# Medium: three tests of 0.5 s each, no cluster (a blank Available).
MEDIUM = """
import pytest


@pytest.mark.parametrize("n", [1, 2, 3])
def test_each(n, advance):
    advance(0.5)
"""


class FakeClock:
    """A clock that moves only when a test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester directory with the plugin registered and a fake clock for the sessions started from it."""
    monkeypatch.setattr(timing, "clock", FakeClock())
    monkeypatch.setattr(timing, "FOLD_BELOW", 1.0)  # the figures below are small ones
    pytester.makeconftest(CONFTEST)
    # The suite's asyncio setting (else a warning each run); without Hypothesis, whose summary hook imports it anew in
    # every inner session (seconds each).
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\naddopts = -p no:hypothesispytest\n")
    return pytester


def table_rows(lines: list[str]) -> dict[str, list[str]]:
    """The table's rows after its header, by module: tests, wall, start, end and (when not blank) Available."""
    start = next(i for i, line in enumerate(lines) if "time per module" in line)
    header = ["module", "tests", "wall", "s", "start", "s", "end", "s", "to", "Available", "s"]
    assert lines[start + 1].split() == header
    rows: dict[str, list[str]] = {}
    for line in lines[start + 2 :]:
        name, _, figures = line.partition("  ")
        rows[name.strip()] = figures.split()
        if name.strip() == "total":
            break
    return rows


def test_the_table_lists_each_module_before_pytests_summary_line(inner: pytest.Pytester) -> None:
    inner.makepyfile(test_slow=SLOW, test_medium=MEDIUM)

    result = inner.runpytest("-q", "-p", "no:cacheprovider")

    result.assert_outcomes(passed=5)
    rows = table_rows(result.outlines)
    assert list(rows) == ["test_slow.py", "test_medium.py", "total"]  # by wall time, slowest first
    # pytest runs test_medium.py first: it starts with the session, and test_slow.py when it ends.
    assert rows["test_slow.py"] == ["2", "8.0", "1.5", "9.5", "4.0"]  # module fixture's setup and teardown included
    assert rows["test_medium.py"] == ["3", "1.5", "0.0", "1.5"]  # made no cluster: blank
    assert rows["total"] == ["5", "9.5", "0.0", "9.5", "4.0"]
    assert re.fullmatch(r"5 passed in [\d.]+s.*", result.outlines[-1])


def test_each_kubernetes_minor_of_a_module_has_a_row_of_its_own(inner: pytest.Pytester) -> None:
    """The control-plane suite runs each test once per minor (ids `kube<minor>`, test/e2e/conftest.py): the table
    says what each minor's run cost, whichever place the minor takes among the test's parameters."""
    inner.makepyfile(
        test_cel="""
import pytest


@pytest.mark.parametrize("minor", ["kube1.37", "kube1.32"])
@pytest.mark.parametrize("rule", ["min", "max"])
def test_rule(rule, minor, advance):
    advance(2 if minor == "kube1.32" else 1)


@pytest.mark.parametrize("name", ["kubelet"])
def test_named_like_a_minor(name, advance):
    advance(1)
"""
    )

    result = inner.runpytest("-q", "-p", "no:cacheprovider")

    result.assert_outcomes(passed=5)
    rows = table_rows(result.outlines)
    assert list(rows) == ["test_cel.py [kube1.32]", "test_cel.py [kube1.37]", "test_cel.py", "total"]
    assert rows["test_cel.py [kube1.32]"][:2] == ["2", "4.0"]
    assert rows["test_cel.py [kube1.37]"][:2] == ["2", "2.0"]
    assert rows["test_cel.py"][:2] == ["1", "1.0"]


@pytest.mark.parametrize(
    ("nodeid", "module"),
    [
        ("test/e2e/test_api_cel.py::test_rule[kube1.32]", "test/e2e/test_api_cel.py [kube1.32]"),
        ("test/e2e/test_api_cel.py::test_rule[kube1.32-elastic-min]", "test/e2e/test_api_cel.py [kube1.32]"),
        ("test/e2e/test_api_cel.py::test_rule[elastic-kube1.37]", "test/e2e/test_api_cel.py [kube1.37]"),
        ("test/e2e/pods/test_slurm.py::test_x", "test/e2e/pods/test_slurm.py"),
        ("test/unit/test_a.py::TestB::test_c[kubelet-1.32]", "test/unit/test_a.py"),
        ("test/e2e/pods", "test/e2e/pods"),
    ],
)
def test_a_node_id_names_its_module_and_the_minor_it_runs_on(nodeid: str, module: str) -> None:
    assert module_of(nodeid) == module


def test_modules_under_the_threshold_share_one_row(inner: pytest.Pytester) -> None:
    quick = """
def test_quick(advance):
    advance(0.25)
"""
    inner.makepyfile(test_slow=SLOW, test_quick_a=quick, test_quick_b=quick)

    result = inner.runpytest("-q")

    rows = table_rows(result.outlines)
    assert list(rows) == ["test_slow.py", "other (2 modules)", "total"]
    # test_quick_a.py and test_quick_b.py run first, one after the other: the row spans both.
    assert rows["other (2 modules)"] == ["2", "0.5", "0.0", "0.5"]
    assert rows["total"] == ["4", "8.5", "0.0", "8.5", "4.0"]
    assert re.fullmatch(r"4 passed in [\d.]+s.*", result.outlines[-1])


def test_failures_and_skips_still_end_with_pytests_summary_line(inner: pytest.Pytester) -> None:
    inner.makepyfile(
        test_mixed="""
import pytest


def test_fails(advance):
    advance(2)
    assert False


@pytest.fixture
def unavailable():
    pytest.skip("not here")


def test_skipped_in_setup(unavailable):
    pass
"""
    )

    result = inner.runpytest("-q", "-ra")

    rows = table_rows(result.outlines)
    assert rows["test_mixed.py"] == ["1", "2.0", "0.0", "2.0"]  # the test skipped before its call did not run
    assert re.fullmatch(r"1 failed, 1 skipped in [\d.]+s.*", result.outlines[-1])


def test_a_run_without_tests_prints_no_table(inner: pytest.Pytester) -> None:
    result = inner.runpytest("-q")

    assert not any("time per module" in line for line in result.outlines)


def test_waits_outside_a_test_are_ignored() -> None:
    # Called by a helper between tests (no module running): nothing to charge it to, and no error.
    session = timing.Timing(FakeClock())
    session.record_available(3.0)
    assert session.modules == {}


def test_a_distributed_run_adds_up_what_its_workers_report(
    inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With pytest-xdist the table is printed by the controller, which sees only the workers' reports: each test's
    teardown report carries its time and its waits for Available. (The workers read the real clock: the Available
    figures are exact, the wall times only counted.)"""
    inner.makeconftest(CONFTEST.replace("return timing.clock.advance", "return lambda seconds: None"))
    inner.makepyfile(test_slow=SLOW, test_medium=MEDIUM)
    monkeypatch.setattr(timing, "FOLD_BELOW", 0.0)  # real seconds, all small: no row folded

    result = inner.runpytest("-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadscope")

    result.assert_outcomes(passed=5)
    rows = table_rows(result.outlines)
    assert set(rows) == {"test_slow.py", "test_medium.py", "total"}
    assert rows["test_slow.py"][0] == "2" and rows["test_slow.py"][4] == "4.0"
    assert rows["test_medium.py"][0] == "3" and len(rows["test_medium.py"]) == 4  # made no cluster: blank
    assert rows["total"][0] == "5" and rows["total"][4] == "4.0"
    # Side by side on two workers: each module starts after the session began, and ends before the run's end.
    starts = {name: float(rows[name][2]) for name in rows}
    ends = {name: float(rows[name][3]) for name in rows}
    assert all(0.0 <= starts[name] <= ends[name] <= ends["total"] for name in rows)
    # (The workers warn that test.timing, imported by the outer session, is not assertion-rewritten.)
    assert re.fullmatch(r"5 passed(, \d+ warnings?)? in [\d.]+s.*", result.outlines[-1])
