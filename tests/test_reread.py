"""reread: a re-read document checked against its stored entry set gives what validating the
whole document, encoding it and diffing it against the stored set give."""

from __future__ import annotations

from array import array
from dataclasses import asdict
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor.codec import changepacks, changerows, entryset, fingerprints, packedlocs
from monitor.core.model import Entry
from monitor.read import diff as diffing
from monitor.read import digest, reread, validate
from monitor.read.diff import lastmod_earlier

URL = "https://e.test/sitemaps/a.xml"
T0 = datetime(2024, 6, 1, 12, tzinfo=UTC)  # the check that stored the set

locs = st.sampled_from([f"https://e.test/sitemaps/{i}" for i in range(10)]
                       + ["https://other.test/x", "ftp://e.test/y", "https://e.test/up",
                          # one page twice (a #fragment, an escape's case), a stray %
                          "https://e.test/sitemaps/1#top", "https://e.test/sitemaps/%7e",
                          "https://e.test/sitemaps/%7E", "https://e.test/sitemaps/100%"])
# Dates before, between and after the two checks: "2024-06-05" is in the future of T0 only;
# "2024-06-02" is tomorrow at T0 in UTC, but today at UTC+14.
lastmods = st.none() | st.sampled_from(
    ["2024-01-01", "2024-06-05", "2024-06-05T10:00:00Z", "2999-01-01", "yesterday", "2024-13",
     "2024-06-02", "2024-06-03"])
changefreqs = st.none() | st.sampled_from(["daily", "Weekly", "often", ""])
priorities = st.none() | st.sampled_from(["0.5", "1.0", "2", "x"])
extensions = st.none() | st.sampled_from(['{"image":[{"loc":"a"}]}', '{"image":[{"loc":"b"}]}'])
fields = st.tuples(lastmods, changefreqs, priorities, extensions)
later = st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=30))
# News published the day before T0: too old (news-too-old) from T0 + 1 day on.
NEWS = ('{"news":[{"publication":{"language":"en","name":"The Daily"},'
        '"publication_date":"2024-05-31T12:00:00Z","title":"Headline"}]}')
# Fields without an issue, but where a lastmod is: what a CMS's sitemap usually has.
usual = st.tuples(lastmods, st.sampled_from([None, "daily"]), st.sampled_from([None, "0.5"]),
                  st.sampled_from([None, '{"image":[{"loc":"a"}]}']))


def _page(row: tuple[str, object, object]) -> str:
    """A document lists each page once (two locs of one page are loc-duplicate)."""
    return validate.page(row[0])


def _stored(entries: list[Entry], now: datetime) -> bytes:
    checked = validate.validate_document(entries, URL, now=now)
    return entryset.encode(checked.entries, checked.rules)


def _expected(previous: bytes, entries: list[Entry], now: datetime, examples: int,
              ) -> tuple[entryset.Columns, dict[str, int], list[object], int, list[object],
                         tuple[int, int]]:
    """What the full path makes of the document: validate, diff_stored (which adds
    lastmod-regressed to the verdicts), encode."""
    checked = validate.validate_document(entries, URL, now=now)
    lastmods = diffing.Lastmods(checked.rules)
    changes = diffing.diff_stored(entryset.unpack(previous), checked.entries, lastmods)
    columns = entryset.columns(checked.entries, checked.rules)
    counts: dict[str, int] = {}
    for issue in checked.issues:
        counts[issue.rule] = counts.get(issue.rule, 0) + 1
    issues = checked.issues
    if lastmods.regressed:
        counts["lastmod-regressed"] = len(lastmods.regressed)
        issues = [validate.issue(rule, entries[i], URL)
                  for i, ids in sorted(columns.rules().items()) for rule in ids.split()]
    tally = (columns.present(1) + lastmods.compared, lastmods.changed)
    return (columns, counts, issues[:examples], checked.invalid, changes, tally)


def _valid(lastmod: str | None) -> bool:
    return lastmod is not None and lastmod not in ("yesterday", "2024-13")


@given(st.lists(st.tuples(locs, fields, fields), unique_by=_page, min_size=1),
       later, st.integers(min_value=0, max_value=4))
def test_reread_is_validate_encode_and_diff(rows: list[tuple[str, tuple[str | None, ...],
                                                             tuple[str | None, ...]]],
                                            elapsed: timedelta, examples: int) -> None:
    before = [Entry(loc, *old) for loc, old, _ in rows]
    after = [Entry(loc, *new) for loc, _, new in rows]
    previous = _stored(before, T0)
    now = T0 + elapsed
    found = reread.reread(after, entryset.unpack(previous), URL, now=now, examples=examples,
                          fingerprints=True)
    assert found is not None
    _assert_full_path(found, previous, rows, now, examples)
    assert found.hashes == _fingerprints(after)


