"""Generate the values table of the chart README from the ``# --`` comments in values.yaml.

A stand-in for helm-docs, which is not available here: a ``# -- text`` comment (continued on
the following ``#`` lines) documents the key right after it. The table replaces the text
between the ``values-table`` markers of README.md. ``--check`` only compares, for CI.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parent / "sitemap-monitor"
START = "<!-- values-table:start -->"
END = "<!-- values-table:end -->"
_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+):(?:\s|$)")
_DOC = re.compile(r"^\s*# -- ?(?P<text>.*)$")
_MORE = re.compile(r"^\s*#(?: (?P<text>.*))?$")


@dataclass(frozen=True)
class Value:
    """One documented key of values.yaml."""

    path: str
    kind: str
    default: str
    description: str


def documented_keys(text: str) -> tuple[dict[str, str], list[str]]:
    """Map each dotted key path to its description, and list every key path in file order."""
    docs: dict[str, str] = {}
    paths: list[str] = []
    stack: list[tuple[int, str]] = []
    pending: list[str] | None = None
    for line in text.splitlines():
        if (doc := _DOC.match(line)) is not None:
            pending = [doc.group("text").strip()]
            continue
        if pending is not None and (more := _MORE.match(line)) is not None:
            pending.append((more.group("text") or "").strip())
            continue
        key = _KEY.match(line)
        if key is None:
            # A list item, a blank line or a commented example ends any pending description.
            if line.strip():
                pending = None
            continue
        indent = len(key.group("indent"))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, key.group("key")))
        path = ".".join(name for _, name in stack)
        paths.append(path)
        if pending is not None:
            docs[path] = " ".join(part for part in pending if part)
        pending = None
    return docs, paths


def _lookup(values: Any, path: str) -> Any:
    for part in path.split("."):
        values = values[part]
    return values


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    return "object"


def collect(values_file: Path) -> tuple[list[Value], list[str]]:
    """The documented values, and the keys that should be documented but are not."""
    text = values_file.read_text(encoding="utf-8")
    values = yaml.safe_load(text)
    docs, paths = documented_keys(text)
    rows = []
    for path, description in docs.items():
        value = _lookup(values, path)
        default = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        rows.append(Value(path, _kind(value), default, description))
    missing = []
    for path in paths:
        value = _lookup(values, path)
        is_section = isinstance(value, dict) and value
        ancestors = [".".join(path.split(".")[:i]) for i in range(1, path.count(".") + 1)]
        # A leaf must say what it is, unless a documented parent describes it as a whole.
        if not is_section and path not in docs and not any(a in docs for a in ancestors):
            missing.append(path)
    return rows, missing


def table(rows: list[Value]) -> str:
    """The Markdown table of the values."""
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = ["| Key | Type | Default | Description |", "|-----|------|---------|-------------|"]
    for row in rows:
        lines.append(
            f"| `{cell(row.path)}` | {row.kind} | `{cell(row.default)}` | {cell(row.description)} |"
        )
    return "\n".join(lines)


def render(readme: str, rows: list[Value]) -> str:
    """README text with the table between the markers replaced."""
    head, sep, rest = readme.partition(START)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise SystemExit(f"README lacks the {START} ... {END} markers")
    return f"{head}{START}\n{table(rows)}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    """Write (or with --check, verify) the README's values table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chart", type=Path, default=CHART)
    parser.add_argument("--check", action="store_true", help="fail if README.md is stale")
    args = parser.parse_args(argv)
    rows, missing = collect(args.chart / "values.yaml")
    if missing:
        print("values.yaml keys without a '# --' comment: " + ", ".join(missing), file=sys.stderr)
        return 1
    readme_file = args.chart / "README.md"
    current = readme_file.read_text(encoding="utf-8")
    wanted = render(current, rows)
    if args.check:
        if current != wanted:
            print(f"{readme_file} is stale: run python helm/values_readme.py", file=sys.stderr)
            return 1
        return 0
    readme_file.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
