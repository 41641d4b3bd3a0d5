"""Every private part of a library that this project overrides or reads, in one place.

- httpcore: ``net.connections.Pool`` replaces ``_assign_requests_to_connections``, which is
  quadratic in the connections kept alive, and reads the pool's and its requests' state.
- h11: ``serve.server`` puts its own receive buffer (a ``ReceiveBuffer`` subclass that
  refuses ambiguous request heads) in place of h11's private ``Connection._receive_buffer``,
  and searches its private ``_data`` as h11 does.
- uvicorn: ``serve.server`` subclasses ``H11Protocol`` (its connection, admission control and
  timeouts) and calls the methods it overrides.

Each library's versions are bounded in pyproject.toml; these tests fail loudly, naming what
moved, when an upgrade changes a part an override relies on, instead of the override silently
doing the old work or none. The behaviour itself is tested where it is used
(tests/test_connections.py, tests/daemon/test_port_requests.py).
"""

from __future__ import annotations

import inspect

import h11
import httpcore
import pytest
import uvicorn
from h11._receivebuffer import ReceiveBuffer
from uvicorn.protocols.http.h11_impl import H11Protocol

from monitor.net.connections import Pool
from monitor.serve import server

# What httpcore itself calls and what the override reads on the pool and its requests.
POOL_METHODS = ("_assign_requests_to_connections", "create_connection", "handle_async_request")
POOL_STATE = ("_connections", "_requests", "_max_connections", "_max_keepalive_connections")
REQUEST_METHODS = ("is_queued", "assign_to_connection")


def test_httpcore_is_the_minor_version_the_pool_was_written_for() -> None:
    assert httpcore.__version__.startswith("1.0."), (
        f"httpcore {httpcore.__version__}: net.connections.Pool overrides private methods "
        "of 1.0; read its docstring and check the override before widening the pin")


@pytest.mark.parametrize("name", POOL_METHODS)
def test_the_pool_methods_the_override_relies_on_exist(name: str) -> None:
    assert callable(getattr(httpcore.AsyncConnectionPool, name, None)), name


def test_httpcore_calls_the_overridden_step_with_no_arguments() -> None:
    signature = inspect.signature(httpcore.AsyncConnectionPool._assign_requests_to_connections)
    assert list(signature.parameters) == ["self"]
    from httpcore._async import connection_pool

    source = inspect.getsource(connection_pool)
    assert source.count("self._assign_requests_to_connections()") >= 2  # on request and on close


def test_the_pool_state_the_override_reads_is_set_by_httpcore() -> None:
    pool = Pool()
    missing = [name for name in POOL_STATE if not hasattr(pool, name)]
    assert missing == []


def test_the_queued_request_methods_the_override_calls_exist() -> None:
    from httpcore._async.connection_pool import AsyncPoolRequest

    assert [n for n in REQUEST_METHODS if not callable(getattr(AsyncPoolRequest, n, None))] == []


# What serve.server's receive buffer calls and reads of h11's, and the protocol's overrides.
BUFFER_STATE = ("_data", "_multiple_lines_search")
PROTOCOL_METHODS = ("connection_made", "data_received", "eof_received", "pause_writing",
                    "resume_writing", "send_400_response", "on_response_complete",
                    "connection_lost")


def test_h11_is_the_minor_version_the_strict_heads_were_written_for() -> None:
    assert h11.__version__.startswith(("0.14.", "0.15.", "0.16.")), (
        f"h11 {h11.__version__}: serve.server replaces its private receive buffer; check "
        "_StrictHeads before widening the pin")


def test_h11_reads_a_head_through_the_buffer_the_server_replaces() -> None:
    conn = h11.Connection(h11.SERVER)
    assert isinstance(conn._receive_buffer, ReceiveBuffer)
    buffer = ReceiveBuffer()
    assert [n for n in BUFFER_STATE if not hasattr(buffer, n)] == []
    assert list(inspect.signature(ReceiveBuffer.maybe_extract_lines).parameters) == ["self"]
    from h11 import _readers

    assert "buf.maybe_extract_lines()" in inspect.getsource(_readers)  # a head is read so


def test_the_strict_heads_find_a_head_where_h11_does() -> None:
    from h11 import _receivebuffer

    assert _receivebuffer.blank_line_regex.pattern == server._HEAD_END.pattern


def test_uvicorn_is_the_minor_version_the_protocol_was_written_for() -> None:
    assert uvicorn.__version__.startswith("0.54."), uvicorn.__version__


@pytest.mark.parametrize("name", PROTOCOL_METHODS)
def test_the_protocol_methods_the_server_overrides_exist(name: str) -> None:
    assert callable(getattr(H11Protocol, name, None)), name
