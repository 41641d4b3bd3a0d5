"""The users' reference agrees with the code wherever a machine can tell.

Every command and option of the parser is in docs/cli.md; every key of the configuration's
models is in the section of docs/configuration.md that documents its model; every metric the
daemon exports is a row of docs/metrics.md, with each of its labels; every route of the OpenAPI
document is a row of docs/daemon.md, with each of its parameters; docs/README.md lists every
page of docs/; every relative link of docs/*.md and README.md reaches a file, and a heading
where it names one.
"""

from __future__ import annotations

import argparse
import re
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Union, get_args, get_origin

from prometheus_client import CollectorRegistry
from pydantic import BaseModel

from monitor import config
from monitor.cli import args as cli_args
from monitor.core.model import CheckResult, DocumentResult, Issue
from monitor.observe.metrics import Metrics
from monitor.serve import openapi

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$", re.MULTILINE)


def _prose(text: str) -> str:
    """The text without its code blocks: what a reader sees as links and headings."""
    return _FENCE.sub("", text)


# ---- the command line ---------------------------------------------------------------------


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = (),
              ) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every command of the parser (``("db", "prune")``) with its own parser, nested ones too."""
    for action in parser._actions:  # argparse keeps its subcommands nowhere public
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from _commands(sub, (*path, name))


def test_every_command_and_option_is_in_the_cli_reference() -> None:
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    missing = []
    for path, sub in _commands(cli_args.parser()):
        if f"sitemap-monitor {' '.join(path)}" not in text:
            missing.append(" ".join(path))
        for action in sub._actions:
            for option in action.option_strings:
                if option.startswith("--") and option != "--help" and option not in text:
                    missing.append(f"{' '.join(path)} {option}")
    assert missing == [], "docs/cli.md does not name these commands and options"


def test_the_walk_finds_nested_commands_and_their_options() -> None:
    found = {" ".join(path): sub for path, sub in _commands(cli_args.parser())}
    assert {"check", "db prune", "indexnow status", "web hash-password"} <= set(found)
    assert "--dry-run" in found["db prune"]._option_string_actions


# ---- the configuration --------------------------------------------------------------------


def _models(annotation: Any) -> Iterator[type[BaseModel]]:
    """The models an annotation holds: ``X``, ``X | None``, ``list[X]``, ``dict[str, X]``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    elif get_origin(annotation) in (Union, types.UnionType, list, tuple, dict):
        for arg in get_args(annotation):
            yield from _models(arg)


# Fields the file may not set: filled in when a target is resolved (``defaults.auth`` holds a
# target's own ``auth`` with its origin; written under ``defaults`` it is refused).
_RESOLVED = {("Defaults", "auth")}


def _fields(model: type[BaseModel]) -> Iterator[tuple[str, Any]]:
    """(key as written in the file, its field) of the keys a file may set."""
    for name, field in model.model_fields.items():
        if (model.__name__, name) not in _RESOLVED:
            yield field.alias or name, field


def _keys(model: type[BaseModel], path: str = "",
          ) -> Iterator[tuple[str, type[BaseModel], str]]:
    """(the model's path in the file, the model, a key) for every key of every model the
    configuration reaches: ``("alerts.channels[]", Channel, "from")``."""
    for key, field in _fields(model):
        yield path, model, key
        many = get_origin(field.annotation) is list
        for inner in _models(field.annotation):
            yield from _keys(inner, f"{path}.{key}{'[]' if many else ''}".lstrip("."))


def _sections(text: str) -> dict[str, str]:
    """Each heading's text (backticks and all) -> the text under it, to the next heading."""
    prose = _prose(text)
    heads = list(_HEADING.finditer(prose))
    return {m.group(2): prose[m.end():heads[i + 1].start() if i + 1 < len(heads) else None]
            for i, m in enumerate(heads)}


def _section_of(sections: dict[str, str], path: str) -> str | None:
    """The text of the section whose heading names the model's path: `alerts.channels[]`, or
    "Top level" for the file's own keys."""
    for heading, body in sections.items():
        named = re.findall(r"`([^`]+)`", heading)
        if (path and path in named) or (not path and heading == "Top level"):
            return body
    return None


