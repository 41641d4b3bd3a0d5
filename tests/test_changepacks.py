"""changepacks: ``changed`` changes as packs of positions and states before, which give back
exactly the rows they stand for; what a version cannot give back stays a row."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor.codec import changepacks, changerows, entryset
from monitor.core.model import EntryState

texts = st.none() | st.text(alphabet=st.characters(blacklist_categories=("Cs",),
                                                   blacklist_characters="\x00\x01\x02"),
                            max_size=8)
states = st.builds(EntryState, texts, texts, texts, texts, st.booleans())
# A state before is JSON, which escapes \x00-\x1f.
members = st.lists(st.tuples(st.integers(0, 60_000), st.none() | st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=30)), max_size=50)


@given(members)
def test_members_come_back_as_they_were_packed(found: list[changepacks.Member]) -> None:
    """Positions in any order (gaps below zero too), a state before of any text or none."""
    expected = [(position, before or None) for position, before in found]
    assert changepacks.unpack(changepacks.pack(found)) == expected


@given(st.integers(0, 60_000), st.integers(2, 200), st.booleans())
def test_a_run_of_members_comes_back_as_it_was_packed(first: int, n: int, befores: bool
                                                      ) -> None:
    """Consecutive positions (a re-read in which every entry changed), and the same positions
    out of order."""
    run = [(p, f"was {p}" if befores else None) for p in range(first, first + n)]
    assert changepacks.unpack(changepacks.pack(run)) == run
    shuffled = run[::-1] if n < 4 else [run[0], run[2], run[1], *run[3:]]  # first, last kept
    assert changepacks.unpack(changepacks.pack(shuffled)) == shuffled


def _json(state: EntryState) -> str:
    return changerows.state_json(state.lastmod, state.changefreq, state.priority,
                                 state.extensions, state.valid)


@given(st.dictionaries(st.sampled_from([f"https://e.test/{i}" for i in range(30)]), states,
                       min_size=1),
       st.lists(st.tuples(st.sampled_from(["added", "removed", "changed", "invalid"]),
                          st.sampled_from([f"https://e.test/{i}" for i in range(34)]),
                          states, st.booleans()), max_size=40))
def test_a_split_keeps_every_row_and_packs_only_what_the_version_gives_back(
        version: dict[str, EntryState],
        wanted: list[tuple[str, str, EntryState, bool]]) -> None:
    data = entryset.encode(version, {})
    rows: list[changerows.Row] = []
    for kind, loc, before, same in wanted:  # `same`: the after the version holds
        after = _json(version[loc]) if same and loc in version else _json(before)
        rows.append((kind, loc, _json(before), None if kind == "removed" else after, None))
    out = list(changepacks.split(rows, data))
    kept = [item for item in out if len(item) == 5]
    packs = [item for item in out if len(item) == 4]
    assert all(n <= changepacks.MEMBERS and not positional
               for _loc, n, _value, positional in packs)
    packed = list(changepacks.rows(packs, data))
    # Nothing lost, nothing made up: the rows kept and those packed are the rows given.
    assert sorted([*kept, *packed]) == sorted(rows)
    # A pack holds only changed rows whose after the version gives, in their order.
    givable = [r for r in rows if r[0] == "changed" and r[1] in version
               and r[3] == _json(version[r[1]])]
    assert packed == givable


def test_a_pack_is_full_at_members_and_the_rest_is_the_last() -> None:
    locs = [f"https://e.test/{i}" for i in range(changepacks.MEMBERS + 7)]
    version = {loc: EntryState("2024-02-02", None, None, None, True) for loc in locs}
    data = entryset.encode(version, {})
    rows = [("changed", loc, '{"lastmod":"2024-01-01"}', '{"lastmod":"2024-02-02"}', None)
            for loc in locs]
    packs = list(changepacks.split(rows, data))
    assert [(loc, n) for loc, n, _value, _positional in packs] == [
        (locs[0], changepacks.MEMBERS), (locs[-7], 7)]
    assert list(changepacks.rows(packs, data)) == rows
    # A position and a lastmod before, compressed: bytes a member, not a row's hundreds.
    assert sum(len(value) for _l, _n, value, _p in packs) / len(rows) < 4


def test_a_positional_pack_takes_its_states_before_from_the_version_before() -> None:
    """A re-read document's pack holds positions only: the states before are the version
    before's at the same positions; read without that version, it is an error, not a guess."""
    locs = [f"https://e.test/{i}" for i in range(50)]
    before = entryset.encode({loc: EntryState(f"2024-01-{i % 28 + 1:02d}", "daily", None, None,
                                              True) for i, loc in enumerate(locs)}, {})
    after = entryset.encode({loc: EntryState("2025-01-01", "daily", None, None, True)
                             for loc in locs}, {})
    packer = changepacks.Packer(positional=True)
    assert all(packer.add(i, locs[i], None) is None for i in range(0, 50, 7))
    packs = packer.finish()
    assert [(loc, n, positional) for loc, n, _value, positional in packs] == [
        (locs[0], 8, True)]
    assert changepacks.unpack(packs[0][2]) == [(i, None) for i in range(0, 50, 7)]
    assert list(changepacks.rows(packs, after, before)) == [
        ("changed", locs[i], f'{{"lastmod":"2024-01-{i % 28 + 1:02d}","changefreq":"daily"}}',
         '{"lastmod":"2025-01-01","changefreq":"daily"}', None) for i in range(0, 50, 7)]
    with pytest.raises(ValueError, match="without the version before"):
        list(changepacks.rows(packs, after))


