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
    "µs": 1e-6,
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
    if source == "0":
        return 0.0
    sign = 1.0
    rest = source
    if rest[0] in "+-":
        sign = -1.0 if rest[0] == "-" else 1.0
        rest = rest[1:]
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


def parse_optional_duration(text: str) -> float | None:
    """Like :func:`parse_duration`, with ``Never`` read as ``None``."""
    if text.strip() == NEVER:
        return None
    return parse_duration(text)


def format_duration(seconds: float | None) -> str:
    """Go-style duration text ("1h30m0s" is written "1h30m"); ``None`` is Never."""
    if seconds is None:
        return NEVER
    if seconds == 0:
        return "0s"
    negative = seconds < 0
    remaining = abs(seconds)
    parts: list[str] = []
    hours, remaining = divmod(remaining, 3600.0)
    minutes, remaining = divmod(remaining, 60.0)
    if hours:
        parts.append(f"{int(hours)}h")
    if minutes:
        parts.append(f"{int(minutes)}m")
    if remaining:
        text = f"{remaining:.3f}".rstrip("0").rstrip(".")
        parts.append(f"{text}s")
    return ("-" if negative else "") + "".join(parts)


def format_age(seconds: float) -> str:
    """kubectl's AGE column: the two most significant units ("5m10s", "3h4m", "2d5h")."""
    total = max(0, int(seconds))
    days, rem = divmod(total, 86400)
    hours, rem = divmod(rem, 3600)
    minutes, secs = divmod(rem, 60)
    if days:
        return f"{days}d{hours}h" if hours and days < 8 else f"{days}d"
    if hours:
        return f"{hours}h{minutes}m" if minutes and hours < 8 else f"{hours}h"
    if minutes:
        return f"{minutes}m{secs}s" if secs and minutes < 10 else f"{minutes}m"
    return f"{secs}s"
