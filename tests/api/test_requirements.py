"""Node selector requirements as sets: construction, intersection, compatibility, labels."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from karpy.api.requirements import (
    AWS_LABEL_INSTANCE_CATEGORY,
    AWS_LABEL_INSTANCE_CPU,
    CAPACITY_TYPE_ON_DEMAND,
    CAPACITY_TYPE_RESERVED,
    CAPACITY_TYPE_SPOT,
    COMPLEMENT_LENGTH,
    LABEL_ARCH,
    LABEL_CAPACITY_TYPE,
    LABEL_HOSTNAME,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    LABEL_OS,
    LABEL_REGION,
    LABEL_WINDOWS_BUILD,
    LABEL_ZONE,
    WELL_KNOWN_LABELS,
    Operator,
    Requirement,
    RequirementError,
    Requirements,
    is_restricted_label,
    is_restricted_node_label,
)

KEY = "example.com/key"


def requirement(operator: str, *values: str, min_values: int | None = None, key: str = KEY) -> Requirement:
    return Requirement.from_operator(key, operator, values, min_values)


# --- construction ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("operator", "values", "expected"),
    [
        ("In", ("a", "b", "a"), Requirement(KEY, False, frozenset({"a", "b"}), None, None)),
        ("NotIn", ("a",), Requirement(KEY, True, frozenset({"a"}), None, None)),
        ("NotIn", (), Requirement(KEY, True, frozenset(), None, None)),
        ("Exists", (), Requirement(KEY, True, frozenset(), None, None)),
        ("DoesNotExist", (), Requirement(KEY, False, frozenset(), None, None)),
        ("Gt", ("4",), Requirement(KEY, True, frozenset(), 4, None)),
        ("Gte", ("4",), Requirement(KEY, True, frozenset(), 3, None)),
        ("Lt", ("10",), Requirement(KEY, True, frozenset(), None, 10)),
        ("Lte", ("10",), Requirement(KEY, True, frozenset(), None, 11)),
        ("Gt", ("-3",), Requirement(KEY, True, frozenset(), -3, None)),
        ("Gt", ("+7",), Requirement(KEY, True, frozenset(), 7, None)),
        ("Lt", ("007",), Requirement(KEY, True, frozenset(), None, 7)),
        (Operator.IN, ("x",), Requirement(KEY, False, frozenset({"x"}), None, None)),
        (Operator.LTE, ("0",), Requirement(KEY, True, frozenset(), None, 1)),
    ],
)
def test_from_operator(operator: str, values: tuple[str, ...], expected: Requirement) -> None:
    assert Requirement.from_operator(KEY, operator, values) == expected


def test_from_operator_keeps_min_values_and_accepts_any_iterable() -> None:
    built = Requirement.from_operator(KEY, "In", ["a", "b", "c"], 2)
    assert built.min_values == 2
    assert Requirement.from_operator(KEY, "In", iter(["a"])).values == frozenset({"a"})
    assert Requirement.from_operator(KEY, "Exists", min_values=50).min_values == 50


@pytest.mark.parametrize(
    ("deprecated", "stable"),
    [
        ("beta.kubernetes.io/arch", LABEL_ARCH),
        ("beta.kubernetes.io/os", LABEL_OS),
        ("beta.kubernetes.io/instance-type", LABEL_INSTANCE_TYPE),
        ("failure-domain.beta.kubernetes.io/zone", LABEL_ZONE),
        ("failure-domain.beta.kubernetes.io/region", LABEL_REGION),
    ],
)
def test_deprecated_keys_are_normalized(deprecated: str, stable: str) -> None:
    assert Requirement.from_operator(deprecated, "In", ["v"]).key == stable
    assert Requirement.from_operator(deprecated, "Exists").key == stable
    assert Requirements.from_labels({deprecated: "v"}).keys() == (stable,)


@pytest.mark.parametrize(
    ("operator", "values", "min_values", "fragment"),
    [
        ("In", (), None, "must have at least one value"),
        ("Exists", ("a",), None, "must not have values"),
        ("DoesNotExist", ("a",), None, "must not have values"),
        ("Gt", (), None, "exactly one value, got 0"),
        ("Lt", ("1", "2"), None, "exactly one value, got 2"),
        ("Gte", ("four",), None, 'needs an integer value, got "four"'),
        ("Lte", ("1.5",), None, "needs an integer value"),
        ("Gt", (" 1",), None, "needs an integer value"),
        ("Gt", ("1_000",), None, "needs an integer value"),
        ("Gt", ("١",), None, "needs an integer value"),
        ("Gt", ("9223372036854775808",), None, "needs an integer value"),
        ("Gt", ("",), None, "needs an integer value"),
        ("Near", ("a",), None, 'unknown operator "Near"'),
        ("in", ("a",), None, 'unknown operator "in"'),
        ("In", ("a",), 0, "minValues must be between 1 and 50, got 0"),
        ("In", ("a",), 51, "between 1 and 50"),
        ("In", ("a", "b"), 3, "minValues 3 is more than the 2 value(s) given"),
        ("In", ("a", "a"), 2, "minValues 2 is more than the 1 value(s) given"),
        ("Exists", (), -1, "between 1 and 50"),
    ],
)
def test_from_operator_validation(
    operator: str, values: tuple[str, ...], min_values: int | None, fragment: str
) -> None:
    with pytest.raises(RequirementError) as raised:
        Requirement.from_operator(KEY, operator, values, min_values)
    assert fragment in str(raised.value)
    assert KEY in str(raised.value)


def test_from_operator_rejects_malformed_arguments() -> None:
    with pytest.raises(RequirementError, match="not a string"):
        Requirement.from_operator(KEY, "In", "amd64")
    with pytest.raises(RequirementError, match="must be strings"):
        Requirement.from_operator(KEY, "In", [1])  # type: ignore[list-item]
    with pytest.raises(RequirementError, match="must be strings"):
        Requirement.from_operator(KEY, "NotIn", [None])  # type: ignore[list-item]
    with pytest.raises(RequirementError, match="must not be empty"):
        Requirement.from_operator("", "Exists")
    with pytest.raises(RequirementError, match="minValues must be an integer"):
        Requirement.from_operator(KEY, "In", ["a"], True)


# --- membership -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("built", "allowed", "refused"),
    [
        (requirement("In", "a", "b"), ["a", "b"], ["c", "", "A"]),
        (requirement("NotIn", "a", "b"), ["c", "", "1"], ["a", "b"]),
        (requirement("Exists"), ["a", "", "1"], []),
        (requirement("DoesNotExist"), [], ["a", "", "1"]),
        (requirement("Gt", "4"), ["5", "100", "+5", "05"], ["4", "3", "-5", "a", "", "4.5", " 5", "5 "]),
        (requirement("Gte", "4"), ["4", "5"], ["3"]),
        (requirement("Lt", "4"), ["3", "-100", "0", "-0"], ["4", "5", "x"]),
        (requirement("Lte", "4"), ["4", "3"], ["5"]),
        (requirement("Gt", "4").intersection(requirement("Lt", "7")), ["5", "6"], ["4", "7"]),
        (requirement("NotIn", "5").intersection(requirement("Gt", "4")), ["6"], ["5", "4"]),
    ],
)
def test_has(built: Requirement, allowed: list[str], refused: list[str]) -> None:
    for value in allowed:
        assert built.has(value), value
    for value in refused:
        assert not built.has(value), value


@pytest.mark.parametrize(
    ("built", "absent_ok"),
    [
        (requirement("In", "a"), False),
        (requirement("NotIn", "a"), True),
        (requirement("Exists"), False),
        (requirement("DoesNotExist"), True),
        (requirement("Gt", "4"), False),
        (requirement("Lt", "4"), False),
        (requirement("NotIn", "a").intersection(requirement("Gt", "4")), False),
        (requirement("NotIn", "1").intersection(requirement("Gt", "4")), False),
    ],
)
def test_allows_absent_label(built: Requirement, absent_ok: bool) -> None:
    assert built.allows_absent_label() is absent_ok


# --- intersection -----------------------------------------------------------------

_IN_AB = requirement("In", "a", "b")
_IN_BC = requirement("In", "b", "c")
_NOT_IN_A = requirement("NotIn", "a")
_NOT_IN_B = requirement("NotIn", "b")
_EXISTS = requirement("Exists")
_DOES_NOT_EXIST = requirement("DoesNotExist")


@pytest.mark.parametrize(
    ("left", "right", "expected"),
    [
        # In ∩ In: the common values.
        (_IN_AB, _IN_BC, Requirement(KEY, False, frozenset({"b"}))),
        (_IN_AB, requirement("In", "c"), Requirement(KEY, False, frozenset())),
        # In ∩ NotIn: the In values not excluded.
        (_IN_AB, _NOT_IN_A, Requirement(KEY, False, frozenset({"b"}))),
        (requirement("In", "a"), _NOT_IN_A, Requirement(KEY, False, frozenset())),
        # NotIn ∩ NotIn: everything but either's exclusions.
        (_NOT_IN_A, _NOT_IN_B, Requirement(KEY, True, frozenset({"a", "b"}))),
        # Exists and DoesNotExist.
        (_EXISTS, _DOES_NOT_EXIST, Requirement(KEY, False, frozenset())),
        (_EXISTS, _IN_AB, _IN_AB),
        (_EXISTS, _NOT_IN_A, _NOT_IN_A),
        (_EXISTS, _EXISTS, _EXISTS),
        (_DOES_NOT_EXIST, _NOT_IN_A, _DOES_NOT_EXIST),
        (_DOES_NOT_EXIST, _IN_AB, _DOES_NOT_EXIST),
        # Bounds against concrete values: only integers inside survive, and
        # the bounds are dropped once the set is concrete.
        (
            requirement("In", "2", "4", "8", "16", "large"),
            requirement("Gt", "4"),
            Requirement(KEY, False, frozenset({"8", "16"})),
        ),
        (
            requirement("In", "2", "4", "8"),
            requirement("Lte", "4"),
            Requirement(KEY, False, frozenset({"2", "4"})),
        ),
        (requirement("In", "a"), requirement("Gt", "0"), Requirement(KEY, False, frozenset())),
        # Bounds against complements: kept, and exclusions outside them dropped.
        (requirement("Gt", "4"), requirement("Lt", "10"), Requirement(KEY, True, frozenset(), 4, 10)),
        (requirement("Gte", "4"), requirement("Lte", "10"), Requirement(KEY, True, frozenset(), 3, 11)),
        (requirement("Gt", "4"), requirement("Gt", "8"), Requirement(KEY, True, frozenset(), 8, None)),
        (requirement("Lt", "4"), requirement("Lt", "8"), Requirement(KEY, True, frozenset(), None, 4)),
        (
            requirement("NotIn", "a", "3", "6"),
            requirement("Gt", "4"),
            Requirement(KEY, True, frozenset({"6"}), 4, None),
        ),
        # Contradictory or integer-free ranges collapse to DoesNotExist.
        (requirement("Gt", "10"), requirement("Lt", "4"), _DOES_NOT_EXIST),
        (requirement("Gt", "4"), requirement("Lt", "4"), _DOES_NOT_EXIST),
        (requirement("Gt", "4"), requirement("Lt", "5"), _DOES_NOT_EXIST),
        (requirement("Gte", "5"), requirement("Lte", "4"), _DOES_NOT_EXIST),
        (requirement("Gt", "4"), requirement("Lt", "6"), Requirement(KEY, True, frozenset(), 4, 6)),
        (requirement("Gte", "5"), requirement("Lte", "5"), Requirement(KEY, True, frozenset(), 4, 6)),
        # minValues: the larger wins, even through an empty result.
        (
            requirement("In", "a", "b", "c", min_values=2),
            requirement("In", "a", "b", min_values=1),
            Requirement(KEY, False, frozenset({"a", "b"}), min_values=2),
        ),
        (
            requirement("In", "a", min_values=1),
            requirement("Exists"),
            Requirement(KEY, False, frozenset({"a"}), min_values=1),
        ),
        (
            requirement("Gt", "4", min_values=3),
            requirement("Lt", "2"),
            Requirement(KEY, False, frozenset(), min_values=3),
        ),
    ],
)
def test_intersection(left: Requirement, right: Requirement, expected: Requirement) -> None:
    assert left.intersection(right) == expected
    assert right.intersection(left) == expected
    assert left.has_intersection(right) is not expected.is_empty()
    assert right.has_intersection(left) is not expected.is_empty()


def test_intersection_with_itself_is_itself() -> None:
    assert _IN_AB.intersection(_IN_AB) is _IN_AB
    assert _IN_AB.intersection(requirement("In", "a", "b")) == _IN_AB


def test_intersection_requires_the_same_key() -> None:
    with pytest.raises(RequirementError, match="cannot intersect"):
        _IN_AB.intersection(requirement("In", "a", key="other"))


def test_has_intersection_is_exact_for_fully_excluded_integer_ranges() -> None:
    in_range = requirement("Gt", "4").intersection(requirement("Lt", "7"))
    assert in_range.has_intersection(requirement("NotIn", "5"))
    assert not in_range.has_intersection(requirement("NotIn", "5", "6"))
    assert in_range.intersection(requirement("NotIn", "5", "6")).is_empty()
    assert requirement("Gt", "4").has_intersection(requirement("NotIn", "5", "6"))


# --- emptiness and representatives ------------------------------------------------


@pytest.mark.parametrize(
    ("built", "empty", "representative"),
    [
        (requirement("In", "b", "a", "c"), False, "a"),
        (requirement("In", "10", "9"), False, "10"),
        (requirement("NotIn", "a"), False, None),
        (requirement("Exists"), False, None),
        (requirement("DoesNotExist"), True, None),
        (requirement("Gt", "4"), False, "5"),
        (requirement("Gte", "4"), False, "4"),
        (requirement("Lt", "4"), False, "3"),
        (requirement("Lt", "-4"), False, "-5"),
        (requirement("Gt", "4").intersection(requirement("NotIn", "5", "6")), False, "7"),
        (requirement("Lt", "4").intersection(requirement("NotIn", "3", "2")), False, "1"),
        (requirement("Gt", "4").intersection(requirement("Lt", "7")), False, "5"),
        (Requirement(KEY, True, frozenset({"5", "6"}), 4, 7), True, None),
        (Requirement(KEY, True, frozenset(), 4, 5), True, None),
        (Requirement(KEY, False, frozenset({"a", "3", "9"}), 4, None), False, "9"),
        (Requirement(KEY, False, frozenset({"a", "3"}), 4, None), True, None),
        (Requirement(KEY, False, frozenset({"5"}), 4, 5), True, None),
    ],
)
def test_is_empty_and_any(built: Requirement, empty: bool, representative: str | None) -> None:
    assert built.is_empty() is empty
    assert built.any() == representative
    if representative is not None:
        assert built.has(representative)


# --- describing -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("built", "operator", "text", "single"),
    [
        (
            requirement("In", "amd64", key=LABEL_ARCH),
            Operator.IN,
            "kubernetes.io/arch In [amd64]",
            {"key": LABEL_ARCH, "operator": "In", "values": ["amd64"]},
        ),
        (
            requirement("In", "b", "a"),
            Operator.IN,
            f"{KEY} In [a b]",
            {"key": KEY, "operator": "In", "values": ["a", "b"]},
        ),
        (
            requirement("NotIn", "spot", key=LABEL_CAPACITY_TYPE),
            Operator.NOT_IN,
            "karpenter.sh/capacity-type NotIn [spot]",
            {"key": LABEL_CAPACITY_TYPE, "operator": "NotIn", "values": ["spot"]},
        ),
        (
            requirement("Gt", "4", key=AWS_LABEL_INSTANCE_CPU),
            Operator.GT,
            "karpenter.k8s.aws/instance-cpu Gt 4",
            {"key": AWS_LABEL_INSTANCE_CPU, "operator": "Gt", "values": ["4"]},
        ),
        (
            requirement("Lte", "4"),
            Operator.LT,
            f"{KEY} Lt 5",
            {"key": KEY, "operator": "Lt", "values": ["5"]},
        ),
        (requirement("Exists"), Operator.EXISTS, f"{KEY} Exists", {"key": KEY, "operator": "Exists"}),
        (
            requirement("DoesNotExist"),
            Operator.DOES_NOT_EXIST,
            f"{KEY} DoesNotExist",
            {"key": KEY, "operator": "DoesNotExist"},
        ),
        (
            requirement("Gt", "4").intersection(requirement("Lt", "10")),
            Operator.GT,
            f"{KEY} Gt 4 Lt 10",
            {"key": KEY, "operator": "Gt", "values": ["4"]},
        ),
        (
            requirement("NotIn", "7").intersection(requirement("Gt", "4")),
            Operator.GT,
            f"{KEY} NotIn [7] Gt 4",
            {"key": KEY, "operator": "Gt", "values": ["4"]},
        ),
        (
            requirement("In", "a", "b", "c", min_values=2),
            Operator.IN,
            f"{KEY} In [a b c] minValues 2",
            {"key": KEY, "operator": "In", "values": ["a", "b", "c"], "minValues": 2},
        ),
        (
            requirement("In", "1", "2", "3", "4", "5", "6", "7"),
            Operator.IN,
            f"{KEY} In [1 2 3 4 5 and 2 others]",
            {"key": KEY, "operator": "In", "values": ["1", "2", "3", "4", "5", "6", "7"]},
        ),
    ],
)
def test_operator_str_and_node_selector_requirement(
    built: Requirement, operator: Operator, text: str, single: dict[str, object]
) -> None:
    assert built.operator() is operator
    assert str(built) == text
    assert built.to_node_selector_requirement() == single


@pytest.mark.parametrize(
    "built",
    [
        requirement("In", "a", "b"),
        requirement("NotIn", "a"),
        requirement("Exists"),
        requirement("DoesNotExist"),
        requirement("Gt", "4"),
        requirement("Lt", "4"),
        requirement("Gt", "4").intersection(requirement("Lt", "10")),
        requirement("NotIn", "5", "x")
        .intersection(requirement("Gt", "4"))
        .intersection(requirement("Lt", "9")),
        requirement("In", "a", "b", min_values=2),
        requirement("Gt", "4", min_values=3),
        Requirement(KEY, False, frozenset({"3", "8", "z"}), 4, None),
    ],
)
def test_node_selector_requirements_round_trip(built: Requirement) -> None:
    parts = built.to_node_selector_requirements()
    rebuilt = Requirements.from_node_selector_requirements(parts)
    assert rebuilt.get(KEY) == built.intersection(Requirement(KEY, True))
    assert all(set(part) <= {"key", "operator", "values", "minValues"} for part in parts)


def test_len_and_truthiness() -> None:
    assert len(requirement("In", "a", "b")) == 2
    assert len(requirement("DoesNotExist")) == 0
    assert len(requirement("Exists")) == COMPLEMENT_LENGTH == sys.maxsize
    assert len(requirement("NotIn", "a", "b")) == COMPLEMENT_LENGTH - 2
    assert len(Requirement(KEY, False, frozenset({"1", "5", "a"}), 2, None)) == 1
    # A constraint is truthy even when it allows nothing.
    assert bool(requirement("DoesNotExist"))


def test_requirements_are_hashable_values() -> None:
    assert requirement("In", "a", "b") == requirement("In", "b", "a")
    assert len({requirement("In", "a", "b"), requirement("In", "b", "a"), requirement("In", "a")}) == 2


# --- label restrictions ---------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "restricted", "restricted_node_label"),
    [
        (LABEL_ZONE, False, True),
        (LABEL_INSTANCE_TYPE, False, True),
        (LABEL_NODEPOOL, False, True),
        (LABEL_CAPACITY_TYPE, False, True),
        (LABEL_WINDOWS_BUILD, False, True),
        (AWS_LABEL_INSTANCE_CATEGORY, False, True),
        (LABEL_HOSTNAME, True, True),
        ("kubernetes.io/custom", True, True),
        ("foo.kubernetes.io/custom", True, True),
        ("k8s.io/custom", True, True),
        ("karpenter.sh/custom", True, True),
        ("karpenter.sh/registered", True, True),
        ("karpenter.k8s.aws/ec2nodeclass", True, True),
        ("node.kubernetes.io/custom", False, False),
        ("node-restriction.kubernetes.io/team", False, False),
        ("node-role.kubernetes.io/worker", False, False),
        ("kops.k8s.io/instancegroup", False, False),
        ("example.com/team", False, False),
        ("team", False, False),
        ("kubernetes.io", False, False),
    ],
)
def test_restricted_labels(key: str, restricted: bool, restricted_node_label: bool) -> None:
    assert is_restricted_label(key) is restricted
    assert is_restricted_node_label(key) is restricted_node_label


def test_well_known_labels() -> None:
    for key in (LABEL_ZONE, LABEL_REGION, LABEL_INSTANCE_TYPE, LABEL_ARCH, LABEL_OS, LABEL_CAPACITY_TYPE):
        assert key in WELL_KNOWN_LABELS
    assert LABEL_NODEPOOL in WELL_KNOWN_LABELS
    assert AWS_LABEL_INSTANCE_CPU in WELL_KNOWN_LABELS
    assert LABEL_HOSTNAME not in WELL_KNOWN_LABELS
    assert (CAPACITY_TYPE_SPOT, CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED) == (
        "spot",
        "on-demand",
        "reserved",
    )


# --- Requirements ---------------------------------------------------------------------


def test_requirements_add_intersects_per_key() -> None:
    requirements = Requirements(requirement("In", "a", "b", "c"), requirement("Exists", key="z"))
    requirements.add(requirement("NotIn", "a"), requirement("In", "1", key="m"))
    assert requirements.get(KEY) == Requirement(KEY, False, frozenset({"b", "c"}))
    assert requirements.keys() == (KEY, "m", "z")
    assert [r.key for r in requirements] == [KEY, "m", "z"]
    assert len(requirements) == 3
    assert KEY in requirements
    assert "absent" not in requirements
    assert requirements.has_key("m")
    assert not requirements.has_key("absent")
    assert requirements["m"] == requirement("In", "1", key="m")
    with pytest.raises(KeyError):
        requirements["absent"]


def test_requirements_get_absent_key_is_exists() -> None:
    assert Requirements().get("anything") == Requirement("anything", True)
    assert Requirements().get("anything").operator() is Operator.EXISTS


def test_requirements_copy_and_intersection_leave_the_original_alone() -> None:
    original = Requirements(requirement("In", "a", "b"))
    duplicate = original.copy()
    duplicate.add(requirement("In", "a"), requirement("Exists", key="new"))
    assert original == Requirements(requirement("In", "a", "b"))
    assert original.keys() == (KEY,)
    combined = original.intersection(Requirements(requirement("In", "b", "c")))
    assert combined.get(KEY).values == frozenset({"b"})
    assert original.get(KEY).values == frozenset({"a", "b"})


def test_requirements_equality_and_text() -> None:
    first = Requirements(requirement("In", "a"), requirement("Exists", key="b/key"))
    second = Requirements(requirement("Exists", key="b/key"), requirement("In", "a"))
    assert first == second
    assert first != Requirements(requirement("In", "a"))
    assert first != "not requirements"
    assert str(first) == f"b/key Exists, {KEY} In [a]"
    assert repr(first) == f"Requirements(b/key Exists, {KEY} In [a])"
    with pytest.raises(TypeError):
        hash(first)


def test_from_labels() -> None:
    requirements = Requirements.from_labels({LABEL_ARCH: "amd64", "team": "a"})
    assert requirements.get(LABEL_ARCH) == Requirement(LABEL_ARCH, False, frozenset({"amd64"}))
    assert requirements.keys() == (LABEL_ARCH, "team")
    # A node labelled with both the deprecated and the stable key.
    both = Requirements.from_labels({"beta.kubernetes.io/arch": "amd64", LABEL_ARCH: "amd64"})
    assert both.get(LABEL_ARCH).values == frozenset({"amd64"})


def test_from_node_selector_requirements() -> None:
    requirements = Requirements.from_node_selector_requirements(
        [
            {"key": LABEL_ARCH, "operator": "In", "values": ["amd64", "arm64"]},
            {"key": LABEL_ARCH, "operator": "NotIn", "values": ["arm64"]},
            {"key": AWS_LABEL_INSTANCE_CPU, "operator": "Gt", "values": ["4"], "minValues": 2},
            {"key": "team", "operator": "Exists"},
            {"key": "gpu", "operator": "DoesNotExist", "values": None},
        ]
    )
    assert requirements.get(LABEL_ARCH) == Requirement(LABEL_ARCH, False, frozenset({"amd64"}))
    assert requirements.get(AWS_LABEL_INSTANCE_CPU) == Requirement(
        AWS_LABEL_INSTANCE_CPU, True, frozenset(), 4, None, 2
    )
    assert requirements.get("team").operator() is Operator.EXISTS
    assert requirements.get("gpu").operator() is Operator.DOES_NOT_EXIST
    assert Requirements.from_node_selector_terms == Requirements.from_node_selector_requirements


@pytest.mark.parametrize(
    ("expressions", "fragment"),
    [
        ([{"operator": "Exists"}], "matchExpressions[0]: key must be a non-empty string"),
        ([{"key": "", "operator": "Exists"}], "key must be a non-empty string"),
        ([{"key": "a"}], 'matchExpressions[0]: requirement "a": operator must be a string'),
        (
            [{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "In", "values": "x"}],
            'matchExpressions[1]: requirement "b": values must be a list of strings',
        ),
        ([{"key": "a", "operator": "In", "values": [1]}], "values must be strings, got int"),
        ([{"key": "a", "operator": "In", "values": ["x"], "minValues": "1"}], "minValues must be an integer"),
        ([{"key": "a", "operator": "In", "values": ["x"], "minValues": 2}], "minValues 2 is more than"),
        ([{"key": "a", "operator": "Near", "values": ["x"]}], 'unknown operator "Near"'),
        (["not a map"], "expected a map"),
    ],
)
def test_from_node_selector_requirements_errors(expressions: list[object], fragment: str) -> None:
    with pytest.raises(RequirementError) as raised:
        Requirements.from_node_selector_requirements(expressions)  # type: ignore[arg-type]
    assert fragment in str(raised.value)


def test_requirements_round_trip_through_node_selector_requirements() -> None:
    original = Requirements(
        requirement("In", "amd64", key=LABEL_ARCH),
        requirement("NotIn", "spot", key=LABEL_CAPACITY_TYPE),
        requirement("Gt", "4", key=AWS_LABEL_INSTANCE_CPU),
        requirement("Lt", "65", key=AWS_LABEL_INSTANCE_CPU),
        requirement("NotIn", "8", key=AWS_LABEL_INSTANCE_CPU),
    )
    rebuilt = Requirements.from_node_selector_requirements(original.to_node_selector_requirements())
    assert rebuilt == original


# --- intersects and compatible ----------------------------------------------------


def reqs(*items: Requirement) -> Requirements:
    return Requirements(*items)


@pytest.mark.parametrize(
    ("existing", "incoming", "error"),
    [
        (reqs(_IN_AB), reqs(_IN_BC), None),
        (reqs(_IN_AB), reqs(requirement("In", "c")), f"key {KEY}, {KEY} In [c] not in {KEY} In [a b]"),
        (reqs(_IN_AB), reqs(requirement("In", "c", key="other")), None),
        (reqs(), reqs(requirement("In", "c")), None),
        (reqs(_IN_AB), reqs(_NOT_IN_A), None),
        (reqs(requirement("In", "a")), reqs(_NOT_IN_A), f"key {KEY}, {KEY} NotIn [a] not in {KEY} In [a]"),
        # Both sides NotIn/DoesNotExist: a node without the label satisfies both.
        (reqs(_DOES_NOT_EXIST), reqs(_NOT_IN_A), None),
        (reqs(_NOT_IN_A), reqs(_DOES_NOT_EXIST), None),
        (reqs(_DOES_NOT_EXIST), reqs(_DOES_NOT_EXIST), None),
        (reqs(_EXISTS), reqs(_DOES_NOT_EXIST), f"key {KEY}, {KEY} DoesNotExist not in {KEY} Exists"),
        (reqs(_DOES_NOT_EXIST), reqs(_EXISTS), f"key {KEY}, {KEY} Exists not in {KEY} DoesNotExist"),
        (reqs(_IN_AB), reqs(_DOES_NOT_EXIST), f"key {KEY}, {KEY} DoesNotExist not in {KEY} In [a b]"),
        (reqs(requirement("In", "2", "8")), reqs(requirement("Gt", "4")), None),
        (
            reqs(requirement("In", "2", "4")),
            reqs(requirement("Gt", "4")),
            f"key {KEY}, {KEY} Gt 4 not in {KEY} In [2 4]",
        ),
        (
            reqs(requirement("Gt", "4")),
            reqs(requirement("Lt", "5")),
            f"key {KEY}, {KEY} Lt 5 not in {KEY} Gt 4",
        ),
    ],
)
def test_intersects(existing: Requirements, incoming: Requirements, error: str | None) -> None:
    assert existing.intersects(incoming) == error


def test_intersects_reports_the_first_failing_key_in_order() -> None:
    existing = reqs(requirement("In", "a", key="b-key"), requirement("In", "a", key="a-key"))
    incoming = reqs(requirement("In", "z", key="b-key"), requirement("In", "z", key="a-key"))
    error = existing.intersects(incoming)
    assert error is not None
    assert error.startswith("key a-key,")


_NODEPOOL = reqs(
    requirement("In", "amd64", "arm64", key=LABEL_ARCH),
    requirement("In", "on-demand", key=LABEL_CAPACITY_TYPE),
    requirement("In", "platform", key="team"),
)


@pytest.mark.parametrize(
    ("incoming", "error"),
    [
        (reqs(), None),
        (reqs(requirement("In", "arm64", key=LABEL_ARCH)), None),
        (
            reqs(requirement("In", "s390x", key=LABEL_ARCH)),
            f"key {LABEL_ARCH}, {LABEL_ARCH} In [s390x] not in {LABEL_ARCH} In [amd64 arm64]",
        ),
        # Well-known labels the NodePool leaves open come from instance types.
        (reqs(requirement("In", "us-west-2a", key=LABEL_ZONE)), None),
        (reqs(requirement("Gt", "4", key=AWS_LABEL_INSTANCE_CPU)), None),
        # A custom label nobody defines can never be put on the node ...
        (reqs(requirement("In", "gpu", key="workload")), 'label "workload" does not have known values'),
        (reqs(requirement("Exists", key="workload")), 'label "workload" does not have known values'),
        # ... unless the pod only wants it absent or not some value.
        (reqs(requirement("NotIn", "gpu", key="workload")), None),
        (reqs(requirement("DoesNotExist", key="workload")), None),
        # Defined custom labels must intersect.
        (reqs(requirement("In", "platform", key="team")), None),
        (
            reqs(requirement("In", "data", key="team")),
            "key team, team In [data] not in team In [platform]",
        ),
        (
            reqs(requirement("DoesNotExist", key="team")),
            "key team, team DoesNotExist not in team In [platform]",
        ),
        (
            reqs(requirement("In", "spot", key=LABEL_CAPACITY_TYPE), requirement("In", "x", key="workload")),
            'label "workload" does not have known values',
        ),
    ],
)
def test_compatible(incoming: Requirements, error: str | None) -> None:
    assert _NODEPOOL.compatible(incoming) == error


def test_compatible_with_custom_allowed_undefined() -> None:
    incoming = reqs(requirement("In", "gpu", key="workload"))
    assert _NODEPOOL.compatible(incoming, frozenset({"workload"})) is None
    assert _NODEPOOL.compatible(reqs(requirement("In", "a", key=LABEL_ZONE)), frozenset()) == (
        f'label "{LABEL_ZONE}" does not have known values'
    )


# --- labels ---------------------------------------------------------------------------


def test_labels() -> None:
    requirements = reqs(
        requirement("In", "platform", key="team"),
        requirement("In", "b", "a", key="example.com/multi"),
        requirement("Exists", key="example.com/exists"),
        requirement("NotIn", "x", key="example.com/not-in"),
        requirement("DoesNotExist", key="example.com/absent"),
        requirement("In", "us-west-2a", key=LABEL_ZONE),
        requirement("In", "node-1", key=LABEL_HOSTNAME),
        requirement("In", "x", key="kubernetes.io/custom"),
        requirement("In", "dev", key="node-role.kubernetes.io/dev"),
        requirement("Gt", "4", key="example.com/bounded"),
    )
    assert requirements.labels() == {
        "team": "platform",
        "example.com/multi": "a",
        "node-role.kubernetes.io/dev": "dev",
    }
    assert requirements.labels(include_well_known=True) == {
        "team": "platform",
        "example.com/multi": "a",
        "node-role.kubernetes.io/dev": "dev",
        LABEL_ZONE: "us-west-2a",
    }
    assert list(requirements.labels()) == sorted(requirements.labels())


@pytest.mark.parametrize(
    ("labels", "error"),
    [
        ({LABEL_ARCH: "amd64", "team": "a", "cpu": "8"}, None),
        (
            {LABEL_ARCH: "amd64", "team": "a", "cpu": "8", "spot": "yes", "extra": "x"},
            'label "spot=yes" does not satisfy spot NotIn [yes]',
        ),
        (
            {LABEL_ARCH: "arm64", "team": "a", "cpu": "8"},
            'label "kubernetes.io/arch=arm64" does not satisfy kubernetes.io/arch In [amd64]',
        ),
        (
            {"team": "a", "cpu": "8"},
            'label "kubernetes.io/arch" is missing, but kubernetes.io/arch In [amd64]',
        ),
        ({LABEL_ARCH: "amd64", "cpu": "8"}, 'label "team" is missing, but team Exists'),
        ({LABEL_ARCH: "amd64", "team": "a", "cpu": "4"}, 'label "cpu=4" does not satisfy cpu Gt 4'),
        ({LABEL_ARCH: "amd64", "team": "a"}, 'label "cpu" is missing, but cpu Gt 4'),
        (
            {LABEL_ARCH: "amd64", "team": "a", "cpu": "8", "gpu": "1"},
            'label "gpu=1" does not satisfy gpu DoesNotExist',
        ),
    ],
)
def test_is_satisfied_by_labels(labels: dict[str, str], error: str | None) -> None:
    requirements = reqs(
        requirement("In", "amd64", key=LABEL_ARCH),
        requirement("Exists", key="team"),
        requirement("Gt", "4", key="cpu"),
        requirement("NotIn", "yes", key="spot"),
        requirement("DoesNotExist", key="gpu"),
    )
    assert requirements.is_satisfied_by_labels(labels) == error


def test_labels_satisfy_the_requirements_they_came_from() -> None:
    requirements = reqs(
        requirement("In", "a", "b", key="team"), requirement("In", "x", key="example.com/role")
    )
    assert requirements.is_satisfied_by_labels(requirements.labels()) is None


# --- properties -------------------------------------------------------------------------

_SAMPLE_VALUES = ["a", "b", "c", "", "0", "1", "2", "3", "4", "5", "7", "10", "-1", "+3", "007", "x1"]
_values = st.frozensets(st.sampled_from(_SAMPLE_VALUES), max_size=6)
_bound = st.one_of(st.none(), st.integers(min_value=-3, max_value=12))
_min_values = st.one_of(st.none(), st.integers(min_value=1, max_value=4))

# Any combination of fields, including ones from_operator would never build.
_raw_requirements = st.builds(Requirement, st.just(KEY), st.booleans(), _values, _bound, _bound, _min_values)


def _from_operator(operator: str, values: frozenset[str], bound: int) -> Requirement:
    if operator in ("In", "NotIn"):
        return Requirement.from_operator(KEY, operator, sorted(values) or ["a"])
    if operator in ("Exists", "DoesNotExist"):
        return Requirement.from_operator(KEY, operator)
    return Requirement.from_operator(KEY, operator, [str(bound)])


_built_requirements = st.builds(
    _from_operator, st.sampled_from([op.value for op in Operator]), _values, st.integers(-3, 12)
)
_requirements = st.one_of(_raw_requirements, _built_requirements)
_probes = st.one_of(st.sampled_from(_SAMPLE_VALUES), st.integers(-5, 15).map(str))


@given(_requirements, _requirements, st.lists(_probes, max_size=10))
def test_intersection_is_commutative(left: Requirement, right: Requirement, probes: list[str]) -> None:
    assert left.intersection(right) == right.intersection(left)
    for probe in [*_SAMPLE_VALUES, *probes]:
        assert left.intersection(right).has(probe) == right.intersection(left).has(probe)


@given(_requirements, _requirements, st.lists(_probes, max_size=10))
def test_intersection_allows_exactly_what_both_allow(
    left: Requirement, right: Requirement, probes: list[str]
) -> None:
    both = left.intersection(right)
    for probe in [*_SAMPLE_VALUES, *probes]:
        assert both.has(probe) == (left.has(probe) and right.has(probe)), probe


@given(_requirements, _requirements)
def test_has_intersection_agrees_with_intersection(left: Requirement, right: Requirement) -> None:
    assert left.has_intersection(right) == (not left.intersection(right).is_empty())
    assert left.has_intersection(right) == right.has_intersection(left)


@given(_requirements)
def test_any_is_a_member_and_is_empty_is_exact(built: Requirement) -> None:
    representative = built.any()
    unbounded_complement = built.complement and built.greater_than is None and built.less_than is None
    if representative is not None:
        assert built.has(representative)
    if unbounded_complement:
        assert not built.is_empty()
        assert representative is None
    else:
        assert built.is_empty() == (representative is None)


@given(_built_requirements, _built_requirements)
def test_node_selector_requirements_reproduce_built_requirements(
    left: Requirement, right: Requirement
) -> None:
    original = Requirements(left, right)
    rebuilt = Requirements.from_node_selector_requirements(original.to_node_selector_requirements())
    assert rebuilt == original


@given(st.lists(_built_requirements, max_size=4), st.lists(_built_requirements, max_size=4))
def test_requirements_intersects_is_symmetric_in_outcome(
    left: list[Requirement], right: list[Requirement]
) -> None:
    first = Requirements(*left)
    second = Requirements(*right)
    assert (first.intersects(second) is None) == (second.intersects(first) is None)
