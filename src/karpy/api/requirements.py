"""Node selector requirements as a set algebra, with Karpenter's semantics.

Scheduling in Karpenter is mostly the question "can these constraints hold at
the same time?": a pod's nodeSelector and node affinity against a NodePool's
requirements, against an instance type's labels, against an offering's zone
and capacity type. Kubernetes writes each constraint as a
``NodeSelectorRequirement`` (key, operator, values), and comparing operators
pairwise (In against NotIn, Gt against In ...) would need a rule for every
pair. Karpenter instead turns every requirement on a label key into one
*set of allowed values*:

* a finite set (``In [a b]``; ``DoesNotExist`` is the empty finite set), or
* the complement of a finite set (``NotIn [a b]``; ``Exists`` is the
  complement of the empty set),
* optionally narrowed by integer bounds (``Gt``/``Lt``, exclusive), under
  which a value is allowed only if it is an integer strictly between them.

Intersection of two such sets is again such a set, so any number of
constraints on a key collapse into one :class:`Requirement`, and
"compatible" becomes "the intersection is not empty". :class:`Requirements`
holds one Requirement per key and implements Karpenter's ``Compatible`` and
``Intersects`` checks, which the scheduler calls for every pod against every
candidate, so the hot paths here avoid building sets just to test them
(:meth:`Requirement.has_intersection`) and never use regular expressions.

Quirks inherited from Karpenter on purpose, because karpy must decide
exactly as Karpenter does:

* ``DoesNotExist`` and an empty ``In`` are the same set, so the intersection
  of ``In [a]`` and ``In [b]`` reads as ``DoesNotExist``; and ``Exists``
  intersected with ``NotIn [a]`` is just ``NotIn [a]``.
  :meth:`Requirements.intersects` therefore tolerates an empty intersection
  when both sides are NotIn/DoesNotExist (a node without the label satisfies
  both).
* Bounds only matter for complement sets; a finite set is filtered by the
  bounds and then forgets them.
* ``NotIn`` with no values is accepted and means ``Exists`` (Karpenter does
  not reject it; Kubernetes pod validation would).
* Keys using the deprecated beta labels (``beta.kubernetes.io/arch``,
  ``failure-domain.beta.kubernetes.io/zone`` ...) are rewritten to their
  stable names by :meth:`Requirement.from_operator` and
  :meth:`Requirements.from_labels`.

Deliberate differences: ``Gte``/``Lte`` are stored as the equivalent
exclusive bounds (``Gte 4`` is ``Gt 3``), so only two bounds exist; an
integer range with no integer inside (``Gt 4`` and ``Lt 5``) is recognised
as empty, which the older Karpenter check (``greaterThan >= lessThan``)
missed; and :meth:`Requirement.any` is deterministic where Karpenter picks at
random, so simulations replay identically.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum


class RequirementError(ValueError):
    """A node selector requirement that is not valid."""


class Operator(StrEnum):
    """The operators of Karpenter's ``NodeSelectorRequirementWithMinValues``."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"
    GT = "Gt"
    LT = "Lt"
    GTE = "Gte"
    LTE = "Lte"


_OPERATORS_BY_NAME: dict[str, Operator] = {operator.value: operator for operator in Operator}

# --- Well-known label keys and values ---------------------------------------

KARPENTER_GROUP = "karpenter.sh"
AWS_GROUP = "karpenter.k8s.aws"

LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_REGION = "topology.kubernetes.io/region"
LABEL_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
LABEL_ARCH = "kubernetes.io/arch"
LABEL_OS = "kubernetes.io/os"
LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_WINDOWS_BUILD = "node.kubernetes.io/windows-build"
LABEL_CAPACITY_TYPE = f"{KARPENTER_GROUP}/capacity-type"
LABEL_NODEPOOL = f"{KARPENTER_GROUP}/nodepool"

ARCHITECTURE_AMD64 = "amd64"
ARCHITECTURE_ARM64 = "arm64"
OS_LINUX = "linux"
OS_WINDOWS = "windows"

CAPACITY_TYPE_SPOT = "spot"
CAPACITY_TYPE_ON_DEMAND = "on-demand"
CAPACITY_TYPE_RESERVED = "reserved"

