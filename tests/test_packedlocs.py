"""packedlocs: the stored locs as a stream of their own, and the chain of digests by which a
re-read document's locs are compared with them without inflating them."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor.codec import packedlocs
from monitor.codec.packedlocs import GROUP

LOCS = "\x00".join(f"https://e.test/{i}/{'é' * (i % 7)}" for i in range(12_000))  # ~3.5 groups


def test_a_packed_column_reads_back_and_is_a_deflate_stream_of_its_own() -> None:
    packed = packedlocs.pack(LOCS)
    assert packed.text() == LOCS
    assert zlib.decompressobj(-zlib.MAX_WBITS).decompress(packed.data) == LOCS.encode() + b"\x02"
    assert len(packed.digests) == 2 * 8 * (len(LOCS.encode()) // GROUP)
    assert packedlocs.of(packed.describe(), packed.data) == packed
    with pytest.raises(ValueError, match="not where its header says"):
        packedlocs.of(packed.describe(), packed.data[:-1])


def test_a_spoilt_stream_is_found() -> None:
    packed = packedlocs.pack(LOCS)
    other = packedlocs.PackedLocs(packed.data, packed.check ^ 1, packed.length, packed.digests,
                                  packed.digest)
    with pytest.raises(ValueError, match="checksum"):
        other.text()


@given(st.lists(st.integers(min_value=0, max_value=3 * GROUP), max_size=8))
def test_digests_fed_in_any_pieces_are_the_packed_ones(cuts: list[int]) -> None:
    data = LOCS.encode()
    packed = packedlocs.pack(LOCS)
    digests = packedlocs.Digests(packed)
    start = 0
    for cut in sorted(cuts):
        digests.update(data[start:cut])
        start = max(start, cut)
    digests.update(data[start:])
    assert digests.ok
    assert digests.matches(packed)
    plain = packedlocs.Digests()
    plain.update(data)
    assert plain.finish() == (packed.digests, packed.digest)


@pytest.mark.parametrize("at", [10, GROUP + 3, 3 * GROUP - 1, len(LOCS.encode()) - 2])
def test_a_text_that_differs_anywhere_does_not_match(at: int) -> None:
    """At a full group's end the chain says so at once (``ok``); in the last, partial group,
    only the whole text's digest does."""
    packed = packedlocs.pack(LOCS)
    data = bytearray(LOCS.encode())
    data[at] ^= 0x01
    digests = packedlocs.Digests(packed)
    digests.update(bytes(data[: (at // GROUP + 1) * GROUP]))
    full_group = (at // GROUP + 1) * GROUP <= len(data)
    assert digests.ok is not full_group
    digests.update(bytes(data[(at // GROUP + 1) * GROUP :]))
    assert not digests.matches(packed)


def test_a_text_longer_or_shorter_does_not_match() -> None:
    packed = packedlocs.pack(LOCS)
    for text in (LOCS + "\x00https://e.test/more", LOCS[: -10], LOCS[: 2 * GROUP]):
        digests = packedlocs.Digests(packed)
        digests.update(text.encode())
        assert not digests.matches(packed)
