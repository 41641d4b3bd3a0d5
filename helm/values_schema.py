"""Write the daemon's configuration bounds into the chart's values.schema.json.

The daemon refuses an interval under 1s, a lease over 1h, a rate over 1,000 and so on
(``monitor/config/``); a chart that passed such a value on would install a pod that cannot
start. This script gives each bounded key of ``config`` a definition that refuses the same
values, so that ``helm install`` stops at once and names the key.

A value is a number, bounded with ``minimum`` and ``maximum``, or a string the daemon parses
(``15m``, ``10%``, ``50MiB``, ``"30"``), bounded with a pattern that matches exactly the
strings in range: JSON Schema cannot do arithmetic, so the range is spelt out digit by digit
(``decimal_range``). The pattern's first group names the bound, which is what ``helm`` shows of
it when a value is refused. A string with a ``${VAR}`` is left to the daemon, which expands it.

``python helm/values_schema.py`` rewrites the definitions and the keys that use them;
``--check`` only compares, for CI.
"""

from __future__ import annotations

import argparse
import json
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

SCHEMA = Path(__file__).resolve().parent / "sitemap-monitor" / "values.schema.json"

# --- the regular expressions -------------------------------------------------------------

# A decimal expansion of a fraction in [0, 1): ``head`` then ``cycle`` repeated for ever
# (``cycle`` empty: it ends). 1/60 is ("01", "6"), 1/8 is ("125", "").
Expansion = tuple[str, str]


def expansion(value: Fraction) -> Expansion:
    """The decimal digits of ``value`` (0 <= value < 1), by long division."""
    assert 0 <= value < 1
    digits: list[str] = []
    seen: dict[int, int] = {}
    rest = value.numerator
    while rest and rest not in seen:
        seen[rest] = len(digits)
        digit, rest = divmod(rest * 10, value.denominator)
        digits.append(str(digit))
    start = seen.get(rest, len(digits)) if rest else len(digits)
    return "".join(digits[:start]), "".join(digits[start:])


def _is_zero(e: Expansion) -> bool:
    return not e[1] and not e[0].strip("0")


def _shift(e: Expansion) -> tuple[int, Expansion]:
    """The first digit and what follows it."""
    head, cycle = e
    if head:
        return int(head[0]), (head[1:], cycle)
    if cycle:
        return int(cycle[0]), ("", cycle[1:] + cycle[0])
    return 0, ("", "")


def _repeated(cycle: str) -> str:
    return f"{cycle}*" if len(cycle) == 1 else f"(?:{cycle})*"


def _digits(low: int, high: int) -> str:
    if low == high:
        return str(low)
    return r"\d" if (low, high) == (0, 9) else f"[{low}-{high}]"


def _any(alternatives: list[str]) -> str:
    unique = list(dict.fromkeys(alternatives))
    return unique[0] if len(unique) == 1 else "(?:" + "|".join(unique) + ")"


def _at_least(e: Expansion) -> str:
    """Digits G, maybe none, with 0.G >= e."""
    if _is_zero(e):
        return r"\d*"
    head, cycle = e
    alternatives = [head[:k] + _digits(int(d) + 1, 9) + r"\d*"
                    for k, d in enumerate(head) if d != "9"]
    if not cycle:
        alternatives.append(head + r"\d*")
    else:
        alternatives += [f"{head}{_repeated(cycle)}{cycle[:j]}" + _digits(int(d) + 1, 9) + r"\d*"
                         for j, d in enumerate(cycle) if d != "9"]
    return _any(alternatives)


def _at_most(e: Expansion) -> str:
    """Digits G, maybe none, with 0.G <= e."""
    head, cycle = e
    if _is_zero(e):
        return "0*"
    alternatives = [head[:k] + _digits(0, int(d) - 1) + r"\d*"
                    for k, d in enumerate(head) if d != "0"]
    alternatives += [head[:k] for k in range(1, len(head))]
    if not cycle:
        alternatives.append(head + "0*")
    else:
        alternatives += [f"{head}{_repeated(cycle)}{cycle[:j]}" + _digits(0, int(d) - 1) + r"\d*"
                         for j, d in enumerate(cycle) if d != "0"]
        alternatives += [f"{head}{_repeated(cycle)}{cycle[:j]}" for j in range(len(cycle))]
    return "(?:" + "|".join(dict.fromkeys(a for a in alternatives if a)) + ")?"


