"""Provider node classes, in the API groups Karpenter's providers use.

- ``EC2NodeClass`` (``karpenter.k8s.aws``): the AWS node class. karpy reads the
  fields that decide where and how instances launch: subnet and security group
  selector terms, AMI selection, the IAM role or instance profile, tags and
  kubelet settings (in v1 the kubelet block lives here, not on the NodePool).
  The simulated cloud resolves subnet selector terms to its zones, so AWS
  users can simulate their real manifests.
- ``KWOKNodeClass`` (``karpenter.kwok.sh``): Karpenter's kwok provider class,
  whose spec is empty; nodes are fake Node objects in any cluster.

v1beta1 EC2NodeClasses (amiFamily instead of amiSelectorTerms aliases) are
converted the way Karpenter's v1 migration does: ``amiFamily: AL2`` with no
AMI selector becomes ``amiSelectorTerms: [{alias: al2@latest}]``, noted like
the NodePool's changes (:mod:`karpy.api.conversion`). Ubuntu has no v1 alias
and is refused, as an unknown family.

**Karpenter's validation, offline.** In a cluster the CRD's CEL rules refuse a
bad EC2NodeClass; ``karpy validate`` and ``karpy simulate`` have no API server,
so :meth:`EC2NodeClass.parse` applies the same rules: selector terms need a
field and keep ``id`` (and a security group's ``name``) alone
(:class:`SelectorTermRules`), an alias is ``family@version`` of a known family
and stands alone, ``amiFamily`` is required without an alias and otherwise is
the alias' family or Custom, restricted tags are refused, kubelet keys and
pairs, metadata options and block devices are Karpenter's. The messages, lists
and patterns are defined here once and :mod:`karpy.api.crds` builds its CEL
from them, so a user reads the same words from either. A rule is checked when
the manifest is read, not at launch: a class that would fail at the API server
fails ``karpy validate`` rather than the first node of a simulation.

**No field accepted and ignored.** What nothing in karpy acts on is refused by
the same rules, naming the field: ``context``, an AMI term's ``ssmParameter``,
and with ``amiFamily: Custom`` (user data passed verbatim) the kubelet settings
only karpy's user data would carry. ``capacityReservationSelectorTerms`` are
resolved into ``status.capacityReservations`` and launched into
(:mod:`karpy.cloud.reservations`).
``tests/api/test_field_owners.py`` names the owner of every other field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from karpy.api._reader import FieldReader
from karpy.api.conditions import Condition
from karpy.api.conversion import Conversion, copied_mapping, inline
from karpy.api.core import read_resources
from karpy.api.duration import DurationError, parse_duration
from karpy.api.meta import ObjectMeta, format_timestamp, parse_timestamp
from karpy.api.quantity import ResourceAmounts

EC2_GROUP = "karpenter.k8s.aws"
EC2_KIND = "EC2NodeClass"
KWOK_GROUP = "karpenter.kwok.sh"
KWOK_KIND = "KWOKNodeClass"

# v1beta1's Ubuntu family, which Karpenter v1 dropped.
_UBUNTU = "Ubuntu"
AMI_FAMILY_ALIASES = {
    "AL2": "al2",
    "AL2023": "al2023",
    "Bottlerocket": "bottlerocket",
    "Windows2019": "windows2019",
    "Windows2022": "windows2022",
}

AMI_FAMILY_CUSTOM = "Custom"
AMI_FAMILIES = (*AMI_FAMILY_ALIASES, AMI_FAMILY_CUSTOM)
MAX_ALIAS_LENGTH = 30
WINDOWS_ALIAS_FAMILIES = ("windows2019", "windows2022")
ALIAS_FORMAT_MESSAGE = "'alias' is improperly formatted, must match the format 'family@version'"
ALIAS_FAMILY_MESSAGE = "family is not supported, must be one of the following: " + ", ".join(
    f"'{alias}'" for alias in AMI_FAMILY_ALIASES.values()
)
WINDOWS_ALIAS_MESSAGE = "windows families may only specify version 'latest'"
ALIAS_ALONE_MESSAGE = (
    "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms"
)
AMI_FAMILY_REQUIRED_MESSAGE = "must specify amiFamily if amiSelectorTerms does not contain an alias"
EMPTY_SELECTOR_TAG_MESSAGE = "empty tag keys or values aren't supported"
EMPTY_TAG_KEY_MESSAGE = "empty tag keys aren't supported"
# Tags karpy (like Karpenter) puts on what it launches, which a node class may not set.
RESTRICTED_TAG_KEYS = (
    "eks:eks-cluster-name",
    "karpenter.sh/nodepool",
    "karpenter.sh/nodeclaim",
    f"{EC2_GROUP}/ec2nodeclass",
)
RESTRICTED_TAG_PREFIX = "kubernetes.io/cluster"
# EBS volumes as Karpenter takes them: a size in Gi, G, Ti or T up to EBS's largest volume.
VOLUME_SIZE_PATTERN = (
    r"^((?:[1-9][0-9]{0,3}|[1-4][0-9]{4}|[5][0-8][0-9]{3}|59000)Gi"
    r"|(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|[6][0-3][0-9]{3}|64000)G"
    r"|([1-9]||[1-5][0-7]|58)Ti|([1-9]||[1-5][0-9]|6[0-3]|64)T)$"
)
VOLUME_TYPES = ("standard", "io1", "io2", "gp2", "sc1", "st1", "gp3")
VOLUME_SOURCE_MESSAGE = "snapshotID or volumeSize must be defined"
ONE_ROOT_VOLUME_MESSAGE = "must have only one blockDeviceMappings with rootVolume"
VOLUME_INITIALIZATION_MESSAGE = "snapshotID must be set when volumeInitializationRate is set"
# Instance metadata settings: Karpenter's values and hop limit range.
IMDS_SWITCH = ("enabled", "disabled")
IMDS_TOKENS = ("required", "optional")
MIN_HOP_LIMIT, MAX_HOP_LIMIT = 1, 64
# Kubelet settings that act only through the user data karpy writes: with amiFamily Custom (user
# data passed verbatim) they could not act, so such a class is refused naming them.
USER_DATA_ONLY_KUBELET_FIELDS = (
    "clusterDNS",
    "evictionSoft",
    "evictionSoftGracePeriod",
    "evictionMaxPodGracePeriod",
    "imageGCHighThresholdPercent",
    "imageGCLowThresholdPercent",
    "cpuCFSQuota",
)
# Fields of Karpenter's EC2NodeClass that karpy's CRD keeps (so a manifest's shape is still
# checked) but refuses when set, as nothing in karpy would act on them.
CONTEXT_UNSUPPORTED_MESSAGE = "context is not supported by karpy: it launches instances with no fleet context"
SSM_PARAMETER_UNSUPPORTED_MESSAGE = (
    "ssmParameter is not supported by karpy: select the AMIs by alias, id, name or tags"
)
# Bottlerocket's settings have no pods-per-core key: Karpenter ignores podsPerCore there; karpy refuses it.
BOTTLEROCKET_PODS_PER_CORE_MESSAGE = (
    "kubelet.podsPerCore cannot act on Bottlerocket, whose settings have no such key; set maxPods instead"
)
# AL2's bootstrap.sh and Bottlerocket take one cluster DNS address: the others would be dropped.
SINGLE_DNS_FAMILIES = ("AL2", "Bottlerocket")
ONE_CLUSTER_DNS_MESSAGE = (
    "kubelet.clusterDNS takes one address with the AL2 and Bottlerocket AMI families, whose bootstrap "
    "has a single DNS setting"
)
INSTANCE_STORE_RAID0 = "RAID0"
INSTANCE_STORE_POLICIES = (INSTANCE_STORE_RAID0,)
GC_THRESHOLDS_MESSAGE = "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent"
SOFT_EVICTION_MESSAGE = "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod"
SOFT_EVICTION_GRACE_MESSAGE = "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft"


def custom_kubelet_message(field_name: str) -> str:
    """Why a Custom-family class may not set a kubelet field that only user data carries."""
    return (
        f"kubelet.{field_name} cannot act with amiFamily {AMI_FAMILY_CUSTOM}: karpy passes Custom user "
        "data verbatim, so set the kubelet's flag in userData instead"
    )


def quoted_list(names: Iterable[str]) -> str:
    """``['a', 'b']``: how Karpenter's messages list names (and a CEL list literal of them)."""
    return "[" + ", ".join(f"'{name}'" for name in names) + "]"


