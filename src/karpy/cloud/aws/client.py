"""Every AWS call of the provider, in one small class: the seam between karpy and boto3.

The class turns the SDK's responses into the records of
:mod:`karpy.cloud.aws.selectors` and its errors into one
:class:`AwsApiError`, so the code that decides things never sees a boto3
response and the tests exercise the real SDK over real HTTP (against a local
endpoint) with no test-only path in karpy.

Configuration is the SDK's own: credentials from the standard chain
(environment, web identity for IRSA, instance metadata…) and the endpoint
from ``AWS_ENDPOINT_URL`` (botocore honours it, per service too); karpy only
passes the region, which it reads from ``AWS_REGION`` as Karpenter does.
botocore's ``standard`` retry mode retries throttling and 5xx with backoff and
jitter before an error reaches karpy; what still fails is marked
``retryable`` so a caller keeps its last good state rather than acting on it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import boto3
from botocore.client import BaseClient
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from karpy.cloud.aws.selectors import Filter, Image, ImageQuery, SecurityGroup, Subnet

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_ec2.type_defs import FilterTypeDef
    from mypy_boto3_iam import IAMClient
    from mypy_boto3_ssm import SSMClient

_RETRIES = Config(retries={"mode": "standard", "max_attempts": 5})
# The operations that only read (every other one changes something, and is fenced).
READ_OPERATION_PREFIXES = ("Describe", "Get", "List")
# Where the Pricing API is served: one region per partition.
PRICING_REGION = "us-east-1"
PRICING_REGION_CHINA = "cn-northwest-1"
# The currency of the price list: dollars, or yuan in China.
PRICE_CURRENCIES = ("USD", "CNY")
# Error codes that say "try again later", not "this is wrong".
_RETRYABLE_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "TooManyRequestsException",
        "ServiceUnavailable",
        "InternalError",
        "InternalFailure",
        "Unavailable",
    }
)


# Instance states that still hold (or will hold) capacity: what get/list report, as Karpenter filters them.
LIVE_INSTANCE_STATES = ("pending", "running", "stopping", "stopped", "shutting-down")


@dataclass(frozen=True, slots=True)
class Ec2Instance:
    """What the provider reads of an EC2 instance."""

    id: str
    instance_type: str
    zone: str
    capacity_type: str  # "spot" or "on-demand"
    image_id: str
    state: str
    launch_time: float
    subnet_id: str = ""
    security_group_ids: tuple[str, ...] = ()
    tags: Mapping[str, str] = field(default_factory=dict)
    # The capacity reservation the instance runs in ("" : none).
    capacity_reservation_id: str = ""


@dataclass(frozen=True, slots=True)
class CapacityReservation:
    """What the provider reads of a capacity reservation (DescribeCapacityReservations)."""

    id: str
    instance_type: str
    zone: str
    owner_id: str
    instance_match_criteria: str
    reservation_type: str  # "default" or "capacity-block"
    interruptible: bool
    end_time: float | None
    available: int  # AvailableInstanceCount


def _reservation(found: Mapping[str, Any]) -> CapacityReservation:
    end = found.get("EndDate")
    return CapacityReservation(
        id=found["CapacityReservationId"],
        instance_type=found.get("InstanceType", ""),
        zone=found.get("AvailabilityZone", ""),
        owner_id=found.get("OwnerId", ""),
        instance_match_criteria=found.get("InstanceMatchCriteria", ""),
        reservation_type=found.get("ReservationType") or "default",
        interruptible=bool(found.get("Interruptible", False)),
        end_time=end.timestamp() if isinstance(end, datetime) else None,
        available=int(found.get("AvailableInstanceCount", 0)),
    )


@dataclass(frozen=True, slots=True)
class LaunchTemplate:
    id: str
    name: str
    tags: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class InstanceProfile:
    name: str
    roles: tuple[str, ...] = ()
    tags: Mapping[str, str] = field(default_factory=dict)


def _instance(found: Mapping[str, Any]) -> Ec2Instance:
    return Ec2Instance(
        id=found["InstanceId"],
        instance_type=found.get("InstanceType", ""),
        zone=found.get("Placement", {}).get("AvailabilityZone", ""),
        capacity_type="spot" if found.get("InstanceLifecycle") == "spot" else "on-demand",
        capacity_reservation_id=found.get("CapacityReservationId", ""),
        image_id=found.get("ImageId", ""),
        state=found.get("State", {}).get("Name", ""),
        launch_time=found["LaunchTime"].timestamp() if "LaunchTime" in found else 0.0,
        subnet_id=found.get("SubnetId", ""),
        security_group_ids=tuple(group["GroupId"] for group in found.get("SecurityGroups", ())),
        tags={tag["Key"]: tag["Value"] for tag in found.get("Tags", ())},
    )


def _template(found: Mapping[str, Any]) -> LaunchTemplate:
    return LaunchTemplate(
        id=found.get("LaunchTemplateId", ""),
        name=found.get("LaunchTemplateName", ""),
        tags={tag["Key"]: tag["Value"] for tag in found.get("Tags", ())},
    )


class AwsApiError(Exception):
    """An AWS call that failed: its error code, AWS' message, and whether retrying may help."""

    def __init__(self, code: str, message: str, retryable: bool) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
        self.retryable = retryable


