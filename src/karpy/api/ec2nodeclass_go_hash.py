"""The AWS provider's ``EC2NodeClass.Hash()`` (karpenter-provider-aws v1.15, hash version v6), bit for bit.

The provider hashes ``[]any{spec, AMIFamily(), caBundle, spec.kubelet.String()}`` with
hashstructure v2 (``FormatV2``, ``SlicesAsSets``, ``IgnoreZeroValue``, ``ZeroNil``): the spec as
its Go type ``EC2NodeClassSpec`` without the fields tagged ``hash:"ignore"`` (the selector terms,
``ipPrefixCount``, ``amiFamily`` as written, ``kubelet``), the AMI family as resolved, the
cluster CA bundle given to nodes, and the kubelet settings as the JSON text Go writes for them.
:data:`EC2NODECLASS_SPEC` lays out those Go types (field order and names matter to the hash);
the spec's JSON is decoded onto them as Go's ``encoding/json`` would (:mod:`karpy.api.hashstructure`).

Two consequences of Karpenter's types that users may not expect, kept here as they are
Karpenter's: ``volumeSize`` is hashed as its canonical quantity string (``hash:"string"``), so
``1024Mi`` and ``1Gi`` are one size; and a field written as ``false`` or ``""`` (a non-nil pointer)
hashes differently from an absent one.

Checked against values the provider's own Go code prints for tests/data/ec2nodeclass-hash/
(scripts/gen-hash-golden).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from karpy.api.hashstructure import (
    GoBoolType,
    GoFieldType,
    GoIntType,
    GoMapType,
    GoPointerType,
    GoSlice,
    GoSliceType,
    GoStringerType,
    GoStringType,
    GoStructType,
    GoType,
    HashOptions,
    decode_json,
    hash_value,
)
from karpy.api.nodeclass import AMI_FAMILY_ALIASES, AMI_FAMILY_CUSTOM
from karpy.api.quantity import Quantity

KARPENTER_EC2NODECLASS_HASH_VERSION = "v6"
EC2NODECLASS_HASH_OPTIONS = HashOptions(zero_nil=True, ignore_zero_value=True, slices_as_sets=True)

_STRING = GoStringType()
_STRING_PTR = GoPointerType(_STRING)
_BOOL_PTR = GoPointerType(GoBoolType())
_INT32 = GoIntType(4)
_INT32_PTR = GoPointerType(_INT32)
_INT64_PTR = GoPointerType(GoIntType(8))


def _quantity_string(written: object) -> str:
    # resource.Quantity's String(): its canonical form.
    return str(Quantity.parse(written if isinstance(written, str | int | float) else str(written)))


def _struct(name: str, *fields: tuple[str, str, GoType]) -> GoStructType:
    """A Go struct type from (JSON name, Go name, type) of its hashed fields, in declaration order."""
    return GoStructType(name, tuple(GoFieldType(json_name, go_name, t) for json_name, go_name, t in fields))


_BLOCK_DEVICE = _struct(
    "BlockDevice",
    ("deleteOnTermination", "DeleteOnTermination", _BOOL_PTR),
    ("encrypted", "Encrypted", _BOOL_PTR),
    ("iops", "IOPS", _INT64_PTR),
    ("kmsKeyID", "KMSKeyID", _STRING_PTR),
    ("snapshotID", "SnapshotID", _STRING_PTR),
    ("throughput", "Throughput", _INT64_PTR),
    ("volumeInitializationRate", "VolumeInitializationRate", _INT32_PTR),
    ("volumeSize", "VolumeSize", GoPointerType(GoStringerType(_quantity_string))),
    ("volumeType", "VolumeType", _STRING_PTR),
)
_BLOCK_DEVICE_MAPPING = _struct(
    "BlockDeviceMapping",
    ("deviceName", "DeviceName", _STRING_PTR),
    ("ebs", "EBS", GoPointerType(_BLOCK_DEVICE)),
    ("rootVolume", "RootVolume", GoBoolType()),
)
_NETWORK_INTERFACE = _struct(
    "NetworkInterface",
    ("networkCardIndex", "NetworkCardIndex", _INT32),
    ("deviceIndex", "DeviceIndex", _INT32),
    ("interfaceType", "InterfaceType", _STRING),
)
EC2NODECLASS_SPEC = _struct(
    "EC2NodeClassSpec",
    (
        "placementGroupSelector",
        "PlacementGroupSelector",
        GoPointerType(
            _struct("PlacementGroupSelector", ("name", "Name", _STRING_PTR), ("id", "ID", _STRING_PTR))
        ),
    ),
    ("associatePublicIPAddress", "AssociatePublicIPAddress", _BOOL_PTR),
    ("userData", "UserData", _STRING_PTR),
    ("role", "Role", _STRING),
    ("instanceProfile", "InstanceProfile", _STRING_PTR),
    ("tags", "Tags", GoMapType(_STRING)),
    ("blockDeviceMappings", "BlockDeviceMappings", GoSliceType(GoPointerType(_BLOCK_DEVICE_MAPPING))),
    ("instanceStorePolicy", "InstanceStorePolicy", _STRING_PTR),
    ("networkInterfaces", "NetworkInterfaces", GoSliceType(GoPointerType(_NETWORK_INTERFACE))),
    ("detailedMonitoring", "DetailedMonitoring", _BOOL_PTR),
    (
        "metadataOptions",
        "MetadataOptions",
        GoPointerType(
            _struct(
                "MetadataOptions",
                ("httpEndpoint", "HTTPEndpoint", _STRING_PTR),
                ("httpProtocolIPv6", "HTTPProtocolIPv6", _STRING_PTR),
                ("httpPutResponseHopLimit", "HTTPPutResponseHopLimit", _INT64_PTR),
                ("httpTokens", "HTTPTokens", _STRING_PTR),
            )
        ),
    ),
    (
        "enclaveOptions",
        "EnclaveOptions",
        GoPointerType(_struct("EnclaveOptions", ("enabled", "Enabled", GoBoolType()))),
    ),
    (
        "connectionTracking",
        "ConnectionTracking",
        GoPointerType(
            _struct(
                "ConnectionTracking",
                ("tcpEstablishedTimeout", "TCPEstablishedTimeout", _INT32_PTR),
                ("udpStreamTimeout", "UDPStreamTimeout", _INT32_PTR),
                ("udpTimeout", "UDPTimeout", _INT32_PTR),
            )
        ),
    ),
    ("context", "Context", _STRING_PTR),
    (
        "cpuOptions",
        "CPUOptions",
        GoPointerType(_struct("CPUOptions", ("nestedVirtualization", "NestedVirtualization", _STRING_PTR))),
    ),
)


def go_json_text(value: object) -> str:
    """``json.Marshal`` of already-decoded JSON as Go writes it: sorted keys, compact, HTML escaped."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, escaped)
    return text


