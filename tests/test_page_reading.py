"""Pages read as an HTML5 parser builds them: robots meta elements, canonicals with
``<base href>``, meta refresh, and not-found pages told from pages that mention "not found"
(a corpus of real-looking pages in tests/data/soft404)."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.urlhealth import page as pages
from monitor.urlhealth import verdict as health
from monitor.urlhealth.notfound import says_not_found
from monitor.urlhealth.verdict import Answered, judge

HTML = [("content-type", "text/html; charset=utf-8")]
U = "https://example.com/a/page"
TEXT = b"<p>" + b"A real page with words. " * 20 + b"</p>"
CORPUS = Path(__file__).parent / "data" / "soft404"
NOINDEX = b'<meta name="robots" content="noindex">'


def state(body: bytes, url: str = U) -> tuple[str, str | None]:
    verdict = judge([Answered(url, 200, HTML, body)], listed_url=url)
    return verdict.state, verdict.rule


@pytest.mark.parametrize("body", [
    b"<html><head><script>var t = '" + NOINDEX + b"';</script></head><body>" + TEXT,
    b"<html><head></head><body><textarea>" + NOINDEX + b"</textarea>" + TEXT,
    b"<html><head><style>/* " + NOINDEX + b" */</style></head><body>" + TEXT,
    b"<html><head><template>" + NOINDEX + b"</template></head><body>" + TEXT,
    b"<html><head><!-- " + NOINDEX + b" --></head><body>" + TEXT,
    b"<html><body>" + TEXT + b"<pre><code>&lt;meta name=\"robots\" content=\"noindex\"&gt;"
    b"</code></pre><script type=\"application/ld+json\">{\"x\": \"" + NOINDEX.replace(
        b'"', b'\\"') + b"\"}</script>",
], ids=["script", "textarea", "style", "template", "comment", "code-and-json"])
def test_a_robots_meta_only_as_text_is_not_a_noindex(body: bytes) -> None:
    assert state(body) == ("ok", None)


@pytest.mark.parametrize("body", [
    b"<html><head>" + NOINDEX + b"</head><body>" + TEXT,
    b"<html><head><title>t</title></head><body>" + TEXT + NOINDEX,
    b"<div>" + TEXT + b"</div><meta name=ROBOTS content='NoIndex, follow'>",
], ids=["head", "body", "no-head"])
def test_a_robots_meta_element_anywhere_counts(body: bytes) -> None:
    assert state(body) == ("noindex", "url-noindex")


def test_a_canonical_is_resolved_against_base_href() -> None:
    body = (b'<html><head><base href="/b/"><link rel="canonical" href="page"></head><body>'
            + TEXT)
    verdict = judge([Answered(U, 200, HTML, body)], listed_url=U)
    assert (verdict.state, verdict.final_url) == ("canonicalized", "https://example.com/b/page")


@pytest.mark.parametrize(("head", "canonical"), [
    (b'<link rel="canonical" href="/x">', "https://example.com/x"),
    # an element a head cannot hold ends it: a canonical after it is in the body
    (b'<img src="/logo.png"><link rel="canonical" href="/x">', None),
    (b'<div></div><link rel="canonical" href="/x">', None),
    # a tracking pixel in a <noscript> does not end it: Googlebot renders with scripts on
    (b'<noscript><img src="https://px.example/tr?id=1"></noscript>'
     b'<link rel="canonical" href="/x">', "https://example.com/x"),
    # a tag inside a script string ends nothing
    (b'<script>document.write("<div>")</script><link rel="canonical" href="/x">',
     "https://example.com/x"),
])
def test_a_canonical_counts_only_in_the_head(head: bytes, canonical: str | None) -> None:
    page = pages.read(b"<html><head>" + head + b"</head><body>" + TEXT, U)
    assert page.canonicals == (() if canonical is None else (canonical,))


@pytest.mark.parametrize(("content", "delay", "url"), [
    ("0;url=https://example.com/new", 0.0, "https://example.com/new"),
    ("0; URL='/new'", 0.0, "https://example.com/new"),
    ("5, url='next'", 5.0, "https://example.com/a/next"),
    ("3;/elsewhere", 3.0, "https://example.com/elsewhere"),
    ("30", None, None),  # reloads itself
    ("0; url=javascript:alert(1)", None, None),
    ("soon", None, None),
])
def test_meta_refresh_is_read_as_browsers_read_it(content: str, delay: float | None,
                                                  url: str | None) -> None:
    page = pages.read(f'<meta http-equiv="Refresh" content="{content}"><p>x'.encode(), U)
    found = None if page.refresh is None else (page.refresh.delay, page.refresh.url)
    assert found == (None if url is None else (delay, url))


@pytest.mark.parametrize(("body", "detail"), [
    (b'<meta http-equiv="refresh" content="0;url=/new">', "instant: permanent"),
    (b'<meta http-equiv="refresh" content="0;url=/new">' + TEXT, "instant: permanent"),
    (b'<meta http-equiv="refresh" content="10;url=/new">' + TEXT, "after 10 s: temporary"),
])
def test_a_meta_refresh_is_a_redirect_hop(body: bytes, detail: str) -> None:
    first = Answered(U, 200, HTML, body)
    last = Answered("https://example.com/new", 200, HTML, TEXT)
    verdict = judge([first, last], listed_url=U)
    assert (verdict.state, verdict.final_url, verdict.hops) == (
        "redirect", "https://example.com/new", 1)
    assert detail in verdict.detail
    # alone (not followed), an instant refresh on an empty page is no soft 404
    assert state(body)[0] == "redirect"


@pytest.mark.parametrize("path", sorted((CORPUS / "not-found").glob("*.html")),
                         ids=lambda p: p.stem)
def test_not_found_pages_of_common_sites_are_soft_404s(path: Path) -> None:
    assert state(path.read_bytes()) == ("soft-404", "url-soft-404")


@pytest.mark.parametrize("path", sorted((CORPUS / "pages").glob("*.html")),
                         ids=lambda p: p.stem)
def test_no_page_that_mentions_not_found_is_a_soft_404(path: Path) -> None:
    assert state(path.read_bytes()) in (("ok", None), ("canonicalized", "url-canonicalized"))


@pytest.mark.parametrize(("text", "found"), [
    ("Page not found", "page not found"),
    ("Page Not Found | Shop", "page not found"),
    ("404 Not Found", "404 not found"),
    ("Oops! That page can\u2019t be found.", "that page can't be found"),
    ("404: This page could not be found.", "this page could not be found"),
    ("404 | Northwind", "404"),
    ("Seite nicht gefunden", "seite nicht gefunden"),
    ("Página no encontrada", "página no encontrada"),
    ("Page introuvable – Boutique", "page introuvable"),
    ("Страница не найдена", "страница не найдена"),
    ("Pagina non trovata", "pagina non trovata"),
    ("Página não encontrada", "página não encontrada"),
    ("ページが見つかりません", "ページが見つかりません"),
    ("抱歉，页面不存在", "页面不存在"),
    ("Nie znaleziono strony", "nie znaleziono strony"),
    ("Rare vinyl not found in stores", None),
    ("404 Coupé", None),
    ("Peugeot 404 - Classic cars", None),
    ("Not Found: A Novel", None),
    ("見つかりません、あの夏は", None),
    ("What does 404 Not Found mean?", None),
    ("Shop | 404 Coupé", None),
    ("", None),
])
def test_a_not_found_phrase_counts_only_whole(text: str, found: str | None) -> None:
    assert says_not_found(text) == found


def test_fingerprints_of_one_text_match_and_of_two_do_not() -> None:
    a = pages.fingerprint("We could not find the page you asked for. Try the search or go "
                          "back to the home page of our shop, where the new season is in.")
    b = pages.fingerprint("We could not find the page you asked for. Try the search or go "
                          "back to the home page of our shop, where the new season is in!")
    c = pages.fingerprint("A hand-made walnut chair with a woven seat, oiled by hand, made "
                          "to order in six weeks in our workshop by the river.")
    assert pages.similar(a, b)
    assert not pages.similar(a, c)
    assert pages.fingerprint("") == b""
    assert not pages.similar(b"", b"")


def test_a_page_is_read_in_the_encoding_it_declares() -> None:
    body = ('<html><head><meta charset="windows-1251"><title>Страница не найдена</title>'
            "</head><body><p>Вернитесь на главную страницу.</p>").encode("windows-1251")
    assert pages.read(body, U).title == "Страница не найдена"
    assert state(body) == ("soft-404", "url-soft-404")


def test_a_few_words_are_too_few_to_match_on() -> None:
    """A JavaScript application's shell is the same on every page, its not-found page's too:
    it must never make every page a soft 404."""
    shell = pages.fingerprint("Loading, please wait")
    assert shell
    assert not pages.similar(shell, shell)


def test_a_page_with_its_hosts_not_found_content_is_a_soft_404() -> None:
    words = b"<main><p>" + b"Nothing lives at this address any more, sorry. " * 3 + b"</p></main>"
    host_page = pages.fingerprint(pages.main_text(words))
    sold_out = Answered("https://example.com/sold-out", 200, HTML, b"<nav>Shop</nav>" + words)
    real = Answered("https://example.com/chair", 200, HTML, b"<main>" + TEXT + b"</main>")
    home = Answered("https://example.com/", 200, HTML, b"<nav>Home</nav>" + words)

    def after(answer: Answered, host_url: str | None) -> str:
        first = judge([answer], listed_url=answer.url)
        return health.host_not_found(first, answer, host_page, host_url).state

    assert after(sold_out, "https://example.com/sitemap-monitor-x") == "soft-404"
    assert after(real, "https://example.com/sitemap-monitor-x") == "ok"
    # the page missing paths redirect to, and a site's root, stay what they are
    assert after(sold_out, "https://example.com/sold-out") == "ok"
    assert after(home, "https://example.com/sitemap-monitor-x") == "ok"
    assert health.host_not_found(judge([sold_out], listed_url=sold_out.url), sold_out, b"",
                                 None).state == "ok"


@pytest.mark.parametrize(("body", "empty"), [
    (b"<html><head><title>t</title></head><body> </body></html>", True),
    (b"<html><head><title>t</title></head><body><div id=app></div></body></html>", True),
    # an application whose bundle is loaded from the head writes its page: not empty
    (b'<html><head><script type="module" src="/assets/index.js"></script></head>'
     b"<body><div id=app></div></body></html>", False),
    (b"<html><body><img src=/a.png></body></html>", False),
    (b"<html><body>text</body></html>", False),
])
def test_an_empty_body_is_one_without_text_media_or_scripts(body: bytes, empty: bool) -> None:
    assert pages.read(body, U).empty is empty
