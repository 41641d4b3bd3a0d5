"""Which loc becomes a link in a page: only what a browser reads as an http(s) URL."""

from __future__ import annotations

import pytest

from monitor.serve.links import external_link, web_href


@pytest.mark.parametrize("url", [
    "javascript:alert(1)", "JaVaScRiPt:alert(1)", " javascript:alert(1)",
    "\x01\x1f javascript:alert(1)", "java\tscript:alert(1)", "java\nscript:alert(1)",
    "jav\rascript:alert(1)", "javascript\t:alert(1)",
    "javascript://www.example.com/products/%0Aalert(document.domain)",
    "data:text/html,<script>alert(1)</script>", "vbscript:msgbox(1)", "/relative", "//host/x",
    "\xa0http://example.com/", "ftp://example.com/", "", "http", None, 7,
])
def test_not_a_web_url_is_no_link(url: object) -> None:
    assert web_href(url) is None
    shown = str(external_link(url))
    assert "<a " not in shown


@pytest.mark.parametrize(("url", "href"), [
    ("https://example.com/a?b=1&c=2", "https://example.com/a?b=1&c=2"),
    ("HTTP://example.com/", "HTTP://example.com/"),
    (" http://example.com/x\n", "http://example.com/x"),
    ("ht\ttp://example.com/", "http://example.com/"),
])
def test_a_web_url_is_a_link_to_what_the_browser_reads(url: str, href: str) -> None:
    assert web_href(url) == href


def test_the_link_escapes_its_href_and_text() -> None:
    shown = str(external_link('https://example.com/"><script>x</script>'))
    assert shown == ('<a href="https://example.com/&#34;&gt;&lt;script&gt;x&lt;/script&gt;" '
                     'rel="noreferrer">https://example.com/&#34;&gt;&lt;script&gt;x&lt;/script&gt;'
                     '</a>')
    assert str(external_link("javascript:<b>")) == "javascript:&lt;b&gt;"