def _fingerprints(entries: list[Entry]) -> bytes:
    """What ``digest`` gives a new document of these entries as its ``hashes``."""
    return array("Q", fingerprints.loc_hashes(entry.loc for entry in entries)).tobytes()


@given(st.lists(st.tuples(locs, st.one_of(usual, usual, fields,
                                          st.tuples(lastmods, st.just(None), st.just(None),
                                                    st.just(NEWS))), lastmods),
                unique_by=_page, min_size=1),
       later, st.integers(min_value=0, max_value=4), st.lists(st.integers(1, 5), max_size=12))
def test_a_reread_where_only_lastmods_moved_is_the_full_path(
        moves: list[tuple[str, tuple[str | None, ...], str | None]], elapsed: timedelta,
        examples: int, cuts: list[int]) -> None:
    """A CMS that stamps "now": only lastmods move. Batches of any size, with and without
    a stored verdict, an invalid entry or news in them, give what the full path gives."""
    rows = [(loc, old, (lastmod, *old[1:])) for loc, old, lastmod in moves]
    before = [Entry(loc, *old) for loc, old, _ in rows]
    after = [Entry(loc, *new) for loc, _, new in rows]
    previous = _stored(before, T0)
    now = T0 + elapsed
    reader = reread.Rereader(entryset.unpack(previous), URL, now=now, examples=examples,
                             fingerprints=True)
    start = 0
    for cut in [*cuts, len(after)]:
        assert reader.add(after[start : start + cut])
        start = min(start + cut, len(after))
    found = reader.finish()
    assert found is not None
    _assert_full_path(found, previous, rows, now, examples)
    assert found.hashes == _fingerprints(after)  # worked out a batch at a time


def test_only_lastmods_moved_in_a_batch_without_verdicts_validates_only_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The usual batch of such a re-read: no stored verdict, every other field as it was.
    Its lastmods alone are looked at (CleanDocument.check is not asked), and an issue among
    them is still found; a batch with a stored verdict is checked whole."""
    before = [Entry(f"https://e.test/sitemaps/{i}", "2024-01-01", "daily", "0.5")
              for i in range(6)]
    previous = _stored(before, T0)
    after = [entry._replace(lastmod=lastmod) for entry, lastmod in zip(
        before, ["2024-02-01", "2024-03-01", "2024-02-01T10:00:00Z", None, "2999-01-01",
                 "2024-13"], strict=True)]
    checked: list[int] = []
    original = validate.CleanDocument.check

    def check(self: validate.CleanDocument, batch: list[Entry]) -> bool:
        checked.append(len(batch))
        return original(self, batch)

    monkeypatch.setattr(validate.CleanDocument, "check", check)
    reader = reread.Rereader(entryset.unpack(previous), URL, now=T0, examples=10)
    assert reader.add(after[:4])  # good lastmods: the quick way, nothing found
    assert reader.add(after[4:])  # a future and an invalid one: the quick way finds them
    found = reader.finish()
    assert found is not None
    assert checked == []
    rows = [(e.loc, tuple(e[1:]), tuple(a[1:])) for e, a in zip(before, after, strict=True)]
    _assert_full_path(found, previous, rows, T0, 10)
    assert found.counts == {"lastmod-future": 1, "lastmod-invalid": 1}
    # The next re-read moves every lastmod again: the batch holding the stored verdicts is
    # checked whole, the other the quick way.
    again = [entry._replace(lastmod="2024-04-01") for entry in after]
    reader = reread.Rereader(found.columns, URL, now=T0, examples=10)
    assert reader.add(again[:3])
    assert reader.add(again[3:])
    assert reader.finish() is not None
    assert checked == [3]


def _assert_full_path(found: reread.Reread, previous: bytes,
                      rows: list[tuple[str, tuple[str | None, ...], tuple[str | None, ...]]],
                      now: datetime, examples: int) -> None:
    """``found`` is what validating ``rows``' new fields, encoding and diffing them give."""
    after = [Entry(loc, *new) for loc, _, new in rows]
    columns, counts, issues, invalid, changes, tally = _expected(previous, after, now, examples)
    assert found.columns == columns
    assert entryset.pack(found.columns) == entryset.pack(columns)
    assert list(found.locs) == [loc for loc, _, _ in rows]
    assert (found.counts, found.issues, found.invalid) == (counts, issues, invalid)
    # The invalid ones as rows, the changed ones packed at their places in the new columns.
    stored = list(changerows.decode(found.rows))
    assert stored == [r for r in changerows.of(changes) if r[0] != "changed"]
    packed = list(changepacks.rows(found.packs, entryset.pack(found.columns), previous))
    assert packed == [r for r in changerows.of(changes) if r[0] == "changed"]
    assert found.row_examples == changes[:examples]
    assert sum(found.row_counts.values()) == len(changes)
    # By its definition: the lastmods valid on both sides, those that changed, and
    # those that went back.
    both = [(old[0], new[0]) for _, old, new in rows if _valid(old[0]) and _valid(new[0])]
    moved = [(was, now) for was, now in both if was != now]
    assert (found.lastmod_compared, found.lastmod_changed) == tally == (len(both), len(moved))
    assert counts.get("lastmod-regressed", 0) == sum(
        lastmod_earlier(now, was) for was, now in moved)


