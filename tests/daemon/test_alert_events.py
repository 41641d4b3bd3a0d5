"""Alerts a user can trust, end to end: the daemon checks a real local site on its schedule and
delivers to real receivers on 127.0.0.1: a webhook, a Slack incoming webhook, an SMTP
server.

A removal is an event: exactly one message, and no "resolved" at the quiet checks after it (it
read as "the URLs came back"). Removing an entry that was invalid is a cleanup, never a removal
alert, whatever its share of the URLs. A failing check is a state: one message when it starts
failing, however many checks fail, and one when it succeeds again, unless the channel has
``send_resolved: false``; a ``recovered`` rule is an event, sent whatever ``send_resolved`` says.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from harness import Daemon, sitemap, write_config
from httpserver import Reply, Request, TestServer
from smtpserver import SmtpServer


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


RULES = (
    "  rules:\n"
    "    - {name: down, when: check_failed, severity: critical, channels: [loud, quiet]}\n"
    "    - {name: back, when: recovered, severity: info, channels: [loud, quiet]}\n"
    "    - {name: mass-removal, when: removed, ratio: 25%, channels: [loud, quiet]}\n"
)


def fail_recover_remove(http_server: TestServer, tmp_path: Path, channels: list[str]) -> None:
    """The daemon over a site whose sitemap fails twice, comes back, loses one of its three
    URLs, then stays the same for three checks; returns once every notification is delivered.

    ``channels`` (YAML) are two, named ``loud`` and ``quiet``. The rules send to both: ``down``
    (check_failed, a state), ``back`` (recovered) and ``mass-removal`` (removed), two events.
    """
    http_server.route("/s.xml", Reply(500))
    config = write_config(
        tmp_path / "c.yaml", f"sqlite:///{tmp_path}/m.db", [("shop", http_server.url("/s.xml"))],
        extra="alerts:\n  channels:\n" + "".join(f"    - {c}\n" for c in channels)
              + "  delivery: {initial_backoff: 0.1s}\n" + RULES)
    daemon = Daemon(config)
    try:
        daemon.started()
        failed = daemon.more_checks("shop", 2)
        assert [c["outcome"] for c in failed] == ["failed", "failed"]
        page = http_server.url("/p")
        urls: dict[str, str | None] = {f"{page}1": None, f"{page}2": None, f"{page}3": None}
        mark = len(daemon.lines)
        http_server.route("/s.xml", Reply(body=sitemap(urls)))
        daemon.event("check", target="shop", outcome="ok", after=mark)
        del urls[f"{page}3"]
        mark = len(daemon.lines)
        http_server.route("/s.xml", Reply(body=sitemap(urls)))
        daemon.event("check", target="shop", removed=1, after=mark)
        quiet = daemon.more_checks("shop", 3)
        assert [(c["outcome"], c["removed"]) for c in quiet] == [("unchanged", 0)] * 3
        daemon.outbox_drained()
    finally:
        daemon.stop()


def test_slack_hears_of_a_state_twice_and_of_an_event_once(
    http_server: TestServer, tmp_path: Path
) -> None:
    """Slack: a failure fires and resolves (not on ``send_resolved: false``), a removal is one
    message; ✅ is the icon of the resolve and of the recovery only."""
    http_server.route("/slack/loud", Reply(body=b"ok"))
    http_server.route("/slack/quiet", Reply(body=b"ok"))
    fail_recover_remove(http_server, tmp_path, [
        f'{{name: loud, type: slack, url: "{http_server.url("/slack/loud")}"}}',
        f'{{name: quiet, type: slack, url: "{http_server.url("/slack/quiet")}", '
        "send_resolved: false}",
    ])
    error = f"http-status: HTTP 500 Internal Server Error from {http_server.url('/s.xml')}"
    firing = (":rotating_light: [FIRING] [CRITICAL] shop: down: "
              f"shop: 1 check(s) failed in a row: {error}")
    resolved = (":white_check_mark: [RESOLVED] [CRITICAL] shop: down: "
                "shop: down resolved: the check succeeds again")
    back = (":white_check_mark: [FIRING] [INFO] shop: back: "
            "shop: the check succeeds again after 2 failed check(s)")
    removal = ":warning: [FIRING] [WARNING] shop: mass-removal: shop: 1 URLs removed (33.3% of 3)"
    loud = [json.loads(r.body)["text"] for r in http_server.requests_to("/slack/loud")]
    quiet = [json.loads(r.body)["text"] for r in http_server.requests_to("/slack/quiet")]
    assert Counter(loud) == Counter([firing, resolved, back, removal])
    assert loud.index(firing) < loud.index(resolved)
    assert Counter(quiet) == Counter([firing, back, removal])


def test_email_hears_of_a_state_twice_and_of_an_event_once(
    http_server: TestServer, smtp_plain: SmtpServer, tmp_path: Path
) -> None:
    """Email: a failure fires and resolves (not on ``send_resolved: false``), a removal is one
    message; the subject and the body say which."""
    mail = (f'type: email, smtp_host: 127.0.0.1, smtp_port: {smtp_plain.port}, '
            'smtp_starttls: false, from: monitor@example.com')
    fail_recover_remove(http_server, tmp_path, [
        f"{{name: loud, {mail}, to: [loud@example.com]}}",
        f"{{name: quiet, {mail}, to: [quiet@example.com], send_resolved: false}}",
    ])
    error = f"http-status: HTTP 500 Internal Server Error from {http_server.url('/s.xml')}"
    firing = f"[FIRING] [CRITICAL] shop: 1 check(s) failed in a row: {error} (down)"
    resolved = "[RESOLVED] [CRITICAL] shop: down resolved: the check succeeds again (down)"
    back = "[FIRING] [INFO] shop: the check succeeds again after 2 failed check(s) (back)"
    removal = "[FIRING] [WARNING] shop: 1 URLs removed (33.3% of 3) (mass-removal)"
    received: dict[str, list[tuple[str, str]]] = {"loud@example.com": [], "quiet@example.com": []}
    for message, [rcpt], _tls, _login in smtp_plain.mailbox.messages:
        received[rcpt].append((message["Subject"], message.get_content().replace("\r\n", "\n")))
    loud = [subject for subject, _ in received["loud@example.com"]]
    quiet = [subject for subject, _ in received["quiet@example.com"]]
    assert Counter(loud) == Counter([firing, resolved, back, removal])
    assert loud.index(firing) < loud.index(resolved)
    assert Counter(quiet) == Counter([firing, back, removal])
    bodies = dict(received["loud@example.com"])
    assert bodies[resolved].startswith("shop: down resolved: the check succeeds again\n")
    assert "(when: check_failed, severity: critical, state: resolved)" in bodies[resolved]
    assert "(when: check_failed, severity: critical, state: firing)" in bodies[firing]
    assert "(when: removed, severity: warning, state: firing)" in bodies[removal]
    assert f"removed (examples):\n  {http_server.url('/p3')}\n" in bodies[removal]
