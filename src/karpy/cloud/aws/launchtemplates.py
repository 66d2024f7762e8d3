"""Launch templates: one per distinct set of launch options, named by their hash, found again after a restart.

A CreateFleet call names launch templates; what differs between launches of
one node class is the AMI (one per architecture) and the user data (labels
and taints of the pool), so a template is made per distinct
:class:`LaunchOptions`: AMI, user data, security groups, instance profile,
IMDS options, block devices, monitoring, public IP and tags.

**Names.** ``karpenter.k8s.aws/<hash>``, the hash a digest of the options in
a canonical form, as Karpenter names them. The same options give the same
name in every process, so after a restart a template is found by name
(DescribeLaunchTemplates) instead of made twice; two processes racing to
create it both succeed ("already exists" means the other one won, with the
same content). Nothing else is remembered: the in-process cache only saves
the describe call.

**IMDS.** The class' ``metadataOptions``, whose defaults are Karpenter's:
IMDSv2 only (``HttpTokens=required``) and a hop limit of 1, so a pod cannot
reach the node's credentials through the metadata service.

**Tags and cleanup.** Each template carries ``karpenter.k8s.aws/cluster``,
``karpenter.k8s.aws/ec2nodeclass`` and the cluster's ownership tag, as
Karpenter tags them. The network interfaces it launches (and, for spot, the
spot instance requests) are tagged with the launch's tags that every
NodeClaim of the pool shares (:func:`karpy.cloud.aws.fleet.pool_launch_tags`:
the class' tags, the cluster's ownership tag, the NodePool and the class),
as Karpenter's templates tag them: the controller policy in ``docs/aws.md``
lets CreateFleet create those resources only with the cluster and NodePool
tags in the request, so a template without them could launch nothing.
:class:`LaunchTemplateCleanup` deletes the cluster's templates whose node
class no longer exists, when an EC2NodeClass goes away and hourly (a
deletion missed while karpy was down is caught then). A template deleted
behind karpy's back is recreated: :meth:`LaunchTemplates.forget` drops it
from the cache and the next :meth:`LaunchTemplates.ensure` creates it.

**Instance profiles.** :class:`InstanceProfileCleanup` does the same for the
instance profiles karpy makes for a class' ``role``
(:func:`karpy.cloud.aws.resolution.instance_profile_name`), as Karpenter
removes them with their class: role detached, then profile deleted. Only a
profile carrying all of karpy's tags for this cluster and region is touched,
never one a class names in ``instanceProfile`` nor another cluster's; while
the gone class still has live instances its profile stays, and it is tried
again a minute later, as is a profile whose IAM call failed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

from karpy.api.nodeclass import EC2_GROUP, EC2_KIND, EC2NodeClass, MetadataOptions, StatusCapacityReservation
from karpy.api.nodeclass import BlockDeviceMapping as ClassBlockDeviceMapping
from karpy.api.quantity import Quantity, amount_of
from karpy.api.requirements import LABEL_REGION
from karpy.cloud.aws.client import AwsApiError, AwsClient, InstanceProfile
from karpy.cloud.aws.fleet import LAUNCH_TEMPLATE_NOT_FOUND_CODES, TAG_NODECLASS, cluster_tag
from karpy.cloud.aws.resolution import TAG_MANAGED_BY
from karpy.cloud.aws.settings import AwsSettings
from karpy.logs import FailureStreak, about
from karpy.operator.cluster import ClusterReader
from karpy.operator.karpenter_metrics import Metrics
from karpy.operator.runtime import ChangeMapper, Watch

log = logging.getLogger("karpy.cloud.aws")

TEMPLATE_NAME_PREFIX = "karpenter.k8s.aws/"
TAG_CLUSTER = "karpenter.k8s.aws/cluster"
ALREADY_EXISTS_CODE = "InvalidLaunchTemplateName.AlreadyExistsException"
CLEANUP_INTERVAL = 3600.0
# A profile kept for a live instance, or a failed IAM call: looked at again this soon.
PROFILE_RETRY_INTERVAL = 60.0
# What the cleanups' failure streaks are about (see karpy.logs.FailureStreak).
CLEANING_TEMPLATES = "cleaning up the launch templates of deleted EC2NodeClasses"
CLEANING_PROFILES = "cleaning up the instance profiles of deleted EC2NodeClasses"
_GIGA = 10**9
# EC2's CapacityReservationPreference and MarketType values of Karpenter's targeted launches.
RESERVATIONS_ONLY = "capacity-reservations-only"
RESERVATION_PREFERENCE_NONE = "none"
MARKET_CAPACITY_BLOCK = "capacity-block"
MARKET_INTERRUPTIBLE_RESERVATION = "interruptible-capacity-reservation"
RESERVATION_TYPE_CAPACITY_BLOCK = "capacity-block"


@dataclass(frozen=True, slots=True)
class LaunchOptions:
    """Everything a launch template holds; equal options share one template."""

    image_id: str
    user_data: str
    security_group_ids: tuple[str, ...]
    instance_profile: str
    metadata_options: MetadataOptions
    block_device_mappings: tuple[ClassBlockDeviceMapping, ...] = ()
    detailed_monitoring: bool = False
    associate_public_ip_address: bool | None = None
    tags: tuple[tuple[str, str], ...] = ()
    spot: bool = False
    # Karpenter's targeted launch mode (gate ReservedCapacity): a reserved launch targets its
    # reservation only, any other launch opts out of open reservations ("" : EC2's default, open).
    reservation_preference: str = ""
    capacity_reservation_id: str = ""
    # A Capacity Block's or an interruptible reservation's market type ("" : none).
    market_type: str = ""

    @property
    def name(self) -> str:
        options = asdict(self)
        for key in ("reservation_preference", "capacity_reservation_id", "market_type"):
            if not options[key]:
                del options[key]  # the names of templates made before these fields stay the same
        canonical = json.dumps(options, sort_keys=True, separators=(",", ":"))
        return TEMPLATE_NAME_PREFIX + hashlib.sha256(canonical.encode()).hexdigest()[:20]

    def template_data(self) -> dict[str, Any]:
        """The template's ``LaunchTemplateData``, as EC2 takes it."""
        imds = self.metadata_options
        data: dict[str, Any] = {
            "ImageId": self.image_id,
            "SecurityGroupIds": list(self.security_group_ids),
            "MetadataOptions": {
                "HttpEndpoint": imds.http_endpoint,
                "HttpProtocolIpv6": imds.http_protocol_ipv6,
                "HttpPutResponseHopLimit": imds.http_put_response_hop_limit,
                "HttpTokens": imds.http_tokens,
            },
            "Monitoring": {"Enabled": self.detailed_monitoring},
        }
        if self.user_data:
            data["UserData"] = base64.b64encode(self.user_data.encode()).decode()
        if self.instance_profile:
            data["IamInstanceProfile"] = {"Name": self.instance_profile}
        if self.block_device_mappings:
            data["BlockDeviceMappings"] = [_block_device(mapping) for mapping in self.block_device_mappings]
        if self.associate_public_ip_address is not None:
            # A network interface of its own carries the choice; the groups move onto it.
            data["NetworkInterfaces"] = [
                {
                    "DeviceIndex": 0,
                    "AssociatePublicIpAddress": self.associate_public_ip_address,
                    "Groups": list(self.security_group_ids),
                }
            ]
            del data["SecurityGroupIds"]
        if self.reservation_preference:
            specification: dict[str, Any] = {"CapacityReservationPreference": self.reservation_preference}
            if self.capacity_reservation_id:
                specification["CapacityReservationTarget"] = {
                    "CapacityReservationId": self.capacity_reservation_id
                }
            data["CapacityReservationSpecification"] = specification
        if self.market_type:
            data["InstanceMarketOptions"] = {"MarketType": self.market_type}
        if self.tags:
            tagged = ("network-interface", "spot-instances-request") if self.spot else ("network-interface",)
            data["TagSpecifications"] = [
                {"ResourceType": resource, "Tags": [{"Key": k, "Value": v} for k, v in self.tags]}
                for resource in tagged
            ]
        return data


