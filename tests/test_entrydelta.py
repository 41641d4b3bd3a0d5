"""entrydelta: a version stored as what differs from a full one gives back exactly that
version, byte for byte; one that lists other locs, or changed too much, is not a delta."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from monitor import entrydelta, entryset
from monitor.model import EntryState

LOCS = [f"https://e.test/{i}" for i in range(400)]
values = st.none() | st.sampled_from(["2024-01-01", "2024-02-02", "daily", "0.5", "",
                                      '{"image":[{"loc":"a"}]}', "é\u2028"])
states = st.builds(EntryState, values, values, values, values, st.booleans())


def _version(states_by_loc: dict[str, EntryState], rules: dict[str, str] | None = None,
             ) -> bytes:
    return entryset.encode(states_by_loc, rules or {})


rule_ids = st.dictionaries(st.sampled_from(range(400)), st.sampled_from(
    ["lastmod-invalid", "priority-invalid", "loc-out-of-scope lastmod-future"]), max_size=8)


@given(st.dictionaries(st.sampled_from(range(400)), states, max_size=60), states, rule_ids,
       rule_ids)
def test_a_delta_gives_back_the_version_it_stands_for(
        moved: dict[int, EntryState], common: EntryState, rules: dict[int, str],
        base_rules: dict[int, str]) -> None:
    base = _version(dict.fromkeys(LOCS, common), {LOCS[i]: r for i, r in base_rules.items()})
    now = {loc: moved.get(i, common) for i, loc in enumerate(LOCS)}
    new = _version(now, {LOCS[i]: rule for i, rule in rules.items()})
    delta = entrydelta.make(base, new, 17)
    assert delta is not None  # at most 60 of 400 entries differ
    assert entrydelta.is_delta(delta)
    assert entrydelta.base_of(delta) == 17
    assert entrydelta.apply(base, delta) == new
    assert entryset.head(delta[:512]) == entryset.head(new[:512])


def test_a_delta_of_1_percent_is_a_few_percent_of_the_version() -> None:
    states_by_loc = {loc: EntryState(f"2024-01-{i % 28 + 1:02d}", "daily", "0.5", None, True)
                     for i, loc in enumerate(f"https://e.test/p/{i}" for i in range(20_000))}
    base = _version(states_by_loc)
    for loc in list(states_by_loc)[::100]:
        states_by_loc[loc] = EntryState("2025-06-01", "daily", "0.5", None, True)
    new = _version(states_by_loc)
    delta = entrydelta.make(base, new, 1)
    assert delta is not None
    assert entrydelta.apply(base, delta) == new
    assert len(delta) <= len(new) * 0.05


def test_other_locs_or_many_changes_are_stored_whole() -> None:
    base = _version(dict.fromkeys(LOCS, EntryState("2024-01-01", None, None, None, True)))
    other = _version(dict.fromkeys(reversed(LOCS), EntryState("2024-01-01", None, None,
                                                              None, True)))
    moved = _version({loc: EntryState("2024-01-01" if i % 3 else "2025-01-01", None, None,
                                      None, True) for i, loc in enumerate(LOCS)})
    assert entrydelta.make(base, other, 1) is None
    assert entrydelta.make(base, moved, 1) is None  # a third moved
