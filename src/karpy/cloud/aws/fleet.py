"""One CreateFleet call per NodeClaim, as Karpenter's AWS provider makes it: request and answer (pure).

**What is offered.** A NodeClaim lists every instance type its pods fit on
(its requirements); the provider passes the types it may launch with their
offerings (zone, capacity type, price, availability). An offering is
admissible when the NodeClaim's requirements admit its zone and capacity
type, it is available (not marked after a capacity error), its zone has a
subnet of the node class, and some resolved AMI serves the type (an arm64
AMI serves arm64 types only: each AMI's status requirements must intersect
the type's).

**Subnets.** One subnet per zone, the first of the zone in the class'
``status.subnets``: the status controller writes them ordered by free
addresses (most first), then id, so the first is Karpenter's choice, the
subnet with the most free addresses.

**Capacity type.** Reserved when the NodeClaim allows it and an admissible
reserved offering exists (a capacity reservation with room,
:mod:`karpy.cloud.reservations`), else spot when the NodeClaim allows spot
and any admissible spot offering exists, else on-demand (the AWS provider's
default). A reserved launch is an on-demand fleet with one launch template
per reservation, each targeting it (``CapacityReservationSpecification``),
as Karpenter's targeted launch mode makes it. When the
NodeClaim allows both and both kinds are offered, types whose cheapest
admissible offering is dearer than the cheapest on-demand offering are
dropped, as Karpenter does, so a larger spot type never wins over a cheaper,
sufficient on-demand one.

**minValues.** When a requirement of the NodeClaim carries ``minValues``,
the NodePool asked for that much flexibility, so no type is dropped for its
price (Karpenter skips that filter then too), and a fleet whose types no
longer meet every ``minValues`` after the cap is not sent: it is an
:class:`InsufficientCapacityError` naming the requirement, as Karpenter
refuses it.

**Order and cap.** Types with an admissible offering of the chosen capacity
type are ordered by their cheapest admissible offering (ties by name) and at
most :data:`MAX_INSTANCE_TYPES` (60) are kept, the number Karpenter passes to
CreateFleet.

**The request.** ``Type=instant`` and a target capacity of one instance of
the chosen capacity type; one launch template config per distinct AMI (each
template holds one AMI), each with an override per admissible (type, zone)
offering of that capacity type, carrying the subnet, the zone (so a capacity
error names it without another call) and the image, with a priority that
follows the price. Spot uses ``price-capacity-optimized`` and on-demand
``lowest-price``, Karpenter's strategies. Instance, volume and fleet are
tagged alike (:func:`launch_tags`).

**The answer.** The launched instance (id, type, zone, capacity type,
image) or the errors. Errors whose code is a capacity code
(:data:`CAPACITY_ERROR_CODES`, Karpenter's list) name exactly the (type,
zone, capacity type) offerings that failed; a code that says the account
cannot run spot at all (:data:`SPOT_REFUSED_CODES`) counts as capacity too,
and the provider then marks every spot offering unavailable; when every error is one of
those, :func:`launch_error` is an :class:`InsufficientCapacityError` naming
them, else a :class:`CloudProviderError` with AWS' codes and messages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from karpy.api.instancetype import InstanceType, Offering
from karpy.api.nodeclass import StatusAMI, StatusSubnet
from karpy.api.requirements import (
    CAPACITY_TYPE_ON_DEMAND,
    CAPACITY_TYPE_RESERVED,
    CAPACITY_TYPE_SPOT,
    LABEL_CAPACITY_TYPE,
    LABEL_NODEPOOL,
    Requirements,
)
from karpy.cloud.offerings import launch_capacity_type
from karpy.cloud.provider import CloudProviderError, InsufficientCapacityError
from karpy.scheduling.solver import min_values_shortfall

MAX_INSTANCE_TYPES = 60

# CreateFleet error codes that say "no capacity for this offering now" (Karpenter's list).
CAPACITY_ERROR_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "MaxSpotInstanceCountExceeded",
        "VcpuLimitExceeded",
        "UnfulfillableCapacity",
        "Unsupported",
        "InsufficientFreeAddressesInSubnet",
        "ReservationCapacityExceeded",
    }
)
# CreateFleet error codes that say "this account cannot run spot at all": EC2's spot
# service-linked role is missing and the caller may not create it. Every spot offering
# is out until it is fixed, so the pool falls back to on-demand (Karpenter marks the
# whole spot capacity type unavailable for this code).
SPOT_REFUSED_CODES = frozenset({"AuthFailure.ServiceLinkedRoleCreationNotPermitted"})
# A launch template that vanished (deleted behind karpy's back): recreate it and try once more.
LAUNCH_TEMPLATE_NOT_FOUND_CODES = frozenset(
    {"InvalidLaunchTemplateName.NotFoundException", "InvalidLaunchTemplateId.NotFound"}
)

TAG_NODECLAIM = "karpenter.sh/nodeclaim"
TAG_NODECLASS = "karpenter.k8s.aws/ec2nodeclass"
TAG_EKS_CLUSTER_NAME = "eks:eks-cluster-name"
TAG_NAME = "Name"

SPOT_ALLOCATION_STRATEGY = "price-capacity-optimized"
ON_DEMAND_ALLOCATION_STRATEGY = "lowest-price"


def cluster_tag(cluster_name: str) -> str:
    """The tag key (value ``owned``) that says a resource belongs to the cluster."""
    return f"kubernetes.io/cluster/{cluster_name}"


@dataclass(frozen=True, slots=True)
class FleetOverride:
    """One (instance type, zone) the fleet may launch, in the zone's subnet, from one AMI."""

    instance_type: str
    zone: str
    subnet_id: str
    image_id: str
    price: float
    # A reserved launch: the capacity reservation this (type, zone) goes into.
    reservation_id: str = ""

    @property
    def template_key(self) -> str:
        """The launch template this override uses: one per AMI, and per reservation for reserved launches."""
        return f"{self.image_id}/{self.reservation_id}" if self.reservation_id else self.image_id