AWS_LABEL_CAPACITY_RESERVATION_ID = f"{AWS_GROUP}/capacity-reservation-id"
AWS_LABEL_CAPACITY_RESERVATION_TYPE = f"{AWS_GROUP}/capacity-reservation-type"
AWS_LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE = f"{AWS_GROUP}/capacity-reservation-interruptible"
AWS_LABEL_INSTANCE_HYPERVISOR = f"{AWS_GROUP}/instance-hypervisor"
AWS_LABEL_INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED = f"{AWS_GROUP}/instance-encryption-in-transit-supported"
AWS_LABEL_INSTANCE_CATEGORY = f"{AWS_GROUP}/instance-category"
AWS_LABEL_INSTANCE_FAMILY = f"{AWS_GROUP}/instance-family"
AWS_LABEL_INSTANCE_GENERATION = f"{AWS_GROUP}/instance-generation"
AWS_LABEL_INSTANCE_LOCAL_NVME = f"{AWS_GROUP}/instance-local-nvme"
AWS_LABEL_INSTANCE_SIZE = f"{AWS_GROUP}/instance-size"
AWS_LABEL_INSTANCE_CPU = f"{AWS_GROUP}/instance-cpu"
AWS_LABEL_INSTANCE_CPU_MANUFACTURER = f"{AWS_GROUP}/instance-cpu-manufacturer"
AWS_LABEL_INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ = f"{AWS_GROUP}/instance-cpu-sustained-clock-speed-mhz"
AWS_LABEL_INSTANCE_MEMORY = f"{AWS_GROUP}/instance-memory"
AWS_LABEL_INSTANCE_EBS_BANDWIDTH = f"{AWS_GROUP}/instance-ebs-bandwidth"
AWS_LABEL_INSTANCE_NETWORK_BANDWIDTH = f"{AWS_GROUP}/instance-network-bandwidth"
AWS_LABEL_INSTANCE_GPU_NAME = f"{AWS_GROUP}/instance-gpu-name"
AWS_LABEL_INSTANCE_GPU_MANUFACTURER = f"{AWS_GROUP}/instance-gpu-manufacturer"
AWS_LABEL_INSTANCE_GPU_COUNT = f"{AWS_GROUP}/instance-gpu-count"
AWS_LABEL_INSTANCE_GPU_MEMORY = f"{AWS_GROUP}/instance-gpu-memory"
AWS_LABEL_INSTANCE_ACCELERATOR_NAME = f"{AWS_GROUP}/instance-accelerator-name"
AWS_LABEL_INSTANCE_ACCELERATOR_MANUFACTURER = f"{AWS_GROUP}/instance-accelerator-manufacturer"
AWS_LABEL_INSTANCE_ACCELERATOR_COUNT = f"{AWS_GROUP}/instance-accelerator-count"
AWS_LABEL_TOPOLOGY_ZONE_ID = "topology.k8s.aws/zone-id"

CORE_WELL_KNOWN_LABELS: frozenset[str] = frozenset(
    {
        LABEL_NODEPOOL,
        LABEL_ZONE,
        LABEL_REGION,
        LABEL_INSTANCE_TYPE,
        LABEL_ARCH,
        LABEL_OS,
        LABEL_CAPACITY_TYPE,
        LABEL_WINDOWS_BUILD,
    }
)
"""Karpenter core's well-known labels: in restricted domains, yet usable in requirements."""

AWS_WELL_KNOWN_LABELS: frozenset[str] = frozenset(
    {
        AWS_LABEL_CAPACITY_RESERVATION_ID,
        AWS_LABEL_CAPACITY_RESERVATION_TYPE,
        AWS_LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE,
        AWS_LABEL_INSTANCE_HYPERVISOR,
        AWS_LABEL_INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED,
        AWS_LABEL_INSTANCE_CATEGORY,
        AWS_LABEL_INSTANCE_FAMILY,
        AWS_LABEL_INSTANCE_GENERATION,
        AWS_LABEL_INSTANCE_LOCAL_NVME,
        AWS_LABEL_INSTANCE_SIZE,
        AWS_LABEL_INSTANCE_CPU,
        AWS_LABEL_INSTANCE_CPU_MANUFACTURER,
        AWS_LABEL_INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ,
        AWS_LABEL_INSTANCE_MEMORY,
        AWS_LABEL_INSTANCE_EBS_BANDWIDTH,
        AWS_LABEL_INSTANCE_NETWORK_BANDWIDTH,
        AWS_LABEL_INSTANCE_GPU_NAME,
        AWS_LABEL_INSTANCE_GPU_MANUFACTURER,
        AWS_LABEL_INSTANCE_GPU_COUNT,
        AWS_LABEL_INSTANCE_GPU_MEMORY,
        AWS_LABEL_INSTANCE_ACCELERATOR_NAME,
        AWS_LABEL_INSTANCE_ACCELERATOR_MANUFACTURER,
        AWS_LABEL_INSTANCE_ACCELERATOR_COUNT,
        AWS_LABEL_TOPOLOGY_ZONE_ID,
    }
)
"""The labels the AWS provider adds to Karpenter's well-known set."""

# Karpenter's kwok provider's instance-type labels (a KWOKNodeClass may offer its types).
KWOK_LABEL_INSTANCE_SIZE = "karpenter.kwok.sh/instance-size"
KWOK_LABEL_INSTANCE_FAMILY = "karpenter.kwok.sh/instance-family"
KWOK_LABEL_INSTANCE_CPU = "karpenter.kwok.sh/instance-cpu"
KWOK_LABEL_INSTANCE_MEMORY = "karpenter.kwok.sh/instance-memory"