@given(st.lists(st.integers(1, changepacks.MEMBERS + 3), max_size=5), st.integers(0, 3))
def test_positional_members_extended_a_batch_at_a_time_pack_as_one_at_a_time(
        batches: list[int], already: int) -> None:
    """``Packer.extend`` (a re-read batch's changes at once) fills the packs ``add`` fills."""
    one, many = (changepacks.Packer(positional=True) for _ in range(2))
    position, packs_one, packs_many = 0, [], []
    for n in [already, *batches]:
        positions = list(range(position, position + 2 * n, 2))  # gaps, as a batch's changes
        locs = [f"https://e.test/{p}" for p in positions]
        for p, loc in zip(positions, locs, strict=True):
            if (full := one.add(p, loc, None)) is not None:
                packs_one.append(full)
        packs_many += many.extend(positions, locs.__getitem__)
        position += 2 * n
    assert packs_many == packs_one
    assert many.finish() == one.finish()


locs = st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",),
                                               blacklist_characters="\x00"), max_size=12),
                max_size=30)


@given(locs, st.text(max_size=4))
def test_a_search_of_the_locs_text_finds_the_locs_a_search_of_each_finds(
    listed: list[str], q: str,
) -> None:
    """One search of the joined text (case aside, as a search lowers it) holds to a search of
    each loc: no hit across two locs, a loc with two hits once, a ``\\x00`` never found."""
    q = q.lower()
    expected = [i for i, loc in enumerate(listed) if q and q in loc.lower()]
    assert changepacks.holding("\x00".join(listed), q) == expected


@given(members, st.sets(st.integers(0, 60_000), max_size=40), st.booleans())
def test_the_members_at_positions_are_those_unpack_gives(
    found: list[changepacks.Member], wanted: set[int], of_the_pack: bool,
) -> None:
    if of_the_pack:
        wanted |= {position for position, _ in found[::3]}
    data = changepacks.pack(found)
    expected = {j: m for j, m in enumerate(changepacks.unpack(data)) if m[0] in wanted}
    assert changepacks.at_positions(data, wanted) == expected


@given(st.integers(0, 60_000), st.integers(1, 300),
       st.sets(st.integers(0, 61_000), max_size=40))
def test_the_members_of_a_run_at_positions_are_found_without_unpacking(
    first: int, n: int, wanted: set[int],
) -> None:
    data = changepacks.pack([(p, None) for p in range(first, first + n)])
    wanted |= {first, first + n - 1, first + n, first - 1}
    expected = {p - first: (p, None) for p in wanted if first <= p < first + n}
    assert changepacks.at_positions(data, wanted) == expected
