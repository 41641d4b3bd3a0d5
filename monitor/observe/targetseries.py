"""The per-target series, kept as plain numbers and written out as text directly.

prometheus_client makes each labelled series an object with its own lock and label dicts
(about 500 bytes), and renders each sample through generic code (about 8 us): at 20,000 targets
and 24 series each, 242 MB of RSS and a 4 s scrape. Here a target is one small object
of floats, and ``render`` writes each family's lines from those with the target's label escaped
once. ``collect`` reads that text back as metric families, for ``registry.get_sample_value`` and
any other reader of the registry; ``generate_latest`` writes them again exactly as ``render``
did (tests/daemon/test_metrics.py compares the two).

Numbers are written by the event loop and read by a scrape in a thread without a lock: each
read is of one float, so a scrape may see one check's counters half applied (its count and not
yet its sum), never a malformed value; the next scrape sees it whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, cast

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from monitor.core.model import CHANGE_KINDS, CHECK_OUTCOMES

__all__ = ["TargetSeries", "Targets"]

_number = cast(Callable[[float], str], floatToGoString)  # as prometheus_client writes a value


@dataclass(slots=True)
class TargetSeries:
    """One target's numbers."""

    label: str  # target="name", escaped for the text format
    checks: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CHECK_OUTCOMES, 0.0))
    changes: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CHANGE_KINDS, 0.0))
    # The document outcomes and issue rules the target's checks have had (a series
    # for each of the 4 outcomes and 21 rules made 62 series a target); 0 once they clear
    documents: dict[str, float] = field(default_factory=dict)
    issues: dict[str, float] = field(default_factory=dict)
    buckets: list[float] = field(default_factory=list)  # per bound and +Inf, not cumulative
    duration_sum: float = 0.0
    last_check: float = 0.0
    last_success: float = 0.0
    urls: float = 0.0
    invalid: float = 0.0
    fetched_bytes: float = 0.0
    interval: float | None = None
    lastmod_churn: float = 0.0  # the share of lastmods the last re-check saw change


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class Targets:
    """Every configured target's series, as one collector of the registry."""

    def __init__(self, prefix: str, bounds: tuple[float, ...]) -> None:
        self._p = prefix
        self._bounds = bounds
        self._le = [_number(b) for b in bounds] + ["+Inf"]
        self.series: dict[str, TargetSeries] = {}

    def add(self, name: str) -> TargetSeries:
        """A target's series, at zero (or the existing ones)."""
        found = self.series.get(name)
        if found is None:
            found = self.series[name] = TargetSeries(
                label=f'target="{_escape(name)}"', buckets=[0.0] * (len(self._bounds) + 1))
        return found

    def observe_duration(self, series: TargetSeries, seconds: float) -> None:
        """Count one check's duration in its bucket."""
        index = next((i for i, bound in enumerate(self._bounds) if seconds <= bound),
                     len(self._bounds))
        series.buckets[index] += 1
        series.duration_sum += seconds

    # ---- the families: (name, type, help, samples of one target) -------------------------

    def _families(self) -> list[tuple[str, str, str, str]]:
        p = self._p
        return [
            (f"{p}_checks_total", "counter", "Checks run, by outcome.", "checks"),
            (f"{p}_check_duration_seconds", "histogram", "Duration of a check.", "duration"),
            (f"{p}_last_check_timestamp_seconds", "gauge",
             "When the last check finished (Unix time).", "last_check"),
            (f"{p}_last_success_timestamp_seconds", "gauge",
             "When the last check that did not fail finished (Unix time).", "last_success"),
            (f"{p}_urls", "gauge", "Valid URLs of the target after its last check.", "urls"),
            (f"{p}_invalid_urls", "gauge",
             "Invalid entries of the target after its last check.", "invalid"),
            (f"{p}_issues", "gauge", "Current validation issues of the target, by rule.",
             "issues"),
            (f"{p}_changes_total", "counter", "Changes found, by kind.", "changes"),
            (f"{p}_documents", "gauge",
             "Documents of the target in its last check, by outcome.", "documents"),
            (f"{p}_fetched_bytes_total", "counter",
             "Bytes received from the target's servers.", "fetched_bytes"),
            (f"{p}_target_interval_seconds", "gauge",
             "The target's configured check interval (alert rules compare the time since its "
             "last success with it).", "interval"),
            (f"{p}_lastmod_churn_ratio", "gauge",
             "Share of the URLs with a valid lastmod before and after the last re-check whose "
             "lastmod it saw change (lastmod-churn).", "lastmod_churn"),
        ]

    _LABELLED: ClassVar[dict[str, str]] = {
        "checks": "outcome", "changes": "kind", "documents": "outcome", "issues": "rule"}

    def render(self) -> str:
        """The text exposition of every target's series (what a scrape sends)."""
        out: list[str] = []
        add = out.append
        every = list(self.series.values())
        g = _number
        for name, kind, help_text, what in self._families():
            add(f"# HELP {name} {_escape_help(help_text)}\n# TYPE {name} {kind}\n")
            if what in self._LABELLED:
                key = self._LABELLED[what]
                for s in every:
                    values: Mapping[str, float] = getattr(s, what)
                    for value_label, value in list(values.items()):
                        add(f'{name}{{{key}="{_escape(value_label)}",{s.label}}} {g(value)}\n')
            elif what == "duration":
                for s in every:
                    total = 0.0
                    for le, count in zip(self._le, list(s.buckets), strict=True):
                        total += count
                        add(f'{name}_bucket{{le="{le}",{s.label}}} {g(total)}\n')
                    add(f"{name}_count{{{s.label}}} {g(total)}\n"
                        f"{name}_sum{{{s.label}}} {g(s.duration_sum)}\n")
            else:
                for s in every:
                    value = getattr(s, what)
                    if value is not None:
                        add(f"{name}{{{s.label}}} {g(value)}\n")
        return "".join(out)

    def collect(self) -> Iterator[Metric]:
        """The same samples as metric families, read back from ``render``'s text: one way to
        write them, and a scrape never comes this way (only ``get_sample_value`` and other
        generic readers of the registry)."""
        yield from text_string_to_metric_families(self.render())


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")
