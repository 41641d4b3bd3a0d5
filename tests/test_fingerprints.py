"""Fingerprints of locs: stable across processes, one a page, and an index of them that hits
what an earlier document held, as one set would."""

from __future__ import annotations

import itertools
import random
import sys
import zlib
from array import array

from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.codec import entryset, fingerprints
from monitor.core.model import EntryState, page


def test_loc_hash_is_stable_across_processes() -> None:
    # A fixed value: workers and the main process must agree, whatever PYTHONHASHSEED is.
    assert fingerprints.loc_hash("https://example.com/") == 0x682DF0D0F100754
    assert all(fingerprints.loc_hash(f"https://example.com/{i}") < 2**60 for i in range(1000))
    assert fingerprints.loc_hash("https://example.com/a") != fingerprints.loc_hash("https://example.com/")


# Locs that differ by a #fragment or the case of an escape, among plain ones.
spelling = st.lists(st.sampled_from(["https://e.test/", "a", "%c3%a9", "%C3%A9", "%2f", "%2F",
                                     "#", "#x", "%", "%zz", "/", "?q=%aa"]), max_size=6)
spelled_locs = st.lists(spelling.map("".join), max_size=12)


@given(spelled_locs)
def test_loc_hashes_are_those_of_the_pages_one_at_a_time(locs: list[str]) -> None:
    """A batch's fingerprints (one scan of it decides whether any loc is not its own page) are
    each loc's alone, and those of its page: a #fragment and an escape's case do not count."""
    hashes = fingerprints.loc_hashes(locs)
    assert hashes == [fingerprints.loc_hash(loc) for loc in locs]
    assert hashes == fingerprints.loc_hashes(iter([page(loc) for loc in locs]))
    assert hashes == [zlib.crc32(b) << 28 ^ zlib.adler32(b)
                      for b in (page(loc).encode() for loc in locs)]


def test_one_page_has_one_fingerprint() -> None:
    first, *others = fingerprints.loc_hashes([
        "https://e.test/caf%C3%A9", "https://e.test/caf%c3%a9#top", "https://e.test/caf%C3%a9#"])
    assert others == [first, first]
    assert fingerprints.loc_hash("https://e.test/a%2f") != fingerprints.loc_hash("https://e.test/a/")


@given(spelled_locs, spelled_locs)
def test_pages_listed_are_the_new_locs_whose_page_the_set_lists(
    listed: list[str], new: list[str]
) -> None:
    blob = entryset.encode(dict.fromkeys(listed, EntryState()), {})
    pages = {page(loc) for loc in listed}
    assert fingerprints.pages_listed(blob, set(new)) == {loc for loc in new if page(loc) in pages}


documents = st.lists(st.lists(st.integers(min_value=0, max_value=60), max_size=12), max_size=8)
# Fingerprints over their whole range (they are below 2**60), and small ones, from a pool so that
# later documents list some of the earlier ones' again.
fingerprint = st.one_of(st.integers(min_value=0, max_value=2**60 - 1),
                        st.integers(min_value=0, max_value=60),
                        st.sampled_from([0, 2**50 - 1, 2**50, 2**59, 2**60 - 1]))
spread = st.lists(st.lists(fingerprint, max_size=20), max_size=30)


# No deadline: with arrays=0 every document is a run of its own, 1,024 buckets to build and
# merge, a few ms each on a loaded machine.
@settings(deadline=None)
@given(documents, st.integers(min_value=0, max_value=4))
def test_fingerprints_hit_what_an_earlier_document_held(docs: list[list[int]], arrays: int,
                                                        ) -> None:
    """As arrays, as runs, and across the switch from one to the other."""
    _hits_as_a_set_would(docs, arrays)


@settings(deadline=None)
@given(st.data(), st.integers(min_value=0, max_value=3))
def test_fingerprints_of_many_documents_hit_as_one_set_would(data: st.DataObject, arrays: int,
                                                            ) -> None:
    """Any number of documents past the arrays, fingerprints anywhere in their range."""
    pool = data.draw(st.lists(fingerprint, min_size=1, max_size=40))
    docs = data.draw(st.lists(st.lists(st.one_of(fingerprint, st.sampled_from(pool)),
                                       max_size=20), max_size=30))
    _hits_as_a_set_would(docs, arrays)


