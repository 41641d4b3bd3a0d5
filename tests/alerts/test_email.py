"""The email channel against a real SMTP server (aiosmtpd) on 127.0.0.1, with STARTTLS and auth."""

from __future__ import annotations

import asyncio
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from alerttools import deliver, result, store_check
from httpserver import closed_port
from smtpserver import PASSWORD, USER, Mailbox, SmtpServer, serve
from sqlalchemy import Engine

from monitor.alerts import send_test
from monitor.config import Alerts, Channel, Delivery, Rule
from monitor.core.errors import DeliveryError
from monitor.core.model import Change, EntryState


@pytest.fixture
def smtp_tls(tmp_path: Path) -> Iterator[SmtpServer]:
    """An SMTP server that requires STARTTLS and then AUTH."""
    with serve(tmp_path, tls=True) as server:
        yield server


def channel(server: SmtpServer, **extra: Any) -> Channel:
    """An email channel for the server."""
    return Channel.model_validate({
        "name": "mail", "type": "email", "smtp_host": "127.0.0.1", "smtp_port": server.port,
        "smtp_starttls": server.ca_file is not None, "smtp_ca_file": server.ca_file,
        "smtp_username": USER, "smtp_password": PASSWORD, "timeout": 5,
        "from": "monitor@example.com", "to": ["seo@example.com", "ops@example.com"], **extra,
    })


def test_email_over_starttls_with_auth(smtp_tls: SmtpServer, sqlite_engine: Engine) -> None:
    """An alert from the outbox arrives by SMTP after STARTTLS and login, readable."""
    from datetime import UTC, datetime

    mail = channel(smtp_tls)
    cfg = Alerts(channels=[mail], rules=[Rule(name="mass-removal", when="removed",
                                              channels=["mail"], severity="critical")],
                 delivery=Delivery(api_base_url="https://monitor.example"))
    now = datetime.now(UTC)
    store_check(sqlite_engine, cfg, result(urls=10, added=10), now)
    check = replace(result(urls=8, removed=2),
                    changes=[Change("removed", f"https://shop.example/p/{i}", EntryState(), None)
                             for i in range(2)])
    [note] = store_check(sqlite_engine, cfg, check, now)
    assert deliver(sqlite_engine, mail) == ["sent"]
    [(message, rcpt, over_tls, login)] = smtp_tls.mailbox.messages
    assert over_tls
    assert login == USER.encode()
    assert rcpt == ["seo@example.com", "ops@example.com"]
    assert message["Subject"] == (
        "[FIRING] [CRITICAL] shop: 2 URLs removed (20.0% of 10) (mass-removal)")
    assert message["X-Sitemap-Monitor-Idempotency-Key"] == note.idempotency_key
    body = message.get_payload(decode=True).decode()
    assert "2 URLs removed" in body
    assert "https://shop.example/p/1" in body
    # the listing of exactly these removals: of their kind, from their check to their check
    assert re.search(r"https://monitor\.example/api/v1/targets/shop/changes"
                     r"\?kind=removed&since=(\d+)&until=\1\b", body), body


def test_untrusted_certificate_is_refused(smtp_tls: SmtpServer) -> None:
    """Without the CA the server's certificate is not trusted: permanent, nothing sent."""
    with pytest.raises(DeliveryError) as refused:
        asyncio.run(send_test(channel(smtp_tls, smtp_ca_file=None)))
    assert refused.value.permanent
    assert "certificate" in refused.value.message
    assert smtp_tls.mailbox.messages == []


def test_plain_smtp_with_auth(smtp_plain: SmtpServer) -> None:
    """Plain SMTP plus AUTH (an internal relay) delivers the test message."""
    asyncio.run(send_test(channel(smtp_plain)))
    [(message, _rcpt, over_tls, login)] = smtp_plain.mailbox.messages
    assert not over_tls
    assert login == USER.encode()
    assert message["Subject"].startswith("[TEST]")


def test_wrong_password_is_permanent_and_not_echoed(smtp_plain: SmtpServer) -> None:
    """A refused login fails permanently, and the message does not contain the password."""
    with pytest.raises(DeliveryError) as refused:
        asyncio.run(send_test(channel(smtp_plain, smtp_password="hunter2-wrong")))  # noqa: S106
    assert refused.value.permanent
    assert "authentication refused" in refused.value.message
    assert "hunter2" not in refused.value.message
    assert smtp_plain.mailbox.messages == []


def test_server_down_is_transient() -> None:
    """Nothing listening: a transient error the outbox retries."""
    down = SmtpServer(closed_port(), Mailbox(), None)
    with pytest.raises(DeliveryError) as refused:
        asyncio.run(send_test(channel(down)))
    assert not refused.value.permanent


def test_an_endless_reply_is_cut_at_its_bound() -> None:
    """A server whose greeting goes on and on (continuation lines of 8 KiB, up to 64 MiB) is
    left after 64 KiB of it: a transient error that says so, the connection closed early."""
    listener = socket.create_server(("127.0.0.1", 0))
    sent = 0

    def endless_greeting() -> None:
        nonlocal sent
        conn, _ = listener.accept()
        line = b"220-" + b"x" * 8000 + b"\r\n"
        with conn:
            try:
                while sent < 64 * 2**20:
                    conn.sendall(line)
                    sent += len(line)
                conn.sendall(b"220 done\r\n")
            except OSError:  # the client closed it
                pass

    server = threading.Thread(target=endless_greeting, daemon=True)
    server.start()
    port = listener.getsockname()[1]
    mail = Channel.model_validate({
        "name": "mail", "type": "email", "smtp_host": "127.0.0.1", "smtp_port": port,
        "smtp_starttls": False, "timeout": 5,
        "from": "monitor@example.com", "to": ["seo@example.com"]})
    try:
        with pytest.raises(DeliveryError) as refused:
            asyncio.run(send_test(mail))
        server.join(10)
    finally:
        listener.close()
    assert not refused.value.permanent
    assert refused.value.message.endswith("the server's reply went past 64 KiB")
    assert "\n" not in refused.value.message
    assert sent < 16 * 2**20  # what the socket buffers held, not the 64 MiB offered