def _fraction(low: Expansion, high: Expansion | None, *, above: bool = False) -> str:
    """Digits F, at least one, with ``low`` <= 0.F <= ``high`` (``high`` None: any), or
    ``low`` < 0.F when ``above`` (then ``low`` is 0)."""
    if above:
        assert _is_zero(low)
        assert high is None or not _is_zero(high), "nothing is above 0 and at most 0"
        if high is None:
            return r"\d*[1-9]\d*"
        top, below_top = _shift(high)
        if top == 0:
            return "0" + _fraction(low, below_top, above=True)
        alternatives = [r"0\d*[1-9]\d*"]
        if top > 1:
            alternatives.append(_digits(1, top - 1) + r"\d*")
        alternatives.append(str(top) + _at_most(below_top))
        return _any(alternatives)
    if high is None and _is_zero(low):
        return r"\d+"
    first, low_rest = _shift(low)
    high_rest: Expansion | None
    last, high_rest = (9, None) if high is None else _shift(high)
    if first == last:
        if high_rest is None:
            return str(first) + _at_least(low_rest)
        tail = _between(low_rest, high_rest)
        return "0+" if (first, tail) == (0, "0*") else str(first) + tail
    alternatives = [str(first) + _at_least(low_rest)]
    if last - first > 1:
        alternatives.append(_digits(first + 1, last - 1) + r"\d*")
    alternatives.append(str(last) + (r"\d*" if high_rest is None else _at_most(high_rest)))
    return _any(alternatives)


def _between(low: Expansion, high: Expansion) -> str:
    """Digits G, maybe none, with ``low`` <= 0.G <= ``high``."""
    if _is_zero(low):
        return _at_most(high)
    return _fraction(low, high)


def _integers(low: int, high: int | None) -> str:
    """Whole numbers from ``low`` to ``high`` (None: no end), written without leading zeros."""
    if high is None:
        width = len(str(low))
        return _any([_integers(low, 10**width - 1), r"[1-9]\d{" + str(width) + ",}"])
    # Cut the range where a run of trailing 9s (going up from low) or of trailing 0s (going
    # down from high) ends: each block is then a prefix, one class and any digits.
    stops = {high}
    for k in range(1, len(str(high)) + 1):
        up = int(str(low)[:-k] + "9" * k)
        if low <= up < high:
            stops.add(up)
        down = (high + 1) - (high + 1) % 10**k - 1
        if low < down <= high:
            stops.add(down)
    blocks = []
    start = low
    for stop in sorted(stops):
        blocks.append(_block(str(start), str(stop)))
        start = stop + 1
    return _any(blocks)


def _block(start: str, stop: str) -> str:
    assert len(start) == len(stop)
    pattern, free = "", 0
    for a, b in zip(start, stop, strict=True):
        if a == b and not free:
            pattern += a
        elif (a, b) == ("0", "9"):
            free += 1
        else:
            pattern += _digits(int(a), int(b))
    return pattern + ("" if not free else r"\d" if free == 1 else r"\d{" + str(free) + "}")


def decimal_range(low: Fraction, high: Fraction | None, *, above: bool = False) -> str:
    """A regular expression of the decimals ``\\d+(\\.\\d+)?`` (leading zeros and all) whose
    value is from ``low`` to ``high`` (None: no end); above ``low`` when ``above``."""
    assert not above or low == 0
    a = int(low)
    b = None if high is None else int(high)
    low_digits = expansion(low - a)
    high_digits = None if high is None else expansion(high - int(high))

    def number(whole: str, low_e: Expansion, high_e: Expansion | None, strict: bool) -> str:
        fraction = _fraction(low_e, high_e, above=strict)
        optional = _is_zero(low_e) and not strict
        return f"0*{whole}" + (f"(?:\\.{fraction})?" if optional else f"\\.{fraction}")

    zero: Expansion = ("", "")
    if b == a:
        return number(str(a), low_digits, high_digits, above)
    # The whole numbers from which any fraction is in range; low's own when nothing of it is
    # refused.
    first = a if _is_zero(low_digits) and not above else a + 1
    alternatives = [] if first == a else [number(str(a), low_digits, None, above)]
    if b is None:
        alternatives.append(f"0*{_integers(first, None)}" + r"(?:\.\d+)?")
    else:
        if b > first:
            alternatives.append(f"0*{_integers(first, b - 1)}" + r"(?:\.\d+)?")
        alternatives.append(number(str(b), zero, high_digits, False))
    return _any(alternatives)


