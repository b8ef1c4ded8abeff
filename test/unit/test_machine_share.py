"""Turns on the machine's real-pods cluster (test/e2e/pods/machine.py `Share`), as xdist workers take them: real
flocks on files in a temporary directory, each `Share` its own open file (as each worker process has), threads for
the workers that wait."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from test.e2e.pods import machine
from test.e2e.pods.machine import Share


def waiting(share: Share, *, exclusive: bool) -> tuple[threading.Thread, threading.Event]:
    """A worker asking for its turn in a thread; the event is set once it has it."""
    got = threading.Event()

    def take() -> None:
        share.take(exclusive=exclusive)
        got.set()

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    return thread, got


def test_modules_share_the_machine_and_one_that_runs_alone_waits_for_all_of_them(tmp_path: Path) -> None:
    first, second = Share(tmp_path), Share(tmp_path)
    first.take(exclusive=False)
    second.take(exclusive=False)  # shared with the first at once
    alone = Share(tmp_path)
    thread, got = waiting(alone, exclusive=True)
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
    running.take(exclusive=False)
    alone, later = Share(tmp_path), Share(tmp_path)
    alone_thread, alone_got = waiting(alone, exclusive=True)
    assert not alone_got.wait(1.5)
    later_thread, later_got = waiting(later, exclusive=False)
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
    holder.take(exclusive=True)
    with pytest.raises(AssertionError, match="a turn on the machine"):
        Share(tmp_path).take(exclusive=False)
    holder.release()
    late = Share(tmp_path)
    late.take(exclusive=True)  # the failed attempt left nothing held
    late.release()
