"""The target-wide steps of a check, as pure functions: moves against removals, lastmod churn."""

from __future__ import annotations

from monitor.check.targetwide import CHURN_MIN, churn_issue, churning, settle_moves
from monitor.core.model import Change, EntryState


def _state(lastmod: str | None = "2024-01-01", *, valid: bool = True) -> EntryState:
    return EntryState(lastmod=lastmod, valid=valid)


def test_a_url_that_moved_between_documents_is_neither_removed_nor_added() -> None:
    moves = settle_moves({"https://e.test/a": _state()}, {"https://e.test/a": _state()})
    assert moves.changes == []
    assert (moves.compared, moves.changed) == (1, 0)


def test_a_url_that_moved_with_another_lastmod_is_changed_and_counts_for_churn() -> None:
    before, after = _state("2024-01-01"), _state("2024-02-01")
    moves = settle_moves({"https://e.test/a": after}, {"https://e.test/a": before})
    assert moves.changes == [Change("changed", "https://e.test/a", before, after)]
    assert (moves.compared, moves.changed) == (1, 1)


def test_true_additions_and_removals_keep_their_order_and_kinds() -> None:
    added = {"https://e.test/new": _state(), "https://e.test/bad": _state(valid=False)}
    removed = {"https://e.test/old": _state()}
    kinds = [(c.kind, c.loc) for c in settle_moves(added, removed).changes]
    assert kinds == [("added", "https://e.test/new"), ("invalid", "https://e.test/bad"),
                     ("removed", "https://e.test/old")]


def test_a_move_that_made_the_entry_invalid_is_an_invalid_change() -> None:
    moves = settle_moves({"u": _state(valid=False)}, {"u": _state()})
    assert [c.kind for c in moves.changes] == ["invalid"]


def test_an_invalid_lastmod_on_either_side_of_a_move_compares_nothing() -> None:
    moves = settle_moves({"u": _state("yesterday")}, {"u": _state("2024-01-01")})
    assert (moves.compared, moves.changed) == (0, 0)


def test_churn_needs_two_re_checks_in_a_row_over_the_bound() -> None:
    assert churning(CHURN_MIN, CHURN_MIN)
    assert not churning(CHURN_MIN - 1, CHURN_MIN - 1)
    assert not churning(100, 79)
    assert churn_issue(None, (100, 100), [], "https://e.test/s.xml") is None
    assert churn_issue((100, 50), (100, 100), [], "https://e.test/s.xml") is None


def test_the_churn_issue_names_both_shares_and_a_few_examples() -> None:
    changed = [Change("changed", f"https://e.test/{i}", _state("2024-01-01"),
                      _state("2024-01-02")) for i in range(5)]
    found = churn_issue((40, 40), (50, 45), changed, "https://e.test/s.xml")
    assert found is not None
    assert found.rule == "lastmod-churn"
    assert found.document == "https://e.test/s.xml"
    assert "45 of 50 URLs (90.0%)" in found.message
    assert "40 of 40 URLs (100.0%)" in found.message
    assert "https://e.test/2" in found.message
    assert "https://e.test/3" not in found.message