KWOK_WELL_KNOWN_LABELS: frozenset[str] = frozenset(
    {
        KWOK_LABEL_INSTANCE_SIZE,
        KWOK_LABEL_INSTANCE_FAMILY,
        KWOK_LABEL_INSTANCE_CPU,
        KWOK_LABEL_INSTANCE_MEMORY,
    }
)
"""The labels Karpenter's kwok provider adds to the well-known set (its ``labels.go``)."""

WELL_KNOWN_LABELS: frozenset[str] = CORE_WELL_KNOWN_LABELS | AWS_WELL_KNOWN_LABELS | KWOK_WELL_KNOWN_LABELS
"""Labels Karpenter knows the values of (from instance types and offerings).

A pod may require one of these even when a NodePool does not mention it: the
instance types supply the values. Any other key a pod requires must be
defined by the NodePool (see :meth:`Requirements.compatible`).
"""

RESTRICTED_LABEL_DOMAINS: frozenset[str] = frozenset({"kubernetes.io", "k8s.io", KARPENTER_GROUP, AWS_GROUP})
"""Label domains the kubelet refuses to self-set or Karpenter reserves (suffix match)."""

LABEL_DOMAIN_EXCEPTIONS: frozenset[str] = frozenset(
    {
        "kops.k8s.io",
        "node.kubernetes.io",
        "node-restriction.kubernetes.io",
        "node-role.kubernetes.io",
    }
)
"""Sub-domains of the restricted domains that may still be used for custom labels."""

MAX_LABEL_VALUE_LENGTH = 63
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
"""Kubernetes' label values: empty, or alphanumerics with ``-_.`` inside, at most 63 characters."""


def label_value_problem(value: str) -> str:
    """Why ``value`` is not a valid label value, or "" if it is one."""
    if len(value) > MAX_LABEL_VALUE_LENGTH:
        return f"label value {value!r} is longer than {MAX_LABEL_VALUE_LENGTH} characters"
    if not re.fullmatch(LABEL_VALUE_PATTERN, value):
        return f"label value {value!r} must be alphanumerics with '-', '_' or '.' inside"
    return ""


RESTRICTED_LABELS: frozenset[str] = frozenset({LABEL_HOSTNAME})
"""Individual labels that would interfere with provisioning (the hostname is per node)."""

NORMALIZED_LABELS: Mapping[str, str] = {
    "failure-domain.beta.kubernetes.io/zone": LABEL_ZONE,
    "failure-domain.beta.kubernetes.io/region": LABEL_REGION,
    "beta.kubernetes.io/arch": LABEL_ARCH,
    "beta.kubernetes.io/os": LABEL_OS,
    "beta.kubernetes.io/instance-type": LABEL_INSTANCE_TYPE,
}
"""Deprecated label keys and the stable keys Karpenter reads them as."""

MAX_MIN_VALUES = 50
"""Karpenter's upper limit for ``minValues`` (its CRD schema maximum)."""

COMPLEMENT_LENGTH = sys.maxsize
"""``len()`` of ``Exists``; a complement of n values has length ``COMPLEMENT_LENGTH - n``."""

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_INT64_DIGITS = 19
_MAX_LISTED_VALUES = 5


def _label_domain(key: str) -> str:
    domain, separator, _name = key.partition("/")
    return domain if separator else ""


def is_restricted_node_label(key: str) -> bool:
    """Whether Karpenter leaves ``key`` off the labels it puts on a node itself.

    True for well-known labels (the cloud provider sets those from the
    launched instance), for the hostname, and for keys in a restricted domain
    unless the domain is one of :data:`LABEL_DOMAIN_EXCEPTIONS`. Domains are
    matched by plain suffix, as Karpenter does, so ``foo.kubernetes.io`` is
    restricted too.
    """
    if key in WELL_KNOWN_LABELS:
        return True
    domain = _label_domain(key)
    if domain:
        for exception in LABEL_DOMAIN_EXCEPTIONS:
            if domain.endswith(exception):
                return False
        for restricted in RESTRICTED_LABEL_DOMAINS:
            if domain.endswith(restricted):
                return True
    return key in RESTRICTED_LABELS


def is_restricted_label(key: str) -> bool:
    """Whether a NodePool may not use ``key`` in its labels or requirements (Karpenter's IsRestrictedLabel).

    Well-known labels are allowed; anything else in a restricted domain is not.
    """
    return key not in WELL_KNOWN_LABELS and is_restricted_node_label(key)


