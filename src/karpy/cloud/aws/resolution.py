"""An EC2NodeClass resolved against the account: Karpenter's status fields and conditions.

:func:`resolve_node_class` asks AWS (through :class:`~karpy.cloud.aws.client.AwsClient`)
what each selector picks and returns a :class:`NodeClassResolution` holding
what Karpenter writes to ``EC2NodeClass.status``: ``subnets`` (id, zone,
zoneID), ``securityGroups`` (id, name), ``amis`` (id, name, requirements,
deprecated), ``instanceProfile`` and the conditions ``SubnetsReady``,
``SecurityGroupsReady``, ``AMIsReady``, ``InstanceProfileReady`` and
``Ready`` (true when all four are; else false with Karpenter's
``UnhealthyDependents``, naming the failing ones).

A selector that matches nothing gets Karpenter's reason (``SubnetsNotFound``,
``SecurityGroupsNotFound``, ``AMINotFound``) and its message, followed by the
terms as the user wrote them, so ``kubectl describe`` shows which selector to
fix. An alias whose SSM parameters are missing names the parameters read, so
a wrong prefix or Kubernetes version is visible. An AWS error that retrying
will not fix (access denied, say) makes that condition false with AWS' code
as reason and its message; one that may pass (throttling, 5xx, no
connection) is raised instead, so the caller keeps the last good status
rather than making a healthy class unready for a blip.

With the ReservedCapacity gate on, ``capacityReservations`` lists what the
class' ``capacityReservationSelectorTerms`` select
(:func:`capacity_reservations`), with EC2's count of instances left in each
for the provider.

What a NodePool sees of the class is its ``Ready`` condition:
:func:`node_class_problem_from_status` reads it, as Karpenter's NodePool
readiness controller does (the pool's ``NodeClassReady`` copies the class'
reason and message; no ``Ready`` yet reads as Karpenter's
``NodeClassReadinessUnknown``). Karpenter's ``Ready=False`` message only
names the failing conditions (``SubnetsReady=False``); karpy's names each
with its reason and message (:func:`ready_naming_causes`), so the pool's
condition and its pods' FailedScheduling events say which selector to fix
without a second ``kubectl describe``. The status controller writes that
message and the problem repeats it, so the NodePool status controller,
which writes a node class' ``Ready`` from the problem, finds nothing to change.

The instance profile is Karpenter's: ``instanceProfile`` is used as given
once it is found to exist; for a ``role`` karpy keeps a profile of its own,
named after the cluster and a digest of region and class name (stable, so it
is found again, and unique per class), tagged as Karpenter tags it, holding
exactly that role. Creating it is the one write here, and it is idempotent.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from karpy.api.conditions import FALSE, TRUE, Condition, find_condition, set_condition
from karpy.api.nodeclass import (
    CapacityReservationSelectorTerm,
    EC2NodeClass,
    NodeClassStatus,
    StatusAMI,
    StatusCapacityReservation,
    StatusSecurityGroup,
    StatusSubnet,
)
from karpy.api.nodepool import CONDITION_READY
from karpy.api.requirements import LABEL_REGION, Requirement
from karpy.cloud.aws.client import AwsApiError, AwsClient, CapacityReservation
from karpy.cloud.aws.selectors import (
    AliasError,
    Filter,
    Image,
    ResolvedAMI,
    SecurityGroup,
    Subnet,
    alias_parameters,
    describe_terms,
    image_id_query,
    image_queries,
    image_requirements,
    newest_amis,
    ordered_security_groups,
    ordered_subnets,
    security_group_filters,
    subnet_filters,
)
from karpy.cloud.provider import NodeClassProblem
from karpy.cloud.reservations import reservation_state
from karpy.operator.readiness import with_ready

CONDITION_SUBNETS_READY = "SubnetsReady"
CONDITION_SECURITY_GROUPS_READY = "SecurityGroupsReady"
CONDITION_AMIS_READY = "AMIsReady"
CONDITION_INSTANCE_PROFILE_READY = "InstanceProfileReady"
# True once the class' capacity reservations were read (none found included); a dependent
# of Ready only with the ReservedCapacity gate on, as in Karpenter.
CONDITION_CAPACITY_RESERVATIONS_READY = "CapacityReservationsReady"
# What Ready summarizes, in the order its message names them (Karpenter's order).
DEPENDENTS = (
    CONDITION_AMIS_READY,
    CONDITION_SUBNETS_READY,
    CONDITION_SECURITY_GROUPS_READY,
    CONDITION_INSTANCE_PROFILE_READY,
)
RESERVED_CAPACITY_DEPENDENTS = (*DEPENDENTS, CONDITION_CAPACITY_RESERVATIONS_READY)


def dependents(reserved_capacity: bool) -> tuple[str, ...]:
    """What ``Ready`` summarizes: with the ReservedCapacity gate on, the reservations too."""
    return RESERVED_CAPACITY_DEPENDENTS if reserved_capacity else DEPENDENTS


REASON_SUBNETS_NOT_FOUND = "SubnetsNotFound"
REASON_SECURITY_GROUPS_NOT_FOUND = "SecurityGroupsNotFound"
REASON_AMI_NOT_FOUND = "AMINotFound"
REASON_INSTANCE_PROFILE_NOT_FOUND = "InstanceProfileNotFound"
# Karpenter's NodePool reason while its node class' Ready is unknown (not resolved yet).
REASON_NODECLASS_READINESS_UNKNOWN = "NodeClassReadinessUnknown"

T = TypeVar("T")
S = TypeVar("S")

TAG_MANAGED_BY = "karpenter.sh/managed-by"
TAG_NODECLASS = "karpenter.k8s.aws/ec2nodeclass"


@dataclass(frozen=True, slots=True)
class ResolutionSettings:
    """What resolution needs beyond the class: whose cluster, where, and where aliases live."""

    cluster_name: str
    region: str
    kubernetes_version: str  # major.minor, as in the EKS AMIs' SSM paths
    ssm_prefix: str = ""  # prepended to /aws/service/...; empty on AWS itself
    reserved_capacity: bool = True  # the ReservedCapacity gate: capacity reservations are read


@dataclass(frozen=True, slots=True)
class NodeClassResolution:
    subnets: tuple[Subnet, ...] = ()
    security_groups: tuple[SecurityGroup, ...] = ()
    amis: tuple[ResolvedAMI, ...] = ()
    instance_profile: str = ""
    conditions: tuple[Condition, ...] = field(default=())
    capacity_reservations: tuple[StatusCapacityReservation, ...] = ()
    # Reservation id -> EC2's AvailableInstanceCount when read (for the provider's counts).
    available_instances: dict[str, int] = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        ready = find_condition(self.conditions, CONDITION_READY)
        return ready is not None and ready.is_true

    def status(self) -> dict[str, object]:
        """``EC2NodeClass.status`` as Karpenter writes it (empty lists and strings left out)."""
        status: dict[str, object] = {}
        if self.subnets:
            status["subnets"] = [subnet.to_status() for subnet in self.subnets]
        if self.security_groups:
            status["securityGroups"] = [group.to_status() for group in self.security_groups]
        if self.amis:
            status["amis"] = [ami.to_status() for ami in self.amis]
        if self.instance_profile:
            status["instanceProfile"] = self.instance_profile
        if self.capacity_reservations:
            status["capacityReservations"] = [r.to_status() for r in self.capacity_reservations]
        status["conditions"] = [condition.to_dict() for condition in self.conditions]
        return status

    def node_class_status(self) -> NodeClassStatus:
        """The resolution as the model's status record, the one the cluster adapters write."""
        return NodeClassStatus(
            conditions=self.conditions,
            subnets=tuple(StatusSubnet(subnet.id, subnet.zone, subnet.zone_id) for subnet in self.subnets),
            security_groups=tuple(StatusSecurityGroup(sg.id, sg.name) for sg in self.security_groups),
            amis=tuple(_status_ami(ami.to_status()) for ami in self.amis),
            instance_profile=self.instance_profile,
            capacity_reservations=self.capacity_reservations,
        )