def valid_keys_message(field: str, keys: Iterable[str]) -> str:
    return f"valid keys for {field} are {quoted_list(keys)}"


def restricted_tag_message(key: str) -> str:
    return f"tag contains a restricted tag matching {key}"


def ami_family_alias_message(family: str) -> str:
    """What Karpenter says of an amiFamily that is neither Custom nor the family of the alias."""
    article = "an" if family.startswith("A") else "a"
    return (
        f"if set, amiFamily must be '{family}' or '{AMI_FAMILY_CUSTOM}' when using {article} {family} alias"
    )


def alias_problem(alias: str) -> str:
    """Why an AMI alias is refused (Karpenter's message), or "" if it is well formed."""
    family, at, version = alias.partition("@")
    if not (at and version and family.isascii() and family.isalnum()):
        return ALIAS_FORMAT_MESSAGE
    if family not in AMI_FAMILY_ALIASES.values():
        return ALIAS_FAMILY_MESSAGE
    if family in WINDOWS_ALIAS_FAMILIES and version != "latest":
        return WINDOWS_ALIAS_MESSAGE
    if len(alias) > MAX_ALIAS_LENGTH:
        return f"may not be more than {MAX_ALIAS_LENGTH} characters"
    return ""


# What the kubelet may reserve, and the eviction signals it knows (Karpenter's lists, in its order).
KUBELET_RESERVABLE = ("cpu", "memory", "ephemeral-storage", "pid")
EVICTION_SIGNALS = (
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "pid.available",
)
_ALIAS_FAMILIES = {alias: family for family, alias in AMI_FAMILY_ALIASES.items()}
# The device whose volume holds the kubelet's ephemeral storage, by family (Karpenter's).
_EPHEMERAL_DEVICES = {
    "AL2": "/dev/xvda",
    "AL2023": "/dev/xvda",
    "Bottlerocket": "/dev/xvdb",
    "Windows2019": "/dev/sda1",
    "Windows2022": "/dev/sda1",
}


