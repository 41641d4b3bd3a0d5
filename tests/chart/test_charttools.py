"""Where the chart tests find their tools: this checkout's ``.tools/bin``, then PATH, nowhere
else (they also looked under one machine's absolute checkout path)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import charttools

_FIND = (
    "import shutil, sys; sys.path.insert(0, sys.argv[1]); import charttools; "
    "print(shutil.which(sys.argv[2], path=charttools.tool_path()) or '')"
)


def _checkout(tmp_path: Path) -> Path:
    """A checkout elsewhere on this machine holding this charttools.py."""
    chart_tests = tmp_path / "checkout" / "tests" / "chart"
    chart_tests.mkdir(parents=True)
    shutil.copy(charttools.__file__, chart_tests / "charttools.py")
    return chart_tests


def _tool(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    tool = folder / name
    tool.write_text("#!/bin/sh\n", encoding="utf-8")
    tool.chmod(0o755)
    return tool


def _found(chart_tests: Path, name: str, path: list[Path]) -> str:
    """What a chart test in that checkout finds for ``name`` with this PATH ('' for nothing)."""
    env = {**os.environ, "PATH": os.pathsep.join(str(p) for p in path)}
    result = subprocess.run(
        [sys.executable, "-c", _FIND, str(chart_tests), name],
        capture_output=True, text=True, env=env, check=True, timeout=60)
    return result.stdout.strip()


def test_a_tool_is_found_in_the_checkouts_tools_then_on_path(tmp_path: Path) -> None:
    chart_tests = _checkout(tmp_path)
    own = _tool(tmp_path / "checkout" / ".tools" / "bin", "sm-fake-tool")
    on_path = _tool(tmp_path / "bin", "sm-fake-tool")
    assert _found(chart_tests, "sm-fake-tool", [on_path.parent]) == str(own)
    own.unlink()
    assert _found(chart_tests, "sm-fake-tool", [on_path.parent]) == str(on_path)


def test_a_tool_neither_in_the_checkout_nor_on_path_is_not_found(tmp_path: Path) -> None:
    # helm is what the chart tests need most; another checkout on this machine may have it in
    # its own .tools: not this checkout's, so not found.
    chart_tests = _checkout(tmp_path)
    for name in ("helm", "promtool", "kubeconform", "kubernetes-validate"):
        assert _found(chart_tests, name, [tmp_path / "empty"]) == "", name
