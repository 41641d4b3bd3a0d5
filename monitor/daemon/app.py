"""Wiring of ``sitemap-monitor run``: config, engine, fetcher, registry, scheduler, HTTP, signals.

Nothing here decides when or how a check runs (scheduler, pipeline); this module only builds
the long-lived parts once, connects them, and takes them down in order on SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import gc
import os
import secrets
import signal
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any
from urllib.parse import urlsplit

import structlog
from prometheus_client import CollectorRegistry
from sqlalchemy import Engine, make_url
from sqlalchemy.exc import ArgumentError

from monitor import __version__, config
from monitor.alerts.delivery import Deliverer
from monitor.check import pipeline
from monitor.core.errors import ConfigError, MonitorError, SchemaError
from monitor.core.model import CheckResult, utcnow
from monitor.daemon.pruning import Pruner
from monitor.indexnow.submitter import Submitter
from monitor.observe import log
from monitor.observe.metrics import Metrics
from monitor.read import process
from monitor.read.fetch import Fetcher
from monitor.read.workers import DigestPool
from monitor.robots.reader import RobotsCache
from monitor.scheduler import Scheduler
from monitor.serve import api
from monitor.serve.server import bind, make_server
from monitor.store import db, targetrows
from monitor.store.indexnowrows import SqlSubmissions
from monitor.store.outbox import SqlOutbox
from monitor.store.targetrows import Lease
from monitor.urlhealth.rounds import UrlChecks

__all__ = ["run"]

# The daemon's log name (the `logger` field), which log queries select by: kept as it was.
logger = structlog.get_logger("monitor.app")


def _warn(targets: list[config.Target]) -> None:
    for warning in config.warnings(targets):
        logger.warning("configuration warning", warning=warning)


def _secrets_of(cfg: config.Config, database_url: str) -> list[str | None]:
    found: list[str | None] = []
    with contextlib.suppress(ArgumentError, ValueError):  # make_engine says what is wrong
        found.append(make_url(database_url).password)
    for channel in cfg.alerts.channels:
        # A webhook URL is itself the credential (Slack), so the whole URL is secret.
        found += [channel.url, channel.secret, channel.smtp_password, *channel.headers.values()]
    for target in cfg.resolved_targets():
        with contextlib.suppress(ValueError):
            found.append(_url_password(target.url))
        if target.settings.auth is not None:
            found.append(target.settings.auth.password)
    return found


def _url_password(url: str) -> str | None:
    return urlsplit(url).password


@contextlib.contextmanager
def _sqlite_single_replica(engine: Engine) -> Iterator[None]:
    """Hold an exclusive lock beside the SQLite file: one ``run`` per database file."""
    database = engine.url.database
    if not db.is_sqlite(engine) or not database or database == ":memory:":
        yield
        return
    path = f"{database}.lock"
    handle = _locked(path, database)
    try:
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        yield
    finally:
        # Gone while still held: a run that opened it meanwhile finds it unlinked (below)
        # and takes a new one, so no lock file is left beside the database.
        with contextlib.suppress(OSError):
            os.unlink(path)
        handle.close()


def _locked(path: str, database: str) -> IO[str]:
    """The lock file at ``path``, opened and locked; one a stopping run unlinked after this
    run opened it is let go and ``path`` opened again."""
    while True:
        try:
            handle: IO[str] = open(path, "a+", encoding="utf-8")  # noqa: SIM115 (held)
        except OSError as exc:  # a read-only folder, say: the database could not be written
            raise ConfigError(
                f"database_url: cannot write {path} beside the SQLite database "
                f"({exc.strerror}): the database's folder must be writable by this user"
            ) from None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise ConfigError(
                f"database {database} is in use by another 'sitemap-monitor run' "
                f"(pid {holder}); SQLite supports one replica, use PostgreSQL for more"
            ) from None
        try:
            same = os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return handle
        handle.close()


@dataclass(slots=True)
class _State:
    """What a reload replaces."""

    cfg: config.Config
    config_path: str | None
    url_checks: UrlChecks | None = None


class _Delivery:
    """The outbox's delivery loop, restartable when a reload changes the channels."""

    def __init__(self, engine: Engine, owner: str, metrics: Metrics) -> None:
        self._outbox = SqlOutbox(engine)
        self._owner = owner
        self._metrics = metrics
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self, alerts: config.Alerts) -> None:
        """Deliver with these channels until ``stop``."""
        self._stop = asyncio.Event()
        deliverer = Deliverer(
            alerts.channels, self._outbox, owner=self._owner, delivery=alerts.delivery,
            on_result=self._metrics.alert_result)
        self._task = asyncio.create_task(deliverer.run(self._stop))

    async def stop(self) -> None:
        """Finish the send in progress and stop."""
        self._stop.set()
        if self._task is not None:
            await self._task
            self._task = None

    async def refresh_pending(self) -> None:
        """Update the alerts_pending gauge (before each scrape)."""
        try:
            count = await asyncio.to_thread(self._outbox.pending_count)
        except Exception as exc:  # noqa: BLE001 - a scrape must not fail on an outage
            logger.warning("cannot count pending notifications", error=str(exc))
            return
        self._metrics.set_alerts_pending(count)


