"""The CreateFleet request and answer as pure data: Karpenter's choices without an endpoint."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from karpy.api.instancetype import InstanceType
from karpy.api.nodeclass import StatusAMI, StatusSubnet
from karpy.api.requirements import (
    AWS_LABEL_INSTANCE_FAMILY,
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    Requirement,
    Requirements,
)
from karpy.cloud.aws.fleet import (
    MAX_INSTANCE_TYPES,
    fleet_request,
    launch_error,
    parse_fleet_response,
    plan_launch,
)
from karpy.cloud.aws_catalog import instance_type_from_entry, load_catalog
from karpy.cloud.provider import CloudProviderError, InsufficientCapacityError

ZONES = ("us-east-1a", "us-east-1b")
SUBNETS = (
    # Status order: most free addresses first, so the first of each zone is the one launches use.
    StatusSubnet("subnet-a-big", "us-east-1a"),
    StatusSubnet("subnet-b", "us-east-1b"),
    StatusSubnet("subnet-a-small", "us-east-1a"),
)
X86 = StatusAMI(
    "ami-x86", requirements=({"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},)
)
ARM = StatusAMI(
    "ami-arm", requirements=({"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]},)
)


def catalog_types(
    unavailable: frozenset[tuple[str, str, str]] = frozenset(),
) -> list[InstanceType]:
    catalog = load_catalog()
    return [
        instance_type_from_entry(entry, catalog.region, ZONES, None, unavailable) for entry in catalog.entries
    ]


def requirements(types: Sequence[str], capacity_types: Sequence[str] = ("spot", "on-demand")) -> Requirements:
    return Requirements(
        Requirement.from_operator(LABEL_INSTANCE_TYPE, "In", types),
        Requirement.from_operator(LABEL_CAPACITY_TYPE, "In", capacity_types),
    )


def test_spot_first_in_the_subnet_with_most_addresses_cheapest_first() -> None:
    plan = plan_launch(requirements(("c5.large", "m5.large")), catalog_types(), SUBNETS, (X86,))
    assert plan.capacity_type == "spot"
    assert {o.subnet_id for o in plan.overrides} == {"subnet-a-big", "subnet-b"}
    prices = [o.price for o in plan.overrides]
    assert prices == sorted(prices)
    assert {(o.instance_type, o.zone) for o in plan.overrides} == {
        (t, z) for t in ("c5.large", "m5.large") for z in ZONES
    }


def test_on_demand_when_spot_is_not_allowed_or_not_available() -> None:
    on_demand_only = plan_launch(
        requirements(("c5.large",), ("on-demand",)), catalog_types(), SUBNETS, (X86,)
    )
    assert on_demand_only.capacity_type == "on-demand"
    no_spot_left = frozenset(("c5.large", zone, "spot") for zone in ZONES)
    fallback = plan_launch(requirements(("c5.large",)), catalog_types(no_spot_left), SUBNETS, (X86,))
    assert fallback.capacity_type == "on-demand"
    assert len(fallback.overrides) == 2


def _dear_m5_spot_types(types: Sequence[InstanceType]) -> list[str]:
    """The m5 sizes whose spot price is above c5.large's on-demand price."""
    c5_large = next(t for t in types if t.name == "c5.large")
    on_demand = min(o.price for o in c5_large.offerings if o.capacity_type == "on-demand")
    return [
        t.name
        for t in types
        if t.name.startswith("m5.")
        and min(o.price for o in t.offerings if o.zone in ZONES and o.capacity_type == "spot") > on_demand
    ]


def test_mixed_capacity_drops_spot_types_dearer_than_the_cheapest_on_demand() -> None:
    types = catalog_types()
    dearer = _dear_m5_spot_types(types)
    assert dearer  # the catalog has m5 sizes whose spot price beats no c5.large on-demand
    plan = plan_launch(requirements(("c5.large", *dearer)), types, SUBNETS, (X86,))
    assert plan.instance_types == ("c5.large",)
    # Spot alone allowed: nothing to compare with, the dear types stay.
    spot_only = plan_launch(requirements(("c5.large", *dearer), ("spot",)), types, SUBNETS, (X86,))
    assert set(spot_only.instance_types) == {"c5.large", *dearer}


def test_min_values_keep_the_dear_spot_types_as_karpenter_keeps_them() -> None:
    """With minValues the NodePool asked for that much flexibility: no type is dropped for its price."""
    types = catalog_types()
    dearer = _dear_m5_spot_types(types)
    flexible = Requirements(
        *requirements(("c5.large", *dearer)),
        Requirement.from_operator(AWS_LABEL_INSTANCE_FAMILY, "In", ("c5", "m5"), min_values=2),
    )
    plan = plan_launch(flexible, types, SUBNETS, (X86,))
    assert plan.capacity_type == "spot"
    assert set(plan.instance_types) == {"c5.large", *dearer}