@given(st.lists(st.tuples(locs, fields), max_size=8), st.lists(st.tuples(locs, fields),
                                                                max_size=8))
def test_reread_declines_other_locs(before: list[tuple[str, tuple[str | None, ...]]],
                                    after: list[tuple[str, tuple[str | None, ...]]]) -> None:
    """Other locs, another order, a duplicate, an empty document: the whole document is
    validated (None), else the result is the full path's."""
    old = [Entry(loc, *values) for loc, values in before]
    new = [Entry(loc, *values) for loc, values in after]
    previous = _stored(old, T0)
    found = reread.reread(new, entryset.unpack(previous), URL, now=T0, examples=5)
    # What the set keeps: each page once (a second loc of one page is a duplicate).
    stored_locs = list(entryset.unpack(previous).locs())
    if not new or [loc for loc, _ in after] != stored_locs:
        assert found is None
    else:
        assert found is not None
        assert found.columns == _expected(previous, new, T0, 5)[0]


def test_a_lifted_future_lastmod_is_validated_again() -> None:
    entries = [Entry("https://e.test/sitemaps/1", "2024-06-05"),
               Entry("https://e.test/sitemaps/2", "2024-01-01", "often")]
    previous = _stored(entries, T0)
    assert entryset.unpack(previous).header["rules"] == {"0": "lastmod-future",
                                                          "1": "changefreq-invalid"}
    found = reread.reread(entries, entryset.unpack(previous), URL, now=T0 + timedelta(days=10),
                          examples=10)
    assert found is not None
    assert found.columns.header["rules"] == {"1": "changefreq-invalid"}
    assert found.counts == {"changefreq-invalid": 1}
    assert [i.rule for i in found.issues] == ["changefreq-invalid"]
    assert found.invalid == 0  # a field error leaves the URL valid
    assert found.rows == b""  # a warning lifted: the entry itself did not change


@pytest.mark.parametrize("verdicts", [None, 0])
def test_verdicts_of_other_rules_are_not_reused(verdicts: int | None) -> None:
    entries = [Entry("https://e.test/sitemaps/1", "2024-01-01")]
    columns = entryset.unpack(_stored(entries, T0))
    if verdicts is None:
        del columns.header["verdicts"]  # an entry set stored before verdicts were versioned
    else:
        columns.header["verdicts"] = verdicts
    assert reread.reread(entries, columns, URL, now=T0, examples=10) is None


def test_digest_takes_the_same_result_either_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """digest() through reread and through the whole validation: equal Digests (the hreflang
    balance too, which a re-read whose alternates are as stored takes from the stored set)."""
    def document(lastmod: str, priority: str, step: int = 1) -> bytes:
        def links(i: int) -> str:  # every 4th names itself and another, which does not answer
            return "" if i % 4 else (
                f'<xhtml:link rel="alternate" hreflang="en" href="https://e.test/sitemaps/{i}"/>'
                f'<xhtml:link rel="alternate" hreflang="de" '
                f'href="https://e.test/sitemaps/{i + step}"/>')
        urls = "".join(
            f"<url><loc>https://e.test/sitemaps/{i}</loc>"
            f"<lastmod>{lastmod if i % 3 else '2024-01-01'}</lastmod>"
            f"<priority>{priority if i % 5 else '0.5'}</priority>{links(i)}</url>"
            for i in range(40)
        )
        return ('<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
                f'xmlns:xhtml="http://www.w3.org/1999/xhtml">{urls}'
                "<url><lastmod>2024-01-01</lastmod></url></urlset>").encode()

    def job(body: bytes, previous: bytes | None, examples: int = 1000) -> digest.Job:
        return digest.Job(url=URL, now=T0, max_bytes=1 << 20, max_urls=50_000,
                          max_children=50_000, body=body, previous=previous, examples=examples)

    previous = digest.digest(job(document("2024-05-01", "0.7"), None)).data
    for body in (document("2024-05-02", "7"), document("2024-05-02", "0.7", 2),
                 document("2024-05-01", "0.7")):
        for examples in (1000, 3):
            fast = digest.digest(job(body, previous, examples))
            with monkeypatch.context() as patch:
                patch.setattr(reread.Rereader, "add", lambda *args, **kwargs: False)
                full = digest.digest(job(body, previous, examples))
            # The same changes: the fast path packs the changed ones (monitor.codec.changepacks),
            # the whole path leaves them rows for the store to pack.
            assert fast.data is not None
            assert full.packs == []
            assert sorted([*changerows.decode(fast.rows),
                           *changepacks.rows(fast.packs, fast.data, previous)]) == sorted(
                changerows.decode(full.rows))
            assert asdict(fast) == {**asdict(full), "rows": fast.rows, "packs": fast.packs}
            assert fast.invalid > 0  # the <url> without a loc, and invalid priorities
            assert fast.balance != 0
    assert fast.changes == []
    assert fast.row_counts == {}  # the last body is the stored document again


