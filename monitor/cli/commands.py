"""The command line: parses arguments, calls the pipeline or the daemon, prints.

Exit codes: 0 done; 1 the check failed (its target's top document could not be fetched or
parsed); 2 usage, configuration or environment error (a bad option or file, a database that
cannot be reached or is behind, a port in use); 3 a ``--fail-on`` condition held (or, for
``validate``, an error-level issue was found).
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

from monitor.cli import args as cli_args
from monitor.cli import failon
from monitor.cli import output as cli_output
from monitor.config import Config, Target, adhoc_target, load
from monitor.config import warnings as config_warnings
from monitor.core.errors import BadParameter, ConfigError, MonitorError, NotFound, StoreError
from monitor.core.model import CHANGE_RULES, CheckResult
from monitor.listing import sorting

if TYPE_CHECKING:  # validate is imported by the commands that use it (start-up time)
    pass

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_FAIL_ON = 0, 1, 2, 3
_URL = re.compile(r"^https?://", re.IGNORECASE)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sitemap-monitor`` console script."""
    try:
        given = list(sys.argv[1:] if argv is None else argv)
        args = cli_args.parser().parse_args(given)
        args.argv = given
        return _dispatch(args)
    except (ConfigError, BadParameter, NotFound, StoreError) as exc:
        # a database that cannot be reached is the environment's, never a failed check
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
    """The console script's work (``monitor.cli.script``): ``main``, then an exit without the
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
        from monitor.daemon import app

        return app.run(_config_path(args), args.database_url)
    if command == "demo":
        from monitor.cli import demo

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
    if command == "robots":
        from monitor.cli import robots as cli_robots

        return cli_robots.test(args.source, args.agent, args.urls, _config(args, read_only=True),
                               as_json=args.json, out=_out)
    return _alerts_test(args)


def _indexnow_status(args: argparse.Namespace) -> int:
    from monitor.cli import indexnow as cli_indexnow

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
                                 keep_last=keep.keep_last, max_bytes=keep.max_bytes, now=now,
                                 dry_run=args.dry_run)
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
    try:
        hashed = hash_password(password)
    except ValueError as exc:  # too long for bcrypt
        raise ConfigError(f"web hash-password: {exc}") from None
    _out(hashed)
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
        from monitor.cli import indexnow as cli_indexnow

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
    checked = False
    try:
        if args.rate is not None:
            target = _with_rate(target, args.rate)
        result, urls = asyncio.run(_run_check(target, engine, cfg, args.max_changes,
                                              urls=args.urls, digests=digests,
                                              progress=_progress()))
        checked = True
    except Exception as exc:
        refusal = _database_refusal(engine, exc)
        if refusal is None:
            raise
        raise refusal from None
    finally:
        if not checked:  # failed or Ctrl-C: the console script's exit skips atexit
            digests.shutdown()
        if collecting:
            gc.enable()
        engine.dispose()
    try:
        cli_output.print_result(_out, result, urls, as_json=args.json)
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
    from monitor.core.model import utcnow
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
        removed = [c.loc for c in result.changes if c.kind == "removed"]
        if found is not None and removed and result.snapshot_id is not None:
            from monitor.store import urlstates

            # triaged as the daemon triages them: the output says what became of each
            target_id = await asyncio.to_thread(urlstates.target_id, engine, target.name)
            if target_id is not None:
                found.removals = await asyncio.to_thread(
                    urlstates.removals, engine, target_id, result.snapshot_id, removed)
        if progress is not None:
            sys.stderr.write("\r\033[K")  # the progress line goes: the summary says it all
        return result, found
    finally:
        await fetcher.aclose()


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
        from monitor.cli.validatefile import validate_file

        result = validate_file(Path(source), cfg)
    output = result.as_json()
    for key in ("snapshot_id", "added", "removed", "changed", "changes", "changes_truncated"):
        output.pop(key)
    if args.json:
        _out(json.dumps(output, ensure_ascii=False))
    else:
        cli_output.print_result(_out, result, as_json=False, stored=False)
    if result.outcome == "failed":
        return EXIT_FAILED
    return EXIT_FAIL_ON if any(i.severity == "error" for i in result.issues) else EXIT_OK


def _history(args: argparse.Namespace) -> int:
    from monitor.core import times
    from monitor.store import targetrows

    cfg = _config(args, read_only=True)
    sort = sorting.parse(args.sort, "snapshots", "--sort")  # a bad one: exit code 2
    sort = None if sort == targetrows.NEWEST else sort
    before = None
    if args.cursor is not None and sort is None:
        raw = args.cursor.strip()
        if not (raw.isascii() and raw.isdigit()) or not 0 < int(raw) < 2**62:
            raise ConfigError(f"--cursor: not a cursor of history: {args.cursor[:40]!r}")
        before = int(raw)
    engine = _open_engine(_database_url(args, cfg))
    try:
        rows = targetrows.list_snapshots(engine, args.target, limit=args.limit + 1, before=before,
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
                       else targetrows.snapshot_cursor(sort, rows[-1]))
    if args.json:
        _out(json.dumps({"target": args.target, "snapshots": rows, "next_cursor": next_cursor},
                        ensure_ascii=False))
        return EXIT_OK
    cli_output.table(
        _out, ["SNAPSHOT", "FINISHED", "OUTCOME", "URLS", "INVALID", "ADDED", "REMOVED",
               "CHANGED", "ERROR"],
        [[r["id"], times.compact(r["finished_at"]), r["outcome"], r["urls"], r["invalid"],
          r["added"], r["removed"], r["changed"], _snapshot_error(r)] for r in rows])
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
    from monitor.listing import params as listing
    from monitor.store import listingreads

    cfg = _config(args, read_only=True)
    fmt = args.format or ("json" if args.json else "table")
    engine = _open_engine(_database_url(args, cfg))
    try:
        try:
            opened = _open_listing(args, engine, listingreads, listing)
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


def _open_listing(args: argparse.Namespace, engine: Any, reads: Any, listing: Any) -> Any:
    now = datetime.now(UTC)
    if args.command == "urls":
        health = args.status in listing.HEALTH_FILTERS
        sort = sorting.parse(args.sort, "health" if health else "urls", "--sort")
        return reads.open_urls(engine, args.target, listing.parse_snapshot(args.at, "--at", now),
                               args.status, args.cursor, _search(args.loc), sort)
    sort = sorting.parse(args.sort, args.command, "--sort")
    if args.command == "issues":
        from monitor.core.model import RULES
        from monitor.read import validate

        rules = listing.parse_rules(args.rule, RULES, "--rule")
        return reads.open_issues(engine, args.target, listing.parse_snapshot(args.at, "--at", now),
                                 rules, args.cursor, validate.describe, sort)
    known = listing.DIFF_KINDS if args.command == "diff" else listing.KINDS
    kinds = listing.parse_kinds(args.kind, "--kind", known)
    if args.command == "diff":
        start = listing.parse_snapshot(args.start, "--from", now)
        if start is None:
            raise ConfigError("--from: a snapshot id, an ISO time or a duration is needed")
        return reads.open_diff(engine, args.target, start,
                               listing.parse_snapshot(args.end, "--to", now), kinds, args.cursor,
                               sort)
    since = listing.parse_snapshot(args.since, "--since", now)
    return reads.open_changes(engine, args.target, since, kinds, args.cursor,
                              (args.since or "").strip(),
                              listing.parse_reasons(args.reason, "--reason"),
                              listing.rule_ids(args.rule, CHANGE_RULES, "--rule"),
                              _search(args.loc), sort,
                              until=listing.parse_snapshot(args.until, "--until", now))


def _search(raw: str | None) -> str | None:
    """``--loc TEXT``: None when not given; a NUL, or more than a loc's length, is refused."""
    from monitor.listing import params as listing

    return listing.parse_search(raw, "--loc")


def _story(args: argparse.Namespace) -> int:
    """``url TARGET LOC``: one URL's whole story."""
    from monitor.listing import params as listing
    from monitor.listing import story
    from monitor.read import validate
    from monitor.store.storyreads import read_story

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
