"""The node class hash: which of a node class' fields drift its nodes when they change.

Karpenter's AWS provider annotates every NodeClaim it launches (and the
EC2NodeClass) with ``karpenter.k8s.aws/ec2nodeclass-hash``, a hash of the
class' *static* fields, and ``karpenter.k8s.aws/ec2nodeclass-hash-version``;
a NodeClaim whose hash differs from its class' (same version) is drifted
with reason ``NodeClassDrift``. karpy writes and compares Karpenter's own
value: :func:`ec2nodeclass_hash` is the provider's ``EC2NodeClass.Hash()``
(:mod:`karpy.api.ec2nodeclass_go_hash`, bit for bit, hash version ``v6``),
so NodeClaims launched by Karpenter compare directly when karpy takes over,
and those karpy launched compare directly if Karpenter comes back.

Karpenter hashes the spec as the API server holds it: as written, with the
CRD's defaults (``metadataOptions``) filled in. A class read from a manifest
or the API server keeps that text (``EC2NodeClass.written_spec``), which
tells apart what the model does not (``detailedMonitoring: false`` from
none, ``kubeReserved.cpu: "0.1"`` from ``"100m"``); it is hashed while it
still says what the model's static fields say. A class built in code, or
changed since it was read, is hashed from its fields written out as
Karpenter's JSON. The selector terms, ``ipPrefixCount`` and the written
``amiFamily`` are ``hash:"ignore"``: what the selectors select is compared
instead (:mod:`karpy.disruption.nodeclass_drift`), and the AMI family is
hashed as resolved. :data:`EC2_HASHED_FIELDS` names the spec fields hashed,
:data:`EC2_IGNORED_FIELDS` those left out, each with why.

A KWOKNodeClass has no hash in Karpenter (its kwok provider reports no
drift). karpy's hashes the one setting that makes its nodes what they are,
the instance-type catalog the class offers (``karpy.dev/kwok-instance-types``,
resolved with the default), under karpy's own annotations;
``spec.nodeRegistrationDelay`` only says how long a launch takes, so it is
ignored, as Karpenter ignores behaviour fields.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from karpy.api._reader import FieldReader, ManifestError
from karpy.api.ec2nodeclass_go_hash import KARPENTER_EC2NODECLASS_HASH_VERSION, karpenter_ec2nodeclass_hash
from karpy.api.nodeclass import BlockDeviceMapping, EC2NodeClass, KubeletConfiguration, MetadataOptions
from karpy.api.quantity import format_amount

EC2NODECLASS_HASH_ANNOTATION = "karpenter.k8s.aws/ec2nodeclass-hash"
EC2NODECLASS_HASH_VERSION_ANNOTATION = "karpenter.k8s.aws/ec2nodeclass-hash-version"
# Karpenter's: a NodeClaim of another version (an older karpy's karpy-v1, none) is re-annotated.
EC2NODECLASS_HASH_VERSION = KARPENTER_EC2NODECLASS_HASH_VERSION

KWOKNODECLASS_HASH_ANNOTATION = "karpy.dev/kwoknodeclass-hash"
KWOKNODECLASS_HASH_VERSION_ANNOTATION = "karpy.dev/kwoknodeclass-hash-version"
KWOKNODECLASS_HASH_VERSION = "v1"

# The spec fields Karpenter v1.15 hashes (EC2NodeClassSpec without its hash:"ignore" fields),
# with what each is in karpy. Beside them it hashes the AMI family as resolved, the cluster CA
# bundle and the kubelet settings as their JSON text.
EC2_HASHED_FIELDS: Mapping[str, str] = {
    "placementGroupSelector": "refused by karpy (not modelled)",
    "associatePublicIPAddress": "associate_public_ip_address",
    "userData": "user_data",
    "role": "role",
    "instanceProfile": "instance_profile",
    "tags": "tags",
    "blockDeviceMappings": "block_device_mappings",
    "instanceStorePolicy": "instance_store_policy",
    "networkInterfaces": "refused by karpy (not modelled)",
    "detailedMonitoring": "detailed_monitoring",
    "metadataOptions": "metadata_options",
    "enclaveOptions": "refused by karpy (not modelled)",
    "connectionTracking": "refused by karpy (not modelled)",
    "context": "refused by karpy",
    "cpuOptions": "refused by karpy (not modelled)",
    "kubelet": "kubelet (hashed as its JSON text, not as a field of the spec)",
}
# Spec fields Karpenter tags hash:"ignore", and why.
EC2_IGNORED_FIELDS: Mapping[str, str] = {
    "subnetSelectorTerms": "SubnetDrift compares the instance's subnet with the resolved ones",
    "securityGroupSelectorTerms": "SecurityGroupDrift compares the resolved security groups",
    "amiSelectorTerms": "AMIDrift compares the instance's AMI with the resolved ones",
    "capacityReservationSelectorTerms": "CapacityReservationDrift compares the instance's reservation",
    "ipPrefixCount": "Karpenter ignores it",
    "amiFamily": "hashed as resolved (the alias' family when unset), not as written",
}
# The model's fields that say what is hashed, and their spec keys: a written field is hashed as
# written while the model's field still says what it says.
_STATIC_FIELDS: Mapping[str, str] = {
    "role": "role",
    "instance_profile": "instanceProfile",
    "tags": "tags",
    "kubelet": "kubelet",
    "user_data": "userData",
    "block_device_mappings": "blockDeviceMappings",
    "metadata_options": "metadataOptions",
    "associate_public_ip_address": "associatePublicIPAddress",
    "detailed_monitoring": "detailedMonitoring",
    "instance_store_policy": "instanceStorePolicy",
}
# The CRD's defaults, which the API server fills in before Karpenter reads a class.
_METADATA_OPTIONS_DEFAULTS: Mapping[str, object] = {
    "httpEndpoint": "enabled",
    "httpProtocolIPv6": "disabled",
    "httpPutResponseHopLimit": 1,
    "httpTokens": "required",
}


@dataclass(frozen=True, slots=True)
class NodeClassHash:
    """A node class' hash and the annotations it is written under, on the class and its NodeClaims."""

    value: str
    version: str
    annotation: str
    version_annotation: str

    def annotations(self) -> dict[str, str]:
        return {self.annotation: self.value, self.version_annotation: self.version}


