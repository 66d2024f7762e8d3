"""The node class hash: which of a node class' fields drift its nodes when they change.

Karpenter's AWS provider annotates every NodeClaim it launches (and the
EC2NodeClass) with ``karpenter.k8s.aws/ec2nodeclass-hash``, a hash of the
class' *static* fields, and ``karpenter.k8s.aws/ec2nodeclass-hash-version``;
a NodeClaim whose hash differs from its class' (same version) is drifted
with reason ``NodeClassDrift``. The selector terms are left out: what they
select is compared instead (the instance's subnet, security groups and AMI
against the class' resolved ones, :mod:`karpy.disruption.nodeclass_drift`),
so a selector rewritten to select the same resources replaces nothing.

:data:`EC2_HASHED_FIELDS` are exactly the fields of Karpenter's hash that
karpy models (its ``EC2NodeClass.Hash``: the spec without the fields tagged
``hash:"ignore"``, plus the AMI family as resolved, the cluster CA bundle
and the kubelet settings); :data:`EC2_IGNORED_FIELDS` the rest, each with
why. As in Karpenter, lists whose order means nothing (block device
mappings) are hashed as sets, maps are unordered, and a field at its default
contributes nothing, so adding a field to the model does not change the hash
of a class that does not set it. karpy's hash is its own (a SHA-256 digest,
not Karpenter's FNV of Go structs): its version, :data:`EC2NODECLASS_HASH_VERSION`,
differs from every version Karpenter writes, so a NodeClaim Karpenter
launched is re-annotated, never drifted, when karpy takes over.

A KWOKNodeClass has no hash in Karpenter (its provider reports no drift).
karpy's hashes the one setting that makes its nodes what they are, the
instance-type catalog the class offers (``karpy.dev/kwok-instance-types``,
resolved with the default); ``spec.nodeRegistrationDelay`` only says how
long a launch takes, so it is ignored, as Karpenter ignores behaviour fields.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from karpy.api.nodeclass import EC2NodeClass

EC2NODECLASS_HASH_ANNOTATION = "karpenter.k8s.aws/ec2nodeclass-hash"
EC2NODECLASS_HASH_VERSION_ANNOTATION = "karpenter.k8s.aws/ec2nodeclass-hash-version"
# Bump when the hash of an unchanged class changes: a field's default changes, a field
# already set is added or removed, or a hashed field changes how it is written.
EC2NODECLASS_HASH_VERSION = "karpy-v1"

KWOKNODECLASS_HASH_ANNOTATION = "karpy.dev/kwoknodeclass-hash"
KWOKNODECLASS_HASH_VERSION_ANNOTATION = "karpy.dev/kwoknodeclass-hash-version"
KWOKNODECLASS_HASH_VERSION = "v1"

# The model's field → its name in the EC2NodeClass spec. Karpenter hashes each of them.
EC2_HASHED_FIELDS: Mapping[str, str] = {
    "user_data": "userData",
    "role": "role",
    "instance_profile": "instanceProfile",
    "tags": "tags",
    "kubelet": "kubelet",
    "block_device_mappings": "blockDeviceMappings",
    "metadata_options": "metadataOptions",
    "associate_public_ip_address": "associatePublicIPAddress",
    "detailed_monitoring": "detailedMonitoring",
    "instance_store_policy": "instanceStorePolicy",
    "ami_family": "amiFamily",  # as resolved: amiFamily, else the alias' family
}
# Fields of the model left out of the hash, and why.
EC2_IGNORED_FIELDS: Mapping[str, str] = {
    "subnet_selector_terms": "SubnetDrift compares the instance's subnet with the resolved ones",
    "security_group_selector_terms": "SecurityGroupDrift compares the resolved security groups",
    "ami_selector_terms": "AMIDrift compares the instance's AMI with the resolved ones",
    # Karpenter's hash ignores them too.
    "capacity_reservation_selector_terms": "CapacityReservationDrift compares the instance's reservation",
    "metadata": "not the spec",
    "status": "not the spec",
    "converted_from": "how the manifest was written, not what it asks for",
    "conversion_notes": "how the manifest was written, not what it asks for",
}
# The kubelet settings keep their order, as Karpenter hashes them as one JSON text.
_ORDERED = frozenset({"kubelet"})


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
    """The class' ``karpenter.k8s.aws/ec2nodeclass-hash`` (``ca_bundle``: the cluster CA nodes are given)."""
    spec: dict[str, Any] = {}
    for name, key in EC2_HASHED_FIELDS.items():
        value = node_class.effective_ami_family if name == "ami_family" else getattr(node_class, name)
        canonical = _canonical(value, ordered=name in _ORDERED)
        if not _is_default(EC2NodeClass, name, value) and canonical not in (None, "", {}, []):
            spec[key] = canonical
    if ca_bundle:
        spec["caBundle"] = ca_bundle
    return NodeClassHash(
        _digest(spec),
        EC2NODECLASS_HASH_VERSION,
        EC2NODECLASS_HASH_ANNOTATION,
        EC2NODECLASS_HASH_VERSION_ANNOTATION,
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


def _is_default(owner: type, name: str, value: object) -> bool:
    """Whether ``value`` is the default of ``owner``'s field ``name`` (such a field adds nothing)."""
    for field_ in dataclasses.fields(owner):
        if field_.name != name:
            continue
        if field_.default is not dataclasses.MISSING:
            return bool(value == field_.default)
        if field_.default_factory is not dataclasses.MISSING:
            return bool(value == field_.default_factory())
    return False


def _canonical(value: object, *, ordered: bool = False) -> Any:
    """``value`` as JSON data: defaults dropped, maps sorted, lists as sets unless ``ordered``."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {}
        for field_ in dataclasses.fields(value):
            item = getattr(value, field_.name)
            if not _is_default(type(value), field_.name, item):
                fields[field_.name] = _canonical(item, ordered=ordered)
        return fields
    if isinstance(value, Mapping):
        return {str(key): _canonical(item, ordered=ordered) for key, item in sorted(value.items())}
    if isinstance(value, list | tuple | frozenset | set):
        items = [_canonical(item, ordered=ordered) for item in value]
        if ordered and isinstance(value, list | tuple):
            return items
        return sorted(items, key=lambda item: json.dumps(item, sort_keys=True))
    return value


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
    "kwoknodeclass_hash",
]
