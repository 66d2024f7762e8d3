"""Durations as Karpenter writes them: Go duration strings, Never, and kubectl's AGE column."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from karpy.api.duration import (
    DurationError,
    format_age,
    format_duration,
    parse_duration,
    parse_optional_duration,
)

MINUTE = 60.0
HOUR = 3600.0
DAY = 24 * HOUR


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30.0),
        ("5m", 300.0),
        ("720h", 720 * HOUR),
        ("1h30m", 5400.0),
        ("1h30m15s", 5415.0),
        ("30m1h", 5400.0),  # Go adds the parts in any order
        ("1.5h", 5400.0),
        (".5s", 0.5),
        ("5.s", 5.0),
        ("500ms", 0.5),
        ("250us", 250e-6),
        ("250\u00b5s", 250e-6),  # micro sign
        ("250\u03bcs", 250e-6),  # Greek mu: Go accepts both spellings
        ("10ns", 10e-9),
        ("0", 0.0),
        ("-0", 0.0),
        ("+0", 0.0),
        ("0s", 0.0),
        ("+5m", 300.0),
        ("-1h30m", -5400.0),
        ("-90s", -90.0),
        (" 30s ", 30.0),
    ],
)
def test_parse_duration_reads_go_duration_strings(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty duration"),
        ("   ", "empty duration"),
        ("30", "missing unit in '30'"),
        ("1h30", "missing unit in '1h30'"),
        ("1d", "invalid duration '1d': unknown unit 'd'"),
        ("2w", "invalid duration '2w': unknown unit 'w'"),
        ("1H", "invalid duration '1H': unknown unit 'H'"),
        ("1 h", "invalid duration '1 h': unknown unit ' h'"),
        ("1h 30m", "invalid duration '1h 30m': unknown unit 'h '"),
        ("1e3s", "invalid duration '1e3s': unknown unit 'e'"),
        ("h", "invalid duration 'h'"),
        ("-", "invalid duration '-'"),
        ("+", "invalid duration '+'"),
        ("--1s", "invalid duration '--1s'"),
        (".s", "invalid duration '.s'"),
        ("1..5s", "invalid duration '1..5s'"),
        ("Never", "invalid duration 'Never'"),
    ],
)
def test_parse_duration_rejects_anything_else_with_a_message_naming_the_text(text: str, message: str) -> None:
    with pytest.raises(DurationError) as raised:
        parse_duration(text)
    assert str(raised.value) == message


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("Never", None), (" Never ", None), ("720h", 720 * HOUR), ("0s", 0.0)],
)
def test_parse_optional_duration_reads_never_as_none(text: str, seconds: float | None) -> None:
    assert parse_optional_duration(text) == seconds


@pytest.mark.parametrize("text", ["never", "NEVER", "Never0s", ""])
def test_parse_optional_duration_only_accepts_never_spelt_as_karpenter_does(text: str) -> None:
    with pytest.raises(DurationError):
        parse_optional_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "Never"),
        (0.0, "0s"),
        (-0.0, "0s"),
        (30.0, "30s"),
        (90.0, "1m30s"),
        (HOUR, "1h"),
        (5400.0, "1h30m"),
        (3661.0, "1h1m1s"),
        (720 * HOUR, "720h"),
        (0.5, "0.5s"),
        (1.25, "1.25s"),
        (60.001, "1m0.001s"),
        (-90.0, "-1m30s"),
        (-5400.0, "-1h30m"),
        # Rounded to the millisecond before splitting into units, so no "60s" part.
        (59.9996, "1m"),
        (3599.9996, "1h"),
        (0.0004, "0s"),
    ],
)
def test_format_duration_writes_go_style_text_without_zero_units(seconds: float | None, text: str) -> None:
    assert format_duration(seconds) == text


@given(st.integers(min_value=-(10**12), max_value=10**12))
def test_format_duration_round_trips_through_parse_duration_to_the_millisecond(milliseconds: int) -> None:
    seconds = milliseconds / 1000
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds, rel=1e-12, abs=1e-6)


@pytest.mark.parametrize(
    ("seconds", "age"),
    [
        (-30.0, "0s"),
        (0.0, "0s"),
        (59.9, "59s"),
        (90.0, "90s"),
        (119.0, "119s"),
        (120.0, "2m"),
        (130.0, "2m10s"),
        (599.0, "9m59s"),
        (600.0, "10m"),
        (630.0, "10m"),
        (150 * MINUTE, "150m"),
        (3 * HOUR - 1, "179m"),
        (3 * HOUR, "3h"),
        (3 * HOUR + 4 * MINUTE, "3h4m"),
        (8 * HOUR - 1, "7h59m"),
        (8 * HOUR, "8h"),
        (30 * HOUR, "30h"),
        (48 * HOUR - 1, "47h"),
        (2 * DAY, "2d"),
        (2 * DAY + 5 * HOUR, "2d5h"),
        (8 * DAY - 1, "7d23h"),
        (8 * DAY + 5 * HOUR, "8d"),
        (729 * DAY, "729d"),
        (730 * DAY, "2y"),
        (731 * DAY, "2y1d"),
        (8 * 365 * DAY - 1, "7y364d"),
        (8 * 365 * DAY + 3 * DAY, "8y"),
    ],
)
def test_format_age_matches_kubectl_age_column(seconds: float, age: str) -> None:
    assert format_age(seconds) == age
