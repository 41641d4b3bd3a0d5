"""Deterministic benchmark workloads, generated once and cached on disk.

W1: a sitemap index of 10 children x 50,000 URLs (about 95 MB), realistic entries: W3C datetimes
of several shapes, changefreq, priority, ``&amp;`` in query strings, image extension entries.
W1': the same with 500 URLs of one child given a new lastmod (and that child's index lastmod).
W1H (``run.py --workload W1H``, under ``hreflang/``): W1's shape, each URL with three hreflang
alternates and one image.
Children 1-5 hold English pages, 6-10 their German versions (URL i of child c and of child c+5):
each names the English page (en), the German one (de) and the English one again (x-default),
so every alternate is answered, across documents. W1H' changes child 3 as W1' does.
W2: 1,000 independent targets of 1,000 URLs each.
W4: W1's generator, five times the index: 50 children x 50,000 URLs (2.5 M URLs, about 480 MB),
under ``w4/`` (issue 27: memory that does not grow with the index). Its first ten children are
W1's, but for the folder in their URLs. (W3 is url_health.py's.)

Every URL is written with the placeholder authority ``127.0.0.1:00000``; the server swaps in its
real port (always five digits, so the byte counts never change) when it loads the files.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Bump when the generator's output changes, so a stale cache is never measured.
GENERATOR_VERSION = 4
SEED = 20241121
PLACEHOLDER = b"127.0.0.1:00000"
ORIGIN = "http://" + PLACEHOLDER.decode()

W1_CHILDREN = 10
W1_URLS_PER_CHILD = 50_000
W1_CHANGED_CHILD = 3  # 1-based: sitemap-03.xml changes in W1'
W1_CHANGED_URLS = 500
W2_TARGETS = 1_000
W2_URLS_PER_TARGET = 1_000
W4_CHILDREN = 50

_XHTML = "http://www.w3.org/1999/xhtml"
_SITEMAP_NS = (
    'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    'xmlns:image="http://www.google.com/schemas/sitemap-image/1.1"'
)
_CATEGORIES = [
    "shoes",
    "running-shoes",
    "jackets",
    "outdoor-gear",
    "kitchen",
    "garden-tools",
    "electronics",
    "smartphones",
    "laptops",
    "home-decor",
    "toys",
    "books",
    "sport",
    "beauty",
    "health",
    "pet-supplies",
    "office",
    "furniture",
    "lighting",
    "jewellery",
]
_WORDS = [
    "classic",
    "premium",
    "ultra",
    "light",
    "comfort",
    "pro",
    "eco",
    "vintage",
    "compact",
    "deluxe",
    "sport",
    "smart",
    "mini",
    "max",
    "organic",
    "steel",
    "leather",
    "cotton",
    "wireless",
    "waterproof",
    "edition",
    "series",
    "original",
    "urban",
    "alpine",
]
_CHANGEFREQ = ["daily", "weekly", "weekly", "monthly", "monthly", "monthly", "yearly", "hourly"]
_PRIORITY = ["0.3", "0.5", "0.5", "0.6", "0.7", "0.8", "0.8", "0.9", "1.0"]


def default_data_dir() -> Path:
    """Where workloads are cached unless ``--data-dir`` says otherwise."""
    return Path(os.environ.get("BENCH_DATA_DIR") or tempfile.gettempdir()) / "sitemap-monitor-bench"


def _lastmod(rng: random.Random, year: int) -> str:
    # The mix real CMSs write: full datetimes with Z or an offset, seconds fractions, bare dates.
    month, day = rng.randint(1, 12), rng.randint(1, 28)
    hh, mm, ss = rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59)
    shape = rng.random()
    if shape < 0.55:
        return f"{year}-{month:02d}-{day:02d}T{hh:02d}:{mm:02d}:{ss:02d}+00:00"
    if shape < 0.75:
        return f"{year}-{month:02d}-{day:02d}T{hh:02d}:{mm:02d}:{ss:02d}Z"
    if shape < 0.85:
        ms = rng.randint(0, 999)
        return f"{year}-{month:02d}-{day:02d}T{hh:02d}:{mm:02d}:{ss:02d}.{ms:03d}+02:00"
    if shape < 0.95:
        return f"{year}-{month:02d}-{day:02d}"
    return f"{year}-{month:02d}-{day:02d}T{hh:02d}:{mm:02d}-05:00"


@dataclass
class _Url:
    loc: str  # already XML-escaped
    lastmod: str
    changefreq: str
    priority: str
    image: str | None


def _urls(rng: random.Random, base: str, count: int, prefix: str) -> list[_Url]:
    out = []
    for n in range(count):
        category = rng.choice(_CATEGORIES)
        slug = "-".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 3)))
        loc = f"{base}/{category}/{slug}-{prefix}{n:06d}"
        query = rng.random()
        if query < 0.12:
            loc += f"?colour={rng.choice(_WORDS)}&amp;size={rng.randint(36, 46)}"
        elif query < 0.18:
            loc += f"?ref=sitemap&amp;variant={rng.randint(1, 9)}&amp;lang=en"
        image = None
        if rng.random() < 0.1:
            image = f"{base}/media/{prefix}{n:06d}/{rng.choice(_WORDS)}.jpg"
        out.append(
            _Url(
                loc=loc,
                lastmod=_lastmod(rng, rng.choice((2022, 2023, 2024))),
                changefreq=rng.choice(_CHANGEFREQ),
                priority=rng.choice(_PRIORITY),
                image=image,
            )
        )
    return out


def _urlset(urls: list[_Url], alternates: list[str] | None = None) -> bytes:
    namespaces = _SITEMAP_NS + (f' xmlns:xhtml="{_XHTML}"' if alternates else "")
    parts = [f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset {namespaces}>\n']
    for n, u in enumerate(urls):
        image = f"<image:image><image:loc>{u.image}</image:loc></image:image>" if u.image else ""
        # One line per URL, as most generators write it (and the size the issue names).
        parts.append(
            f"<url><loc>{u.loc}</loc><lastmod>{u.lastmod}</lastmod>"
            f"<changefreq>{u.changefreq}</changefreq><priority>{u.priority}</priority>"
            f"{alternates[n] if alternates else ''}{image}</url>\n"
        )
    parts.append("</urlset>\n")
    return "".join(parts).encode()


def _hreflang(english: str, german: str) -> str:
    return "".join(f'<xhtml:link rel="alternate" hreflang="{code}" href="{href}"/>'
                   for code, href in (("en", english), ("de", german), ("x-default", english)))


def _generate_w1h(root: Path) -> dict[str, Any]:
    rng = random.Random(SEED + 1)
    half = W1_CHILDREN // 2
    children: dict[int, bytes] = {}
    changed = b""
    for c in range(1, half + 1):
        english = _urls(rng, f"{ORIGIN}/w1", W1_URLS_PER_CHILD, f"{c:02d}")
        for n, u in enumerate(english):
            u.image = f"{ORIGIN}/w1/media/{c:02d}{n:06d}/{rng.choice(_WORDS)}.jpg"
        german = [
            _Url(loc=u.loc.replace("/w1/", "/w1/de/", 1),
                 lastmod=_lastmod(rng, rng.choice((2022, 2023, 2024))),
                 changefreq=u.changefreq, priority=u.priority, image=u.image)
            for u in english
        ]
        links = [_hreflang(e.loc, d.loc) for e, d in zip(english, german, strict=True)]
        children[c] = _urlset(english, links)
        children[c + half] = _urlset(german, links)
        if c == W1_CHANGED_CHILD:  # as W1' does
            step = W1_URLS_PER_CHILD // W1_CHANGED_URLS
            for i in range(0, W1_URLS_PER_CHILD, step):
                english[i].lastmod = f"2024-11-20T12:{i % 60:02d}:00+00:00"
            changed = _urlset(english, links)
    for c, body in children.items():
        _write(root / "w1" / f"sitemap-{c:02d}.xml", body)
    _write(root / "w1prime" / f"sitemap-{W1_CHANGED_CHILD:02d}.xml", changed)
    _write_w1_indexes(root)
    return {"urls": W1_CHILDREN * W1_URLS_PER_CHILD,
            "bytes": sum(len(body) for body in children.values())}


def _write_w1_indexes(root: Path) -> None:
    """W1's index and W1''s (the changed child with a new lastmod)."""
    lastmods = [f"2024-11-{c:02d}T08:00:00+00:00" for c in range(1, W1_CHILDREN + 1)]
    index = [(f"{ORIGIN}/w1/sitemap-{c:02d}.xml", lm) for c, lm in enumerate(lastmods, 1)]
    _write(root / "w1" / "sitemap_index.xml", _index(index))
    index[W1_CHANGED_CHILD - 1] = (index[W1_CHANGED_CHILD - 1][0], "2024-11-20T12:00:00+00:00")
    _write(root / "w1prime" / "sitemap_index.xml", _index(index))