def volume_size_gib(volume_size: str) -> int:
    """EC2's ``VolumeSize`` for a class' ``volumeSize`` quantity: whole gigabytes (10^9 bytes), rounded up.

    This is Karpenter's conversion, so a class moved from Karpenter gets the
    same disks: ``100Gi`` (107.4 GB) is 108 and ``20G`` is 20. EC2 reads the
    number as GiB, so the volume is never smaller than the quantity asked for.
    """
    return math.ceil(Fraction(amount_of("memory", Quantity.parse(volume_size)), _GIGA))


def _block_device(mapping: ClassBlockDeviceMapping) -> dict[str, Any]:
    ebs: dict[str, Any] = {}
    if mapping.volume_size:
        ebs["VolumeSize"] = volume_size_gib(mapping.volume_size)
    optional = {
        "VolumeType": mapping.volume_type,
        "Iops": mapping.iops,
        "Throughput": mapping.throughput,
        "Encrypted": mapping.encrypted,
        "KmsKeyId": mapping.kms_key_id,
        "DeleteOnTermination": mapping.delete_on_termination,
        "SnapshotId": mapping.snapshot_id,
        "VolumeInitializationRate": mapping.volume_initialization_rate,
    }
    ebs.update({key: value for key, value in optional.items() if value not in (None, "")})
    return {"DeviceName": mapping.device_name, "Ebs": ebs}


