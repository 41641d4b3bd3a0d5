"""The URL checks: fetch listed pages politely, hop by hop, judge them, store them.

``Checker`` composes the fetch stage (``Fetcher.probe``: one GET, one hop, in one of the host's
shared slots, under the address policy) and the health stage (``urlhealth.verdict``: the state of
the answers, robots.txt's rules). ``Budget`` spaces requests to each host ``rate`` a second
(token bucket of one), slows a host that answers 429 and waits out its ``Retry-After``.
``check_all`` runs many URLs through a bounded set of workers and hands each verdict on as it
comes, so memory holds the workers' pages, never the URL list's results. ``run_round`` is one
round for one target: bring its URL states up to its latest snapshot (``urlstates.sync``),
check the URLs that are due (or, for ``check --urls``, every one), and save the verdicts in
small transactions, with a removed URL's reason. A round's re-check of a URL is conditional:
it sends the validators of the URL's last answer back, and a 304 keeps the URL's state (as a
search engine's re-crawl does), at the cost of a status line.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import Connection, Engine

from monitor.alerts import firing
from monitor.config import Alerts, Target
from monitor.core import sampling
from monitor.core.errors import FetchError
from monitor.core.model import BROKEN_STATES
from monitor.indexnow import submissions
from monitor.net.addresses import is_private_target
from monitor.read.fetch import Answer, Fetcher, retry_after_seconds
from monitor.robots import judge as robots_judge
from monitor.robots import reader as robotsread
from monitor.robots.matcher import GOOGLEBOT, RobotsRules, agent_token, robots_url
from monitor.store import notfoundpages as not_found_store
from monitor.store import outbox, urlqueue, urlsample, urlstates
from monitor.store import robotsversions as robots_versions
from monitor.store.retry import transaction
from monitor.urlhealth import page as pages
from monitor.urlhealth import rejudge
from monitor.urlhealth import verdict as health

__all__ = ["Budget", "Checker", "Round", "check_all", "run_round"]

DISALLOWS_MONITOR = "robots.txt disallows this monitor"
PROBE_EVERY = timedelta(days=1)  # how often a host's own not-found page is asked for
NOT_MODIFIED = "not_modified"  # the outcome of a re-check answered 304
Validators = tuple[str | None, str | None]  # an answer's ETag and Last-Modified
_NONE: Validators = (None, None)
SLOWEST = 16  # a host answering 429 is slowed down to 1/16 of the rate at most
WORKERS = 32


class Budget:
    """Requests per second per host, for every target whose URLs are checked on it: each
    request to a host waits its turn, ``1/rate`` (the asking target's rate) after the previous
    one; a 429 doubles the wait, up to ``SLOWEST`` times, and ``Retry-After`` holds the host
    until then. The daemon keeps one for all its targets."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._next: dict[str, float] = {}
        self._slow: dict[str, float] = {}
        self._held: dict[str, float] = {}

    async def take(self, host: str, rate: float) -> None:
        """Wait for ``host``'s next turn (a turn that falls in a hold is taken again after)."""
        while True:
            now = self._clock()
            turn = max(now, self._next.get(host, now))
            self._next[host] = turn + self._slow.get(host, 1.0) / rate
            if turn > now:
                await asyncio.sleep(turn - now)
            if self._clock() >= self._held.get(host, 0.0):
                return

    def slow_down(self, host: str, retry_after: float | None) -> None:
        """A 429 from ``host``, which asked to wait ``retry_after`` seconds."""
        self._slow[host] = min(SLOWEST, self._slow.get(host, 1.0) * 2)
        if retry_after:
            until = self._clock() + retry_after
            self._held[host] = until
            self._next[host] = max(self._next.get(host, 0.0), until)

    def forget(self, before: float) -> None:
        """Drop the hosts whose last turn is older than ``before`` (the map stays small)."""
        for host in [h for h, at in self._next.items() if at < before]:
            self._next.pop(host, None)
            self._slow.pop(host, None)
            self._held.pop(host, None)


@dataclass(frozen=True, slots=True)
class Checked:
    """A URL and its verdict; ``retry_after``: the server asked to wait that long;
    ``not_modified``: a 304 to the validators sent, the URL's state stands (``verdict`` says
    nothing then); ``validators``: those of the answer the verdict came from, when it was
    the listed URL's own (no redirect)."""

    loc: str
    verdict: health.Verdict
    retry_after: float | None = None
    not_modified: bool = False
    validators: Validators = _NONE


class Checker:
    """Checks one target's URLs: robots.txt first (the version in force, shared with the
    robots.txt watch), then the page, its redirects followed hop by hop."""

    def __init__(self, target: Target, fetcher: Fetcher, budget: Budget,
                 robots: robotsread.RobotsCache | None = None,
                 now: Callable[[], datetime] = lambda: datetime.now(UTC),
                 engine: Engine | None = None) -> None:
        self._target = target
        self._fetcher = fetcher
        self._budget = budget
        self._robots = robotsread.RobotsCache() if robots is None else robots
        self._now = now
        # robots.txt is asked as the product token of the user agent, as its groups name it
        self._agent = agent_token(target.settings.user_agent)
        self.allow_private = target.settings.allow_private  # or the target's URL is private
        # canonical target -> its own check, once per checker (a round) however many name it
        self._canonicals: dict[str, asyncio.Future[Checked]] = {}
        # origin -> its own not-found page (fingerprint, final URL), asked once a day
        self._engine = engine
        self._not_found: dict[str, asyncio.Future[tuple[bytes, str | None]]] = {}

    async def check(self, url: str, *, server_errors: int = 0,
                    validators: Validators = _NONE) -> Checked:
        """One URL's verdict; ``server_errors``: its 5xx answers in a row before this one;
        ``validators``: those of its last answer, sent with the first hop's GET (a 304 keeps
        the URL's state). A canonicalized page's canonical is checked too (once per round per
        distinct URL)."""
        checked, last = await self._follow(url, server_errors=server_errors,
                                           validators=validators)
        if checked.not_modified:
            return checked
        verdict = checked.verdict
        if verdict.state in ("ok", "redirect") and last is not None and last.page is not None:
            host_page, host_url = await self._host_not_found(last.url)
            return replace(checked, verdict=health.host_not_found(verdict, last, host_page,
                                                                  host_url))
        if verdict.state != "canonicalized" or verdict.final_url is None:
            return checked
        target = self._canonicals.get(verdict.final_url)
        if target is None:
            target = asyncio.ensure_future(self._canonical(verdict.final_url))
            self._canonicals[verdict.final_url] = target
        judged = await asyncio.shield(target)
        return replace(checked, verdict=health.canonical_broken(verdict, judged.verdict))

    async def _canonical(self, url: str) -> Checked:
        return (await self._follow(url, main=False))[0]

    async def _host_not_found(self, url: str) -> tuple[bytes, str | None]:
        """The fingerprint of ``url``'s host's own not-found page and where it ended (empty
        when the host answers a missing path with no 2xx page), asked at most once a day."""
        origin = _origin(url)
        task = self._not_found.get(origin)
        if task is None:
            task = asyncio.ensure_future(self._probe(origin))
            self._not_found[origin] = task
        return await asyncio.shield(task)

    async def _probe(self, origin: str) -> tuple[bytes, str | None]:
        if self._engine is not None:
            last = await asyncio.to_thread(not_found_store.load, self._engine, origin)
            if last is not None and self._now() - last.probed_at < PROBE_EVERY:
                return last.fingerprint, last.final_url
        probe_url = f"{origin}/sitemap-monitor-{secrets.token_hex(12)}"
        checked, answer = await self._follow(probe_url, main=True)
        status = checked.verdict.status
        found = b""
        if (answer is not None and answer.main is not None and status is not None
                and 200 <= status < 300):
            found = pages.fingerprint(answer.main)
        final = None if answer is None else answer.url
        if self._engine is not None and not checked.verdict.transient:
            await asyncio.to_thread(not_found_store.save, self._engine, not_found_store.Probe(
                origin, self._now(), probe_url, final, status, found))
        return found, final

    async def _follow(self, url: str, *, server_errors: int = 0,
                      validators: Validators = _NONE, main: bool | None = None,
                      ) -> tuple[Checked, health.Answered | None]:
        """One URL's verdict, its redirects (3xx and meta refresh) followed hop by hop, and
        the last answer (None when none came), with its page's main text read from the one
        tree it was parsed into: always (``main`` True, the host's not-found page), never
        (False), or when it may be matched with its host's not-found page (None)."""
        answers: list[health.Answered] = []
        seen = {url}
        current = url
        while True:
            # Each hop is asked of its host's robots.txt first, as Googlebot asks it.
            barred = await self._barred(current, len(answers))
            if barred is not None:
                return Checked(url, barred), None
            sent = validators if not answers else _NONE
            try:
                answer = await self._get(current, self._target.settings.url_checks.body_limit,
                                         sent)
            except FetchError as exc:
                return Checked(url, health.failed(current, exc.kind, str(exc),
                                                  hops=len(answers))), None
            if answer.status == 304 and sent != _NONE:
                return Checked(url, health.Verdict("unknown", status=304,
                                                   detail="not modified"),
                               not_modified=True), None
            answered, tree = _answered(answer)
            answers.append(answered)
            retry_after = self._pushed_back(answer)
            refresh = None if answer.location else health.refresh_of(answered)
            nxt = answer.location if refresh is None else refresh.url
            if nxt is None:
                errors = server_errors + 1 if answer.status >= 500 else 0
                verdict = health.judge(answers, listed_url=url, server_errors=errors,
                                       now=self._now())
                wanted = self._may_match(verdict, answer.url) if main is None else main
                if tree is not None and wanted:
                    answered = replace(answered, main=pages.main_text(tree))
                kept = _NONE
                if len(answers) == 1 and not verdict.transient:
                    kept = (answer.header("etag"), answer.header("last-modified"))
                return Checked(url, verdict, retry_after, validators=kept), answered
            if nxt in seen or len(answers) > health.MAX_HOPS:
                return Checked(url, health.judge(answers, listed_url=url, loop=True)), None
            seen.add(nxt)
            current = nxt
            del tree  # many times the page's size: not held while the next hop is asked for

    def _may_match(self, verdict: health.Verdict, url: str) -> bool:
        """Whether ``check`` may match the page at ``url`` with its host's not-found page: an
        ok page (or a redirect to one) on a host whose not-found page is not known to be
        none (the match needs the page's main text, read before its tree is dropped)."""
        if verdict.state not in ("ok", "redirect"):
            return False
        task = self._not_found.get(_origin(url))
        if task is None or not task.done() or task.cancelled() or task.exception() is not None:
            return True
        return bool(task.result()[0])

    async def _barred(self, url: str, hops: int) -> health.Verdict | None:
        """The verdict when robots.txt keeps ``url`` (reached after ``hops`` redirects) from
        being requested, or None: disallowed to Googlebot, or to this monitor alone."""
        held, why = await self._rules(url)
        if held is None:
            return health.failed(url, "robots", why, hops=hops)
        via = f"redirects ({hops} hop{'' if hops == 1 else 's'}) to {url}: " if hops else ""
        final = url if hops else None
        if not held.rules.allows(url, GOOGLEBOT):
            return health.Verdict("disallowed", final_url=final, hops=hops,
                                  detail=f"{via}robots.txt disallows it to Googlebot")
        if not held.rules.allows(url, self._agent):
            # Not a search fact: Google may crawl it, only this monitor may not ask for it.
            return health.Verdict("unknown", final_url=final, hops=hops,
                                  detail=via + DISALLOWS_MONITOR)
        return None

    async def _get(self, url: str, body_limit: int, validators: Validators) -> Answer:
        host = urlsplit(url).netloc
        await self._budget.take(host, self._target.settings.url_checks.rate)
        return await self._fetcher.probe(url, self._target.settings, body_limit=body_limit,
                                         allow_private=self.allow_private,
                                         validators=validators)

    def _pushed_back(self, answer: Answer) -> float | None:
        """A 429 slows the whole host down and holds it for its ``Retry-After`` (at most
        ``retry_after_max``); a 503's ``Retry-After`` defers that URL only (the caller's)."""
        if answer.status not in (429, 503):
            return None
        retry_after = retry_after_seconds(answer.header("retry-after"))
        if answer.status == 429:
            hold = None if retry_after is None else min(
                retry_after, self._target.settings.retry_after_max)
            self._budget.slow_down(urlsplit(answer.url).netloc, hold)
        return retry_after

    async def _rules(self, url: str) -> tuple[robotsread.Held | None, str]:
        """The robots.txt version in force for ``url``'s host (read when none was read within
        a day, one read at a time), or None and why."""
        robots = robots_url(url)
        cache = self._robots
        held = cache.fresh(robots, self._now())
        if held is not None:
            return held, ""
        task = cache.pending.get(robots)
        if task is None or task.done():
            task = asyncio.ensure_future(self._read_robots(robots))
            cache.pending[robots] = task
            task.add_done_callback(partial(_done_reading, cache.pending, robots))
        return await asyncio.shield(task)

    async def _read_robots(self, robots: str) -> tuple[robotsread.Held | None, str]:
        await self._budget.take(urlsplit(robots).netloc, self._target.settings.url_checks.rate)
        answer, _wire = await robotsread.read(self._fetcher, robots, self._target.settings,
                                              allow_private=self.allow_private)
        if robots_judge.unreachable(answer):
            # Google keeps the last good version while a robots.txt cannot be read.
            why = answer.error or f"HTTP {answer.status}"
            return self._robots.last(robots), f"{robots} cannot be read ({why})"
        ok = answer.status is not None and 200 <= answer.status < 300
        self._robots.offer(robots, answer.text if ok else None, self._now())
        return self._robots.last(robots), ""


def _done_reading(pending: dict[str, Any], robots: str, task: asyncio.Task[Any]) -> None:
    if pending.get(robots) is task:
        del pending[robots]


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _answered(answer: Answer) -> tuple[health.Answered, pages.Tree | None]:
    """The answer with its page read, and the tree it was read from (the caller reads the
    main text from it, or drops it)."""
    answered = health.Answered(answer.url, answer.status, answer.headers, answer.head,
                               answer.truncated)
    # parsed once here: for a meta refresh to follow, for the verdict and for the main text
    tree = health.parse_page(answered)
    if tree is None:
        return answered, None
    return replace(answered, page=pages.read(tree, answered.url)), tree


async def check_all(checker: Checker, urls: Iterable[tuple[str, int]],
                    done: Callable[[Checked], Awaitable[None]], *,
                    workers: int = WORKERS,
                    validators: Mapping[str, Validators] | None = None) -> int:
    """Check each ``(url, 5xx answers in a row before)`` and await ``done`` with its verdict,
    ``workers`` at a time (a URL in ``validators`` conditionally); return how many were
    checked."""
    kept = validators or {}
    queue: asyncio.Queue[tuple[str, int] | None] = asyncio.Queue(maxsize=workers * 2)
    count = 0

    async def work() -> None:
        nonlocal count
        while (item := await queue.get()) is not None:
            result = await checker.check(item[0], server_errors=item[1],
                                         validators=kept.get(item[0], _NONE))
            count += 1
            await done(result)

    async def feed() -> None:
        for item in urls:
            await queue.put(item)
        for _ in range(workers):
            await queue.put(None)

    tasks = [asyncio.create_task(work()) for _ in range(workers)]
    tasks.append(asyncio.create_task(feed()))
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
    return count


SAVE_BATCH = 200
EXAMPLES = 20
EXAMPLES_KEPT = 1000  # the alerts' examples (delivery.examples is at most 1000)


@dataclass(slots=True)
class Round:
    """What one round of URL checks of one target did and found."""

    checked: int = 0
    transitions: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)  # verdict state -> checks
    states: dict[str, int] = field(default_factory=dict)  # listed URLs per state, after
    rules: dict[str, int] = field(default_factory=dict)  # listed URLs per rule id, after
    listed: int = 0
    covered: int = 0  # listed URLs checked within ``recheck``
    # what the estimate of the listed URLs' health is made of, after the round
    strata: sampling.Strata | None = None
    broken: list[dict[str, Any]] = field(default_factory=list)  # the first problems found
    # the first info findings (``Verdict.note``): never problems, said all the same
    notes: list[dict[str, Any]] = field(default_factory=list)
    reasons: dict[str, int] = field(default_factory=dict)  # removals given each reason
    # listed URLs that turned to each broken state in this round (and "removed:<reason>"),
    # the first few: the alerts' examples; ``new`` counts them all
    examples: dict[str, list[str]] = field(default_factory=dict)
    new: dict[str, int] = field(default_factory=dict)
    # ``check --urls``: the check's own removals, loc -> (reason, what the URL answered)
    removals: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    # the first and the last snapshot whose removals got their reason in this round
    removed_snapshots: tuple[int, int] | None = None
    seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {"checked": self.checked, "transitions": self.transitions,
                "seconds": round(self.seconds, 3), "listed": self.listed,
                "covered": self.covered}


