"""Bodies inflated as they arrive, bounded: the one path of fetched bodies and local files.

``Inflate`` is one compression layer (gzip, deflate, or a sniff for the gzip magic), fed in
pieces and never asked for more than ``CHUNK_SIZE`` of output at once; ``Body`` runs a body
through its layers and stops it at ``max_bytes`` of output, so a gzip bomb is cut while it
inflates and never held whole. ``monitor.read.fetch`` uses it for HTTP bodies, ``read_file`` for
``validate FILE`` (a local ``.gz`` file is bounded exactly as a fetch is). No httpx here:
``validate FILE`` does not pay for importing it.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

from monitor.core.errors import FetchError
from monitor.core.rules import RuleId

__all__ = ["CHUNK_SIZE", "Body", "Inflate", "layers", "read_file"]

CHUNK_SIZE = 64 * 1024
_GZIP_MAGIC = b"\x1f\x8b"


class Inflate:
    """One compression layer, inflated incrementally in bounded pieces.

    ``mode`` is ``gzip``, ``deflate`` (zlib-wrapped or raw, whichever the stream is) or
    ``sniff`` (gzip if the first bytes are the gzip magic, else passed through unchanged).
    """

    def __init__(self, mode: str, url: str) -> None:
        self._mode = mode
        self._url = url
        self._head = b""  # the first bytes, held until the format can be told
        self._inflater: zlib._Decompress | None = None
        self._passthrough = False
        self._done = False  # trailing bytes after the (last) member are ignored, like gzip(1)

    def _error(self, reason: str) -> FetchError:
        kind = "decode" if self._mode == "deflate" else RuleId.GZIP_INVALID
        return FetchError(kind, f"cannot decompress {self._url}: {reason}", permanent=True)

    def _start(self, head: bytes) -> None:
        if self._mode == "deflate":
            # RFC 9110 deflate is zlib-wrapped; some servers send raw deflate instead.
            zlib_header = (head[0] & 0x0F) == 8 and (head[0] << 8 | head[1]) % 31 == 0
            self._inflater = zlib.decompressobj(zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS)
        elif head[:2] == _GZIP_MAGIC:
            self._inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif self._mode == "sniff":
            self._passthrough = True
        else:
            raise self._error("Content-Encoding says gzip but the body is not gzip")

    def feed(self, data: bytes) -> Iterator[bytes]:
        """Inflate ``data``; yield output in pieces of at most ``CHUNK_SIZE``."""
        if self._passthrough:
            if data:
                yield data
            return
        while data and not self._done:
            if self._inflater is None or self._inflater.eof:
                data = self._head + data
                if len(data) < 2:
                    self._head = data
                    return
                self._head = b""
                if self._inflater is not None and (
                    self._mode == "deflate" or data[:2] != _GZIP_MAGIC
                ):
                    self._done = True
                    return
                self._start(data)  # first member, or a further gzip member (multi-member files)
                if self._passthrough:
                    yield data
                    return
            inflater = self._inflater
            assert inflater is not None
            while True:
                try:
                    # max_length is what keeps a bomb bounded: never more out per call.
                    out = inflater.decompress(data, CHUNK_SIZE)
                except zlib.error as exc:
                    raise self._error(str(exc)) from None
                data = inflater.unused_data if inflater.eof else inflater.unconsumed_tail
                if out:
                    yield out
                if inflater.eof or (not data and len(out) < CHUNK_SIZE):
                    break

    def finish(self) -> Iterator[bytes]:
        """Flush at the end of the body; a truncated compressed stream is an error."""
        if self._passthrough:
            return
        if self._inflater is None:
            if self._head and self._mode == "sniff":
                yield self._head  # a one-byte body
            elif self._head:
                raise self._error("the body ends inside the compression header")
            return
        if not self._inflater.eof:
            raise self._error("the compressed body is truncated")


def _feed(layers: list[Inflate], data: bytes) -> Iterator[bytes]:
    if not layers:
        if data:
            yield data
        return
    for out in layers[0].feed(data):
        yield from _feed(layers[1:], out)


def _finish(layers: list[Inflate]) -> Iterator[bytes]:
    for index, layer in enumerate(layers):
        for out in layer.finish():
            yield from _feed(layers[index + 1 :], out)


def layers(content_encoding: str, url: str) -> list[Inflate]:
    """The decoders for a Content-Encoding, outermost first, then a gzip sniff for .gz files."""
    codings = [c.strip().lower() for c in content_encoding.split(",") if c.strip()]
    found: list[Inflate] = []
    for coding in reversed(codings):  # codings are listed in the order they were applied
        if coding in ("gzip", "x-gzip"):
            found.append(Inflate("gzip", url))
        elif coding == "deflate":
            found.append(Inflate("deflate", url))
        elif coding != "identity":
            raise FetchError(
                "decode", f"unsupported Content-Encoding {coding!r} from {url}", permanent=True
            )
    # A .gz sitemap is gzip whatever the headers say (and under a gzip Content-Encoding too).
    found.append(Inflate("sniff", url))
    return found


class Body:
    """A body's bytes decompressed through its layers, bounded by ``max_bytes`` as they are
    (a gzip bomb stops at the limit, never held whole): the one path of fetches and files."""

    def __init__(self, layers: list[Inflate], url: str, max_bytes: int) -> None:
        self._layers = layers
        self._url = url
        self._max_bytes = max_bytes
        # Compressed data is smaller than its output; a stream far past the limit is an
        # endless trickle of empty gzip members or padding, not a sitemap.
        self._max_wire = max_bytes + max_bytes // 8 + CHUNK_SIZE
        self._wire = 0
        self._total = 0

    def feed(self, data: bytes) -> Iterator[bytes]:
        """The output of the next piece of the body as it came."""
        self._wire += len(data)
        if self._wire > self._max_wire:
            raise _too_large(self._url, self._max_bytes)
        return self._bounded(_feed(self._layers, data))

    def finish(self) -> Iterator[bytes]:
        """The rest of the output once the body has ended."""
        return self._bounded(_finish(self._layers))

    def _bounded(self, pieces: Iterator[bytes]) -> Iterator[bytes]:
        for out in pieces:
            self._total += len(out)
            if self._total > self._max_bytes:
                raise _too_large(self._url, self._max_bytes)
            yield out


def _too_large(url: str, max_bytes: int) -> FetchError:
    return FetchError(
        RuleId.SIZE_TOO_LARGE, f"{url} is larger than max_bytes ({max_bytes} bytes, decompressed)",
        permanent=True,
    )


def read_file(path: str, url: str, max_bytes: int) -> Iterator[bytes]:
    """A local sitemap file's bytes, decompressed if it is gzip, exactly as a fetched body is
    (bounded by ``max_bytes`` while it inflates); raises ``FetchError`` as a fetch does, and
    ``OSError`` when the file cannot be read."""
    body = Body([Inflate("sniff", url)], url, max_bytes)
    with open(path, "rb") as file:
        while data := file.read(CHUNK_SIZE):
            yield from body.feed(data)
    yield from body.finish()
