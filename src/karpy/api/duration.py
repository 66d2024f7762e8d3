"""Durations as Karpenter writes them ("30s", "720h", "1h30m", "Never").

Karpenter's duration fields are Go ``time.Duration`` strings, and some of them
(consolidateAfter, expireAfter, terminationGracePeriod) also accept ``Never``.
karpy keeps every duration as float seconds, and ``None`` for Never, so the
decision core compares plain numbers against the injected clock.
"""

from __future__ import annotations

_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,  # micro sign
    "μs": 1e-6,  # Greek small letter mu; Go accepts both
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}

NEVER = "Never"


class DurationError(ValueError):
    pass


def parse_duration(text: str) -> float:
    """Seconds in a Go duration string; raises DurationError on anything else."""
    source = text.strip()
    if not source:
        raise DurationError("empty duration")
    sign = 1.0
    rest = source
    if rest[0] in "+-":
        sign = -1.0 if rest[0] == "-" else 1.0
        rest = rest[1:]
    if rest == "0":  # as in Go, a bare zero (also "-0", "+0") needs no unit
        return 0.0
    total = 0.0
    if not rest:
        raise DurationError(f"invalid duration {text!r}")
    while rest:
        index = 0
        while index < len(rest) and (rest[index].isdigit() or rest[index] == "."):
            index += 1
        number_text = rest[:index]
        if not number_text or number_text == "." or number_text.count(".") > 1:
            raise DurationError(f"invalid duration {text!r}")
        rest = rest[index:]
        unit_end = 0
        while unit_end < len(rest) and not (rest[unit_end].isdigit() or rest[unit_end] == "."):
            unit_end += 1
        unit = rest[:unit_end]
        if unit not in _UNIT_SECONDS:
            raise DurationError(
                f"invalid duration {text!r}: unknown unit {unit!r}" if unit else f"missing unit in {text!r}"
            )
        total += float(number_text) * _UNIT_SECONDS[unit]
        rest = rest[unit_end:]
    return sign * total


# Go's time.Duration is int64 nanoseconds: Karpenter's controller, written in Go, cannot read a
# longer duration (time.ParseDuration says "invalid duration"), though the CRD's pattern admits it.
GO_DURATION_MAX_SECONDS = (2**63 - 1) / 1e9
GO_DURATION_MAX_TEXT = "2562047h47m16.854775807s"


def check_go_duration(text: str, seconds: float) -> None:
    """Raise DurationError for a duration beyond Go's (:data:`GO_DURATION_MAX_SECONDS`)."""
    if abs(seconds) > GO_DURATION_MAX_SECONDS:
        raise DurationError(f"invalid duration {text!r}: longer than Go's largest, {GO_DURATION_MAX_TEXT}")


def parse_optional_duration(text: str) -> float | None:
    """Like :func:`parse_duration`, with ``Never`` read as ``None``."""
    if text.strip() == NEVER:
        return None
    return parse_duration(text)


def format_duration(seconds: float | None) -> str:
    """Go-style duration text ("1h30m0s" is written "1h30m"); ``None`` is Never.

    Seconds are rounded to the millisecond first, so 59.9999s reads "1m",
    never "60s".
    """
    if seconds is None:
        return NEVER
    remaining = round(abs(seconds), 3)
    if remaining == 0:
        return "0s"
    negative = seconds < 0
    parts: list[str] = []
    hours, remaining = divmod(remaining, 3600.0)
    minutes, remaining = divmod(remaining, 60.0)
    if hours:
        parts.append(f"{int(hours)}h")
    if minutes:
        parts.append(f"{int(minutes)}m")
    text = f"{remaining:.3f}".rstrip("0").rstrip(".")
    if text != "0":
        parts.append(f"{text}s")
    return ("-" if negative else "") + "".join(parts)


def format_age(seconds: float) -> str:
    """kubectl's AGE column (apimachinery's ``HumanDuration``): about two significant units.

    Under two minutes in seconds ("95s"), then minutes with seconds below ten
    minutes ("5m10s"), whole minutes below three hours ("150m"), hours with
    minutes below eight hours ("3h4m"), whole hours below two days ("30h"),
    days with hours below eight days ("2d5h"), whole days below two years,
    then years with days ("2y10d"). A negative age reads "0s".
    """
    total = max(0, int(seconds))
    minutes = total // 60
    hours = total // 3600
    days = hours // 24
    if total < 120:
        return f"{total}s"
    if minutes < 10:
        return f"{minutes}m{total % 60}s" if total % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if days < 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    years, rest = divmod(days, 365)
    if years < 8 and rest:
        return f"{years}y{rest}d"
    return f"{years}y"
