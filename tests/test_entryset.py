"""The stored form of a document's entries: what goes in comes out, in order."""

from __future__ import annotations

import itertools
import json
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.codec import columnstream, entryset
from monitor.core.model import EntryState

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


def _version_1(columns: entryset.Columns) -> bytes:
    """The value version 1 stored for these columns: the locs first, in one stream."""
    header = dict(columns.header, v=1)
    return zlib.compress("\x02".join([entryset._encode(header), *columns.texts]).encode(), 1)


def test_locs_read_only_as_far_as_their_column(monkeypatch: pytest.MonkeyPatch) -> None:
    # Locs over several of locs()'s decompression slices, and extensions four times their
    # size, and a lastmod each (a first stream of more than one read of its header); then the
    # same set cut short after its locs: the locs still come back, since the rest is never
    # decompressed (unpack fails on it).
    states = {f"https://e.test/{i:07d}/{'x' * 50}": EntryState(
        f"2024-01-01T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z", None, None,
        f'{{"image":[{{"loc":"https://e.test/{i}/{"y" * 200}.jpg"}}]}}')
        for i in range(40_000)}
    blob = entryset.encode(states, {})
    assert entryset.locs(blob) == list(states)
    columns = entryset.unpack(blob)
    # Version 2: the header and the locs' own stream are all it reads.
    described = zlib.decompressobj().decompress(blob, 1000).split(b"\x02")[0]
    tail = int(json.loads(described)["e"])
    spoilt = blob[: -4 - tail] + bytes(tail) + blob[-4:]  # the extensions' stream zeroed
    assert entryset.locs(spoilt) == list(states)
    with pytest.raises(zlib.error):
        entryset.unpack(spoilt)
    # ...and of the first stream, only as far as the header: not the lastmods after it.
    fed: list[int] = []
    real = zlib.decompressobj

    class Counted:
        def __init__(self, *args: int) -> None:
            self._inflate = real(*args)

        def decompress(self, data: bytes, *limit: int) -> bytes:
            fed.append(len(data))
            return self._inflate.decompress(data, *limit)

    monkeypatch.setattr(zlib, "decompressobj", Counted)
    assert entryset.locs(blob) == list(states)
    monkeypatch.undo()
    locs_size = int(json.loads(described)["locs"]["z"])
    assert sum(fed) <= entryset._LEAD + locs_size
    assert len(blob) - tail - 4 - locs_size > entryset._LEAD * 10  # the first stream's
    # Version 1: as far as the end of its locs column.
    head = (entryset._encode(dict(columns.header, v=1)).encode() + b"\x02"
            + columns.loc_text().encode())
    packer = zlib.compressobj()
    cut = packer.compress(head + b"\x02" + columns.texts[1].encode()[:1000])
    cut += packer.flush(zlib.Z_SYNC_FLUSH)
    assert entryset.locs(cut) == list(states)
    with pytest.raises(zlib.error):
        entryset.unpack(cut)
    with pytest.raises(ValueError, match="not an entry set"):
        entryset.locs(zlib.compress(head))  # no end to the locs


