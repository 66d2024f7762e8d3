"""NodeOverlay (``karpenter.sh/v1alpha1``): prices and extended capacity that are not the cloud's.

A NodeOverlay states what the cloud's catalog cannot know: a negotiated price
(Savings Plan, reserved instance, a licence fee per host) and extended
resources a node will report (hugepages, GPU slices a device plugin adds). It
selects instance types and offerings by ``spec.requirements`` (well-known
labels, ``karpenter.sh/nodepool`` and the NodePool template's labels) and then
sets the price (``spec.price``, absolute), moves it (``spec.priceAdjustment``:
``+0.5``/``-0.5`` dollars, ``+10%``/``-15%``, never below 0), or adds
``spec.capacity`` (extended resources only). ``spec.weight`` (1..10000, unset
is 0) orders overlays; how they combine is :mod:`karpy.scheduling.overlays`.

Here: the model, its parser (the CRD's patterns and CEL rules, so ``karpy
validate`` refuses what the API server would), Karpenter's runtime validation
(:func:`runtime_problem`: what a CRD cannot check), and the arithmetic of a
price change (:func:`adjusted_price`). Field names, condition type and reasons
and annotation keys are Karpenter v1.15's. Behind the ``NodeOverlay`` feature
gate, alpha and off by default, as in Karpenter.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from karpy.api._reader import FieldReader, ManifestError
from karpy.api.conditions import Condition, find_condition
from karpy.api.core import read_resources
from karpy.api.meta import ObjectMeta
from karpy.api.quantity import ResourceAmounts
from karpy.api.requirements import (
    CAPACITY_TYPE_ON_DEMAND,
    CAPACITY_TYPE_RESERVED,
    CAPACITY_TYPE_SPOT,
    LABEL_CAPACITY_TYPE,
    LABEL_HOSTNAME,
    LABEL_NODEPOOL,
    LABEL_VALUE_PATTERN,
    NORMALIZED_LABELS,
    Operator,
    Requirement,
    RequirementError,
    Requirements,
    is_restricted_label,
    label_value_problem,
)

GROUP = "karpenter.sh"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "NodeOverlay"
FEATURE_GATE = "NodeOverlay"

# Set "true" on a NodeClaim whose instance types include one an overlay priced or sized.
PRICE_OVERLAY_APPLIED = f"{GROUP}/price-overlay-applied"
CAPACITY_OVERLAY_APPLIED = f"{GROUP}/capacity-overlay-applied"

CONDITION_VALIDATION_SUCCEEDED = "ValidationSucceeded"
CONDITION_READY = "Ready"
REASON_RUNTIME_VALIDATION = "RuntimeValidation"
REASON_CONFLICT = "Conflict"
CONFLICT_MESSAGE = "conflict with another overlay"

MAX_REQUIREMENTS = 100
MIN_WEIGHT = 1
MAX_WEIGHT = 10000
# Resources an overlay may not set: the instance type's own.
RESTRICTED_CAPACITY = ("cpu", "memory", "ephemeral-storage", "pods")
PRICE_PATTERN = r"^\d+(\.\d+)?$"
PRICE_ADJUSTMENT_PATTERN = r"^(([+-]{1}(\d*\.?\d+))|(\+{1}\d*\.?\d+%)|(^(-\d{1,2}(\.\d+)?%)$)|(-100%))$"
# The operators a NodeOverlay requirement takes (Karpenter's enum).
OPERATORS = tuple(operator.value for operator in Operator)
NUMERIC_OPERATORS = (Operator.GT, Operator.LT, Operator.GTE, Operator.LTE)

# The CRD's messages, shared with karpy.api.crds so the two say the same.
MESSAGE_BOTH_PRICES = "cannot set both 'price' and 'priceAdjustment'"
MESSAGE_NOT_IN_VALUES = "requirements with operator 'NotIn' must have a value defined"
MESSAGE_IN_VALUES = "requirements with operator 'In' must have a value defined"
MESSAGE_NUMERIC = "requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value"
MESSAGE_RESTRICTED_CAPACITY = "invalid resource restricted"
MESSAGE_KARPENTER_DOMAIN = 'label domain "karpenter.sh" is restricted'
MESSAGE_HOSTNAME = 'label "kubernetes.io/hostname" is restricted'
# Karpenter keys an overlay may name in the restricted karpenter.sh domain.
ALLOWED_KARPENTER_KEYS = (LABEL_CAPACITY_TYPE, LABEL_NODEPOOL)
_KNOWN_CAPACITY_TYPES = frozenset({CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT, CAPACITY_TYPE_RESERVED})
_QUALIFIED_NAME = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$"
)


@dataclass(frozen=True, slots=True)
class OverlayRequirement:
    """One requirement as written (Karpenter keeps them so: runtime validation reads the operator)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def requirement(self) -> Requirement:
        return Requirement.from_operator(self.key, self.operator, self.values)

    def to_dict(self) -> dict[str, object]:
        result: dict[str, object] = {"key": self.key, "operator": self.operator}
        if self.values:
            result["values"] = list(self.values)
        return result


