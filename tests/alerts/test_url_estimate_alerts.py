"""``when: url_health`` with ``ratio:`` on a large site not checked through yet: judged on the
lower end of the estimate's 95% interval, so a sample pages on a share it is sure of, never on
one that may be noise (pure cases of the rules)."""

from __future__ import annotations

from typing import Any

from alerttools import T0

from monitor.alerts.firing import UrlRound, evaluate_urls
from monitor.config import Alerts, Channel, Delivery, Rule
from monitor.core.sampling import Strata

HOOK = Channel(name="hook", type="webhook", url="http://127.0.0.1:9/hook")
LISTED = 2_500_000
# 3,412 URLs of the random order checked, 72 of them 404: about 2.1%, 95% within 1.7%..2.6%
SAMPLE = Strata(LISTED, {"not-found": 72, "ok": 3340}, LISTED, {}, LISTED - 3412)


def alerts(**rule: Any) -> Alerts:
    return Alerts(channels=[HOOK], delivery=Delivery(examples=2),
                  rules=[Rule.model_validate({"name": "r", "channels": ["hook"],
                                              "state": ["not-found"], **rule})])


def sampled(strata: Strata, *, complete: bool) -> UrlRound:
    states = {"ok": strata.sampled.get("ok", 0), "not-found": strata.sampled["not-found"],
              "unknown": strata.listed - strata.checked}
    return UrlRound("https://shop.example/s.xml", 7, strata.listed, states, {}, {}, T0,
                    complete=complete, unchecked=strata.listed - strata.checked,
                    current={"not-found": ["https://shop.example/a"]}, strata=strata)


def test_a_ratio_fires_on_a_sample_only_when_its_lower_bound_reaches_it() -> None:
    [note] = evaluate_urls(alerts(when="url_health", ratio=0.015), "shop",
                           sampled(SAMPLE, complete=False), {}, T0)
    assert note.state == "firing"
    assert note.payload["summary"].startswith(
        "shop: 72 listed URLs not-found (about 2.1% +/- 0.5% of 2500000, from 3412 checked)")
    estimate = note.payload["counts"]["estimate"]
    assert 0.015 < estimate["low"] < 0.021 < estimate["high"]
    # 2.1% is the likeliest share, but 2% is inside the interval: no page on that
    assert evaluate_urls(alerts(when="url_health", ratio=0.02), "shop",
                         sampled(SAMPLE, complete=False), {}, T0) == []
    # a rule without a ratio still waits for every URL to be checked once
    assert evaluate_urls(alerts(when="url_health"), "shop", sampled(SAMPLE, complete=False),
                         {}, T0) == []


def test_a_firing_ratio_resolves_when_the_sample_no_longer_supports_it() -> None:
    fewer = Strata(LISTED, {"not-found": 40, "ok": 3372}, LISTED, {}, LISTED - 3412)
    [note] = evaluate_urls(alerts(when="url_health", ratio=0.015), "shop",
                           sampled(fewer, complete=False), {"r": T0}, T0)
    assert note.state == "resolved"


def test_once_every_url_was_checked_the_ratio_is_the_counts() -> None:
    whole = Strata(1000, {"not-found": 20, "ok": 980}, 1000, {}, 0)
    [note] = evaluate_urls(alerts(when="url_health", ratio=0.02), "shop",
                           sampled(whole, complete=True), {}, T0)
    assert note.payload["summary"].startswith("shop: 20 listed URLs not-found (2.0% of 1000)")
    assert "estimate" not in note.payload["counts"]
