"""Turns on the machine's real-pods cluster (test/e2e/pods/machine.py `Share`), as xdist workers take them: real
flocks on files in a temporary directory, each `Share` its own open file (as each worker process has), threads for
the workers that wait; and the pods conftest's hook, which gives every test of a session its turn."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from test.e2e.pods import conftest as pods_conftest
from test.e2e.pods import machine
from test.e2e.pods.machine import Share, Turn

pytest_plugins = ["pytester"]


def waiting(share: Share, turn: Turn) -> tuple[threading.Thread, threading.Event]:
    """A worker asking for its turn in a thread; the event is set once it has it."""
    got = threading.Event()

    def take() -> None:
        share.take(turn)
        got.set()

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    return thread, got


def test_modules_share_the_machine_and_one_that_runs_alone_waits_for_all_of_them(tmp_path: Path) -> None:
    first, second = Share(tmp_path), Share(tmp_path)
    first.take(Turn.SHARED)
    second.take(Turn.SHARED)  # shared with the first at once
    alone = Share(tmp_path)
    thread, got = waiting(alone, Turn.ALONE)
    assert not got.wait(1.5), "a module ran alone beside two others"
    first.release()
    assert not got.wait(1.5), "a module ran alone beside another"
    second.release()
    assert got.wait(10), "the module to run alone never got its turn"
    thread.join(10)
    assert alone.held
    alone.release()


def test_a_module_waiting_to_run_alone_goes_before_shared_ones_that_ask_after_it(tmp_path: Path) -> None:
    """The turnstile: without it, modules that keep the machine shared one after another would starve it."""
    running = Share(tmp_path)
    running.take(Turn.SHARED)
    alone, later = Share(tmp_path), Share(tmp_path)
    alone_thread, alone_got = waiting(alone, Turn.ALONE)
    assert not alone_got.wait(1.5)
    later_thread, later_got = waiting(later, Turn.SHARED)
    assert not later_got.wait(1.5), "a shared module overtook the one waiting to run alone"
    running.release()
    assert alone_got.wait(10) and not later_got.is_set()
    alone.release()
    assert later_got.wait(10), "the shared module never got its turn after the one that ran alone"
    for thread in (alone_thread, later_thread):
        thread.join(10)
    later.release()


def test_a_turn_that_never_comes_fails_naming_what_it_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(machine, "TURN_TIMEOUT", 1.0)
    holder = Share(tmp_path)
    holder.take(Turn.ALONE)
    with pytest.raises(AssertionError, match="a turn on the machine"):
        Share(tmp_path).take(Turn.SHARED)
    holder.release()
    late = Share(tmp_path)
    late.take(Turn.ALONE)  # the failed attempt left nothing held
    late.release()


def test_other_modules_run_beside_a_module_alone_but_not_beside_a_quiet_one(tmp_path: Path) -> None:
    """Unit, control-plane and host-level modules go on while a real-pods module runs alone; a module that needs the
    machine quiet waits for them and keeps every module out while it runs."""
    alone = Share(tmp_path)
    alone.take(Turn.ALONE)
    beside = Share(tmp_path)
    assert beside.take(Turn.BESIDE) < 1, "a unit module waited for a real-pods module alone"
    alone.release()
    quiet = Share(tmp_path)
    quiet_thread, quiet_got = waiting(quiet, Turn.QUIET)
    assert not quiet_got.wait(1.5), "a quiet module started beside a unit module"
    later_thread, later_got = waiting(Share(tmp_path), Turn.BESIDE)
    beside.release()
    assert quiet_got.wait(10), "the quiet module never got its turn"
    assert not later_got.wait(1.5), "a unit module ran beside the quiet one"
    quiet.release()
    assert later_got.wait(10), "the unit module never got its turn after the quiet one"
    for thread in (quiet_thread, later_thread):
        thread.join(10)


@pytest.mark.parametrize("held", [Turn.ALONE, Turn.QUIET])
def test_the_pods_conftest_gives_tests_outside_the_package_their_turn(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, held: Turn
) -> None:
    """pytest calls a conftest's pytest_runtest_protocol for every test of the session, not only for those below it:
    a unit test runs while a real-pods module runs alone (they waited for it once, two workers idle for minutes) and
    waits while one needs the machine quiet (here until its turn's deadline, which ends the session naming the
    lock). The pods conftest is imported with this module, before pytester's snapshot of sys.modules: imported in the
    test, the inner session would import its own copy, which the monkeypatches do not reach."""
    monkeypatch.setattr(pods_conftest, "run_root", lambda config: tmp_path)
    monkeypatch.setattr(machine, "TURN_TIMEOUT", 2.0)
    holder = Share(tmp_path)
    holder.take(held)
    pods = pytester.mkdir("test").joinpath("e2e", "pods")
    pods.mkdir(parents=True)
    (pods / "conftest.py").write_text("from test.e2e.pods.conftest import pytest_runtest_protocol  # noqa: F401\n")
    (pytester.path / "test" / "test_unit.py").write_text("def test_a_unit_test():\n    pass\n")
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\naddopts = -p no:hypothesispytest\n")
    try:
        result = pytester.runpytest("-p", "no:cacheprovider", "test")
    finally:
        holder.release()
    if held is Turn.ALONE:
        result.assert_outcomes(passed=1)
    else:
        assert result.ret == pytest.ExitCode.INTERNAL_ERROR
        result.stdout.fnmatch_lines(["*timed out after 2s waiting for a turn on the machine (quiet)*"])