def ec2nodeclass_hash(node_class: EC2NodeClass, ca_bundle: str = "") -> NodeClassHash:
    """Karpenter's ``EC2NodeClass.Hash(caBundle)`` of the class (``ca_bundle``: the cluster CA nodes get)."""
    return NodeClassHash(
        _go_hash(_spec_text(node_class), node_class.effective_ami_family, ca_bundle),
        EC2NODECLASS_HASH_VERSION,
        EC2NODECLASS_HASH_ANNOTATION,
        EC2NODECLASS_HASH_VERSION_ANNOTATION,
    )


def _spec_text(node_class: EC2NodeClass) -> str:
    """The spec Karpenter would hash: as written, but for the static fields changed since it was read."""
    read = _read_spec(node_class.written_spec) if node_class.written_spec else None
    if read is None:
        return json.dumps(karpenter_spec(node_class), sort_keys=True)
    changed = [
        key for name, key in _STATIC_FIELDS.items() if getattr(read, name) != getattr(node_class, name)
    ]
    if not changed:
        return node_class.written_spec
    spec, rendered = json.loads(node_class.written_spec), karpenter_spec(node_class)
    for key in changed:
        spec.pop(key, None)
        if key in rendered:
            spec[key] = rendered[key]
    return json.dumps(spec, sort_keys=True)


@functools.lru_cache(maxsize=1024)
def _go_hash(spec_text: str, ami_family: str, ca_bundle: str) -> str:
    spec = with_crd_defaults(json.loads(spec_text))
    return karpenter_ec2nodeclass_hash(spec, ami_family, ca_bundle)


def with_crd_defaults(spec: Mapping[str, Any]) -> dict[str, Any]:
    """``spec`` as the API server stores it: ``metadataOptions`` and each of its fields defaulted."""
    written = spec.get("metadataOptions")
    options = dict(written) if isinstance(written, Mapping) else {}
    return {**spec, "metadataOptions": {**_METADATA_OPTIONS_DEFAULTS, **options}}


@functools.lru_cache(maxsize=256)
def _read_spec(spec_text: str) -> EC2NodeClass | None:
    manifest = {"metadata": {"name": "written"}, "spec": json.loads(spec_text)}
    try:
        return EC2NodeClass.parse(FieldReader(manifest), "karpenter.k8s.aws/v1")
    except ManifestError:
        return None