def _status_ami(written: dict[str, object]) -> StatusAMI:
    # From the status entry, so the requirements are in the one format Karpenter writes.
    requirements = written["requirements"]
    assert isinstance(requirements, list)
    return StatusAMI(
        id=str(written["id"]),
        name=str(written["name"]),
        requirements=tuple(requirements),
        deprecated=bool(written.get("deprecated", False)),
    )


def _unready_causes(conditions: tuple[Condition, ...], kinds: tuple[str, ...] = DEPENDENTS) -> str:
    """The false dependents, each with its reason and message, in Karpenter's order."""
    causes = []
    for kind in kinds:
        found = find_condition(conditions, kind)
        if found is not None and found.status == FALSE:
            causes.append(f"{kind}=False ({found.reason}: {found.message})")
    return "; ".join(causes)


def ready_naming_causes(
    conditions: tuple[Condition, ...], now: float, kinds: tuple[str, ...] = DEPENDENTS
) -> tuple[Condition, ...]:
    """``conditions`` with ``Ready`` summarizing ``kinds``; when false, naming their messages."""
    conditions = with_ready(conditions, kinds, now)
    ready = find_condition(conditions, CONDITION_READY)
    causes = _unready_causes(conditions, kinds)
    if ready is None or ready.status != FALSE or not causes:
        return conditions
    return set_condition(conditions, CONDITION_READY, FALSE, now, ready.reason, causes)


