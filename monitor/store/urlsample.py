"""The URL checks' random order and its sample: where each URL of a target stands in the
order its URLs are checked in until each was checked once (``turn``, a keyed hash of its loc,
``monitor.core.sampling``), and what the estimate of its URL health is made of.

``place`` draws a target's key and places the URLs it has rows of (rows stored before the order
had one); ``urlstates.sync`` places the URLs it adds. ``counts`` reads, in one grouped query,
what a round reports of the listed URLs: per state and rule id, the coverage, and the strata
of the estimate (per state, the checked URLs of the random order, the sample, and those
checked ahead of it, listed since or allowed again by robots.txt, which are counted as they
are).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection, Engine, bindparam, func, select, update

from monitor.core import sampling
from monitor.store.retry import transaction
from monitor.store.schema import url_checks, url_states

__all__ = ["Counts", "counts", "place"]

_BATCH = 5000


def place(engine: Engine, target_id: int) -> str:
    """Draw the target's sample key and place every URL it has rows of (rows stored before
    the check order had one) in the order; return the key in force. The key is stored last,
    so a placing cut short is done again whole, under a new key."""
    key = sampling.new_key()
    u = url_states.c
    place = (update(url_states).where(u.target_id == bindparam("b_t"), u.loc == bindparam("b_l"))
             .values(turn=bindparam("b_turn")))
    after = ""

    def batch(conn: Connection) -> str:
        rows = conn.execute(select(u.loc, u.listed).where(u.target_id == target_id, u.loc > after)
                            .order_by(u.loc).limit(_BATCH)).all()
        if rows:
            conn.execute(place, [{"b_t": target_id, "b_l": r.loc,
                                  "b_turn": sampling.turn(key, r.loc, first=not r.listed)}
                                 for r in rows])
        return str(rows[-1].loc) if len(rows) == _BATCH else ""

    while after := transaction(engine, batch):
        pass
    k = url_checks.c

    def keep(conn: Connection) -> str:
        conn.execute(update(url_checks).where(k.target_id == target_id,
                                              k.sample_key.is_(None)).values(sample_key=key))
        kept: str = conn.execute(select(k.sample_key).where(k.target_id == target_id)
                                 ).scalar_one()
        return kept

    return transaction(engine, keep)


@dataclass(frozen=True, slots=True)
class Counts:
    """The target's listed URLs as one grouped read counts them, after a round: per state and
    per rule id, how many, how many were checked within ``recheck`` (the coverage), how many
    were never tried, and what the estimate of their health is made of (``strata``)."""

    states: dict[str, int]
    rules: dict[str, int]
    listed: int
    covered: int
    unchecked: int  # listed URLs never tried (not even without an answer)
    strata: sampling.Strata


def counts(engine: Engine, target_id: int, now: datetime, recheck: float) -> Counts:
    """What the round's metrics, alert rules and the API read of the target's listed URLs, in
    one ``GROUP BY`` over them: per state and rule id, whether the URL went ahead of the
    random order, whether it was never tried, whether it was checked within ``recheck``."""
    u = url_states.c
    ahead = u.turn < 0
    untried = u.checked_at.is_(None) & (u.attempts == 0)
    fresh = u.checked_at >= now - timedelta(seconds=recheck)
    query = (select(u.state, u.rule, ahead, untried, fresh, func.count())
             .where(u.target_id == target_id, u.listed.is_(True))
             .group_by(u.state, u.rule, ahead, untried, fresh))

    def read(conn: Connection) -> Counts:
        states: dict[str, int] = {}
        rules: dict[str, int] = {}
        sampled: dict[str, int] = {}
        known: dict[str, int] = {}
        listed = pool = unchecked = covered = 0
        for state, rule, first, never, recent, n in conn.execute(query):
            n = int(n)
            listed += n
            states[state] = states.get(state, 0) + n
            if rule is not None:
                rules[rule] = rules.get(rule, 0) + n
            covered += n if recent else 0
            pool += 0 if first else n
            if never:
                unchecked += n
                continue
            into = known if first else sampled
            into[state] = into.get(state, 0) + n
        return Counts(states, rules, listed, covered, unchecked,
                      sampling.Strata(listed, sampled, pool, known, unchecked))

    return transaction(engine, read)