@given(st.lists(st.tuples(locs, fields, fields), unique_by=_page, min_size=1),
       later, st.integers(min_value=0, max_value=4), st.lists(st.integers(1, 5), max_size=12))
def test_a_document_read_in_batches_is_read_as_one(
        rows: list[tuple[str, tuple[str | None, ...], tuple[str | None, ...]]],
        elapsed: timedelta, examples: int, cuts: list[int]) -> None:
    """Rereader fed the entries as the parser yields them, in batches of any size (empty
    ones too), gives what one batch of all of them gives."""
    before = [Entry(loc, *old) for loc, old, _ in rows]
    after = [Entry(loc, *new) for loc, _, new in rows]
    stored = entryset.unpack(_stored(before, T0))
    now = T0 + elapsed
    whole = reread.reread(after, stored, URL, now=now, examples=examples)
    assert whole is not None
    reader = reread.Rereader(stored, URL, now=now, examples=examples)
    start = 0
    for cut in [*cuts, len(after)]:
        assert reader.add(after[start : start + cut - 1])
        start += cut - 1
    assert reader.add(after[start:])
    found = reader.finish()
    assert found is not None
    assert list(changerows.decode(found.rows)) == list(changerows.decode(whole.rows))
    assert found.packs == whole.packs
    assert {**asdict(found), "rows": b"", "packs": []} == {**asdict(whole), "rows": b"",
                                                             "packs": []}


def test_a_batch_of_other_locs_stops_the_reader() -> None:
    entries = [Entry(f"https://e.test/sitemaps/{i}", "2024-01-01") for i in range(6)]
    stored = entryset.unpack(_stored(entries, T0))
    for other in ([*entries[:3], Entry("https://e.test/sitemaps/x")],  # another loc
                  entries[:3] + entries[4:],  # one fewer
                  [*entries, Entry("https://e.test/sitemaps/9")]):  # one more
        reader = reread.Rereader(stored, URL, now=T0, examples=5)
        fed = reader.add(other[:2]) and reader.add(other[2:])
        assert not fed or reader.finish() is None
    # a loc that is another's prefix is no match either (the stored text goes on)
    prefix = [*entries[:5], Entry("https://e.test/sitemaps/")]
    reader = reread.Rereader(stored, URL, now=T0, examples=5)
    assert not reader.add(prefix)


@pytest.mark.parametrize("changed", [None, 150, 3_100, 4_999])
def test_stored_locs_are_compared_by_their_digests_a_batch_at_a_time(changed: int | None,
                                                                    ) -> None:
    """A stored set of version 2 is read without its locs (``pending``), and a document's locs
    are compared with its digests as batches come: one that differs is declined at the batch
    that completes the digest group it lies in (the last, partial group at the end), and the
    stored locs are never inflated; the new columns carry the stored locs' stream."""
    entries = [Entry(f"https://e.test/{i:05d}/{'p' * 40}", "2024-01-01") for i in range(5_000)]
    previous = _stored(entries, T0)
    stored = entryset.unpack(previous)
    assert stored.pending
    after = [e._replace(lastmod="2024-02-02") for e in entries]
    if changed is not None:
        after[changed] = after[changed]._replace(loc=after[changed].loc + "x")
    reader = reread.Rereader(stored, URL, now=T0, examples=3)
    ends = list(range(500, 5_001, 500))
    accepted = [reader.add(after[end - 500 : end]) for end in ends if reader.ok]
    assert stored.pending  # never inflated
    if changed is None:
        assert all(accepted)
        found = reader.finish()
        assert found is not None
        assert found.columns.packed is stored.packed
        assert found.columns == _expected(previous, after, T0, 3)[0]
        return
    declined = len(accepted) - 1  # the batch at which add() said no
    assert not accepted[-1]
    assert all(accepted[:-1])
    loc_bytes = sum(len(e.loc) + 1 for e in entries[: changed + 1])
    group_end = (loc_bytes // packedlocs.GROUP + 1) * packedlocs.GROUP
    total = sum(len(e.loc) + 1 for e in entries) - 1
    batch = next(k for k, end in enumerate(ends)
                 if sum(len(e.loc) + 1 for e in entries[:end]) - 1 >= min(group_end, total))
    assert declined == batch
    assert reader.finish() is None
