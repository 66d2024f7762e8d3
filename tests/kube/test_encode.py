"""Records back to JSON: NodeClaims round-trip whole, Nodes get minimal merge patches."""

from __future__ import annotations

import orjson

from karpy.api._reader import FieldReader
from karpy.api.conditions import Condition
from karpy.api.core import Node, Pod
from karpy.api.meta import ObjectMeta, OwnerReference
from karpy.api.nodeclaim import TERMINATION_FINALIZER, NodeClaim, NodeClaimSpec, NodeClaimStatus
from karpy.api.nodepool import NodeClassRef
from karpy.api.requirements import Requirement
from karpy.api.taints import Taint
from karpy.kube._encode import (
    merged_metadata,
    merged_nodeclaim_status,
    node_merge_patch,
    nodeclaim_to_dict,
    pod_merge_patch,
)

GIB = 1024**3


def _nodeclaim() -> NodeClaim:
    return NodeClaim(
        metadata=ObjectMeta(
            name="default-abcde",
            uid="uid-1",
            labels={"karpenter.sh/nodepool": "default", "node.kubernetes.io/instance-type": "c5.large"},
            annotations={"karpenter.sh/nodepool-hash": "123"},
            finalizers=(TERMINATION_FINALIZER,),
            creation_timestamp=1_700_000_000.0,
            resource_version="42",
            generation=1,
        ),
        spec=NodeClaimSpec(
            node_class_ref=NodeClassRef("karpenter.k8s.aws", "EC2NodeClass", "default"),
            requirements=(
                Requirement.from_operator(
                    "node.kubernetes.io/instance-type", "In", ["c5.large", "m5.large"], 2
                ),
                Requirement.from_operator("karpenter.sh/capacity-type", "NotIn", ["spot"]),
                Requirement.from_operator("karpenter.k8s.aws/instance-cpu", "Gt", ["1"]),
                Requirement.from_operator("example.com/gpu", "DoesNotExist"),
            ),
            requests={"cpu": 1500, "memory": 3 * GIB, "pods": 4},
            taints=(Taint("dedicated", "NoSchedule", "web"),),
            startup_taints=(Taint("example.com/agent", "NoExecute"),),
            expire_after=None,
            termination_grace_period=3600.0,
        ),
        status=NodeClaimStatus(
            node_name="ip-10-0-0-1.ec2.internal",
            provider_id="aws:///us-east-1a/i-0123",
            image_id="ami-0123",
            capacity={"cpu": 2000, "memory": 4 * GIB, "pods": 29},
            allocatable={"cpu": 1930, "memory": 3 * GIB + 512 * 1024**2, "pods": 29},
            conditions=(
                Condition("Launched", "True", "Launched", "", 1_700_000_010.0),
                Condition("Ready", "False", "NotInitialized", "waiting", 1_700_000_010.0),
            ),
            last_pod_event_time=1_700_000_100.0,
        ),
    )


def _parse_nodeclaim(data: dict[str, object]) -> NodeClaim:
    # Through JSON bytes, as the API server's answer would arrive.
    return NodeClaim.parse(FieldReader(orjson.loads(orjson.dumps(data))))


def test_nodeclaim_round_trips_through_its_dict() -> None:
    claim = _nodeclaim()
    data = nodeclaim_to_dict(claim)
    assert data["apiVersion"] == "karpenter.sh/v1"
    assert data["spec"]["expireAfter"] == "Never"
    assert data["spec"]["terminationGracePeriod"] == "1h"
    assert data["spec"]["resources"]["requests"] == {"cpu": "1500m", "memory": "3Gi", "pods": "4"}
    assert data["spec"]["requirements"][0]["minValues"] == 2
    assert data["status"]["allocatable"]["memory"] == "3584Mi"
    assert _parse_nodeclaim(data) == claim


def test_nodeclaim_with_generate_name_and_default_expiry_round_trips() -> None:
    claim = NodeClaim(
        metadata=ObjectMeta(name="", generate_name="default-"),
        spec=NodeClaimSpec(node_class_ref=NodeClassRef("karpenter.kwok.sh", "KWOKNodeClass", "default")),
    )
    data = nodeclaim_to_dict(claim)
    assert data["metadata"] == {"generateName": "default-"}
    assert data["spec"]["expireAfter"] == "720h"
    assert "status" not in data
    assert _parse_nodeclaim(data) == claim


