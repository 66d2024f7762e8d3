"""The simulated cloud: offering choice, capacity errors, idempotent launches, zones."""

from __future__ import annotations

from karpy.api.manifest import parse_manifests
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import NodeClaim, NodeClaimSpec
from karpy.api.nodepool import NodeClassRef
from karpy.api.requirements import Requirement
from karpy.cloud.provider import InsufficientCapacityError
from karpy.sim.clock import VirtualClock
from karpy.sim.cloud import CapacityFailure, SimulatedCloud
from karpy.sim.store import InMemoryCluster

EC2_CLASS = """
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  amiSelectorTerms: [{alias: al2023@latest}]
  role: node-role
  subnetSelectorTerms: [{id: subnet-0123}]
  securityGroupSelectorTerms: [{tags: {team: a}}]
"""


def cloud_with_class() -> tuple[SimulatedCloud, InMemoryCluster]:
    clock = VirtualClock()
    cluster = InMemoryCluster(clock)
    for item in parse_manifests(EC2_CLASS, "class.yaml").objects:
        cluster.create(item.obj)
    return SimulatedCloud(cluster, clock), cluster


def claim(name: str, *requirements: Requirement) -> NodeClaim:
    return NodeClaim(
        metadata=ObjectMeta(name=name),
        spec=NodeClaimSpec(
            node_class_ref=NodeClassRef("karpenter.k8s.aws", "EC2NodeClass", "default"),
            requirements=requirements,
        ),
    )


TYPES = Requirement.from_operator("node.kubernetes.io/instance-type", "In", ("c5.large", "m5.large"))


def test_spot_is_chosen_when_allowed_and_the_cheapest_offering_wins() -> None:
    cloud, _ = cloud_with_class()
    launched = cloud.create(claim("a", TYPES))
    assert launched.capacity_type == "spot"
    instance = cloud.instances[launched.status.provider_id]
    cheapest = min(
        offering.price
        for instance_type in cloud.instance_types_for(cloud.node_class(claim("a").spec.node_class_ref))
        if instance_type.name in ("c5.large", "m5.large")
        for offering in instance_type.offerings
        if offering.capacity_type == "spot"
    )
    assert instance.price == cheapest
    assert launched.status.allocatable["cpu"] < launched.status.capacity["cpu"]


def test_on_demand_only_claims_get_on_demand() -> None:
    cloud, _ = cloud_with_class()
    on_demand = Requirement.from_operator("karpenter.sh/capacity-type", "In", ("on-demand",))
    assert cloud.create(claim("a", TYPES, on_demand)).capacity_type == "on-demand"


def test_a_subnet_id_pins_the_zone() -> None:
    cloud, _ = cloud_with_class()
    node_class = cloud.node_class(claim("a").spec.node_class_ref)
    zones = cloud.zones_for(node_class)
    assert len(zones) == 1
    assert cloud.create(claim("a", TYPES)).zone == zones[0]


def test_capacity_errors_mark_offerings_unavailable_for_three_minutes() -> None:
    cloud, _ = cloud_with_class()
    cloud.settings.capacity_failures.append(CapacityFailure(capacity_type="spot"))
    try:
        cloud.create(claim("a", TYPES))
    except InsufficientCapacityError as error:
        assert error.offerings and all(offering[2] == "spot" for offering in error.offerings)
    else:
        raise AssertionError("expected an insufficient capacity error")
    # The next attempt sees no available spot offering and launches on-demand.
    assert cloud.create(claim("b", TYPES)).capacity_type == "on-demand"
    assert isinstance(cloud.clock, VirtualClock)
    cloud.clock.advance(181)
    cloud.settings.capacity_failures.clear()
    assert cloud.create(claim("c", TYPES)).capacity_type == "spot"


def test_create_is_idempotent_by_nodeclaim_name() -> None:
    cloud, _ = cloud_with_class()
    first = cloud.create(claim("a", TYPES))
    second = cloud.create(claim("a", TYPES))
    assert first.status.provider_id == second.status.provider_id
    assert len(cloud.instances) == 1
