"""Helpers of the chart and image tests: finding tools, rendering the chart, reading YAML.

Tools are looked up in this checkout's ``.tools/bin`` (where ``.ci/install-tools`` puts them),
then on PATH, nowhere else: a checkout's tests never reach into another one. A missing tool
skips the test on a developer's machine, but fails it under CI (``CI`` set): CI must run
everything it claims to run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "sitemap-monitor"
DASHBOARD = CHART / "dashboards" / "sitemap-monitor.json"
SCENARIOS = sorted(p.name for p in (CHART / "ci").glob("*-values.yaml"))
TOOL_DIRS = [ROOT / ".tools" / "bin"]
# Every prometheus-operator API the chart can use, as a cluster with the CRDs serves them.
MONITORING_APIS = [
    "monitoring.coreos.com/v1/ServiceMonitor",
    "monitoring.coreos.com/v1/PrometheusRule",
]


def tool_path() -> str:
    """PATH with the project's tool directories in front."""
    dirs = [str(d) for d in TOOL_DIRS if d.is_dir()]
    return os.pathsep.join([*dirs, os.environ.get("PATH", "")])


def require_tool(name: str) -> str:
    """The full path of a tool; skip (or, under CI, fail) the test when it is missing."""
    found = shutil.which(name, path=tool_path())
    if found is None:
        missing(f"{name} is not installed (run .ci/install-tools)")
    return found


def missing(reason: str) -> NoReturn:
    """Something ``.ci/install-tools`` provides is not here: skip the test on a developer's
    machine, fail it under CI."""
    if os.environ.get("CI"):
        pytest.fail(f"CI is set but {reason}")
    pytest.skip(reason)


def run(args: list[str], *, check: bool = True, timeout: float = 120,
        **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run a command with the tool PATH; on failure the assertion shows its output."""
    env = {**os.environ, "PATH": tool_path(), **kwargs.pop("env", {})}
    result = subprocess.run(
        args, capture_output=True, text=True, timeout=timeout, env=env, check=False, **kwargs
    )
    if check:
        assert result.returncode == 0, (
            f"{' '.join(args)} exited {result.returncode}\n"
            f"stdout:\n{result.stdout[-4000:]}\nstderr:\n{result.stderr[-4000:]}"
        )
    return result


def helm_template(*args: str, apis: list[str] | None = None,
                  check: bool = True) -> subprocess.CompletedProcess[str]:
    """``helm template`` of the chart as release ``sm`` in namespace ``seo``."""
    helm = require_tool("helm")
    cmd = [helm, "template", "sm", str(CHART), "--namespace", "seo"]
    for api in apis or []:
        cmd += ["--api-versions", api]
    return run([*cmd, *args], check=check)


def render(scenario: str | None = None, *args: str,
           apis: list[str] | None = None) -> list[dict[str, Any]]:
    """The rendered manifests (hooks and tests included) of a scenario, as dicts."""
    values = ["-f", str(CHART / "ci" / scenario)] if scenario else []
    out = helm_template(*values, *args, apis=apis).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    """Every manifest of a kind (and name, when given)."""
    return [
        d for d in docs
        if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    """The single manifest of a kind; fails when there is none or more than one."""
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
    return found[0]


def newest_kubernetes_version() -> str:
    """The newest Kubernetes version kubernetes-validate knows (its default)."""
    exe = require_tool("kubernetes-validate")
    text = run([exe, "--help"]).stdout
    match = re.search(r"Defaults to (\d+\.\d+\.\d+)", " ".join(text.split()))
    assert match, f"no default version in kubernetes-validate --help:\n{text}"
    return match.group(1)


_METRIC = re.compile(r"\b(sitemap_monitor_[a-z0-9_]+)\b")
_HISTOGRAM_SUFFIX = re.compile(r"_(bucket|sum|count)$")


def queried_metrics(promql: str) -> set[str]:
    """The sitemap_monitor_* metric names a PromQL expression reads."""
    return set(_METRIC.findall(promql))


def exported_family(name: str, exported: set[str]) -> bool:
    """Whether a queried series name is exported; a histogram's series count by its family."""
    if name in exported:
        return True
    base = _HISTOGRAM_SUFFIX.sub("", name)
    # _sum/_count/_bucket of a histogram: the family must really be one (it has buckets).
    return base != name and f"{base}_bucket" in exported


# What Grafana puts in for its variables: every target, a 1h dashboard range.
GRAFANA_VARIABLES = {"target": ".*", "__range": "1h", "__rate_interval": "5m",
                     "__interval": "1m"}
_VARIABLE = re.compile(r"\$\{?(\w+)\}?")


def dashboard() -> dict[str, Any]:
    """The Grafana dashboard the chart ships."""
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def dashboard_panel(title: str) -> dict[str, Any]:
    """The dashboard's single panel of that title."""
    found = [p for p in dashboard()["panels"] if p["title"] == title]
    assert len(found) == 1, f"expected one panel {title!r}, got {len(found)}"
    return found[0]


def grafana_promql(expr: str) -> str:
    """A panel's query as Grafana sends it, its variables replaced (an unknown one fails)."""
    return _VARIABLE.sub(lambda m: GRAFANA_VARIABLES[m.group(1)], expr)


def table_columns(panel: dict[str, Any]) -> dict[str, str]:
    """A merged table's queries by the column each becomes: {column: PromQL}."""
    renamed: dict[str, str] = {}
    for step in panel["transformations"]:
        if step["id"] == "organize":
            renamed = step["options"]["renameByName"]
    columns = {renamed[f"Value #{t['refId']}"]: grafana_promql(t["expr"])
               for t in panel["targets"]}
    assert len(columns) == len(panel["targets"]), "two queries fill the same column"
    return columns


def promtool_eval(directory: Path, series: Mapping[str, str],
                  cases: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    """``promtool test rules`` of PromQL cases (``promql_expr_test``) on input series."""
    promtool = require_tool("promtool")
    test = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [{"series": s, "values": v} for s, v in series.items()],
            "promql_expr_test": cases,
        }],
    }
    file = directory / "promql-test.yaml"
    file.write_text(yaml.safe_dump(test, sort_keys=False, width=1000), encoding="utf-8")
    return run([promtool, "test", "rules", str(file)], check=False, cwd=directory)


def promtool_passed(result: subprocess.CompletedProcess[str]) -> None:
    """Assert that a ``promtool test rules`` run passed, showing its output when not."""
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