def launch_options(
    node_class: EC2NodeClass,
    image_id: str,
    user_data: str,
    tags: Mapping[str, str] | None = None,
    *,
    spot: bool = False,
    targeted: bool = False,
    reservation: StatusCapacityReservation | None = None,
) -> LaunchOptions:
    """The options of the class' launches from ``image_id`` with ``user_data``, from its resolved status.

    ``tags`` go on the network interfaces (and spot requests, with ``spot``)
    the template launches; by default the class' own tags. With ``targeted``
    (Karpenter's targeted launch mode, gate ReservedCapacity on) a launch into
    ``reservation`` targets it alone (``capacity-reservations-only``, and a
    Capacity Block's or interruptible reservation's market type), and any
    other launch opts out of open reservations (preference ``none``).
    """
    preference, reservation_id, market_type = "", "", ""
    if targeted and reservation is not None:
        preference, reservation_id = RESERVATIONS_ONLY, reservation.id
        if reservation.reservation_type == RESERVATION_TYPE_CAPACITY_BLOCK:
            market_type = MARKET_CAPACITY_BLOCK
        elif reservation.interruptible:
            market_type = MARKET_INTERRUPTIBLE_RESERVATION
    elif targeted:
        preference = RESERVATION_PREFERENCE_NONE
    return LaunchOptions(
        image_id=image_id,
        user_data=user_data,
        security_group_ids=tuple(group.id for group in node_class.status.security_groups),
        instance_profile=node_class.status.instance_profile or node_class.instance_profile,
        metadata_options=node_class.metadata_options,
        block_device_mappings=node_class.block_device_mappings,
        detailed_monitoring=node_class.detailed_monitoring,
        associate_public_ip_address=node_class.associate_public_ip_address,
        tags=tuple(sorted((node_class.tags if tags is None else tags).items())),
        spot=spot,
        reservation_preference=preference,
        capacity_reservation_id=reservation_id,
        market_type=market_type,
    )


def template_tags(cluster_name: str, node_class_name: str, class_tags: Mapping[str, str]) -> dict[str, str]:
    return {
        **class_tags,
        TAG_CLUSTER: cluster_name,
        TAG_NODECLASS: node_class_name,
        cluster_tag(cluster_name): "owned",
    }


class LaunchTemplates:
    """Makes sure the template for some options exists; thread-safe (launches run on a pool)."""

    def __init__(self, client: AwsClient, cluster_name: str) -> None:
        self.client = client
        self.cluster_name = cluster_name
        self._lock = threading.Lock()
        self._known: set[str] = set()

    def ensure(self, options: LaunchOptions, node_class: EC2NodeClass) -> str:
        """The name of the template for ``options``, created if AWS has none of that name."""
        name = options.name
        with self._lock:
            if name in self._known:
                return name
        if not self.client.launch_templates_named((name,)):
            try:
                self.client.create_launch_template(
                    name,
                    options.template_data(),
                    template_tags(self.cluster_name, node_class.name, node_class.tags),
                )
                log.info("created launch template %s for EC2NodeClass %s", name, node_class.name)
            except AwsApiError as error:
                if error.code != ALREADY_EXISTS_CODE:
                    raise
        with self._lock:
            self._known.add(name)
        return name

    def forget(self, names: Iterable[str]) -> None:
        """Drop templates from the cache (deleted behind karpy's back, or by the cleanup)."""
        with self._lock:
            self._known.difference_update(names)


def _on_class_seen_or_deleted(key: str) -> ChangeMapper:
    """A watch mapper giving ``key`` on a class' first sighting (the initial list at start) and deletion."""

    def mapper(old: object | None, new: object | None) -> list[str]:
        return [key] if old is None or new is None else []

    return mapper


