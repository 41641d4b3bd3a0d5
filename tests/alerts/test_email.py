"""The email channel against a real SMTP server (aiosmtpd) on 127.0.0.1, with STARTTLS and auth."""

from __future__ import annotations

import asyncio
import email.policy
import os
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from alerttools import deliver, result, store_check
from httpserver import closed_port, self_signed
from sqlalchemy import Engine

from monitor.alerts import send_test
from monitor.config import Alerts, Channel, Delivery, Rule
from monitor.errors import DeliveryError
from monitor.model import Change, EntryState

USER, PASSWORD = "monitor", "smtp-pass"


@dataclass
class Mailbox:
    """What the SMTP server received, with the login and whether TLS was on."""

    messages: list[tuple[Message, list[str], bool, Any]] = field(default_factory=list)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        """aiosmtpd's hook: keep the message."""
        login = session.auth_data if session.authenticated else None
        parsed = message_from_bytes(envelope.content, policy=email.policy.default)
        self.messages.append((parsed, list(envelope.rcpt_tos),
                              session.ssl is not None, login))
        return "250 OK"


def authenticate(server: Any, session: Any, envelope: Any, mechanism: str,
                 data: Any) -> AuthResult:
    """Accept one user and password."""
    ok = isinstance(data, LoginPassword) and (data.login, data.password) == (
        USER.encode(), PASSWORD.encode())
    return AuthResult(success=ok, handled=False, auth_data=data.login if ok else None)


@dataclass
class SmtpServer:
    """A running server: where it listens, its mailbox and the CA file that trusts it."""

    port: int
    mailbox: Mailbox
    ca_file: str | None


def _serve(tmp_path: Path, *, tls: bool) -> Iterator[SmtpServer]:
    mailbox = Mailbox()
    kwargs: dict[str, Any] = {"authenticator": authenticate}
    ca_file = None
    if tls:
        pair = self_signed(tmp_path)
        if pair is None:
            if os.environ.get("CI"):
                pytest.fail("openssl is needed for the STARTTLS test")
            pytest.skip("openssl is not installed: cannot make a certificate for STARTTLS")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(pair[0]), str(pair[1]))
        kwargs.update(tls_context=context, require_starttls=True, auth_require_tls=True,
                      auth_required=True)
        ca_file = str(pair[0])
    else:
        # AUTH offered without TLS (aiosmtpd warns when it is also required); the test checks
        # that the client logged in.
        kwargs.update(auth_require_tls=False)
    port = closed_port()
    controller = Controller(mailbox, hostname="127.0.0.1", port=port, **kwargs)
    controller.start()
    try:
        yield SmtpServer(port, mailbox, ca_file)
    finally:
        controller.stop()


@pytest.fixture
def smtp_tls(tmp_path: Path) -> Iterator[SmtpServer]:
    """An SMTP server that requires STARTTLS and then AUTH."""
    yield from _serve(tmp_path, tls=True)


@pytest.fixture
def smtp_plain(tmp_path: Path) -> Iterator[SmtpServer]:
    """An SMTP server that requires AUTH without TLS."""
    yield from _serve(tmp_path, tls=False)


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
    check = result(urls=8, removed=2)
    check.changes = [Change("removed", f"https://shop.example/p/{i}", EntryState(), None)
                     for i in range(2)]
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
    assert "https://monitor.example/api/v1/targets/shop/changes?since=" in body


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
