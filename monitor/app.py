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
from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any, ClassVar
from urllib.parse import urlsplit

import h11
import structlog
import uvicorn
from prometheus_client import CollectorRegistry
from sqlalchemy import Engine, make_url
from sqlalchemy.exc import ArgumentError
from uvicorn.protocols.http.h11_impl import STATUS_PHRASES, H11Protocol

from monitor import __version__, config, log
from monitor.alerts.outbox import Deliverer
from monitor.check import pipeline
from monitor.check.robotsread import RobotsCache
from monitor.errors import ConfigError, MonitorError, SchemaError
from monitor.indexnow.submitter import Submitter
from monitor.metrics import Metrics
from monitor.model import CheckResult, utcnow
from monitor.pruning import Pruner
from monitor.read import process
from monitor.read.fetch import Fetcher
from monitor.read.workers import DigestPool
from monitor.scheduler import Scheduler
from monitor.serve import api
from monitor.serve import headers as webheaders
from monitor.store import db
from monitor.store import targets as store
from monitor.store.indexnow import SqlSubmissions
from monitor.store.outbox import SqlOutbox
from monitor.store.targets import Lease
from monitor.urlhealth.rounds import UrlChecks

__all__ = ["parse_listen", "run"]

logger = structlog.get_logger("monitor.app")
# The event loop accepts up to this many connections at a time (asyncio takes the listen
# backlog for that too)...
_BACKLOG = 128
# ... and the kernel holds up to this many until it does (capped by net.core.somaxconn): a
# burst of new connections past its queue is dropped, each client trying again 1 s, then 3 s
# later, which a kubelet probe among them reads as a failure (a flood's first second made 3,000
# such drops with the queue at 128).
_KERNEL_BACKLOG = 4096


def parse_listen(listen: str) -> tuple[str, int]:
    """``host:port``, ``[v6]:port`` or ``:port`` -> (host, port)."""
    try:
        return config.split_listen(listen)
    except ValueError as exc:
        raise ConfigError(f"listen: {exc}") from None


