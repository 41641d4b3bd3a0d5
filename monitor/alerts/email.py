"""The email channel: SMTP with STARTTLS and authentication, run in a thread.

smtplib blocks, so each message is sent from ``asyncio.to_thread``. The server certificate is
verified (against ``smtp_ca_file`` when set, else the system's trust store). Each reply of the
server is read to a bound (``REPLY_BYTES``, within the channel's timeout): smtplib would keep
every continuation line of an endless reply.
"""

from __future__ import annotations

import asyncio
import email.policy
import smtplib
import ssl
import time
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any

from monitor.alerts.payload import text_lines
from monitor.config import Channel
from monitor.core.errors import DeliveryError
from monitor.core.model import Notification

__all__ = ["REPLY_BYTES", "EmailNotifier", "compose"]

REPLY_BYTES = 64 * 1024  # an SMTP reply is a few lines; EHLO's list of extensions the longest


class _Capped:
    """The server's side of the connection, read a line at a time within ``budget`` bytes and
    before ``deadline`` (both set again for each reply)."""

    def __init__(self, file: Any) -> None:
        self.file = file
        self.budget = REPLY_BYTES
        self.deadline = float("inf")

    def readline(self, size: int = -1) -> bytes:
        if self.budget <= 0:
            raise OSError(f"the server's reply went past {REPLY_BYTES // 1024} KiB")
        if time.monotonic() > self.deadline:
            raise OSError("the server's reply did not end in time")
        line: bytes = self.file.readline(size)
        self.budget -= len(line)
        return line

    def close(self) -> None:
        self.file.close()


class _SMTP(smtplib.SMTP):
    """smtplib's client, each reply read to ``REPLY_BYTES`` within ``timeout`` seconds."""

    def getreply(self) -> tuple[int, bytes]:
        if self.file is None and self.sock is not None:  # a new connection, or a TLS layer
            self.file = _Capped(self.sock.makefile("rb"))
        if isinstance(self.file, _Capped):
            self.file.budget = REPLY_BYTES
            self.file.deadline = time.monotonic() + (self.timeout or 60.0)
        return super().getreply()


def compose(notification: Notification, channel: Channel) -> EmailMessage:
    """The message: a subject that says it all, the details as plain text."""
    payload = {**notification.payload, "state": notification.state}
    # Python folds a long Subject right after "Subject:", which readers show with a leading
    # space; RFC 5322 allows 998 characters a line, and the subject is capped at 250.
    message = EmailMessage(policy=email.policy.default.clone(max_line_length=998))
    state = str(payload.get("state", "firing")).upper()
    severity = str(payload.get("severity", "warning")).upper()
    subject = f"[{state}] [{severity}] {payload.get('summary', '')} ({payload.get('rule')})"
    message["Subject"] = subject[:250]
    message["From"] = channel.email_from or ""
    message["To"] = ", ".join(channel.email_to)
    message["Date"] = formatdate(localtime=False, usegmt=True)
    message["Message-ID"] = make_msgid(idstring=notification.idempotency_key[:32],
                                       domain="sitemap-monitor")
    message["X-Sitemap-Monitor-Idempotency-Key"] = notification.idempotency_key
    message.set_content("\n".join(text_lines(payload)) + "\n")
    return message


class EmailNotifier:
    """Sends one email per notification."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel

    async def send(self, notification: Notification) -> None:
        """Deliver or raise ``DeliveryError``."""
        await asyncio.to_thread(self._send, compose(notification, self.channel))

    def _send(self, message: EmailMessage) -> None:
        c = self.channel
        assert c.smtp_host is not None  # the config requires it
        where = f"channel {c.name} (smtp {c.smtp_host}:{c.smtp_port})"
        try:
            with _SMTP(c.smtp_host, c.smtp_port, timeout=c.timeout) as smtp:
                smtp.ehlo()
                if c.smtp_starttls:
                    context = ssl.create_default_context(cafile=c.smtp_ca_file)
                    smtp.starttls(context=context)
                    smtp.ehlo()
                if c.smtp_username:
                    smtp.login(c.smtp_username, c.smtp_password or "")
                smtp.send_message(message)
        except smtplib.SMTPAuthenticationError as exc:
            raise DeliveryError(f"{where}: authentication refused ({exc.smtp_code})",
                                permanent=True) from None
        except smtplib.SMTPRecipientsRefused as exc:
            raise DeliveryError(f"{where}: recipients refused: {sorted(exc.recipients)}",
                                permanent=True) from None
        except smtplib.SMTPResponseException as exc:
            raise DeliveryError(f"{where}: SMTP {exc.smtp_code}",
                                permanent=500 <= exc.smtp_code < 600) from None
        except smtplib.SMTPNotSupportedError as exc:
            raise DeliveryError(f"{where}: {exc}", permanent=True) from None
        except ssl.SSLCertVerificationError as exc:
            raise DeliveryError(f"{where}: TLS certificate refused: {exc.verify_message}",
                                permanent=True) from None
        except (smtplib.SMTPException, OSError) as exc:
            raise DeliveryError(f"{where}: {exc.__class__.__name__}: {exc}") from None
