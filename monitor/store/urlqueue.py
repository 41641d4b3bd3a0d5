"""Listed URLs put first in the URL checks' queue: those a new robots.txt allows again, which
were ``disallowed`` and have not been requested since."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, Engine, bindparam, case, update

from monitor.store.retry import transaction
from monitor.store.schema import url_states

__all__ = ["first"]


def first(engine: Engine, target_id: int, locs: Sequence[str]) -> None:
    """Check ``locs`` before any other due URL: their next check is due now, as a URL never
    checked is (the state they have stays until that check), and their place in the check
    order is ahead of the random order's (a ``turn`` below 0: counted apart from the sample,
    which stays a uniform one of the other URLs)."""
    if not locs:
        return
    u = url_states.c
    statement = (update(url_states)
                 .where(u.target_id == bindparam("b_t"), u.loc == bindparam("b_l"))
                 .values(due_at=None, turn=case((u.turn >= 0, -u.turn - 1), else_=u.turn)))

    def write(conn: Connection) -> None:
        conn.execute(statement, [{"b_t": target_id, "b_l": loc} for loc in locs])

    transaction(engine, write)