def test_a_version_2_value_is_checked_as_it_is_read() -> None:
    """The value's Adler-32 is checked from the streams read and the one its header holds of
    the locs; the locs' own, when they are read. Any change to a byte is found."""
    states = {f"https://e.test/{i}": EntryState("2024-01-01", "daily", None, None)
              for i in range(2000)}
    blob = entryset.encode(states, {})
    assert zlib.decompress(blob)  # any zlib reader reads it whole
    header = json.loads(zlib.decompressobj().decompress(blob, 1000).split(b"\x02")[0])
    locs_start = len(blob) - 4 - header["e"] - header["locs"]["z"]
    for at in (len(blob) - 1, locs_start // 2, locs_start + 5):
        spoilt = bytearray(blob)
        spoilt[at] ^= 0x55
        with pytest.raises((ValueError, zlib.error)):
            entryset.decode(bytes(spoilt))


values = st.lists(st.none() | st.sampled_from(["", "x", '{"image":[{"loc":"https://e.test/i.jpg"}]}',
                                              "é" * 40]), max_size=300)


# No deadline: an example takes 160 ms on a quiet machine and twice that on a busy one; what
# is held is the packed bytes, not the time.
@settings(deadline=None)
@given(values, st.lists(st.integers(min_value=1, max_value=90), min_size=1), st.booleans())
def test_a_stream_packs_as_the_column_text_does(extensions: list[str | None], cuts: list[int],
                                                 whole: bool) -> None:
    """The extensions column compressed as it comes gives the very bytes its text does (so a
    set's bytes say whether its entries changed, however it was made), whatever the batches."""
    if whole:  # and a column of one value repeated, which deflate compresses far
        extensions = ['{"image":[{"loc":"https://e.test/i.jpg"}]}'] * 20_000
    size = len(extensions)
    locs = [f"https://e.test/{i}" for i in range(size)]
    fields = [["2024-01-01"] * size, [None] * size, ["0.5"] * size]
    stream, start = columnstream.Stream(), 0
    for cut in itertools.cycle(cuts):
        if start >= size:
            break
        stream.add(extensions[start : start + cut])
        start += cut
    assert stream.values() == extensions
    packed = entryset.pack(entryset.clean_columns(locs, fields, stream), stream)
    assert packed == entryset.pack(entryset.clean_columns(locs, [*fields, extensions]))
    back = entryset.unpack(packed)
    assert back.column(4) == extensions
    assert back.absent(4) == (size > 0 and extensions.count(None) == size)
    assert zlib.decompress(packed)  # one zlib value: its Adler-32 is that of the whole text


def test_sets_packed_in_one_stream_still_read() -> None:
    """Sets stored before the extensions had a deflate stream of their own."""
    states = {"https://e.test/a": EntryState("2024-01-01", None, None, '{"x":1}')}
    columns = entryset.columns(states, {})
    old = _version_1(columns)
    assert entryset.decode(old).states == states
    assert entryset.locs(old) == list(states)
    back, now = entryset.unpack(old), entryset.unpack(entryset.pack(columns))
    assert back.header == dict(now.header, v=1)
    assert back.texts == [now.loc_text(), *now.texts[1:]]


def test_sets_of_version_1_read_as_they_were_and_pack_as_they_say() -> None:
    states = {f"https://e.test/{i}": EntryState("2024-01-01", None, "0.5", None, i % 3 > 0)
              for i in range(300)}
    columns = entryset.columns(states, {"https://e.test/4": "priority-invalid"})
    old = _version_1(columns)
    back = entryset.unpack(old)
    assert back.packed is None
    assert entryset.decode(old) == entryset.decode(entryset.pack(columns))
    repacked = entryset.pack(back)  # as a check that changes its verdicts does (pipeline)
    assert repacked == old
    back.header["v"] = 2
    assert entryset.pack(back) == entryset.pack(columns)  # and as version 2, when it says so
    stored = entryset.unpack(entryset.pack(columns))  # version 2, its locs not inflated
    stored.header["v"] = 1  # written back as version 1 (migration 0014's downgrade)
    assert entryset.pack(stored) == old
    assert entryset.head(old[:512]) == entryset.head(entryset.pack(columns)[:512])


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
    with pytest.raises(ValueError, match="not an entry set"):
        entryset.decode(blob)


@given(entries)
def test_a_stored_set_packs_again_into_its_own_bytes(states: dict[str, EntryState]) -> None:
    blob = entryset.encode(states, {})
    assert entryset.pack(entryset.unpack(blob)) == blob


def test_stored_streams_are_copied_not_compressed_again(monkeypatch: pytest.MonkeyPatch,
                                                        ) -> None:
    """The locs' and the extensions' streams of a stored set are copied into a set that has the
    same locs and extensions text (the very text read); any other text is compressed."""
    states = {f"https://e.test/{i}": EntryState("2024-01-01", None, None, f'{{"n":{i}}}')
              for i in range(3000)}
    blob = entryset.encode(states, {})
    stored = entryset.unpack(blob)
    assert stored.tail is not None
    compressed: list[int] = []
    real = zlib.compressobj

    def counted(*args: int) -> object:
        compressed.append(len(args))
        return real(*args)

    monkeypatch.setattr(entryset.zlib, "compressobj", counted)
    monkeypatch.setattr(entryset.packedlocs.zlib, "compressobj", counted)
    assert entryset.pack(stored) == blob
    assert len(compressed) == 1  # the header and the three short columns alone
    stored.texts[4] = "".join(list(stored.texts[4]))  # equal, but another object
    assert entryset.pack(stored) == blob
    assert len(compressed) == 3  # and the extensions
    assert stored.pending