# --- the definitions ---------------------------------------------------------------------

ENV = r"\$\{[A-Za-z_][A-Za-z0-9_]*\}"  # the daemon expands it before it reads the value
DURATION_UNITS = {"ms": Fraction(1, 1000), "s": Fraction(1), "m": Fraction(60),
                  "h": Fraction(3600), "d": Fraction(86400)}
SIZE_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9,
              "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
MAX_DURATION = Fraction(3650 * 86400)  # monitor.config.MAX_DURATION


def _words(seconds: Fraction) -> str:
    for unit in ("d", "h", "m"):
        if seconds >= DURATION_UNITS[unit] and seconds % DURATION_UNITS[unit] == 0:
            return f"{seconds / DURATION_UNITS[unit]}{unit}"
    return f"{seconds}s"


def _pattern(name: str, body: str) -> str:
    return f"^\\s*(?P<{name}>{body})\\s*$|{ENV}"


def _numbers(low: Fraction, high: Fraction | None, above: bool = False) -> dict[str, Any]:
    """``minimum`` (``exclusiveMinimum`` when ``above``) and ``maximum``, for a number."""
    keys: dict[str, Any] = {"exclusiveMinimum" if above else "minimum": _json(low)}
    if high is not None:
        keys["maximum"] = _json(high)
    return keys


def _json(value: Fraction) -> int | float:
    return int(value) if value.denominator == 1 else float(value)


def duration(low: Fraction, high: Fraction = MAX_DURATION, *,
             above: bool = False) -> dict[str, Any]:
    """A duration in seconds or with a unit, from ``low`` to ``high`` seconds."""
    name = (f"duration_{'above' if above else 'from'}_{_words(low)}_to_{_words(high)}"
            .replace(".", "_"))
    body = "|".join(
        f"(?:{decimal_range(low / size, high / size, above=above)})\\s*{unit}"
        + ("?" if unit == "s" else "")
        for unit, size in DURATION_UNITS.items())
    words = f"{'above' if above else 'from'} {_words(low)} to {_words(high)}"
    return {
        "description": f"A duration {words}: seconds, or a number with ms, s, m, h or d.",
        "type": ["number", "string"],
        **_numbers(low, high, above),
        "pattern": _pattern(name, body),
    }


def ratio() -> dict[str, Any]:
    """A fraction from 0 to 1, or a percentage from 0% to 100%."""
    body = (f"(?:{decimal_range(Fraction(0), Fraction(1))})"
            f"|(?:{decimal_range(Fraction(0), Fraction(100))})\\s*%")
    return {
        "description": "A ratio: a fraction from 0 to 1, or a percentage from 0% to 100%.",
        "type": ["number", "string"], "minimum": 0, "maximum": 1,
        "pattern": _pattern("ratio_from_0_to_1_or_0pc_to_100pc", body),
    }


def rate() -> dict[str, Any]:
    """Requests a second: above 0, at most 1,000."""
    return {
        "description": "Requests a second per host: above 0, at most 1000.",
        "type": ["number", "string"], "exclusiveMinimum": 0, "maximum": 1000,
        "pattern": _pattern("rate_above_0_to_1000",
                            decimal_range(Fraction(0), Fraction(1000), above=True)),
    }


def size() -> dict[str, Any]:
    """A size of at least one byte, in bytes or with a unit."""
    body = "|".join(f"(?:{decimal_range(Fraction(1, n), None)})\\s*{unit}"
                    + ("?" if unit == "B" else "") for unit, n in SIZE_UNITS.items())
    return {
        "description": "A size of at least 1 byte: bytes, or a number with B, KB, MB, GB, KiB, "
                       "MiB or GiB.",
        "type": ["number", "string"], "minimum": 1,
        "pattern": _pattern("size_at_least_1B", body),
    }


