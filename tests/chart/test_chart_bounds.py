"""The chart refuses what the daemon refuses: out-of-range durations, ratios, rates, sizes and
counts under ``config`` stop ``helm`` before anything renders, and in-range ones still render
into a configuration the daemon takes."""

from __future__ import annotations

import importlib
import json
import re
import shutil
import sys
from fractions import Fraction
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from charttools import CHART, ROOT, helm_template, one, render, require_tool, run

from monitor import config as monitor_config
from monitor.config.values import Frozen
from monitor.core.errors import ConfigError


def _generator(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(ROOT / "helm"))
    return importlib.import_module("values_schema")


def _daemon_takes(path: str, value: object) -> bool:
    """Whether the daemon's configuration takes ``value`` at ``config.<path>``."""
    keys = path.split(".")
    data: dict[str, Any] = {}
    here = data
    if keys[0] == "targets[]":
        target: dict[str, Any] = {"name": "t", "url": "https://e.test/sitemap.xml"}
        data["targets"] = [target]
        here, keys = target, keys[1:]
    for key in keys[:-1]:
        here = here.setdefault(key, {})
    here[keys[-1]] = value
    try:
        monitor_config.parse(data, env={})
    except ConfigError:
        return False
    return True


def _set(path: str, value: str) -> list[str]:
    """helm arguments that put ``value`` (a string) at ``config.<path>``."""
    if path.startswith("targets[]."):
        return ["--set", "config.targets[0].name=t",
                "--set", "config.targets[0].url=https://e.test/sitemap.xml",
                "--set-string", f"config.targets[0].{path.removeprefix('targets[].')}={value}"]
    return ["--set-string", f"config.{path}={value}"]


@pytest.mark.parametrize(("path", "value", "said"), [
    ("defaults.interval", "500ms", "from_1s"),
    ("defaults.interval", "0.01m", "from_1s"),
    ("defaults.interval", "inf", "from_1s"),
    ("targets[].interval", "0.5s", "from_1s"),
    ("defaults.timeout", "0s", "above_0s"),
    ("defaults.jitter", "150%", "ratio_from_0_to_1"),
    ("defaults.url_checks.rate", "1001", "rate_above_0_to_1000"),
    ("defaults.retention.snapshots", "3651d", "to_3650d"),
    ("defaults.max_bytes", "0.5B", "size_at_least_1B"),
    ("scheduler.lease", "2h", "from_1s_to_1h"),
    ("scheduler.concurrency", "0", "whole_number_from_1_to_1024"),
    ("http.head_timeout", "301s", "above_0s_to_5m"),
    ("alerts.delivery.max_age", "3651d", "to_3650d"),
])
def test_a_value_the_daemon_refuses_stops_helm_with_the_key_and_the_bound(
        path: str, value: str, said: str) -> None:
    """``helm template`` (as ``helm install``) fails, naming the key, the value and the bound."""
    assert not _daemon_takes(path, value)
    result = helm_template(*_set(path, value), check=False)
    assert result.returncode != 0
    where = "/config/" + path.replace("targets[]", "targets/0").replace(".", "/")
    line = next((line for line in result.stderr.splitlines() if f"at '{where}'" in line), "")
    assert f"'{value}'" in line, result.stderr
    assert said in line, result.stderr


@pytest.mark.parametrize(("path", "number", "said"), [
    ("defaults.interval", "0.5", "minimum: got 0.5, want 1"),
    ("scheduler.lease", "3601", "maximum: got 3,601, want 3,600"),
    ("defaults.url_checks.rate", "0", "exclusiveMinimum: got 0, want 0"),
])
def test_a_number_out_of_range_stops_helm(path: str, number: str, said: str) -> None:
    """A number of seconds (or a rate) is bounded as the daemon bounds it."""
    assert not _daemon_takes(path, json.loads(number))
    result = helm_template("--set-json", f"config.{path}={number}", check=False)
    assert result.returncode != 0
    assert said in result.stderr, result.stderr


