"""KubeCluster and NodePool / node class status: unreadable NodePools, and status subresource writes.

A fake transport stands in for the apiserver (see test_cluster_writes.py); the
informer's sink (``replace``) is fed the objects a list would return.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from tests.kube.test_cluster_writes import FakeTransport, cluster_over

from karpy.api._reader import FieldReader
from karpy.api.conditions import Condition
from karpy.api.nodeclass import EC2NodeClass, NodeClassStatus
from karpy.api.nodepool import UNREADABLE_NODEPOOL, NodePool, NodePoolStatus
from karpy.cloud.kwok.provider import KwokCloudProvider
from karpy.controllers.nodepool import NodePoolStatusController
from karpy.kube._encode import merged_owned_status
from karpy.kube._resources import EC2_NODE_CLASS, NODEPOOL
from karpy.operator.cluster import WallClock

POOL_PATH = "/apis/karpenter.sh/v1/nodepools/default"


def raw_nodepool(
    limits: dict[str, Any] | None = None, status: dict[str, Any] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "template": {
            "spec": {
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                "requirements": [],
            }
        }
    }
    if limits is not None:
        spec["limits"] = limits
    raw: dict[str, Any] = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default", "uid": "u-pool", "resourceVersion": "10", "generation": 1},
        "spec": spec,
    }
    if status is not None:
        raw["status"] = status
    return raw


def echo(method: str, path: str, body: object) -> dict[str, Any]:
    """The server's answer to a write: the body, at a new resourceVersion."""
    assert isinstance(body, dict)
    answer = copy.deepcopy(body)
    answer["metadata"]["resourceVersion"] = "11"
    return answer


def test_a_nodepool_that_cannot_be_read_is_kept_and_announced_as_unreadable() -> None:
    cluster = cluster_over(FakeTransport(echo))
    changes: list[tuple[str, object | None, object | None]] = []
    cluster.subscribe(lambda kind, old, new: changes.append((kind, old, new)))
    cluster.replace(NODEPOOL, [raw_nodepool(limits={"cpu": -5})])
    assert list(cluster.nodepools()) == []
    (unreadable,) = cluster.unreadable_nodepools()
    assert (unreadable.name, unreadable.path) == ("default", "spec.limits.cpu")
    assert "negative" in unreadable.message
    assert changes == [(UNREADABLE_NODEPOOL, None, unreadable)]
    # Fixed: it is a NodePool again, and no longer unreadable.
    fixed = raw_nodepool(limits={"cpu": "5"})
    fixed["metadata"]["resourceVersion"] = "12"
    cluster.replace(NODEPOOL, [fixed])
    assert list(cluster.unreadable_nodepools()) == []
    assert [pool.name for pool in cluster.nodepools()] == ["default"]
    assert (UNREADABLE_NODEPOOL, unreadable, None) in changes


def test_the_status_of_an_unreadable_nodepool_is_written_to_its_status_subresource() -> None:
    stored = raw_nodepool(limits={"cpu": -5})
    transport = FakeTransport(
        lambda method, path, body: stored if method == "GET" else echo(method, path, body)
    )
    cluster = cluster_over(transport)
    cluster.replace(NODEPOOL, [stored])
    (unreadable,) = cluster.unreadable_nodepools()
    failed = Condition(
        "ValidationSucceeded", "False", "NodePoolValidationFailed", "spec.limits.cpu: bad", 1.0
    )
    written = cluster.update_status(
        dataclasses.replace(unreadable, status=NodePoolStatus(conditions=(failed,)))
    )
    method, path, body = transport.requests[-1]
    assert (method, path) == ("PUT", f"{POOL_PATH}/status")
    assert isinstance(body, dict) and body["metadata"]["resourceVersion"] == "10"
    assert body["spec"]["limits"] == {"cpu": -5}  # the object as stored, but for its status
    assert body["status"]["conditions"][0]["reason"] == "NodePoolValidationFailed"
    assert written.metadata.resource_version == "11"