def run(config_path: str | None, database_url: str | None) -> int:
    """Run the daemon until SIGTERM or SIGINT; return the process exit code."""
    log.configure()
    process.return_big_buffers()
    config_path = config_path or os.environ.get("SITEMAP_MONITOR_CONFIG") or None
    try:
        cfg = config.load(config_path) if config_path else config.Config()
    except ConfigError as exc:
        logger.error("configuration refused", error=str(exc))
        return 2
    url = database_url or os.environ.get("SITEMAP_MONITOR_DATABASE_URL") or cfg.database_url
    log.register_secrets(_secrets_of(cfg, url))
    try:
        return asyncio.run(_main(_State(cfg, config_path), url))
    except SchemaError as exc:
        logger.error("database schema is behind", error=str(exc))
        return 2
    except MonitorError as exc:  # the configuration, the database, the port: exit code 2
        logger.error("cannot start", error=str(exc))
        return 2


async def _main(state: _State, url: str) -> int:
    cfg = state.cfg
    loop = asyncio.get_running_loop()
    # Database work runs in threads; enough of them that checks never queue behind the API.
    loop.set_default_executor(ThreadPoolExecutor(max_workers=cfg.scheduler.concurrency * 2 + 4))
    # One connection per running check, plus claims, the outbox and the API; the pool's
    # default (5 + 10 overflow) made checks wait for a connection at concurrency 16.
    engine = db.make_engine(url, pool_size=cfg.scheduler.concurrency + 4, max_overflow=4)
    # The API's own few connections: a flood of API requests waits for these, never
    # for the checks'. An in-memory SQLite database exists only in its own engine.
    connections = cfg.http.database_connections
    api_engine = engine if db.in_memory(engine) else db.make_engine(
        url, pool_size=connections, max_overflow=0)
    reads = api.ApiReads(api_engine, connections)
    try:
        with _sqlite_single_replica(engine):
            if db.is_sqlite(engine):  # in one transaction: a kill leaves nothing half made
                await asyncio.to_thread(db.bring_to_head, engine)
            else:
                await asyncio.to_thread(db.require_head, engine)
            sock = bind(cfg.listen)
            return await _serve(state, engine, sock, url, reads)
    finally:
        reads.close()
        api_engine.dispose()
        engine.dispose()