def _index(children: list[tuple[str, str]]) -> bytes:
    parts = [
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
    ]
    for loc, lastmod in children:
        parts.append(
            f"\t<sitemap>\n\t\t<loc>{loc}</loc>\n\t\t<lastmod>{lastmod}</lastmod>\n\t</sitemap>\n"
        )
    parts.append("</sitemapindex>\n")
    return "".join(parts).encode()


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def _generate_w1(root: Path) -> dict[str, Any]:
    rng = random.Random(SEED)
    total = 0
    for c in range(1, W1_CHILDREN + 1):
        urls = _urls(rng, f"{ORIGIN}/w1", W1_URLS_PER_CHILD, f"{c:02d}")
        body = _urlset(urls)
        total += len(body)
        _write(root / "w1" / f"sitemap-{c:02d}.xml", body)
        if c == W1_CHANGED_CHILD:
            # W1': every 100th URL of this child gets a newer lastmod, nothing else moves.
            step = W1_URLS_PER_CHILD // W1_CHANGED_URLS
            for i in range(0, W1_URLS_PER_CHILD, step):
                urls[i].lastmod = f"2024-11-20T12:{i % 60:02d}:00+00:00"
            _write(root / "w1prime" / f"sitemap-{c:02d}.xml", _urlset(urls))
    _write_w1_indexes(root)
    return {"urls": W1_CHILDREN * W1_URLS_PER_CHILD, "bytes": total}