def test_a_nodepool_status_write_puts_resources_nodes_and_conditions() -> None:
    transport = FakeTransport(echo)
    cluster = cluster_over(transport)
    cluster.replace(NODEPOOL, [raw_nodepool(status={"someoneElses": "kept"})])
    (pool,) = cluster.nodepools()
    status = NodePoolStatus(
        resources={"cpu": 4000, "memory": 8 * 1024**3, "nodes": 2},
        nodes=2,
        node_class_observed_generation=1,
        conditions=(Condition("Ready", "True", "Ready", "", 1.0),),
    )
    written = cluster.update_status(dataclasses.replace(pool, status=status))
    method, path, body = transport.requests[-1]
    assert (method, path) == ("PUT", f"{POOL_PATH}/status")
    assert isinstance(body, dict)
    assert body["status"]["resources"] == {"cpu": "4", "memory": "8Gi", "nodes": "2"}
    assert body["status"]["nodes"] == 2
    assert body["status"]["nodeClassObservedGeneration"] == 1
    assert body["status"]["someoneElses"] == "kept"
    assert isinstance(written, NodePool) and written.status == status
    # Writing what is stored sends nothing.
    cluster.replace(NODEPOOL, [transport.answer("PUT", path, body)])
    (stored,) = cluster.nodepools()
    sent = len(transport.requests)
    cluster.update_status(stored)
    assert len(transport.requests) == sent


RESOLVED_STATUS: dict[str, Any] = {
    "subnets": [
        {"id": "subnet-1", "zone": "us-east-1a", "zoneID": "use1-az1"},
        {"id": "subnet-2", "zone": "us-east-1b", "zoneID": "use1-az2"},
    ],
    "securityGroups": [{"id": "sg-1", "name": "my-k3s-node"}],
    "amis": [
        {
            "id": "ami-1",
            "name": "al2023",
            "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
        },
        {
            "id": "ami-0",
            "name": "al2023-old",
            "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}],
            "deprecated": True,
        },
    ],
    "instanceProfile": "my-k3s_0123",
    "capacityReservations": [
        {
            "availabilityZone": "us-east-1a",
            "id": "cr-0abc",
            "instanceMatchCriteria": "targeted",
            "instanceType": "m5.large",
            "ownerID": "123456789012",
            "reservationType": "capacity-block",
            "interruptible": False,
            "state": "active",
            "endTime": "2026-12-08T00:00:00Z",
        }
    ],
    # Not modelled by karpy (a field a newer Karpenter might add): kept by every write.
    "placementGroups": [{"id": "pg-1"}],
    "conditions": [],
}


def ec2_node_class_over(transport: FakeTransport, status: dict[str, Any]) -> tuple[Any, EC2NodeClass]:
    raw = {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default", "resourceVersion": "3"},
        "spec": {
            "role": "R",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"a": "b"}}],
            "securityGroupSelectorTerms": [{"tags": {"a": "b"}}],
        },
        "status": status,
    }
    cluster = cluster_over(transport)
    cluster.replace(EC2_NODE_CLASS, [raw])
    node_class = cluster.node_class("karpenter.k8s.aws", "EC2NodeClass", "default")
    assert isinstance(node_class, EC2NodeClass)
    return cluster, node_class


def test_a_node_class_status_write_keeps_the_fields_karpy_does_not_model() -> None:
    written = merged_owned_status(
        RESOLVED_STATUS, NodeClassStatus((Condition("Ready", "False", "NodeClassNotServed", "no AWS", 1.0),))
    )
    assert written["placementGroups"] == RESOLVED_STATUS["placementGroups"]
    assert [entry["reason"] for entry in written["conditions"]] == ["NodeClassNotServed"]
    transport = FakeTransport(echo)
    cluster, node_class = ec2_node_class_over(transport, RESOLVED_STATUS)
    cluster.update_status(
        dataclasses.replace(
            node_class,
            status=dataclasses.replace(
                node_class.status, conditions=(Condition("Ready", "True", "Ready", "", 1.0),)
            ),
        )
    )
    method, path, body = transport.requests[-1]
    assert (method, path) == ("PUT", "/apis/karpenter.k8s.aws/v1/ec2nodeclasses/default/status")
    assert isinstance(body, dict)
    assert {key: value for key, value in body["status"].items() if key != "conditions"} == {
        key: value for key, value in RESOLVED_STATUS.items() if key != "conditions"
    }