def node_class_problem_from_status(node_class: EC2NodeClass) -> NodeClassProblem | None:
    """Why NodePools using ``node_class`` cannot launch, read from its status; None when it is Ready.

    No ``Ready`` (or ``Unknown``): not resolved yet. ``Ready=False``: its reason,
    and the false dependents with their messages (the message the status
    controller writes; a status written by someone else gets the same from its
    dependents, or its own message when it has none).
    """
    conditions = node_class.status.conditions
    ready = find_condition(conditions, CONDITION_READY)
    if ready is not None and ready.is_true:
        return None
    if ready is None or ready.status != FALSE:
        return NodeClassProblem(
            REASON_NODECLASS_READINESS_UNKNOWN,
            "its subnets, security groups, AMIs and instance profile have not been resolved yet",
        )
    return NodeClassProblem(ready.reason, _unready_causes(conditions) or ready.message)


class _Conditions:
    """The conditions being built, each set once per resolution."""

    def __init__(self, previous: tuple[Condition, ...], now: float) -> None:
        self.conditions = previous
        self.now = now

    def ready(self, kind: str) -> None:
        self.conditions = set_condition(self.conditions, kind, TRUE, self.now)

    def failed(self, kind: str, reason: str, message: str) -> None:
        self.conditions = set_condition(self.conditions, kind, FALSE, self.now, reason, message)

    def selected(self, kind: str, found: tuple[S, ...], reason: str, message: str) -> tuple[S, ...]:
        """``found``, with ``kind`` true when it holds anything, else false for ``reason``."""
        if found:
            self.ready(kind)
        else:
            self.failed(kind, reason, message)
        return found


def instance_profile_name(cluster_name: str, region: str, node_class_name: str) -> str:
    """The profile karpy keeps for a class' role: stable per (cluster, region, class)."""
    digest = hashlib.sha256(f"{region}/{node_class_name}".encode()).hexdigest()[:20]
    return f"{cluster_name}_{digest}"


def _role_name(role: str) -> str:
    # A role may be written with its path (or as an ARN); IAM calls take the bare name.
    return role.rsplit("/", 1)[-1]


