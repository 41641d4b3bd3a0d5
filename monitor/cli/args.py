"""The command line's arguments: every command and option, with the bounds argparse checks
(a usage error is one line and exit code 2)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from monitor import __version__
from monitor.core.errors import ConfigError

__all__ = ["parser"]

_CONFIG_HELP = "configuration file (default: $SITEMAP_MONITOR_CONFIG)"
_DATABASE_HELP = "overrides $SITEMAP_MONITOR_DATABASE_URL and the config's database_url"


class _Parser(argparse.ArgumentParser):
    """argparse that exits with code 2 and one line, as every usage error here does."""

    def error(self, message: str) -> Any:
        raise ConfigError(f"usage: {message}")


def parser() -> argparse.ArgumentParser:
    """The command line's parser: every command, its options and their bounds."""
    root = _Parser(prog="sitemap-monitor", description="Watch XML sitemaps and report changes.")
    root.add_argument("--version", action="version", version=f"sitemap-monitor {__version__}")
    # The global options, before the command or after it (after wins): a command's own
    # copy sets nothing unless given, so it never hides the one given before.
    root.add_argument("--config", help=_CONFIG_HELP)
    root.add_argument("--database-url", help=_DATABASE_HELP)
    commands = root.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def with_config(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", default=argparse.SUPPRESS, help=_CONFIG_HELP)

    def with_db(p: argparse.ArgumentParser) -> None:
        p.add_argument("--database-url", default=argparse.SUPPRESS, help=_DATABASE_HELP)

    run = commands.add_parser("run", help="the daemon")
    with_config(run)
    with_db(run)
    commands.add_parser("demo", help="a self-contained demonstration on 127.0.0.1")

    check = commands.add_parser("check", help="check one target now and store a snapshot")
    check.add_argument("target", help="a configured target's name, or a sitemap URL")
    with_config(check)
    with_db(check)
    check.add_argument("--json", action="store_true", help="print one JSON object")
    check.add_argument("--fail-on", default="", metavar="KINDS",
                       help="exit 3 when any of these held: change kinds (added, removed, "
                            "changed, invalid, health, robots), partial (a document failed), "
                            "rule ids with current issues (e.g. child-fetch-failed,"
                            "lastmod-invalid); with --urls also URL rule ids (url-not-found)")
    check.add_argument("--urls", action="store_true",
                       help="then check every listed URL now, at the target's"
                            " url_checks.rate")
    check.add_argument("--max-changes", type=_non_negative, default=1000, metavar="N",
                       help="list at most N changes and N issues (default 1000)")
    check.add_argument("--rate", type=_rate, metavar="PER_SECOND",
                       help="with --urls: requests per second per host (default: the target's"
                            " url_checks.rate)")
    check.add_argument("--indexnow-dry-run", action="store_true",
                       help="print the IndexNow requests this check's changes would make; "
                            "stores nothing")

    validate = commands.add_parser("validate", help="lint a sitemap URL or file; stores nothing")
    validate.add_argument("source", metavar="URL_OR_FILE")
    validate.add_argument("--json", action="store_true")
    with_config(validate)

    _listings(commands, with_config, with_db)

    history = commands.add_parser("history", help="a target's snapshots, newest first")
    history.add_argument("target")
    history.add_argument("--limit", type=_positive, default=20, metavar="N",
                         help="at most N snapshots (default 20)")
    history.add_argument("--cursor", help="go on where a listing cut by --limit stopped")
    history.add_argument("--sort", metavar="COLUMN",
                         help="sort by id, finished_at, outcome, urls, added, removed or changed "
                              "(--sort=-COLUMN: the other way)")
    history.add_argument("--json", action="store_true")
    with_config(history)
    with_db(history)

    db = commands.add_parser("db", help="database maintenance")
    db_commands = db.add_subparsers(dest="db_command", required=True, parser_class=_Parser)
    upgrade = db_commands.add_parser("upgrade", help="apply migrations")
    with_config(upgrade)
    with_db(upgrade)
    prune = db_commands.add_parser(
        "prune", help="delete the history retention no longer keeps")
    prune.add_argument("--dry-run", action="store_true",
                       help="say what would be deleted; delete nothing")
    with_config(prune)
    with_db(prune)
    vacuum = db_commands.add_parser(
        "vacuum", help="rewrite the database so that it gives freed space back (SQLite: once, "
                       "with the daemon stopped)")
    with_config(vacuum)
    with_db(vacuum)

    cfg = commands.add_parser("config", help="configuration")
    cfg_commands = cfg.add_subparsers(dest="config_command", required=True, parser_class=_Parser)
    with_config(cfg_commands.add_parser("check", help="validate a configuration file"))

    alerts = commands.add_parser("alerts", help="alert channels")
    alert_commands = alerts.add_subparsers(dest="alerts_command", required=True,
                                           parser_class=_Parser)
    test = alert_commands.add_parser("test", help="send a test notification")
    test.add_argument("channel")
    with_config(test)

    indexnow = commands.add_parser("indexnow", help="IndexNow submissions")
    indexnow_commands = indexnow.add_subparsers(dest="indexnow_command", required=True,
                                                parser_class=_Parser)
    status = indexnow_commands.add_parser(
        "status", help="what was submitted when, each answer, and the key files")
    status.add_argument("target", help="a configured target's name")
    with_config(status)
    with_db(status)
    status.add_argument("--format", choices=("table", "json"), default="table")
    status.add_argument("--limit", type=_positive, default=50, metavar="N",
                        help="the newest N submissions (default 50)")

    robots = commands.add_parser("robots", help="robots.txt as Google's parser reads it")
    robots_commands = robots.add_subparsers(dest="robots_command", required=True,
                                            parser_class=_Parser)
    tester = robots_commands.add_parser(
        "test", help="whether an agent may crawl each URL, with the group and line that decided")
    tester.add_argument("source", metavar="FILE|URL",
                        help="a robots.txt file, or a URL (its host's robots.txt)")
    tester.add_argument("--agent", required=True,
                        help="the user agent's product token, e.g. Googlebot")
    tester.add_argument("urls", nargs="+", metavar="URL", help="the URLs to test, as given")
    tester.add_argument("--json", action="store_true",
                        help="print a JSON list, one object per URL in order")
    with_config(tester)

    web = commands.add_parser("web", help="access to the daemon's port")
    web_commands = web.add_subparsers(dest="web_command", required=True, parser_class=_Parser)
    web_commands.add_parser(
        "hash-password", help="read a password (stdin, or a prompt) and print its bcrypt hash"
                              " for web.basic_auth_users")
    return root


def _listings(commands: Any, *common: Callable[[argparse.ArgumentParser], None]) -> None:
    """The listings: every count, row by row."""
    from monitor.listing.params import FORMATS, KINDS, STATUSES
    from monitor.listing.sorting import SORTS

    def listing(name: str, help_text: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = commands.add_parser(name, help=help_text)
        p.add_argument("target")
        for add in common:
            add(p)
        p.add_argument("--format", choices=FORMATS, default=None,
                       help="table (default), json, ndjson or csv")
        p.add_argument("--json", action="store_true", help="the same as --format json")
        p.add_argument("--limit", type=_positive, metavar="N",
                       help="stop after N rows, saying how many are left and how to go on")
        p.add_argument("--cursor", help="go on where a listing cut by --limit stopped")
        offered = SORTS[name] + (SORTS["health"][1:] if name == "urls" else ())
        p.add_argument("--sort", metavar="COLUMN",
                       help=f"sort the whole listing by {', '.join(offered)} "
                            "(--sort=-COLUMN: the other way)")
        return p

    urls = listing("urls", "the URL set now or at a past snapshot, with its fields")
    urls.add_argument("--at", help="a snapshot id, an ISO time or a duration ago (e.g. 24h)")
    urls.add_argument("--loc", metavar="TEXT", help="only the locs that hold TEXT (case aside)")
    urls.add_argument("--status", choices=STATUSES)
    issues = listing("issues", "the current issues (or at a past snapshot), each with its loc")
    issues.add_argument("--rule", action="append", default=[], metavar="RULES",
                        help="rule ids or globs, comma-separated (e.g. lastmod-*)")
    issues.add_argument("--at", help="a snapshot id, an ISO time or a duration ago")
    diff = listing("diff", "what changed between two snapshots, net, by loc")
    diff.add_argument("--from", dest="start", required=True, metavar="TIME|SNAPSHOT")
    diff.add_argument("--to", dest="end", metavar="TIME|SNAPSHOT", help="default: the latest")
    diff.add_argument("--kind", action="append", default=[], metavar="KINDS")
    changes = listing("changes", "every recorded change, newest first")
    changes.add_argument("--since", help="a snapshot id (its changes and later ones), an ISO "
                                         "time or a duration back from now, e.g. 24h")
    changes.add_argument("--until", help="a snapshot id (its changes and earlier ones), an ISO "
                                         "time or a duration back from now")
    changes.add_argument("--reason", action="append", default=[], metavar="REASONS",
                         help="removals the URL checks found moved, gone, live or unknown")
    changes.add_argument("--rule", action="append", default=[], metavar="RULES",
                         help="changes about these rule ids or globs, comma-separated "
                              "(url-*, loc-not-absolute)")
    changes.add_argument("--kind", action="append", default=[], metavar="KINDS",
                         help=f"comma-separated: {', '.join(KINDS)}")
    changes.add_argument("--loc", metavar="TEXT", help="only the locs that hold TEXT (case aside)")
    url = commands.add_parser("url", help="one URL's whole story: listed where, its fields, "
                                          "its health, every change")
    url.add_argument("target")
    url.add_argument("loc", metavar="LOC")
    for add in common:
        add(url)
    url.add_argument("--format", choices=("table", "json"), default=None,
                     help="table (default) or json")
    url.add_argument("--json", action="store_true", help="the same as --format json")


def _at_least(least: int) -> Callable[[str], int]:
    """An argparse type: a whole number of at least ``least``, or a one-line error."""
    def whole(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {raw!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be {least} or more: {raw!r}")
        return value
    return whole


_positive = _at_least(1)
_non_negative = _at_least(0)


def _rate(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {raw!r}") from None
    if not 0 < value <= 10_000:
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most 10000: {raw!r}")
    return value