@dataclass(frozen=True, slots=True)
class LaunchPlan:
    """What one CreateFleet call asks for: a capacity type and its overrides, cheapest first."""

    capacity_type: str
    overrides: tuple[FleetOverride, ...]

    @property
    def image_ids(self) -> tuple[str, ...]:
        """The AMIs the overrides use, each once, in order of first use (one launch template each)."""
        return tuple(dict.fromkeys(override.image_id for override in self.overrides))

    @property
    def instance_types(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(override.instance_type for override in self.overrides))

    @property
    def templates(self) -> tuple[tuple[str, str, str], ...]:
        """Each launch template the plan needs, once: (template key, AMI, reservation id)."""
        return tuple(
            dict.fromkeys(
                (override.template_key, override.image_id, override.reservation_id)
                for override in self.overrides
            )
        )


def zonal_subnets(subnets: Sequence[StatusSubnet]) -> dict[str, str]:
    """Zone → the subnet launches there use: the zone's first in status order (see the module docstring)."""
    chosen: dict[str, str] = {}
    for subnet in subnets:
        chosen.setdefault(subnet.zone, subnet.id)
    return chosen


def ami_requirements(ami: StatusAMI) -> Requirements:
    return Requirements.from_node_selector_requirements(ami.requirements)


def image_for(instance_type: InstanceType, amis: Sequence[StatusAMI]) -> str | None:
    """The first AMI (status order: newest first) whose requirements the type meets; None if none does."""
    for ami in amis:
        if instance_type.requirements.intersects(ami_requirements(ami)) is None:
            return ami.id
    return None


def _cheapest(offerings: Sequence[Offering]) -> float:
    return min(offering.price for offering in offerings)


