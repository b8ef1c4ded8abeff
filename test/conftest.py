"""What every run of the suite shares: test.timing prints the time each module took (and how much of it went to waiting
for SlurmClusters to become Available) before pytest's final summary line; the order in which pytest-xdist hands the
modules out; and, in a distributed run, the teardown of the machine's pods cluster once every worker is done.

`make test` runs the suite on several xdist workers (`--dist loadscope`: a module's tests stay together, in order, on
one worker). The run lasts as long as its longest chain of real-pods modules, so those go first, longest first; the
modules that run alone (ALONE) come after them, as one unit on one worker (which waits until no other pods module
runs: test/e2e/pods/machine.py); everything else fills the workers around them. A worker gets its next unit only when
it is about to run out, and the alone unit only once no shared pods module is left for it to wait on
(ModuleScheduling): a unit handed out early waits behind a worker's long tests while another worker goes idle.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

from test.nodeids import module_of

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
    "test_upgrade",
    "test_containers",
    "test_pod_security",
)
# The real-pods modules that run while no other one does (marked `alone`: test/e2e/pods/machine.py), and why.
ALONE = {
    f"{PODS}test_nodes.py": "it crashes nodes and lifts node 3's taint",
    f"{PODS}test_operator_pod.py": "the installed operator watches every namespace",
}
# The ALONE modules that need the whole machine quiet: no module of any kind beside them (`alone(quiet=True)`).
QUIET = {
    f"{PODS}test_nodes.py": "its bounds after a node crash do not hold with other modules' load beside it (a worker "
    "'Not responding' past the 90 s bound in the cold CI run on 0513c17)",
}

ALONE_UNIT = "alone"  # the scheduling unit of the ALONE modules


def pytest_configure(config: pytest.Config) -> None:
    """kubectl of the test cluster's own Kubernetes version (hack/control-plane.sh builds it with the API server) goes
    first in PATH, so every kubectl the suite runs speaks that version, never whatever the machine has installed."""
    script = Path(__file__).resolve().parents[1] / "hack" / "control-plane.sh"
    found = subprocess.run(["bash", str(script), "bin-dir"], capture_output=True, text=True, timeout=30, check=False)
    if found.returncode == 0 and found.stdout.strip():
        os.environ["PATH"] = f"{found.stdout.strip()}{os.pathsep}{os.environ.get('PATH', '')}"


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


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The queue's order (`schedule_rank`), which xdist hands out a unit at a time to whichever worker is free; the
    `alone` mark on the modules in ALONE (quiet for those in QUIET). Last, after pytest has grouped the tests by the
    Kubernetes minor they run on (a session-scoped parameter), which this stable sort keeps within each rank."""
    items.sort(key=schedule_rank)
    for item in items:
        if (module := module_of(item.nodeid)) in ALONE:
            item.add_marker(pytest.mark.alone(quiet=module in QUIET))


class ModuleScheduling(LoadScopeScheduling):
    """`--dist loadscope` by module (a class is no unit of its own), with the modules that run alone one unit: one
    worker waits for their turn and runs them one after the other, instead of each of them holding a worker idle.

    Units are handed out just in time. xdist gives a worker its next unit while two of its tests are still to run,
    which for real-pods modules is minutes ahead: the queue's order then decides less than the luck of which worker
    asked first. Here a worker asks when it holds one test still to run (it waits for its successor before running
    it, so it is idle), and the alone unit is passed over while a shared pods module is queued or running on another
    worker: the worker that would wait for it runs other modules meanwhile."""

    def _split_scope(self, nodeid: str) -> str:
        module = module_of(nodeid)
        return ALONE_UNIT if module in ALONE else module

    def _reschedule(self, node: Any) -> None:
        if node.shutting_down:
            return
        if not self.workqueue:
            node.shutdown()
            return
        if self._pending_of(self.assigned_work[node]) <= 1:
            self._assign_work_unit(node)

    def _assign_work_unit(self, node: Any) -> None:
        ready = next((unit for unit in self.workqueue if unit != ALONE_UNIT or self._alone_may_start(node)), None)
        if ready is not None:
            self.workqueue.move_to_end(ready, last=False)
        super()._assign_work_unit(node)

    def _alone_may_start(self, node: Any) -> bool:
        """No shared pods module is queued or unfinished on another worker (the asking worker's own last test runs
        before the unit it gets)."""
        if any(unit.startswith(PODS) for unit in self.workqueue):
            return False
        return not any(
            unit.startswith(PODS) and not all(done.values())
            for other, units in self.assigned_work.items()
            if other is not node
            for unit, done in units.items()
        )


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