class _Saver:
    """Collects verdicts and writes them ``SAVE_BATCH`` at a time."""

    def __init__(self, engine: Engine, target_id: int, snapshot_id: int, recheck: float,
                 now: Callable[[], datetime], result: Round, *, final: bool,
                 target: Target | None = None) -> None:
        self._engine = engine
        self._target = target
        self._ids = (target_id, snapshot_id)
        self._recheck = recheck
        self._now = now
        self._round = result
        self._pending: list[tuple[urlstates.Due, Checked]] = []
        self._final = final  # no later round: a removed URL gets its reason now

    async def add(self, due: urlstates.Due, checked: Checked) -> None:
        verdict = checked.verdict
        r = self._round
        r.checked += 1
        outcome = NOT_MODIFIED if checked.not_modified else verdict.state
        r.outcomes[outcome] = r.outcomes.get(outcome, 0) + 1
        if checked.not_modified:  # the state stands: nothing newly found
            self._pending.append((due, checked))
            if len(self._pending) >= SAVE_BATCH:
                await self.flush()
            return
        if due.listed and verdict.broken and len(r.broken) < EXAMPLES:
            r.broken.append(_example(due.loc, verdict))
        elif due.listed and verdict.note is not None and len(r.notes) < EXAMPLES:
            r.notes.append(_example(due.loc, verdict))
        # newly broken: a page that was fine (or a warning), not a 404 that turned 410
        if (due.listed and verdict.broken and verdict.state != due.state
                and due.state not in BROKEN_STATES):
            _keep(r.examples, verdict.state, due.loc)
            r.new[verdict.state] = r.new.get(verdict.state, 0) + 1
        self._pending.append((due, checked))
        if len(self._pending) >= SAVE_BATCH:
            await self.flush()

    async def flush(self) -> None:
        pending, self._pending = self._pending, []
        if not pending:
            return
        target_id, snapshot_id = self._ids
        finals = [c.verdict.final_url for d, c in pending
                  if not d.listed and c.verdict.final_url is not None]
        now_listed = (await asyncio.to_thread(urlstates.listed, self._engine, target_id, finals)
                      if finals else set())
        saved = [_saved(d, c, now_listed, self._final) for d, c in pending]
        for item in saved:
            if item.reason is not None and item.due.removed_snapshot_id is not None:
                reasons = self._round.reasons
                reasons[item.reason] = reasons.get(item.reason, 0) + 1
                _keep(self._round.examples, f"removed:{item.reason}", item.due.loc)
                at, span = item.due.removed_snapshot_id, self._round.removed_snapshots
                self._round.removed_snapshots = ((at, at) if span is None
                                                 else (min(span[0], at), max(span[1], at)))
        now = self._now()
        gone = [(item.due.removed_snapshot_id, item.due.loc) for item in saved
                if item.reason == "gone" and item.due.removed_snapshot_id is not None]
        also = None
        if gone and self._target is not None and self._target.settings.indexnow.enabled:
            target = self._target

            def also(conn: Connection) -> int:  # a removal is submitted once it is gone
                return submissions.enqueue_gone(conn, target, gone, now)

        written = await asyncio.to_thread(urlstates.save, self._engine, target_id, snapshot_id,
                                          saved, now, self._recheck, also)
        self._round.transitions += written  # not `+= await`: it would read the count first


