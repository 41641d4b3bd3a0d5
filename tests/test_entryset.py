"""The stored form of a document's entries: what goes in comes out, in order."""

from __future__ import annotations

import zlib
from array import array

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor import entryset
from monitor.model import EntryState

# Any text XML can carry: no \x00-\x02 (not XML characters), no lone surrogates.
text = st.text(st.characters(min_codepoint=3, exclude_categories=("Cs",)), max_size=30)
maybe = st.none() | text
state = st.builds(EntryState, maybe, maybe, maybe, maybe, st.booleans())
entries = st.dictionaries(text, state, max_size=40)


@given(entries, st.data())
def test_round_trip(states: dict[str, EntryState], data: st.DataObject) -> None:
    chosen = data.draw(st.sets(st.sampled_from(sorted(states)))) if states else set()
    rules = {loc: data.draw(st.sampled_from(["lastmod-invalid", "a b"])) for loc in chosen}
    blob = entryset.encode(states, rules)
    back = entryset.decode(blob)
    assert back.states == states
    assert list(back.states) == list(states)  # document order
    assert back.rules == rules
    assert entryset.locs(blob) == list(states)


def test_empty_and_unset_columns() -> None:
    assert entryset.decode(entryset.encode({}, {})).states == {}
    only_locs = {"https://e.test/a": EntryState(), "https://e.test/": EntryState(valid=False)}
    back = entryset.decode(entryset.encode(only_locs, {}))
    assert back.states == only_locs
    # An empty string is a value, not "unset".
    empty = {"u": EntryState(lastmod="", priority=None)}
    assert entryset.decode(entryset.encode(empty, {})).states == empty


def test_other_versions_are_refused() -> None:
    blob = zlib.compress(b'{"v":9,"n":0,"invalid":[]}\x02\x02\x02\x02\x02')
    with pytest.raises(ValueError, match="version 1"):
        entryset.decode(blob)


def test_loc_hash_is_stable_across_processes() -> None:
    # A fixed value: workers and the main process must agree, whatever PYTHONHASHSEED is.
    assert entryset.loc_hash("https://example.com/") == 0x682DF0D0F100754
    assert all(entryset.loc_hash(f"https://example.com/{i}") < 2**60 for i in range(1000))
    assert entryset.loc_hash("https://example.com/a") != entryset.loc_hash("https://example.com/")


documents = st.lists(st.lists(st.integers(min_value=0, max_value=60), max_size=12), max_size=8)


@given(documents, st.integers(min_value=0, max_value=4))
def test_fingerprints_hit_what_an_earlier_document_held(docs: list[list[int]], arrays: int,
                                                        ) -> None:
    """As arrays, as one set, and across the switch from one to the other."""
    index = entryset.Fingerprints(arrays=arrays)
    held: set[int] = set()
    for doc in docs:
        hashes = array("Q", doc)
        assert index.hits(hashes) == held & set(doc)
        index.add(hashes)
        held |= set(doc)


def test_fingerprints_of_many_documents_become_one_set() -> None:
    """Two documents' as arrays; from the third on, one set."""
    index = entryset.Fingerprints(arrays=2)
    for start in range(0, 40, 10):
        index.add(array("Q", range(start, start + 10)))
        assert (index._set is None) == (start < 20)
    assert index._set == set(range(40))
    assert index._arrays == []
    assert index.hits(array("Q", [5, 39, 40])) == {5, 39}


def test_fingerprints_held_as_an_entry_set_are_worked_out_when_another_document_comes() -> None:
    """``add_later`` holds a document's entry set; ``hits`` finds what its locs would have."""
    states = {f"https://e.test/{i}": EntryState() for i in range(5)}
    index = entryset.Fingerprints()
    assert not index
    index.add_later(entryset.encode(states, {}))
    assert index
    assert index.unsettled
    later = array("Q", [entryset.loc_hash("https://e.test/3"), entryset.loc_hash("https://x/")])
    assert index.hits(later) == {entryset.loc_hash("https://e.test/3")}
    assert not index.unsettled
    index.add(later)
    index.add_later(entryset.encode({"https://x/": EntryState()}, {}))
    index.settle()
    assert index.hits(array("Q", [entryset.loc_hash("https://x/")])) == {
        entryset.loc_hash("https://x/")}
