"""Kubernetes resource quantities ("500m", "1.5Gi", "1e3"), held exactly.

Every resource number karpy reads (pod requests, node capacity, NodePool
limits, instance-type allocatable) is written as a Kubernetes *quantity*: a
decimal number with an optional suffix that is either binary SI (``Ki`` ...
``Ei``), decimal SI (``n u m k M G T P E``) or a decimal exponent (``e3``).
Getting these wrong in small ways is how an autoscaler ends up launching a
node that is one byte too small, or believing that ``0.1 + 0.2`` CPUs do not
fit into ``300m``. So this module never uses floating point for them:

* :class:`Quantity` keeps the value as a :class:`fractions.Fraction` together
  with the format it was written in, parses Kubernetes' grammar, and prints
  Kubernetes' canonical form, so ``str(Quantity.parse(s))`` is what
  ``kubectl`` would show for ``s``.
* The scheduler does not want fractions in its inner loop, so resources are
  reduced once, at the edge, to plain integers (:data:`ResourceAmounts`):
  ``cpu`` in millicores and everything else in whole base units, rounded up
  exactly as Kubernetes' ``MilliValue()`` and ``Value()`` round. The small
  helpers at the bottom (:func:`add_amounts`, :func:`fits`, ...) are the only
  arithmetic the scheduler needs on those dictionaries.

Where this deliberately differs from ``k8s.io/apimachinery``:

* Kubernetes *caps* a quantity larger than 2^63-1 at 2^63-1; karpy rejects it
  (``QuantityError``: "overflows"), because a silently capped request would
  make the scheduler reason about a number nobody wrote. ``cpu`` is also
  rejected when its millicore value overflows (see :func:`amount_of`).
* Kubernetes' scanner accepts a number without any digit (``"."``, ``"-"``,
  ``"Ki"``) as zero; karpy rejects it as garbage.
* A number with more than :data:`MAX_SIGNIFICANT_DIGITS` significant digits is
  rejected rather than rounded: no real manifest has one, and refusing keeps
  the exact arithmetic bounded.
* Arithmetic on :class:`Quantity` is exact and unbounded; only parsing
  enforces the 2^63-1 limit, as only parsing meets untrusted input.

What is kept from Kubernetes: values finer than one nano-unit are rounded *up*
(away from zero) to the next nano-unit when parsed, on the theory that if you
ask for some resource you should get some; a binary-SI value that is not a
whole number of at least 1024 prints in decimal SI; and the sum of two
quantities keeps the left operand's format unless it is zero.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction
from typing import TypeAlias


class QuantityError(ValueError):
    """A quantity that is not valid Kubernetes syntax, or is out of range."""


class QuantityFormat(StrEnum):
    """How a quantity was written, and therefore how it prints (Kubernetes' ``Format``)."""

    BINARY_SI = "BinarySI"
    DECIMAL_SI = "DecimalSI"
    DECIMAL_EXPONENT = "DecimalExponent"


MAX_QUANTITY_MAGNITUDE = 2**63 - 1
"""The largest magnitude Kubernetes represents, in base units (or millicores for cpu)."""

MAX_SIGNIFICANT_DIGITS = 100
"""Longest run of significant digits accepted; see the module docstring."""

MILLI_RESOURCES = frozenset({"cpu"})
"""Resources the scheduler counts in thousandths of a unit rather than whole units."""

ResourceAmounts: TypeAlias = dict[str, int]
"""Resource name to integer amount: millicores for ``cpu``, base units otherwise."""

_NANO_PER_UNIT = 10**9
_DIGITS = frozenset("0123456789")

# Binary SI suffixes, as the power of two they stand for.
_BINARY_SUFFIX_POWERS_OF_TWO = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
# Index i is the suffix for 1024**i; the canonical form never goes beyond "Ei".
_BINARY_SUFFIX_BY_POWER_OF_1024 = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
# Decimal SI suffixes, as the power of ten they stand for. "n" and "u" are not
# in Kubernetes' documented grammar but its parser accepts and prints them.
_DECIMAL_SUFFIX_EXPONENTS = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_DECIMAL_SUFFIX_BY_EXPONENT = {exponent: suffix for suffix, exponent in _DECIMAL_SUFFIX_EXPONENTS.items()}
_LARGEST_DECIMAL_SI_EXPONENT = 18
# An exponent this long cannot be an int64 in Kubernetes, and would make the
# exact value absurdly large or small here.
_MAX_EXPONENT_DIGITS = 18
# 2**63 - 1 has 19 digits, so any number whose leading digit sits at 10**19 or
# above overflows regardless of the rest.
_OVERFLOW_DECIMAL_EXPONENT = 19
# The largest binary suffix multiplies by 2**60 < 10**19; a number whose digits
# all sit below 10**(-9 - 19) therefore stays below one nano-unit even then.
_BINARY_HEADROOM_DECIMAL_DIGITS = 19

_BYTE_RESOURCES = frozenset({"memory", "ephemeral-storage", "storage"})
HUGEPAGES_PREFIX = "hugepages-"


def _round_away_from_zero(value: Fraction) -> int:
    """The integer at or beyond ``value`` away from zero, as Kubernetes' scaled values round."""
    return math.ceil(value) if value >= 0 else math.floor(value)


def _quote(text: str) -> str:
    return f'"{text}"'


@dataclass(frozen=True, slots=True, eq=False)
class Quantity:
    """An exact Kubernetes quantity: its value and the format it prints in.

    Equality, ordering and hashing look at the value only, so
    ``Quantity.parse("1Gi") == Quantity.parse("1073741824")``. The value is
    always a whole number of nano-units, as in Kubernetes; constructing one
    with a finer value raises :class:`QuantityError`.
    """

    value: Fraction
    format: QuantityFormat = QuantityFormat.DECIMAL_SI

    def __post_init__(self) -> None:
        # value is n/d in lowest terms; it is a whole number of nano-units
        # exactly when d divides 10**9.
        if _NANO_PER_UNIT % self.value.denominator != 0:
            raise QuantityError(f"quantity value {self.value} is not a whole number of nano-units")

    @classmethod
    def parse(cls, text: str | int | float) -> Quantity:
        """Parse Kubernetes' quantity syntax (or a YAML number) exactly.

        Strings follow Kubernetes' grammar: an optional sign, digits with an
        optional fraction (``"1.5"``, ``".5"``, ``"1."``), then an optional
        suffix. Integers are exact. Floats (YAML ``0.5``) are read through
        their shortest ``repr`` so ``0.1`` means one tenth, not the binary
        approximation of it.
        """
        if isinstance(text, bool):
            # bool is an int subclass, but `cpu: true` is a mistake, not 1 CPU.
            raise QuantityError(f"invalid quantity {_quote(str(text))}: expected a number, not a boolean")
        if isinstance(text, int):
            if abs(text) > MAX_QUANTITY_MAGNITUDE:
                raise QuantityError(f"invalid quantity {_quote(str(text))}: overflows 2^63-1")
            return cls(Fraction(text), QuantityFormat.DECIMAL_SI)
        if isinstance(text, float):
            if not math.isfinite(text):
                raise QuantityError(f"invalid quantity {_quote(repr(text))}: not a finite number")
            parsed = _parse_string(repr(text))
            # repr may use exponent notation ("1e-05"); a YAML number was not
            # written that way, so print it as plain decimal SI.
            return cls(parsed.value, QuantityFormat.DECIMAL_SI)
        if not isinstance(text, str):
            raise QuantityError(
                f"invalid quantity {_quote(str(text))}: expected a string or a number, "
                f"got {type(text).__name__}"
            )
        return _parse_string(text)

    @property
    def is_negative(self) -> bool:
        return self.value < 0

    @property
    def is_zero(self) -> bool:
        return self.value == 0

    def milli(self) -> int:
        """The value in thousandths, rounded away from zero (Kubernetes' ``MilliValue``)."""
        return _round_away_from_zero(self.value * 1000)

    def ceil(self) -> int:
        """The value as an integer, rounded away from zero (Kubernetes' ``Value``).

        For the non-negative amounts the scheduler deals in this is the
        ceiling; for a negative value it rounds towards minus infinity, as
        Kubernetes does.
        """
        return _round_away_from_zero(self.value)

    def __add__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        # Kubernetes keeps the receiver's format, except that adding to a
        # zero adopts the other operand's, so summing into an empty total
        # keeps the format the amounts were written in.
        result_format = other.format if self.value == 0 else self.format
        return Quantity(self.value + other.value, result_format)

    def __sub__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        result_format = other.format if self.value == 0 else self.format
        return Quantity(self.value - other.value, result_format)

    def __neg__(self) -> Quantity:
        return Quantity(-self.value, self.format)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __lt__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.value < other.value

    def __le__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.value <= other.value

    def __gt__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.value > other.value

    def __ge__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.value >= other.value

    def __str__(self) -> str:
        """Kubernetes' canonical form: no fractional digits, the largest suffix that keeps it exact."""
        value = self.value
        if value == 0:
            return "0"
        sign = "-" if value < 0 else ""
        magnitude = -value if value < 0 else value
        quantity_format = self.format
        if quantity_format is QuantityFormat.BINARY_SI:
            # Below 1024 or with a fraction a binary suffix would either be
            # pointless or lose precision, so Kubernetes switches to decimal.
            if magnitude >= 1024 and magnitude.denominator == 1:
                mantissa = magnitude.numerator
                power = 0
                while power < len(_BINARY_SUFFIX_BY_POWER_OF_1024) - 1 and mantissa % 1024 == 0:
                    mantissa //= 1024
                    power += 1
                return f"{sign}{mantissa}{_BINARY_SUFFIX_BY_POWER_OF_1024[power]}"
            quantity_format = QuantityFormat.DECIMAL_SI
        # Start from whole nano-units (exponent -9) and move the exponent up
        # in steps of three while that keeps the mantissa an integer.
        mantissa = magnitude.numerator * (_NANO_PER_UNIT // magnitude.denominator)
        exponent = -9
        is_si = quantity_format is QuantityFormat.DECIMAL_SI
        while mantissa % 1000 == 0 and not (is_si and exponent >= _LARGEST_DECIMAL_SI_EXPONENT):
            mantissa //= 1000
            exponent += 3
        if is_si:
            return f"{sign}{mantissa}{_DECIMAL_SUFFIX_BY_EXPONENT[exponent]}"
        return f"{sign}{mantissa}" if exponent == 0 else f"{sign}{mantissa}e{exponent}"

    def __repr__(self) -> str:
        return f"Quantity({str(self)!r})"


def _parse_string(text: str) -> Quantity:
    if not text:
        raise QuantityError('invalid quantity "": empty string')
    if any(character.isspace() for character in text):
        # Kubernetes does not trim; " 1" in a manifest is an error there too.
        raise QuantityError(f"invalid quantity {_quote(text)}: contains whitespace")
    end = len(text)
    position = 0
    negative = False
    if text[0] in "+-":
        negative = text[0] == "-"
        position = 1
    integer_start = position
    while position < end and text[position] in _DIGITS:
        position += 1
    integer_digits = text[integer_start:position]
    fraction_digits = ""
    if position < end and text[position] == ".":
        position += 1
        fraction_start = position
        while position < end and text[position] in _DIGITS:
            position += 1
        fraction_digits = text[fraction_start:position]
    if not integer_digits and not fraction_digits:
        raise QuantityError(f"invalid quantity {_quote(text)}: no digits")
    suffix = text[position:]

    power_of_two = _BINARY_SUFFIX_POWERS_OF_TWO.get(suffix)
    power_of_ten = 0
    if power_of_two is not None:
        quantity_format = QuantityFormat.BINARY_SI
    else:
        power_of_two = 0
        decimal_exponent = _DECIMAL_SUFFIX_EXPONENTS.get(suffix)
        if decimal_exponent is not None:
            quantity_format = QuantityFormat.DECIMAL_SI
            power_of_ten = decimal_exponent
        elif suffix[:1] in ("e", "E") and _is_signed_integer(suffix[1:]):
            exponent_digits = suffix[1:].lstrip("+-").lstrip("0")
            if len(exponent_digits) > _MAX_EXPONENT_DIGITS:
                raise QuantityError(f"invalid quantity {_quote(text)}: exponent out of range")
            quantity_format = QuantityFormat.DECIMAL_EXPONENT
            power_of_ten = int(suffix[1:])
        else:
            raise QuantityError(f"invalid quantity {_quote(text)}: unknown suffix {_quote(suffix)}")

    # The value is int(digits) * 10**decimal_scale * 2**power_of_two, where
    # leading zeros and trailing fractional zeros carry no information.
    digits = (integer_digits + fraction_digits).lstrip("0")
    decimal_scale = power_of_ten - len(fraction_digits)
    significant = digits.rstrip("0")
    decimal_scale += len(digits) - len(significant)
    if not significant:
        return Quantity(Fraction(0), quantity_format)
    digit_count = len(significant)
    # Decide the out-of-range cases from the digit positions alone, before
    # building a possibly enormous exact number.
    if digit_count - 1 + decimal_scale >= _OVERFLOW_DECIMAL_EXPONENT:
        raise QuantityError(f"invalid quantity {_quote(text)}: overflows 2^63-1")
    if digit_count + decimal_scale + _BINARY_HEADROOM_DECIMAL_DIGITS <= -9:
        # Smaller than one nano-unit: Kubernetes rounds it up to exactly that.
        tiny = Fraction(-1 if negative else 1, _NANO_PER_UNIT)
        return Quantity(tiny, _demote_small_binary(quantity_format, tiny))
    if digit_count > MAX_SIGNIFICANT_DIGITS:
        raise QuantityError(
            f"invalid quantity {_quote(text)}: more than {MAX_SIGNIFICANT_DIGITS} significant digits"
        )
    numerator = int(significant) << power_of_two
    if decimal_scale >= 0:
        magnitude = Fraction(numerator * 10**decimal_scale)
    else:
        magnitude = Fraction(numerator, 10**-decimal_scale)
    nanos = magnitude * _NANO_PER_UNIT
    if nanos.denominator != 1:
        magnitude = Fraction(_round_away_from_zero(nanos), _NANO_PER_UNIT)
    if magnitude > MAX_QUANTITY_MAGNITUDE:
        raise QuantityError(f"invalid quantity {_quote(text)}: overflows 2^63-1")
    value = -magnitude if negative else magnitude
    return Quantity(value, _demote_small_binary(quantity_format, value))


def _demote_small_binary(quantity_format: QuantityFormat, value: Fraction) -> QuantityFormat:
    # Kubernetes stores a binary-SI value strictly between -1 and 1 as decimal
    # SI, so "0.0001Ki" remembers a format it can actually print.
    if quantity_format is QuantityFormat.BINARY_SI and value != 0 and -1 < value < 1:
        return QuantityFormat.DECIMAL_SI
    return quantity_format


def _is_signed_integer(text: str) -> bool:
    digits = text[1:] if text[:1] in ("+", "-") else text
    return bool(digits) and all(character in _DIGITS for character in digits)


def amount_of(resource_name: str, quantity: Quantity) -> int:
    """The scheduler's integer for a quantity of ``resource_name``.

    ``cpu`` becomes millicores (so ``"100m"`` is 100 and ``"1"`` is 1000);
    every other resource becomes whole base units, rounded up, so a request of
    ``"0.5"`` pods or bytes never rounds down to nothing.
    """
    amount = quantity.milli() if resource_name in MILLI_RESOURCES else quantity.ceil()
    if abs(amount) > MAX_QUANTITY_MAGNITUDE:
        unit = "millicores" if resource_name in MILLI_RESOURCES else "units"
        raise QuantityError(
            f'quantity "{quantity}" of resource "{resource_name}" overflows: {amount} {unit} exceeds 2^63-1'
        )
    return amount


def parse_resource_list(mapping: Mapping[str, object]) -> ResourceAmounts:
    """A Kubernetes ResourceList (``{"cpu": "500m", "memory": "1Gi"}``) as integer amounts.

    Values may be strings or YAML numbers. Negative amounts are rejected:
    a ResourceList describes requests, capacity or limits, none of which can
    be below zero, and Kubernetes' own validation refuses them there too.
    """
    amounts: ResourceAmounts = {}
    for resource_name, raw in mapping.items():
        if isinstance(raw, bool) or not isinstance(raw, str | int | float):
            raise QuantityError(
                f'resource "{resource_name}": expected a quantity string or number, got {type(raw).__name__}'
            )
        amounts[resource_name] = _resource_amount(resource_name, raw)
    return amounts


# A cluster's pods repeat a few hundred quantities ("100m", "512Mi") tens of thousands of times,
# and an exact parse costs a few Fractions each: each pair is parsed once (errors are not kept).
@functools.lru_cache(maxsize=4096, typed=True)
def _resource_amount(resource_name: str, raw: str | int | float) -> int:
    try:
        quantity = Quantity.parse(raw)
    except QuantityError as error:
        raise QuantityError(f'resource "{resource_name}": {error}') from error
    if quantity.is_negative:
        raise QuantityError(f'resource "{resource_name}": quantity "{raw}" must not be negative')
    # amount_of's overflow message already names the resource.
    return amount_of(resource_name, quantity)


def _is_byte_resource(resource_name: str) -> bool:
    return resource_name in _BYTE_RESOURCES or resource_name.startswith(HUGEPAGES_PREFIX)


def format_amount(resource_name: str, amount: int) -> str:
    """An integer amount back as a quantity string a human (and Kubernetes) reads easily.

    ``cpu`` prints as whole cores when exact (``"2"``) and millicores
    otherwise (``"500m"``); byte-sized resources (memory, storage,
    hugepages) use the largest exact binary suffix (``"1Gi"``, ``"512Mi"``)
    and plain bytes when none fits; anything else is the plain integer.
    """
    if resource_name in MILLI_RESOURCES:
        if amount % 1000 == 0:
            return str(amount // 1000)
        return f"{amount}m"
    if _is_byte_resource(resource_name) and abs(amount) >= 1024:
        mantissa = amount
        power = 0
        while power < len(_BINARY_SUFFIX_BY_POWER_OF_1024) - 1 and mantissa % 1024 == 0:
            mantissa //= 1024
            power += 1
        return f"{mantissa}{_BINARY_SUFFIX_BY_POWER_OF_1024[power]}"
    return str(amount)


def add_amounts(a: Mapping[str, int], b: Mapping[str, int]) -> ResourceAmounts:
    """Per-resource sum; a resource missing from one side counts as zero there."""
    result = dict(a)
    for resource_name, amount in b.items():
        result[resource_name] = result.get(resource_name, 0) + amount
    return result


def subtract_amounts(a: Mapping[str, int], b: Mapping[str, int]) -> ResourceAmounts:
    """Per-resource ``a - b``; may go negative (an overcommitted node shows as such)."""
    result = dict(a)
    for resource_name, amount in b.items():
        result[resource_name] = result.get(resource_name, 0) - amount
    return result


def max_amounts(a: Mapping[str, int], b: Mapping[str, int]) -> ResourceAmounts:
    """Per-resource maximum; a resource present on one side only keeps that side's amount."""
    result = dict(a)
    for resource_name, amount in b.items():
        current = result.get(resource_name)
        if current is None or amount > current:
            result[resource_name] = amount
    return result


def how_many_fit(request: Mapping[str, int], room: Mapping[str, int]) -> int:
    """How many of ``request`` fit in ``room`` at once (a large number if nothing is requested).

    A resource absent from ``room`` counts as zero, as in :func:`fits`; negative room as none.
    """
    count = 1 << 30
    for resource_name, amount in request.items():
        if amount > 0:
            count = min(count, max(0, room.get(resource_name, 0)) // amount)
    return count


def fits(request: Mapping[str, int], available: Mapping[str, int]) -> bool:
    """Whether every requested resource is within what is available.

    A resource absent from ``available`` counts as zero available, so a pod
    asking for ``nvidia.com/gpu`` does not fit a node without GPUs; a zero
    (or negative) request always fits, even where nothing is left.
    """
    for resource_name, amount in request.items():
        if amount > 0 and amount > available.get(resource_name, 0):
            return False
    return True


def exceeded_resources(request: Mapping[str, int], available: Mapping[str, int]) -> list[str]:
    """The names of the requested resources that do not fit, sorted (for messages)."""
    return sorted(
        resource_name
        for resource_name, amount in request.items()
        if amount > 0 and amount > available.get(resource_name, 0)
    )