async def _serve(
    state: _State, engine: Engine, sock: socket.socket, url: str, reads: api.ApiReads
) -> int:
    cfg = state.cfg
    owner = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
    targets = cfg.resolved_targets()
    _warn(targets)
    registry = CollectorRegistry()
    # The targets' series are made in slices by scheduler.start, once the port answers.
    metrics = Metrics(registry, [], [c.name for c in cfg.alerts.channels])
    metrics.config_reloaded(True)
    fetcher = Fetcher(user_agent=cfg.defaults.user_agent, per_host=cfg.scheduler.per_host)
    # One robots.txt cache for the checks' watch and the URL checks: a version either reads is
    # in force for both at once.
    robots_cache = RobotsCache()

    digests = DigestPool()

    async def check(target: config.Target, lease: Lease) -> CheckResult:
        return await pipeline.run_check(
            target, engine=engine, fetcher=fetcher, alerts=state.cfg.alerts, now=utcnow,
            lease=lease, digests=digests, robots_cache=robots_cache)

    scheduler = Scheduler(
        engine=engine, check=check, metrics=metrics, owner=owner, settings=cfg.scheduler)
    delivery = _Delivery(engine, owner, metrics)
    delivery.start(cfg.alerts)
    metrics.set_indexnow_targets(t.name for t in targets if t.settings.indexnow.enabled)
    slowest = max((t.settings.timeout for t in targets), default=cfg.defaults.timeout)
    submitter = Submitter(lambda name: state.cfg.target(name), SqlSubmissions(engine), fetcher,
                          owner=owner, on_result=metrics.indexnow_result,
                          targets=lambda: state.cfg.resolved_targets(),
                          lease=2 * slowest + 10)
    submitting = asyncio.Event()  # set: stop submitting
    submitter_task = asyncio.create_task(submitter.run(submitting))
    pruner = Pruner(engine, lambda: state.cfg, metrics)

    async def on_scrape() -> None:
        await delivery.refresh_pending()
        await pruner.refresh_size()
    app = api.create_app(
        engine=engine, registry=registry, exposition=metrics.exposition,
        alive=lambda: scheduler.alive,
        configured=scheduler.target_names,
        on_scrape=on_scrape,
        reads=reads,
        limits=cfg.http,
        open_connections=lambda: server.port.open_connections(),
        on_refused=metrics.http_request_refused,
        web=cfg.web,
    )
    server = make_server(app, cfg.http, cfg.web)
    serving = asyncio.create_task(server.serve(sockets=[sock]))

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    reloads: set[asyncio.Task[None]] = set()

    def on_stop(signum: int) -> None:
        logger.info("stopping", signal=signal.Signals(signum).name)
        stop.set()

    def on_hup() -> None:
        task = asyncio.create_task(_reload(state, scheduler, metrics, delivery))
        reloads.add(task)
        task.add_done_callback(reloads.discard)

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_stop, signum)
    loop.add_signal_handler(signal.SIGHUP, on_hup)

    # With the port answering: 20,000 targets' series and jobs take seconds to make, in slices
    # between which /healthz is answered. The gauges are restored before the first check can
    # run, so a restored value never overwrites a fresh one; targets never checked keep zeros.
    names = [t.name for t in targets]
    restored = await asyncio.to_thread(targetrows.last_gauges, engine, names)
    for count, gauges in enumerate(restored, 1):
        metrics.restore(
            gauges.name, last_check=gauges.last_check, last_success=gauges.last_success,
            urls=gauges.urls, invalid=gauges.invalid, issue_counts=gauges.issue_counts,
            documents=gauges.documents, lastmod_churn=gauges.lastmod_churn)
        if count % 200 == 0:
            await asyncio.sleep(0)
    await scheduler.start(targets)
    url_checks = UrlChecks(engine=engine, fetcher=fetcher, metrics=metrics, owner=owner,
                           lease=cfg.scheduler.lease, alerts=cfg.alerts, robots=robots_cache)
    url_checks.start(targets)
    state.url_checks = url_checks
    pruner.start()

    host, port = sock.getsockname()[:2]
    shown = "localhost" if host in ("0.0.0.0", "::") else host  # noqa: S104
    scheme = "https" if cfg.web.tls_cert_file else "http"
    base = f"{scheme}://{shown}:{port}"
    logger.info(
        "started", version=__version__, replica=owner, targets=len(targets),
        database=db.redact(url), listen=f"{host}:{port}",
        pages=f"{base}/", metrics=f"{base}/metrics", api=f"{base}/api/v1/targets",
    )
    stopped_by = asyncio.create_task(stop.wait())
    await asyncio.wait({stopped_by, serving}, return_when=asyncio.FIRST_COMPLETED)
    code = 0 if stop.is_set() else 1
    if not stop.is_set():
        logger.error("the HTTP server stopped unexpectedly")
    stopped_by.cancel()

    try:
        cancelled = await scheduler.stop(cfg.scheduler.shutdown_grace)
        await url_checks.stop(cfg.scheduler.shutdown_grace)
        await pruner.stop()
        await delivery.stop()
        submitting.set()
        await submitter_task
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await serving
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(signum)
        await fetcher.aclose()
    finally:  # whatever fails on the way out: the console script exits without atexit
        await asyncio.to_thread(digests.shutdown)
    logger.info("stopped", checks_cancelled=cancelled)
    return code


