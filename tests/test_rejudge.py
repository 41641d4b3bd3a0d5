"""The re-judge of listed URLs after a robots.txt changes, on its own (pure): which URLs turn
disallowed, which are freed, which robots.txt count as changed."""

from __future__ import annotations

from typing import NamedTuple

from monitor.robots.matcher import RobotsRules
from monitor.urlhealth import rejudge

ROBOTS = "https://shop.example/robots.txt"


class Row(NamedTuple):
    loc: str
    listed: bool
    state: str


def test_only_what_the_new_version_changes_is_touched() -> None:
    rules = {ROBOTS: RobotsRules("User-agent: *\nDisallow: /cart\n")}
    rows = [Row("https://shop.example/cart/1", True, "ok"),  # newly disallowed
            Row("https://shop.example/cart/2", True, "disallowed"),  # already
            Row("https://shop.example/cart/3", False, "ok"),  # not listed: its reason only
            Row("https://shop.example/shop", True, "disallowed"),  # allowed again
            Row("https://shop.example/about", True, "not-found"),  # unchanged
            Row("https://cdn.example/cart/1", True, "ok")]  # another host's robots.txt
    found = rejudge.judge(rows, rules)
    assert [(due.loc, verdict.state, verdict.rule) for due, verdict in found.barred] == [
        ("https://shop.example/cart/1", "disallowed", "url-disallowed")]
    assert found.freed == ["https://shop.example/shop"]


def test_a_robots_txt_counts_as_changed_until_judged() -> None:
    rules = {ROBOTS: RobotsRules("User-agent: *\nDisallow: /cart\n")}
    assert rejudge.changed(rules, {}) == rules
    judged = {ROBOTS: rejudge.version_of(rules[ROBOTS].text)}
    assert rejudge.changed(rules, judged) == {}
    assert rejudge.changed({ROBOTS: RobotsRules(None)}, judged) != {}
