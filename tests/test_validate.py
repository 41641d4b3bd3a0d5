"""The entry rules: loc, lastmod, changefreq, priority, duplicates; verdicts and counts."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.core.model import RULES, UNUSABLE_LOC, Entry, EntryState
from monitor.read.validate import (
    MAX_LOC_LENGTH,
    CleanDocument,
    ValidatedDocument,
    _lastmod_rule,
    _latest_day,
    validate_document,
)

DOC = "https://example.com/sitemaps/sitemap.xml"
NOW = datetime(2024, 6, 15, 12, 0, 0, tzinfo=UTC)


def check(*entries: Entry, document: str = DOC, seen: set[str] | None = None) -> ValidatedDocument:
    return validate_document(entries, document, now=NOW, seen=seen)


def rules_of(entry: Entry, document: str = DOC) -> str | None:
    result = check(entry, document=document)
    return result.rules.get(entry.loc)


IN = "https://example.com/sitemaps/page"

# (id, entry, expected space-separated rule ids or None)
CASES: list[tuple[str, Entry, str | None]] = [
    ("clean", Entry(IN, "2024-06-01", "daily", "0.5"), None),
    ("nothing-but-loc", Entry(IN), None),
    ("deeper", Entry("https://example.com/sitemaps/a/b/c?x=1#f"), None),
    ("host-case", Entry("HTTPS://Example.COM/sitemaps/x"), None),
    ("explicit-default-port", Entry("https://example.com:443/sitemaps/x"), None),
    # loc
    ("relative", Entry("/sitemaps/page"), "loc-not-absolute"),
    ("no-scheme", Entry("example.com/sitemaps/page"), "loc-not-absolute"),
    ("ftp", Entry("ftp://example.com/sitemaps/page"), "loc-not-absolute"),
    ("no-host", Entry("https:///sitemaps/page"), "loc-not-absolute"),
    ("bad-port", Entry("https://example.com:99999/sitemaps/page"), "loc-not-absolute"),
    ("bad-ipv6", Entry("https://[::1/sitemaps/page"), "loc-not-absolute"),
    ("mailto", Entry("mailto:someone@example.com"), "loc-not-absolute"),
    ("too-long", Entry(IN + "x" * (2048 - len(IN))), "loc-too-long"),
    ("just-short-enough", Entry(IN + "x" * (2047 - len(IN))), None),
    ("other-host", Entry("https://www.example.com/sitemaps/page"), "loc-out-of-scope"),
    ("other-scheme", Entry("http://example.com/sitemaps/page"), "loc-out-of-scope"),
    ("other-port", Entry("https://example.com:8443/sitemaps/page"), "loc-out-of-scope"),
    ("above-directory", Entry("https://example.com/page"), "loc-out-of-scope"),
    ("sibling-directory", Entry("https://example.com/sitemaps2/page"), "loc-out-of-scope"),
    ("lookalike-host", Entry("https://example.com.evil.net/sitemaps/page"), "loc-out-of-scope"),
    ("long-and-out", Entry("https://other.net/" + "y" * 2100), "loc-too-long loc-out-of-scope"),
    ("space", Entry(IN + "/a b"), "loc-not-encoded"),
    ("raw-non-ascii", Entry(IN + "/caf\u00e9"), "loc-not-encoded"),
    ("quote", Entry(IN + '/"x"'), "loc-not-encoded"),
    ("escaped-non-ascii", Entry(IN + "/caf%C3%A9"), None),
    ("every-allowed-character", Entry(IN + "/-._~:/?#[]@!$&'()*+,;=%20"), None),
    ("relative-and-raw", Entry("/a b"), "loc-not-absolute loc-not-encoded"),
    ("lone-percent", Entry(IN + "/100%"), "loc-not-encoded"),
    ("percent-not-hex", Entry(IN + "/a%zz"), "loc-not-encoded"),
    ("percent-one-hex", Entry(IN + "/a%2"), "loc-not-encoded"),
    ("percent-one-hex-then-more", Entry(IN + "/a%2g?x=1"), "loc-not-encoded"),
    ("lower-case-escape", Entry(IN + "/caf%c3%a9"), None),
    # lastmod
    ("year", Entry(IN, "2024"), None),
    ("year-month", Entry(IN, "2024-06"), None),
    ("minutes-z", Entry(IN, "2024-06-01T10:30Z"), None),
    ("seconds-offset", Entry(IN, "2024-06-01T10:30:15+02:00"), None),
    ("fraction", Entry(IN, "2024-06-01T10:30:15.123456789-05:00"), None),
    ("leap-day", Entry(IN, "2024-02-29"), None),
    ("not-leap-day", Entry(IN, "2023-02-29"), "lastmod-invalid"),
    ("month-13", Entry(IN, "2024-13-01"), "lastmod-invalid"),
    ("month-00", Entry(IN, "2024-00"), "lastmod-invalid"),
    ("day-31-of-30", Entry(IN, "2024-04-31"), "lastmod-invalid"),
    ("year-zero", Entry(IN, "0000"), "lastmod-invalid"),
    ("one-digit-month", Entry(IN, "2024-6-01"), "lastmod-invalid"),
    ("no-timezone", Entry(IN, "2024-06-01T10:30:00"), "lastmod-invalid"),
    ("space-separator", Entry(IN, "2024-06-01 10:30:00Z"), "lastmod-invalid"),
    ("hour-only", Entry(IN, "2024-06-01T10Z"), "lastmod-invalid"),
    ("hour-25", Entry(IN, "2024-06-01T25:00Z"), "lastmod-invalid"),
    ("second-60", Entry(IN, "2024-06-01T10:00:60Z"), "lastmod-invalid"),
    ("compact-offset", Entry(IN, "2024-06-01T10:00:00+0200"), "lastmod-invalid"),
    ("basic-format", Entry(IN, "20240601"), "lastmod-invalid"),
    ("week-date", Entry(IN, "2024-W01-1"), "lastmod-invalid"),
    ("rfc822", Entry(IN, "Sat, 01 Jun 2024 10:00:00 GMT"), "lastmod-invalid"),
    ("arabic-digits", Entry(IN, "\u0662\u0660\u0662\u0664-06-01"), "lastmod-invalid"),
    ("words", Entry(IN, "yesterday"), "lastmod-invalid"),
    # lastmod in the future (NOW is 2024-06-15T12:00:00Z)
    ("today", Entry(IN, "2024-06-15"), None),
    # a bare date is future once it is later than today at UTC+14 (2024-06-16 02:00 there)
    ("tomorrow-in-utc", Entry(IN, "2024-06-16"), None),
    ("the-day-after", Entry(IN, "2024-06-17"), "lastmod-future"),
    ("this-month", Entry(IN, "2024-06"), None),
    ("next-month", Entry(IN, "2024-07"), "lastmod-future"),
    ("this-year", Entry(IN, "2024"), None),
    ("next-year", Entry(IN, "2025"), "lastmod-future"),
    ("exactly-now", Entry(IN, "2024-06-15T12:00:00Z"), None),
    ("a-second-later", Entry(IN, "2024-06-15T12:00:01Z"), "lastmod-future"),
    ("later-clock-earlier-instant", Entry(IN, "2024-06-15T13:00:00+02:00"), None),
    ("earlier-clock-later-instant", Entry(IN, "2024-06-15T11:00:00-02:00"), "lastmod-future"),
    # the last moment of a day two days back, in the westernmost offsets, is still past...
    ("two-days-back-far-west", Entry(IN, "2024-06-13T23:59:59.999-23:59"), None),
    # ...while yesterday's can be later than the check
    ("yesterday-far-west", Entry(IN, "2024-06-14T23:59:59-14:00"), "lastmod-future"),
    ("yesterday-far-west-earlier", Entry(IN, "2024-06-14T21:59:59-14:00"), None),
    # days well in the past still need a valid calendar date and clock
    ("not-leap-day-time", Entry(IN, "2023-02-29T10:00:00Z"), "lastmod-invalid"),
    ("day-30-of-february", Entry(IN, "2023-02-30T10:00Z"), "lastmod-invalid"),
    ("leap-day-time", Entry(IN, "2024-02-29T10:00:00Z"), None),
    ("hour-24", Entry(IN, "2024-06-01T24:00Z"), "lastmod-invalid"),
    ("minute-60", Entry(IN, "2024-06-01T23:60Z"), "lastmod-invalid"),
    ("offset-24", Entry(IN, "2024-06-01T10:00+24:00"), "lastmod-invalid"),
    ("offset-too-far", Entry(IN, "2024-06-01T10:00:00-99:00"), "lastmod-invalid"),
    ("empty-fraction", Entry(IN, "2024-06-01T10:00:00.Z"), "lastmod-invalid"),
    ("long-fraction", Entry(IN, "2024-06-01T10:00:00.123456789012+01:00"), None),
    ("trailing-text", Entry(IN, "2024-06-01T10:00:00Zabc"), "lastmod-invalid"),
    ("arabic-digit-clock", Entry(IN, "2024-06-01T1\u0660:00Z"), "lastmod-invalid"),
    ("date-then-junk", Entry(IN, "2024-06-01xx"), "lastmod-invalid"),
    # changefreq
    ("changefreq-upper", Entry(IN, changefreq="Weekly"), None),
    ("changefreq-never", Entry(IN, changefreq="never"), None),
    ("changefreq-bad", Entry(IN, changefreq="sometimes"), "changefreq-invalid"),
    # priority
    ("priority-zero", Entry(IN, priority="0"), None),
    ("priority-one", Entry(IN, priority="1.0"), None),
    ("priority-odd-spelling", Entry(IN, priority="0.125"), None),
    ("priority-leading-dot", Entry(IN, priority=".5"), None),
    ("priority-plus", Entry(IN, priority="+0.5"), None),
    ("priority-too-big", Entry(IN, priority="1.1"), "priority-invalid"),
    ("priority-negative", Entry(IN, priority="-0.1"), "priority-invalid"),
    ("priority-comma", Entry(IN, priority="0,5"), "priority-invalid"),
    ("priority-exponent", Entry(IN, priority="1e-1"), "priority-invalid"),
    ("priority-nan", Entry(IN, priority="nan"), "priority-invalid"),
    ("priority-underscore", Entry(IN, priority="0_5"), "priority-invalid"),
    # several at once, in a stable order
    (
        "everything",
        Entry("/x", "2024-02-30", "often", "2"),
        "loc-not-absolute lastmod-invalid changefreq-invalid priority-invalid",
    ),
]


@pytest.mark.parametrize(("entry", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rules(entry: Entry, expected: str | None) -> None:
    result = check(entry)
    assert result.rules.get(entry.loc) == expected
    found = [issue.rule for issue in result.issues]
    assert found == ([] if expected is None else expected.split())
    assert {RULES[rule] for rule in found} <= {"error", "warning"}
    for issue in result.issues:
        assert issue.loc == entry.loc
        assert issue.document == DOC
        assert issue.message
    # only an unusable loc makes an entry invalid; a field error leaves it a URL
    unusable = expected is not None and not UNUSABLE_LOC.isdisjoint(expected.split())
    assert result.entries[entry.loc].valid is not unusable
    assert result.invalid == int(unusable)


def test_warnings_keep_the_entry_valid() -> None:
    assert RULES["loc-out-of-scope"] == RULES["lastmod-future"] == "warning"
    result = check(Entry("https://other.net/x", "2030-01-01"))
    assert result.rules["https://other.net/x"] == "loc-out-of-scope lastmod-future"
    assert result.entries["https://other.net/x"].valid
    assert result.invalid == 0


def test_state_carries_the_attributes() -> None:
    entry = Entry(IN, "2024-06-01", "daily", "0.5", '{"image":[]}')
    state = check(entry).entries[IN]
    assert state == EntryState("2024-06-01", "daily", "0.5", '{"image":[]}', True)
    assert type(state) is EntryState
    assert hash(state) == hash(EntryState("2024-06-01", "daily", "0.5", '{"image":[]}', True))
    # a field error is reported and the URL stays valid; the value is kept as written
    bad = check(Entry(IN, "2024-99-01")).entries[IN]
    assert bad == EntryState("2024-99-01", None, None, None, True)
    unusable = check(Entry("/relative", "2024-06-01")).entries["/relative"]
    assert unusable == EntryState("2024-06-01", None, None, None, False)


def test_duplicates_in_one_document() -> None:
    first = Entry(IN, "2024-06-01")
    again = Entry(IN, "2024-06-02", "daily")
    other = Entry(IN + "2")
    result = check(first, other, again, Entry(IN + "2", priority="9"))
    assert list(result.entries) == [IN, IN + "2"]
    assert result.entries[IN].lastmod == "2024-06-01"  # the first occurrence wins
    assert result.entries[IN + "2"].priority is None
    assert [(i.rule, i.loc) for i in result.issues] == [
        ("loc-duplicate", IN),
        ("loc-duplicate", IN + "2"),
    ]
    assert result.invalid == 0  # a duplicate is a warning, counted apart
    assert result.duplicates == 2
    assert {RULES[i.rule] for i in result.issues} == {"warning"}
    assert result.rules == {}  # both kept entries are clean


def test_duplicates_across_documents_share_seen() -> None:
    seen: set[str] = set()
    one = check(Entry(IN), Entry(IN + "a"), seen=seen)
    assert seen == {IN, IN + "a"}
    two = check(Entry(IN + "b"), Entry(IN + "a"), seen=seen)
    assert (one.invalid, one.duplicates) == (0, 0)
    assert list(two.entries) == [IN + "b"]
    assert [(i.rule, i.loc) for i in two.issues] == [("loc-duplicate", IN + "a")]
    assert (two.invalid, two.duplicates) == (0, 1)
    assert seen == {IN, IN + "a", IN + "b"}


def test_invalid_counts_occurrences() -> None:
    result = check(
        Entry("/a"),
        Entry("/a"),
        Entry(IN, priority="5"),
        Entry(IN + "ok"),
        Entry("https://other.net/warn"),
        Entry(IN + "x" * MAX_LOC_LENGTH),
    )
    # /a and the long loc; not its duplicate, the bad priority or the warning
    assert result.invalid == 2
    assert result.duplicates == 1
    assert sum(not state.valid for state in result.entries.values()) == 2
    assert result.entries[IN].valid


def test_insertion_order_is_kept() -> None:
    locs = [f"{IN}/{i}" for i in (5, 3, 9, 1, 7)]
    assert list(check(*(Entry(loc) for loc in locs)).entries) == locs


@pytest.mark.parametrize(
    ("document", "loc", "expected"),
    [
        ("/tmp/sitemap.xml", "https://anything.example/x", None),
        ("sitemap.xml", "https://anything.example/x", None),
        ("https://example.com/sitemap.xml", "https://example.com/deep/x", None),
        ("https://example.com", "https://example.com/x", None),
        ("https://example.com:8080/s.xml", "https://example.com:8080/x", None),
        ("https://example.com:8080/s.xml", "https://example.com/x", "loc-out-of-scope"),
        ("http://example.com:80/s.xml", "http://example.com/x", None),
        ("https://example.com/a/b/s.xml", "https://example.com/a/x", "loc-out-of-scope"),
        ("/tmp/sitemap.xml", "/relative", "loc-not-absolute"),
        # one host, in its IDNA form or as written (a raw non-ASCII host is not encoded)
        ("https://xn--bcher-kva.example/s.xml", "https://b\u00fccher.example/x", "loc-not-encoded"),
        ("https://b\u00fccher.example/s.xml", "https://xn--bcher-kva.example/x", None),
        ("https://B\u00dcCHER.example/s.xml", "https://xn--bcher-kva.example/x", None),
        ("https://b\u00fccher.example/s.xml", "https://bucher.example/x", "loc-out-of-scope"),
    ],
)
def test_scope_follows_the_document(document: str, loc: str, expected: str | None) -> None:
    assert rules_of(Entry(loc), document=document) == expected


def test_a_bare_date_is_future_only_once_later_than_today_at_utc_plus_14() -> None:
    late_evening_west = datetime(2024, 6, 15, 23, 30, tzinfo=timezone(timedelta(hours=-5)))
    # At UTC+14 that is already the 16th, so the 16th is not in the future.
    result = validate_document([Entry(IN, "2024-06-16")], DOC, now=late_evening_west)
    assert result.rules == {}
    result = validate_document([Entry(IN, "2024-06-17")], DOC, now=late_evening_west)
    assert result.rules == {IN: "lastmod-future"}
    # The 16th begins at UTC+14 at 10:00 UTC on the 15th: from then on it is today somewhere.
    for now, rule in ((datetime(2024, 6, 15, 9, 59, 59, tzinfo=UTC), "lastmod-future"),
                      (datetime(2024, 6, 15, 10, 0, tzinfo=UTC), None)):
        for document in (validate_document([Entry(IN, "2024-06-16")], DOC, now=now),
                         validate_document([Entry(IN, "2024-06-16T00:00+14:00")], DOC, now=now)):
            assert document.rules.get(IN) == rule
        clean = CleanDocument(DOC, now=now)
        assert clean.add([Entry(IN, "2024-06-16")]) == (rule is None)


def test_two_locs_of_one_page_are_duplicates() -> None:
    """A #fragment never reaches the server, and %c3 is the byte %C3: one page each."""
    a, cafe = IN + "/a", IN + "/caf%C3%A9"
    result = check(Entry(a), Entry(a + "#top"), Entry(cafe), Entry(IN + "/caf%c3%a9"),
                   Entry(IN + "/b#x"), Entry(IN + "/b"), Entry(IN + "/b#y"), Entry(IN + "/c"))
    assert list(result.entries) == [a, cafe, IN + "/b#x", IN + "/c"]
    assert [i.loc for i in result.issues if i.rule == "loc-duplicate"] == [
        a + "#top", IN + "/caf%c3%a9", IN + "/b", IN + "/b#y"]
    assert result.duplicates == 4
    clean = CleanDocument(DOC, now=NOW)
    assert clean.add([Entry(a), Entry(a + "#top")])
    assert not clean.locs_ok()
    clean = CleanDocument(DOC, now=NOW)
    assert clean.add([Entry(a + "#top"), Entry(cafe), Entry(IN + "/caf%C3%A9x")])
    assert clean.locs_ok()
    seen: set[str] = set()
    check(Entry(a + "#top"), seen=seen)
    assert check(Entry(a), seen=seen).duplicates == 1