def _bind(listen: str) -> socket.socket:
    host, port = parse_listen(listen)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio turns Nagle's algorithm off (TCP_NODELAY) only for sockets
    # made so, and uvicorn writes a response's head and body apart: without it every answer
    # on a kept-alive connection waited ~40 ms for the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"listen: cannot listen on {listen}: {exc.strerror}") from None
    sock.listen(_BACKLOG)
    sock.setblocking(False)
    return sock


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
    try:
        handle: IO[str] = open(path, "a+", encoding="utf-8")  # noqa: SIM115 (held for the run)
    except OSError as exc:  # a read-only folder, say: the database could not be written either
        raise ConfigError(
            f"database_url: cannot write {path} beside the SQLite database ({exc.strerror}): "
            "the database's folder must be writable by this user") from None
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise ConfigError(
                f"database {database} is in use by another 'sitemap-monitor run' "
                f"(pid {holder}); SQLite supports one replica, use PostgreSQL for more"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        yield
    finally:
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


class _Protocol(H11Protocol):
    """uvicorn's HTTP/1.1, bounded in time where uvicorn waits on the client for ever.

    - A connection must send a whole request head within ``head_timeout`` of its opening, or
      of the first byte of its next request; uvicorn itself never closes a connection that
      sends nothing, or a header line every few seconds, and each holds memory and a slot of
      ``max_connections``.
    - A client that reads nothing of an answer for ``write_timeout`` is dropped: its request
      holds an admission slot (and, for an export, a database connection) until then.
    - The rest of a request body, once the answer is sent, is not waited for: the port is
      read-only and a body dripped after the answer would keep the connection for ever.
    - A connection whose request the admission gate refused is not read again until its
      ``Retry-After`` has passed (``api.HOLD`` in the request's scope): a client that
      retries at once costs the event loop nothing meanwhile.
    - uvicorn's own answer to a malformed request carries the security headers too.
    - Past ``max_connections``, a new connection closes the oldest one that waits for a
      request (``idle``): sockets opened and left silent, faster than ``head_timeout`` closes
      them, take the place of each other and not of the clients that send requests.
    """

    head_timeout: float = 5.0
    write_timeout: float = 30.0
    max_connections: int = 10_000
    security_headers: tuple[tuple[bytes, bytes], ...] = ()
    # The connections of this server waiting for a request, oldest first (one dict a server:
    # ``_serve`` makes a subclass with its own).
    idle: ClassVar[OrderedDict[_Protocol, None]] = OrderedDict()
    _held: asyncio.TimerHandle | None = None
    _head_timer: asyncio.TimerHandle | None = None
    _write_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Start the clock for the first request's head."""
        super().connection_made(transport)  # type: ignore[arg-type]
        self._head_timer = self.loop.call_later(self.head_timeout, self._head_too_slow)
        self.idle[self] = None
        if len(self.connections) > self.max_connections:
            oldest = next(iter(self.idle))
            if oldest is not self:
                del self.idle[oldest]
                oldest.transport.close()

    def data_received(self, data: bytes) -> None:
        """Read as uvicorn does; the first byte of a request starts its head's clock, its
        whole head stops it."""
        waiting = self.conn.their_state is h11.IDLE
        if waiting and self._head_timer is None:
            self._head_timer = self.loop.call_later(self.head_timeout, self._head_too_slow)
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self.idle.pop(self, None)
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self.transport.close()

    def pause_writing(self) -> None:
        """The client stopped reading: drop it unless it reads again in ``write_timeout``."""
        super().pause_writing()
        if self._write_timer is None:
            self._write_timer = self.loop.call_later(self.write_timeout, self._reads_nothing)

    def _reads_nothing(self) -> None:
        self._write_timer = None
        logger.info("HTTP client dropped: it read nothing of an answer in time",
                    seconds=self.write_timeout, path=self.scope.get("path") if self.scope else None)
        self.transport.abort()

    def resume_writing(self) -> None:
        """The client reads again."""
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None
        super().resume_writing()

    def send_400_response(self, msg: str) -> None:
        """uvicorn's 400, with the headers every answer carries."""
        reason = STATUS_PHRASES[400]
        headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"connection", b"close"),
                   *self.security_headers]
        self.transport.write(self.conn.send(h11.Response(
            status_code=400, headers=headers, reason=reason)) or b"")
        self.transport.write(self.conn.send(h11.Data(data=msg.encode("ascii"))) or b"")
        self.transport.write(self.conn.send(h11.EndOfMessage()) or b"")
        self.transport.close()

    def on_response_complete(self) -> None:
        """Hold the connection after a refusal; close it when its body is still coming;
        otherwise as uvicorn does."""
        scope = self.scope
        body_pending = self.conn.their_state is h11.SEND_BODY
        super().on_response_complete()
        if body_pending and not self.transport.is_closing():
            self._unset_keepalive_if_required()
            self.transport.close()
            return
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self.idle[self] = None
        hold = scope.get(api.HOLD) if scope is not None else None
        if (not isinstance(hold, int) or self.transport.is_closing()
                or self.cycle.scope is not scope):
            return
        # The keep-alive timer would close a held connection; it starts again on release.
        if self.timeout_keep_alive_task is not None:
            self.timeout_keep_alive_task.cancel()
            self.timeout_keep_alive_task = None
        self.flow.pause_reading()
        self._held = self.loop.call_later(hold, self._release)

    def _release(self) -> None:
        self._held = None
        if self.transport.is_closing():
            return
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler)
        self.flow.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        """Forget the timers of a connection that is gone."""
        for timer in (self._held, self._head_timer, self._write_timer):
            if timer is not None:
                timer.cancel()
        self._held = self._head_timer = self._write_timer = None
        self.idle.pop(self, None)
        super().connection_lost(exc)


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling (the daemon handles SIGTERM itself), and with a
    kernel queue of new connections longer than the batch the loop accepts at a time."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        for sock in sockets or ():
            sock.listen(_KERNEL_BACKLOG)  # after asyncio's listen(_BACKLOG): only the queue grows


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
    except ConfigError as exc:
        logger.error("cannot start", error=str(exc))
        return 2
    except MonitorError as exc:
        logger.error("cannot start", error=str(exc))
        return 1


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
            sock = _bind(cfg.listen)
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
        open_connections=lambda: len(server.server_state.connections),
        on_refused=metrics.http_request_refused,
        web=cfg.web,
    )
    protocol = type("_Protocol", (_Protocol,), {
        "head_timeout": cfg.http.head_timeout, "write_timeout": cfg.http.write_timeout,
        "max_connections": cfg.http.max_connections, "idle": OrderedDict(),
        "security_headers": tuple(webheaders.headers(tls=cfg.web.tls_cert_file is not None))})
    server = _Server(uvicorn.Config(
        app, log_config=None, access_log=False, lifespan="off", timeout_graceful_shutdown=3,
        backlog=_BACKLOG, http=protocol, proxy_headers=False,
        timeout_keep_alive=cfg.http.keep_alive,  # type: ignore[arg-type]
        ssl_certfile=cfg.web.tls_cert_file, ssl_keyfile=cfg.web.tls_key_file))
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
    for count, gauges in enumerate(await asyncio.to_thread(store.last_gauges, engine, names), 1):
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