def _parse_integer(text: str) -> int | None:
    """``text`` as an int64 the way Go's ``strconv.Atoi`` reads it, else None.

    Python's ``int()`` would also accept spaces, underscores and non-ASCII
    digits, none of which Kubernetes treats as a number.
    """
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not digits.isascii() or not digits.isdigit():
        return None
    significant = digits.lstrip("0")
    if len(significant) > _INT64_DIGITS:
        return None
    value = int(significant) if significant else 0
    if text[0] == "-":
        value = -value
    if value < _INT64_MIN or value > _INT64_MAX:
        return None
    return value


def _within_bounds(value: str, greater_than: int | None, less_than: int | None) -> bool:
    """Whether ``value`` is an integer strictly inside the bounds (callers check some bound is set)."""
    number = _parse_integer(value)
    if number is None:
        return False
    if greater_than is not None and number <= greater_than:
        return False
    return less_than is None or number < less_than


def _bounds_are_empty(greater_than: int | None, less_than: int | None) -> bool:
    # Exclusive bounds: some integer lies strictly between them only if they
    # are at least two apart.
    return greater_than is not None and less_than is not None and greater_than + 1 >= less_than


def _first_free_integer(greater_than: int, less_than: int, *excluded: frozenset[str]) -> int | None:
    """The smallest integer strictly between the bounds whose decimal form no set excludes.

    Every integer rejected is a distinct member of some excluded set, so this
    runs at most ``sum(len(e)) + 1`` steps however wide the range is.
    """
    candidate = greater_than + 1
    while candidate < less_than:
        text = str(candidate)
        if not any(text in values for values in excluded):
            return candidate
        candidate += 1
    return None


