"""The pure IndexNow stage: what is submitted, how it is batched, what answers mean."""

from __future__ import annotations

import pytest

from monitor.indexnow import protocol as indexnow

KEY = "abcdef0123456789"


def test_batches_are_one_origin_and_at_most_the_limit_each() -> None:
    changes = [("added", f"https://a.example/{i}") for i in range(5)]
    changes += [("changed", "https://B.example:8443/x"), ("added", "http://a.example/plain"),
                ("added", "mailto:someone@a.example")]
    found = indexnow.batches(changes, limit=2)
    assert [(b.origin, len(b.urls)) for b in found] == [
        ("https://a.example", 2), ("https://a.example", 2),
        ("http://a.example", 1), ("https://a.example", 1), ("https://b.example:8443", 1)]
    assert found[-1].host == "b.example"
    assert found[0].kinds == {"added": 2}
    assert sum(len(b.urls) for b in found) == 7  # the mailto: is left out


@pytest.mark.parametrize(("kind", "before", "after", "sent"), [
    ("added", None, '{"lastmod":"2026-01-01"}', True),
    ("changed", '{"lastmod":"2026-01-01"}', '{"lastmod":"2026-01-02"}', True),
    ("changed", '{"lastmod":"2026-01-01"}', '{"lastmod":"2026-01-01","priority":"0.3"}', False),
    ("changed", "{}", '{"lastmod":"2026-01-01"}', True),
    ("removed", "{}", None, False),  # a removal waits for its triage
    ("invalid", None, '{"valid":false}', False),
])
def test_which_changes_are_submitted(kind: str, before: str | None, after: str | None,
                                     sent: bool) -> None:
    assert indexnow.submitted(kind, before, after, ("added", "changed", "removed")) is sent


def test_a_kind_left_out_of_submit_is_not_submitted() -> None:
    assert not indexnow.submitted("added", None, "{}", ("changed",))


@pytest.mark.parametrize(("configured", "where"), [
    (None, f"https://a.example/{KEY}.txt"),
    ("/keys/k.txt", "https://a.example/keys/k.txt"),
    ("https://a.example/k/key.txt", "https://a.example/k/key.txt"),
    ("https://other.example/key.txt", f"https://a.example/{KEY}.txt"),  # not this host's
])
def test_key_location(configured: str | None, where: str) -> None:
    assert indexnow.key_location("https://a.example", KEY, configured) == where


@pytest.mark.parametrize(("status", "outcome"), [
    (200, "delivered"), (202, "delivered"), (400, "failed"), (403, "failed"),
    (422, "failed"), (429, "retry"), (500, "retry"), (503, "retry")])
def test_answers(status: int, outcome: str) -> None:
    verdict = indexnow.answer(status, "  what\n the endpoint said ", 30.0)
    assert verdict.outcome == outcome
    assert verdict.message.startswith(f"HTTP {status}")
    assert verdict.message.endswith("what the endpoint said")
    assert (verdict.retry_after == 30.0) is (status in (429, 503))


@pytest.mark.parametrize(("status", "body", "problem"), [
    (200, KEY.encode() + b"\n", None),
    (200, b"another", "it does not hold exactly the key"),
    (200, b"", "it is empty"),
    (404, b"", "HTTP 404"),
    (None, b"", "no answer"),
])
def test_key_file(status: int | None, body: bytes, problem: str | None) -> None:
    assert indexnow.key_file_problem(status, body, KEY) == problem


def test_the_message_names_the_host_and_the_fix() -> None:
    message = indexnow.key_message("https://a.example", f"https://a.example/{KEY}.txt",
                                   "HTTP 404", KEY)
    assert "https://a.example/[key].txt" in message
    assert KEY not in message
    assert "HTTP 404" in message
    assert "answers 200 with the key as its only content" in message
    assert "\n" not in message


@pytest.mark.parametrize(("location", "inside", "outside"), [
    (f"https://a.example/{KEY}.txt", ["/", "/a", "/seo/b"], []),
    ("https://a.example/seo/k.txt", ["/seo/b", "/seo/c/d"], ["/", "/a", "/seofake"]),
])
def test_a_key_file_vouches_for_its_folder(location: str, inside: list[str],
                                           outside: list[str]) -> None:
    scope = indexnow.Scope(frozenset({"https://a.example"}))
    urls = [f"https://a.example{p}" for p in [*inside, *outside]]
    assert scope.split("https://a.example", urls, location) == (
        tuple(f"https://a.example{p}" for p in inside),
        tuple(f"https://a.example{p}" for p in outside))


def test_an_origin_outside_the_scope_submits_nothing() -> None:
    scope = indexnow.Scope(frozenset({"https://a.example"}))
    urls = ["https://b.example/x", "http://a.example/y"]
    assert scope.split("https://b.example", urls[:1], f"https://b.example/{KEY}.txt") == (
        (), ("https://b.example/x",))
    assert not scope.covers("http://a.example")  # another scheme is another origin
