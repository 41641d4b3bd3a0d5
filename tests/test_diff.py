"""The diff engine: table cases and the property that applying the diff gives the new set."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor.diff import apply, count, diff
from monitor.model import EntryState

A = EntryState(lastmod="2024-01-01")
B = EntryState(lastmod="2024-02-02")
BAD = EntryState(lastmod="yesterday", valid=False)


@pytest.mark.parametrize(
    ("previous", "current", "expected"),
    [
        ({}, {"u": A}, {"u": "added"}),
        ({}, {"u": BAD}, {"u": "invalid"}),
        ({"u": A}, {}, {"u": "removed"}),
        ({"u": A}, {"u": A}, {}),
        ({"u": A}, {"u": B}, {"u": "changed"}),
        ({"u": A}, {"u": BAD}, {"u": "invalid"}),
        ({"u": BAD}, {"u": A}, {"u": "changed"}),
        ({"u": BAD}, {"u": BAD}, {}),
        ({"u": A}, {"u": EntryState(lastmod="2024-01-01", extensions='{"image":[]}')},
         {"u": "changed"}),
        ({"u": A, "v": A}, {"v": A, "w": B}, {"u": "removed", "w": "added"}),
    ],
)
def test_kinds(previous: dict[str, EntryState], current: dict[str, EntryState],
               expected: dict[str, str]) -> None:
    changes = diff(previous, current)
    assert {c.loc: c.kind for c in changes} == expected
    for c in changes:
        assert c.before == previous.get(c.loc)
        assert c.after == current.get(c.loc)


def test_count() -> None:
    changes = diff({"a": A, "b": A}, {"b": B, "c": A, "d": BAD})
    assert count(changes) == {"removed": 1, "changed": 1, "added": 1, "invalid": 1}


states = st.builds(
    EntryState,
    lastmod=st.sampled_from([None, "2024", "2024-01-01", "bad"]),
    changefreq=st.sampled_from([None, "daily", "weekly"]),
    priority=st.sampled_from([None, "0.5", "1.0"]),
    extensions=st.sampled_from([None, '{"image":[{"loc":"x"}]}']),
    valid=st.booleans(),
)
url_sets = st.dictionaries(st.sampled_from([f"https://e.test/{i}" for i in range(30)]), states)


@given(url_sets, url_sets)
def test_applying_the_diff_gives_the_new_set(
    previous: dict[str, EntryState], current: dict[str, EntryState]
) -> None:
    changes = diff(previous, current)
    assert apply(previous, changes) == current
    assert len({c.loc for c in changes}) == len(changes)
    for c in changes:
        if c.kind == "added":
            assert c.before is None
            assert c.after is not None
            assert c.after.valid
        elif c.kind == "removed":
            assert c.after is None
            assert c.before is not None
        elif c.kind == "invalid":
            assert c.after is not None
            assert not c.after.valid
            assert c.before is None or c.before.valid
        else:
            assert c.before is not None
            assert c.after is not None
            assert c.before != c.after


@given(url_sets)
def test_no_change_against_itself(entries: dict[str, EntryState]) -> None:
    assert diff(entries, entries) == []