def _hits_as_a_set_would(docs: list[list[int]], arrays: int) -> None:
    index = fingerprints.Fingerprints(arrays=arrays)
    held: set[int] = set()
    for doc in docs:
        hashes = array("Q", doc)
        assert index.hits(hashes) == held & set(doc)
        index.add(hashes)
        held |= set(doc)
    assert index.hits(array("Q", held)) == held


def test_fingerprints_of_many_documents_are_runs_of_sorted_buckets() -> None:
    """Two documents' as arrays; from the third on, runs, each more than twice the next, of
    sorted buckets by the top bits; never a set."""
    rng = random.Random(5)
    index = fingerprints.Fingerprints(arrays=2)
    docs = [array("Q", (rng.getrandbits(60) for _ in range(1000))) for _ in range(40)]
    for n, doc in enumerate(docs, 1):
        index.add(doc)
        assert (not index._runs) == (n <= 2)
        sizes = index._sizes
        assert all(earlier > 2 * later for earlier, later in itertools.pairwise(sizes))
        assert len(sizes) <= 5
        assert sum(sizes) + sum(map(len, index._arrays)) == 1000 * n
    assert not any(isinstance(value, set) for value in vars(index).values())
    for run in index._runs:
        for bucket, values in enumerate(run):
            assert values[-1] == 2**64 - 1
            assert list(values[:-1]) == sorted(values[:-1])
            assert all(v >> 50 == bucket for v in values[:-1])
    held = set().union(*docs)
    assert index.hits(array("Q", [*docs[0][:3], *docs[39][-3:], 2**60 - 1, 12345])) == held & {
        *docs[0][:3], *docs[39][-3:], 2**60 - 1, 12345}


def test_fingerprints_of_an_index_take_about_8_bytes_each() -> None:
    """100 documents of 2,000 fingerprints, held in about 8 bytes each."""
    rng = random.Random(7)
    index = fingerprints.Fingerprints(arrays=4)
    for _ in range(100):
        index.add(array("Q", (rng.getrandbits(60) for _ in range(2000))))
    held = sum(map(sys.getsizeof, index._arrays)) + sum(
        sys.getsizeof(run) + sum(map(sys.getsizeof, run)) for run in index._runs)
    assert len(index._runs) <= 4
    assert held < 200_000 * 8.5 + 4 * 1024 * 90  # and a run's 1,024 buckets: ~90 bytes each


def test_fingerprints_held_as_an_entry_set_are_worked_out_when_another_document_comes() -> None:
    """``add_later`` holds a document's entry set; ``hits`` finds what its locs would have."""
    states = {f"https://e.test/{i}": EntryState() for i in range(5)}
    index = fingerprints.Fingerprints()
    assert not index
    index.add_later(entryset.encode(states, {}))
    assert index
    assert index.unsettled
    later = array("Q", [fingerprints.loc_hash("https://e.test/3"), fingerprints.loc_hash("https://x/")])
    assert index.hits(later) == {fingerprints.loc_hash("https://e.test/3")}
    assert not index.unsettled
    index.add(later)
    index.add_later(entryset.encode({"https://x/": EntryState()}, {}))
    index.settle()
    assert index.hits(array("Q", [fingerprints.loc_hash("https://x/")])) == {
        fingerprints.loc_hash("https://x/")}


def test_fingerprints_held_count_the_arrays_and_the_runs() -> None:
    """``held``: what the check holds, 8 bytes each, however they are kept (the pipeline stops
    digesting big documents itself past a number of them)."""
    held = fingerprints.Fingerprints(arrays=2)
    assert held.held == 0
    for n in (3, 5, 7, 11):  # the third document folds the arrays into a run
        held.add(array("Q", range(n * 1000, n * 1000 + n)))
    held.add_later(b"")  # not worked out: not counted
    assert held.held == 3 + 5 + 7 + 11