def resolve_node_class(
    node_class: EC2NodeClass,
    client: AwsClient,
    settings: ResolutionSettings,
    now: float,
) -> NodeClassResolution:
    """``node_class`` resolved against the account (module docstring); raises retryable AwsApiErrors.

    Capacity reservations are read only with the ReservedCapacity gate on
    (``settings.reserved_capacity``); an error reading them is raised, retryable
    or not, as Karpenter's reconcile fails on it: the class keeps its last status.
    """
    found = capacity_reservations(node_class, client, now) if settings.reserved_capacity else ()
    conditions = _Conditions(node_class.status.conditions, now)
    if settings.reserved_capacity:
        conditions.ready(CONDITION_CAPACITY_RESERVATIONS_READY)  # read, whatever it found (Karpenter's)
    subnets = (
        _guarded(conditions, CONDITION_SUBNETS_READY, lambda: _subnets(node_class, client, conditions)) or ()
    )
    groups = (
        _guarded(
            conditions,
            CONDITION_SECURITY_GROUPS_READY,
            lambda: _security_groups(node_class, client, conditions),
        )
        or ()
    )
    amis = (
        _guarded(conditions, CONDITION_AMIS_READY, lambda: _amis(node_class, client, settings, conditions))
        or ()
    )
    profile = (
        _guarded(
            conditions,
            CONDITION_INSTANCE_PROFILE_READY,
            lambda: _instance_profile(node_class, client, settings, conditions),
        )
        or ""
    )
    return NodeClassResolution(
        subnets=subnets,
        security_groups=groups,
        amis=amis,
        instance_profile=profile,
        conditions=with_ready(conditions.conditions, dependents(settings.reserved_capacity), now),
        capacity_reservations=tuple(reservation for reservation, _ in found),
        available_instances={reservation.id: available for reservation, available in found},
    )


def _reservation_filters(term: CapacityReservationSelectorTerm) -> tuple[Filter, ...]:
    """Karpenter's DescribeCapacityReservations filters for a term without an id (active ones only)."""
    filters: list[Filter] = [("state", ("active",))]
    if term.owner_id:
        filters.append(("owner-id", (term.owner_id,)))
    for key, value in sorted(term.tags.items()):
        filters.append(("tag-key", (key,)) if value == "*" else (f"tag:{key}", (value,)))
    if term.instance_match_criteria:
        filters.append(("instance-match-criteria", (term.instance_match_criteria,)))
    return tuple(filters)


def capacity_reservations(
    node_class: EC2NodeClass, client: AwsClient, now: float
) -> tuple[tuple[StatusCapacityReservation, int], ...]:
    """The class' active, unexpired reservations, by id, each with EC2's count of instances left.

    As Karpenter: an id term is looked up by id (a missing id selects
    nothing), any other term by filters; duplicates and reservations whose end
    has passed are dropped, and a Capacity Block within 40 minutes of its end
    is ``expiring`` (EC2 reclaims it 30 minutes before): not launched into.
    A reservation of an instance match criteria other than open or targeted
    is skipped.
    """
    found: dict[str, CapacityReservation] = {}
    for term in node_class.capacity_reservation_selector_terms:
        if term.id:
            listed = client.describe_capacity_reservations(ids=(term.id,), filters=(("state", ("active",)),))
        else:
            listed = client.describe_capacity_reservations(filters=_reservation_filters(term))
        for reservation in listed:
            found.setdefault(reservation.id, reservation)
    resolved = []
    for reservation in sorted(found.values(), key=lambda r: r.id):
        if reservation.end_time is not None and reservation.end_time <= now:
            continue
        if reservation.instance_match_criteria not in ("open", "targeted"):
            continue
        status = StatusCapacityReservation(
            id=reservation.id,
            instance_type=reservation.instance_type,
            zone=reservation.zone,
            reservation_type=reservation.reservation_type,
            interruptible=reservation.interruptible,
            instance_match_criteria=reservation.instance_match_criteria,
            owner_id=reservation.owner_id,
            end_time=reservation.end_time,
            state=reservation_state(reservation.reservation_type, reservation.end_time, now),
        )
        resolved.append((status, reservation.available))
    return tuple(resolved)


def _guarded(conditions: _Conditions, kind: str, resolve: Callable[[], T]) -> T | None:
    """``resolve()``; a lasting AWS error makes ``kind`` false (None), a passing one is raised."""
    try:
        return resolve()
    except AwsApiError as error:
        if error.retryable:
            raise
        conditions.failed(kind, error.code, error.message or error.code)
        return None


