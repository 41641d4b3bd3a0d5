"""The configuration's value types: durations, sizes and ratios as a file writes them, and the
frozen model every section of the configuration is built on.

>>> parse_duration("15m"), parse_size("2MiB"), parse_ratio("10%")
(900.0, 2097152, 0.1)
"""

from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

__all__ = [
    "MAX_DURATION", "Duration", "Frozen", "Interval", "Ratio", "Size", "Timeout",
    "duration_within", "format_duration", "parse_duration", "parse_ratio", "parse_size",
]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|KiB|MiB|GiB)?\s*$")
_SIZE_UNITS = {
    None: 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9,
    "KiB": 2**10, "MiB": 2**20, "GiB": 2**30,
}
# The longest duration of any setting: past it, dates overflow and timers never fire.
MAX_DURATION = 3650 * 86400.0


def parse_duration(value: object) -> float:
    """``15m``, ``30s``, ``1.5h``, ``250ms`` or a number of seconds -> seconds."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value))
        if not match:
            raise ValueError(f"not a duration: {value!r} (use e.g. 30s, 15m, 1h)")
        seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    if math.isnan(seconds) or (math.isinf(seconds) and not isinstance(value, str)):
        raise ValueError(f"not a finite duration: {value!r}")
    if seconds > MAX_DURATION:
        raise ValueError(f"too long: at most {format_duration(MAX_DURATION)}")
    return seconds


def format_duration(seconds: float) -> str:
    """Seconds written the way a configuration would: ``1h``, ``30s``, ``0.001s``."""
    for unit in ("d", "h", "m"):
        size = _DURATION_UNITS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def duration_within(low: float, high: float = MAX_DURATION) -> AfterValidator:
    """A bound on a duration, said in the configuration's own units."""

    def check(seconds: float) -> float:
        if seconds < low:
            raise ValueError(f"must be at least {format_duration(low)} "
                             f"(got {format_duration(seconds)})")
        if seconds > high:
            raise ValueError(f"must be at most {format_duration(high)} "
                             f"(got {format_duration(seconds)})")
        return seconds

    return AfterValidator(check)


def parse_size(value: object) -> int:
    """``50MiB``, ``10MB`` or a number of bytes -> bytes."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, int):
        return value
    match = _SIZE.match(str(value))
    size = float(match.group(1)) * _SIZE_UNITS[match.group(2)] if match else math.inf
    if not math.isfinite(size):
        raise ValueError(f"not a size: {value!r} (use e.g. 50MiB, 10MB)")
    return int(size)


def parse_ratio(value: object) -> float:
    """``10%`` or a fraction ``0.1`` -> a fraction."""
    if isinstance(value, bool):
        raise ValueError(f"not a ratio: {value!r}")
    text = str(value).strip()
    number = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    if not 0 <= number <= 1:
        raise ValueError(f"ratio out of range 0..1: {value!r}")
    return number


Duration = Annotated[float, BeforeValidator(parse_duration), Field(ge=0)]
# At least a second between checks of a target: below it, a check loop is a flood.
Interval = Annotated[Duration, duration_within(1.0)]
Timeout = Annotated[Duration, Field(gt=0)]
Size = Annotated[int, BeforeValidator(parse_size), Field(gt=0)]
Ratio = Annotated[float, BeforeValidator(parse_ratio)]


class Frozen(BaseModel):
    """A section of the configuration: unknown keys are errors, and nothing changes it once made."""

    model_config = ConfigDict(extra="forbid", frozen=True)
