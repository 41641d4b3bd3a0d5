"""The peers and the floor, each run as its own process by run.py; prints one JSON line.

``python peers.py advertools URL``  advertools.sitemap_to_df(URL)
``python peers.py usp URL``         ultimate-sitemap-parser's SitemapFetcher(...).all_pages()
``python peers.py floor FILE...``   lxml etree.fromstring over the files' bytes, no HTTP
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def advertools(url: str) -> dict[str, object]:
    """Fetch and parse with advertools (pandas DataFrame of every URL)."""
    import advertools as adv

    df = adv.sitemap_to_df(url)
    # An index yields rows of its children's URLs; rows without loc would be errors.
    return {"urls": int(df["loc"].notna().sum()), "rows": len(df)}


def usp(url: str) -> dict[str, object]:
    """Fetch and parse with ultimate-sitemap-parser, counting the pages it yields."""
    import requests
    from usp.fetch_parse import SitemapFetcher
    from usp.web_client.requests_client import RequestsWebClient

    session = requests.Session()
    session.trust_env = False  # never route 127.0.0.1 through an environment proxy
    client = RequestsWebClient(session=session)
    tree = SitemapFetcher(url, recursion_level=0, web_client=client).sitemap()
    return {"urls": sum(1 for _ in tree.all_pages())}


def floor(files: list[str]) -> dict[str, object]:
    """lxml's C parser over the bytes on disk: the cost no Python tool can go under."""
    from lxml import etree

    blobs = [Path(f).read_bytes() for f in files]
    started = time.perf_counter()
    urls = 0
    for blob in blobs:
        root = etree.fromstring(blob)
        urls += len(root)
        del root
    return {"urls": urls, "parse_seconds": round(time.perf_counter() - started, 3)}


def main(argv: list[str]) -> None:
    """Dispatch to one peer and print its result as JSON."""
    started = time.perf_counter()
    tool, args = argv[0], argv[1:]
    if tool == "advertools":
        result = advertools(args[0])
    elif tool == "usp":
        result = usp(args[0])
    elif tool == "floor":
        result = floor(args)
    else:
        raise SystemExit(f"unknown peer {tool!r}")
    result["in_process_seconds"] = round(time.perf_counter() - started, 3)
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