def _max_optional(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if a > b else b


def _min_optional(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if a < b else b


def _format_values(values: frozenset[str]) -> str:
    # Karpenter prints Go's %s of a sorted slice, trimmed to five values.
    listed = sorted(values)
    if len(listed) > _MAX_LISTED_VALUES:
        listed = [*listed[:_MAX_LISTED_VALUES], f"and {len(listed) - _MAX_LISTED_VALUES} others"]
    return "[" + " ".join(listed) + "]"


def _check_min_values(key: str, min_values: int | None, value_count: int | None) -> None:
    if min_values is None:
        return
    if isinstance(min_values, bool) or not isinstance(min_values, int):
        raise RequirementError(f'requirement "{key}": minValues must be an integer')
    if min_values < 1 or min_values > MAX_MIN_VALUES:
        raise RequirementError(
            f'requirement "{key}": minValues must be between 1 and {MAX_MIN_VALUES}, got {min_values}'
        )
    if value_count is not None and min_values > value_count:
        raise RequirementError(
            f'requirement "{key}": minValues {min_values} is more than the {value_count} value(s) given'
        )


@dataclass(frozen=True, slots=True)
class Requirement:
    """The set of values one label key may take.

    ``complement`` False: the allowed values are exactly ``values``.
    ``complement`` True: every value *except* ``values`` is allowed.
    ``greater_than``/``less_than`` are exclusive integer bounds; when either
    is set, only integer values strictly inside them are allowed.
    ``min_values`` is Karpenter's flexibility knob: at least that many
    distinct values must remain possible when instance types are chosen.

    Build these with :meth:`from_operator`; the constructor takes the fields
    as they are, which is how :meth:`intersection` builds its results.

    A Requirement is always truthy; ``len()`` counts allowed values
    (:data:`COMPLEMENT_LENGTH` minus the excluded ones for a complement).
    """

    key: str
    complement: bool
    values: frozenset[str] = frozenset()
    greater_than: int | None = None
    less_than: int | None = None
    min_values: int | None = None

    @classmethod
    def from_operator(
        cls,
        key: str,
        operator: str,
        values: Iterable[str] = (),
        min_values: int | None = None,
    ) -> Requirement:
        """A requirement from Kubernetes' (key, operator, values[, minValues]) form, validated.

        ``In`` needs at least one value; ``Gt``/``Lt``/``Gte``/``Lte`` exactly
        one integer; ``Exists``/``DoesNotExist`` none. ``minValues`` must be
        1..50 and, for ``In``, no more than the number of distinct values.
        """
        if not key:
            raise RequirementError("requirement key must not be empty")
        if isinstance(values, str):
            # A bare string would silently become a set of its characters.
            raise RequirementError(f'requirement "{key}": values must be a list of strings, not a string')
        key = NORMALIZED_LABELS.get(key, key)
        if operator == Operator.IN:
            # The overwhelmingly common case (every label, most affinities).
            value_set = frozenset(values)
            _check_value_types(key, value_set)
            if not value_set:
                raise RequirementError(f'requirement "{key}" with operator In must have at least one value')
            _check_min_values(key, min_values, len(value_set))
            return cls(key, False, value_set, None, None, min_values)
        known = _OPERATORS_BY_NAME.get(operator)
        if known is None:
            raise RequirementError(
                f'requirement "{key}": unknown operator "{operator}" '
                f"(expected one of {', '.join(_OPERATORS_BY_NAME)})"
            )
        listed = tuple(values)
        _check_value_types(key, listed)
        _check_min_values(key, min_values, None)
        if known is Operator.NOT_IN:
            return cls(key, True, frozenset(listed), None, None, min_values)
        if known in (Operator.EXISTS, Operator.DOES_NOT_EXIST):
            if listed:
                raise RequirementError(f'requirement "{key}" with operator {known} must not have values')
            return cls(key, known is Operator.EXISTS, frozenset(), None, None, min_values)
        if len(listed) != 1:
            raise RequirementError(
                f'requirement "{key}" with operator {known} must have exactly one value, got {len(listed)}'
            )
        bound = _parse_integer(listed[0])
        if bound is None:
            raise RequirementError(
                f'requirement "{key}" with operator {known} needs an integer value, got "{listed[0]}"'
            )
        if known is Operator.GT:
            return cls(key, True, frozenset(), bound, None, min_values)
        if known is Operator.GTE:
            return cls(key, True, frozenset(), bound - 1, None, min_values)
        if known is Operator.LT:
            return cls(key, True, frozenset(), None, bound, min_values)
        return cls(key, True, frozenset(), None, bound + 1, min_values)

    def has(self, value: str) -> bool:
        """Whether a node labelled ``key=value`` satisfies this requirement."""
        if (value in self.values) == self.complement:
            return False
        if self.greater_than is None and self.less_than is None:
            return True
        return _within_bounds(value, self.greater_than, self.less_than)

    def allows_absent_label(self) -> bool:
        """Whether a node *without* this label satisfies it (Kubernetes' matching).

        Only ``DoesNotExist`` and an unbounded ``NotIn`` do; ``Exists`` and
        the integer comparisons need the label to be there.
        """
        if not self.complement:
            return not self.values
        return bool(self.values) and self.greater_than is None and self.less_than is None

    def intersection(self, other: Requirement) -> Requirement:
        """The values both requirements allow, as one requirement (Karpenter's Intersection).

        ``min_values`` becomes the larger of the two. Contradictory bounds
        collapse to ``DoesNotExist``.
        """
        if other is self:
            return self
        if other.key != self.key:
            raise RequirementError(f'cannot intersect requirements on "{self.key}" and "{other.key}"')
        complement = self.complement and other.complement
        greater_than = _max_optional(self.greater_than, other.greater_than)
        less_than = _min_optional(self.less_than, other.less_than)
        min_values = _max_optional(self.min_values, other.min_values)
        if _bounds_are_empty(greater_than, less_than):
            return Requirement(self.key, False, frozenset(), None, None, min_values)
        if self.complement:
            values = self.values | other.values if other.complement else other.values - self.values
        else:
            values = self.values - other.values if other.complement else self.values & other.values
        if greater_than is not None or less_than is not None:
            values = frozenset(value for value in values if _within_bounds(value, greater_than, less_than))
            if not complement:
                # The surviving concrete values already satisfy the bounds.
                greater_than = less_than = None
        return Requirement(self.key, complement, values, greater_than, less_than, min_values)

    def has_intersection(self, other: Requirement) -> bool:
        """Whether some value satisfies both, without building the intersection.

        Equivalent to ``not self.intersection(other).is_empty()``; this is
        the check the scheduler runs in its inner loop.
        """
        greater_than = _max_optional(self.greater_than, other.greater_than)
        less_than = _min_optional(self.less_than, other.less_than)
        if _bounds_are_empty(greater_than, less_than):
            return False
        bounded = greater_than is not None or less_than is not None
        if self.complement and other.complement:
            if greater_than is None or less_than is None:
                # Infinitely many candidates, finitely many excluded.
                return True
            return _first_free_integer(greater_than, less_than, self.values, other.values) is not None
        if self.complement:
            candidates, excluded = other.values, self.values
            for value in candidates:
                if value not in excluded and (not bounded or _within_bounds(value, greater_than, less_than)):
                    return True
            return False
        if other.complement:
            candidates, excluded = self.values, other.values
            for value in candidates:
                if value not in excluded and (not bounded or _within_bounds(value, greater_than, less_than)):
                    return True
            return False
        smaller, larger = (self.values, other.values)
        if len(smaller) > len(larger):
            smaller, larger = larger, smaller
        for value in smaller:
            if value in larger and (not bounded or _within_bounds(value, greater_than, less_than)):
                return True
        return False

    def is_empty(self) -> bool:
        """Whether no label value satisfies it.

        ``DoesNotExist`` is empty in this sense: only the label's absence
        satisfies it (see :meth:`allows_absent_label`).
        """
        greater_than, less_than = self.greater_than, self.less_than
        if _bounds_are_empty(greater_than, less_than):
            return True
        if not self.complement:
            if greater_than is None and less_than is None:
                return not self.values
            return not any(_within_bounds(value, greater_than, less_than) for value in self.values)
        if greater_than is None or less_than is None:
            return False
        return _first_free_integer(greater_than, less_than, self.values) is None

    def any(self) -> str | None:
        """One value that satisfies the requirement, chosen deterministically, or None.

        A finite set gives its smallest value (string order). A complement
        with bounds gives the integer nearest the lower bound that is not
        excluded, or with only an upper bound the nearest below it. An
        unbounded complement (``Exists``, ``NotIn``) has no particular value
        to offer and gives None, as does an empty requirement.
        """
        greater_than, less_than = self.greater_than, self.less_than
        if not self.complement:
            if greater_than is None and less_than is None:
                return min(self.values) if self.values else None
            inside = [value for value in self.values if _within_bounds(value, greater_than, less_than)]
            return min(inside) if inside else None
        if greater_than is None and less_than is None:
            return None
        if _bounds_are_empty(greater_than, less_than):
            return None
        if greater_than is not None:
            candidate = greater_than + 1
            while less_than is None or candidate < less_than:
                if str(candidate) not in self.values:
                    return str(candidate)
                candidate += 1
            return None
        assert less_than is not None  # one of the bounds is set, and it is not greater_than
        candidate = less_than - 1
        while str(candidate) in self.values:
            candidate -= 1
        return str(candidate)

    def operator(self) -> Operator:
        """The Kubernetes operator that best describes it, as Karpenter writes it back.

        A bound wins (``Gt`` before ``Lt``), then the set forms: ``NotIn`` or
        ``Exists`` for a complement, ``In`` or ``DoesNotExist`` otherwise.
        """
        if self.greater_than is not None:
            return Operator.GT
        if self.less_than is not None:
            return Operator.LT
        if self.complement:
            return Operator.NOT_IN if self.values else Operator.EXISTS
        return Operator.IN if self.values else Operator.DOES_NOT_EXIST

    def to_node_selector_requirement(self) -> dict[str, object]:
        """One Kubernetes ``NodeSelectorRequirementWithMinValues`` dict, as Karpenter emits it.

        Like Karpenter this shows only the first of: lower bound, upper bound,
        the value set. A requirement with several parts (``NotIn [a]`` and
        ``Gt 4``) loses the others; use :meth:`to_node_selector_requirements`
        where the full constraint must survive.
        """
        operator = self.operator()
        result: dict[str, object] = {"key": self.key, "operator": operator.value}
        if operator is Operator.GT:
            result["values"] = [str(self.greater_than)]
        elif operator is Operator.LT:
            result["values"] = [str(self.less_than)]
        elif self.values:
            result["values"] = sorted(self.values)
        if self.min_values is not None:
            result["minValues"] = self.min_values
        return result

    def to_node_selector_requirements(self) -> list[dict[str, object]]:
        """The requirement as Kubernetes dicts whose conjunction is exactly this set."""
        parts: list[dict[str, object]] = []
        if self.complement:
            if self.values:
                parts.append(
                    {"key": self.key, "operator": Operator.NOT_IN.value, "values": sorted(self.values)}
                )
            if self.greater_than is not None:
                parts.append(
                    {"key": self.key, "operator": Operator.GT.value, "values": [str(self.greater_than)]}
                )
            if self.less_than is not None:
                parts.append(
                    {"key": self.key, "operator": Operator.LT.value, "values": [str(self.less_than)]}
                )
            if not parts:
                parts.append({"key": self.key, "operator": Operator.EXISTS.value})
        else:
            # A finite set filtered by its bounds says everything the bounds did.
            allowed = self.values
            if self.greater_than is not None or self.less_than is not None:
                allowed = frozenset(
                    v for v in allowed if _within_bounds(v, self.greater_than, self.less_than)
                )
            if allowed:
                parts.append({"key": self.key, "operator": Operator.IN.value, "values": sorted(allowed)})
            else:
                parts.append({"key": self.key, "operator": Operator.DOES_NOT_EXIST.value})
        if self.min_values is not None:
            for part in parts:
                part["minValues"] = self.min_values
        return parts

    def __len__(self) -> int:
        if self.complement:
            return COMPLEMENT_LENGTH - len(self.values)
        if self.greater_than is None and self.less_than is None:
            return len(self.values)
        return sum(1 for value in self.values if _within_bounds(value, self.greater_than, self.less_than))

    def __bool__(self) -> bool:
        # A requirement is a constraint, not a container: `if requirement:`
        # must not mean "allows some value" (DoesNotExist would be falsy).
        return True

    def __str__(self) -> str:
        parts = [self.key]
        if self.complement:
            if self.values:
                parts.append(f"NotIn {_format_values(self.values)}")
            elif self.greater_than is None and self.less_than is None:
                parts.append("Exists")
        elif self.values:
            parts.append(f"In {_format_values(self.values)}")
        else:
            parts.append("DoesNotExist")
        if self.greater_than is not None:
            parts.append(f"Gt {self.greater_than}")
        if self.less_than is not None:
            parts.append(f"Lt {self.less_than}")
        if self.min_values is not None:
            parts.append(f"minValues {self.min_values}")
        return " ".join(parts)


def _check_value_types(key: str, values: Iterable[object]) -> None:
    for value in values:
        if not isinstance(value, str):
            raise RequirementError(f'requirement "{key}": values must be strings, got {type(value).__name__}')


class Requirements:
    """One :class:`Requirement` per label key: the conjunction of them all.

    Adding a requirement on a key already present intersects the two, so a
    Requirements is always the tightest single set per key. Iterating yields
    the Requirement objects (each knows its key) in key order, so error
    messages and simulations are deterministic; :meth:`keys` gives the keys.
    :meth:`get` on an absent key returns ``Exists``, as Karpenter's does:
    an unconstrained key allows anything.

    This is mutable (``add``) like Karpenter's map; use :meth:`copy` or
    :meth:`intersection` to derive a new set without touching this one.
    """

    __slots__ = ("_by_key", "_identity", "_sorted_keys")

    def __init__(self, *requirements: Requirement) -> None:
        self._by_key: dict[str, Requirement] = {}
        self._sorted_keys: tuple[str, ...] | None = ()
        self._identity: frozenset[Requirement] | None = None
        self.add(*requirements)

    def add(self, *requirements: Requirement) -> None:
        """Constrain further: each requirement is intersected with any on the same key."""
        by_key = self._by_key
        self._identity = None
        for requirement in requirements:
            existing = by_key.get(requirement.key)
            if existing is None:
                self._sorted_keys = None
                by_key[requirement.key] = requirement
            else:
                by_key[requirement.key] = requirement.intersection(existing)

    def copy(self) -> Requirements:
        # Skips __init__: a solver copies requirements for every pod it places.
        duplicate = object.__new__(Requirements)
        duplicate._by_key = dict(self._by_key)
        duplicate._sorted_keys = self._sorted_keys
        duplicate._identity = self._identity
        return duplicate

    def intersection(self, other: Requirements) -> Requirements:
        """A new Requirements holding both sets of constraints."""
        result = self.copy()
        result.add(*other._by_key.values())
        return result

    def identity(self) -> frozenset[Requirement]:
        """A hashable value, equal for equal Requirements: a cache key far cheaper than ``str``."""
        identity = self._identity
        if identity is None:
            identity = frozenset(self._by_key.values())
            self._identity = identity
        return identity

    def _keys_in_order(self) -> tuple[str, ...]:
        keys = self._sorted_keys
        if keys is None:
            keys = tuple(sorted(self._by_key))
            self._sorted_keys = keys
        return keys

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> Requirements:
        """Each label as ``key In [value]`` (a nodeSelector, or a node's or template's labels)."""
        requirements = cls()
        by_key = requirements._by_key
        for label_key, value in labels.items():
            key = NORMALIZED_LABELS.get(label_key, label_key)
            requirement = Requirement(key, False, frozenset((value,)))
            existing = by_key.get(key)
            # A deprecated and a stable key can both be present and collapse
            # onto one key; intersect rather than overwrite.
            by_key[key] = requirement if existing is None else requirement.intersection(existing)
        requirements._sorted_keys = None
        return requirements

    @classmethod
    def from_node_selector_requirements(cls, expressions: Iterable[Mapping[str, object]]) -> Requirements:
        """One nodeSelectorTerm's ``matchExpressions`` (dicts of key/operator/values/minValues), ANDed."""
        requirements = cls()
        for index, expression in enumerate(expressions):
            try:
                requirements.add(_requirement_from_mapping(expression))
            except RequirementError as error:
                raise RequirementError(f"matchExpressions[{index}]: {error}") from error
        return requirements

    # The name the API model was first described with; one term's
    # matchExpressions is exactly a list of node selector requirements.
    from_node_selector_terms = from_node_selector_requirements

    def get(self, key: str) -> Requirement:
        """The requirement on ``key``; ``Exists`` (anything goes) when there is none."""
        requirement = self._by_key.get(key)
        if requirement is None:
            return Requirement(key, True)
        return requirement

    def has_key(self, key: str) -> bool:
        return key in self._by_key

    def keys(self) -> tuple[str, ...]:
        """The constrained keys, sorted."""
        return self._keys_in_order()

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def __getitem__(self, key: str) -> Requirement:
        return self._by_key[key]

    def __iter__(self) -> Iterator[Requirement]:
        by_key = self._by_key
        return (by_key[key] for key in self._keys_in_order())

    def __len__(self) -> int:
        return len(self._by_key)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Requirements):
            return NotImplemented
        return self._by_key == other._by_key

    # Mutable (add), so unhashable, as a class defining __eq__ already is.
    __hash__ = None  # type: ignore[assignment]

    def intersects(self, other: Requirements) -> str | None:
        """None if every key both define can hold on both sides, else why not (Karpenter's Intersects).

        Keys defined on one side only are not checked. An empty intersection
        is still accepted when both sides are NotIn/DoesNotExist, since a
        node without the label satisfies both.
        """
        mine, theirs = self._by_key, other._by_key
        # Walk the smaller side's keys; sorted, so the first error is stable.
        walk = self if len(mine) <= len(theirs) else other
        for key in walk._keys_in_order():
            existing = mine.get(key)
            incoming = theirs.get(key)
            if existing is None or incoming is None or existing.has_intersection(incoming):
                continue
            # Karpenter's NotIn or DoesNotExist: a complement with values, or
            # a finite set without any.
            if incoming.complement == bool(incoming.values) and existing.complement == bool(existing.values):
                continue
            return f"key {key}, {incoming} not in {existing}"
        return None

    def compatible(
        self, other: Requirements, allowed_undefined: frozenset[str] = WELL_KNOWN_LABELS
    ) -> str | None:
        """None if ``other`` (say, a pod's) can be met by ``self`` (say, a NodePool's), else why not.

        Karpenter's Compatible: a key ``other`` requires but ``self`` does not
        define is an error, because nothing would ever put that label on the
        node, unless the key is in ``allowed_undefined`` (its values come from
        the instance types) or ``other`` only asks for NotIn/DoesNotExist,
        which a node without the label satisfies. Then every shared key must
        intersect (:meth:`intersects`).
        """
        mine = self._by_key
        theirs = other._by_key
        for key in other._keys_in_order():
            if key in mine or key in allowed_undefined:
                continue
            incoming = theirs[key]
            if incoming.complement == bool(incoming.values):
                continue
            return f'label "{key}" does not have known values'
        return self.intersects(other)

    def labels(self, *, include_well_known: bool = False) -> dict[str, str]:
        """The labels a node made from these requirements gets from them.

        One value per key whose requirement is a concrete (non-complement)
        set with a value (the smallest, see :meth:`Requirement.any`). Keys
        Karpenter does not set itself (:func:`is_restricted_node_label`) are
        left out, as in Karpenter, where the cloud provider sets the
        well-known ones from the instance actually launched; pass
        ``include_well_known=True`` to keep those too (a simulator has no
        cloud provider to do it).
        """
        result: dict[str, str] = {}
        by_key = self._by_key
        for key in self._keys_in_order():
            requirement = by_key[key]
            if requirement.complement:
                continue
            if is_restricted_node_label(key) and not (include_well_known and key in WELL_KNOWN_LABELS):
                continue
            value = requirement.any()
            if value is not None:
                result[key] = value
        return result

    def is_satisfied_by_labels(self, labels: Mapping[str, str]) -> str | None:
        """None if a node with ``labels`` meets every requirement, else the first that fails.

        A key missing from ``labels`` only satisfies requirements that allow
        the label to be absent (DoesNotExist, unbounded NotIn).
        """
        by_key = self._by_key
        for key in self._keys_in_order():
            requirement = by_key[key]
            value = labels.get(key)
            if value is None:
                if not requirement.allows_absent_label():
                    return f'label "{key}" is missing, but {requirement}'
            elif not requirement.has(value):
                return f'label "{key}={value}" does not satisfy {requirement}'
        return None

    def to_node_selector_requirements(self) -> list[dict[str, object]]:
        """Every requirement as Kubernetes dicts, in key order, losing nothing."""
        result: list[dict[str, object]] = []
        for requirement in self:
            result.extend(requirement.to_node_selector_requirements())
        return result

    def __str__(self) -> str:
        return ", ".join(str(requirement) for requirement in self)

    def __repr__(self) -> str:
        return f"Requirements({self})"


def _requirement_from_mapping(expression: Mapping[str, object]) -> Requirement:
    if not isinstance(expression, Mapping):
        raise RequirementError(f"expected a map with key and operator, got {type(expression).__name__}")
    key = expression.get("key")
    operator = expression.get("operator")
    if not isinstance(key, str) or not key:
        raise RequirementError("key must be a non-empty string")
    if not isinstance(operator, str):
        raise RequirementError(f'requirement "{key}": operator must be a string')
    raw_values = expression.get("values")
    if raw_values is None:
        values: tuple[str, ...] = ()
    elif isinstance(raw_values, list | tuple):
        _check_value_types(key, raw_values)
        values = tuple(str(value) for value in raw_values)
    else:
        raise RequirementError(f'requirement "{key}": values must be a list of strings')
    min_values = expression.get("minValues")
    if min_values is not None and (isinstance(min_values, bool) or not isinstance(min_values, int)):
        raise RequirementError(f'requirement "{key}": minValues must be an integer')
    return Requirement.from_operator(key, operator, values, min_values)
