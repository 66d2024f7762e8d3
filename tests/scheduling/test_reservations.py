"""A plan spends a capacity reservation no further than it has instances, then falls back."""

from __future__ import annotations

from tests.support import make_instance_type, make_nodepool, make_pod

from karpy.api.instancetype import InstanceType
from karpy.api.nodeclass import StatusCapacityReservation
from karpy.api.requirements import (
    AWS_LABEL_CAPACITY_RESERVATION_ID,
    CAPACITY_TYPE_ON_DEMAND,
    CAPACITY_TYPE_RESERVED,
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
)
from karpy.cloud.reservations import ReservationAvailability, with_reserved_offerings
from karpy.scheduling.solver import NodePoolCapacity, solve
from karpy.sim.clock import VirtualClock

RESERVED_TYPE = make_instance_type("m.large", 4, 8, 0.20, capacity_types=("on-demand",))
CHEAPER_TYPE = make_instance_type("c.large", 4, 8, 0.15, capacity_types=("on-demand",))


def reserved(instance_type: InstanceType, *counts: tuple[str, int]) -> InstanceType:
    clock = VirtualClock()
    availability = ReservationAvailability(clock)
    availability.sync(dict(counts))
    reservations = [
        StatusCapacityReservation(
            id=reservation_id,
            instance_type=instance_type.name,
            zone="zone-a",
            owner_id="012345678901",
            instance_match_criteria="targeted",
        )
        for reservation_id, _ in counts
    ]
    return with_reserved_offerings(instance_type, reservations, availability, clock.now())


def plan_for(pods: int, *types: InstanceType) -> tuple[list[str], list[str], list[str]]:
    """Each NodeClaim's capacity type, reservation id and cheapest option."""
    pool = NodePoolCapacity(make_nodepool("default"), list(types), {}, None)
    plan = solve([make_pod(f"p{i}", "3", "6Gi") for i in range(pods)], [], [pool])
    assert plan.unschedulable == {}
    assert len(plan.new_nodeclaims) == pods
    capacity_types, reservation_ids, cheapest = [], [], []
    for claim in plan.new_nodeclaims:
        capacity_type = claim.requirements.get(LABEL_CAPACITY_TYPE)
        capacity_types.append(
            CAPACITY_TYPE_RESERVED if capacity_type.has(CAPACITY_TYPE_RESERVED) else "other"
        )
        ids = claim.requirements.get(AWS_LABEL_CAPACITY_RESERVATION_ID)
        reservation_ids.append(",".join(sorted(ids.values)) if not ids.complement else "")
        cheapest.append(claim.instance_types[0].name)
        assert claim.requirements.get(LABEL_INSTANCE_TYPE).has(claim.instance_types[0].name)
    return capacity_types, reservation_ids, cheapest


def test_a_reservation_of_two_takes_two_nodeclaims_and_the_rest_fall_back_to_the_cheapest_on_demand() -> None:
    capacity_types, reservation_ids, cheapest = plan_for(
        5, reserved(RESERVED_TYPE, ("cr-a", 2)), CHEAPER_TYPE
    )
    assert capacity_types == ["reserved", "reserved", "other", "other", "other"]
    assert reservation_ids == ["cr-a", "cr-a", "", "", ""]
    # The fallback is the next offering, not the reserved type's own on-demand one.
    assert cheapest == ["m.large", "m.large", "c.large", "c.large", "c.large"]


def test_each_reservation_of_a_type_is_spent_before_on_demand() -> None:
    capacity_types, reservation_ids, _ = plan_for(4, reserved(RESERVED_TYPE, ("cr-a", 1), ("cr-b", 2)))
    # A NodeClaim holds a slot in each reservation it may launch into, as Karpenter's does.
    assert reservation_ids[:2] == ["cr-a,cr-b", "cr-b"]
    assert capacity_types == ["reserved", "reserved", "other", "other"]


def test_a_reserved_only_nodeclaim_without_room_leaves_its_pods_pending() -> None:
    only_reserved = make_instance_type("m.large", 4, 8, 0.20, capacity_types=("on-demand",))
    only_reserved = reserved(only_reserved, ("cr-a", 1))
    pool = NodePoolCapacity(
        make_nodepool(
            "default",
            template_spec="      requirements: "
            "[{key: karpenter.sh/capacity-type, operator: In, values: [reserved]}]",
        ),
        [only_reserved],
        {},
        None,
    )
    plan = solve([make_pod(f"p{i}", "3", "6Gi") for i in range(3)], [], [pool])
    assert len(plan.new_nodeclaims) == 1
    assert sorted(plan.unschedulable) == ["default/p1", "default/p2"]
    assert "capacity reservations are used up" in plan.unschedulable["default/p1"]


def test_an_on_demand_price_is_what_a_fallen_back_nodeclaim_costs() -> None:
    pool = NodePoolCapacity(make_nodepool("default"), [reserved(RESERVED_TYPE, ("cr-a", 1))], {}, None)
    plan = solve([make_pod(f"p{i}", "3", "6Gi") for i in range(2)], [], [pool])
    prices = sorted(claim.price for claim in plan.new_nodeclaims)
    assert prices[0] < 1e-6
    assert abs(prices[1] - 0.20) < 1e-9
    assert plan.new_nodeclaims[1].requirements.get(LABEL_CAPACITY_TYPE).has(CAPACITY_TYPE_ON_DEMAND)


def test_a_nodepool_requiring_one_reservation_id_plans_into_that_one_alone() -> None:
    pool = NodePoolCapacity(
        make_nodepool(
            "default",
            template_spec="      requirements: "
            "[{key: karpenter.k8s.aws/capacity-reservation-id, operator: In, values: [cr-b]}]",
        ),
        [reserved(RESERVED_TYPE, ("cr-a", 5), ("cr-b", 1))],
        {},
        None,
    )
    plan = solve([make_pod(f"p{i}", "3", "6Gi") for i in range(2)], [], [pool])
    ids = [claim.requirements.get(AWS_LABEL_CAPACITY_RESERVATION_ID) for claim in plan.new_nodeclaims]
    assert [sorted(i.values) for i in ids] == [["cr-b"], ["cr-b"]]
    capacity_types = [claim.requirements.get(LABEL_CAPACITY_TYPE) for claim in plan.new_nodeclaims]
    assert [c.has(CAPACITY_TYPE_RESERVED) for c in capacity_types] == [True, False]