def test_merged_metadata_and_status_keep_what_records_do_not_hold() -> None:
    stored_meta = {
        "name": "default-abcde",
        "resourceVersion": "42",
        "managedFields": [{"manager": "karpy"}],
        "labels": {"old": "1"},
    }
    merged = merged_metadata(stored_meta, ObjectMeta(name="default-abcde", labels={"new": "2"}))
    assert merged == {
        "name": "default-abcde",
        "resourceVersion": "42",
        "managedFields": [{"manager": "karpy"}],
        "labels": {"new": "2"},
    }
    status = merged_nodeclaim_status(
        {"providerID": "old", "futureField": True}, NodeClaimStatus(node_name="node-1")
    )
    assert status == {"futureField": True, "nodeName": "node-1"}


def _stored_node() -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "node-1",
            "resourceVersion": "7",
            "labels": {"kubernetes.io/hostname": "node-1", "zone": "a"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            "finalizers": ["karpenter.sh/termination"],
        },
        "spec": {
            "providerID": "kwok://node-1",
            "taints": [
                {
                    "key": "node.kubernetes.io/unreachable",
                    "effect": "NoExecute",
                    "timeAdded": "2024-01-01T00:00:00Z",
                },
                {"key": "dedicated", "value": "web", "effect": "NoSchedule"},
            ],
        },
        "status": {"nodeInfo": {"kubeletVersion": "v1.31.0"}, "capacity": {"cpu": "4"}},
    }


def test_node_patch_is_empty_when_nothing_changed() -> None:
    stored = _stored_node()
    assert node_merge_patch(stored, Node.parse(FieldReader(stored))) == {}


def test_node_patch_holds_only_changed_labels() -> None:
    stored = _stored_node()
    node = Node.parse(FieldReader(stored))
    labels = {**node.metadata.labels, "karpenter.sh/initialized": "true"}
    del labels["zone"]
    patch = node_merge_patch(stored, node.with_changes(metadata=node.metadata.with_changes(labels=labels)))
    assert patch == {"metadata": {"labels": {"karpenter.sh/initialized": "true", "zone": None}}}


def test_node_patch_of_taints_keeps_the_stored_taints_whole() -> None:
    stored = _stored_node()
    node = Node.parse(FieldReader(stored))
    disrupted = Taint("karpenter.sh/disrupted", "NoSchedule")
    patch = node_merge_patch(stored, node.with_changes(taints=(*node.taints, disrupted)))
    assert patch == {
        "spec": {
            "taints": [
                {
                    "key": "node.kubernetes.io/unreachable",
                    "effect": "NoExecute",
                    "timeAdded": "2024-01-01T00:00:00Z",
                },
                {"key": "dedicated", "value": "web", "effect": "NoSchedule"},
                {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"},
            ]
        }
    }
    assert node_merge_patch(stored, node.with_changes(taints=())) == {"spec": {"taints": None}}


def test_node_patch_of_finalizers_and_unschedulable() -> None:
    stored = _stored_node()
    node = Node.parse(FieldReader(stored))
    patch = node_merge_patch(
        stored, node.with_changes(metadata=node.metadata.with_changes(finalizers=()), unschedulable=True)
    )
    assert patch == {"metadata": {"finalizers": None}, "spec": {"unschedulable": True}}


def test_node_patch_of_owner_references_writes_the_list_whole_without_false_pointers() -> None:
    # Karpenter's registration makes the NodeClaim an owner of its Node; its e2e specs compare
    # the reference field by field, so an unset controller must stay absent, not false.
    stored = _stored_node()
    metadata = stored["metadata"]
    assert isinstance(metadata, dict)
    metadata["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "keep", "uid": "u-0", "controller": True}
    ]
    node = Node.parse(FieldReader(stored))
    assert node_merge_patch(stored, node) == {}, "a stored reference reads back as written"
    owner = OwnerReference("karpenter.sh/v1", "NodeClaim", "claim-1", "u-1", block_owner_deletion=True)
    owned = node.metadata.with_changes(owner_references=(*node.metadata.owner_references, owner))
    patch = node_merge_patch(stored, node.with_changes(metadata=owned))
    assert patch == {
        "metadata": {
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "keep", "uid": "u-0", "controller": True},
                {
                    "apiVersion": "karpenter.sh/v1",
                    "kind": "NodeClaim",
                    "name": "claim-1",
                    "uid": "u-1",
                    "blockOwnerDeletion": True,
                },
            ]
        }
    }


def test_pod_patch_never_writes_phase_or_spec() -> None:
    stored = {
        "metadata": {"name": "web-1", "namespace": "default", "resourceVersion": "3"},
        "spec": {"containers": [{"name": "web", "image": "web:1"}]},
        "status": {"phase": "Pending"},
    }
    pod = Pod.parse(FieldReader(stored))
    changed = pod.with_changes(
        phase="Running",
        metadata=pod.metadata.with_changes(annotations={"karpenter.sh/do-not-disrupt": "true"}),
    )
    assert pod_merge_patch(stored, changed) == {
        "metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}
    }
