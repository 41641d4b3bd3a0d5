"""A search of the changes by a part of the loc reads the changes of the locs it finds, not
every change of the target: the work of a first page does not grow with the changes of other
locs. On both databases, counted by the databases themselves (PostgreSQL: the rows its plans
read from ``changes``; SQLite: the steps of its virtual machine)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from conftest import T0, add_snapshot, add_target
from sqlalchemy import Engine, event

from monitor.listing import params as listing
from monitor.store import listingreads as store_listing

LOCS = [f"https://shop.example/item-{i:02d}" for i in range(40)]
NEEDLE = "https://shop.example/the-needle"


def a_target(engine: Engine, name: str, checks: int) -> None:
    """A target whose 40 locs come and go at each of ``checks`` checks, and the needle that
    came and went once, at the first two."""
    target = add_target(engine, name)
    for n in range(checks):
        kind = "added" if n % 2 == 0 else "removed"
        needle = ((kind, NEEDLE),) if n < 2 else ()
        add_snapshot(engine, target, at=T0 + timedelta(minutes=n),
                     change_list=tuple((kind, loc) for loc in LOCS) + needle)


@contextmanager
def statements(engine: Engine) -> Iterator[list[tuple[str, Any]]]:
    """The statements run meanwhile that read ``changes``."""
    found: list[tuple[str, Any]] = []

    def seen(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any,
             _many: bool) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "FROM changes" in statement:
            found.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", seen)
    try:
        yield found
    finally:
        event.remove(engine, "before_cursor_execute", seen)


def work(engine: Engine, run: Callable[[], object]) -> int:
    """What the database does for ``run``'s reads of ``changes``, each read to its end."""
    with statements(engine) as found:
        run()
    assert found
    raw = engine.raw_connection()
    try:
        driver = raw.driver_connection
        assert driver is not None
        total = 0
        for statement, parameters in found:
            cursor = raw.cursor()
            if engine.dialect.name == "postgresql":
                cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, parameters)
                total += _rows_of_changes(_plan(cursor.fetchone()[0])["Plan"])
            else:
                steps = [0]

                def step(steps: list[int] = steps) -> int:
                    steps[0] += 1
                    return 0

                driver.set_progress_handler(step, 1)
                cursor.execute(statement, parameters)
                cursor.fetchall()
                driver.set_progress_handler(None, 1)
                total += steps[0]
            cursor.close()
        return total
    finally:
        raw.close()


def _plan(found: Any) -> dict[str, Any]:
    plans = json.loads(found) if isinstance(found, str) else found
    plan: dict[str, Any] = plans[0]
    return plan


def _rows_of_changes(node: dict[str, Any]) -> int:
    """The rows a plan node and those below it read from ``changes``: those they gave and
    those their filters dropped, in every loop."""
    loops = int(node.get("Actual Loops", 1))
    read = 0
    if node.get("Relation Name") == "changes":
        read = loops * int(node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
                           + node.get("Rows Removed by Index Recheck", 0))
    return read + sum(_rows_of_changes(child) for child in node.get("Plans", []))


def first_page(engine: Engine, name: str, q: str) -> list[dict[str, Any]]:
    opened = store_listing.open_changes(engine, name, None, (), None, q=q)
    try:
        return listing.take(opened, 100)
    finally:
        listing.close(opened)


def test_a_search_does_not_read_the_changes_of_the_locs_it_did_not_find(
        engine: Engine) -> None:
    a_target(engine, "few", 2)
    a_target(engine, "many", 60)  # 30 times the changes, of the same locs
    for name in ("few", "many"):
        found = first_page(engine, name, "NEEDLE")
        assert [(row["kind"], row["loc"]) for row in found] == [
            ("removed", NEEDLE), ("added", NEEDLE)]
    few = work(engine, lambda: first_page(engine, "few", "needle"))
    many = work(engine, lambda: first_page(engine, "many", "needle"))
    # Reading every change of the target in order until a page is full read thirty times
    # the rows; reading the found loc's rows reads the same few.
    assert many <= 2 * few, (few, many)
    assert work(engine, lambda: first_page(engine, "many", "no-loc-holds-this")) <= 2 * few
