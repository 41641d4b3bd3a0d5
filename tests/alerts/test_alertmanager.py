"""A real Prometheus Alertmanager on 127.0.0.1: alerts appear with their labels and resolve."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from alerttools import deliver, result, store_check
from httpserver import closed_port
from sqlalchemy import Engine

from monitor.alerts import send_test
from monitor.config import Alerts, Channel, Delivery, Rule

AM_CONFIG = """\
route:
  receiver: "null"
  group_wait: 1s
receivers:
  - name: "null"
"""


def _binary() -> str:
    for name in ("prometheus-alertmanager", "alertmanager"):
        found = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists()
                                       else None)
        if found:
            return found
    reason = "Alertmanager is not installed (apt-get install prometheus-alertmanager)"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[str]:
    """Alertmanager on a free port with a null receiver and clustering off; its base URL."""
    binary = _binary()
    config = tmp_path / "alertmanager.yml"
    config.write_text(AM_CONFIG)
    port = closed_port()
    log = (tmp_path / "alertmanager.log").open("w")
    proc = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
        stdout=log, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            if proc.poll() is not None:
                pytest.fail(f"alertmanager exited: {(tmp_path / 'alertmanager.log').read_text()}")
            try:
                if httpx.get(f"{base}/-/ready", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        else:
            pytest.fail("alertmanager did not become ready")
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def active_alerts(base: str) -> list[dict[str, Any]]:
    """GET /api/v2/alerts: the alerts Alertmanager considers active (resolved ones are not)."""
    response = httpx.get(f"{base}/api/v2/alerts", params={"active": "true"}, timeout=5)
    response.raise_for_status()
    alerts: list[dict[str, Any]] = response.json()
    return alerts


def test_fire_re_send_and_resolve(alertmanager: str, sqlite_engine: Engine) -> None:
    """Firing: active with our labels; re-sent: still one alert; resolved: no longer active."""
    channel = Channel(name="am", type="alertmanager", url=alertmanager + "/")
    cfg = Alerts(channels=[channel], delivery=Delivery(api_base_url="https://monitor.example"),
                 rules=[Rule(name="down", when="check_failed", consecutive=1, channels=["am"],
                             severity="critical")])
    now = datetime.now(UTC).replace(microsecond=0)
    failed = result(outcome="failed", error_kind="timeout", error_message="read timed out")
    store_check(sqlite_engine, cfg, failed, now)
    assert deliver(sqlite_engine, channel) == ["sent"]
    [alert] = active_alerts(alertmanager)
    assert alert["status"]["state"] == "active"
    assert alert["labels"] == {"alertname": "down", "target": "shop", "rule": "down",
                               "severity": "critical"}
    assert "timeout" in alert["annotations"]["summary"]
    # a failed check links to the target's snapshots, which say what failed
    assert alert["annotations"]["api"] == "https://monitor.example/api/v1/targets/shop/snapshots"
    assert alert["annotations"]["page"] == "https://monitor.example/targets/shop/snapshots"
    started = alert["startsAt"]
    ends = datetime.fromisoformat(alert["endsAt"].replace("Z", "+00:00"))
    assert ends > now + timedelta(minutes=50)  # alert_ttl ahead, not Alertmanager's 5m default

    store_check(sqlite_engine, cfg, result(outcome="failed", error_kind="timeout"),
                datetime.now(UTC))
    assert deliver(sqlite_engine, channel) == ["sent"]
    [again] = active_alerts(alertmanager)
    assert again["fingerprint"] == alert["fingerprint"]
    assert again["startsAt"] == started

    store_check(sqlite_engine, cfg, result(outcome="ok", urls=10), datetime.now(UTC))
    assert deliver(sqlite_engine, channel) == ["sent"]
    assert active_alerts(alertmanager) == []


def test_send_test_reaches_alertmanager(alertmanager: str) -> None:
    """``alerts test`` posts a labelled test alert."""
    asyncio.run(send_test(Channel(name="am", type="alertmanager", url=alertmanager)))
    [alert] = active_alerts(alertmanager)
    assert alert["labels"]["test"] == "true"
    assert alert["labels"]["alertname"] == "test"


def test_alertmanager_refusal_is_permanent(alertmanager: str) -> None:
    """A malformed alert (400 from Alertmanager) is a permanent failure, message readable."""
    from monitor.alerts.notifier import post
    from monitor.core.errors import DeliveryError

    channel = Channel(name="am", type="alertmanager", url=alertmanager)

    async def go() -> None:
        async with httpx.AsyncClient() as client:
            await post(client, channel, alertmanager + "/api/v2/alerts", b'[{"labels": 1}]',
                       {"Content-Type": "application/json"})

    with pytest.raises(DeliveryError) as refused:
        asyncio.run(go())
    assert refused.value.permanent
    assert "HTTP 400" in refused.value.message