def _keep(examples: dict[str, list[str]], key: str, loc: str) -> None:
    kept = examples.setdefault(key, [])
    if len(kept) < EXAMPLES_KEPT:
        kept.append(loc)


def _example(loc: str, verdict: health.Verdict) -> dict[str, Any]:
    return {"loc": loc, "state": verdict.state, "rule": verdict.rule,
            "severity": verdict.severity, "http_status": verdict.status,
            "final_url": verdict.final_url,
            "detail": verdict.detail}


def _saved(due: urlstates.Due, checked: Checked, now_listed: set[str], final: bool,
           ) -> urlstates.Saved:
    v = checked.verdict
    reason = None
    if not due.listed and (final or not v.transient or due.attempts + 1 >= urlstates.UNKNOWN_AFTER):
        reason = health.removal_reason(v, now_listed.__contains__)
    return urlstates.Saved(due, v.state, v.rule, v.status, v.final_url, v.hops, v.detail,
                           v.transient, checked.retry_after, reason,
                           checked.not_modified and due.listed, *checked.validators)


def _next_batch(batches: Iterator[list[urlstates.Due]]) -> list[urlstates.Due]:
    return next(batches, [])


def _server_error(checked: Checked) -> bool:
    """A 5xx that counts towards server-error (not 503 with Retry-After)."""
    v = checked.verdict
    return (v.transient and v.status is not None and v.status >= 500
            and checked.retry_after is None)