@dataclass(frozen=True, slots=True)
class SelectorTerm:
    """One subnet, security group or AMI selector term: tags, an id, a name or an alias."""

    tags: dict[str, str] = field(default_factory=dict)
    id: str = ""
    name: str = ""
    alias: str = ""
    owner: str = ""

    @classmethod
    def parse(cls, reader: FieldReader) -> SelectorTerm:
        term = cls(
            tags=reader.str_map("tags"),
            id=reader.string("id"),
            name=reader.string("name"),
            alias=reader.string("alias"),
            owner=reader.string("owner"),
        )
        return term

    def written(self) -> frozenset[str]:
        """The names of the fields the term sets."""
        fields = {
            "tags": self.tags,
            "id": self.id,
            "name": self.name,
            "alias": self.alias,
            "owner": self.owner,
        }
        return frozenset(name for name, value in fields.items() if value)


@dataclass(frozen=True, slots=True)
class SelectorTermRules:
    """Karpenter's rules on one list of selector terms: the CRD's CEL and :meth:`check` enforce them.

    A term needs one of ``needs_one_of``; each ``(field, others)`` of
    ``exclusive`` refuses a term that sets ``field`` with any of ``others``;
    ``where`` names the term in the messages, as Karpenter does.
    """

    field: str
    where: str
    needs_one_of: tuple[str, ...]
    exclusive: tuple[tuple[str, tuple[str, ...]], ...]
    id_pattern: str  # searched for, unanchored, as Karpenter's CRD does

    @property
    def missing_message(self) -> str:
        return f"expected at least one, got none, {quoted_list(self.needs_one_of)}"

    def exclusive_message(self, name: str) -> str:
        exclusive = f"'{name}' is mutually exclusive"
        return f"{exclusive}, cannot be set with a combination of other fields in {self.where}"

    def check(self, spec: FieldReader, terms: tuple[SelectorTerm, ...]) -> None:
        for index, term in enumerate(terms):
            path = f"{self.field}[{index}]"
            written = term.written()
            if not written.intersection(self.needs_one_of):
                raise spec.error(path, self.missing_message)
            for name, others in self.exclusive:
                if name in written and written.intersection(others):
                    raise spec.error(path, self.exclusive_message(name))
            if any(not key or not value for key, value in term.tags.items()):
                raise spec.error(f"{path}.tags", EMPTY_SELECTOR_TAG_MESSAGE)
            if term.id and not re.search(self.id_pattern, term.id):
                raise spec.error(f"{path}.id", f"should match '{self.id_pattern}', got {term.id!r}")


SUBNET_TERMS = SelectorTermRules(
    "subnetSelectorTerms", "a subnet selector term", ("tags", "id"), (("id", ("tags",)),), "subnet-[0-9a-z]+"
)
SECURITY_GROUP_TERMS = SelectorTermRules(
    "securityGroupSelectorTerms",
    "a security group selector term",
    ("tags", "id", "name"),
    (("id", ("tags", "name")), ("name", ("tags", "id"))),
    "sg-[0-9a-z]+",
)
AMI_TERMS = SelectorTermRules(
    "amiSelectorTerms",
    "amiSelectorTerms",
    ("tags", "id", "name", "alias"),
    (("id", ("alias", "tags", "name", "owner")), ("alias", ("id", "tags", "name", "owner"))),
    "ami-[0-9a-z]+",
)

# Capacity reservation selector terms: optional, and their "id" stands alone.
RESERVATION_TERMS_FIELD = "capacityReservationSelectorTerms"
RESERVATION_NEEDS_ONE_OF = ("tags", "id", "instanceMatchCriteria")
RESERVATION_ID_OTHERS = ("tags", "ownerID", "instanceMatchCriteria")
RESERVATION_ID_MESSAGE = (
    "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation "
    "selector term"
)


RESERVATION_MATCH_CRITERIA = ("open", "targeted")


@dataclass(frozen=True, slots=True)
class CapacityReservationSelectorTerm:
    """One ``capacityReservationSelectorTerms`` entry: tags ('*': any value), an id, an owner, a criteria."""

    tags: dict[str, str] = field(default_factory=dict)
    id: str = ""
    owner_id: str = ""
    instance_match_criteria: str = ""

    @classmethod
    def parse(cls, reader: FieldReader) -> CapacityReservationSelectorTerm:
        criteria = reader.string("instanceMatchCriteria")
        if criteria and criteria not in RESERVATION_MATCH_CRITERIA:
            raise reader.error(
                "instanceMatchCriteria", f"must be one of {', '.join(RESERVATION_MATCH_CRITERIA)}"
            )
        return cls(
            tags=reader.str_map("tags"),
            id=reader.string("id"),
            owner_id=reader.string("ownerID"),
            instance_match_criteria=criteria,
        )


def _check_reservation_terms(spec: FieldReader) -> None:
    """Karpenter's rules on capacity reservation terms: one of tags, id or instanceMatchCriteria; id alone."""
    terms = spec.raw(RESERVATION_TERMS_FIELD)
    if not isinstance(terms, list):
        return  # absent, or of a type the schema check reports
    for index, term in enumerate(terms):
        if not isinstance(term, Mapping):
            continue
        path = f"{RESERVATION_TERMS_FIELD}[{index}]"
        written = {str(name) for name, value in term.items() if value is not None}
        if not written.intersection(RESERVATION_NEEDS_ONE_OF):
            raise spec.error(
                path, f"expected at least one, got none, {quoted_list(RESERVATION_NEEDS_ONE_OF)}"
            )
        if "id" in written and written.intersection(RESERVATION_ID_OTHERS):
            raise spec.error(path, RESERVATION_ID_MESSAGE)
        tags = term.get("tags")
        if isinstance(tags, Mapping) and any(not key or value in ("", None) for key, value in tags.items()):
            raise spec.error(f"{path}.tags", EMPTY_SELECTOR_TAG_MESSAGE)