def karpenter_spec(node_class: EC2NodeClass) -> dict[str, Any]:
    """The class' static fields written out as Karpenter's spec JSON (the fields Karpenter hashes)."""
    spec: dict[str, Any] = {}
    for key, value in (
        ("role", node_class.role),
        ("instanceProfile", node_class.instance_profile),
        ("tags", node_class.tags),
        ("userData", node_class.user_data),
        ("instanceStorePolicy", node_class.instance_store_policy),
        ("associatePublicIPAddress", node_class.associate_public_ip_address),
        ("detailedMonitoring", node_class.detailed_monitoring or None),
        ("blockDeviceMappings", [_mapping_spec(mapping) for mapping in node_class.block_device_mappings]),
        ("metadataOptions", _metadata_options_spec(node_class.metadata_options)),
        ("kubelet", _kubelet_spec(node_class.kubelet)),
    ):
        if value not in (None, "", {}, []):
            spec[key] = value
    return spec


def _set(**fields: object) -> dict[str, object]:
    return {key: value for key, value in fields.items() if value not in (None, "", {}, [], ())}


def _mapping_spec(mapping: BlockDeviceMapping) -> dict[str, object]:
    ebs = _set(
        volumeSize=mapping.volume_size,
        volumeType=mapping.volume_type,
        iops=mapping.iops,
        throughput=mapping.throughput,
        encrypted=mapping.encrypted,
        kmsKeyID=mapping.kms_key_id,
        deleteOnTermination=mapping.delete_on_termination,
        snapshotID=mapping.snapshot_id,
        volumeInitializationRate=mapping.volume_initialization_rate,
    )
    return _set(deviceName=mapping.device_name, rootVolume=mapping.root_volume or None, ebs=ebs)


def _metadata_options_spec(options: MetadataOptions) -> dict[str, object]:
    return {
        "httpEndpoint": options.http_endpoint,
        "httpProtocolIPv6": options.http_protocol_ipv6,
        "httpPutResponseHopLimit": options.http_put_response_hop_limit,
        "httpTokens": options.http_tokens,
    }


def _kubelet_spec(kubelet: KubeletConfiguration) -> dict[str, object]:
    def quantities(amounts: Mapping[str, int]) -> dict[str, str]:
        return {name: format_amount(name, amount) for name, amount in amounts.items()}

    return _set(
        maxPods=kubelet.max_pods,
        podsPerCore=kubelet.pods_per_core,
        kubeReserved=quantities(kubelet.kube_reserved),
        systemReserved=quantities(kubelet.system_reserved),
        evictionHard=kubelet.eviction_hard,
        clusterDNS=list(kubelet.cluster_dns),
        evictionSoft=kubelet.eviction_soft,
        evictionSoftGracePeriod=kubelet.eviction_soft_grace_period,
        evictionMaxPodGracePeriod=kubelet.eviction_max_pod_grace_period,
        imageGCHighThresholdPercent=kubelet.image_gc_high_threshold_percent,
        imageGCLowThresholdPercent=kubelet.image_gc_low_threshold_percent,
        cpuCFSQuota=kubelet.cpu_cfs_quota,
    )


def kwoknodeclass_hash(instance_types: str) -> NodeClassHash:
    """A KWOKNodeClass' hash: the catalog its nodes come from (``instance_types``, as resolved).

    Nothing of its spec is hashed (see the module docstring).
    """
    return NodeClassHash(
        _digest({"instanceTypes": instance_types}),
        KWOKNODECLASS_HASH_VERSION,
        KWOKNODECLASS_HASH_ANNOTATION,
        KWOKNODECLASS_HASH_VERSION_ANNOTATION,
    )


def _digest(material: Mapping[str, Any]) -> str:
    text = json.dumps(material, sort_keys=True, separators=(",", ":"))
    return str(int(hashlib.sha256(text.encode()).hexdigest()[:16], 16))


__all__ = [
    "EC2NODECLASS_HASH_ANNOTATION",
    "EC2NODECLASS_HASH_VERSION",
    "EC2NODECLASS_HASH_VERSION_ANNOTATION",
    "EC2_HASHED_FIELDS",
    "EC2_IGNORED_FIELDS",
    "KWOKNODECLASS_HASH_ANNOTATION",
    "KWOKNODECLASS_HASH_VERSION",
    "KWOKNODECLASS_HASH_VERSION_ANNOTATION",
    "NodeClassHash",
    "ec2nodeclass_hash",
    "karpenter_spec",
    "kwoknodeclass_hash",
    "with_crd_defaults",
]