async def run_round(
    target: Target, *, engine: Engine, fetcher: Fetcher, budget: Budget,
    now: Callable[[], datetime], limit: int | None = None, alerts: Alerts | None = None,
    robots: robotsread.RobotsCache | None = None,
    progress: Callable[[int], None] | None = None,
    judged: dict[str, str] | None = None,
) -> Round | None:
    """One round of URL checks of ``target``: the ``limit`` URLs that are due, or with
    ``limit`` None every URL it lists now, each 5xx tried again up to three times in a row
    (``check --urls``, which may follow with ``progress``, called with the URLs done so far).
    None when the target has no snapshot yet. ``judged`` (robots.txt URL -> the version the
    URL states were judged against; kept by the caller from round to round) has a changed
    robots.txt re-judge its host's listed URLs first (``rejudge``)."""
    started = time.monotonic()
    synced = await asyncio.to_thread(urlstates.sync, engine, target.name)
    if synced is None:
        return None
    target_id, snapshot_id = synced
    result = Round()
    cache = robotsread.RobotsCache() if robots is None else robots
    # The versions the target's checks read are in force here too, the newer one winning.
    watched = await asyncio.to_thread(robots_versions.in_force, engine, target_id)
    for url, (text, read_at) in watched.items():
        cache.offer(url, text, read_at)
    checker = Checker(target, fetcher, budget, cache, now, engine)
    checker.allow_private = checker.allow_private or await is_private_target(target.url)
    recheck = target.settings.url_checks.recheck
    saver = _Saver(engine, target_id, snapshot_id, recheck, now, result, final=limit is None,
                   target=target)
    if limit is not None:
        if judged is not None:
            in_force = {url: held.rules for url in watched
                        if (held := cache.last(url)) is not None}
            await _rejudge(engine, target_id, in_force, judged, saver)
        batch = await asyncio.to_thread(urlstates.due, engine, target_id, now(), limit)
        by_loc = {d.loc: d for d in batch}

        async def done(checked: Checked) -> None:
            await saver.add(by_loc[checked.loc], checked)

        # A re-check of a listed URL whose state came from an answer is conditional.
        conditional = {d.loc: (d.etag, d.last_modified) for d in batch
                       if d.listed and d.checked and (d.etag or d.last_modified)}
        await check_all(checker, [(d.loc, d.attempts) for d in batch], done,
                        validators=conditional)
    else:
        pending: dict[str, tuple[urlstates.Due, int]] = {}  # loc -> (row, 5xx answers in a row)
        retry: dict[str, tuple[urlstates.Due, int]] = {}
        finished = [0]

        async def done_all(checked: Checked) -> None:
            due, errors = pending.pop(checked.loc)
            if _server_error(checked) and errors + 1 < health.SERVER_ERROR_ATTEMPTS:
                retry[checked.loc] = (due, errors + 1)
            else:
                await saver.add(due, checked)
                finished[0] += 1
                if progress is not None:
                    progress(finished[0])

        batches = urlstates.every(engine, target_id)
        while batch := await asyncio.to_thread(_next_batch, batches):
            pending.update((d.loc, (d, 0)) for d in batch)
            await check_all(checker, [(d.loc, 0) for d in batch], done_all)
        while retry:
            pending, retry = retry, {}
            await check_all(checker, [(loc, n) for loc, (_, n) in pending.items()], done_all)
    await saver.flush()
    # read once: the metrics, the alert rules and the first round's test all take it
    counted = await asyncio.to_thread(urlsample.counts, engine, target_id, now(), recheck)
    result.states, result.rules, result.listed, result.covered, result.strata = (
        counted.states, counted.rules, counted.listed, counted.covered, counted.strata)
    result.seconds = time.monotonic() - started
    if alerts is not None and any(firing.for_url_checks(r) and firing.matches(r, target.name)
                                  for r in alerts.rules):
        await asyncio.to_thread(_raise_alerts, engine, alerts, target, (target_id, snapshot_id),
                                result, counted.unchecked, now())
    return result