def _check_unsupported(spec: FieldReader) -> None:
    """Refuse the fields karpy takes the shape of but could not act on (their messages say why)."""
    if spec.has("context"):
        raise spec.error("context", CONTEXT_UNSUPPORTED_MESSAGE)
    terms = spec.raw("amiSelectorTerms")
    for index, term in enumerate(terms if isinstance(terms, list) else ()):
        if isinstance(term, Mapping) and "ssmParameter" in term:
            raise spec.error(f"amiSelectorTerms[{index}].ssmParameter", SSM_PARAMETER_UNSUPPORTED_MESSAGE)


def _check_ami_selection(spec: FieldReader, terms: tuple[SelectorTerm, ...]) -> None:
    """Karpenter's rules on aliases and amiFamily: a well-formed alias alone, its family or Custom."""
    aliases = [(index, term.alias) for index, term in enumerate(terms) if term.alias]
    for index, alias in aliases:
        problem = alias_problem(alias)
        if problem:
            raise spec.error(f"amiSelectorTerms[{index}].alias", problem)
    if aliases and len(terms) != 1:
        raise spec.error("amiSelectorTerms", ALIAS_ALONE_MESSAGE)
    family = spec.string("amiFamily")
    if family and family not in AMI_FAMILIES:
        raise spec.error("amiFamily", f"unknown AMI family {family!r}; use one of {', '.join(AMI_FAMILIES)}")
    if not aliases and not family:
        raise spec.error("amiFamily", AMI_FAMILY_REQUIRED_MESSAGE)
    if aliases and family not in ("", AMI_FAMILY_CUSTOM):
        alias_family = _ALIAS_FAMILIES[aliases[0][1].partition("@")[0]]
        if family != alias_family:
            raise spec.error("amiFamily", ami_family_alias_message(alias_family))


def _check_tags(spec: FieldReader, tags: Mapping[str, str]) -> None:
    """The tags a node class may put on instances: none empty, none of those karpy sets itself."""
    for key in tags:
        if not key:
            raise spec.error("tags", EMPTY_TAG_KEY_MESSAGE)
        if key.startswith(RESTRICTED_TAG_PREFIX):
            raise spec.error("tags", restricted_tag_message(f"{RESTRICTED_TAG_PREFIX}/"))
        if key in RESTRICTED_TAG_KEYS:
            raise spec.error("tags", restricted_tag_message(key))


@dataclass(frozen=True, slots=True)
class KubeletConfiguration:
    """``spec.kubelet``: what karpy sizes nodes with and writes into their user data (every field acts).

    ``maxPods``, ``podsPerCore``, ``kubeReserved``, ``systemReserved`` and
    ``evictionHard`` size the node's allocatable (:mod:`karpy.cloud.aws_catalog`)
    and reach its kubelet; the others (:data:`USER_DATA_ONLY_KUBELET_FIELDS`)
    only reach its kubelet, through the AMI family's user data
    (:mod:`karpy.cloud.aws.userdata`). As in Karpenter, ``evictionSoft`` does
    not shrink allocatable: a soft threshold evicts only after its grace period.
    """

    max_pods: int | None = None
    pods_per_core: int | None = None
    kube_reserved: ResourceAmounts = field(default_factory=dict)
    system_reserved: ResourceAmounts = field(default_factory=dict)
    eviction_hard: dict[str, str] = field(default_factory=dict)
    cluster_dns: tuple[str, ...] = ()
    eviction_soft: dict[str, str] = field(default_factory=dict)
    eviction_soft_grace_period: dict[str, str] = field(default_factory=dict)
    eviction_max_pod_grace_period: int | None = None
    image_gc_high_threshold_percent: int | None = None
    image_gc_low_threshold_percent: int | None = None
    cpu_cfs_quota: bool | None = None

    @classmethod
    def parse(cls, reader: FieldReader) -> KubeletConfiguration:
        max_pods = reader.integer("maxPods")
        if max_pods is not None and max_pods < 0:
            raise reader.error("maxPods", "must not be negative")
        reserved = {name: read_resources(reader, name) for name in ("kubeReserved", "systemReserved")}
        eviction = {
            name: reader.str_map(name) for name in ("evictionHard", "evictionSoft", "evictionSoftGracePeriod")
        }
        for name, keys, allowed in [
            *((name, amounts.keys(), KUBELET_RESERVABLE) for name, amounts in reserved.items()),
            *((name, thresholds.keys(), EVICTION_SIGNALS) for name, thresholds in eviction.items()),
        ]:
            if not set(keys) <= set(allowed):
                raise reader.error(name, valid_keys_message(name, allowed))
        high, low = (
            reader.integer("imageGCHighThresholdPercent"),
            reader.integer("imageGCLowThresholdPercent"),
        )
        for name, percent in (("imageGCHighThresholdPercent", high), ("imageGCLowThresholdPercent", low)):
            if percent is not None and not 0 <= percent <= 100:
                raise reader.error(name, f"must be between 0 and 100, got {percent}")
        if high is not None and low is not None and high <= low:
            raise reader.error("imageGCHighThresholdPercent", GC_THRESHOLDS_MESSAGE)
        soft, grace = eviction["evictionSoft"].keys(), eviction["evictionSoftGracePeriod"].keys()
        if soft - grace:
            raise reader.error("evictionSoft", SOFT_EVICTION_MESSAGE)
        if grace - soft:
            raise reader.error("evictionSoftGracePeriod", SOFT_EVICTION_GRACE_MESSAGE)
        for signal, period in eviction["evictionSoftGracePeriod"].items():
            try:
                parse_duration(period)
            except DurationError as error:
                raise reader.obj("evictionSoftGracePeriod").error(signal, str(error)) from error
        return cls(
            max_pods=max_pods,
            pods_per_core=reader.integer("podsPerCore"),
            kube_reserved=reserved["kubeReserved"],
            system_reserved=reserved["systemReserved"],
            eviction_hard=eviction["evictionHard"],
            cluster_dns=reader.str_list("clusterDNS"),
            eviction_soft=eviction["evictionSoft"],
            eviction_soft_grace_period=eviction["evictionSoftGracePeriod"],
            eviction_max_pod_grace_period=reader.integer("evictionMaxPodGracePeriod"),
            image_gc_high_threshold_percent=high,
            image_gc_low_threshold_percent=low,
            cpu_cfs_quota=_optional_boolean(reader, "cpuCFSQuota"),
        )

    def user_data_only_fields(self) -> tuple[str, ...]:
        """The fields set here that act through the node's user data alone (none sizes the node)."""
        values = {
            "clusterDNS": self.cluster_dns,
            "evictionSoft": self.eviction_soft,
            "evictionSoftGracePeriod": self.eviction_soft_grace_period,
            "evictionMaxPodGracePeriod": self.eviction_max_pod_grace_period,
            "imageGCHighThresholdPercent": self.image_gc_high_threshold_percent,
            "imageGCLowThresholdPercent": self.image_gc_low_threshold_percent,
            "cpuCFSQuota": self.cpu_cfs_quota,
        }
        return tuple(name for name in USER_DATA_ONLY_KUBELET_FIELDS if values[name] not in (None, (), {}))


