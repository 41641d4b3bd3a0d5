"""The URL checks' estimate before every listed URL was checked (pure).

A target lists N URLs and its checks have reached n of them. If the n were the first n of the
listing, a site whose broken pages sit in its last part would look healthy for days. So the
URLs are checked in the order of ``turn``: a keyed hash of the loc under a key drawn at random
once per target. Whatever the listing's order, the first n URLs of that order are a uniform
random sample of the listing, which no site can line its pages up against (the key is not
known outside the database), and the order is the same for every replica and every round.

URLs that are checked first for another reason (listed since the first round, or listed again)
get a negative ``turn``: they are counted exactly (``Strata.known``) and kept out of the sample
that stands for the rest. Per state, the share of listed URLs is then

    (known_s + rest * p_s) / N

where ``p_s`` is the state's share in the sample and ``rest`` the URLs the sample stands for.
Its 95% interval is Wilson's score interval of ``p_s`` (right near 0% and 100%, where the
normal approximation gives a negative lower bound), with the finite population correction: a
sample that is most of its population is worth more than one drawn with replacement, and one
that is all of it has no margin left. ``margin`` is the distance from the estimate to the
farther bound, so "estimate +/- margin" holds the whole interval.

Example::

    >>> e = estimate(Strata(listed=2_500_000, sampled={"not-found": 72, "ok": 3340}))
    >>> round(e["not-found"].share, 4), round(e["not-found"].margin, 4)
    (0.0211, 0.0054)
"""

from __future__ import annotations

import hashlib
import math
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["Z95", "Estimate", "Strata", "combined", "estimate", "new_key", "turn", "wilson"]

Z95 = 1.959963984540054  # the normal quantile of a two-sided 95% interval
_TURN_BITS = 62  # fits a signed 64-bit column, negated too


def new_key() -> str:
    """A target's sample key: 16 random bytes, hex (drawn once, kept in the database)."""
    return secrets.token_hex(16)


def turn(key: str, loc: str, *, first: bool = False) -> int:
    """The place of ``loc`` in its target's check order: a keyed hash in [0, 2**62), or below
    0 for a URL checked ``first`` (new since the first round), which stays out of the sample."""
    digest = hashlib.blake2b(loc.encode("utf-8", "surrogatepass"), digest_size=8,
                             key=bytes.fromhex(key)).digest()
    value = int.from_bytes(digest, "big") >> (64 - _TURN_BITS)
    return -value - 1 if first else value


def wilson(p: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval of a share ``p`` seen in ``n`` draws (``n`` may be an
    effective sample size, larger than the draws); (0, 1) with no draw."""
    if n <= 0:
        return 0.0, 1.0
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True, slots=True)
class Estimate:
    """The estimated share of listed URLs in a state, and its 95% interval ``[low, high]``.

    ``margin`` is the farther bound's distance from ``share``; all 0 margin once ``exact``."""

    share: float
    low: float
    high: float
    exact: bool

    @property
    def margin(self) -> float:
        """Distance from ``share`` to the farther end of the interval."""
        return max(self.share - self.low, self.high - self.share)

    def as_json(self) -> dict[str, float | bool]:
        """The API's form: rounded to 6 places (a hundred-thousandth of a percent)."""
        return {"share": round(self.share, 6), "margin": round(self.margin, 6),
                "low": round(self.low, 6), "high": round(self.high, 6), "exact": self.exact}


@dataclass(frozen=True, slots=True)
class Strata:
    """What the estimate is made of, as counted in the database.

    ``listed``: URLs the target lists; ``sampled``: per state, the checked URLs of the random
    order (``turn`` >= 0); ``pool``: how many URLs that order holds (checked or not);
    ``known``: per state, the checked URLs that went first (``turn`` < 0), counted exactly;
    ``unchecked``: listed URLs never checked, in either part."""

    listed: int
    sampled: Mapping[str, int] = field(default_factory=dict)
    pool: int | None = None  # None: every listed URL not in ``known``
    known: Mapping[str, int] = field(default_factory=dict)
    unchecked: int | None = None  # None: listed - sampled - known

    @property
    def checked(self) -> int:
        """Listed URLs checked at least once."""
        return sum(self.sampled.values()) + sum(self.known.values())

    @property
    def complete(self) -> bool:
        """Every listed URL was checked: the counts are the shares, with no margin."""
        left = self.listed - self.checked if self.unchecked is None else self.unchecked
        return left <= 0


def combined(strata: Strata, states: Iterable[str]) -> Estimate:
    """The estimate of the share of listed URLs in any of ``states`` (an alert rule's)."""
    wanted = set(states)
    n = strata.listed
    if n <= 0:
        return Estimate(0.0, 0.0, 0.0, True)
    known = sum(v for s, v in strata.known.items() if s in wanted)
    if strata.complete:
        share = (known + sum(v for s, v in strata.sampled.items() if s in wanted)) / n
        return Estimate(share, share, share, True)
    drawn = sum(strata.sampled.values())
    k = sum(v for s, v in strata.sampled.items() if s in wanted)
    known_all = sum(strata.known.values())
    rest = max(0, n - known_all)  # the URLs the sample stands for
    pool = rest if strata.pool is None else max(strata.pool, drawn)
    if drawn == 0:
        return Estimate(known / n, known / n, (known + rest) / n, False)
    p = k / drawn
    # Finite population correction: the variance of a share drawn without replacement is
    # (pool - drawn) / (pool - 1) of one drawn with it, i.e. an effective sample that large.
    left = pool - drawn
    effective = math.inf if left <= 0 else drawn * max(1, pool - 1) / left
    low, high = (p, p) if effective == math.inf else wilson(p, effective)
    if effective != math.inf:
        low, high = min(low, p), max(high, p)
    return Estimate((known + rest * p) / n, (known + rest * low) / n, (known + rest * high) / n,
                    False)


def estimate(strata: Strata, states: Iterable[str] | None = None) -> dict[str, Estimate]:
    """The estimate of each state's share of the listed URLs (``states``: those of the
    sample and the known part, or the given ones, zero included)."""
    names = (sorted({*strata.sampled, *strata.known}) if states is None else list(states))
    return {s: combined(strata, (s,)) for s in names}