GOOD = {
    "defaults.interval": "0.0167m", "defaults.jitter": "100%", "defaults.timeout": "1ms",
    "defaults.max_bytes": "0.001KB", "defaults.url_checks.rate": "1000",
    "defaults.retention.snapshots": "3650d", "scheduler.lease": "3600000ms",
    "scheduler.shutdown_grace": "0", "scheduler.concurrency": "1024",
    "http.write_timeout": "1h", "alerts.delivery.max_age": "0s",
    "targets[].interval": "${CHECK_INTERVAL}",
}


def test_values_at_the_bounds_render_into_a_configuration_the_daemon_takes() -> None:
    """The edges of each range still render, and the daemon reads what the chart wrote."""
    args = [arg for path, value in GOOD.items() for arg in _set(path, value)]
    docs = render(None, *args)
    text = one(docs, "ConfigMap", "sm-sitemap-monitor")["data"]["config.yaml"]
    config = monitor_config.parse(yaml.safe_load(text), env={"CHECK_INTERVAL": "10m"})
    assert config.defaults.interval == pytest.approx(1.002)
    assert config.scheduler.lease == pytest.approx(3600)
    assert config.resolved_targets()[0].settings.interval == 600


def _numeric_fields() -> list[str]:
    """Every number the daemon reads under the chart's ``config``, as a path."""
    def walk(model: type[Any], prefix: str) -> list[str]:
        found = []
        for name, field in model.model_fields.items():
            kind = field.annotation
            args = [a for a in getattr(kind, "__args__", ()) if a is not type(None)]
            kind = args[0] if args else kind
            if isinstance(kind, type) and issubclass(kind, Frozen):
                if kind not in (monitor_config.IndexNow, monitor_config.Auth,
                                monitor_config.BasicAuth):
                    found += walk(kind, f"{prefix}{name}.")
            elif kind in (int, float):
                found.append(prefix + (field.alias or name))
        return found

    return (walk(monitor_config.Defaults, "defaults.")
            + walk(monitor_config.TargetSpec, "targets[].")
            + walk(monitor_config.Scheduler, "scheduler.") + walk(monitor_config.Http, "http.")
            + walk(monitor_config.Delivery, "alerts.delivery."))


# Plain spellings: numbers, and the strings the daemon documents (a duration, a ratio, a size).
CORPUS: list[object] = [
    -1, 0, 0.0005, 0.5, 0.999, 1, 1.5, 5, 60, 100, 255, 256, 257, 299.9, 300, 300.5, 1000, 1000.5,
    1024, 1025, 3599, 3600, 3600.5, 86400, 315359999, 315360000, 315360000.5, 315360001, 1e12,
    "", "abc", "inf", "nan", "-1s", "1e3s", "0", "00", "0.0", "1", "1.0", "1.1", "5", "60", " 30 ",
    "0s", "0.0s", "0ms", "1ms", "999ms", "999.9ms", "1000ms", "1000.0ms", "0.5s", "1s", "1.0s",
    "01s", " 30s ", "30 s", "0.01m", "0.0166m", "0.0167m", "0.0166666m", "0.5m", "1m", "5m",
    "5.01m", "60m", "60.5m", "0.0002h", "0.000277h", "0.000278h", "0.0833h", "0.08334h", "1h",
    "1.01h", "24h", "87600h", "87600.1h", "0.0000115d", "0.0000116d", "0.003472d", "0.003473d",
    "0.0416d", "0.0417d", "1d", "3650d", "3650.0d", "3650.001d", "3651d", "5256000m",
    "5256001m", "315360000s", "315360000.1s", "315360000000ms", "315360000001ms", "300000ms",
    "300001ms", "3600000ms", "3600001ms",
    "0.05", "5%", "10%", " 10% ", "10 %", "0%", "100%", "100.0%", "100.1%", "101%",
    "0B", "1B", "0.5B", "1.5B", "1KB", "0.001KB", "0.0009KB", "0.0009765625KiB", "0.0009765KiB",
    "50MiB", "0.000001MB", "0.0000009MB", "1GiB", "0.000000001GB", "0.0000000009GB", "1 MiB",
    "1mb", "255", "256", "257", "1000.0", "1000.1", "1024", "1025", "1024.0",
]