@dataclass(frozen=True, slots=True)
class BlockDeviceMapping:
    """One of ``spec.blockDeviceMappings``: a device and its EBS volume, as EC2 takes them."""

    device_name: str
    root_volume: bool = False
    volume_size: str = ""  # a quantity ("20Gi"), as Karpenter writes it
    volume_type: str = ""
    iops: int | None = None
    throughput: int | None = None
    encrypted: bool | None = None
    kms_key_id: str = ""
    delete_on_termination: bool | None = None
    snapshot_id: str = ""
    # MiB/s at which a volume from a snapshot is initialized (EC2's provisioned initialization rate).
    volume_initialization_rate: int | None = None

    @classmethod
    def parse(cls, reader: FieldReader) -> BlockDeviceMapping:
        ebs = reader.obj("ebs")
        if reader.has("ebs"):
            if not (ebs.has("snapshotID") or ebs.has("volumeSize")):
                raise reader.error("ebs", VOLUME_SOURCE_MESSAGE)
            size = ebs.scalar_str("volumeSize")
            if size is not None and not re.fullmatch(VOLUME_SIZE_PATTERN, size):
                raise ebs.error("volumeSize", f"must be a size in Gi, G, Ti or T up to 64T, got {size!r}")
            if ebs.has("volumeInitializationRate") and not ebs.string("snapshotID"):
                raise reader.error("ebs", VOLUME_INITIALIZATION_MESSAGE)
            volume_type = ebs.string("volumeType")
            if volume_type and volume_type not in VOLUME_TYPES:
                raise ebs.error(
                    "volumeType", f"must be one of {', '.join(VOLUME_TYPES)}, got {volume_type!r}"
                )
        return cls(
            device_name=reader.string("deviceName"),
            root_volume=reader.boolean("rootVolume"),
            volume_size=ebs.scalar_str("volumeSize") or "",
            volume_type=ebs.string("volumeType"),
            iops=ebs.integer("iops"),
            throughput=ebs.integer("throughput"),
            encrypted=_optional_boolean(ebs, "encrypted"),
            kms_key_id=ebs.string("kmsKeyID"),
            delete_on_termination=_optional_boolean(ebs, "deleteOnTermination"),
            snapshot_id=ebs.string("snapshotID"),
            volume_initialization_rate=ebs.integer("volumeInitializationRate"),
        )


def _optional_boolean(reader: FieldReader, key: str) -> bool | None:
    return reader.boolean(key) if reader.raw(key) is not None else None


