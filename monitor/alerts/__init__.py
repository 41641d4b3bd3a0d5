"""Alerts: rules turn a check into notifications; channels deliver them through the outbox.

``rules.evaluate`` is pure; the store writes its notifications in the snapshot's transaction;
``outbox.Deliverer`` sends them with retries; ``send_test`` is ``alerts test CHANNEL``.
"""

from __future__ import annotations

from monitor.alerts.channels import make_notifier, send_test
from monitor.alerts.delivery import Deliverer
from monitor.alerts.firing import evaluate
from monitor.alerts.notifier import Notifier

__all__ = ["Deliverer", "Notifier", "evaluate", "make_notifier", "send_test"]
