"""W3's site: N listed URLs answering ~20 KB HTML pages in a seeded mix of health states.

Run as ``python url_site.py N SEED``: it prints its port on the first line of stdout and serves
on 127.0.0.1 until stdin closes. ``url_health.py`` imports ``mix`` for the expected counts.

The server is a bare asyncio protocol (HTTP/1.1 keep-alive, GET and HEAD), not
``http.server``: a response is one ``writelines`` of a prepared header, the page's own head and
one shared body, so that the site stays far from being the bottleneck of either checker. The
pages are not held per URL: each is its own ``<head>`` (title, canonical, robots meta) plus
the same ~19 KB of body, about 20 KB in all, sent uncompressed (no gzip for anyone).

Routes: ``/robots.txt`` (``Disallow: /private/``), ``/sitemap.xml`` (an index of
``/sitemap-K.xml``, 10,000 URLs each), the listed pages, the redirect hops ``/moved/I/1`` (301)
and ``/moved/I/2`` (200, not listed), and ``GET /__bench/stats`` (request counts, JSON).
Every response carries a ``LinkChecker`` header: LinkChecker's opt-in by which a site lifts its
floor of 0.1-0.6 s between two requests to one host (its ``maxrequestspersecond`` then rules).
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import threading
from collections import Counter
from dataclasses import dataclass

PER_CHILD = 10_000
# The non-ok tenth of the site, as fractions of all URLs; "ok" takes the rest (90%).
SHARES = {
    "redirect": 0.025,  # 301 -> 301 -> 200 (the last hop not in the sitemap)
    "not-found": 0.020,  # 404
    "gone": 0.005,  # 410
    "server-error": 0.004,  # 500, every time
    "unavailable": 0.004,  # 503 with Retry-After: 3600
    "noindex-meta": 0.012,  # 200, <meta name="robots" content="noindex">
    "noindex-header": 0.005,  # 200, X-Robots-Tag: noindex
    "canonicalized": 0.015,  # 200, <link rel="canonical"> to another listed URL
    "disallowed": 0.010,  # under /private/, disallowed by robots.txt (answers 200 all the same)
}
# The url_health state each kind must end in.
STATE = {
    "ok": "ok",
    "redirect": "redirect",
    "not-found": "not-found",
    "gone": "gone",
    "server-error": "server-error",
    "unavailable": "unknown",
    "noindex-meta": "noindex",
    "noindex-header": "noindex",
    "canonicalized": "canonicalized",
    "disallowed": "disallowed",
}
SECTIONS = ("products", "blog", "docs", "category", "help", "news")
# fmt: off
WORDS = (
    "alpine", "trail", "shoe", "waterproof", "jacket", "merino", "wool", "sock", "lantern",
    "compass", "tent", "stove", "kettle", "guide", "review", "release", "notes", "pricing",
    "support", "install", "upgrade", "backup", "restore", "season", "sale", "winter", "summer",
    "river", "valley", "ridge", "harbour", "market", "garden", "kitchen", "studio",
)
# fmt: on


@dataclass(frozen=True)
class Page:
    """One listed URL: its index, path and kind (a key of STATE)."""

    index: int
    path: str
    kind: str
    title: str


def counts(n: int) -> dict[str, int]:
    """How many of the N URLs are of each kind: every share rounded, "ok" the rest."""
    out = {kind: round(n * share) for kind, share in SHARES.items()}
    out["ok"] = n - sum(out.values())
    return out


def expected_states(n: int) -> dict[str, int]:
    """The url_health counts a checker must report for the site of N URLs."""
    states: Counter[str] = Counter()
    for kind, count in counts(n).items():
        states[STATE[kind]] += count
    return dict(states)


def mix(n: int, seed: int) -> list[Page]:
    """The site's N pages in sitemap order: kinds shuffled by SEED, paths and titles seeded."""
    rng = random.Random(seed)
    kinds = [kind for kind, count in counts(n).items() for _ in range(count)]
    rng.shuffle(kinds)
    pages = []
    for i, kind in enumerate(kinds):
        section = rng.choice(SECTIONS)
        words = rng.sample(WORDS, 3)
        slug = "-".join(words)
        path = f"/{section}/{slug}-{i}"
        if kind == "disallowed":
            path = "/private" + path
        title = f"{' '.join(words).title()} | {section.title()} | Example Outdoor Co."
        pages.append(Page(i, path, kind, title))
    return pages