@dataclass(frozen=True, slots=True)
class MetadataOptions:
    """``spec.metadataOptions``: IMDS settings; the defaults are Karpenter's (IMDSv2 only, one hop)."""

    http_endpoint: str = "enabled"
    http_protocol_ipv6: str = "disabled"
    http_put_response_hop_limit: int = 1
    http_tokens: str = "required"

    @classmethod
    def parse(cls, reader: FieldReader) -> MetadataOptions:
        default = cls()
        for key, allowed in [
            ("httpEndpoint", IMDS_SWITCH),
            ("httpProtocolIPv6", IMDS_SWITCH),
            ("httpTokens", IMDS_TOKENS),
        ]:
            value = reader.string(key)
            if value and value not in allowed:
                raise reader.error(key, f"must be one of {', '.join(allowed)}, got {value!r}")
        hops = reader.integer("httpPutResponseHopLimit")
        if hops is not None and not MIN_HOP_LIMIT <= hops <= MAX_HOP_LIMIT:
            raise reader.error(
                "httpPutResponseHopLimit", f"must be between {MIN_HOP_LIMIT} and {MAX_HOP_LIMIT}, got {hops}"
            )
        return cls(
            http_endpoint=reader.string("httpEndpoint", default.http_endpoint),
            http_protocol_ipv6=reader.string("httpProtocolIPv6", default.http_protocol_ipv6),
            http_put_response_hop_limit=reader.integer(
                "httpPutResponseHopLimit", default.http_put_response_hop_limit
            )
            or default.http_put_response_hop_limit,
            http_tokens=reader.string("httpTokens", default.http_tokens),
        )


@dataclass(frozen=True, slots=True)
class StatusSubnet:
    id: str
    zone: str
    zone_id: str = ""

    @classmethod
    def parse(cls, reader: FieldReader) -> StatusSubnet:
        return cls(id=reader.string("id"), zone=reader.string("zone"), zone_id=reader.string("zoneID"))


@dataclass(frozen=True, slots=True)
class StatusSecurityGroup:
    id: str
    name: str = ""

    @classmethod
    def parse(cls, reader: FieldReader) -> StatusSecurityGroup:
        return cls(id=reader.string("id"), name=reader.string("name"))


@dataclass(frozen=True, slots=True)
class StatusAMI:
    """A resolved AMI and the instance requirements it serves (architecture, accelerators…)."""

    id: str
    name: str = ""
    requirements: tuple[Mapping[str, object], ...] = ()  # node selector requirements, as in the status
    deprecated: bool = False

    @classmethod
    def parse(cls, reader: FieldReader) -> StatusAMI:
        raw = reader.raw("requirements")
        expressions = tuple(item for item in raw if isinstance(item, dict)) if isinstance(raw, list) else ()
        return cls(
            id=reader.string("id"),
            name=reader.string("name"),
            requirements=expressions,
            deprecated=reader.boolean("deprecated"),
        )


@dataclass(frozen=True, slots=True)
class StatusCapacityReservation:
    """A capacity reservation the class' selector terms resolved to (Karpenter's status fields).

    ``end_time`` is seconds since the epoch (None: the reservation does not
    end); ``reservation_type`` is ``default`` or ``capacity-block``; ``state``
    is ``active``, or ``expiring`` for a Capacity Block in EC2's reclaim window.
    """

    id: str
    instance_type: str
    zone: str
    reservation_type: str = "default"
    interruptible: bool = False
    instance_match_criteria: str = "targeted"
    owner_id: str = ""
    end_time: float | None = None
    state: str = "active"

    @classmethod
    def parse(cls, reader: FieldReader) -> StatusCapacityReservation:
        end = reader.string("endTime")
        return cls(
            id=reader.string("id"),
            instance_type=reader.string("instanceType"),
            zone=reader.string("availabilityZone"),
            reservation_type=reader.string("reservationType", "default"),
            interruptible=reader.boolean("interruptible"),
            instance_match_criteria=reader.string("instanceMatchCriteria", "targeted"),
            owner_id=reader.string("ownerID"),
            end_time=parse_timestamp(end, reader.child_path("endTime")) if end else None,
            state=reader.string("state", "active"),
        )

    def to_status(self) -> dict[str, object]:
        written: dict[str, object] = {
            "availabilityZone": self.zone,
            "id": self.id,
            "instanceMatchCriteria": self.instance_match_criteria,
            "instanceType": self.instance_type,
            "ownerID": self.owner_id,
            "reservationType": self.reservation_type,
            "interruptible": self.interruptible,
            "state": self.state,
        }
        if self.end_time is not None:
            written["endTime"] = format_timestamp(self.end_time)
        return written

    def ended(self, now: float) -> bool:
        return self.end_time is not None and self.end_time <= now


@dataclass(frozen=True, slots=True)
class NodeClassStatus:
    """A node class' status: its conditions and, for an EC2NodeClass, what its selectors resolved to.

    ``subnets``, ``securityGroups``, ``amis`` and ``instanceProfile`` are
    written by the AWS provider's status controller, as Karpenter writes them;
    a KWOKNodeClass has conditions only. The cluster adapters keep what a
    record does not hold when they write this back.
    """

    conditions: tuple[Condition, ...] = ()
    subnets: tuple[StatusSubnet, ...] = ()
    security_groups: tuple[StatusSecurityGroup, ...] = ()
    amis: tuple[StatusAMI, ...] = ()
    instance_profile: str = ""
    capacity_reservations: tuple[StatusCapacityReservation, ...] = ()

    @classmethod
    def parse(cls, reader: FieldReader) -> NodeClassStatus:
        return cls(
            conditions=reader.items("conditions", Condition.parse),
            subnets=reader.items("subnets", StatusSubnet.parse),
            security_groups=reader.items("securityGroups", StatusSecurityGroup.parse),
            amis=reader.items("amis", StatusAMI.parse),
            instance_profile=reader.string("instanceProfile"),
            capacity_reservations=reader.items("capacityReservations", StatusCapacityReservation.parse),
        )


