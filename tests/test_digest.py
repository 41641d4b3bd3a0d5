"""digest: a new document validated as it is parsed, a re-read one against its stored set,
in a thread or a worker process."""

from __future__ import annotations

import asyncio
import gc
import itertools
import platform
import re
import subprocess
import sys
import tracemalloc
from array import array
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest

from monitor.codec import entryset, fingerprints
from monitor.core.model import EntryState
from monitor.read import alternates, digest, process
from monitor.read.diff import diff
from monitor.read.parse import SITEMAP_NS, parse_document
from monitor.read.validate import validate_document
from monitor.read.workers import DigestPool

URL = "https://example.com/sitemap.xml"
NOW = datetime(2026, 1, 1, tzinfo=UTC)

def test_rows_are_the_decoded_states() -> None:
    states = {"https://e.test/a": EntryState("2024-01-01", None, "0.5", None, True),
              "https://e.test/b": EntryState(None, "daily", None, '{"image":[]}', False)}
    rows = entryset.rows(entryset.unpack(entryset.encode(states, {})))
    assert {loc: EntryState(*row) for loc, row in rows.items()} == states
    assert list(rows) == list(states)


def _url(i: int, repeat: int) -> str:
    """Mostly valid entries; some with each kind of issue, some locless, and from ``repeat``
    on, the same locs again."""
    loc = f"https://example.com/p/{i % repeat}?a=1&amp;b=2"
    if i % 97 == 0:
        loc = f"https://other.test/{i}"  # out of scope: invalid
    lastmod = f"2025-{i % 12 + 1:02d}-01T{i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z"
    if i % 89 == 0:
        lastmod = "2099-01-01"  # in the future: a warning
    fields = [f"<loc>{loc}</loc>" if i % 83 else "", f"<lastmod>{lastmod}</lastmod>",
              "<changefreq>Weekly</changefreq>" if i % 5 else "<changefreq>sometimes</changefreq>",
              f"<priority>0.{i % 10}</priority>" if i % 7 else "<priority>2</priority>"]
    return "<url>" + "".join(fields) + "</url>"


def _document(count: int, repeat: int = 2900) -> bytes:
    body = "\n".join(_url(i, repeat) for i in range(count))
    return f'<?xml version="1.0"?><urlset xmlns="{SITEMAP_NS}">{body}</urlset>'.encode()