def _undocumented(text: str) -> list[str]:
    """The configuration keys that the section of their model in ``text`` does not show."""
    sections = _sections(text)
    paths: dict[type[BaseModel], list[str]] = {}
    for path, model, _ in _keys(config.Config):
        if path not in paths.setdefault(model, []):
            paths[model].append(path)
    # A model reached by several paths (a target's url_checks, the defaults') is documented
    # once; a target's keys that it shares with the defaults are documented with the defaults.
    shared = {key for key, _ in _fields(config.Defaults)}
    missing = []
    for model, where in paths.items():
        body = next((b for b in (_section_of(sections, p) for p in where) if b is not None),
                    None)
        keys = [key for key, _ in _fields(model)]
        if model is config.TargetSpec:
            keys = [k for k in keys if k not in shared]
        if body is None:
            missing.append(f"a section headed `{where[0]}` ({model.__name__})")
            continue
        missing += [f"{where[0]}.{key}".lstrip(".") for key in keys
                    if not re.search(rf"^\|\s*`{re.escape(key)}`", body, re.MULTILINE)]
    return missing


def test_every_configuration_key_is_in_the_section_of_its_model() -> None:
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    assert _undocumented(text) == [], "docs/configuration.md does not document these keys"


def test_the_walk_reaches_every_model_and_a_missing_key_is_named() -> None:
    paths = {path for path, _, _ in _keys(config.Config)}
    assert {"", "defaults", "defaults.url_checks", "defaults.indexnow", "targets[]",
            "targets[].retention", "alerts.channels[]", "alerts.rules[]",
            "alerts.delivery", "http", "web", "scheduler"} <= paths
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    assert _undocumented(text.replace("| `prune_interval` |", "| prune interval |")) == [
        "scheduler.prune_interval"]


# ---- the metrics --------------------------------------------------------------------------


def _exported() -> dict[str, set[str]]:
    """Every metric a scrape sends, with its label names, from a daemon's registry whose one
    target has had a check, URL checks and IndexNow (so that every labelled series exists)."""
    metrics = Metrics(CollectorRegistry(), ["shop"], ["ops"])
    metrics.set_intervals({"shop": 900.0})
    metrics.set_url_targets(["shop"])
    metrics.set_indexnow_targets(["shop"])
    metrics.observe(CheckResult(target="shop", url="https://shop.example/s.xml", outcome="ok",
                                snapshot_id=1, documents=[DocumentResult("u", "ok")],
                                issues=[Issue("lastmod-invalid", "bad")]), "shop")
    families: dict[str, set[str]] = {}
    kind: dict[str, str] = {}
    for line in metrics.exposition().decode().splitlines():
        if line.startswith("# TYPE "):
            _, _, name, what = line.split()
            families[name], kind[name] = set(), what
        elif line and not line.startswith("#"):
            sample = line.split("{")[0].split(" ")[0]
            family = next(f for f in families if sample == f or (
                kind[f] == "histogram" and sample.startswith(f"{f}_")))
            families[family] |= set(re.findall(r'(\w+)="', line)) - {"le"}
    return families


def _metric_rows(text: str) -> dict[str, str]:
    """Each table row of the metrics page by the metric it starts with."""
    return {m.group(1): m.group(0) for m in re.finditer(r"^\|\s*`(\w+)`.*$", text, re.MULTILINE)}


def _unlisted(text: str) -> list[str]:
    rows = _metric_rows(text)
    missing = []
    for name, labels in sorted(_exported().items()):
        row = rows.get(name)
        if row is None:
            missing.append(name)
            continue
        missing += [f"{name}{{{label}}}" for label in sorted(labels) if f"`{label}`" not in row]
    return missing


def test_every_metric_and_its_labels_are_a_row_of_the_metrics_page() -> None:
    text = (DOCS / "metrics.md").read_text(encoding="utf-8")
    assert _unlisted(text) == [], "docs/metrics.md has no row (or label) for these"