def _generate_w4(root: Path) -> dict[str, Any]:
    rng = random.Random(SEED)  # as W1's: the same first ten children
    total = 0
    index = []
    for c in range(1, W4_CHILDREN + 1):
        body = _urlset(_urls(rng, f"{ORIGIN}/w4", W1_URLS_PER_CHILD, f"{c:02d}"))
        total += len(body)
        _write(root / "w4" / f"sitemap-{c:02d}.xml", body)
        index.append((f"{ORIGIN}/w4/sitemap-{c:02d}.xml",
                      f"2024-11-{c % 28 + 1:02d}T08:00:00+00:00"))
    _write(root / "w4" / "sitemap_index.xml", _index(index))
    return {"urls": W4_CHILDREN * W1_URLS_PER_CHILD, "bytes": total}


def _generate_w2(root: Path) -> dict[str, Any]:
    rng = random.Random(SEED + 2)
    total = 0
    for t in range(1, W2_TARGETS + 1):
        body = _urlset(_urls(rng, f"{ORIGIN}/w2/t{t:04d}", W2_URLS_PER_TARGET, f"{t:04d}"))
        total += len(body)
        _write(root / "w2" / f"t{t:04d}" / "sitemap.xml", body)
    return {"targets": W2_TARGETS, "urls": W2_TARGETS * W2_URLS_PER_TARGET, "bytes": total}


_GENERATORS = {"W1": _generate_w1, "W1H": _generate_w1h, "W2": _generate_w2, "W4": _generate_w4}


def ensure(workload: str, data_dir: Path) -> dict[str, Any]:
    """Generate ``workload`` under ``data_dir`` unless a matching cached copy is there. W1H
    writes W1's file names: its ``data_dir`` must be its own (``folder``), or it would
    overwrite W1's children in the shared one."""
    if workload == "W1H" and data_dir.name != folder("W1H", data_dir.parent).name:
        raise ValueError(f"W1H goes in its own folder, {folder('W1H', data_dir)}, "
                         f"not {data_dir} (workloads.folder)")
    stamp = data_dir / f"{workload}.manifest.json"
    shape = (GENERATOR_VERSION, SEED, W1_CHILDREN, W1_URLS_PER_CHILD, W1_CHANGED_CHILD,
             W1_CHANGED_URLS, W2_TARGETS, W2_URLS_PER_TARGET)  # fmt: skip
    if workload == "W4":  # its own shape only: the others' cached copies stay valid
        shape += (W4_CHILDREN,)
    key = hashlib.sha256(repr(shape).encode()).hexdigest()[:16]
    if stamp.exists():
        manifest: dict[str, Any] = json.loads(stamp.read_text())
        if manifest.get("key") == key:
            return manifest
    data_dir.mkdir(parents=True, exist_ok=True)
    manifest = {"workload": workload, "key": key, **_GENERATORS[workload](data_dir)}
    _write(stamp, json.dumps(manifest).encode())
    return manifest


def folder(workload: str, root: Path) -> Path:
    """Where ``workload`` is kept under the data folder ``root``: W1H writes W1's file names,
    so it has its own folder."""
    return root / "hreflang" if workload == "W1H" else root


def w1_child_files(data_dir: Path) -> list[Path]:
    """The 10 child sitemaps of W1 on disk, in order (the floor parses these)."""
    return [data_dir / "w1" / f"sitemap-{c:02d}.xml" for c in range(1, W1_CHILDREN + 1)]


if __name__ == "__main__":
    import sys
    import time

    where = default_data_dir()
    for name in sys.argv[1:] or ["W1", "W2"]:
        started = time.perf_counter()
        print(name, ensure(name, folder(name, where)), f"{time.perf_counter() - started:.1f}s",
              folder(name, where))