def _job(data: bytes, **options: object) -> digest.Job:
    return digest.Job(url=URL, now=NOW, max_bytes=1 << 26, max_urls=50_000,
                      max_children=50_000, body=data, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("baseline", [False, True])
def test_a_new_document_validated_as_it_is_parsed_is_parsed_then_validated(baseline: bool,
                                                                          ) -> None:
    found = _digests_as_parsed_then_validated(_document(3000), baseline)  # 420 KB: 7 chunks
    assert found.data is not None
    stored = entryset.unpack(found.data)
    assert stored.duplicates()
    assert stored.document_issues()
    assert {"loc-duplicate", "loc-missing", "loc-out-of-scope", "lastmod-future",
            "changefreq-invalid", "priority-invalid"} <= set(found.counts)


def _digests_as_parsed_then_validated(data: bytes, baseline: bool) -> digest.Digest:
    """A new document's digest, checked against parsing it whole, then validating it."""
    parsed = parse_document(data, URL)
    checked = validate_document(parsed.entries, URL, now=NOW)
    states = checked.entries
    found = digest.digest(_job(data, baseline=baseline, examples=50))
    assert found.failure is None
    # The stored set keeps the document's parse issues and duplicates with its entries.
    expected = entryset.columns(states, checked.rules)
    entryset.annotate(
        expected, issues=[{"rule": i.rule, "message": i.message, "loc": i.loc}
                          for i in parsed.issues],
        dropped=parsed.dropped_issues,
        duplicates=[i.loc for i in checked.issues if i.rule == "loc-duplicate"])
    assert found.data == entryset.pack(expected)
    assert found.hashes == array("Q", fingerprints.loc_hashes(states)).tobytes()
    assert found.counts == Counter(i.rule for i in parsed.issues + checked.issues)
    assert found.entry_issues == checked.issues[:50]
    assert (found.entries, found.urls, found.invalid) == (
        len(states), sum(s.valid for s in states.values()),
        checked.invalid + parsed.unkeyed_invalid)
    changes = diff({}, states)
    assert found.changes == (changes[:50] if baseline else changes)
    return found


def _clean_document(count: int, last: str = "") -> bytes:
    """A document without an issue (lastmods in each W3C shape, usual and unusual spellings),
    and ``last`` as its last <url>."""
    lastmods = ["2025-03-01", "2025-03-01T10:00Z", "2025-03-01T10:00:05+02:00",
                "2025-03-01T10:00:05.123-05:00", None]
    urls = []
    for i in range(count):
        fields = [f"<loc>https://example.com/p/{i}?a=1&amp;b=2</loc>"]
        if (lastmod := lastmods[i % 5]) is not None:
            fields.append(f"<lastmod>{lastmod.replace('01', f'{i % 28 + 1:02d}', 1)}</lastmod>")
        if i % 3:
            fields.append("<changefreq>" + ("weekly", "Daily")[i % 2] + "</changefreq>")
        if i % 4:
            fields.append("<priority>" + ("0.5", "1.000", "0.25")[i % 3] + "</priority>")
        if i % 10 == 0:
            fields.append(f"<image:image><image:loc>https://example.com/{i}.png</image:loc>"
                          "</image:image>")
        urls.append("<url>" + "".join(fields) + "</url>")
    body = "\n".join([*urls, last])
    return (f'<?xml version="1.0"?><urlset xmlns="{SITEMAP_NS}" '
            f'xmlns:image="http://www.google.com/schemas/sitemap-image/1.1">{body}</urlset>'
            ).encode()


@pytest.mark.parametrize("baseline", [False, True])
@pytest.mark.parametrize("last", [
    "",  # a document without an issue, digested from its columns
    "<url><loc>https://example.com/p/7?a=1&amp;b=2</loc></url>",  # a duplicate at the very end
    "<url><loc>https://example.com/late</loc><priority>high</priority></url>",  # an issue, late
    "<url><lastmod>2025-01-01</lastmod></url>",  # an entry without a loc: counted, not kept
], ids=["clean", "duplicate-last", "issue-last", "locless-last"])
def test_a_document_without_issues_until_its_end_digests_as_parsed_then_validated(
    baseline: bool, last: str,
) -> None:
    data = _clean_document(3000, last)  # about 300 KB: five chunks before ``last``
    found = _digests_as_parsed_then_validated(data, baseline)
    assert bool(found.counts) == bool(last)


def test_a_new_document_that_fails_at_its_end_keeps_nothing() -> None:
    found = digest.digest(_job(_document(3000)[:-20], baseline=True))
    assert found.failure is not None
    assert found.failure.rule == "xml-malformed"
    assert (found.data, found.hashes, found.entries, found.changes, found.counts) == (
        None, b"", 0, [], Counter())


def _peaks(data: bytes, job: digest.Job | None = None) -> tuple[digest.Digest, int, int]:
    """A document's digest (a new one's, unless ``job`` says otherwise), the peak memory of
    parsing it alone, and of digesting it."""
    gc.collect()
    tracemalloc.start()
    try:
        parsed = parse_document(data, URL)
        parse_peak = tracemalloc.get_traced_memory()[1]
        del parsed
        tracemalloc.reset_peak()
        found = digest.digest(job or _job(data, baseline=True))
        digest_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return found, parse_peak, digest_peak


def test_a_new_document_is_never_held_whole_twice() -> None:
    """Its parsed entries go as they are validated, and its states before compression: the
    digest's peak (the states and their columns) stays close to what holding the parsed
    document alone takes. Measured with batches of 256 KB of the body (tracemalloc's peaks
    are the same at every run): 1.151x; 1.172x with the states kept through compression,
    1.230x with each entry's own changefreq and priority. With 64 KB batches it was 1.09x, and
    those two 1.21x and 1.17x; 1.37x with the entries parsed first. The limit sits between."""
    found, parse_peak, digest_peak = _peaks(_document(20_000, repeat=20_000))
    assert found.entries > 19_000
    assert digest_peak < 1.16 * parse_peak, (digest_peak, parse_peak)


def test_a_document_without_issues_takes_less_than_its_parse() -> None:
    """Kept as columns of its values, equal values as one string, without a state per entry:
    the digest's peak stays well below the parse's. Measured: 0.58x the parse alone; 0.76x
    with every entry's own strings; 0.56x as states (before columns)."""
    found, parse_peak, digest_peak = _peaks(_clean_document(20_000))
    assert (found.entries, found.counts) == (20_000, Counter())
    assert digest_peak < 0.66 * parse_peak, (digest_peak, parse_peak)


def _alternates_document(count: int) -> bytes:
    """W1H's shape: every URL with three hreflang alternates (answered in the document) and
    an image."""
    urls = []
    for i in range(count):
        en, de = f"https://example.com/en/p/{i}", f"https://example.com/de/p/{i ^ 1}"
        links = "".join(f'<xhtml:link rel="alternate" hreflang="{code}" href="{href}"/>'
                        for code, href in (("en", en), ("de", de), ("x-default", en)))
        urls.append(f"<url><loc>{en if i % 2 == 0 else de}</loc><lastmod>2025-03-01</lastmod>"
                    f"{links}<image:image><image:loc>https://example.com/img/{i}.jpg</image:loc>"
                    "</image:image></url>")
    return (f'<?xml version="1.0"?><urlset xmlns="{SITEMAP_NS}" '
            'xmlns:xhtml="http://www.w3.org/1999/xhtml" '
            'xmlns:image="http://www.google.com/schemas/sitemap-image/1.1">'
            + "\n".join(urls) + "</urlset>").encode()


def test_extensions_are_held_compressed_as_they_come() -> None:
    """A document whose entries carry hreflang alternates and images (W1H's shape): its
    extensions column is compressed batch by batch (columnstream.Stream), never held as a string
    a value, nor as one text. Measured: 0.22x the parse alone; 0.91x before (the strings,
    then their text beside them at the peak)."""
    data = _alternates_document(10_000)
    found, parse_peak, digest_peak = _peaks(data)
    assert (found.entries, found.counts) == (10_000, Counter())
    assert digest_peak < 0.5 * parse_peak, (digest_peak, parse_peak)
    # The same set as the columns path packs (a new document after all: not a baseline).
    parsed = parse_document(data, URL)
    states = validate_document(parsed.entries, URL, now=NOW).entries
    expected = entryset.columns(states, {})
    entryset.annotate(expected, issues=[], dropped={}, duplicates=[], balance=alternates.balance(
        list(states), [state.extensions for state in states.values()]))
    new = digest.digest(_job(data))
    assert new.data == found.data == entryset.pack(expected)
    assert new.changes == diff({}, states)
    assert found.changes == new.changes[:1000]
    assert found.balance == alternates.balance(
        list(states), [state.extensions for state in states.values()])


def test_a_reread_holds_its_unchanged_extensions_once() -> None:
    """Re-read with 1% of its lastmods moved, a document whose extensions did not change
    keeps the stored extensions column as its new one (never joined again from the batches),
    and its stored set is decoded a column at a time. Measured: 0.89x the parse alone; 1.30x
    before (the column stored, the batches' texts, their join; the set decoded whole, then
    split)."""
    data = _alternates_document(10_000)
    first = digest.digest(_job(data, baseline=True))
    moved = itertools.count()
    changed = re.sub(rb"2025-03-01", lambda m: b"2025-03-02" if next(moved) % 100 == 0
                     else m.group(0), data)
    found, parse_peak, digest_peak = _peaks(changed, _job(changed, previous=first.data))
    assert found.row_counts == {"changed": 100}
    assert digest_peak < 1.05 * parse_peak, (digest_peak, parse_peak)
    assert found.data is not None
    assert first.data is not None
    after, before = entryset.unpack(found.data), entryset.unpack(first.data)
    assert after.texts[4] == before.texts[4]
    assert after.column(1)[::100] == ["2025-03-02"] * 100


@pytest.mark.parametrize("name", ["text-basic.txt", "rss-feed.xml", "atom-feed.xml",
                                  "urlset-extensions.xml", "sitemapindex-basic.xml"])
@pytest.mark.parametrize("stored", [False, True])
def test_every_kind_of_document_digests_as_parsed_then_validated(name: str, stored: bool) -> None:
    """New or re-read (another document's entry set stored: nothing to reuse), each kind."""
    data = (Path(__file__).parent / "data" / "sitemaps" / name).read_bytes()
    parsed = parse_document(data, URL)
    checked = validate_document(parsed.entries, URL, now=NOW)
    previous = entryset.encode({"https://example.com/gone": EntryState()}, {}) if stored else None
    found = digest.digest(_job(data, previous=previous))
    assert (found.kind, found.failure, found.children) == (parsed.kind, None, parsed.children)
    if parsed.kind == "sitemapindex":
        assert found.data is None
        return
    assert parsed.entries
    # The entry set of the entries' states and rules, with the document's hreflang balance.
    expected = entryset.columns(checked.entries, checked.rules)
    entryset.annotate(expected, issues=[], dropped={}, duplicates=[], balance=alternates.balance(
        list(checked.entries), [state.extensions for state in checked.entries.values()]))
    assert found.data == entryset.pack(expected)
    previous_states = {"https://example.com/gone": EntryState()} if stored else {}
    assert found.changes == diff(previous_states, checked.entries)


def test_what_the_forkserver_preloads_leaves_the_event_loop_out() -> None:
    """Worker processes are forked from a server that imports monitor.read.digest: asyncio and
    tempfile (6.5 MB of each such process) are loaded only by the side that calls them."""
    probe = ("import sys, monitor.read.digest; "
             "print(sorted(m for m in ('asyncio', 'tempfile', 'lxml.etree') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "['lxml.etree']"


_MALLOC_PROBE = """
import ctypes, resource, sys, threading
from monitor.read import process
process.return_big_buffers()
size = int(sys.argv[1])


def touch():  # what a socket read or a body's read does: a fresh buffer, each page written
    for _ in range(300):
        data = bytearray(size)
        data[::4096] = b"x" * len(data[::4096])
        del data


touch()  # the heap grows once
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
touch()
worker = threading.Thread(target=touch)
worker.start()
worker.join()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults, flush=True)
ctypes.CDLL("libc.so.6").malloc_stats()  # each arena's figures, on stderr
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")
def test_the_buffers_a_fetch_and_a_digest_churn_come_from_one_heap() -> None:
    """After return_big_buffers, a buffer of the size asyncio reads a socket with and a digest
    reads a body with (256 KiB, thousands a big document) is served again from the heap, not
    as a mapping of its own faulted in a page at a time each time; and a thread allocates from
    the one arena (malloc_stats lists no "Arena 1"). With the 128 KiB threshold alone, this
    probe counted 39,000 page faults for its 600 buffers, and an "Arena 1"."""
    import asyncio.selector_events

    size = max(digest._CHUNK, asyncio.selector_events._SelectorSocketTransport.max_size)
    assert size < process._MMAP_THRESHOLD - 4096
    done = subprocess.run([sys.executable, "-c", _MALLOC_PROBE, str(size)], capture_output=True,
                          text=True, check=True)
    pages = 600 * size // 4096
    assert int(done.stdout) < pages // 20, done.stdout
    assert "Arena 0:" in done.stderr
    assert "Arena 1:" not in done.stderr, done.stderr


def _big_jobs(tmp_path: Path) -> list[digest.Job]:
    """Four big documents (over IN_PROCESS_MAX), each a file, as a fetch leaves them."""
    data = _clean_document(12_000)
    assert len(data) > digest.IN_PROCESS_MAX
    jobs = []
    for i in range(4):
        path = tmp_path / f"{i}.xml"
        path.write_bytes(data)
        jobs.append(digest.Job(url=URL, now=NOW, max_bytes=1 << 26, max_urls=50_000,
                               max_children=50_000, path=str(path), baseline=True))
    return jobs


@pytest.mark.anyio
async def test_a_big_document_waits_for_a_free_worker_not_in_the_pools_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With one worker process, four big documents at once: never more than one in the pool
    (the others wait for whichever of it and this process frees first), and this process
    digests some of them while the worker is busy."""
    pool = DigestPool(size=1)
    jobs = _big_jobs(tmp_path)
    seen: list[tuple[int, int]] = []
    done = anyio.Event()

    async def watch() -> None:
        while not done.is_set():
            seen.append((pool.busy, pool.inline))
            await anyio.sleep(0.001)

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(watch)
            found = await asyncio.gather(*(pool.run(job) for job in jobs))
            done.set()
        assert pool.started()
    finally:
        pool.shutdown()
    assert [f.entries for f in found] == [12_000] * 4
    assert max(busy for busy, _ in seen) == 1
    assert max(inline for _, inline in seen) == 1
    assert any(busy and inline for busy, inline in seen)  # both digesting at once


@pytest.mark.anyio
async def test_a_big_document_not_to_be_digested_here_waits_for_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``here=False`` (a check past its fingerprints' bound): four big documents at once, with
    one worker process, are all digested there, this process digesting none of them, even
    before the pool is warm."""
    pool = DigestPool(size=1)
    jobs = _big_jobs(tmp_path)
    seen: list[int] = []
    done = anyio.Event()

    async def watch() -> None:
        while not done.is_set():
            seen.append(pool.inline)
            await anyio.sleep(0.001)

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(watch)
            found = await asyncio.gather(*(pool.run(job, here=False) for job in jobs))
            done.set()
        assert pool.started()
    finally:
        pool.shutdown()
    assert [f.entries for f in found] == [12_000] * 4
    assert seen
    assert max(seen) == 0


@pytest.mark.parametrize("stored", [False, True])
def test_a_job_without_fingerprints_digests_the_same_without_them(stored: bool) -> None:
    """New (columns of a clean document) or re-read (its stored set reused): the same digest,
    but ``hashes`` None; dropping duplicates works them out all the same."""
    data = _clean_document(300, "")
    previous = digest.digest(_job(data)).data if stored else None
    with_them = digest.digest(_job(data, previous=previous))
    without = digest.digest(_job(data, previous=previous, fingerprints=False))
    assert without.hashes is None
    assert with_them.hashes
    without.hashes = with_them.hashes
    assert without == with_them
    job = _job(data, previous=previous, fingerprints=False)
    found = digest.digest(job)
    loc = entryset.locs(found.data or b"")[0]
    digest.drop_duplicates(found, {loc}, job)
    assert found.hashes == array("Q", fingerprints.loc_hashes(
        entryset.locs(found.data or b""))).tobytes()


def test_a_re_read_document_whose_every_lastmod_changed_is_never_held_whole() -> None:
    """a re-read document is compared with its stored set a batch at a time, and its
    changes leave as compressed rows, so the digest holds neither its parsed entries nor its
    changes: its peak (the stored set, the new columns and their compression) stays near what
    holding the parsed document alone takes. Measured: 1.10x; 2.18x before (every entry
    parsed, then a Change with two states for each)."""
    before = _clean_document(20_000)
    after = before.replace(b"<lastmod>20", b"<lastmod>19")
    assert after != before
    stored = digest.digest(_job(before, baseline=True)).data
    found, parse_peak, digest_peak = _peaks(after, _job(after, previous=stored))
    assert (found.entries, found.changes) == (20_000, [])
    assert found.row_counts == {"changed": 16_000}  # every lastmod (one URL in 5 has none)
    assert digest_peak < 1.4 * parse_peak, (digest_peak, parse_peak)


def test_an_index_childs_lastmod_is_judged_as_an_entrys() -> None:
    """``<lastmod>yesterday</lastmod>`` of a sitemap index's child is lastmod-invalid, one in
    the future lastmod-future; the child is still read."""
    body = (f'<?xml version="1.0"?><sitemapindex xmlns="{SITEMAP_NS}">'
            "<sitemap><loc>https://example.com/a.xml</loc><lastmod>yesterday</lastmod></sitemap>"
            "<sitemap><loc>https://example.com/b.xml</loc><lastmod>2024-01-01</lastmod>"
            "</sitemap><sitemap><loc>https://example.com/c.xml</loc>"
            "<lastmod>2999-01-01</lastmod></sitemap><sitemap><loc>https://example.com/d.xml"
            "</loc><lastmod/></sitemap></sitemapindex>").encode()
    found = digest.digest(_job(body))
    assert found.children == [f"https://example.com/{n}.xml" for n in "abcd"]
    assert [(i.rule, i.loc, i.document) for i in found.issues] == [
        ("lastmod-invalid", "https://example.com/a.xml", URL),
        ("lastmod-future", "https://example.com/c.xml", URL)]
    assert "'yesterday'" in found.issues[0].message


def test_a_pool_stopped_while_it_starts_is_stopped_all_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``shutdown`` right after ``warm`` (a daemon stopped as a second big document arrives):
    the pool starting in the background is waited for and stopped, not started after the
    stop and left to the process's exit. The start is held until the stop has begun, as on a
    busy machine where the start comes late."""
    import multiprocessing
    import threading

    get_pool, stop = DigestPool._get_pool, DigestPool.shutdown
    stopping = threading.Event()

    def late(pool: DigestPool) -> object:
        if threading.current_thread().name == "digest-pool-start":
            assert stopping.wait(30), "shutdown never began"
        return get_pool(pool)

    def shutdown(pool: DigestPool) -> None:
        stopping.set()
        stop(pool)

    monkeypatch.setattr(DigestPool, "_get_pool", late)
    monkeypatch.setattr(DigestPool, "shutdown", shutdown)
    pool = DigestPool(size=1)
    pool.warm()
    pool.shutdown()
    for thread in threading.enumerate():
        if thread.name == "digest-pool-start":
            thread.join(30)
    try:
        assert not pool.started()
        assert multiprocessing.active_children() == []
    finally:
        pool.shutdown()


def test_one_function_chooses_the_validation_path() -> None:
    data = _document(3)
    assert digest.validation_path(_job(data)) == "new"
    assert digest.validation_path(_job(data, previous=b"stored", baseline=True)) == "new"
    assert digest.validation_path(_job(data, previous=b"stored")) == "reread"
