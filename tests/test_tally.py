"""The check's tally: one fold of its stages' frozen outcomes (pure, no network, no database)."""

from __future__ import annotations

import dataclasses

import pytest

from monitor.check.tally import (
    Admitted,
    DocumentOutcome,
    Found,
    Gone,
    Marked,
    Recorded,
    Tally,
    Touched,
    Wire,
    failure,
)
from monitor.check.targetwide import Moves
from monitor.codec.states import DocumentState
from monitor.core.model import Change, DocumentResult, EntryState, Issue

INDEX, CHILD = "https://example.com/index.xml", "https://example.com/a.xml"


def _state(lastmod: str) -> EntryState:
    return EntryState(lastmod=lastmod)


def test_a_document_keeps_the_place_it_was_admitted_in() -> None:
    tally = Tally(limit=10)
    for url in (INDEX, CHILD):
        tally.take(Admitted(DocumentResult(url, "failed", parent=None if url == INDEX else INDEX)))
    tally.take(DocumentOutcome(DocumentResult(CHILD, "ok", kind="urlset", urls=3)))
    tally.take(DocumentOutcome(DocumentResult(INDEX, "ok", kind="sitemapindex")))
    assert [(d.url, d.outcome) for d in tally.documents.values()] == [
        (INDEX, "ok"), (CHILD, "ok")]


def test_issues_are_counted_and_the_first_kept_in_the_order_found() -> None:
    tally = Tally(limit=2)
    own = [Issue("loc-duplicate", "twice", document=CHILD)] * 3
    tally.take(Found(own, counted=False))  # a document's own: counted with its state
    tally.take(Found([Issue("index-cycle", "cycle", document=INDEX)]))
    assert tally.issues == own[:2]
    assert tally.issue_counts == {"index-cycle": 1}
    assert [i.rule for i in tally.check_issues] == ["index-cycle"]
    assert tally.room() == 0


def test_a_failed_child_is_its_parents_issue_and_a_failed_root_the_checks() -> None:
    tally = Tally(limit=10)
    tally.take(failure(DocumentResult(CHILD, "failed", parent=INDEX, http_status=200),
                       "http", "500 Internal Server Error", 500, root=False))
    assert tally.outcome == "ok"
    assert tally.failed == {CHILD}
    assert [(i.rule, i.document, i.loc) for i in tally.issues] == [
        ("child-fetch-failed", INDEX, CHILD)]
    assert tally.documents[CHILD].http_status == 500
    tally.take(failure(DocumentResult(INDEX, "failed"), "timeout", "too slow", None, root=True))
    assert (tally.outcome, tally.failure) == ("failed", ("timeout", "too slow"))


def test_held_changes_settle_into_moves_and_counts() -> None:
    tally = Tally(limit=10)
    added = Change("added", "https://example.com/p", None, _state("2026-01-02"))
    tally.take(DocumentOutcome(DocumentResult(CHILD, "ok"), recorded=Recorded(
        CHILD, lastmods_compared=5, lastmods_changed=1, balance=0, held=[added])))
    tally.take(Gone([7], {"https://example.com/p": _state("2026-01-01"),
                          "https://example.com/q": _state("2026-01-01")}))
    assert tally.written == [CHILD]
    assert tally.closed == [7]
    assert set(tally.pending_removed) == {"https://example.com/p", "https://example.com/q"}
    tally.take(Moves([Change("removed", "https://example.com/q", _state("2026-01-01"), None)],
                     compared=1, changed=1))
    assert (tally.lastmods_compared, tally.lastmods_changed) == (6, 2)
    assert tally.changes.counts == {"removed": 1}


def test_a_marked_document_is_read_again_and_no_longer_untouched() -> None:
    tally = Tally(limit=10)
    tally.take(Touched(CHILD, None))
    tally.take(Wire(512))
    assert tally.untouched == [CHILD]
    state = DocumentState(CHILD, issue_counts={"hreflang-not-reciprocal": 1})
    tally.take(Marked(CHILD, state, [Issue("hreflang-not-reciprocal", "no", document=CHILD)]))
    assert tally.untouched == []
    assert tally.read == {CHILD: state}
    assert tally.issue_counts == {}  # counted with the document's state
    assert tally.fetched_bytes == 512


def test_a_document_result_is_built_once() -> None:
    doc = DocumentResult(CHILD, "ok")
    with pytest.raises(dataclasses.FrozenInstanceError):
        doc.outcome = "failed"  # type: ignore[misc]
