"""Node class drift decisions: Karpenter's order and reasons, and what decides nothing."""

from __future__ import annotations

import pytest

from karpy.api.nodeclass_hash import NodeClassHash
from karpy.disruption.nodeclass_drift import (
    AMI_DRIFT,
    CAPACITY_RESERVATION_DRIFT,
    NODECLASS_DRIFT,
    SECURITY_GROUP_DRIFT,
    SUBNET_DRIFT,
    LaunchedWith,
    Resolved,
    nodeclass_drift,
    static_fields_drifted,
)

CURRENT = NodeClassHash("222", "karpy-v1", "example.com/hash", "example.com/hash-version")
LAUNCHED = LaunchedWith("ami-new", "subnet-a", frozenset({"sg-1", "sg-2"}))
RESOLVED = Resolved(
    image_ids=frozenset({"ami-new"}),
    subnet_ids=frozenset({"subnet-a", "subnet-b"}),
    security_group_ids=frozenset({"sg-1", "sg-2"}),
)


def claimed(value: str, version: str = "karpy-v1") -> dict[str, str]:
    return {"example.com/hash": value, "example.com/hash-version": version}


def test_a_nodeclaim_launched_from_the_current_class_has_not_drifted() -> None:
    assert nodeclass_drift(claimed("222"), CURRENT, LAUNCHED, RESOLVED) == ""


def test_another_hash_of_the_same_version_is_nodeclass_drift() -> None:
    assert static_fields_drifted(claimed("111"), CURRENT)
    assert nodeclass_drift(claimed("111"), CURRENT, LAUNCHED, RESOLVED) == NODECLASS_DRIFT


@pytest.mark.parametrize(
    "annotations",
    [
        {},  # launched before the hash existed
        {"example.com/hash": "111"},  # no version: nothing to compare with
        claimed("111", version="v6"),  # another version (Karpenter's, say): computed another way
    ],
)
def test_a_nodeclaim_without_the_annotation_or_of_another_version_is_not_drifted_by_it(
    annotations: dict[str, str],
) -> None:
    assert not static_fields_drifted(annotations, CURRENT)
    assert nodeclass_drift(annotations, CURRENT, LAUNCHED, RESOLVED) == ""


@pytest.mark.parametrize(
    ("launched", "reason"),
    [
        (LaunchedWith("ami-old", "subnet-a", frozenset({"sg-1", "sg-2"})), AMI_DRIFT),
        (LaunchedWith("ami-new", "subnet-a", frozenset({"sg-1"})), SECURITY_GROUP_DRIFT),
        (LaunchedWith("ami-new", "subnet-a", frozenset({"sg-1", "sg-2", "sg-3"})), SECURITY_GROUP_DRIFT),
        (LaunchedWith("ami-new", "subnet-c", frozenset({"sg-1", "sg-2"})), SUBNET_DRIFT),
    ],
)
def test_what_the_class_resolves_to_drifts_with_karpenters_reason(
    launched: LaunchedWith, reason: str
) -> None:
    assert nodeclass_drift(claimed("222"), CURRENT, launched, RESOLVED) == reason


def test_the_checks_run_in_karpenters_order_and_the_first_names_the_drift() -> None:
    everything = LaunchedWith("ami-old", "subnet-c", frozenset({"sg-9"}))
    assert nodeclass_drift(claimed("111"), CURRENT, everything, RESOLVED) == NODECLASS_DRIFT
    assert nodeclass_drift(claimed("222"), CURRENT, everything, RESOLVED) == AMI_DRIFT
    no_ami = LaunchedWith("ami-new", "subnet-c", frozenset({"sg-9"}))
    assert nodeclass_drift(claimed("222"), CURRENT, no_ami, RESOLVED) == SECURITY_GROUP_DRIFT


def test_what_is_unknown_decides_nothing() -> None:
    anything = LaunchedWith("ami-old", "subnet-c", frozenset({"sg-9"}))
    assert nodeclass_drift({}, None, anything, Resolved()) == ""  # nothing resolved yet
    assert nodeclass_drift({}, CURRENT, LaunchedWith(), RESOLVED) == ""  # the instance not read


def test_an_instance_in_a_reservation_the_class_no_longer_selects_is_capacity_reservation_drift() -> None:
    launched = LaunchedWith(capacity_reservation_id="cr-0aaa")
    selected = Resolved(capacity_reservation_ids=frozenset({"cr-0aaa"}))
    assert nodeclass_drift({}, None, launched, selected) == ""
    assert (
        nodeclass_drift({}, None, launched, Resolved(capacity_reservation_ids=frozenset()))
        == CAPACITY_RESERVATION_DRIFT
    )
    # Out of any reservation, or with the ReservedCapacity gate off (None): not checked.
    assert nodeclass_drift({}, None, LaunchedWith(), Resolved(capacity_reservation_ids=frozenset())) == ""
    assert nodeclass_drift({}, None, launched, Resolved()) == ""
