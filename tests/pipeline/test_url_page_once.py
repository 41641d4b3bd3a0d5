"""A page the URL checks read is parsed once: its page (robots meta, canonicals, refresh,
title) and, when it is matched with its host's not-found page, its main text come from the
one tree the parser built of it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from httpserver import Reply, TestServer
from site_fixture import Site, urlset
from test_url_health import check_urls, config, states

from monitor.urlhealth import page as pages

HTML = {"Content-Type": "text/html; charset=utf-8"}


def shop(title: str, main: str) -> bytes:
    return (b"<!doctype html><html><head><title>" + title.encode() + b"</title></head><body>"
            b"<header><nav><a href=/>Bottega</a> <a href=/shop>Negozio</a></nav></header>"
            b"<main>" + main.encode() + b"</main><footer>Bottega, via Roma 1</footer>"
            b"</body></html>")


TORTELLINI = shop("Tortellini", "<h1>Tortellini 500 g</h1><p>Pasta all'uovo ripiena di carne.</p>")
MISSING = shop("Bottega", "<p>Qui non c'è niente: forse il prodotto che cercavi non è più in "
                          "catalogo. Torna alla pagina iniziale o scrivici per un ordine.</p>")


def test_each_page_is_parsed_once_with_its_main_text(
    site: Site, http_server: TestServer, db: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A host that answers a missing path with a 200 page: its probe, an ordinary product
    page and a product taken down (the same page) are each parsed once, though all three
    have their main text read (the probe's fingerprint, two matches with it)."""
    s = http_server
    s.missing = lambda request: Reply(200, MISSING, headers=HTML)
    s.route("/shop/tortellini", Reply(200, TORTELLINI, headers=HTML))
    s.route("/shop/ragu", Reply(200, MISSING, headers=HTML))
    site.set("/sitemap.xml", urlset({s.url(p): None for p in ("/shop/tortellini",
                                                              "/shop/ragu")}))
    parsed: Counter[bytes] = Counter()
    real = pages.LexborHTMLParser

    def parser(html: bytes, *args: Any, **kwargs: Any) -> Any:
        parsed[html] += 1
        return real(html, *args, **kwargs)

    monkeypatch.setattr(pages, "LexborHTMLParser", parser)
    check_urls(capsys, config(tmp_path, site), db)
    found = {loc.removeprefix(site.url("")): v for loc, v in states(db).items()}
    assert found == {"/shop/tortellini": ("ok", None), "/shop/ragu": ("soft-404", "url-soft-404")}
    # the probe and /shop/ragu answer the same bytes: one parse each
    assert parsed == {MISSING: 2, TORTELLINI: 1}
