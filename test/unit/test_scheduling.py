"""The order in which `make test`'s xdist workers get the suite's modules (test/conftest.py `ModuleScheduling`), run
for real: an inner pytest session on two workers whose modules have the suite's layout (a shared real-pods module,
one that runs alone, unit modules), each test writing when it started and ended on which worker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypedDict

import pytest

pytest_plugins = ["pytester"]

CONFTEST = """
import json
import os
import time
from pathlib import Path
from typing import TypedDict

import pytest

from test import waiting
from test.conftest import pytest_collection_modifyitems, pytest_xdist_make_scheduler  # noqa: F401

LOG = Path(__file__).parent / "log"


@pytest.fixture(autouse=True)
def logged(request):
    def write(event):
        line = {"test": request.node.nodeid, "event": event, "worker": os.environ.get("PYTEST_XDIST_WORKER"),
                "at": time.monotonic()}
        with LOG.open("a") as log:
            log.write(json.dumps(line) + "\\n")

    write("start")
    yield
    write("end")


@pytest.fixture
def until():
    def wait(path, seconds=30):
        waiting.until(Path(path).exists, timeout=seconds, interval=0.05, what=f"{path} to appear")

    return wait
"""

# Three tests: the last one says the module is done.
SHARED = """
from pathlib import Path


def test_one():
    pass


def test_two():
    pass


def test_three():
    (Path(__file__).parents[3] / "shared-done").touch()
"""

ALONE = """
def test_crash_a_node():
    pass


def test_and_another():
    pass
"""

# A unit module that can only end after the shared module did: the other worker stays busy with it meanwhile.
UNIT_WAITING = """
from pathlib import Path


def test_meanwhile(until):
    until(Path(__file__).parents[2] / "shared-done")
"""

UNIT = """
def test_quick():
    pass
"""


class Event(TypedDict):
    test: str
    event: str
    worker: str
    at: float


def events(path: Path) -> list[Event]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_modules_that_run_alone_are_handed_out_once_no_shared_pods_module_is_left(
    pytester: pytest.Pytester,
) -> None:
    """xdist on its own hands the alone unit to the second worker at once (it comes right after the shared module
    in the queue), where it would wait for the shared module to end; here that worker runs the unit modules, and the
    alone unit goes to the worker that ends the shared module, after it."""
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\naddopts = -p no:hypothesispytest\n")
    pods = pytester.mkdir("test").joinpath("e2e", "pods")
    pods.mkdir(parents=True)
    (pods / "test_faults.py").write_text(SHARED)
    (pods / "test_nodes.py").write_text(ALONE)
    unit = pytester.path / "test" / "unit"
    unit.mkdir()
    (unit / "test_a_waiting.py").write_text(UNIT_WAITING)
    for name in ("b", "c", "d"):
        (unit / f"test_{name}.py").write_text(UNIT)

    result = pytester.runpytest("-p", "no:cacheprovider", "-n", "2", "--dist", "loadscope", "--no-loadscope-reorder")

    result.assert_outcomes(passed=9)
    log = events(pytester.path / "log")
    shared_ended = max(e["at"] for e in log if "pods/test_faults.py" in e["test"] and e["event"] == "end")
    alone = [e for e in log if "pods/test_nodes.py" in e["test"]]
    assert all(e["at"] > shared_ended for e in alone), "a module that runs alone started beside a shared one"
    shared_worker = {e["worker"] for e in log if "pods/test_faults.py" in e["test"]}
    assert {e["worker"] for e in alone} == shared_worker, "the alone unit went to the worker that had to wait for it"