def plan_launch(
    requirements: Requirements,
    instance_types: Sequence[InstanceType],
    subnets: Sequence[StatusSubnet],
    amis: Sequence[StatusAMI],
    reservation_ids: Mapping[tuple[str, str], str] | None = None,
) -> LaunchPlan:
    """The CreateFleet overrides for a NodeClaim's requirements (module docstring); raises if none is left.

    ``reservation_ids`` names, per (instance type, zone), the capacity reservation a reserved
    launch there goes into; a reserved offering with none is left out.
    """
    reservation_ids = reservation_ids or {}
    zones = zonal_subnets(subnets)
    candidates: list[tuple[InstanceType, str, list[Offering]]] = []
    for instance_type in instance_types:
        if instance_type.requirements.intersects(requirements) is not None:
            continue
        image = image_for(instance_type, amis)
        offerings = [o for o in instance_type.available_offerings(requirements) if o.zone in zones]
        if image is not None and offerings:
            candidates.append((instance_type, image, offerings))
    allowed = requirements.get(LABEL_CAPACITY_TYPE)
    offered = {offering.capacity_type for _, _, offerings in candidates for offering in offerings}
    # The offerings are admissible ones: a capacity type offered is one the NodeClaim allows.
    capacity_type = launch_capacity_type(offered)
    flexible = any(requirement.min_values is not None for requirement in requirements)
    if (
        not flexible
        and offered >= {CAPACITY_TYPE_SPOT, CAPACITY_TYPE_ON_DEMAND}
        and allowed.has(CAPACITY_TYPE_ON_DEMAND)
    ):
        cheapest_on_demand = min(
            offering.price
            for _, _, offerings in candidates
            for offering in offerings
            if offering.capacity_type == CAPACITY_TYPE_ON_DEMAND
        )
        candidates = [item for item in candidates if _cheapest(item[2]) <= cheapest_on_demand]
    chosen = [
        (instance_type, image, [o for o in offerings if o.capacity_type == capacity_type])
        for instance_type, image, offerings in candidates
    ]
    chosen = [item for item in chosen if item[2]]
    chosen.sort(key=lambda item: (_cheapest(item[2]), item[0].name))
    chosen = chosen[:MAX_INSTANCE_TYPES]
    overrides = [
        FleetOverride(
            instance_type.name,
            offering.zone,
            zones[offering.zone],
            image,
            offering.price,
            reservation_ids.get((instance_type.name, offering.zone), ""),
        )
        for instance_type, image, offerings in chosen
        for offering in offerings
    ]
    if capacity_type == CAPACITY_TYPE_RESERVED:
        # One reservation per (type, zone) can be launched into (karpy.cloud.reservations).
        overrides = list({(o.instance_type, o.zone): o for o in overrides if o.reservation_id}.values())
    if not overrides:
        raise InsufficientCapacityError(
            "no available offering satisfies the NodeClaim's requirements in the node class' subnets and AMIs"
        )
    shortfall = min_values_shortfall(requirements, [instance_type for instance_type, _, _ in chosen])
    if shortfall is not None:
        raise InsufficientCapacityError(
            f"the {len(chosen)} cheapest {capacity_type} instance types do not meet minValues ({shortfall})"
        )
    overrides.sort(key=lambda override: (override.price, override.instance_type, override.zone))
    return LaunchPlan(capacity_type, tuple(overrides))


def launch_tags(
    *, cluster_name: str, nodepool: str, nodeclaim: str, node_class: str, class_tags: Mapping[str, str]
) -> dict[str, str]:
    """The tags of a NodeClaim's instance, volumes and fleet: the class' own, then Karpenter's, which win."""
    return {
        TAG_NAME: f"{nodepool}/{nodeclaim}",
        **class_tags,
        cluster_tag(cluster_name): "owned",
        TAG_EKS_CLUSTER_NAME: cluster_name,
        LABEL_NODEPOOL: nodepool,
        TAG_NODECLAIM: nodeclaim,
        TAG_NODECLASS: node_class,
    }


def pool_launch_tags(tags: Mapping[str, str]) -> dict[str, str]:
    """The launch tags every NodeClaim of one pool shares (no ``Name``, no NodeClaim): a template's tags."""
    return {key: value for key, value in tags.items() if key not in (TAG_NAME, TAG_NODECLAIM)}


def _tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"Key": key, "Value": value} for key, value in sorted(tags.items())]


