"""Security headers on every answer of the daemon's port.

The pages show text a watched site chose (locs, titles of issues) and use no script, so the
policy allows none: even a link that slipped through ``monitor.serve.links`` could not run one, and
no other site may frame the pages or read their referrer. ``SecurityHeaders`` wraps the whole
ASGI application, so the API, ``/metrics``, the probes, refusals and errors carry the headers
too; the stylesheet is served from the daemon itself (``/static/style.css``).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CONTENT_SECURITY_POLICY", "SecurityHeaders", "headers"]

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'self'; img-src 'self' data:; script-src 'none'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
# Two years, as the HSTS preload list asks; only ever sent over TLS.
_HSTS = "max-age=63072000"


def headers(*, tls: bool) -> list[tuple[bytes, bytes]]:
    """The headers every answer carries (names in lower case), HSTS only under TLS."""
    found = [
        (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"no-referrer"),
        (b"x-frame-options", b"DENY"),
    ]
    if tls:
        found.append((b"strict-transport-security", _HSTS.encode()))
    return found


class SecurityHeaders:
    """ASGI middleware: add ``headers(tls=...)`` to every HTTP answer of ``app``."""

    def __init__(self, app: ASGIApp, *, tls: bool) -> None:
        self._app = app
        self._headers = headers(tls=tls)
        self._names = {name for name, _ in self._headers}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                kept = [(name, value) for name, value in message.get("headers", ())
                        if name.lower() not in self._names]
                message = {**message, "headers": [*kept, *self._headers]}
            await send(message)

        await self._app(scope, receive, send_with_headers)