@dataclass(frozen=True, slots=True)
class EC2NodeClass:
    metadata: ObjectMeta
    subnet_selector_terms: tuple[SelectorTerm, ...]
    security_group_selector_terms: tuple[SelectorTerm, ...]
    ami_selector_terms: tuple[SelectorTerm, ...]
    capacity_reservation_selector_terms: tuple[CapacityReservationSelectorTerm, ...] = ()
    role: str = ""
    instance_profile: str = ""
    tags: dict[str, str] = field(default_factory=dict)
    kubelet: KubeletConfiguration = field(default_factory=KubeletConfiguration)
    # How nodes boot: the family decides the user data format ("" with an alias: the alias' family).
    ami_family: str = ""
    user_data: str = ""
    block_device_mappings: tuple[BlockDeviceMapping, ...] = ()
    metadata_options: MetadataOptions = field(default_factory=MetadataOptions)
    associate_public_ip_address: bool | None = None
    detailed_monitoring: bool = False
    # "RAID0": the instance store disks become the node's ephemeral storage ("" : they are left alone).
    instance_store_policy: str = ""
    converted_from: str = ""
    # What the conversion from converted_from changed (karpy.api.conversion); not part
    # of what the class is, so left out of comparisons.
    conversion_notes: tuple[str, ...] = field(default=(), compare=False)
    status: NodeClassStatus = field(default_factory=NodeClassStatus)
    # The spec as read, as JSON text ("": built in code). Karpenter's hash is of the spec as
    # written, which tells apart what the fields above do not (``detailedMonitoring: false``
    # from none, ``kubeReserved.cpu: "0.1"`` from ``"100m"``): karpy.api.nodeclass_hash.
    written_spec: str = ""

    kind = EC2_KIND
    group = EC2_GROUP

    @classmethod
    def parse(cls, reader: FieldReader, api_version: str) -> EC2NodeClass:
        converted_from = ""
        notes: tuple[str, ...] = ()
        if api_version.endswith("/v1beta1"):
            conversion = convert_v1beta1(reader)
            reader = FieldReader(conversion.mapping, reader.path)
            converted_from = api_version
            notes = tuple(conversion.notes)
        spec = reader.obj("spec")
        ami_terms = spec.items("amiSelectorTerms", SelectorTerm.parse)
        if not ami_terms:
            raise spec.error("amiSelectorTerms", "required (for example [{alias: al2023@latest}])")
        subnets = spec.items("subnetSelectorTerms", SelectorTerm.parse)
        if not subnets:
            raise spec.error("subnetSelectorTerms", "required")
        security_groups = spec.items("securityGroupSelectorTerms", SelectorTerm.parse)
        if not security_groups:
            raise spec.error("securityGroupSelectorTerms", "required")
        SUBNET_TERMS.check(spec, subnets)
        SECURITY_GROUP_TERMS.check(spec, security_groups)
        AMI_TERMS.check(spec, ami_terms)
        _check_ami_selection(spec, ami_terms)
        _check_reservation_terms(spec)
        _check_unsupported(spec)
        role = spec.string("role")
        instance_profile = spec.string("instanceProfile")
        if bool(role) == bool(instance_profile):
            raise spec.error("role", "exactly one of role and instanceProfile is required")
        tags = spec.str_map("tags")
        _check_tags(spec, tags)
        mappings = spec.items("blockDeviceMappings", BlockDeviceMapping.parse)
        if sum(mapping.root_volume for mapping in mappings) > 1:
            raise spec.error("blockDeviceMappings", ONE_ROOT_VOLUME_MESSAGE)
        instance_store_policy = spec.string("instanceStorePolicy")
        if instance_store_policy and instance_store_policy not in INSTANCE_STORE_POLICIES:
            raise spec.error(
                "instanceStorePolicy",
                f"must be one of {', '.join(INSTANCE_STORE_POLICIES)}, got {instance_store_policy!r}",
            )
        kubelet = KubeletConfiguration.parse(spec.obj("kubelet"))
        family = spec.string("amiFamily") or next(
            (_ALIAS_FAMILIES.get(term.alias.partition("@")[0], "") for term in ami_terms if term.alias), ""
        )
        if family == "Bottlerocket" and kubelet.pods_per_core is not None:
            raise spec.obj("kubelet").error("podsPerCore", BOTTLEROCKET_PODS_PER_CORE_MESSAGE)
        if family in SINGLE_DNS_FAMILIES and len(kubelet.cluster_dns) > 1:
            raise spec.obj("kubelet").error("clusterDNS", ONE_CLUSTER_DNS_MESSAGE)
        if spec.string("amiFamily") == AMI_FAMILY_CUSTOM:
            for name in kubelet.user_data_only_fields():
                raise spec.obj("kubelet").error(name, custom_kubelet_message(name))
        return cls(
            metadata=ObjectMeta.parse(reader.obj("metadata"), namespaced=False),
            subnet_selector_terms=subnets,
            security_group_selector_terms=security_groups,
            ami_selector_terms=ami_terms,
            capacity_reservation_selector_terms=spec.items(
                RESERVATION_TERMS_FIELD, CapacityReservationSelectorTerm.parse
            ),
            role=role,
            instance_profile=instance_profile,
            tags=tags,
            kubelet=kubelet,
            ami_family=spec.string("amiFamily"),
            user_data=spec.string("userData"),
            block_device_mappings=mappings,
            metadata_options=MetadataOptions.parse(spec.obj("metadataOptions")),
            associate_public_ip_address=_optional_boolean(spec, "associatePublicIPAddress"),
            detailed_monitoring=spec.boolean("detailedMonitoring"),
            instance_store_policy=instance_store_policy,
            converted_from=converted_from,
            conversion_notes=notes,
            status=NodeClassStatus.parse(reader.obj("status")),
            written_spec=json.dumps(reader.raw("spec"), sort_keys=True, default=str),
        )

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def effective_ami_family(self) -> str:
        """The family whose user data nodes get: ``amiFamily``, else the first alias' family, else Custom."""
        if self.ami_family:
            return self.ami_family
        for term in self.ami_selector_terms:
            if term.alias:
                family = term.alias.partition("@")[0].lower()
                return _ALIAS_FAMILIES.get(family, AMI_FAMILY_CUSTOM)
        return AMI_FAMILY_CUSTOM

    @property
    def ephemeral_volume_size(self) -> str:
        """The ``volumeSize`` of the disk nodes keep their ephemeral storage on; "" for the AMI's default.

        As Karpenter reads it: the mapping marked ``rootVolume``, else the
        family's data device (``/dev/xvda``, Bottlerocket's ``/dev/xvdb``),
        else, for a Custom AMI whose layout karpy cannot know, the last mapping.
        """
        sized = [mapping for mapping in self.block_device_mappings if mapping.volume_size]
        for mapping in sized:
            if mapping.root_volume:
                return mapping.volume_size
        family = self.effective_ami_family
        if family == AMI_FAMILY_CUSTOM:
            last = self.block_device_mappings[-1:]
            return last[0].volume_size if last else ""
        device = _EPHEMERAL_DEVICES.get(family, "")
        return next((mapping.volume_size for mapping in sized if mapping.device_name == device), "")