@dataclass(frozen=True, slots=True)
class NodeOverlaySpec:
    requirements: tuple[OverlayRequirement, ...] = ()
    price: str | None = None
    price_adjustment: str | None = None
    # None: not set (an empty map is set, and sets nothing).
    capacity: ResourceAmounts | None = None
    weight: int | None = None

    @classmethod
    def parse(cls, reader: FieldReader) -> NodeOverlaySpec:
        if not reader.has("requirements"):
            raise reader.error("requirements", "Required value")
        requirements = reader.items("requirements", _parse_requirement)
        if len(requirements) > MAX_REQUIREMENTS:
            raise reader.error("requirements", f"must have at most {MAX_REQUIREMENTS} items")
        price = reader.scalar_str("price")
        adjustment = reader.scalar_str("priceAdjustment")
        if price is not None and not re.match(PRICE_PATTERN, price):
            raise reader.error("price", f"should match '{PRICE_PATTERN}'")
        if adjustment is not None and not re.match(PRICE_ADJUSTMENT_PATTERN, adjustment):
            raise reader.error("priceAdjustment", f"should match '{PRICE_ADJUSTMENT_PATTERN}'")
        if price is not None and adjustment is not None:
            raise reader.error("price", MESSAGE_BOTH_PRICES)
        capacity = read_resources(reader, "capacity") if reader.has("capacity") else None
        if capacity is not None and any(name in RESTRICTED_CAPACITY for name in capacity):
            raise reader.error("capacity", MESSAGE_RESTRICTED_CAPACITY)
        weight = reader.integer("weight")
        if weight is not None and not MIN_WEIGHT <= weight <= MAX_WEIGHT:
            raise reader.error("weight", f"must be between {MIN_WEIGHT} and {MAX_WEIGHT}")
        return cls(requirements, price, adjustment, capacity, weight)

    @property
    def price_change(self) -> str | None:
        """What the overlay does to a price: ``price`` (absolute) or ``priceAdjustment``, None: neither."""
        return self.price if self.price is not None else self.price_adjustment

    def requirement_set(self) -> Requirements:
        return Requirements(*(requirement.requirement() for requirement in self.requirements))


def _parse_requirement(item: FieldReader) -> OverlayRequirement:
    key = item.required_str("key")
    operator = item.required_str("operator")
    values = item.str_list("values")
    if operator not in OPERATORS:
        raise item.error(
            "operator", f'Unsupported value: "{operator}": supported values: {", ".join(OPERATORS)}'
        )
    if not _QUALIFIED_NAME.match(key) or len(key) > 316:
        raise item.error("key", "must be a qualified label key")
    domain = key.partition("/")[0] if "/" in key else ""
    if domain.endswith(GROUP) and key not in ALLOWED_KARPENTER_KEYS:
        raise item.error("key", MESSAGE_KARPENTER_DOMAIN)
    if key == LABEL_HOSTNAME:
        raise item.error("key", MESSAGE_HOSTNAME)
    for value in values:
        if len(value) > 63 or not re.match(LABEL_VALUE_PATTERN, value):
            raise item.error("values", label_value_problem(value) or "not a label value")
    if operator == Operator.NOT_IN and not values:
        raise item.error("values", MESSAGE_NOT_IN_VALUES)
    if operator == Operator.IN and not values:
        raise item.error("values", MESSAGE_IN_VALUES)
    if operator in NUMERIC_OPERATORS and (len(values) != 1 or not values[0].isdigit()):
        raise item.error("values", MESSAGE_NUMERIC)
    requirement = OverlayRequirement(key, operator, values)
    try:
        requirement.requirement()
    except RequirementError as error:
        raise ManifestError(item.path, str(error)) from error
    return requirement


