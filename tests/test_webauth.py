"""How long an address whose logins keep failing waits (pure logic, a fake clock)."""

from __future__ import annotations

from monitor.serve.auth import FAILURES_FORGOTTEN, FREE_FAILURES, MAX_WAIT, _Failures


def test_failures_past_the_free_ones_double_the_wait_up_to_its_bound() -> None:
    now = [1000.0]
    failures = _Failures(lambda: now[0])
    waits = []
    for _ in range(FREE_FAILURES + 8):
        failures.add("10.0.0.1")
        waits.append(failures.wait("10.0.0.1"))
    assert waits == [0.0] * FREE_FAILURES + [1, 2, 4, 8, 16, 32, MAX_WAIT, MAX_WAIT]
    assert failures.wait("10.0.0.2") == 0  # another address is not slowed
    now[0] += MAX_WAIT
    assert failures.wait("10.0.0.1") == 0
    failures.forget("10.0.0.1")  # it logged in
    failures.add("10.0.0.1")
    assert failures.wait("10.0.0.1") == 0


def test_failures_long_past_are_forgotten() -> None:
    now = [0.0]
    failures = _Failures(lambda: now[0])
    for _ in range(FREE_FAILURES):
        failures.add("10.0.0.1")
    now[0] += FAILURES_FORGOTTEN + 1
    failures.add("10.0.0.1")
    assert failures.wait("10.0.0.1") == 0
