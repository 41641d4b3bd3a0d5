"""entrydelta: a version stored as what differs from a full one gives back exactly that
version, byte for byte; one that lists other locs, or changed too much, is not a delta."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from monitor.codec import entrydelta, entryset
from monitor.core.model import EntryState

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
    if delta is None:  # at most 60 of 400 entries differ: only a delta over half of it is not
        unbounded = entrydelta.compose(entryset.unpack(base).header, entryset.unpack(new),
                                       sorted(moved), 17, 1 << 30)
        assert unbounded is not None
        assert len(unbounded) * 2 > len(new)
        return
    assert entrydelta.is_delta(delta)
    assert entrydelta.base_of(delta) == 17
    assert entrydelta.apply(base, delta) == new
    assert entryset.head(delta[:512]) == entryset.head(new[:512])
    # What readers that unpack get without packing it again: the full value's columns.
    columns, _base = entrydelta.resolve(base, delta)
    unpacked = entryset.unpack(new)
    assert (columns.header, columns.texts) == (unpacked.header, unpacked.texts)


@given(st.sets(st.sampled_from(range(400)), min_size=1, max_size=60), st.booleans())
def test_a_column_set_only_where_the_delta_moved_comes_and_goes_whole(
        where: set[int], appears: bool) -> None:
    """A column that the base or the new version lacks altogether (its text then empty): the
    delta's few positions are all it has."""
    plain = EntryState("2024-01-01", None, None, None, True)
    daily = EntryState("2024-01-01", "daily", None, None, True)
    with_it = {loc: daily if i in where else plain for i, loc in enumerate(LOCS)}
    without = dict.fromkeys(LOCS, plain)
    base, new = (_version(without), _version(with_it)) if appears else (
        _version(with_it), _version(without))
    delta = entrydelta.make(base, new, 3)
    assert delta is not None
    columns, _base = entrydelta.resolve(base, delta)
    unpacked = entryset.unpack(new)
    assert (columns.header, columns.texts) == (unpacked.header, unpacked.texts)
    assert entrydelta.apply(base, delta) == new


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


def test_a_re_read_makes_its_delta_against_the_base_of_the_stored_version() -> None:
    """The digest makes the delta from what it holds (monitor.read.digest: the positions that moved
    since the stored version, and those at which that one differs from its base): applied to
    the base, it is the digest's own value, check after check, never a delta of a delta. The
    stored version comes as it is stored (a delta, with its base) and the digest resolves it."""
    from datetime import UTC, datetime

    from monitor.read import digest

    def body(lastmods: dict[int, str]) -> bytes:
        urls = "".join(f"<url><loc>https://e.test/{i}</loc><lastmod>{lastmods.get(i, '2024-01-01')}"
                       f"</lastmod><priority>0.5</priority></url>" for i in range(2_000))
        return (f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{urls}'
                "</urlset>").encode()

    def job(lastmods: dict[int, str], previous: bytes | None,
            previous_base: bytes | None = None) -> digest.Job:
        return digest.Job(url="https://e.test/s.xml", now=datetime(2026, 1, 1, tzinfo=UTC),
                          max_bytes=1 << 24, max_urls=50_000, max_children=50_000,
                          body=body(lastmods), previous=previous, previous_base=previous_base,
                          base_id=None if previous is None else 7)

    first = digest.digest(job({}, None)).data
    assert first is not None
    stored: bytes = first
    base: bytes | None = None  # the stored version is whole
    for step, moved in enumerate(([3, 70], [70, 900], [5]), 1):
        made = job(dict.fromkeys(moved, f"2025-0{step}-01"), stored, base)
        found = digest.digest(made)
        assert found.data is None  # the delta alone: the whole value is never packed
        assert found.delta is not None
        assert not found.same
        assert entrydelta.base_of(found.delta) == 7
        assert digest.whole(found, made) == entrydelta.apply(first, found.delta)
        stored, base = found.delta, first
    _, _, positions = entrydelta.resolve(first, stored)[1]
    assert positions == [3, 5, 70, 900]  # where the last version differs from the first, at most
    # The same entries again (the body's bytes are another matter): the same set, from a delta
    # as from a whole version.
    made = job(dict.fromkeys([5], "2025-03-01"), stored, first)
    again = digest.digest(made)
    assert again.same
    assert digest.whole(again, made) == entrydelta.apply(first, stored)
    assert not digest.digest(job(dict.fromkeys([5], "2025-04-01"), stored, first)).same
    assert digest.digest(job({}, first)).same