def test_min_values_the_sixty_cheapest_types_cannot_meet_launch_nothing() -> None:
    types = [t for t in catalog_types() if t.requirements.get("kubernetes.io/arch").has("amd64")]
    names = [t.name for t in types]
    families = sorted({t.name.split(".")[0] for t in types})
    cheapest = plan_launch(requirements(names, ("spot",)), types, SUBNETS, (X86,)).instance_types
    sent = len({name.split(".")[0] for name in cheapest})
    assert sent < len(families)  # the 60 cheapest span fewer families than all the types do
    diverse = Requirements(
        *requirements(names, ("spot",)),
        Requirement.from_operator(AWS_LABEL_INSTANCE_FAMILY, "In", families, min_values=sent + 1),
    )
    # Karpenter truncates to the 60 cheapest and refuses a fleet that lost the flexibility asked for.
    with pytest.raises(InsufficientCapacityError, match="minValues"):
        plan_launch(diverse, types, SUBNETS, (X86,))


def test_at_most_sixty_types_the_cheapest() -> None:
    types = [t for t in catalog_types() if t.requirements.get("kubernetes.io/arch").has("amd64")]
    plan = plan_launch(requirements([t.name for t in types], ("spot",)), types, SUBNETS, (X86,))
    assert len(plan.instance_types) == MAX_INSTANCE_TYPES
    cheapest = {o.instance_type: o.price for o in reversed(plan.overrides)}
    assert max(cheapest.values()) <= min(
        min(o.price for o in t.offerings if o.capacity_type == "spot")
        for t in types
        if t.name not in cheapest and any(o.capacity_type == "spot" for o in t.offerings)
    )


def test_each_ami_serves_its_architecture_with_a_template_config_of_its_own() -> None:
    plan = plan_launch(requirements(("c5.large", "c6g.large")), catalog_types(), SUBNETS, (X86, ARM))
    assert {(o.instance_type, o.image_id) for o in plan.overrides} == {
        ("c5.large", "ami-x86"),
        ("c6g.large", "ami-arm"),
    }
    request = fleet_request(plan, {"ami-x86": "lt-x86", "ami-arm": "lt-arm"}, {"karpenter.sh/nodeclaim": "n"})
    assert request["Type"] == "instant"
    assert request["TargetCapacitySpecification"] == {
        "TotalTargetCapacity": 1,
        "DefaultTargetCapacityType": "spot",
    }
    assert request["SpotOptions"] == {"AllocationStrategy": "price-capacity-optimized"}
    assert "OnDemandOptions" not in request
    configs = {
        c["LaunchTemplateSpecification"]["LaunchTemplateName"]: {o["InstanceType"] for o in c["Overrides"]}
        for c in request["LaunchTemplateConfigs"]
    }
    assert configs == {"lt-x86": {"c5.large"}, "lt-arm": {"c6g.large"}}
    assert [spec["ResourceType"] for spec in request["TagSpecifications"]] == ["instance", "volume", "fleet"]
    # Without an arm64 AMI the arm64 type is not offered at all.
    only_x86 = plan_launch(requirements(("c5.large", "c6g.large")), catalog_types(), SUBNETS, (X86,))
    assert only_x86.instance_types == ("c5.large",)


def test_nothing_admissible_is_insufficient_capacity() -> None:
    with pytest.raises(InsufficientCapacityError):
        plan_launch(requirements(("c6g.large",)), catalog_types(), SUBNETS, (X86,))


def _error(code: str, instance_type: str, zone: str) -> dict[str, object]:
    overrides = {"InstanceType": instance_type, "AvailabilityZone": zone}
    return {
        "ErrorCode": code,
        "ErrorMessage": f"{code} here",
        "LaunchTemplateAndOverrides": {"Overrides": overrides},
    }


def test_capacity_errors_name_exactly_their_offerings() -> None:
    plan = plan_launch(requirements(("c5.large",)), catalog_types(), SUBNETS, (X86,))
    outcome = parse_fleet_response(
        {
            "Errors": [
                _error("InsufficientInstanceCapacity", "c5.large", "us-east-1a"),
                _error("InsufficientFreeAddressesInSubnet", "c5.large", "us-east-1b"),
            ]
        },
        plan,
    )
    assert outcome.instance is None
    error = launch_error(outcome.errors)
    assert isinstance(error, InsufficientCapacityError)
    assert set(error.offerings) == {("c5.large", "us-east-1a", "spot"), ("c5.large", "us-east-1b", "spot")}


def test_other_errors_carry_aws_code_and_message() -> None:
    plan = plan_launch(requirements(("c5.large",)), catalog_types(), SUBNETS, (X86,))
    outcome = parse_fleet_response(
        {
            "Errors": [
                _error("InsufficientInstanceCapacity", "c5.large", "us-east-1a"),
                _error("InvalidParameterValue", "c5.large", "us-east-1b"),
            ]
        },
        plan,
    )
    error = launch_error(outcome.errors)
    assert type(error) is CloudProviderError
    assert "InvalidParameterValue: InvalidParameterValue here" in str(error)


def test_the_launched_instance_is_read_with_its_offering() -> None:
    plan = plan_launch(requirements(("c5.large",)), catalog_types(), SUBNETS, (X86,))
    outcome = parse_fleet_response(
        {
            "Instances": [
                {
                    "InstanceIds": ["i-1"],
                    "InstanceType": "c5.large",
                    "Lifecycle": "spot",
                    "LaunchTemplateAndOverrides": {
                        "Overrides": {"SubnetId": "subnet-b", "ImageId": "ami-x86"}
                    },
                }
            ]
        },
        plan,
    )
    assert outcome.instance is not None
    assert (outcome.instance.id, outcome.instance.zone, outcome.instance.capacity_type) == (
        "i-1",
        "us-east-1b",
        "spot",
    )
