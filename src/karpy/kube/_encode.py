"""karpy's slim records back to the API server's JSON, without losing what they leave out.

The records in ``karpy.api`` keep only what the controllers act on: a Node
record has no ``status.nodeInfo`` or addresses, a Pod record no containers.
Writing a record back whole would therefore erase everything it does not hold.
So what is written depends on who owns the object:

- **NodeClaims are karpy's own.** Every field of a NodeClaim is one the record
  holds, so the object can be written whole from the record
  (:func:`nodeclaim_to_dict`). Even so an update starts from the server's own
  dict of the object: metadata fields karpy does not model (managedFields,
  generation, ...) are kept, and the spec is re-encoded only when the record's
  spec differs from the stored one, so that a CRD-defaulted or differently
  ordered spec is not rewritten (NodeClaim specs are immutable: a rewrite that
  only reorders values would be refused).
- **Nodes and Pods belong to the kubelet, the scheduler and their owners.**
  karpy changes a few fields of them: labels, annotations and finalizers, a
  Node's taints and ``unschedulable``. For those a JSON merge patch of exactly
  the changed fields is computed by diffing the new record against the stored
  dict (:func:`node_merge_patch`, :func:`pod_merge_patch`). A merge patch
  replaces a list whole, so the taints list is rebuilt from the stored taint
  dicts that remain (keeping their ``timeAdded``) plus the new ones. A Pod's
  phase is never written: in a real cluster that is the kubelet's.
- **NodePool and node class statuses** are karpy's to write, their specs the
  user's: only the status subresource is written, with the status fields
  karpy owns taken from the record and any others the server holds kept
  (:func:`merged_owned_status`). An EC2NodeClass' resolved ``subnets``,
  ``securityGroups``, ``amis``, ``instanceProfile`` and
  ``capacityReservations`` are among the owned
  fields (:func:`node_class_resolved_to_dict`): the AWS provider's status
  controller writes them, and every other writer of a node class' status
  carries them over from the record it read, so an empty one means "none
  matched" and is removed, as Karpenter removes it.

Every function here is pure (dicts in, dicts out) and is unit tested without
a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from karpy.api._reader import FieldReader
from karpy.api.conditions import Condition
from karpy.api.core import Node, Pod
from karpy.api.duration import format_duration
from karpy.api.meta import ObjectMeta, format_timestamp
from karpy.api.nodeclaim import NodeClaim, NodeClaimSpec, NodeClaimStatus
from karpy.api.nodeclass import NodeClassStatus
from karpy.api.nodepool import API_VERSION_V1, NodePoolStatus
from karpy.api.quantity import ResourceAmounts, format_amount
from karpy.api.taints import Taint

JSON = dict[str, Any]

# The metadata fields karpy's records model and an update may change.
_WRITABLE_METADATA = ("labels", "annotations", "finalizers", "ownerReferences")
# The NodeClaim status fields the record holds (others a server may add are kept).
_NODECLAIM_STATUS_FIELDS = (
    "nodeName",
    "providerID",
    "imageID",
    "capacity",
    "allocatable",
    "conditions",
    "lastPodEventTime",
)


def resources_to_dict(amounts: ResourceAmounts) -> dict[str, str]:
    return {name: format_amount(name, amount) for name, amount in sorted(amounts.items())}


def metadata_to_dict(meta: ObjectMeta) -> JSON:
    """ObjectMeta as the API server writes it; a ``generateName`` without a name stays one."""
    result: JSON = dict(meta.to_dict())
    if not meta.name:
        result.pop("name", None)
    if meta.generate_name:
        result["generateName"] = meta.generate_name
    if meta.generation:
        result["generation"] = meta.generation
    return result


def condition_to_dict(condition: Condition) -> JSON:
    return dict(condition.to_dict())


def nodeclaim_spec_to_dict(spec: NodeClaimSpec) -> JSON:
    result: JSON = {
        "nodeClassRef": spec.node_class_ref.to_dict(),
        "requirements": [requirement.to_node_selector_requirement() for requirement in spec.requirements],
        "resources": {"requests": resources_to_dict(spec.requests)},
        "expireAfter": format_duration(spec.expire_after),
    }
    if spec.taints:
        result["taints"] = [taint.to_dict() for taint in spec.taints]
    if spec.startup_taints:
        result["startupTaints"] = [taint.to_dict() for taint in spec.startup_taints]
    if spec.termination_grace_period is not None:
        result["terminationGracePeriod"] = format_duration(spec.termination_grace_period)
    return result


def nodeclaim_status_to_dict(status: NodeClaimStatus) -> JSON:
    result: JSON = {}
    if status.node_name:
        result["nodeName"] = status.node_name
    if status.provider_id:
        result["providerID"] = status.provider_id
    if status.image_id:
        result["imageID"] = status.image_id
    if status.capacity:
        result["capacity"] = resources_to_dict(status.capacity)
    if status.allocatable:
        result["allocatable"] = resources_to_dict(status.allocatable)
    if status.conditions:
        result["conditions"] = [condition_to_dict(condition) for condition in status.conditions]
    if status.last_pod_event_time is not None:
        result["lastPodEventTime"] = format_timestamp(status.last_pod_event_time)
    return result


def nodeclaim_to_dict(claim: NodeClaim) -> JSON:
    """The whole NodeClaim, as ``kubectl get nodeclaim -o json`` would show it."""
    result: JSON = {
        "apiVersion": API_VERSION_V1,
        "kind": "NodeClaim",
        "metadata": metadata_to_dict(claim.metadata),
        "spec": nodeclaim_spec_to_dict(claim.spec),
    }
    status = nodeclaim_status_to_dict(claim.status)
    if status:
        result["status"] = status
    return result


def node_to_dict(node: Node) -> JSON:
    """A Node to create: metadata and the spec karpy models (the kubelet fills the status)."""
    spec: JSON = {}
    if node.provider_id:
        spec["providerID"] = node.provider_id
    if node.taints:
        spec["taints"] = [taint.to_dict() for taint in node.taints]
    if node.unschedulable:
        spec["unschedulable"] = True
    return {"apiVersion": "v1", "kind": "Node", "metadata": metadata_to_dict(node.metadata), "spec": spec}


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def merged_metadata(stored: Mapping[str, Any], meta: ObjectMeta) -> JSON:
    """The stored metadata with the fields karpy writes taken from ``meta`` (for a PUT)."""
    result: JSON = dict(stored)
    written = metadata_to_dict(meta)
    for field in _WRITABLE_METADATA:
        if field in written:
            result[field] = written[field]
        else:
            result.pop(field, None)
    return result


def merged_nodeclaim_status(stored: Mapping[str, Any], status: NodeClaimStatus) -> JSON:
    """The stored status with every field the record holds taken from ``status``."""
    result: JSON = {key: value for key, value in stored.items() if key not in _NODECLAIM_STATUS_FIELDS}
    result.update(nodeclaim_status_to_dict(status))
    return result


def _map_patch(old: Mapping[str, str], new: Mapping[str, str]) -> JSON:
    """A merge patch turning ``old`` into ``new``: changed keys set, removed keys null."""
    patch: JSON = {key: value for key, value in new.items() if old.get(key) != value}
    patch.update({key: None for key in old if key not in new})
    return patch


def metadata_merge_patch(stored: Mapping[str, Any], meta: ObjectMeta) -> JSON:
    """The metadata part of a merge patch from the stored object to ``meta`` ({} if unchanged)."""
    old = ObjectMeta.parse(FieldReader(_mapping(stored.get("metadata"))), namespaced=False)
    patch: JSON = {}
    labels = _map_patch(old.labels, meta.labels)
    if labels:
        patch["labels"] = labels
    annotations = _map_patch(old.annotations, meta.annotations)
    if annotations:
        patch["annotations"] = annotations
    if old.finalizers != meta.finalizers:
        patch["finalizers"] = list(meta.finalizers) if meta.finalizers else None
    if old.owner_references != meta.owner_references:
        # A merge patch replaces the list whole; karpy's model holds every field of a reference.
        patch["ownerReferences"] = [owner.to_dict() for owner in meta.owner_references] or None
    return {"metadata": patch} if patch else {}


def _taint_of(raw: Mapping[str, Any]) -> Taint | None:
    try:
        return Taint.parse(FieldReader(raw))
    except ValueError:
        return None


def node_merge_patch(stored: Mapping[str, Any], node: Node) -> JSON:
    """A merge patch of the labels, annotations, finalizers, taints and unschedulable that changed."""
    patch = metadata_merge_patch(stored, node.metadata)
    old = Node.parse(FieldReader(stored))
    spec: JSON = {}
    if old.taints != node.taints:
        stored_taints = [
            taint for taint in _mapping(stored.get("spec")).get("taints") or () if isinstance(taint, Mapping)
        ]
        taints: list[JSON] = []
        for taint in node.taints:
            kept = next((dict(raw) for raw in stored_taints if _taint_of(raw) == taint), None)
            taints.append(kept if kept is not None else dict(taint.to_dict()))
        spec["taints"] = taints or None
    if old.unschedulable != node.unschedulable:
        spec["unschedulable"] = True if node.unschedulable else None
    if node.provider_id and old.provider_id != node.provider_id:
        spec["providerID"] = node.provider_id
    if spec:
        patch["spec"] = spec
    return patch


def pod_merge_patch(stored: Mapping[str, Any], pod: Pod) -> JSON:
    """A merge patch of a Pod's labels, annotations and finalizers (the rest is not karpy's)."""
    return metadata_merge_patch(stored, pod.metadata)


def owned_status_to_dict(status: NodePoolStatus | NodeClassStatus) -> tuple[JSON, tuple[str, ...]]:
    """The status fields karpy writes for a NodePool or node class, and the names of all it owns.

    A field it owns but that is empty is left out of the first (and so removed
    from the stored status by :func:`merged_owned_status`).
    """
    if isinstance(status, NodeClassStatus):
        owned: tuple[str, ...] = (
            "subnets",
            "securityGroups",
            "amis",
            "instanceProfile",
            "capacityReservations",
            "conditions",
        )
        result: JSON = node_class_resolved_to_dict(status)
    else:
        owned = ("resources", "nodes", "nodeClassObservedGeneration", "conditions")
        result = {"resources": resources_to_dict(status.resources)} if status.resources else {}
        if status.nodes is not None:
            result["nodes"] = status.nodes
        if status.node_class_observed_generation is not None:
            result["nodeClassObservedGeneration"] = status.node_class_observed_generation
    if status.conditions:
        result["conditions"] = [condition_to_dict(condition) for condition in status.conditions]
    return result, owned


def node_class_resolved_to_dict(status: NodeClassStatus) -> JSON:
    """What an EC2NodeClass' selectors resolved to, as Karpenter writes it (empty fields left out)."""
    result: JSON = {}
    if status.subnets:
        result["subnets"] = [
            {"id": subnet.id, "zone": subnet.zone, **({"zoneID": subnet.zone_id} if subnet.zone_id else {})}
            for subnet in status.subnets
        ]
    if status.security_groups:
        result["securityGroups"] = [{"id": group.id, "name": group.name} for group in status.security_groups]
    if status.amis:
        result["amis"] = [
            {
                "id": ami.id,
                "name": ami.name,
                "requirements": [dict(requirement) for requirement in ami.requirements],
                **({"deprecated": True} if ami.deprecated else {}),
            }
            for ami in status.amis
        ]
    if status.instance_profile:
        result["instanceProfile"] = status.instance_profile
    if status.capacity_reservations:
        result["capacityReservations"] = [
            reservation.to_status() for reservation in status.capacity_reservations
        ]
    return result


def merged_owned_status(stored: Mapping[str, Any], status: NodePoolStatus | NodeClassStatus) -> JSON:
    """The stored status with the fields karpy owns replaced by ``status``'s (others kept)."""
    written, owned = owned_status_to_dict(status)
    result = {key: value for key, value in stored.items() if key not in owned}
    result.update(written)
    return result