def fleet_request(plan: LaunchPlan, templates: Mapping[str, str], tags: Mapping[str, str]) -> dict[str, Any]:
    """CreateFleet's parameters for ``plan``; ``templates``: each template key to its launch template's name.

    A reserved launch is an on-demand fleet whose templates target the
    reservation (Karpenter's targeted launch); its capacity type is EC2's
    ``on-demand``.
    """
    configs = []
    for key, _, _ in plan.templates:
        overrides = [
            {
                "InstanceType": override.instance_type,
                "SubnetId": override.subnet_id,
                "AvailabilityZone": override.zone,
                "ImageId": override.image_id,
                "Priority": float(priority),
            }
            for priority, override in enumerate(plan.overrides)
            if override.template_key == key
        ]
        configs.append(
            {
                "LaunchTemplateSpecification": {
                    "LaunchTemplateName": templates[key],
                    "Version": "$Latest",
                },
                "Overrides": overrides,
            }
        )
    request: dict[str, Any] = {
        "Type": "instant",
        "LaunchTemplateConfigs": configs,
        "TargetCapacitySpecification": {
            "TotalTargetCapacity": 1,
            "DefaultTargetCapacityType": (
                CAPACITY_TYPE_ON_DEMAND
                if plan.capacity_type == CAPACITY_TYPE_RESERVED
                else plan.capacity_type
            ),
        },
        "TagSpecifications": [
            {"ResourceType": resource, "Tags": _tag_list(tags)}
            for resource in ("instance", "volume", "fleet")
        ],
    }
    if plan.capacity_type == CAPACITY_TYPE_SPOT:
        request["SpotOptions"] = {"AllocationStrategy": SPOT_ALLOCATION_STRATEGY}
    else:
        request["OnDemandOptions"] = {"AllocationStrategy": ON_DEMAND_ALLOCATION_STRATEGY}
    return request


@dataclass(frozen=True, slots=True)
class LaunchedInstance:
    id: str
    instance_type: str
    zone: str
    capacity_type: str
    image_id: str


@dataclass(frozen=True, slots=True)
class FleetError:
    """One entry of CreateFleet's ``Errors``: AWS' code and message, and the offering it is about."""

    code: str
    message: str
    instance_type: str
    zone: str
    capacity_type: str

    @property
    def is_capacity(self) -> bool:
        return self.code in CAPACITY_ERROR_CODES or self.refuses_spot

    @property
    def refuses_spot(self) -> bool:
        """The account cannot launch spot at all (:data:`SPOT_REFUSED_CODES`), whatever the offering."""
        return self.code in SPOT_REFUSED_CODES

    @property
    def offering(self) -> tuple[str, str, str]:
        return (self.instance_type, self.zone, self.capacity_type)


@dataclass(frozen=True, slots=True)
class FleetOutcome:
    instance: LaunchedInstance | None
    errors: tuple[FleetError, ...]

    @property
    def launch_template_missing(self) -> bool:
        return self.instance is None and any(
            error.code in LAUNCH_TEMPLATE_NOT_FOUND_CODES for error in self.errors
        )


def _zone_of(overrides: Mapping[str, Any], plan: LaunchPlan) -> str:
    zone = str(overrides.get("AvailabilityZone", ""))
    if zone:
        return zone
    subnet = overrides.get("SubnetId", "")
    return next((override.zone for override in plan.overrides if override.subnet_id == subnet), "")