def _api_error(error: ClientError | BotoCoreError) -> AwsApiError:
    if isinstance(error, BotoCoreError):
        # No answer at all (connection refused, timeout): the endpoint may come back.
        return AwsApiError(type(error).__name__, str(error), retryable=True)
    details = error.response.get("Error", {})
    code = details.get("Code", "Unknown")
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return AwsApiError(code, details.get("Message", ""), code in _RETRYABLE_CODES or status >= 500)


@contextmanager
def _translated() -> Iterator[None]:
    """SDK errors raised inside as :class:`AwsApiError`."""
    try:
        yield
    except (ClientError, BotoCoreError) as error:
        raise _api_error(error) from error


def _unless_gone(call: Callable[..., object], **arguments: str) -> None:
    """An IAM call for which NoSuchEntity (already gone) counts as done."""
    try:
        with _translated():
            call(**arguments)
    except AwsApiError as error:
        if error.code != "NoSuchEntity":
            raise


def _filters(filters: tuple[Filter, ...]) -> list[FilterTypeDef]:
    return [{"Name": name, "Values": list(values)} for name, values in filters]


def _deprecated(deprecation_time: str, now: float) -> bool:
    if not deprecation_time:
        return False
    return datetime.fromisoformat(deprecation_time).timestamp() <= now


