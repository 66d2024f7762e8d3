"""Kubernetes quantities: parsing, canonical printing, exact arithmetic, integer amounts."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from karpy.api.quantity import (
    MAX_QUANTITY_MAGNITUDE,
    Quantity,
    QuantityError,
    QuantityFormat,
    ResourceAmounts,
    add_amounts,
    amount_of,
    exceeded_resources,
    fits,
    format_amount,
    how_many_fit,
    max_amounts,
    parse_resource_list,
    subtract_amounts,
)

BINARY = QuantityFormat.BINARY_SI
DECIMAL = QuantityFormat.DECIMAL_SI
EXPONENT = QuantityFormat.DECIMAL_EXPONENT


@pytest.mark.parametrize(
    ("text", "value", "quantity_format", "canonical"),
    [
        ("0", Fraction(0), DECIMAL, "0"),
        ("1", Fraction(1), DECIMAL, "1"),
        ("+1", Fraction(1), DECIMAL, "1"),
        ("-2", Fraction(-2), DECIMAL, "-2"),
        ("1.5", Fraction(3, 2), DECIMAL, "1500m"),
        (".5", Fraction(1, 2), DECIMAL, "500m"),
        ("0.5", Fraction(1, 2), DECIMAL, "500m"),
        ("1.", Fraction(1), DECIMAL, "1"),
        ("100m", Fraction(1, 10), DECIMAL, "100m"),
        ("1500m", Fraction(3, 2), DECIMAL, "1500m"),
        ("2000m", Fraction(2), DECIMAL, "2"),
        ("1000", Fraction(1000), DECIMAL, "1k"),
        ("1500", Fraction(1500), DECIMAL, "1500"),
        ("120000", Fraction(120000), DECIMAL, "120k"),
        ("1k", Fraction(1000), DECIMAL, "1k"),
        ("1M", Fraction(10**6), DECIMAL, "1M"),
        ("1G", Fraction(10**9), DECIMAL, "1G"),
        ("1T", Fraction(10**12), DECIMAL, "1T"),
        ("1P", Fraction(10**15), DECIMAL, "1P"),
        ("1E", Fraction(10**18), DECIMAL, "1E"),
        ("5n", Fraction(5, 10**9), DECIMAL, "5n"),
        ("5u", Fraction(5, 10**6), DECIMAL, "5u"),
        ("0.1m", Fraction(1, 10**4), DECIMAL, "100u"),
        ("1Ki", Fraction(1024), BINARY, "1Ki"),
        ("1024Mi", Fraction(2**30), BINARY, "1Gi"),
        ("1Gi", Fraction(2**30), BINARY, "1Gi"),
        ("1.5Gi", Fraction(3 * 2**29), BINARY, "1536Mi"),
        ("1.5Ki", Fraction(1536), BINARY, "1536"),
        ("512Ki", Fraction(512 * 1024), BINARY, "512Ki"),
        ("1025Ki", Fraction(1025 * 1024), BINARY, "1025Ki"),
        ("1Ti", Fraction(2**40), BINARY, "1Ti"),
        ("1Pi", Fraction(2**50), BINARY, "1Pi"),
        ("1Ei", Fraction(2**60), BINARY, "1Ei"),
        ("0.5Ki", Fraction(512), BINARY, "512"),
        ("0.0001Ki", Fraction(1024, 10**4), DECIMAL, "102400u"),
        ("0Ki", Fraction(0), BINARY, "0"),
        ("1e3", Fraction(1000), EXPONENT, "1e3"),
        ("1E3", Fraction(1000), EXPONENT, "1e3"),
        ("1e+3", Fraction(1000), EXPONENT, "1e3"),
        ("12e6", Fraction(12 * 10**6), EXPONENT, "12e6"),
        ("1.5e3", Fraction(1500), EXPONENT, "1500"),
        ("1e-3", Fraction(1, 1000), EXPONENT, "1e-3"),
        ("15e-4", Fraction(15, 10**4), EXPONENT, "1500e-6"),
        ("1e0", Fraction(1), EXPONENT, "1"),
        ("007", Fraction(7), DECIMAL, "7"),
        ("-1.5Gi", Fraction(-3 * 2**29), BINARY, "-1536Mi"),
        ("-100m", Fraction(-1, 10), DECIMAL, "-100m"),
        ("9223372036854775807", Fraction(MAX_QUANTITY_MAGNITUDE), DECIMAL, "9223372036854775807"),
        ("-9223372036854775807", Fraction(-MAX_QUANTITY_MAGNITUDE), DECIMAL, "-9223372036854775807"),
        ("7Ei", Fraction(7 * 2**60), BINARY, "7Ei"),
    ],
)
def test_parse_and_canonical_form(
    text: str, value: Fraction, quantity_format: QuantityFormat, canonical: str
) -> None:
    quantity = Quantity.parse(text)
    assert quantity.value == value
    assert quantity.format is quantity_format
    assert str(quantity) == canonical
    # The canonical form is itself canonical and means the same value.
    assert Quantity.parse(canonical) == quantity
    assert str(Quantity.parse(canonical)) == canonical


@pytest.mark.parametrize(
    ("text", "nanos"),
    [
        # Finer than a nano-unit rounds up (away from zero) to the next one.
        ("1.0000000001", 1_000_000_001),
        ("0.0000000001", 1),
        ("-0.0000000001", -1),
        ("1e-20", 1),
        ("1e-99999999999999999", 1),
        ("0.1n", 1),
        ("1.5n", 2),
        ("0." + "0" * 5000 + "1", 1),
        ("0." + "0" * 5000, 0),
    ],
)
def test_values_finer_than_nano_round_up(text: str, nanos: int) -> None:
    assert Quantity.parse(text).value == Fraction(nanos, 10**9)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        (" 1", "whitespace"),
        ("1 ", "whitespace"),
        ("1 Gi", "whitespace"),
        ("12x", 'unknown suffix "x"'),
        ("1KB", 'unknown suffix "KB"'),
        ("1K", 'unknown suffix "K"'),
        ("1ki", 'unknown suffix "ki"'),
        ("1e", 'unknown suffix "e"'),
        ("1e+", 'unknown suffix "e+"'),
        ("1e1.5", 'unknown suffix "e1.5"'),
        ("1Gie3", 'unknown suffix "Gie3"'),
        ("1.5.5", 'unknown suffix ".5"'),
        ("0x10", 'unknown suffix "x10"'),
        ("--1", "no digits"),
        ("+-1", "no digits"),
        (".", "no digits"),
        ("-", "no digits"),
        ("Ki", "no digits"),
        ("m", "no digits"),
        ("abc", "no digits"),
        ("١", "no digits"),
        ("9223372036854775808", "overflows"),
        ("-9223372036854775808", "overflows"),
        ("1e19", "overflows"),
        ("10E", "overflows"),
        ("8Ei", "overflows"),
        ("9223372036854775807.5", "overflows"),
        ("1" + "0" * 5000, "overflows"),
        ("1e99999999999999999999", "exponent out of range"),
        ("1." + "1" * 200, "significant digits"),
    ],
)
def test_rejects_invalid_text(text: str, reason: str) -> None:
    with pytest.raises(QuantityError, match="invalid quantity") as raised:
        Quantity.parse(text)
    assert reason in str(raised.value)


def test_error_message_names_the_text_and_the_problem() -> None:
    with pytest.raises(QuantityError) as raised:
        Quantity.parse("12x")
    assert str(raised.value) == 'invalid quantity "12x": unknown suffix "x"'


@pytest.mark.parametrize(
    ("number", "value", "canonical"),
    [
        (0, Fraction(0), "0"),
        (3, Fraction(3), "3"),
        (-4, Fraction(-4), "-4"),
        (2000, Fraction(2000), "2k"),
        (0.5, Fraction(1, 2), "500m"),
        (0.1, Fraction(1, 10), "100m"),
        (1.5, Fraction(3, 2), "1500m"),
        (1e-05, Fraction(1, 10**5), "10u"),
        (1e16, Fraction(10**16), "10P"),
        (MAX_QUANTITY_MAGNITUDE, Fraction(MAX_QUANTITY_MAGNITUDE), "9223372036854775807"),
    ],
)
def test_parse_numbers(number: int | float, value: Fraction, canonical: str) -> None:
    quantity = Quantity.parse(number)
    assert quantity.value == value
    assert quantity.format is DECIMAL
    assert str(quantity) == canonical


@pytest.mark.parametrize(
    "bad",
    [True, False, float("nan"), float("inf"), -float("inf"), 2**63, -(2**63), 1e19, [1], None],
)
def test_rejects_bad_numbers(bad: object) -> None:
    with pytest.raises(QuantityError):
        Quantity.parse(bad)  # type: ignore[arg-type]


def test_constructor_rejects_values_finer_than_nano() -> None:
    with pytest.raises(QuantityError, match="nano"):
        Quantity(Fraction(1, 3))
    assert Quantity(Fraction(1, 10**9)).value == Fraction(1, 10**9)


def test_arithmetic_is_exact() -> None:
    tenth = Quantity.parse("0.1")
    fifth = Quantity.parse("0.2")
    assert tenth + fifth == Quantity.parse("0.3")
    assert tenth + fifth == Quantity.parse("300m")
    assert str(tenth + fifth) == "300m"
    assert Quantity.parse("1") - Quantity.parse("0.9") == Quantity.parse("100m")
    total = Quantity.parse("0")
    for _ in range(10):
        total = total + tenth
    assert total == Quantity.parse("1")
    assert -Quantity.parse("1Gi") == Quantity.parse("-1Gi")


def test_sum_keeps_left_format_unless_left_is_zero() -> None:
    gib = Quantity.parse("1Gi")
    assert (gib + Quantity.parse("1Gi")).format is BINARY
    assert str(gib + Quantity.parse("1Gi")) == "2Gi"
    assert (gib + Quantity.parse("1k")).format is BINARY
    assert (Quantity.parse("0") + gib).format is BINARY
    assert str(Quantity.parse("0") + gib) == "1Gi"
    assert (Quantity.parse("1k") + gib).format is DECIMAL
    assert (Quantity.parse("0") - gib).format is BINARY
    assert str(Quantity.parse("0") - gib) == "-1Gi"


def test_arithmetic_is_unbounded() -> None:
    big = Quantity.parse("7Ei")
    assert (big + big).value == 14 * 2**60
    assert str(big + big) == "14Ei"
    assert str(Quantity.parse("9E") + Quantity.parse("9E")) == "18E"
    assert str(Quantity(Fraction(10**21), EXPONENT)) == "1e21"
    assert str(Quantity(Fraction(10**21), DECIMAL)) == "1000E"


def test_comparison_and_hash_use_the_value_only() -> None:
    gib = Quantity.parse("1Gi")
    same = Quantity.parse("1073741824")
    assert gib == same
    assert hash(gib) == hash(same)
    assert len({gib, same, Quantity.parse("1073741824e0")}) == 1
    assert Quantity.parse("100m") < Quantity.parse("0.2")
    assert Quantity.parse("100m") <= Quantity.parse("0.1")
    assert Quantity.parse("1Ki") > Quantity.parse("1k")
    assert Quantity.parse("1k") >= Quantity.parse("1e3")
    assert Quantity.parse("-1") < Quantity.parse("0")
    assert sorted([Quantity.parse("1Gi"), Quantity.parse("1M"), Quantity.parse("1")]) == [
        Quantity.parse("1"),
        Quantity.parse("1M"),
        Quantity.parse("1Gi"),
    ]
    assert gib != "1Gi"


def test_sign_properties() -> None:
    assert Quantity.parse("-1m").is_negative
    assert not Quantity.parse("0").is_negative
    assert not Quantity.parse("1m").is_negative
    assert Quantity.parse("0Gi").is_zero
    assert not Quantity.parse("1n").is_zero


@pytest.mark.parametrize(
    ("text", "milli", "whole"),
    [
        ("0", 0, 0),
        ("1", 1000, 1),
        ("100m", 100, 1),
        ("1500m", 1500, 2),
        ("1.0001", 1001, 2),
        ("1n", 1, 1),
        ("999999n", 1, 1),
        ("1000001n", 2, 1),
        ("2", 2000, 2),
        ("1Gi", 1073741824000, 1073741824),
        # Kubernetes rounds away from zero, so negatives round down.
        ("-1n", -1, -1),
        ("-1500m", -1500, -2),
    ],
)
def test_milli_and_ceil_round_like_kubernetes(text: str, milli: int, whole: int) -> None:
    quantity = Quantity.parse(text)
    assert quantity.milli() == milli
    assert quantity.ceil() == whole


def test_repr_shows_the_canonical_form() -> None:
    assert repr(Quantity.parse("1024Mi")) == "Quantity('1Gi')"


# --- integer resource amounts -------------------------------------------------


@pytest.mark.parametrize(
    ("resource_name", "text", "amount"),
    [
        ("cpu", "500m", 500),
        ("cpu", "1", 1000),
        ("cpu", "0.1", 100),
        ("cpu", "1.0001", 1001),
        ("cpu", "1n", 1),
        ("memory", "1Gi", 2**30),
        ("memory", "1.5", 2),
        ("memory", "100m", 1),
        ("ephemeral-storage", "10G", 10**10),
        ("pods", "110", 110),
        ("nvidia.com/gpu", "1", 1),
        ("hugepages-2Mi", "4Mi", 4 * 2**20),
    ],
)
def test_amount_of(resource_name: str, text: str, amount: int) -> None:
    assert amount_of(resource_name, Quantity.parse(text)) == amount


def test_amount_of_cpu_overflows_in_millicores() -> None:
    huge = Quantity.parse("9223372036854775807")
    assert amount_of("memory", huge) == MAX_QUANTITY_MAGNITUDE
    with pytest.raises(QuantityError, match="overflows") as raised:
        amount_of("cpu", huge)
    assert '"cpu"' in str(raised.value)
    assert amount_of("cpu", Quantity.parse("9223372036854775")) == 9223372036854775000


def test_parse_resource_list() -> None:
    amounts = parse_resource_list(
        {
            "cpu": "1.5",
            "memory": "1Gi",
            "pods": 110,
            "nvidia.com/gpu": 1,
            "ephemeral-storage": "20G",
            "example.com/float": 0.5,
        }
    )
    assert amounts == {
        "cpu": 1500,
        "memory": 2**30,
        "pods": 110,
        "nvidia.com/gpu": 1,
        "ephemeral-storage": 20 * 10**9,
        "example.com/float": 1,
    }
    assert parse_resource_list({}) == {}
    assert parse_resource_list({"cpu": 0.25}) == {"cpu": 250}
    assert parse_resource_list({"cpu": "0"}) == {"cpu": 0}


def test_a_quantity_repeated_across_resource_lists_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # A cluster's 20,000 pods name a few quantities over and over: each is parsed once.
    parsed: list[object] = []
    parse = Quantity.parse

    def counted(text: str | int | float) -> Quantity:
        parsed.append(text)
        return parse(text)

    monkeypatch.setattr(Quantity, "parse", staticmethod(counted))
    for _ in range(3):
        assert parse_resource_list({"cpu": "1234m", "memory": "777Mi"}) == {
            "cpu": 1234,
            "memory": 777 * 2**20,
        }
    # The same number written three ways is three entries, each with its own amount.
    assert parse_resource_list({"cpu": 4321, "example.com/a": 4321.5, "example.com/b": "4321"}) == {
        "cpu": 4321000,
        "example.com/a": 4322,
        "example.com/b": 4321,
    }
    assert parse_resource_list({"cpu": 4321.0}) == {"cpu": 4321000}
    assert parsed == ["1234m", "777Mi", 4321, 4321.5, "4321", 4321.0]
    # A quantity that cannot be read is refused every time it is met, not only the first.
    for _ in range(2):
        with pytest.raises(QuantityError, match='resource "memory": invalid quantity "5q"'):
            parse_resource_list({"memory": "5q"})


@pytest.mark.parametrize(
    ("mapping", "fragment"),
    [
        ({"memory": "12x"}, 'resource "memory": invalid quantity "12x": unknown suffix "x"'),
        ({"memory": "-1Gi"}, 'resource "memory": quantity "-1Gi" must not be negative'),
        ({"cpu": -1}, 'resource "cpu": quantity "-1" must not be negative'),
        ({"cpu": None}, 'resource "cpu": expected a quantity string or number, got NoneType'),
        ({"cpu": True}, 'resource "cpu": expected a quantity string or number, got bool'),
        ({"cpu": ["1"]}, 'resource "cpu": expected a quantity string or number, got list'),
        ({"cpu": "9223372036854775807"}, 'resource "cpu" overflows'),
        ({"memory": "9223372036854775808"}, 'resource "memory": invalid quantity'),
    ],
)
def test_parse_resource_list_errors_name_the_resource(mapping: dict[str, object], fragment: str) -> None:
    with pytest.raises(QuantityError) as raised:
        parse_resource_list(mapping)
    assert fragment in str(raised.value)


@pytest.mark.parametrize(
    ("resource_name", "amount", "text"),
    [
        ("cpu", 500, "500m"),
        ("cpu", 2000, "2"),
        ("cpu", 0, "0"),
        ("cpu", 1001, "1001m"),
        ("cpu", -500, "-500m"),
        ("cpu", -2000, "-2"),
        ("memory", 2**30, "1Gi"),
        ("memory", 512 * 2**20, "512Mi"),
        ("memory", 1536 * 2**20, "1536Mi"),
        ("memory", 1000, "1000"),
        ("memory", 1023, "1023"),
        ("memory", 1024, "1Ki"),
        ("memory", 1025, "1025"),
        ("memory", 0, "0"),
        ("memory", -(2**30), "-1Gi"),
        ("memory", 2**62, "4Ei"),
        ("memory", 2**70, "1024Ei"),
        ("ephemeral-storage", 20 * 2**30, "20Gi"),
        ("storage", 2**40, "1Ti"),
        ("hugepages-1Gi", 2 * 2**30, "2Gi"),
        ("pods", 110, "110"),
        ("pods", 1024, "1024"),
        ("nvidia.com/gpu", 4, "4"),
    ],
)
def test_format_amount(resource_name: str, amount: int, text: str) -> None:
    assert format_amount(resource_name, amount) == text
    if abs(amount) <= MAX_QUANTITY_MAGNITUDE:
        # What is printed parses back to the same amount.
        assert amount_of(resource_name, Quantity.parse(text)) == amount


def test_add_and_subtract_amounts() -> None:
    node: ResourceAmounts = {"cpu": 4000, "memory": 8 * 2**30, "pods": 110}
    pod: ResourceAmounts = {"cpu": 500, "memory": 2**30, "nvidia.com/gpu": 1}
    assert add_amounts(node, pod) == {"cpu": 4500, "memory": 9 * 2**30, "pods": 110, "nvidia.com/gpu": 1}
    assert subtract_amounts(node, pod) == {
        "cpu": 3500,
        "memory": 7 * 2**30,
        "pods": 110,
        "nvidia.com/gpu": -1,
    }
    # The inputs are left alone.
    assert node == {"cpu": 4000, "memory": 8 * 2**30, "pods": 110}
    assert add_amounts({}, {}) == {}
    assert subtract_amounts({}, {"cpu": 1}) == {"cpu": -1}


def test_max_amounts() -> None:
    assert max_amounts({"cpu": 100, "memory": 5}, {"cpu": 50, "pods": 1}) == {
        "cpu": 100,
        "memory": 5,
        "pods": 1,
    }
    assert max_amounts({"cpu": -5}, {}) == {"cpu": -5}
    assert max_amounts({}, {"cpu": -5}) == {"cpu": -5}
    assert max_amounts({"cpu": -5}, {"cpu": -3}) == {"cpu": -3}


@pytest.mark.parametrize(
    ("request_amounts", "available", "expected_fit", "exceeded"),
    [
        ({}, {}, True, []),
        ({"cpu": 500}, {"cpu": 500}, True, []),
        ({"cpu": 501}, {"cpu": 500}, False, ["cpu"]),
        ({"cpu": 500, "memory": 10}, {"cpu": 1000, "memory": 9}, False, ["memory"]),
        ({"nvidia.com/gpu": 1}, {"cpu": 1000}, False, ["nvidia.com/gpu"]),
        ({"nvidia.com/gpu": 0}, {"cpu": 1000}, True, []),
        ({"cpu": 0}, {"cpu": -100}, True, []),
        ({"cpu": 1}, {"cpu": -100}, False, ["cpu"]),
        ({"pods": 1, "cpu": 2, "memory": 3}, {}, False, ["cpu", "memory", "pods"]),
        ({"cpu": -1}, {}, True, []),
    ],
)
def test_fits_and_exceeded_resources(
    request_amounts: dict[str, int], available: dict[str, int], expected_fit: bool, exceeded: list[str]
) -> None:
    assert fits(request_amounts, available) is expected_fit
    assert exceeded_resources(request_amounts, available) == exceeded


# --- properties ----------------------------------------------------------------

_nanos = st.integers(min_value=-MAX_QUANTITY_MAGNITUDE * 10**9, max_value=MAX_QUANTITY_MAGNITUDE * 10**9)
_round_nanos = st.builds(
    lambda mantissa, exponent: mantissa * 10**exponent,
    st.integers(min_value=-(10**6), max_value=10**6),
    st.integers(min_value=0, max_value=24),
)
_binary_units = st.builds(
    lambda mantissa, power: mantissa * 1024**power * 10**9,
    st.integers(min_value=-1023, max_value=1023),
    st.integers(min_value=0, max_value=6),
)
_quantities = st.builds(
    lambda nanos, quantity_format: Quantity(Fraction(nanos, 10**9), quantity_format),
    st.one_of(_nanos, _round_nanos, _binary_units).filter(lambda n: abs(n) <= MAX_QUANTITY_MAGNITUDE * 10**9),
    st.sampled_from(list(QuantityFormat)),
)


@given(_quantities)
def test_canonical_form_parses_back_to_the_same_value(quantity: Quantity) -> None:
    canonical = str(quantity)
    parsed = Quantity.parse(canonical)
    assert parsed == quantity
    if quantity.format is not BINARY:
        assert str(parsed) == canonical
    # A binary-SI amount with no exact binary suffix prints as plain digits,
    # which read back as decimal SI ("5000" becomes "5k", as in Kubernetes);
    # from then on the form is stable.
    assert str(Quantity.parse(str(parsed))) == str(parsed)


@given(_quantities, _quantities)
def test_addition_and_subtraction_are_exact(a: Quantity, b: Quantity) -> None:
    assert (a + b).value == a.value + b.value
    assert (a + b) - b == a
    assert a + b == b + a


_written = st.builds(
    lambda sign, integer, fraction, suffix: f"{sign}{integer}{fraction}{suffix}",
    st.sampled_from(["", "+", "-"]),
    st.from_regex(r"[0-9]{1,8}", fullmatch=True),
    st.one_of(st.just(""), st.from_regex(r"\.[0-9]{0,10}", fullmatch=True)),
    st.sampled_from(["", "n", "u", "m", "k", "M", "G", "Ki", "Mi", "Gi", "e3", "E-2", "e+1", "e-12"]),
)


@given(_written)
def test_any_written_quantity_is_canonicalised_stably(text: str) -> None:
    quantity = Quantity.parse(text)
    canonical = str(quantity)
    assert Quantity.parse(canonical) == quantity
    assert str(Quantity.parse(canonical)) == canonical
    if quantity.value >= 0:
        assert quantity.milli() >= quantity.value * 1000 > quantity.milli() - 1
        assert quantity.ceil() >= quantity.value > quantity.ceil() - 1


def test_how_many_fit_counts_by_the_scarcest_resource() -> None:
    assert how_many_fit({"cpu": 1000, "memory": 2**30}, {"cpu": 3500, "memory": 5 * 2**30}) == 3
    # A resource the room lacks, or has run below zero of, fits none.
    assert how_many_fit({"nvidia.com/gpu": 1}, {"cpu": 4000}) == 0
    assert how_many_fit({"cpu": 100}, {"cpu": -50}) == 0
    # Nothing requested fits without bound.
    assert how_many_fit({"cpu": 0}, {}) == 1 << 30