@dataclass(frozen=True, slots=True)
class NodeOverlayStatus:
    conditions: tuple[Condition, ...] = ()

    @classmethod
    def parse(cls, reader: FieldReader) -> NodeOverlayStatus:
        return cls(conditions=reader.items("conditions", Condition.parse))

    def to_dict(self) -> dict[str, object]:
        return (
            {"conditions": [condition.to_dict() for condition in self.conditions]} if self.conditions else {}
        )

    @property
    def validation(self) -> Condition | None:
        return find_condition(self.conditions, CONDITION_VALIDATION_SUCCEEDED)


@dataclass(frozen=True, slots=True)
class NodeOverlay:
    metadata: ObjectMeta
    spec: NodeOverlaySpec = field(default_factory=NodeOverlaySpec)
    status: NodeOverlayStatus = field(default_factory=NodeOverlayStatus)

    kind = KIND

    @classmethod
    def parse(cls, reader: FieldReader) -> NodeOverlay:
        if not reader.has("spec"):
            raise reader.error("spec", "Required value")
        return cls(
            metadata=ObjectMeta.parse(reader.obj("metadata"), namespaced=False),
            spec=NodeOverlaySpec.parse(reader.obj("spec")),
            status=NodeOverlayStatus.parse(reader.obj("status")),
        )

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def weight(self) -> int:
        """The weight overlays are ordered by: unset is 0."""
        return self.spec.weight or 0

    def with_status(self, status: NodeOverlayStatus) -> NodeOverlay:
        return dataclasses.replace(self, status=status)


def by_weight(overlays: Iterable[NodeOverlay]) -> list[NodeOverlay]:
    """Karpenter's order: the highest weight first; of equal weights, the name later in the alphabet first."""
    ordered = sorted(overlays, key=lambda overlay: overlay.name, reverse=True)
    return sorted(ordered, key=lambda overlay: overlay.weight, reverse=True)


def runtime_problem(overlay: NodeOverlay) -> str | None:
    """What Karpenter's runtime validation finds wrong with ``overlay`` (None: nothing).

    What a CRD cannot check: each requirement as Karpenter validates a
    NodePool's (a restricted label, a capacity type no offering has, a key
    that is not a qualified name, an empty ``In``/``NotIn``), and capacity
    naming a resource the instance type owns. An overlay read past its CRD
    meets these only if it was stored before the CRD refused them, or comes
    from a file ``karpy validate`` checks the same way.
    """
    problems: list[str] = []
    for written in overlay.spec.requirements:
        key = NORMALIZED_LABELS.get(written.key, written.key)
        if is_restricted_label(key):
            problems.append(f"invalid value: label {key} is restricted in requirements, restricted")
        if (
            key == LABEL_CAPACITY_TYPE
            and written.operator == Operator.IN
            and not set(written.values) & _KNOWN_CAPACITY_TYPES
        ):
            problems.append(
                f"invalid value: no valid values found for {key}, expected one of: "
                f"{', '.join(sorted(_KNOWN_CAPACITY_TYPES))} in requirements, restricted"
            )
        if not _QUALIFIED_NAME.match(key):
            problems.append(f"invalid value: key {key} is not a qualified name in requirements, restricted")
        if written.operator in (Operator.IN, Operator.NOT_IN) and not written.values:
            problems.append(f"key {key} with operator {written.operator} must have a value defined")
    for name in sorted(overlay.spec.capacity or {}):
        if name in RESTRICTED_CAPACITY:
            problems.append(f"invalid capacity: {name} in resource, restricted")
    return "; ".join(problems) if problems else None


def adjusted_price(price: float, change: str | None) -> float:
    """``price`` after an overlay's ``change`` (Karpenter's AdjustedPrice).

    No sign: the change is the new price. ``+x``/``-x``: added. ``+x%``/``-x%``:
    scaled. An adjusted price below 0 is 0.
    """
    if not change:
        return price
    if not change.startswith(("+", "-")):
        return float(change)
    percent = change.endswith("%")
    adjusted = price * (1 + float(change[:-1]) / 100) if percent else price + float(change)
    return adjusted if adjusted >= 0 and not math.isnan(adjusted) else 0.0