def test_the_schema_refuses_exactly_what_the_daemon_refuses(tmp_path: Path) -> None:
    """Every number under ``config``, every plain spelling: helm and the daemon agree.

    Each field's schema is copied into a probe property of a copy of the chart and handed the
    whole corpus as a list, so that one helm run judges them all. Booleans where a number is
    meant are the one known difference: the daemon reads ``true`` as 1, the chart refuses it.
    """
    helm = require_tool("helm")
    fields = _numeric_fields()
    schema = json.loads((CHART / "values.schema.json").read_text())
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    probes = {}
    for i, path in enumerate(fields):
        node = schema["properties"]["config"]
        for key in path.split("."):
            node = (node["properties"][key[:-2]]["items"] if key.endswith("[]")
                    else node["properties"][key])
        probes[f"f{i}"] = {"type": "array", "items": node}
    schema["properties"]["probe"] = {"type": "object", "additionalProperties": False,
                                     "properties": probes}
    (chart / "values.schema.json").write_text(json.dumps(schema), encoding="utf-8")
    values = tmp_path / "probe.json"
    values.write_text(json.dumps({"probe": {f"f{i}": [*CORPUS, True, False]
                                            for i in range(len(fields))}}), encoding="utf-8")
    result = run([helm, "template", "sm", str(chart), "-f", str(values)], check=False)
    refused = {(int(f), int(v)) for f, v in re.findall(r"at '/probe/f(\d+)/(\d+)'",
                                                        result.stderr)}
    differences = []
    for i, path in enumerate(fields):
        for j, value in enumerate(CORPUS):
            if ((i, j) in refused) == _daemon_takes(path, value):
                differences.append(f"{path}={value!r}: chart "
                                   f"{'refuses' if (i, j) in refused else 'takes'} it")
        for j in (len(CORPUS), len(CORPUS) + 1):
            if (i, j) not in refused:
                differences.append(f"{path}={[True, False][j - len(CORPUS)]}: chart takes it")
    assert differences == [], "\n".join(differences[:40])


def test_a_string_with_a_variable_is_left_to_the_daemon() -> None:
    """``${VAR}`` is expanded by the daemon (from ``secretEnv``): the chart passes it on."""
    docs = render(None, "--set-string", "config.scheduler.lease=${LEASE}",
                  "--set-string", "config.defaults.jitter=${JITTER}%")
    text = one(docs, "ConfigMap", "sm-sitemap-monitor")["data"]["config.yaml"]
    config = monitor_config.parse(yaml.safe_load(text), env={"LEASE": "2m", "JITTER": "5"})
    assert config.scheduler.lease == 120
    assert config.defaults.jitter == pytest.approx(0.05)


def test_the_schema_is_what_the_generator_writes() -> None:
    """values.schema.json is up to date with helm/values_schema.py."""
    result = run([sys.executable, str(ROOT / "helm" / "values_schema.py"), "--check"],
                 check=False)
    assert result.returncode == 0, result.stderr


def test_decimal_ranges_match_exactly_the_decimals_in_range(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The generator's patterns, held to Fraction arithmetic on every decimal up to 3 digits
    and 3 decimals, leading zeros and all, for the bounds the chart uses."""
    generator = _generator(monkeypatch)
    decimals = [f"{w}{f}" for w in ("0", "00", *map(str, range(1, 1001)), "3650", "3651")
                for f in ("", ".0", ".5", ".05", ".001", ".999", ".0167", ".0166", ".000278",
                          ".000277", ".0416", ".0417", ".0000116", ".0000115", ".0009765625",
                          ".0009765624")]
    bounds = [(Fraction(1, 60), Fraction(5256000), False),
              (Fraction(1, 86400), Fraction(1, 24), False),
              (Fraction(1, 3600), Fraction(1), False), (Fraction(0), Fraction(1, 12), True),
              (Fraction(0), Fraction(1000), True), (Fraction(0), Fraction(100), False),
              (Fraction(1, 1024), None, False), (Fraction(1000), Fraction(3600000), False)]
    for low, high, above in bounds:
        pattern = re.compile(generator.decimal_range(low, high, above=above))
        for text in decimals:
            value = Fraction(text)
            inside = (value > low if above else value >= low) and (high is None or value <= high)
            assert bool(pattern.fullmatch(text)) == inside, (low, high, text)
