"""changerows: a document's changes as the stored rows, compact; and a digest hands them over
so, equal to the rows of the changes the full diff finds."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from monitor.codec import changepacks, changerows, entryset
from monitor.core.model import Change, Entry, EntryState
from monitor.read import digest, validate
from monitor.read.diff import diff

URL = "https://e.test/sitemap.xml"
NOW = datetime(2024, 6, 1, 12, tzinfo=UTC)

texts = st.none() | st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
states = st.builds(EntryState, texts, texts, texts, texts, st.booleans())


def _old_json(state: EntryState) -> str:
    """How the store made a state's JSON before changerows (a dict through json's encoder)."""
    data: dict[str, object] = {}
    for name in ("lastmod", "changefreq", "priority", "extensions"):
        if getattr(state, name) is not None:
            data[name] = getattr(state, name)
    if not state.valid:
        data["valid"] = False
    return json.JSONEncoder(separators=(",", ":")).encode(data)


@given(states)
def test_state_json_is_the_json_the_store_always_wrote(state: EntryState) -> None:
    made = changerows.state_json(state.lastmod, state.changefreq, state.priority,
                                 state.extensions, state.valid)
    assert made == _old_json(state)
    assert json.loads(made) == json.loads(_old_json(state))


locs = st.text(alphabet=st.characters(blacklist_characters="\x00\x01\x02",
                                      blacklist_categories=("Cs",)), min_size=1, max_size=30)
changes = st.lists(st.builds(Change, st.sampled_from(["changed", "invalid"]), locs, states,
                             states), max_size=20)


@given(changes)
def test_rows_come_back_as_they_went_in(found: list[Change]) -> None:
    rows = list(changerows.of(found))
    assert list(changerows.decode(changerows.encode(rows))) == rows
    assert [r[0] for r in rows] == [c.kind for c in found]
    assert all((r[4] is not None) == (r[0] == "invalid") for r in rows)


def test_no_rows_is_no_bytes() -> None:
    assert changerows.encode([]) == b""
    assert list(changerows.decode(b"")) == []


def _urlset(entries: list[tuple[str, str]]) -> bytes:
    body = "".join(f"<url><loc>{loc}</loc><lastmod>{lm}</lastmod></url>" for loc, lm in entries)
    return (b'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            + body.encode() + b"</urlset>")


def _job(body: bytes, previous: bytes | None, examples: int = 1000) -> digest.Job:
    return digest.Job(url=URL, now=NOW, max_bytes=1 << 20, max_urls=50_000,
                      max_children=50_000, body=body, previous=previous, examples=examples)


def test_a_re_read_document_hands_over_its_changed_entries_packed() -> None:
    before = [(f"https://e.test/{i}", "2024-01-01") for i in range(300)]
    after = [(loc, "2024-02-01" if i % 3 == 0 else lm) for i, (loc, lm) in enumerate(before)]
    after[7] = ("https://e.test/7", "2024-13")  # the lastmod turned invalid: still "changed"
    stored = digest.digest(_job(_urlset(before), None)).data
    assert stored is not None
    found = digest.digest(_job(_urlset(after), stored, examples=5))
    checked = validate.validate_document([Entry(loc, lm) for loc, lm in after], URL, now=NOW)
    expected = diff(entryset.decode(stored).states, checked.entries)
    assert len(expected) == 101
    assert found.changes == []  # nothing added or removed: every change is a row
    # ... of a pack (monitor.codec.changepacks): its position in the new entry set, its state before
    assert found.rows == b""
    assert found.data is not None
    assert [n for _loc, n, _value, _positional in found.packs] == [101]
    assert list(changepacks.rows(found.packs, found.data, stored)) == list(
        changerows.of(expected))
    assert found.row_counts == {"changed": 101}
    assert found.row_examples == expected[:5]


def test_additions_and_removals_stay_changes() -> None:
    before = [(f"https://e.test/{i}", "2024-01-01") for i in range(10)]
    after = [*before[1:], ("https://e.test/new", "2024-01-01")]
    after[0] = (after[0][0], "2024-03-01")
    stored = digest.digest(_job(_urlset(before), None)).data
    found = digest.digest(_job(_urlset(after), stored))
    assert sorted((c.kind, c.loc) for c in found.changes) == [
        ("added", "https://e.test/new"), ("removed", "https://e.test/0")]
    assert [r[:2] for r in changerows.decode(found.rows)] == [("changed", "https://e.test/1")]


def test_many_rows_come_back_across_slices() -> None:
    """A value many slices long (decode decompresses a slice at a time): every row whole, in
    order, with non-ASCII text split anywhere."""
    import random

    rng = random.Random(7)
    rows: list[changerows.Row] = [
        ("changed", f"https://e.test/{rng.getrandbits(64):x}/é{i}",
         changerows.state_json(f"2024-01-{i % 28 + 1:02d}", None, None, None, True),
         changerows.state_json(f"{rng.getrandbits(40):x}", "weekly", None, None, i % 7 > 0),
         None) for i in range(20_000)]
    writer = changerows.Writer()
    for start in range(0, len(rows), 999):
        writer.add(rows[start : start + 999])
    data = writer.finish()
    assert len(data) > 4 * changerows._SLICE
    assert list(changerows.decode(data)) == rows
    assert list(changerows.decode(changerows.encode(rows))) == rows