def test_naive_now_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone"):
        validate_document([Entry(IN)], DOC, now=datetime(2024, 6, 15))


def test_repeated_values_give_the_same_verdicts() -> None:
    """The verdict caches must not leak one entry's result into another's."""
    entries = [
        Entry(f"{IN}/{i}", lastmod, changefreq, priority)
        for i, (lastmod, changefreq, priority) in enumerate(
            [("2024-06-01", "daily", "0.5"), ("2024-99-01", "daily", "0.5")] * 3
            + [("2024-06-01", "daily", "0.5"), ("2030-01-01", "daily", "0.5")] * 2
        )
    ]
    result = check(*entries)
    for entry in entries:
        alone = check(entry)
        assert result.entries[entry.loc] == alone.entries[entry.loc]
        assert result.rules.get(entry.loc) == alone.rules.get(entry.loc)


def test_half_a_million_entries_in_one_call() -> None:
    """Many entries, many distinct lastmods: every one kept and valid (speed is measured in
    tests/benchmarks, not here)."""
    entries = [
        Entry(
            f"https://example.com/sitemaps/p/{i}?a=1&b=2",
            f"2024-0{i % 5 + 1}-{i % 28 + 1:02d}T{i % 24:02d}:{i % 60:02d}:{i % 59:02d}+00:00",
            ("daily", "weekly")[i % 2],
            f"0.{i % 10}",
        )
        for i in range(500_000)
    ]
    result = check(*entries)
    assert len(result.entries) == 500_000
    assert result.invalid == 0
    assert result.issues == []