class LaunchTemplateCleanup:
    """Deletes the cluster's launch templates whose EC2NodeClass is gone (on its deletion and hourly)."""

    name = "launchtemplate.cleanup"
    KEY = "launch-templates"

    def __init__(
        self,
        cluster: ClusterReader,
        client: AwsClient,
        templates: LaunchTemplates,
        *,
        metrics: Metrics | None = None,
    ) -> None:
        self.cluster = cluster
        self.client = client
        self.templates = templates
        self.metrics = metrics if metrics is not None else Metrics()
        # AWS not answering is one warning per streak, retried with backoff (not a traceback a second).
        self._failures = FailureStreak(log)

    def watches(self) -> list[Watch]:
        return [Watch(EC2_KIND, _on_class_seen_or_deleted(self.KEY))]

    def reconcile(self, key: str) -> float | None:
        # A class gone takes its user data size with it, as Karpenter's deletes it with the class.
        for (name,) in self.metrics.userdata_bytes.label_values():
            if self.cluster.node_class(EC2_GROUP, EC2_KIND, name) is None:
                self.metrics.userdata_bytes.remove(nodeclass=name)
        cluster_name = self.templates.cluster_name
        deleted: list[str] = []
        try:
            orphans = [
                template.name
                for template in self.client.launch_templates_tagged(TAG_CLUSTER, cluster_name)
                if self.cluster.node_class(EC2_GROUP, EC2_KIND, template.tags.get(TAG_NODECLASS, "")) is None
            ]
            for name in orphans:
                try:
                    self.client.delete_launch_template(name)
                except AwsApiError as error:
                    if error.code not in LAUNCH_TEMPLATE_NOT_FOUND_CODES:
                        raise
                deleted.append(name)
                log.info("deleted launch template %s: its EC2NodeClass is gone", name)
        except AwsApiError as error:
            return self._failures.failed(CLEANING_TEMPLATES, error, extra=about(controller=self.name))
        finally:
            self.templates.forget(deleted)
        self._failures.succeeded("launch templates cleaned up again", extra=about(controller=self.name))
        return CLEANUP_INTERVAL


class InstanceProfileCleanup:
    """Deletes the instance profiles karpy made for EC2NodeClasses that are gone (on deletion and hourly).

    A profile is this cluster's only with all of karpy's tags for it: managed
    by the cluster, the cluster's ownership tag, this region (IAM is global;
    a cluster of the same name elsewhere keeps its own) and a class name. A
    profile a class names in ``instanceProfile`` is the user's: karpy never
    tags one, so it never qualifies. A profile whose class still has live
    instances of the cluster is kept until they are gone (IAM would delete
    it, but the class' nodes may still need its role renewed), and looked
    at again in a minute; so is one whose IAM calls fail.
    """

    name = "instanceprofile.cleanup"
    KEY = "instance-profiles"

    def __init__(self, cluster: ClusterReader, client: AwsClient, settings: AwsSettings) -> None:
        self.cluster = cluster
        self.client = client
        self.settings = settings
        self._failures = FailureStreak(log, first=PROFILE_RETRY_INTERVAL)

    def watches(self) -> list[Watch]:
        return [Watch(EC2_KIND, _on_class_seen_or_deleted(self.KEY))]

    def _orphaned(self, profile: InstanceProfile) -> bool:
        cluster_name = self.settings.cluster_name
        tags = profile.tags
        node_class = tags.get(TAG_NODECLASS, "")
        return (
            tags.get(TAG_MANAGED_BY) == cluster_name
            and tags.get(cluster_tag(cluster_name)) == "owned"
            and tags.get(LABEL_REGION) == self.settings.region
            and bool(node_class)
            and self.cluster.node_class(EC2_GROUP, EC2_KIND, node_class) is None
        )

    def _classes_with_live_instances(self) -> set[str]:
        owned = cluster_tag(self.settings.cluster_name)
        instances = self.client.describe_instances(
            filters=((f"tag:{owned}", ("owned",)), ("tag-key", (TAG_NODECLASS,)))
        )
        return {instance.tags[TAG_NODECLASS] for instance in instances if instance.tags.get(owned) == "owned"}

    def reconcile(self, key: str) -> float | None:
        try:
            orphans = [
                profile
                for profile in self.client.instance_profiles(f"{self.settings.cluster_name}_")
                if self._orphaned(profile)
            ]
            in_use = self._classes_with_live_instances() if orphans else set()
        except AwsApiError as error:
            return self._failures.failed(CLEANING_PROFILES, error, extra=about(controller=self.name))
        self._failures.succeeded("instance profiles listed again", extra=about(controller=self.name))
        retry = False
        for profile in orphans:
            node_class = profile.tags[TAG_NODECLASS]
            if node_class in in_use:
                log.info(
                    "keeping instance profile %s: EC2NodeClass %s still has instances",
                    profile.name,
                    node_class,
                )
                retry = True
                continue
            try:
                self.client.delete_instance_profile(profile)
            except AwsApiError as error:
                log.warning("deleting instance profile %s failed, retrying: %s", profile.name, error)
                retry = True
                continue
            log.info("deleted instance profile %s: its EC2NodeClass %s is gone", profile.name, node_class)
        return PROFILE_RETRY_INTERVAL if retry else CLEANUP_INTERVAL