async def _reload(
    state: _State, scheduler: Scheduler, metrics: Metrics, delivery: _Delivery
) -> None:
    """SIGHUP: re-read the configuration; a bad one is refused and the old one stays."""
    if state.config_path is None:
        logger.warning("reload ignored: the daemon runs without a configuration file")
        return
    with _collector_paused():
        await _apply(state, state.config_path, scheduler, metrics, delivery)


async def _apply(
    state: _State, path: str, scheduler: Scheduler, metrics: Metrics, delivery: _Delivery
) -> None:
    try:
        # Parsing and validating 10,000 targets takes seconds: not on the event loop.
        new, targets, found = await asyncio.to_thread(_load_resolved, path)
    except ConfigError as exc:
        metrics.config_reloaded(False)
        logger.error("configuration reload refused; keeping the running one", error=str(exc))
        return
    _warn(targets)
    old = state.cfg
    fixed = _needs_restart(old, new)
    if fixed:
        logger.warning("changed settings apply only after a restart", settings=fixed)
    log.register_secrets(found)
    try:
        await scheduler.update(targets)
    except MonitorError as exc:
        metrics.config_reloaded(False)
        logger.error("configuration reload failed", error=str(exc))
        return
    if new.alerts != old.alerts:
        await delivery.stop()
        delivery.start(new.alerts)
    state.cfg = new
    if state.url_checks is not None:
        state.url_checks.alerts = new.alerts
        state.url_checks.update(targets)
    for channel in new.alerts.channels:
        metrics.add_channel(channel.name)
    metrics.set_indexnow_targets(t.name for t in targets if t.settings.indexnow.enabled)
    metrics.config_reloaded(True, datetime.now().astimezone())
    logger.info("configuration reloaded", targets=len(new.targets))


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic garbage collection during a reload, and what it built frozen after it.

    A reload to 10,000 targets makes millions of long-lived objects (the parsed file, metric
    label sets, jobs); each full collection on the way walks all of them again with the GIL
    held, from the loader's thread too, pausing the loop for longer and longer (0.2 -> 0.9 s).
    Frozen, they are left out of later full collections as well.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


def _load_resolved(
    path: str,
) -> tuple[config.Config, list[config.Target], list[str | None]]:
    """A configuration file, its targets resolved, and the secrets in it."""
    cfg = config.load(path)
    return cfg, cfg.resolved_targets(), _secrets_of(cfg, cfg.database_url)


def _needs_restart(old: config.Config, new: config.Config) -> list[str]:
    keys: dict[str, Any] = {
        "database_url": (old.database_url, new.database_url),
        "listen": (old.listen, new.listen),
        "scheduler": (old.scheduler, new.scheduler),
        "http": (old.http, new.http),
        "web": (old.web, new.web),
        "defaults.user_agent": (old.defaults.user_agent, new.defaults.user_agent),
    }
    return [key for key, (a, b) in keys.items() if a != b]