# The fast path of validate_document must give _lastmod_rule's verdict for every value; these
# strategies aim at where a shortcut could go wrong: around "now" in any timezone, at month and
# day boundaries, out-of-range clocks and offsets, and junk after a valid date.
_NOWS = st.builds(
    lambda moment, offset: moment.replace(tzinfo=timezone(timedelta(minutes=offset))),
    st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2100, 12, 31)),
    st.integers(min_value=-(24 * 60 - 1), max_value=24 * 60 - 1),
)


# Each piece of a W3C time: well-formed values, and broken ones a fast path could let through.
_PIECES: list[tuple[list[str], list[str]]] = [
    (["T"], ["", " ", "t", "x", ":", "TT"]),
    (["00", "09", "12", "23"], ["24", "25", "99", "", "0", "000", "\u0660\u0660", "1:"]),
    ([":"], ["", ".", "-", "::"]),
    (["00", "30", "59"], ["60", "61", "99", "", "0", "000", "\u0660\u0660"]),
    (["", ":00", ":59", ":30.5", ":59.999999999", ":07.123456"],
     [":60", ":61", ":", ":5", ":005", ":59.", ":59,5", ":59..5", ":59.\u0660", ":59.1a"]),
    (["Z", "+00:00", "-00:00", "+14:00", "-14:00", "+23:59", "-23:59", "+05:30", "-09:45"],
     ["", "z", " Z", "Z\n", "UTC", "Z+01:00", "+0530", "+05", "+05:30:00", "+24:00", "-24:00",
      "+99:00", "+05:60", "+00:99", "-5:30", "+\u0660\u0660:00"]),
]  # fmt: skip