def count(low: int, high: int | None = None) -> dict[str, Any]:
    """A whole number from ``low`` to ``high``."""
    name = f"whole_number_from_{low}" + ("" if high is None else f"_to_{high}")
    top = None if high is None else Fraction(high)
    words = f"from {low}" + ("" if high is None else f" to {high}")
    return {
        "description": f"A whole number {words}.",
        "type": ["integer", "string"], **_numbers(Fraction(low), top),
        "pattern": _pattern(name, f"0*(?:{_integers(low, high)})(?:\\.0+)?"),
    }


SECOND = Fraction(1)
HOUR = Fraction(3600)
DEFINITIONS: dict[str, dict[str, Any]] = {
    "duration": duration(Fraction(0)),
    "positiveDuration": duration(Fraction(0), above=True),
    "interval": duration(SECOND),
    "lease": duration(SECOND, HOUR),
    "shutdownGrace": duration(Fraction(0), HOUR),
    "headTimeout": duration(Fraction(0), Fraction(300), above=True),
    "writeTimeout": duration(Fraction(0), HOUR, above=True),
    "ratio": ratio(),
    "rate": rate(),
    "size": size(),
    "countFrom0": count(0),
    "countFrom1": count(1),
    "concurrency": count(1, 1024),
    "perHost": count(1, 256),
    "examples": count(0, 1000),
}

# The keys of values.config the daemon bounds (monitor/config/), and their definitions.
_TARGET = {
    "interval": "interval", "jitter": "ratio", "timeout": "positiveDuration",
    "connect_timeout": "positiveDuration", "read_timeout": "positiveDuration",
    "check_timeout": "positiveDuration", "retry_after_max": "duration", "max_bytes": "size",
    "max_urls": "countFrom1", "max_children": "countFrom1", "max_depth": "countFrom1",
    "max_redirects": "countFrom0", "url_checks.rate": "rate",
    "url_checks.recheck": "positiveDuration", "url_checks.body_limit": "size",
    "retention.snapshots": "positiveDuration", "retention.keep_last": "countFrom1",
    "retention.max_bytes": "size",
}
FIELDS: dict[str, str] = {
    **{f"defaults.{key}": name for key, name in _TARGET.items()},
    **{f"targets[].{key}": name for key, name in _TARGET.items()},
    "scheduler.concurrency": "concurrency", "scheduler.per_host": "perHost",
    "scheduler.shutdown_grace": "shutdownGrace", "scheduler.lease": "lease",
    "scheduler.prune_interval": "interval",
    "http.max_requests": "countFrom1", "http.database_connections": "countFrom1",
    "http.max_connections": "countFrom1", "http.head_timeout": "headTimeout",
    "http.keep_alive": "headTimeout", "http.write_timeout": "writeTimeout",
    "alerts.delivery.max_age": "duration", "alerts.delivery.initial_backoff": "duration",
    "alerts.delivery.max_backoff": "duration", "alerts.delivery.examples": "examples",
}


def node(schema: dict[str, Any], field: str) -> dict[str, Any]:
    """The schema of ``config.<field>`` (``targets[].x``: of each target's ``x``)."""
    here: dict[str, Any] = schema["properties"]["config"]
    for key in field.split("."):
        if key.endswith("[]"):
            here = here["properties"][key[:-2]]["items"]
        else:
            here = here["properties"][key]
    return here


def bounded(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with the definitions written and each bounded key pointing at its own."""
    out: dict[str, Any] = json.loads(json.dumps(schema))
    out.pop("definitions", None)
    out = {**{k: v for k, v in out.items() if k != "properties"},
           "definitions": DEFINITIONS, "properties": out["properties"]}
    for field, name in FIELDS.items():
        parent, _, key = field.rpartition(".")
        holder = node(out, parent) if parent else out["properties"]["config"]
        holder["properties"][key] = {"$ref": f"#/definitions/{name}"}
    return out


def main(argv: list[str] | None = None) -> int:
    """Rewrite values.schema.json, or with ``--check`` say whether it is up to date."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 if stale")
    parser.add_argument("--schema", type=Path, default=SCHEMA)
    args = parser.parse_args(argv)
    text = args.schema.read_text(encoding="utf-8")
    wanted = json.dumps(bounded(json.loads(text)), indent=2) + "\n"
    if text == wanted:
        return 0
    if args.check:
        print(f"{args.schema} is stale: run python helm/values_schema.py", file=sys.stderr)
        return 1
    args.schema.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