def _filler(seed: int, size: int) -> bytes:
    """The shared rest of every page: JSON-LD and preloads closing the head, then a body of
    navigation, paragraphs with links, and a footer, padded to ``size`` bytes."""
    rng = random.Random(seed + 1)

    def sentence() -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 18))).capitalize() + "."

    head_tail = (
        '<meta property="og:type" content="website">\n'
        '<link rel="preload" href="/static/fonts/inter.woff2" as="font" crossorigin>\n'
        '<link rel="stylesheet" href="/static/site.3f9a1c.css">\n'
        '<script type="application/ld+json">{"@context": "https://schema.org", '
        '"@type": "Organization", "name": "Example Outdoor Co.", "url": "/", '
        '"logo": "/static/logo.png"}</script>\n'
        '<script src="/static/app.7be21d.js" defer></script>\n'
        "</head>\n"
    )
    nav = "".join(f'<li><a href="/{s}/">{s.title()}</a></li>' for s in SECTIONS)
    parts = [head_tail, f"<body>\n<header><nav><ul>{nav}</ul></nav></header>\n<main>\n"]
    tail = (
        '</main>\n<footer><p>&copy; Example Outdoor Co.</p><a href="/help/contact">Contact</a>'
        "</footer>\n</body>\n</html>\n"
    )
    used = sum(map(len, parts)) + len(tail)
    while used < size - 600:
        link = f"/{rng.choice(SECTIONS)}/{'-'.join(rng.sample(WORDS, 3))}-{rng.randrange(99999)}"
        para = f'<p>{sentence()} <a href="{link}">{sentence()}</a> {sentence()}</p>\n'
        parts.append(para)
        used += len(para)
    parts.append("<!-- " + "x" * max(0, size - used - 9) + " -->\n")
    parts.append(tail)
    return "".join(parts).encode()