@st.composite
def _days(draw: st.DrawFn, now: datetime) -> str:
    """A YYYY-MM-DD near now's UTC date, well before it, or on a month boundary (maybe invalid)."""
    today = now.astimezone(UTC).date()
    kind = draw(st.integers(0, 2))
    if kind == 0:
        return (today + timedelta(days=draw(st.integers(-5, 3)))).isoformat()
    if kind == 1:  # well before the check, where the fast path answers
        return (today - timedelta(days=draw(st.integers(2, 4000)))).isoformat()
    year = today.year + draw(st.integers(-1, 1))
    month = draw(st.sampled_from([0, 1, 2, 3, 4, 6, 9, 11, 12, 13, today.month]))
    day = draw(st.sampled_from([0, 1, 27, 28, 29, 30, 31, 32, today.day]))
    return f"{year:04d}-{month:02d}-{day:02d}"


@st.composite
def _times(draw: st.DrawFn) -> str:
    """What may follow a date: a W3C time and zone, or one with exactly one piece broken."""
    broken = draw(st.integers(-1, len(_PIECES) - 1))  # -1: none
    return "".join(
        draw(st.sampled_from(bad if i == broken else good)) for i, (good, bad) in enumerate(_PIECES)
    )


@st.composite
def _lastmods(draw: st.DrawFn, now: datetime) -> str:
    """A lastmod value: mostly a date and time near now, sometimes a bare date or other text."""
    day = draw(_days(now))
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return day
    if kind == 1:
        return day[: draw(st.sampled_from([4, 7]))]
    if kind == 2:
        return day + draw(st.text("0123456789T:.+-Z ", max_size=16))
    return day + draw(_times())


