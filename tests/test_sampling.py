"""The estimate of a state's share from the URLs checked first (monitor.core.sampling): the order
is a uniform sample whatever the listing's order, and its 95% interval holds the truth 95% of
the time."""

from __future__ import annotations

import pytest

from monitor.core import sampling
from monitor.core.sampling import Strata

# A listing of 2,000 URLs whose 80 broken ones are its last ones (listing order would miss them).
LOCS = [f"https://shop.example/c{i // 500}/p{i:05d}" for i in range(2000)]
BROKEN = set(LOCS[-80:])


def sample_of(key: str, n: int) -> Strata:
    """The first ``n`` URLs of the check order under ``key``, as the store counts them."""
    first = sorted(LOCS, key=lambda loc: sampling.turn(key, loc))[:n]
    broken = sum(loc in BROKEN for loc in first)
    return Strata(len(LOCS), {"not-found": broken, "ok": n - broken}, len(LOCS), {},
                  len(LOCS) - n)


def test_the_interval_holds_the_true_share_for_95_percent_of_keys() -> None:
    """Over 400 keys, a sample of 300 of the 2,000: the interval holds 4% about 95% of the
    time (never much less: the interval is not too narrow), and the estimate is unbiased."""
    truth = len(BROKEN) / len(LOCS)
    keys = [f"{i:032x}" for i in range(400)]
    found = [sampling.combined(sample_of(key, 300), ["not-found"]) for key in keys]
    held = sum(e.low <= truth <= e.high for e in found) / len(found)
    assert 0.92 <= held <= 0.995, held
    mean = sum(e.share for e in found) / len(found)
    assert abs(mean - truth) < 0.003, mean


def test_the_order_is_stable_per_key_and_differs_between_keys() -> None:
    a, b = "00" * 16, "11" * 16
    assert [sampling.turn(a, loc) for loc in LOCS[:5]] == [sampling.turn(a, loc)
                                                         for loc in LOCS[:5]]
    assert sorted(LOCS[:50], key=lambda x: sampling.turn(a, x)) != sorted(
        LOCS[:50], key=lambda x: sampling.turn(b, x))
    assert all(0 <= sampling.turn(a, loc) < 2 ** 62 for loc in LOCS)
    assert all(sampling.turn(a, loc, first=True) < 0 for loc in LOCS)
    assert len(sampling.new_key()) == 32
    assert sampling.new_key() != sampling.new_key()


@pytest.mark.parametrize(("p", "n", "low", "high"), [
    (0.0, 10, 0.0, 0.2775),  # Wilson's: never below 0, a real upper bound with nothing seen
    (0.5, 10, 0.2366, 0.7634),
    (0.02, 1000, 0.0130, 0.0307),
])
def test_wilson_interval(p: float, n: int, low: float, high: float) -> None:
    got = sampling.wilson(p, n)
    assert got == pytest.approx((low, high), abs=1e-4)


def test_the_margin_shrinks_to_zero_as_the_sample_becomes_the_listing() -> None:
    margins = [sampling.combined(Strata(1000, {"x": n // 10, "y": n - n // 10}), ["x"]).margin
               for n in (100, 500, 900, 990)]
    assert margins == sorted(margins, reverse=True)
    assert margins[-1] < 0.01
    whole = sampling.combined(Strata(1000, {"x": 100, "y": 900}), ["x"])
    assert (whole.share, whole.margin, whole.exact) == (0.1, 0.0, True)


def test_known_urls_are_counted_and_the_sample_stands_for_the_rest() -> None:
    """100 URLs checked ahead (all broken), 90 of the other 900 sampled (none broken)."""
    got = sampling.combined(Strata(1000, {"ok": 90}, 900, {"not-found": 100}, 810),
                            ["not-found"])
    assert got.share == pytest.approx(0.1)
    assert got.low == pytest.approx(0.1)
    assert 0.1 < got.high < 0.15
    nothing = sampling.combined(Strata(1000, {}, 1000, {}, 1000), ["not-found"])
    assert (nothing.low, nothing.high) == (0.0, 1.0)
    assert sampling.combined(Strata(0), ["ok"]).exact