class AwsClient:
    """The EC2, SSM and IAM calls of EC2NodeClass resolution, and the EC2 calls that launch and terminate."""

    def __init__(self, session: boto3.session.Session) -> None:
        self._ec2: EC2Client = session.client("ec2", config=_RETRIES)
        self._ssm: SSMClient = session.client("ssm", config=_RETRIES)
        self._iam: IAMClient = session.client("iam", config=_RETRIES)

    def fence(self, check: Callable[[], None]) -> None:
        """Call ``check()`` before every EC2, SSM or IAM operation that changes something.

        ``check`` raises to refuse the call (``karpy run`` passes the leader
        elector's check); reads pass unchecked. The SDK's ``provide-client-params``
        event is the first place every operation goes through, whichever thread
        makes it (a launch job on the pool, or a reconcile), before anything is
        signed or sent.
        """

        def fence_writes(model: Any, **_: Any) -> None:
            if not str(model.name).startswith(READ_OPERATION_PREFIXES):
                check()

        for client in (self._ec2, self._ssm, self._iam):
            client.meta.events.register_first("provide-client-params", fence_writes)

    @classmethod
    def for_region(cls, region: str) -> AwsClient:
        """A client for ``region`` with the SDK's standard credentials and endpoint configuration."""
        return cls(boto3.session.Session(region_name=region or None))

    def describe_subnets(self, filters: tuple[Filter, ...]) -> list[Subnet]:
        subnets: list[Subnet] = []
        with _translated():
            for page in self._ec2.get_paginator("describe_subnets").paginate(Filters=_filters(filters)):
                subnets.extend(
                    Subnet(
                        id=found["SubnetId"],
                        zone=found["AvailabilityZone"],
                        zone_id=found.get("AvailabilityZoneId", ""),
                        available_ips=found.get("AvailableIpAddressCount", 0),
                    )
                    for found in page["Subnets"]
                )
        return subnets

    def describe_capacity_reservations(
        self, *, ids: Sequence[str] = (), filters: tuple[Filter, ...] = ()
    ) -> list[CapacityReservation]:
        """The reservations with ``ids``, or those ``filters`` select; an unknown id is none, not an error."""
        found: list[CapacityReservation] = []
        arguments: dict[str, Any] = {"Filters": _filters(filters)}
        if ids:
            arguments["CapacityReservationIds"] = list(ids)
        try:
            with _translated():
                paginator = self._ec2.get_paginator("describe_capacity_reservations")
                for page in paginator.paginate(**arguments):
                    found.extend(_reservation(item) for item in page["CapacityReservations"])
        except AwsApiError as error:
            if error.code != "InvalidCapacityReservationId.NotFound":
                raise
        return found

    def describe_security_groups(self, filters: tuple[Filter, ...]) -> list[SecurityGroup]:
        groups: list[SecurityGroup] = []
        with _translated():
            paginator = self._ec2.get_paginator("describe_security_groups")
            for page in paginator.paginate(Filters=_filters(filters)):
                groups.extend(
                    SecurityGroup(found["GroupId"], found["GroupName"]) for found in page["SecurityGroups"]
                )
        return groups

    def describe_images(self, query: ImageQuery, now: float) -> list[Image]:
        """The images ``query`` matches, deprecated ones included (marked, for the caller to rank)."""
        images: list[Image] = []
        with _translated():
            paginator = self._ec2.get_paginator("describe_images")
            pages = (
                paginator.paginate(
                    Filters=_filters(query.filters), Owners=list(query.owners), IncludeDeprecated=True
                )
                if query.owners
                else paginator.paginate(Filters=_filters(query.filters), IncludeDeprecated=True)
            )
            for page in pages:
                images.extend(
                    Image(
                        id=found["ImageId"],
                        name=found.get("Name", ""),
                        architecture=found.get("Architecture", ""),
                        creation_date=found.get("CreationDate", ""),
                        deprecated=_deprecated(found.get("DeprecationTime", ""), now),
                    )
                    for found in page["Images"]
                    if found.get("State", "available") == "available"
                )
        return images

    def parameter(self, name: str) -> str | None:
        """An SSM parameter's value, or None when there is no such parameter."""
        try:
            with _translated():
                return self._ssm.get_parameter(Name=name)["Parameter"].get("Value")
        except AwsApiError as error:
            if error.code == "ParameterNotFound":
                return None
            raise

    def instance_profile(self, name: str) -> InstanceProfile | None:
        """An instance profile with its roles and tags, or None when it does not exist."""
        try:
            with _translated():
                found = self._iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
        except AwsApiError as error:
            if error.code == "NoSuchEntity":
                return None
            raise
        return InstanceProfile(
            name=name,
            roles=tuple(role["RoleName"] for role in found["Roles"]),
            tags={tag["Key"]: tag["Value"] for tag in found.get("Tags", ())},
        )

    def instance_profile_roles(self, name: str) -> tuple[str, ...] | None:
        """The names of the roles an instance profile holds, or None when it does not exist."""
        profile = self.instance_profile(name)
        return None if profile is None else profile.roles

    def create_instance_profile(self, name: str, tags: Mapping[str, str]) -> None:
        with _translated():
            self._iam.create_instance_profile(
                InstanceProfileName=name, Tags=[{"Key": key, "Value": value} for key, value in tags.items()]
            )

    def set_instance_profile_role(self, name: str, role: str, current: tuple[str, ...]) -> None:
        """Make ``role`` the one role of profile ``name``, which holds ``current`` now."""
        with _translated():
            for other in current:
                if other != role:
                    self._iam.remove_role_from_instance_profile(InstanceProfileName=name, RoleName=other)
            if role not in current:
                self._iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=role)

    def instance_profiles(self, name_prefix: str) -> list[InstanceProfile]:
        """The instance profiles whose names start with ``name_prefix``, with their roles and tags.

        ListInstanceProfiles leaves tags out of what it returns, so each
        profile of the prefix is read again with GetInstanceProfile (which
        karpy's policy grants already); the prefix keeps those reads to the
        profiles that can be karpy's. A profile deleted between the two calls
        is left out.
        """
        with _translated():
            names = [
                profile["InstanceProfileName"]
                for page in self._iam.get_paginator("list_instance_profiles").paginate(PathPrefix="/")
                for profile in page["InstanceProfiles"]
                if profile["InstanceProfileName"].startswith(name_prefix)
            ]
        return [profile for profile in map(self.instance_profile, names) if profile is not None]

    def delete_instance_profile(self, profile: InstanceProfile) -> None:
        """Detach the profile's roles, then delete it; a role or profile already gone is not an error.

        IAM refuses to delete a profile that still holds a role, hence the order.
        """
        for role in profile.roles:
            _unless_gone(
                self._iam.remove_role_from_instance_profile, InstanceProfileName=profile.name, RoleName=role
            )
        _unless_gone(self._iam.delete_instance_profile, InstanceProfileName=profile.name)

    # -- launching (the provider's CreateFleet path) -------------------------

    def create_fleet(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """CreateFleet with ``request`` (:mod:`karpy.cloud.aws.fleet`): its ``Errors`` and ``Instances``."""
        with _translated():
            response = self._ec2.create_fleet(**request)
        return {"Errors": response.get("Errors", []), "Instances": response.get("Instances", [])}

    def launch_templates_named(self, names: Sequence[str]) -> list[LaunchTemplate]:
        """The launch templates of those names that exist (none is not an error)."""
        with _translated():
            found = self._ec2.describe_launch_templates(
                Filters=[{"Name": "launch-template-name", "Values": list(names)}]
            )["LaunchTemplates"]
        return [_template(item) for item in found]

    def launch_templates_tagged(self, key: str, value: str) -> list[LaunchTemplate]:
        templates: list[LaunchTemplate] = []
        with _translated():
            paginator = self._ec2.get_paginator("describe_launch_templates")
            for page in paginator.paginate(Filters=[{"Name": f"tag:{key}", "Values": [value]}]):
                templates.extend(_template(item) for item in page["LaunchTemplates"])
        return templates

    def create_launch_template(self, name: str, data: Mapping[str, Any], tags: Mapping[str, str]) -> str:
        with _translated():
            created = self._ec2.create_launch_template(
                LaunchTemplateName=name,
                LaunchTemplateData=data,  # type: ignore[arg-type]
                TagSpecifications=[
                    {
                        "ResourceType": "launch-template",
                        "Tags": [{"Key": key, "Value": value} for key, value in tags.items()],
                    }
                ],
            )
        return created["LaunchTemplate"].get("LaunchTemplateId", "")

    def delete_launch_template(self, name: str) -> None:
        with _translated():
            self._ec2.delete_launch_template(LaunchTemplateName=name)

    def describe_instances(
        self, *, ids: Sequence[str] = (), filters: tuple[Filter, ...] = ()
    ) -> list[Ec2Instance]:
        """Live instances (:data:`LIVE_INSTANCE_STATES`) by id and/or filters; unknown ids: none."""
        state = ("instance-state-name", LIVE_INSTANCE_STATES)
        instances: list[Ec2Instance] = []
        try:
            with _translated():
                paginator = self._ec2.get_paginator("describe_instances")
                pages = (
                    paginator.paginate(InstanceIds=list(ids), Filters=_filters((*filters, state)))
                    if ids
                    else paginator.paginate(Filters=_filters((*filters, state)))
                )
                for page in pages:
                    for reservation in page["Reservations"]:
                        instances.extend(_instance(found) for found in reservation["Instances"])
        except AwsApiError as error:
            if error.code in ("InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"):
                return []
            raise
        return sorted(instances, key=lambda instance: instance.id)

    def reboot_instances(self, ids: Sequence[str]) -> None:
        """Reboot in place (EC2's RebootInstances: asynchronous, no client token)."""
        with _translated():
            self._ec2.reboot_instances(InstanceIds=list(ids))

    def terminate_instances(self, ids: Sequence[str]) -> dict[str, str]:
        """Terminate; the state each instance was in before (empty for ids EC2 does not know)."""
        try:
            with _translated():
                changes = self._ec2.terminate_instances(InstanceIds=list(ids))["TerminatingInstances"]
        except AwsApiError as error:
            if error.code == "InvalidInstanceID.NotFound":
                return {}
            raise
        return {change["InstanceId"]: change.get("PreviousState", {}).get("Name", "") for change in changes}

    # -- pricing -------------------------------------------------------------------
    #
    # The Pricing API is served from one region per partition (us-east-1, or
    # cn-northwest-1 in China), whatever region the instances run in; the client
    # is made on first use, with the SDK's standard credentials and endpoint
    # configuration, as every client here.

    _pricing: BaseClient | None = None

    @property
    def region(self) -> str:
        """The region the EC2 calls go to (the instances' region)."""
        return self._ec2.meta.region_name

    def pricing_client(self) -> BaseClient:
        if self._pricing is None:
            region = PRICING_REGION_CHINA if self.region.startswith("cn-") else PRICING_REGION
            self._pricing = boto3.session.Session(region_name=region).client("pricing", config=_RETRIES)
        return self._pricing

    def on_demand_prices(self, region: str) -> dict[str, float]:
        """Hourly on-demand prices of Linux, shared-tenancy instances in ``region``, by instance type.

        The Pricing API's price list entries are JSON documents; a type listed
        more than once (a second SKU for the same usage) keeps its lowest price.
        """
        filters = [
            {"Type": "TERM_MATCH", "Field": attribute, "Value": value}
            for attribute, value in (
                ("regionCode", region),
                ("operatingSystem", "Linux"),
                ("tenancy", "Shared"),
                ("preInstalledSw", "NA"),
                ("capacitystatus", "Used"),
                ("operation", "RunInstances"),
            )
        ]
        prices: dict[str, float] = {}
        with _translated():
            paginator = self.pricing_client().get_paginator("get_products")
            for page in paginator.paginate(ServiceCode="AmazonEC2", Filters=filters):
                for document in page.get("PriceList", []):
                    found = on_demand_price(json.loads(document) if isinstance(document, str) else document)
                    if found is not None:
                        name, price = found
                        prices[name] = min(price, prices.get(name, price))
        return prices

    def spot_prices(self, since: float) -> dict[tuple[str, str], float]:
        """The latest Linux spot price of each (instance type, zone) since ``since``; the newest wins."""
        latest: dict[tuple[str, str], tuple[datetime, float]] = {}
        with _translated():
            paginator = self._ec2.get_paginator("describe_spot_price_history")
            pages = paginator.paginate(
                ProductDescriptions=["Linux/UNIX"], StartTime=datetime.fromtimestamp(since, tz=UTC)
            )
            for page in pages:
                for record in page["SpotPriceHistory"]:
                    key = (record.get("InstanceType", ""), record.get("AvailabilityZone", ""))
                    when = record.get("Timestamp", datetime.fromtimestamp(0, tz=UTC))
                    try:
                        price = float(record.get("SpotPrice", ""))
                    except ValueError:
                        continue
                    if all(key) and (key not in latest or when > latest[key][0]):
                        latest[key] = (when, price)
        return {key: price for key, (_, price) in latest.items()}


def on_demand_price(entry: Mapping[str, Any]) -> tuple[str, float] | None:
    """(instance type, hourly price) from one Pricing API price list entry, or None if it has none."""
    name = entry.get("product", {}).get("attributes", {}).get("instanceType")
    if not isinstance(name, str) or not name:
        return None
    for term in entry.get("terms", {}).get("OnDemand", {}).values():
        for dimension in term.get("priceDimensions", {}).values():
            for currency in PRICE_CURRENCIES:
                amount = dimension.get("pricePerUnit", {}).get(currency)
                if amount is None:
                    continue
                try:
                    price = float(amount)
                except ValueError:
                    continue
                if price > 0:
                    return name, price
    return None