def _expected(values: list[str], now: datetime) -> dict[str, str]:
    today = _latest_day(now)
    expected = {}
    for i, value in enumerate(values):
        rule = _lastmod_rule(value, now, today)
        if rule is not None:
            expected[f"{IN}/{i}"] = rule
    return expected


@settings(max_examples=500, deadline=None)
@given(data=st.data(), now=_NOWS)
def test_lastmod_verdicts_match_the_reference(data: st.DataObject, now: datetime) -> None:
    """One value per document: no cache can hide a wrong fast-path verdict."""
    value = data.draw(_lastmods(now))
    result = validate_document([Entry(f"{IN}/0", value)], DOC, now=now)
    assert result.rules == _expected([value], now)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), now=_NOWS)
def test_lastmod_verdicts_match_the_reference_in_bulk(data: st.DataObject, now: datetime) -> None:
    """Many values in one document share the per-day and per-value caches."""
    values = data.draw(st.lists(_lastmods(now), min_size=1, max_size=40))
    entries = [Entry(f"{IN}/{i}", value) for i, value in enumerate(values)]
    result = validate_document(entries, DOC, now=now)
    assert result.rules == _expected(values, now)
    assert result.invalid == 0  # a bad lastmod is an error of the field, never of the URL
    assert all(state.valid for state in result.entries.values())


