"""A robots.txt change as a unified diff: the lines that moved, capped with a note (pure)."""

from __future__ import annotations

from monitor.robots.versiondiff import of_change, unified

URL = "https://shop.example/robots.txt"


def test_the_lines_that_moved() -> None:
    diff = unified("User-agent: *\nDisallow: /a\nSitemap: /s.xml\n",
                   "User-agent: *\nDisallow: /b\nSitemap: /s.xml\nAllow: /\n", URL)
    assert diff.text.splitlines() == [
        f"--- {URL} (before)", f"+++ {URL} (after)", "@@ -1,3 +1,4 @@", " User-agent: *",
        "-Disallow: /a", "+Disallow: /b", " Sitemap: /s.xml", "+Allow: /"]
    assert (diff.added, diff.removed, diff.omitted) == (2, 1, 0)
    assert diff.as_json()["truncated"] is False


def test_a_host_without_robots_txt_is_an_empty_file() -> None:
    diff = of_change({"text": None}, {"text": "User-agent: *\nDisallow: /\n"}, URL)
    assert diff.text.splitlines()[:2] == [f"--- {URL} (none)", f"+++ {URL} (after)"]
    assert (diff.added, diff.removed) == (2, 0)


def test_a_long_diff_is_cut_with_a_note() -> None:
    before = "\n".join(f"Disallow: /old/{i}" for i in range(1000))
    after = "\n".join(f"Disallow: /new/{i}" for i in range(1000))
    diff = unified(before, after, URL, max_lines=50)
    lines = diff.text.splitlines()
    assert len(lines) == 51
    assert lines[-1] == ("... 1953 more diff lines not shown (1000 added and 1000 removed in "
                         "all): the full texts are in the change's before and after")
    assert diff.as_json()["truncated"] is True


def test_only_line_endings() -> None:
    diff = unified("User-agent: *\r\nAllow: /\r\n", "User-agent: *\nAllow: /", URL)
    assert diff.text == "(only the line endings or the final newline changed)"
