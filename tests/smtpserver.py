"""A real SMTP server (aiosmtpd) on 127.0.0.1 for tests: plain, or STARTTLS with required AUTH.

Every message it accepts is kept, parsed, with its envelope recipients, whether TLS was on and
who logged in::

    with serve(tmp_path, tls=False) as server:
        ... send to 127.0.0.1:server.port ...
        [(message, rcpt, over_tls, login)] = server.mailbox.messages
"""

from __future__ import annotations

import email.policy
import os
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from httpserver import closed_port, self_signed

__all__ = ["PASSWORD", "USER", "Mailbox", "SmtpServer", "serve"]

USER, PASSWORD = "monitor", "smtp-pass"


@dataclass
class Mailbox:
    """What the SMTP server received, with the login and whether TLS was on."""

    messages: list[tuple[EmailMessage, list[str], bool, Any]] = field(default_factory=list)

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


@contextmanager
def serve(tmp_path: Path, *, tls: bool) -> Iterator[SmtpServer]:
    """A server that requires STARTTLS and then AUTH (``tls``), or offers AUTH without TLS."""
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
        # AUTH offered without TLS (aiosmtpd warns when it is also required); a test that
        # logs in checks that the client did.
        kwargs.update(auth_require_tls=False)
    port = closed_port()
    controller = Controller(mailbox, hostname="127.0.0.1", port=port, **kwargs)
    controller.start()
    try:
        yield SmtpServer(port, mailbox, ca_file)
    finally:
        controller.stop()