class Site:
    """Every response the site gives, by path, and the counts of what it served."""

    def __init__(self, n: int, seed: int, port: int) -> None:
        self.origin = f"http://127.0.0.1:{port}"
        self.pages = mix(n, seed)
        self.by_path = {p.path: p for p in self.pages}
        oks = [p for p in self.pages if p.kind == "ok"] or self.pages
        self.canonical_of = {
            p.index: oks[(p.index * 7919) % len(oks)].path
            for p in self.pages
            if p.kind == "canonicalized"
        }
        self.rest = _filler(seed, 19_500)
        self.stats: Counter[str] = Counter()
        self.documents = self._documents(n)

    def _documents(self, n: int) -> dict[str, bytes]:
        ns = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
        children = max(1, -(-n // PER_CHILD))
        docs = {
            "/robots.txt": (
                f"User-agent: *\nDisallow: /private/\n\nSitemap: {self.origin}/sitemap.xml\n"
            ).encode()
        }
        index = [f'<?xml version="1.0" encoding="UTF-8"?>\n<sitemapindex {ns}>\n']
        for k in range(children):
            index.append(
                f"<sitemap><loc>{self.origin}/sitemap-{k + 1}.xml</loc>"
                "<lastmod>2025-06-01T08:00:00+00:00</lastmod></sitemap>\n"
            )
            rows = [f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset {ns}>\n']
            for page in self.pages[k * PER_CHILD : (k + 1) * PER_CHILD]:
                day = 1 + page.index % 28
                rows.append(
                    f"<url><loc>{self.origin}{page.path}</loc>"
                    f"<lastmod>2025-05-{day:02d}</lastmod></url>\n"
                )
            rows.append("</urlset>\n")
            docs[f"/sitemap-{k + 1}.xml"] = "".join(rows).encode()
        index.append("</sitemapindex>\n")
        docs["/sitemap.xml"] = "".join(index).encode()
        return docs

    def head(self, title: str, canonical: str, *, noindex: bool = False) -> bytes:
        """A page's own part: everything of its ``<head>`` up to the shared rest."""
        robots = '<meta name="robots" content="noindex">\n' if noindex else ""
        return (
            '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f"<title>{title}</title>\n"
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f'<meta name="description" content="{title} - shop and read online.">\n'
            f'{robots}<link rel="canonical" href="{self.origin}{canonical}">\n'
            f'<meta property="og:url" content="{self.origin}{canonical}">\n'
        ).encode()

    def respond(self, path: str) -> tuple[int, list[tuple[str, str]], list[bytes]]:
        """Status, extra headers and body parts for a path; counts what it served."""
        stats = self.stats
        stats["requests"] += 1
        path = path.split("?", 1)[0]
        if path.startswith("/private/"):
            stats["private"] += 1
        page = self.by_path.get(path)
        if page is None:
            return self._other(path)
        stats[page.kind] += 1
        kind = page.kind
        if kind == "redirect":
            return 301, [("Location", f"{self.origin}/moved/{page.index}/1")], [_small(301)]
        if kind in _ERRORS:
            return _ERRORS[kind], [], [_small(_ERRORS[kind])]
        if kind == "unavailable":
            return 503, [("Retry-After", "3600")], [_small(503)]
        canonical = self.canonical_of.get(page.index, page.path)
        headers = [("X-Robots-Tag", "noindex")] if kind == "noindex-header" else []
        own = self.head(page.title, canonical, noindex=kind == "noindex-meta")
        return 200, headers, [own, self.rest]

    def _other(self, path: str) -> tuple[int, list[tuple[str, str]], list[bytes]]:
        doc = self.documents.get(path)
        if doc is not None:
            self.stats["robots" if path == "/robots.txt" else "sitemaps"] += 1
            kind = "text/plain" if path == "/robots.txt" else "application/xml"
            return 200, [("Content-Type", kind)], [doc]
        if path.startswith("/moved/"):
            try:
                _, _, index, hop = path.split("/")
                page = self.pages[int(index)]
            except (ValueError, IndexError):
                page = None
            if page is not None and page.kind == "redirect" and hop in ("1", "2"):
                self.stats[f"hop{hop}"] += 1
                if hop == "1":
                    location = f"{self.origin}/moved/{page.index}/2"
                    return 301, [("Location", location)], [_small(301)]
                moved = f"/moved/{page.index}/2"
                return 200, [], [self.head(page.title, moved), self.rest]
        self.stats["unlisted"] += 1
        return 404, [], [_small(404)]


_ERRORS = {"not-found": 404, "gone": 410, "server-error": 500}
_REASONS = {
    200: "OK",
    301: "Moved Permanently",
    404: "Not Found",
    410: "Gone",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
_SMALL: dict[int, bytes] = {}


def _small(status: int) -> bytes:
    if status not in _SMALL:
        reason = _REASONS[status]
        _SMALL[status] = (
            f"<!DOCTYPE html>\n<html><head><title>{status} {reason}</title></head>\n"
            f"<body><h1>{reason}</h1><p>Example Outdoor Co.</p></body></html>\n"
        ).encode()
    return _SMALL[status]


class _Http(asyncio.Protocol):
    """HTTP/1.1 with keep-alive for GET and HEAD; one response per request, in order."""

    def __init__(self, site: Site) -> None:
        self.site = site
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.site.stats["connections"] += 1

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while self.transport is not None:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > 65_536:
                    self.transport.close()
                return
            head, self.buffer = self.buffer[:end], self.buffer[end + 4 :]
            line, _, fields = head.partition(b"\r\n")
            try:
                method, target, version = line.decode("latin-1").split(" ", 2)
            except ValueError:
                self.transport.close()
                return
            lowered = fields.lower()
            close = (b"connection: close" in lowered) or (
                version == "HTTP/1.0" and b"connection: keep-alive" not in lowered
            )
            self._answer(method, target, close)
            if close:
                self.transport.close()
                self.transport = None

    def _answer(self, method: str, target: str, close: bool) -> None:
        assert self.transport is not None
        site = self.site
        if target == "/__bench/stats":
            status, headers, parts = (
                200,
                [("Content-Type", "application/json")],
                [json.dumps(site.stats).encode()],
            )
        else:
            status, headers, parts = site.respond(target)
            site.stats[f"status_{status}"] += 1
            if method == "HEAD":
                site.stats["head"] += 1
        size = sum(map(len, parts))
        lines = [
            f"HTTP/1.1 {status} {_REASONS[status]}",
            f"Content-Length: {size}",
            "LinkChecker: lift-rate-limit",
        ]
        if not any(name == "Content-Type" for name, _ in headers):
            lines.append("Content-Type: text/html; charset=utf-8")
        lines += [f"{name}: {value}" for name, value in headers]
        if close:
            lines.append("Connection: close")
        header = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        if method == "HEAD":
            self.transport.write(header)
            return
        site.stats["bytes"] += size
        self.transport.writelines([header, *parts])

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


async def _serve(n: int, seed: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Http(site), "127.0.0.1", 0, backlog=1024)
    port = server.sockets[0].getsockname()[1]
    site = Site(n, seed, port)
    stopped = asyncio.Event()
    # The parent closes our stdin (or dies): then we stop.
    threading.Thread(
        target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(stopped.set)), daemon=True
    ).start()
    print(port, flush=True)
    await stopped.wait()
    server.close()


def main(argv: list[str]) -> None:
    """Serve the site of N URLs seeded with SEED on 127.0.0.1 until stdin closes."""
    asyncio.run(_serve(int(argv[0]), int(argv[1])))


if __name__ == "__main__":
    main(sys.argv[1:])
