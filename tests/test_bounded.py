"""monitor.net.bounded: a receiver's answer read to a bound, over a real server on 127.0.0.1,
the receiver's name resolved once and judged by the address rules."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import structlog
from httpserver import Reply, TestServer, repeat

from monitor.core.errors import FetchError
from monitor.net import bounded, connections
from monitor.net.addresses import Resolver


def _resolver(*addresses: str) -> Resolver:
    async def resolve(host: str, port: int) -> list[str]:
        return list(addresses)
    return resolve


async def _send(url: str, resolver: Resolver, keep: int = bounded.KEEP,
                ) -> bounded.Reply:
    limits = httpx.Limits()
    async with httpx.AsyncClient(
            transport=connections.transport(limits, httpx.create_ssl_context()),
            trust_env=False) as client:
        request = client.build_request("POST", url, content=b"{}")
        return await bounded.send(client, request, where=url, keep=keep, resolver=resolver)


def test_an_endless_answer_is_cut_and_logged_once(http_server: TestServer) -> None:
    http_server.route("/hook", Reply(500, body=repeat(b"x" * 65536)))  # never ends
    # A name the system cannot resolve: the connection goes to the vetted address only.
    url = f"http://receiver.invalid:{http_server.port}/hook"
    with structlog.testing.capture_logs() as logs:
        reply = asyncio.run(_send(url, _resolver("127.0.0.1")))
    assert (reply.status, reply.head, reply.cut) == (500, b"x" * 4096, True)
    assert reply.text(10) == "x" * 10
    assert [(line["event"], line["url"], line["kept_bytes"]) for line in logs] == [
        ("answer cut at its bound; the connection was closed", url, 4096)]
    [request] = http_server.requests_to("/hook")
    assert request.headers["accept-encoding"] == "identity"


def test_an_answer_within_the_bound_is_whole_and_not_logged(http_server: TestServer) -> None:
    http_server.route("/hook", Reply(200, body=b"ok\n"))
    with structlog.testing.capture_logs() as logs:
        reply = asyncio.run(_send(http_server.url("/hook"), _resolver("127.0.0.1")))
    assert (reply.status, reply.head, reply.cut) == (200, b"ok\n", False)
    assert logs == []


def test_a_compressed_answer_is_not_inflated(http_server: TestServer) -> None:
    http_server.route("/hook", Reply(500, body=b"\x1f\x8b" + b"\0" * 100,
                                     headers={"Content-Encoding": "gzip"}))
    reply = asyncio.run(_send(http_server.url("/hook"), _resolver("127.0.0.1")))
    assert (reply.status, reply.head) == (500, b"")


@pytest.mark.parametrize("address", ["169.254.169.254", "100.100.100.200", "::ffff:a9fe:a9fe"])
def test_a_name_that_resolves_to_a_metadata_address_is_never_connected_to(
    http_server: TestServer, address: str,
) -> None:
    url = f"http://receiver.invalid:{http_server.port}/hook"
    with pytest.raises(FetchError) as refused:
        asyncio.run(_send(url, _resolver(address)))
    assert refused.value.kind == "address-blocked"
    assert "link-local or metadata address" in refused.value.message
    assert http_server.requests == []
