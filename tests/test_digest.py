"""digest.diff_stored: the same changes, in the same order, as diff.diff on decoded states."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from monitor import digest, entryset
from monitor.diff import diff
from monitor.model import EntryState

locs = st.sampled_from([f"https://e.test/{i}" for i in range(12)])
values = st.none() | st.sampled_from(["2024-01-01", "2024-02-01", "daily", "0.5", ""])
states = st.builds(EntryState, values, values, values, values, st.booleans())
maps = st.dictionaries(locs, states, max_size=12)


@given(maps, maps)
def test_diff_stored_is_diff(previous: dict[str, EntryState], current: dict[str, EntryState],
                             ) -> None:
    stored = entryset.encode(previous, {})
    assert digest.diff_stored(entryset.unpack(stored), current) == diff(previous, current)


@given(st.lists(st.tuples(locs, states, states), unique_by=lambda t: t[0], max_size=12))
def test_diff_stored_on_the_same_locs(rows: list[tuple[str, EntryState, EntryState]]) -> None:
    """A re-read document whose locs did not move, as an entry set of other rules gives it."""
    previous = {loc: before for loc, before, _ in rows}
    current = {loc: after for loc, _, after in rows}
    stored = entryset.encode(previous, {"https://e.test/0": "priority-invalid"})
    assert digest.diff_stored(entryset.unpack(stored), current) == diff(previous, current)


def test_rows_are_the_decoded_states() -> None:
    states = {"https://e.test/a": EntryState("2024-01-01", None, "0.5", None, True),
              "https://e.test/b": EntryState(None, "daily", None, '{"image":[]}', False)}
    rows = entryset.rows(entryset.unpack(entryset.encode(states, {})))
    assert {loc: EntryState(*row) for loc, row in rows.items()} == states
    assert list(rows) == list(states)