async def _rejudge(engine: Engine, target_id: int, in_force: dict[str, RobotsRules],
                   judged: dict[str, str], saver: _Saver) -> None:
    """Judge the listed URLs again, without a request, against each robots.txt whose version
    changed since they were last judged: the newly disallowed ones are saved as
    ``disallowed`` in this round, those allowed again go first in the queue."""
    fresh = rejudge.changed(in_force, judged)
    if not fresh:
        return
    freed: list[str] = []
    batches = urlstates.every(engine, target_id)
    while batch := await asyncio.to_thread(_next_batch, batches):
        found = rejudge.judge(batch, fresh)
        for due, verdict in found.barred:
            await saver.add(due, Checked(due.loc, verdict))
        freed += found.freed
    await saver.flush()
    await asyncio.to_thread(urlqueue.first, engine, target_id, freed)
    judged.update((url, rejudge.version_of(rules.text)) for url, rules in fresh.items())


def _raise_alerts(engine: Engine, alerts: Alerts, target: Target, ids: tuple[int, int],
                  found: Round, unchecked: int, now: datetime) -> None:
    """The URL checks' alert rules on this round (``unchecked``: its listed URLs never
    tried), written to the outbox in one transaction."""
    target_id, snapshot_id = ids
    complete = urlstates.first_round(engine, target_id, now, unchecked)
    current = urlstates.examples(engine, target_id,
                             [s for s in found.states if s in health.STATES
                              and health.STATES[s] is not None],
                             alerts.delivery.examples)
    summary = firing.UrlRound(target.url, snapshot_id, found.listed, found.states,
                             found.reasons, found.examples, now, new=found.new,
                             complete=complete, unchecked=unchecked, current=current,
                             removed_snapshots=found.removed_snapshots, strata=found.strata)

    def write(conn: Connection) -> None:
        notifications = firing.evaluate_urls(alerts, target.name, summary,
                                            outbox.firing_rules(conn, target.name), now)
        outbox.write(conn, snapshot_id, notifications, now)

    transaction(engine, write)