def _subnets(node_class: EC2NodeClass, client: AwsClient, conditions: _Conditions) -> tuple[Subnet, ...]:
    terms = node_class.subnet_selector_terms
    return conditions.selected(
        CONDITION_SUBNETS_READY,
        ordered_subnets(subnet for term in terms for subnet in client.describe_subnets(subnet_filters(term))),
        REASON_SUBNETS_NOT_FOUND,
        f"SubnetSelector did not match any Subnets: {describe_terms('subnetSelectorTerms', terms)}",
    )


def _security_groups(
    node_class: EC2NodeClass, client: AwsClient, conditions: _Conditions
) -> tuple[SecurityGroup, ...]:
    terms = node_class.security_group_selector_terms
    return conditions.selected(
        CONDITION_SECURITY_GROUPS_READY,
        ordered_security_groups(
            group for term in terms for group in client.describe_security_groups(security_group_filters(term))
        ),
        REASON_SECURITY_GROUPS_NOT_FOUND,
        "SecurityGroupSelector did not match any SecurityGroups: "
        + describe_terms("securityGroupSelectorTerms", terms),
    )


def _amis(
    node_class: EC2NodeClass, client: AwsClient, settings: ResolutionSettings, conditions: _Conditions
) -> tuple[ResolvedAMI, ...]:
    terms = node_class.ami_selector_terms
    candidates: list[tuple[Image, tuple[Requirement, ...]]] = []
    problems: list[str] = []
    for term in terms:
        if not term.alias:
            continue
        try:
            parameters = alias_parameters(term.alias, settings.ssm_prefix, settings.kubernetes_version)
        except AliasError as error:
            problems.append(str(error))
            continue
        requirements_by_image: dict[str, tuple[Requirement, ...]] = {}
        for parameter in parameters:
            image_id = client.parameter(parameter.name)
            if image_id:
                requirements_by_image[image_id] = parameter.requirements
        if not requirements_by_image:
            problems.append(
                f"alias {term.alias}: no SSM parameter found ({', '.join(p.name for p in parameters)})"
            )
            continue
        images = client.describe_images(image_id_query(requirements_by_image), conditions.now)
        candidates.extend((image, requirements_by_image[image.id]) for image in images)
    for query in image_queries(terms):
        for image in client.describe_images(query, conditions.now):
            requirements = image_requirements(image)
            if requirements is not None:
                candidates.append((image, requirements))
    detail = "; ".join(problems) if problems else describe_terms("amiSelectorTerms", terms)
    return conditions.selected(
        CONDITION_AMIS_READY,
        newest_amis(candidates),
        REASON_AMI_NOT_FOUND,
        f"AMISelector did not match any AMIs: {detail}",
    )


def _instance_profile(
    node_class: EC2NodeClass, client: AwsClient, settings: ResolutionSettings, conditions: _Conditions
) -> str:
    if node_class.instance_profile:
        if client.instance_profile_roles(node_class.instance_profile) is None:
            conditions.failed(
                CONDITION_INSTANCE_PROFILE_READY,
                REASON_INSTANCE_PROFILE_NOT_FOUND,
                f"instanceProfile {node_class.instance_profile} does not exist",
            )
            return ""
        conditions.ready(CONDITION_INSTANCE_PROFILE_READY)
        return node_class.instance_profile
    name = instance_profile_name(settings.cluster_name, settings.region, node_class.name)
    roles = client.instance_profile_roles(name)
    if roles is None:
        client.create_instance_profile(
            name,
            {
                TAG_MANAGED_BY: settings.cluster_name,
                TAG_NODECLASS: node_class.name,
                LABEL_REGION: settings.region,
                f"kubernetes.io/cluster/{settings.cluster_name}": "owned",
            },
        )
        roles = ()
    client.set_instance_profile_role(name, _role_name(node_class.role), roles)
    conditions.ready(CONDITION_INSTANCE_PROFILE_READY)
    return name
