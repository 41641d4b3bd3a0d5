"""The private parts of httpcore that ``net.connections.Pool`` overrides and reads.

The pool replaces httpcore's ``_assign_requests_to_connections`` because that step is
quadratic in the connections kept alive. httpcore is pinned to its minor version in
pyproject.toml; this test fails loudly, naming what moved, when an upgrade changes any part
the override relies on, instead of the pool silently doing the old work or none.
"""

from __future__ import annotations

import inspect

import httpcore
import pytest

from monitor.net.connections import Pool

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