def parse_fleet_response(response: Mapping[str, Any], plan: LaunchPlan) -> FleetOutcome:
    """The instance CreateFleet launched, if any, and its errors, each tied to its offering.

    The capacity type of an error is the request's (a fleet of one capacity
    type, as Karpenter reads it); the zone is the override's, else its subnet's.
    """
    errors = []
    for raw in response.get("Errors", ()):
        overrides = raw.get("LaunchTemplateAndOverrides", {}).get("Overrides", {})
        errors.append(
            FleetError(
                code=str(raw.get("ErrorCode", "")),
                message=str(raw.get("ErrorMessage", "")),
                instance_type=str(overrides.get("InstanceType", "")),
                zone=_zone_of(overrides, plan),
                capacity_type=plan.capacity_type,
            )
        )
    for raw in response.get("Instances", ()):
        ids = raw.get("InstanceIds") or ()
        if not ids:
            continue
        overrides = raw.get("LaunchTemplateAndOverrides", {}).get("Overrides", {})
        instance_type = str(raw.get("InstanceType") or overrides.get("InstanceType", ""))
        zone = _zone_of(overrides, plan)
        image_id = str(overrides.get("ImageId", "")) or next(
            (o.image_id for o in plan.overrides if o.instance_type == instance_type and o.zone == zone), ""
        )
        lifecycle = str(raw.get("Lifecycle", "")) or plan.capacity_type
        capacity_type = CAPACITY_TYPE_SPOT if lifecycle == CAPACITY_TYPE_SPOT else CAPACITY_TYPE_ON_DEMAND
        if plan.capacity_type == CAPACITY_TYPE_RESERVED:
            capacity_type = CAPACITY_TYPE_RESERVED
        instance = LaunchedInstance(str(ids[0]), instance_type, zone, capacity_type, image_id)
        return FleetOutcome(instance, tuple(errors))
    return FleetOutcome(None, tuple(errors))


# How Karpenter's AWS provider names why a launch failed (its errors.ToReasonMessage), after the
# authorization errors, first match wins: (the substrings the error's code and message must all hold,
# the reason).
_LAUNCH_FAILURE_REASONS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("InvalidParameter", "belong to different networks"), "SecurityGroupSubnetVPCMismatch"),
    (("iamInstanceProfile.name is invalid",), "InstanceProfileNameInvalid"),
    (("InvalidLaunchTemplateId.NotFound",), "LaunchTemplateNotFound"),
    (("User data is limited to",), "UserDataSizeLimitExceeded"),
    (("InvalidAMIID.Malformed",), "InvalidAMIID"),
    (("InvalidAMIID.NotFound",), "AMINotFound"),
    (("RequestLimitExceeded",), "RequestLimitExceeded"),
    (("InternalError",), "InternalError"),
    (("not eligible for Free Tier",), "FreeTierIneligible"),
    (("MaxFleetCountExceeded",), "FleetQuotaExceeded"),
    (("PendingVerification",), "AccountPendingVerification"),
    (("MaxSpotInstanceCountExceeded",), "SpotQuotaExceeded"),
    (("VcpuLimitExceeded",), "VCPULimitExceeded"),
    (("InsufficientFreeAddressesInSubnet",), "InsufficientFreeAddressesInSubnet"),
)


def launch_failure_reason(error: FleetError) -> str:
    """The ``reason`` of ``karpenter_cloudprovider_instance_launch_failures_total`` for one CreateFleet
    error, as Karpenter's AWS provider derives it from the code and message (``LaunchFailed`` else)."""
    text = f"{error.code}: {error.message}"
    if "AuthFailure.ServiceLinkedRoleCreationNotPermitted" in text:
        return "SpotSLRCreationFailed"
    if any(denied in text for denied in ("UnauthorizedOperation", "AccessDenied", "AuthFailure")):
        denied_by_policy = any(
            f"with an explicit deny in a {policy}" in text
            for policy in ("permissions boundary", "service control policy")
        )
        if not denied_by_policy and "Not authorized for images" in text:
            return "AMIAuthorizationFailure"
        return "Unauthorized"
    for needles, reason in _LAUNCH_FAILURE_REASONS:
        if all(needle in text for needle in needles):
            return reason
    return "LaunchFailed"


def launch_error(errors: Sequence[FleetError]) -> CloudProviderError:
    """Why a fleet launched nothing: capacity for exactly the failed offerings, else AWS' own words."""
    described = "; ".join(dict.fromkeys(f"{error.code}: {error.message}" for error in errors))
    if not errors:
        return CloudProviderError("CreateFleet launched no instance and reported no error")
    if all(error.is_capacity for error in errors):
        offerings = tuple(dict.fromkeys(error.offering for error in errors))
        names = ", ".join("/".join(offering) for offering in offerings)
        return InsufficientCapacityError(f"no capacity for {names} ({described})", offerings)
    return CloudProviderError(f"CreateFleet failed: {described}")