def test_a_metric_or_a_label_left_out_of_the_page_is_named() -> None:
    exported = _exported()
    assert exported["sitemap_monitor_checks_total"] == {"target", "outcome"}
    assert exported["sitemap_monitor_check_duration_seconds"] == {"target"}
    assert exported["sitemap_monitor_issues"] == {"target", "rule"}
    text = (DOCS / "metrics.md").read_text(encoding="utf-8")
    row = _metric_rows(text)["sitemap_monitor_alerts_total"]
    assert _unlisted(text.replace(row, "")) == ["sitemap_monitor_alerts_total"]
    assert _unlisted(text.replace(row, row.replace("`channel`", "channel"))) == [
        "sitemap_monitor_alerts_total{channel}"]


# ---- the HTTP routes ----------------------------------------------------------------------

# The paging parameters every listing takes, described once beside the routes' table.
_PAGING = {"limit", "cursor", "format"}


def _undescribed_routes(text: str) -> list[str]:
    """The routes of the OpenAPI document that are no row of ``text``, and the parameters that
    their row (or, for paging, the page) does not name."""
    rows = {m.group(1): m.group(0)
            for m in re.finditer(r"^\|\s*`(/[^`]*)`.*$", text, re.MULTILINE)}
    missing = []
    for path, item in openapi.document()["paths"].items():
        row = rows.get(path)
        if row is None:
            missing.append(path)
            continue
        for param in item["get"].get("parameters", []):
            name = param["name"]
            if param["in"] != "query":
                continue
            if f"`{name}`" not in (text if name in _PAGING else row):
                missing.append(f"{path}?{name}")
    return missing


def test_every_route_and_its_parameters_are_in_the_daemon_page() -> None:
    text = (DOCS / "daemon.md").read_text(encoding="utf-8")
    assert _undescribed_routes(text) == [], "docs/daemon.md does not describe these"


def test_a_route_or_a_parameter_left_out_is_named() -> None:
    text = (DOCS / "daemon.md").read_text(encoding="utf-8")
    row = next(line for line in text.splitlines()
               if line.startswith("| `/api/v1/targets/{name}/urls`"))
    assert _undescribed_routes(text.replace(row, row.replace("`q`", "q"))) == [
        "/api/v1/targets/{name}/urls?q"]
    assert _undescribed_routes(text.replace(row, "")) == ["/api/v1/targets/{name}/urls"]


# ---- the links ----------------------------------------------------------------------------


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to -."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for match in _HEADING.finditer(_prose(page.read_text(encoding="utf-8"))):
        slug = _slug(match.group(2))
        anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


def _broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """The relative links of a page that reach no file, or no heading of the page they name."""
    broken = []
    prose = _CODE.sub("", _prose(page.read_text(encoding="utf-8")))
    for link in _LINK.findall(prose):
        if re.match(r"^[a-z][a-z0-9+.-]*:", link):  # https:, mailto:: not ours to reach
            continue
        file, _, anchor = link.partition("#")
        target = (page.parent / file).resolve() if file else page
        if not target.exists():
            broken.append(f"{page.relative_to(root)}: {link} (no such file)")
        elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
            broken.append(f"{page.relative_to(root)}: {link} (no such heading)")
    return broken


def test_the_index_lists_every_page_of_the_reference() -> None:
    index = _prose((DOCS / "README.md").read_text(encoding="utf-8"))
    linked = {link.partition("#")[0] for link in _LINK.findall(index)}
    assert [page.name for page in sorted(DOCS.glob("*.md"))
            if page.name != "README.md" and page.name not in linked] == []


def test_every_relative_link_reaches_a_file_and_its_heading() -> None:
    broken = [found for page in PAGES for found in _broken_links(page)]
    assert broken == []


def test_a_link_to_a_missing_file_or_heading_is_named(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# A page\n\n## History's cost (`keep_last`)\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](there.md#historys-cost-keep_last) [gone](gone.md) "
                    "[bad](there.md#nowhere) [web](https://example.com/x.md) `[code](no.md)`\n"
                    "```\n[fenced](no.md)\n```\n")
    assert [found.split(": ", 1)[1] for found in _broken_links(page, tmp_path)] == [
        "gone.md (no such file)", "there.md#nowhere (no such heading)"]



def test_the_readme_stays_a_short_tour() -> None:
    """The README is a tour a newcomer reads in minutes; the reference is docs/."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 131, f"README.md has {len(lines)} lines; move detail to docs/"
