"""The diff engine: table cases, the property that applying the diff gives the new set, and
the same diff against a stored entry set."""

from __future__ import annotations

from datetime import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor.codec import entryset
from monitor.core.model import EntryState, addition_kind, change_kind
from monitor.read.diff import (
    apply,
    count,
    diff,
    diff_stored,
    lastmod_earlier,
    lastmods_earlier,
)

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


# Entry sets as stored, diffed without decoding them (diff_stored).
stored_locs = st.sampled_from([f"https://e.test/{i}" for i in range(12)])
stored_values = st.none() | st.sampled_from(["2024-01-01", "2024-02-01", "daily", "0.5", ""])
stored_states = st.builds(EntryState, stored_values, stored_values, stored_values,
                          stored_values, st.booleans())
stored_maps = st.dictionaries(stored_locs, stored_states, max_size=12)


@given(stored_maps, stored_maps)
def test_diff_stored_is_diff(previous: dict[str, EntryState], current: dict[str, EntryState],
                             ) -> None:
    stored = entryset.encode(previous, {})
    assert diff_stored(entryset.unpack(stored), current) == diff(previous, current)


@given(st.lists(st.tuples(stored_locs, stored_states, stored_states), unique_by=lambda t: t[0],
                max_size=12))
def test_diff_stored_on_the_same_locs(rows: list[tuple[str, EntryState, EntryState]]) -> None:
    """A re-read document whose locs did not move, as an entry set of other rules gives it."""
    previous = {loc: before for loc, before, _ in rows}
    current = {loc: after for loc, _, after in rows}
    stored = entryset.encode(previous, {"https://e.test/0": "priority-invalid"})
    assert diff_stored(entryset.unpack(stored), current) == diff(previous, current)


# W3C Datetimes of every precision, built so that many share a length: a second's fraction
# ending in "Z" has the length of a minute with an offset ("...:00.5Z", "...+01:00").
_SHAPES = ("%Y", "%Y-%m", "%Y-%m-%d", "%Y-%m-%dT%H:%MZ", "%Y-%m-%dT%H:%M:%SZ",
           "%Y-%m-%dT%H:%M:%S.5Z", "%Y-%m-%dT%H:%M+01:00", "%Y-%m-%dT%H:%M-01:00",
           "%Y-%m-%dT%H:%M:%S+01:00", "%Y-%m-%dT%H:%M:%S+02:00")
_moments = st.datetimes(min_value=datetime(2023, 12, 31), max_value=datetime(2024, 1, 2))


@st.composite
def _columns(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    """Two columns of lastmods: mostly of one shape (a CMS writes them alike), at times with
    a few of another in either."""
    n = draw(st.integers(1, 12))
    usual = draw(st.sampled_from(_SHAPES))
    shape = st.one_of(st.just(usual), st.just(usual), st.just(usual), st.sampled_from(_SHAPES))
    afters, befores = ([draw(_moments).strftime(draw(shape)) for _ in range(n)] for _ in "ab")
    return afters, befores


_OFFSETS = ("Z", "+01:00", "-01:00", "+05:30")  # a time has one (W3C Datetime)


@st.composite
def _paired_columns(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    """Two columns of lastmods that mix shapes, each position's pair mostly of one shape and
    one offset (a CMS that stamps "now" keeps each URL's format and zone), at times not."""
    n = draw(st.integers(1, 12))
    afters, befores = [], []
    for _ in range(n):
        shape = draw(st.sampled_from(_SHAPES))
        if "T" in shape:  # a time: its zone, the same on both sides or not
            zone = draw(st.sampled_from(_OFFSETS))
            shape = shape.rstrip("Z").removesuffix("+01:00").removesuffix("-01:00")
            shape = shape.removesuffix("+02:00")
            other = draw(st.one_of(st.just(zone), st.just(zone), st.sampled_from(_OFFSETS)))
            pair = (shape + zone, shape + other)
        else:
            pair = (shape, draw(st.one_of(st.just(shape), st.sampled_from(_SHAPES))))
        afters.append(draw(_moments).strftime(pair[0]))
        befores.append(draw(_moments).strftime(pair[1]))
    return afters, befores


@given(st.one_of(_columns(), _paired_columns()))
def test_lastmods_earlier_is_lastmod_earlier_a_pair_at_a_time(
        columns: tuple[list[str], list[str]]) -> None:
    afters, befores = columns
    assert list(lastmods_earlier(afters, befores)) == list(map(lastmod_earlier, afters, befores))


@pytest.mark.parametrize(("afters", "befores", "expected"), [
    # each pair of one shape, the shapes mixed: compared as text
    (["2024-05-02", "2024-05-01T10:00+01:00", "2024-05-01T10:00:00Z"],
     ["2024-05-01", "2024-05-01T10:30+01:00", "2024-05-01T09:00:00Z"], [False, True, False]),
    # one shape, another offset: 10:00+01:00 is 09:00Z, after 08:30Z; compared as instants
    (["2024-05-02", "2024-05-01T10:00+01:00"], ["2024-05-01", "2024-05-01T10:30+02:00"],
     [False, False]),
    (["2024-05-02", "2024-05-01T10:00-01:00"], ["2024-05-01", "2024-05-01T10:30+01:00"],
     [False, False]),
    (["2024-05-01T10:00:00.5Z"], ["2024-05-01T10:30+01:00"], [False]),  # 09:30Z
    (["2024-05-01T10:00:00.5Z", "2024-05-01T10:00:00.5Z"],
     ["2024-05-01T10:00:01.5Z", "2024-05-01T10:30+01:00"], [True, False]),
    (["2024-05-01T10:00+01:00", "2024-05-01T10:00-01:00"],
     ["2024-05-01T09:30+01:00", "2024-05-01T10:30+01:00"], [False, False]),
    (["2024-05", "2024-06"], ["2024-05-31", "2024-05-31"], [False, False]),
    # the length of the first on average, not each: "2024" is not earlier than "2024-05-01"
    (["2024-05", "2024", "2024-05-01"], ["2024-05", "2024-05-01", "2024"], [False] * 3),
    ([], [], []),
])
def test_lastmods_earlier_of_mixed_shapes(afters: list[str], befores: list[str],
                                          expected: list[bool]) -> None:
    assert list(lastmods_earlier(afters, befores)) == expected


@pytest.mark.parametrize(("was", "now", "kind"), [
    (True, True, "changed"), (True, False, "invalid"), (False, False, "changed"),
    (False, True, "changed"),
])
def test_the_kind_of_a_change_is_decided_in_one_place(was: bool, now: bool, kind: str) -> None:
    """An entry that was valid and is not is ``invalid``; any other difference is ``changed``
    (an entry that became valid is a change of its fields, not an addition)."""
    assert change_kind(was, now) == kind
    before = EntryState(lastmod="2024-01-01", valid=was)
    after = EntryState(lastmod="2024-01-02", valid=now)
    assert [c.kind for c in diff({"u": before}, {"u": after})] == [kind]
    assert [c.kind for c in diff({}, {"u": after})] == [addition_kind(now)]
