"""The command line: parses arguments, calls the pipeline or the daemon, prints.

Exit codes: 0 done; 1 the check failed; 2 usage or configuration error; 3 a ``--fail-on``
condition held (or, for ``validate``, an error-level issue was found).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import re
import shlex
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from monitor import __version__, failon, sorting
from monitor.config import Config, Target, adhoc_target, load
from monitor.config import warnings as config_warnings
from monitor.errors import BadParameter, ConfigError, MonitorError, NotFound
from monitor.model import CHANGE_RULES, CheckResult, Issue
from monitor.rules import rule_id

if TYPE_CHECKING:  # validate is imported by the commands that use it (start-up time)
    from monitor.read.validate import ValidatedDocument

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_FAIL_ON = 0, 1, 2, 3
_URL = re.compile(r"^https?://", re.IGNORECASE)


class _Parser(argparse.ArgumentParser):
    """argparse that exits with code 2 and one line, as every usage error here does."""

    def error(self, message: str) -> Any:
        raise ConfigError(f"usage: {message}")


def _parser() -> argparse.ArgumentParser:
    root = _Parser(prog="sitemap-monitor", description="Watch XML sitemaps and report changes.")
    root.add_argument("--version", action="version", version=f"sitemap-monitor {__version__}")
    commands = root.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def with_config(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", help="configuration file (default: $SITEMAP_MONITOR_CONFIG)")

    def with_db(p: argparse.ArgumentParser) -> None:
        p.add_argument("--database-url", help="overrides $SITEMAP_MONITOR_DATABASE_URL and "
                       "the config's database_url")

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

    web = commands.add_parser("web", help="access to the daemon's port")
    web_commands = web.add_subparsers(dest="web_command", required=True, parser_class=_Parser)
    web_commands.add_parser(
        "hash-password", help="read a password (stdin, or a prompt) and print its bcrypt hash"
                              " for web.basic_auth_users")
    return root


def _listings(commands: Any, *common: Callable[[argparse.ArgumentParser], None]) -> None:
    """The listings: every count, row by row."""
    from monitor.listings import FORMATS, KINDS, STATUSES
    from monitor.sorting import SORTS

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
    changes.add_argument("--since", help="ISO time or a duration back from now, e.g. 24h")
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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sitemap-monitor`` console script."""
    try:
        given = list(sys.argv[1:] if argv is None else argv)
        args = _parser().parse_args(given)
        args.argv = given
        return _dispatch(args)
    except (ConfigError, BadParameter, NotFound) as exc:
        print(f"sitemap-monitor: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except MonitorError as exc:
        print(f"sitemap-monitor: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130


def _out(line: str) -> None:
    """Write a line of the command's output. A reader that stops early (``check --json | head``)
    gets what it read and no traceback: the command goes on to its end, what it did is stored,
    its exit code is its own, and the rest of its output goes nowhere."""
    try:
        print(line)
    except BrokenPipeError:
        _drop_stdout()


def _drop_stdout() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def script() -> None:
    """The console script's work (``monitor.script``): ``main``, then an exit without the
    interpreter's teardown, which would free one by one every object a big check leaves behind
    (its loc fingerprints, caches, modules): about 0.1 s after 500,000 URLs. By then the output
    is written, the database closed and the worker processes stopped; this finishes the rest."""
    code = main()
    logging.shutdown()
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away: see _out
        _drop_stdout()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # a full disk, say: let the interpreter report it the way it always does
        sys.exit(code)
    os._exit(code)


def _dispatch(args: argparse.Namespace) -> int:
    command = args.command
    if command == "run":
        from monitor import app

        return app.run(_config_path(args), args.database_url)
    if command == "demo":
        from monitor import demo

        return demo.run()
    if command == "check":
        return _check(args)
    if command == "validate":
        return _validate(args)
    if command == "history":
        return _history(args)
    if command in ("urls", "issues", "diff", "changes"):
        return _list(args)
    if command == "url":
        return _story(args)
    if command == "db" and args.db_command == "prune":
        return _prune(args)
    if command == "db" and args.db_command == "vacuum":
        return _vacuum(args)
    if command == "db":
        from monitor.store import db

        engine = db.make_engine(_database_url(args, _config(args)))
        try:
            db.upgrade(engine)
        finally:
            engine.dispose()
        _out(f"database {db.redact(str(engine.url))} is at {db.head_revision()}")
        return EXIT_OK
    if command == "config":
        path = _config_path(args)
        if path is None:
            raise ConfigError("config check: no file given (--config or SITEMAP_MONITOR_CONFIG)")
        cfg = load(path)
        for warning in config_warnings(cfg.resolved_targets()):
            print(f"sitemap-monitor: {path}: warning: {warning}", file=sys.stderr)
        _out(f"{path}: ok: {len(cfg.targets)} targets, {len(cfg.alerts.channels)} channels, "
              f"{len(cfg.alerts.rules)} rules")
        return EXIT_OK
    if command == "indexnow":
        return _indexnow_status(args)
    if command == "web":
        return _hash_password()
    return _alerts_test(args)


def _indexnow_status(args: argparse.Namespace) -> int:
    from monitor import cli_indexnow

    engine = _open_engine(_database_url(args, _config(args)))
    try:
        return cli_indexnow.status(args.target, engine, fmt=args.format, limit=args.limit,
                                   out=_out)
    finally:
        engine.dispose()


def _prune(args: argparse.Namespace) -> int:
    """``db prune``: each target's history past its retention (a target the configuration no
    longer names: the defaults'), deleted a few snapshots a transaction."""
    from datetime import UTC, datetime

    from monitor.store.retention import NO_VACUUM, give_back, prune_target, target_ids

    cfg = _config(args)
    engine = _open_engine(_database_url(args, cfg))
    try:
        now = datetime.now(UTC)
        verb = "would delete" if args.dry_run else "deleted"
        deleted = False
        for name, target_id in target_ids(engine):
            keep = cfg.retention(name)
            found = prune_target(engine, target_id, max_age=keep.snapshots,
                                 keep_last=keep.keep_last, now=now, dry_run=args.dry_run)
            if found.boundary is None:
                _out(f"{name}: nothing past its retention")
                continue
            _out(f"{name}: {verb} {found.snapshots} snapshots before snapshot "
                 f"{found.boundary}, {found.changes} changes, {found.documents} document "
                 f"rows, {found.entry_sets} entry-set versions, {found.robots_files} robots.txt "
                 "versions")
            deleted = deleted or found.deleted
        if deleted and not args.dry_run:
            given = give_back(engine)
            if given is None:
                _out(NO_VACUUM)
            elif given:
                _out(f"gave {given} bytes back to the file system")
    finally:
        engine.dispose()
    return EXIT_OK


def _vacuum(args: argparse.Namespace) -> int:
    """``db vacuum``: the database rewritten (SQLite: whole, as a file that shrinks when
    pruned; PostgreSQL: VACUUM)."""
    from monitor.store.retention import database_bytes, vacuum

    engine = _open_engine(_database_url(args, _config(args)))
    try:
        before = database_bytes(engine)
        vacuum(engine)
        after = database_bytes(engine)
    finally:
        engine.dispose()
    _out(f"database vacuumed: {before} bytes before, {after} after")
    return EXIT_OK


def _hash_password() -> int:
    """``web hash-password``: a bcrypt hash of a password read without echo (or from stdin)."""
    import getpass

    from monitor.serve.auth import hash_password

    if sys.stdin.isatty():
        password = getpass.getpass("password: ")
        if getpass.getpass("again: ") != password:
            raise ConfigError("web hash-password: the two passwords differ")
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise ConfigError("web hash-password: an empty password")
    _out(hash_password(password))
    return EXIT_OK


def _config_path(args: argparse.Namespace) -> str | None:
    return getattr(args, "config", None) or os.environ.get("SITEMAP_MONITOR_CONFIG") or None


def _config(args: argparse.Namespace, *, read_only: bool = False) -> Config:
    """The configuration; a command that only reads the database leaves out the sections it
    has no use for (alert channels, web access), so their secrets need not be set."""
    path = _config_path(args)
    if not path:
        return Config()
    return load(path, without=("alerts", "web") if read_only else ())


def _database_url(args: argparse.Namespace, cfg: Config) -> str:
    return (getattr(args, "database_url", None)
            or os.environ.get("SITEMAP_MONITOR_DATABASE_URL") or cfg.database_url)


def _target(name: str, cfg: Config, args: argparse.Namespace) -> Target:
    target = cfg.target(name)
    if target is not None:
        return target
    if _URL.match(name):
        return adhoc_target(name, cfg.defaults)
    where = _config_path(args) or "no configuration file"
    raise ConfigError(f"target {name!r} is not configured ({where}) and is not a URL")


def _open_engine(url: str) -> Any:
    """An engine whose schema is at head: SQLite is set up or migrated here, PostgreSQL must
    be."""
    from monitor.store import db

    engine = db.make_engine(url)
    try:
        if db.is_sqlite(engine):
            db.bring_to_head(engine)
        else:
            db.require_head(engine)
    except MonitorError as exc:
        engine.dispose()
        if isinstance(exc, db.SchemaError):
            raise ConfigError(str(exc)) from None
        raise
    return engine


def _check(args: argparse.Namespace) -> int:
    cfg = _config(args)
    target = _target(args.target, cfg, args)
    kinds = failon.parse(args.fail_on, urls=args.urls)
    engine = _open_engine(_database_url(args, cfg))
    if args.indexnow_dry_run:
        from monitor import cli_indexnow

        try:
            return cli_indexnow.dry_run(target, engine, cfg, as_json=args.json, out=_out)
        finally:
            engine.dispose()
    from monitor.read import process
    from monitor.read.workers import DigestPool

    process.return_big_buffers()
    # One check, then exit: the cycle collector would only walk the hundreds of thousands of
    # young objects of a big document again and again (10-20% of a digest), for the few
    # cycles lxml's parsers leave.
    collecting = gc.isenabled()
    gc.disable()
    digests = DigestPool()
    try:
        if args.rate is not None:
            target = _with_rate(target, args.rate)
        result, urls = asyncio.run(_run_check(target, engine, cfg, args.max_changes,
                                              urls=args.urls, digests=digests,
                                              progress=_progress()))
    except Exception as exc:
        refusal = _database_refusal(engine, exc)
        if refusal is None:
            raise
        raise refusal from None
    finally:
        if collecting:
            gc.enable()
        engine.dispose()
    try:
        _print_result(result, urls, as_json=args.json)
    finally:
        digests.shutdown()  # after the output: a reader has it while the workers end
    if result.outcome == "failed":
        return EXIT_FAILED
    held = failon.held(kinds, result, None if urls is None else urls.rules,
                       None if urls is None else urls.transitions)
    if held and not args.json:
        _out(f"  (--fail-on: {', '.join(held)})")
    return EXIT_FAIL_ON if held else EXIT_OK


def _database_refusal(engine: Any, exc: Exception) -> MonitorError | None:
    """The one-line error for a check the database refused, or None to raise ``exc`` as it
    is. A SQLite file that went bad under the check (damaged pages that opening it did not
    read) is a configuration error, as it is at the start."""
    from sqlalchemy.exc import SQLAlchemyError

    from monitor.store import db

    if isinstance(exc, SQLAlchemyError):
        return db.refused(engine, exc, "the check")
    if isinstance(exc, MonitorError) and isinstance(exc.__cause__, SQLAlchemyError):
        refusal = db.refused(engine, exc.__cause__, "the check")
        return refusal if isinstance(refusal, ConfigError) else None
    return None


def _with_rate(target: Target, rate: float) -> Target:
    """The target with its URL checks at ``rate`` requests a second per host (``--rate``)."""
    checks = target.settings.url_checks.model_copy(update={"rate": rate})
    settings = target.settings.model_copy(update={"url_checks": checks})
    return target.model_copy(update={"settings": settings})


def _progress() -> Callable[[int], None] | None:
    """On a terminal, a progress line that ``check --urls`` rewrites as URLs are checked."""
    if not sys.stderr.isatty():
        return None
    import time

    started = time.monotonic()
    shown = [0.0]

    def tick(done: int) -> None:
        now = time.monotonic()
        if now - shown[0] < 0.2:
            return
        shown[0] = now
        rate = done / max(now - started, 1e-6)
        sys.stderr.write(f"\rurl checks: {done:,} checked, {rate:.1f}/s ")
        sys.stderr.flush()

    return tick


async def _run_check(target: Target, engine: Any, cfg: Config, max_changes: int, *,
                     urls: bool = False, digests: Any = None,
                     progress: Callable[[int], None] | None = None,
                     ) -> tuple[CheckResult, Any]:
    from monitor.check.pipeline import run_check
    from monitor.model import utcnow
    from monitor.read.fetch import Fetcher

    fetcher = Fetcher(user_agent=target.settings.user_agent, per_host=cfg.scheduler.per_host)
    try:
        result = await run_check(target, engine=engine, fetcher=fetcher, alerts=cfg.alerts,
                                 max_changes=max_changes, digests=digests)
        if not urls or result.outcome == "failed":
            return result, None
        from monitor.urlhealth import checker as urlcheck

        budget = urlcheck.Budget()
        found = await urlcheck.run_round(target, engine=engine, fetcher=fetcher, budget=budget,
                                         now=utcnow, progress=progress)
        if progress is not None:
            sys.stderr.write("\r\033[K")  # the progress line goes: the summary says it all
        return result, found
    finally:
        await fetcher.aclose()


def _print_result(result: CheckResult, urls: Any = None, *, as_json: bool,
                  stored: bool = True) -> None:
    if as_json:
        out = result.as_json()
        if urls is not None:
            out["url_health"] = urls.states
            out["url_checks"] = urls.as_json()
            out["url_problems"] = urls.broken
            out["url_notes"] = urls.notes
        _out(json.dumps(out, ensure_ascii=False))
        return
    if not stored:  # ``validate``: nothing was compared nor kept
        _out(f"{result.target}: {result.outcome}  urls={result.urls} invalid={result.invalid}"
             f"  ({result.duration_seconds:.2f}s)")
    elif result.baseline:
        _out(f"{result.target}: {result.outcome}  first check: urls={result.urls} "
             f"invalid={result.invalid}  ({result.duration_seconds:.2f}s, snapshot "
             f"{result.snapshot_id})")
    else:
        _out(f"{result.target}: {result.outcome}  urls={result.urls} invalid={result.invalid} "
             f"added={result.added} removed={result.removed} changed={result.changed} "
             f"newly-invalid={result.invalid_new}  ({result.duration_seconds:.2f}s, "
             f"snapshot {result.snapshot_id})")
    if result.error_kind:
        _out(f"  error: {result.error_kind}: {result.error_message}")
    if result.outcome == "partial":
        failed = result.failed_documents
        _out(f"  partial: {len(failed)} document(s) could not be read; their URLs stay as the "
             "last check read them:")
        for d in failed:
            status = f"HTTP {d.http_status}: " if d.http_status else ""
            _out(f"    {d.url} ({status}{d.error or 'failed'})")
    _table(["DOCUMENT", "OUTCOME", "HTTP", "URLS", "ERROR"],
           [[d.url, d.outcome, d.http_status or "", d.urls, d.error or ""]
            for d in result.documents])
    if result.issues:
        _table(["SEVERITY", "RULE", "LOC", "MESSAGE"],
               [[i.severity, i.rule, i.loc or i.document or "", i.message]
                for i in result.issues])
    # A first check's changes are its whole URL set: a summary and the command that lists it.
    if result.changes and stored and not result.baseline:
        _table(["CHANGE", "LOC"], [[c.kind, c.loc] for c in result.changes])
    for hint in _hints(result) if stored else []:
        _out(f"  ({hint})")
    if urls is not None:
        states = ", ".join(f"{state} {n}" for state, n in sorted(urls.states.items()))
        _out(f"url health: {urls.listed} listed, {urls.checked} checked in "
             f"{urls.seconds:.1f}s: {states or 'none'}")
        if urls.broken:
            _table(["STATE", "HTTP", "LOC", "DETAIL"],
                   [[b["state"], b["http_status"] or "", b["loc"], b["detail"]]
                    for b in urls.broken])
            _out(f"  (every URL of a state: sitemap-monitor urls "
                 f"{shlex.quote(result.target)} --status STATE)")
        if urls.notes:
            _table(["SEVERITY", "RULE", "LOC", "DETAIL"],
                   [[n["severity"], n["rule"], n["loc"], n["detail"]] for n in urls.notes])


def _hints(result: CheckResult) -> list[str]:
    """Where to see in full what the output cut: the commands that list it."""
    name = shlex.quote(result.target)
    hints = []
    if result.baseline:
        hints.append(f"all {result.urls + result.invalid} URLs: sitemap-monitor urls {name}")
    elif result.changes_truncated:
        total = sum(result.change_counts().values())
        since = "" if result.started_at is None else " --since " + result.started_at.astimezone(
            UTC).isoformat().replace("+00:00", "Z")
        hints.append(f"all {total} changes: sitemap-monitor changes {name}{since}")
    counted = sum(result.issue_counts.values())
    if counted > len(result.issues):
        hints.append(f"all {counted} issues: sitemap-monitor issues {name}")
    return hints


def _table(header: list[str], rows: list[list[Any]]) -> None:
    cells = [header, *[[str(c) for c in row] for row in rows]]
    widths = [min(max(len(r[i]) for r in cells), 80) for i in range(len(header))]
    for row in cells:
        _out("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def _validate(args: argparse.Namespace) -> int:
    import tempfile

    cfg = _config(args)
    source: str = args.source
    if _URL.match(source):
        target = adhoc_target(source, cfg.defaults)
        with tempfile.TemporaryDirectory(prefix="sitemap-monitor-validate-") as folder:
            engine = _open_engine(f"sqlite:///{folder}/validate.db")
            try:
                result, _ = asyncio.run(_run_check(target, engine, cfg, 10_000))
            finally:
                engine.dispose()
    else:
        result = _validate_file(Path(source), cfg)
    output = result.as_json()
    for key in ("snapshot_id", "added", "removed", "changed", "changes", "changes_truncated"):
        output.pop(key)
    if args.json:
        _out(json.dumps(output, ensure_ascii=False))
    else:
        _print_result(result, as_json=False, stored=False)
    if result.outcome == "failed":
        return EXIT_FAILED
    return EXIT_FAIL_ON if any(i.severity == "error" for i in result.issues) else EXIT_OK


def _validate_file(path: Path, cfg: Config) -> CheckResult:
    from monitor.errors import FetchError
    from monitor.model import DocumentResult
    from monitor.net import inflate
    from monitor.read import parse, validate

    url = path.resolve().as_uri()
    d = cfg.defaults
    parser = parse.DocumentParser(url, max_bytes=d.max_bytes, max_urls=d.max_urls,
                                  max_children=d.max_children)
    doc = DocumentResult(url=url, outcome="ok")
    try:
        # Bounded while it inflates, as a fetch is: a gzip bomb stops at max_bytes.
        for chunk in inflate.read_file(str(path), url, d.max_bytes):
            doc.bytes += len(chunk)
            parser.feed(chunk)
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror or exc}") from None
    except FetchError as exc:
        failure: Issue | None = Issue(rule_id(exc.kind), exc.message, document=url)
    else:
        failure = None
    parsed = parser.close()
    failure = failure or parsed.failure
    doc.kind = parsed.kind
    if failure is not None:
        doc.outcome, doc.error = "failed", failure.message
        return CheckResult(target=str(path), url=url, outcome="failed", documents=[doc],
                           error_kind=failure.rule, error_message=failure.message,
                           issues=[failure])
    checked = validate.validate_document(parsed.entries, url, now=datetime.now(UTC))
    issues = [*parsed.issues,
              *filter(None, (validate.child_issue(c, url) for c in parsed.children)),
              *checked.issues, *_file_extension_issues(checked, url)]
    doc.urls = sum(1 for s in checked.entries.values() if s.valid)
    doc.invalid = checked.invalid + parsed.unkeyed_invalid
    doc.duplicates = checked.duplicates
    return CheckResult(target=str(path), url=url, outcome="ok", documents=[doc], issues=issues,
                       urls=doc.urls, invalid=doc.invalid, duplicates=doc.duplicates)


def _file_extension_issues(checked: ValidatedDocument, url: str) -> list[Issue]:
    """What a check finds over a whole target, within one file: news-too-many and
    hreflang-not-reciprocal."""
    from monitor.model import Entry
    from monitor.read import extensions, validate

    locs = list(checked.entries)
    exts = [state.extensions for state in checked.entries.values()]
    found = []
    news = extensions.news_count(exts)
    if news > extensions.MAX_NEWS:
        found.append(Issue("news-too-many", f"{news} news:news tags; the limit is "
                           f"{extensions.MAX_NEWS} a document", document=url))
    if extensions.balance(locs, exts):
        held = extensions.Alternates()
        held.add(url, locs, exts)
        found += [validate.issue("hreflang-not-reciprocal", Entry(locs[i], extensions=exts[i]),
                                 url) for i in sorted(held.unanswered().get(url, ()))]
    return found


def _history(args: argparse.Namespace) -> int:
    from monitor import times
    from monitor.store import targets as store

    cfg = _config(args, read_only=True)
    sort = sorting.parse(args.sort, "snapshots", "--sort")  # a bad one: exit code 2
    sort = None if sort == store.NEWEST else sort
    before = None
    if args.cursor is not None and sort is None:
        raw = args.cursor.strip()
        if not (raw.isascii() and raw.isdigit()) or not 0 < int(raw) < 2**62:
            raise ConfigError(f"--cursor: not a cursor of history: {args.cursor[:40]!r}")
        before = int(raw)
    engine = _open_engine(_database_url(args, cfg))
    try:
        rows = store.list_snapshots(engine, args.target, limit=args.limit + 1, before=before,
                                    sort=sort, cursor=args.cursor if sort else None)
    finally:
        engine.dispose()
    if rows is None:
        raise ConfigError(f"target {args.target!r} has no snapshots in this database")
    more = len(rows) > args.limit
    rows = rows[:args.limit]
    # The id of the last snapshot shown: the next page is the ones before it (sorted: after it).
    next_cursor = None
    if more and rows:
        next_cursor = (str(rows[-1]["id"]) if sort is None
                       else store.snapshot_cursor(sort, rows[-1]))
    if args.json:
        _out(json.dumps({"target": args.target, "snapshots": rows, "next_cursor": next_cursor},
                        ensure_ascii=False))
        return EXIT_OK
    _table(["SNAPSHOT", "FINISHED", "OUTCOME", "URLS", "INVALID", "ADDED", "REMOVED",
            "CHANGED", "ERROR"],
           [[r["id"], times.compact(r["finished_at"]), r["outcome"], r["urls"],
             r["invalid"], r["added"], r["removed"], r["changed"],
             _snapshot_error(r)] for r in rows])
    if next_cursor is not None:
        more_args = _without_cursor(args.argv)
        print(f"sitemap-monitor: listed {len(rows)}, more: continue with "
              f"{shlex.join(['sitemap-monitor', *more_args, '--cursor', next_cursor])}",
              file=sys.stderr)
    return EXIT_OK


def _snapshot_error(row: dict[str, Any]) -> str:
    """What went wrong in a snapshot, in one cell: its error, or the documents it could not
    read (a partial check)."""
    if row.get("error"):
        return str(row["error"].get("message") or row["error"].get("kind"))
    failed = row.get("failed_documents") or []
    named = [f"{d['url']} (" + (f"HTTP {d['http_status']}" if d.get("http_status")
                                else d.get("error") or "failed") + ")" for d in failed]
    more = row.get("documents_failed", 0) - len(named)
    return ", ".join(named) + (f" and {more} more" if more > 0 else "")


def _list(args: argparse.Namespace) -> int:
    """``urls``, ``issues``, ``diff``, ``changes``: streamed to the end, or to ``--limit``. A
    reader that stops early (``| head``) ends the listing: there is nothing to finish."""
    from monitor import listings as listing
    from monitor.store import listings as store

    cfg = _config(args, read_only=True)
    fmt = args.format or ("json" if args.json else "table")
    engine = _open_engine(_database_url(args, cfg))
    try:
        try:
            opened = _open_listing(args, engine, store, listing)
        except (listing.BadParameter, listing.NotFound) as exc:
            raise ConfigError(str(exc)) from None
        try:
            for chunk in listing.render(opened, fmt, limit=args.limit):
                sys.stdout.write(chunk)
            sys.stdout.flush()
            left = 0 if opened.rest is None else sum(1 for _ in opened.rest)
        except BrokenPipeError:
            _drop_stdout()
            return EXIT_OK
        finally:
            listing.close(opened)
    finally:
        engine.dispose()
    if opened.next_cursor is not None:
        more = _without_cursor(args.argv)
        print(f"sitemap-monitor: listed {opened.count}, {left} more: continue with "
              f"{shlex.join(['sitemap-monitor', *more, '--cursor', opened.next_cursor])}",
              file=sys.stderr)
    return EXIT_OK


def _open_listing(args: argparse.Namespace, engine: Any, store: Any, listing: Any) -> Any:
    now = datetime.now(UTC)
    if args.command == "urls":
        health = args.status in listing.HEALTH
        sort = sorting.parse(args.sort, "health" if health else "urls", "--sort")
        return store.open_urls(engine, args.target, listing.parse_snapshot(args.at, "--at", now),
                               args.status, args.cursor, _search(args.loc), sort)
    sort = sorting.parse(args.sort, args.command, "--sort")
    if args.command == "issues":
        from monitor.model import RULES
        from monitor.read import validate

        rules = listing.parse_rules(args.rule, RULES, "--rule")
        return store.open_issues(engine, args.target, listing.parse_snapshot(args.at, "--at", now),
                                 rules, args.cursor, validate.describe, sort)
    known = listing.DIFF_KINDS if args.command == "diff" else listing.KINDS
    kinds = listing.parse_kinds(args.kind, "--kind", known)
    if args.command == "diff":
        start = listing.parse_snapshot(args.start, "--from", now)
        if start is None:
            raise ConfigError("--from: a snapshot id, an ISO time or a duration is needed")
        return store.open_diff(engine, args.target, start,
                               listing.parse_snapshot(args.end, "--to", now), kinds, args.cursor,
                               sort)
    since = None if not args.since else listing.parse_time(args.since, "--since", now)
    return store.open_changes(engine, args.target, since, kinds, args.cursor,
                              (args.since or "").strip(),
                              listing.parse_reasons(args.reason, "--reason"),
                              listing.rule_ids(args.rule, CHANGE_RULES, "--rule"),
                              _search(args.loc), sort)


def _search(raw: str | None) -> str | None:
    """``--loc TEXT``: None when not given; a NUL is a mistake no loc holds."""
    if raw is not None and "\x00" in raw:
        raise ConfigError("--loc: holds a NUL character")
    return raw or None


def _story(args: argparse.Namespace) -> int:
    """``url TARGET LOC``: one URL's whole story."""
    from monitor import listings as listing
    from monitor import story
    from monitor.read import validate
    from monitor.store.story import read_story

    cfg = _config(args, read_only=True)
    loc = args.loc.strip()
    if not loc or "\x00" in loc:
        raise ConfigError("LOC: give the URL as the sitemap lists it")
    engine = _open_engine(_database_url(args, cfg))
    try:
        found = read_story(engine, args.target, loc, validate.describe)
    except listing.NotFound as exc:
        raise ConfigError(str(exc)) from None
    finally:
        engine.dispose()
    if (args.format or ("json" if args.json else "table")) == "json":
        _out(json.dumps(found, ensure_ascii=False))
    else:
        for line in story.lines(found, datetime.now(UTC)):
            _out(line)
    return EXIT_OK


def _without_cursor(argv: list[str]) -> list[str]:
    """This command's arguments without a ``--cursor`` (the next one replaces it)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--cursor":
            skip = True
        elif not arg.startswith("--cursor="):
            out.append(arg)
    return out


def _alerts_test(args: argparse.Namespace) -> int:
    from monitor import alerts

    cfg = _config(args)
    channel = next((c for c in cfg.alerts.channels if c.name == args.channel), None)
    if channel is None:
        raise ConfigError(f"alerts test: no channel named {args.channel!r} in "
                          f"{_config_path(args) or 'the configuration'}")
    asyncio.run(alerts.send_test(channel))
    _out(f"sent a test notification to {channel.name} ({channel.type})")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