def test_lastmod_days_around_the_check() -> None:
    """Each day from a week before to after now, at the edges of the clock and of the offsets."""
    now = datetime(2024, 3, 1, 0, 30, tzinfo=UTC)  # just after a month boundary in a leap year
    values = [
        f"{(date(2024, 2, 22) + timedelta(days=d)).isoformat()}{clock}{zone}"
        for d in range(12)
        for clock in ("", "T00:00", "T23:59:59", "T23:59:59.999999999")
        for zone in (("",) if not clock else ("Z", "+14:00", "-14:00", "-23:59", "+23:59"))
    ]
    result = validate_document([Entry(f"{IN}/{i}", v) for i, v in enumerate(values)], DOC, now=now)
    assert result.rules == _expected(values, now)
    assert "lastmod-future" in result.rules.values()  # the table reaches past the check
    assert len(result.rules) < len(values)


# CleanDocument must accept a document exactly when validate_document finds no issue in it (for
# locs that either start with the document's directory or are plainly elsewhere), and then keep
# the values validate_document keeps.
def _mostly(draw: st.DrawFn, good: st.SearchStrategy[str | None], *bad: object) -> object:
    """A good value nine times in ten, else one of ``bad`` (a value, or a strategy to draw)."""
    if draw(st.integers(0, 9)) or not bad:
        return draw(good)
    pick = draw(st.sampled_from(bad))
    return draw(pick) if isinstance(pick, st.SearchStrategy) else pick