def kubelet_string(kubelet: Mapping[str, object] | None) -> str:
    """``KubeletConfiguration.String()``: ``null`` when empty, else the map as Go's JSON."""
    return "null" if not kubelet else go_json_text(kubelet)


def ami_family_of(spec: Mapping[str, object]) -> str:
    """``EC2NodeClass.AMIFamily()``: ``amiFamily`` as written, else the first alias' family, else Custom."""
    written = spec.get("amiFamily")
    if isinstance(written, str) and written:
        return written
    terms = spec.get("amiSelectorTerms")
    for term in terms if isinstance(terms, list) else ():
        alias = term.get("alias") if isinstance(term, Mapping) else None
        if isinstance(alias, str) and alias:
            family = alias.partition("@")[0]
            return next(
                (name for name, known in AMI_FAMILY_ALIASES.items() if known == family), AMI_FAMILY_CUSTOM
            )
    return AMI_FAMILY_CUSTOM


def karpenter_ec2nodeclass_hash(spec: Mapping[str, object], ami_family: str, ca_bundle: str = "") -> str:
    """The provider's ``EC2NodeClass.Hash(caBundle)`` of a class whose spec JSON is ``spec``.

    ``ami_family``: ``AMIFamily()``, the one written or else the alias' family.
    """
    kubelet = spec.get("kubelet")
    value = GoSlice(
        (
            decode_json(spec, EC2NODECLASS_SPEC),
            ami_family,
            ca_bundle,
            kubelet_string(kubelet if isinstance(kubelet, Mapping) else None),
        )
    )
    return str(hash_value(value, EC2NODECLASS_HASH_OPTIONS))