def convert_v1beta1(reader: FieldReader) -> Conversion:
    """A karpenter.k8s.aws/v1beta1 EC2NodeClass mapping rewritten as v1, with a note per change.

    v1 selects AMIs only through ``amiSelectorTerms``; v1beta1 could name just
    a family. A family with no terms becomes the family's alias term (and the
    family goes: the alias implies it); with terms, the family stays, as v1
    still needs it to bootstrap AMIs chosen by id, name or tags. Ubuntu, which
    v1 dropped, becomes AL2 (the same user data format) when terms select the
    AMIs, and is an error without them: v1 has no Ubuntu alias to find them by.
    """
    conversion = Conversion({key: reader.raw(key) for key in reader})
    spec = copied_mapping(conversion.mapping, "spec")
    if spec is None:
        return conversion
    spec_reader = FieldReader(spec, reader.child_path("spec"))
    family = spec_reader.string("amiFamily")
    if family == _UBUNTU:
        # Karpenter v1 dropped the family; its AMIs are selected by terms and bootstrapped as AL2.
        if not spec.get("amiSelectorTerms"):
            raise spec_reader.error(
                "amiFamily",
                "Karpenter v1 has no Ubuntu AMI family: select the Ubuntu AMIs with amiSelectorTerms"
                " (by name, tags or id) and keep amiFamily Ubuntu, which becomes AL2",
            )
        spec["amiFamily"] = "AL2"
        conversion.note(
            "spec.amiFamily", "Ubuntu is not a v1 AMI family; became AL2, whose user data has the same format"
        )
    if spec.get("amiSelectorTerms"):
        return conversion
    if not family:
        raise spec_reader.error("amiFamily", "required when amiSelectorTerms is empty")
    if family not in AMI_FAMILY_ALIASES:
        raise spec_reader.error("amiFamily", f"unknown AMI family {family!r}")
    terms = [{"alias": f"{AMI_FAMILY_ALIASES[family]}@latest"}]
    del spec["amiFamily"]
    spec["amiSelectorTerms"] = terms
    conversion.note(
        "spec.amiFamily", f"{family} with no amiSelectorTerms became amiSelectorTerms: {inline(terms)}"
    )
    return conversion


@dataclass(frozen=True, slots=True)
class KWOKNodeClass:
    metadata: ObjectMeta
    status: NodeClassStatus = field(default_factory=NodeClassStatus)
    # spec.nodeRegistrationDelay, seconds: how long a launched node takes to register (None: the
    # provider's own delay). As Karpenter's kwok provider, the class' delay is the one a node waits.
    node_registration_delay: float | None = None

    kind = KWOK_KIND
    group = KWOK_GROUP

    @classmethod
    def parse(cls, reader: FieldReader) -> KWOKNodeClass:
        spec = reader.obj("spec")
        delay_text = spec.string("nodeRegistrationDelay")
        delay = None
        if delay_text:
            try:
                delay = parse_duration(delay_text)
            except DurationError as error:
                raise spec.error("nodeRegistrationDelay", str(error)) from error
            if delay < 0:
                raise spec.error("nodeRegistrationDelay", "must not be negative")
        return cls(
            metadata=ObjectMeta.parse(reader.obj("metadata"), namespaced=False),
            status=NodeClassStatus.parse(reader.obj("status")),
            node_registration_delay=delay,
        )

    @property
    def name(self) -> str:
        return self.metadata.name


NodeClass = EC2NodeClass | KWOKNodeClass