def test_the_resolved_fields_of_an_ec2_node_class_are_written_and_read_back_as_karpenter_has_them() -> None:
    transport = FakeTransport(echo)
    cluster, node_class = ec2_node_class_over(transport, {})
    resolved = NodeClassStatus.parse(FieldReader(RESOLVED_STATUS))
    stored = cluster.update_status(dataclasses.replace(node_class, status=resolved))
    method, path, body = transport.requests[-1]
    assert (method, path) == ("PUT", "/apis/karpenter.k8s.aws/v1/ec2nodeclasses/default/status")
    assert isinstance(body, dict)
    modelled = {key: value for key, value in RESOLVED_STATUS.items() if key != "placementGroups"}
    assert {key: value for key, value in body["status"].items() if key != "conditions"} == {
        key: value for key, value in modelled.items() if key != "conditions"
    }
    assert stored.status == resolved
    # None matched any more: the fields are removed, as Karpenter removes them.
    cluster.replace(EC2_NODE_CLASS, [echo("PUT", path, body)])
    current = cluster.node_class("karpenter.k8s.aws", "EC2NodeClass", "default")
    assert isinstance(current, EC2NodeClass)
    cluster.update_status(dataclasses.replace(current, status=NodeClassStatus()))
    _, _, body = transport.requests[-1]
    assert isinstance(body, dict) and body["status"] == {}


def test_the_nodepool_status_controller_keeps_what_an_ec2_node_class_resolved_to() -> None:
    transport = FakeTransport(echo)
    cluster, _ = ec2_node_class_over(transport, RESOLVED_STATUS)
    controller = NodePoolStatusController(cluster, KwokCloudProvider(cluster), WallClock())
    controller.reconcile("EC2NodeClass/default")
    method, path, body = transport.requests[-1]
    assert (method, path) == ("PUT", "/apis/karpenter.k8s.aws/v1/ec2nodeclasses/default/status")
    assert isinstance(body, dict)
    assert [entry["reason"] for entry in body["status"]["conditions"]] == ["NodeClassNotServed"]
    assert {key: value for key, value in body["status"].items() if key != "conditions"} == {
        key: value for key, value in RESOLVED_STATUS.items() if key != "conditions"
    }


def test_the_controller_reports_an_unreadable_nodepool_once_with_a_warning_event() -> None:
    stored = raw_nodepool(limits={"cpu": -5})
    transport = FakeTransport(
        lambda method, path, body: stored if method == "GET" else echo(method, path, body)
    )
    cluster = cluster_over(transport)
    cluster.replace(NODEPOOL, [stored])
    controller = NodePoolStatusController(cluster, KwokCloudProvider(cluster), WallClock())
    controller.reconcile("NodePool/default")
    assert cluster.flush_events(10)
    writes = [(method, path, body) for method, path, body in transport.requests if method in ("PUT", "POST")]
    assert [(method, path) for method, path, _ in writes] == [
        ("PUT", f"{POOL_PATH}/status"),
        ("POST", "/api/v1/namespaces/default/events"),
    ]
    status = writes[0][2]
    assert isinstance(status, dict)
    validation = {entry["type"]: entry for entry in status["status"]["conditions"]}["ValidationSucceeded"]
    assert validation["status"] == "False" and validation["message"].startswith("spec.limits.cpu: ")
    event = writes[1][2]
    assert isinstance(event, dict)
    assert (event["type"], event["reason"]) == ("Warning", "NodePoolValidationFailed")
    assert event["involvedObject"]["kind"] == "NodePool" and "spec.limits.cpu" in event["message"]
    # The status as written comes back through the watch: nothing more is written or recorded.
    cluster.replace(NODEPOOL, [echo("PUT", "", status)])
    sent = len(transport.requests)
    controller.reconcile("NodePool/default")
    assert cluster.flush_events(10)
    assert len(transport.requests) == sent
    cluster.close()
