"""What every run of the suite shares: test.timing prints the time each module took (and how much of it went to waiting
for SlurmClusters to become Available) before pytest's final summary line; the order in which pytest-xdist hands the
modules out; and, in a distributed run, the teardown of the machine's pods cluster once every worker is done.

`make test` runs the suite on several xdist workers (`--dist loadscope`: a module's tests stay together, in order, on
one worker). The run lasts as long as its longest chain of real-pods modules, so those go first, longest first; the
modules that run alone (ALONE) come after them, as one unit on one worker (which waits until no other pods module
runs: test/e2e/pods/machine.py); everything else fills the workers around them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

pytest_plugins = ["test.timing"]

PODS = "test/e2e/pods/"
# The real-pods modules that share the machine, longest first (the timing table's order): the first three start at
# once, and the longest sets the run's length.
LONGEST_FIRST = (
    "test_faults",
    "test_faults_restarts",
    "test_slurm",
    "test_elastic",
    "test_accounting",
    "test_make_run",
    "test_containers",
)
# The real-pods modules that run while no other one does (marked `alone`: test/e2e/pods/machine.py), and why.
ALONE = {
    f"{PODS}test_nodes.py": "it crashes nodes and lifts node 3's taint",
    f"{PODS}test_operator_pod.py": "the installed operator watches every namespace",
}


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def schedule_rank(item: pytest.Item) -> tuple[int, int]:
    """Where a test's module goes in the queue: pods modules sharing the machine (longest first), then the ones that
    run alone, then everything else. A stable sort on it keeps each module's tests together and in order."""
    path = module_of(item.nodeid)
    if not path.startswith(PODS):
        return (2, 0)
    if path in ALONE:
        return (1, 0)
    stem = Path(path).stem
    return (0, LONGEST_FIRST.index(stem) if stem in LONGEST_FIRST else len(LONGEST_FIRST))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The queue's order (`schedule_rank`), which xdist hands out a unit at a time to whichever worker is free; the
    `alone` mark on the modules in ALONE."""
    items.sort(key=schedule_rank)
    for item in items:
        if module_of(item.nodeid) in ALONE:
            item.add_marker(pytest.mark.alone)


class ModuleScheduling(LoadScopeScheduling):
    """`--dist loadscope` by module (a class is no unit of its own), with the modules that run alone one unit: one
    worker waits for their turn and runs them one after the other, instead of each of them holding a worker idle."""

    def _split_scope(self, nodeid: str) -> str:
        module = module_of(nodeid)
        return "alone" if module in ALONE else module


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadScopeScheduling | None:
    return ModuleScheduling(config, log) if config.getvalue("dist") == "loadscope" else None


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The xdist controller tears the machine's cluster down once every worker is done (a plain run's package
    fixture does it itself); what it left behind is reported as an error of test/e2e/pods, so that pytest's summary
    line counts it."""
    config = session.config
    if hasattr(config, "workerinput") or not config.pluginmanager.hasplugin("dsession"):
        return
    # Imported here, not at the top: the pods helpers import test.timing, which must first be imported as the plugin
    # `pytest_plugins` names (assertion rewriting; pytester's inner sessions warn otherwise).
    from test.e2e.pods.machine import SharedCluster, run_root  # noqa: PLC0415

    problems = SharedCluster(run_root(config)).tear_down()
    if problems:
        report = pytest.TestReport(
            nodeid=PODS.rstrip("/"),
            location=(PODS, None, "the machine's pods cluster"),
            keywords={},
            outcome="failed",
            longrepr="\n".join(problems),
            when="teardown",
        )
        config.hook.pytest_runtest_logreport(report=report)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
