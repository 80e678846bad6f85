"""A slow check is called an endless loop only when it makes no progress, and limits scale with
the machine's load."""

import itertools
import time

import pytest

from course import impl


def run_past_the_limit(monkeypatch, calls):
    monkeypatch.setattr(impl, "machine_scale", lambda: 1.0)
    monkeypatch.setattr(impl, "_calls_so_far", calls)
    with pytest.raises(impl.CheckTimeout) as stopped, impl.time_limit(0.2, "this check"):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(0.01)
    return str(stopped.value)


def test_a_check_stuck_in_one_call_is_asked_about_an_endless_loop(monkeypatch):
    said = run_past_the_limit(monkeypatch, lambda: 7)  # no call answered since the start
    assert "without progress" in said and "endless loop" in said, said


def test_a_check_still_getting_answers_is_called_slow_not_endless(monkeypatch):
    answered = itertools.count()
    said = run_past_the_limit(monkeypatch, lambda: next(answered))
    assert "still making progress" in said and "endless" not in said, said


def test_the_limit_grows_with_the_load_per_core(monkeypatch):
    monkeypatch.setattr(impl.os, "getloadavg", lambda: (8.0, 8.0, 8.0))
    monkeypatch.setattr(impl.os, "cpu_count", lambda: 2)
    assert impl.machine_scale() == 4.0
    monkeypatch.setattr(impl.os, "getloadavg", lambda: (0.5, 0.5, 0.5))
    assert impl.machine_scale() == 1.0
