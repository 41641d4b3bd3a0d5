"""How long an address whose logins keep failing waits (pure logic, a fake clock); what a
password check costs."""

from __future__ import annotations

import io
import time

import bcrypt
import pytest

from monitor.cli.commands import main
from monitor.serve.auth import (
    FAILURES_FORGOTTEN,
    FREE_FAILURES,
    MAX_WAIT,
    _check,
    _Failures,
    hash_password,
)


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


def test_every_failed_password_costs_one_bcrypt() -> None:
    """Whoever the user and however long the password, a refusal takes a bcrypt's time: the
    time of an answer does not tell a known user from an unknown one."""
    rounds = 8
    hashed = hash_password("right", rounds=rounds).encode()
    longest = b"L" * 72
    hashed_longest = hash_password(longest.decode(), rounds=rounds).encode()

    def cost(password: bytes, of: bytes | None) -> tuple[bool, float]:
        started = time.thread_time()
        good = _check(password, of, rounds)
        return good, time.thread_time() - started

    good, one = cost(b"right", hashed)
    assert good
    for password, of in [(b"wrong", hashed), (b"wrong", None), (b"x" * 100, hashed),
                         (b"x" * 100, None), (longest + b"L", hashed_longest)]:
        good, took = cost(password, of)
        assert not good, (password, of)
        assert took > one / 3, (len(password), of is None, took, one)
    assert cost(longest, hashed_longest)[0]


def test_a_password_bcrypt_cannot_take_gets_no_hash(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No login could use it: ``web hash-password`` says so in one line (it was a traceback)."""
    monkeypatch.setattr("sys.stdin", io.StringIO("é" * 37 + "\n"))  # 74 bytes in UTF-8
    assert main(["web", "hash-password"]) == 2
    assert capsys.readouterr().err == ("sitemap-monitor: web hash-password: a password longer "
                                       "than 72 bytes (bcrypt reads no further)\n")
    assert bcrypt.checkpw(b"x" * 72, hash_password("x" * 72, rounds=4).encode())
