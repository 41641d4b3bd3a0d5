"""Alerts a user can trust, end to end: the daemon checks a real local site on its schedule and
delivers to a real webhook receiver on 127.0.0.1 (SPEC 9).

A removal is an event: exactly one message, and no "resolved" at the quiet checks after it (it
read as "the URLs came back"). Removing an entry that was invalid is a cleanup, never a removal
alert, whatever its share of the URLs.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from harness import Daemon, sitemap
from httpserver import Reply, Request, TestServer


def test_a_removal_is_one_message_and_a_cleanup_none(
    http_server: TestServer, tmp_path: Path
) -> None:
    received: list[dict[str, Any]] = []
    lock = threading.Lock()

    def hook(request: Request) -> Reply:
        with lock:
            received.append(json.loads(request.body))
        return Reply(200, b"{}", {"Content-Type": "application/json"})

    http_server.route("/hook", hook)
    page = http_server.url("/p")
    v1 = {f"{page}1": None, f"{page}2": None, f"{page}3": None, "/broken": None}
    http_server.route("/s.xml", Reply(body=sitemap(v1)))
    config = tmp_path / "c.yaml"
    config.write_text(
        f"database_url: sqlite:///{tmp_path}/m.db\nlisten: 127.0.0.1:0\n"
        "defaults: {interval: 1s, jitter: 0, timeout: 10s}\n"
        f'targets:\n  - {{name: shop, url: "{http_server.url("/s.xml")}"}}\n'
        "alerts:\n"
        f'  channels:\n    - {{name: hook, type: webhook, url: "{http_server.url("/hook")}"}}\n'
        "  delivery: {initial_backoff: 0.1s}\n"
        "  rules:\n"
        "    - {name: mass-removal, when: removed, ratio: 25%, channels: [hook]}\n",
        encoding="utf-8")
    daemon = Daemon(config)
    try:
        daemon.started()
        daemon.event("check", target="shop", outcome="ok")
        # The cleanup: the invalid entry goes (1 of 4 entries, 0 of 3 URLs).
        del v1["/broken"]
        mark = len(daemon.lines)
        http_server.route("/s.xml", Reply(body=sitemap(v1)))
        cleanup = daemon.wait_for(lambda line: line.get("event") == "check"
                                  and line.get("removed") == 1, after=mark)
        # A real removal: 1 of 3 URLs, over the rule's 25%.
        del v1[f"{page}3"]
        mark = len(daemon.lines)
        http_server.route("/s.xml", Reply(body=sitemap(v1)))
        removal = daemon.wait_for(lambda line: line.get("event") == "check"
                                  and line.get("removed") == 1, after=mark)
        # Three quiet checks after it: nothing to resolve.
        daemon.more_checks("shop", 3)
        daemon.outbox_drained()
    finally:
        daemon.stop()
    assert cleanup["snapshot_id"] < removal["snapshot_id"]
    with lock:
        messages = [(m["rule"], m["state"], m["snapshot_id"], m["examples"]) for m in received]
    assert messages == [("mass-removal", "firing", removal["snapshot_id"],
                         {"removed": [f"{page}3"]})]
    assert received[0]["event"] is True
    assert received[0]["summary"] == "shop: 1 URLs removed (33.3% of 3)"