@st.composite
def _entries(draw: st.DrawFn, now: datetime) -> list[Entry]:
    """Entries mostly without an issue, with now and then one that has one (or may have)."""
    entries = []
    for i in range(draw(st.integers(0, 12))):
        loc = _mostly(draw, st.just(f"{IN}/{i}"), "https://other.test/x", f"{IN}/{'x' * 2048}",
                      f"{IN}/0",  # out of scope, too long, the first loc again
                      f"{IN}/0#top", f"{IN}/{i}#top",  # the first page again, or not
                      f"{IN}/e%c3%a9", f"{IN}/e%C3%A9", f"{IN}/{i}%", f"{IN}/{i}%zz")
        lastmod = _mostly(
            draw, st.none() | st.sampled_from(
                ["2001-02-03", "2001-02-03T04:05Z", "2001-02-03T04:05:06.7+01:00"]),
            _lastmods(now), "2001-02-29", "2001-02-03T24:00Z", "2001-02-03 ",
        )
        changefreq = _mostly(draw, st.none() | st.sampled_from(["daily", "Weekly", "NEVER"]),
                             "sometimes", "", " daily")
        priority = _mostly(draw, st.none() | st.sampled_from(["0.5", "1", "0.50", "1.000", ".5"]),
                           "2", "-0", "0.5 ", "x", "")
        extensions = draw(st.none() | st.just('{"image":[{"loc":"x"}]}'))
        entries.append(Entry(loc, lastmod, changefreq, priority, extensions))  # type: ignore[arg-type]
    return entries


@settings(max_examples=400, deadline=None)
@given(data=st.data(), now=_NOWS)
def test_a_clean_document_is_one_validate_document_finds_no_issue_in(
    data: st.DataObject, now: datetime,
) -> None:
    entries = data.draw(_entries(now))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(entries)), max_size=4)))
    clean = CleanDocument(DOC, now=now)
    kept = [clean.add(entries[a:b]) for a, b in zip([0, *cuts], [*cuts, len(entries)],
                                                    strict=True)]
    accepted = all(kept) and clean.locs_ok()
    checked = validate_document(entries, DOC, now=now)
    assert accepted == (not checked.issues)
    if accepted:
        assert checked.invalid == 0
        assert [(loc, state) for loc, state in checked.entries.items()] == [
            (e.loc, EntryState(e.lastmod, e.changefreq, e.priority, e.extensions))
            for e in entries
        ]
        assert clean.locs == list(checked.entries)
        assert list(zip(*clean.fields, strict=True)) == [
            (s.lastmod, s.changefreq, s.priority, s.extensions) for s in checked.entries.values()
        ]
    assert list(clean.release()) == entries
    assert clean.locs == []


def test_a_clean_document_from_a_file_has_no_scope_to_check() -> None:
    """Without a directory to check locs against, every document goes entry by entry."""
    clean = CleanDocument("/tmp/sitemap.xml", now=NOW)
    assert not clean.add([Entry("https://example.com/a", "2024-01-01")])
