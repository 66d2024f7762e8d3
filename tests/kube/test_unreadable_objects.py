"""One object karpy cannot read never stops it: a property test over every kind it reads.

An object the API server holds may still be one karpy's reading refuses: a
CRD older or laxer than karpy's, a direct etcd write, a field the server does
not check (a budget's cron schedule, a quantity in a status). The cache
(:class:`karpy.kube.cluster.KubeCluster`) reads each object as the watch
delivers it. This test puts a cluster's worth of good objects in it, then one
more object of some kind with one field set to a generated bad value (wrong
type, out of range, malformed cron, duration or quantity, huge, empty), and
asserts that:

- delivering it raises nothing (an exception there would end the watch);
- every good object reads exactly as before;
- the provisioner still places every pending pod of the good NodePool, and the
  disruption controller's decision is worked out without an error;
- a NodePool that cannot be read is kept as an ``UnreadableNodePool`` naming
  the field at fault (its status says ``ValidationSucceeded=False``).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import NodeClaim, NodeClaimSpec, NodeClaimStatus
from karpy.api.nodepool import NodeClassRef
from karpy.cloud.kwok.provider import KwokCloudProvider
from karpy.cloud.provider import CloudProvider
from karpy.controllers.disruption import DisruptionController
from karpy.controllers.garbagecollection import GarbageCollector
from karpy.controllers.state import scheduling_snapshot
from karpy.disruption.consolidation import ConsolidationRules
from karpy.kube._http import ApiResponse, ApiTransport
from karpy.kube._resources import TYPES_BY_KIND
from karpy.kube.cluster import EVENT_DEDUPE_SECONDS, KubeCluster
from karpy.sim.clock import VirtualClock

GOOD_POOL = "good"
KWOK = {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}
NOW = "2026-12-05T10:00:00Z"
OWNER = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u-rs", "controller": True}]
NODE_LABELS = {
    "karpenter.sh/nodepool": GOOD_POOL,
    "node.kubernetes.io/instance-type": "c5.xlarge",
    "karpenter.sh/capacity-type": "on-demand",
    "topology.kubernetes.io/zone": "us-east-1a",
    "kubernetes.io/arch": "amd64",
    "kubernetes.io/os": "linux",
    "kubernetes.io/hostname": "good-node",
}


def meta(name: str, version: int, namespace: str | None = None, **more: Any) -> dict[str, Any]:
    found: dict[str, Any] = {"name": name, "uid": f"u-{name}", "resourceVersion": str(version)}
    if namespace is not None:
        found["namespace"] = namespace
    found.update(more)
    return found


def nodepool(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": meta(name, 2),
        "spec": {
            "template": {
                "metadata": {"labels": {"team": name}},
                "spec": {
                    "nodeClassRef": KWOK,
                    "requirements": [
                        {
                            "key": "node.kubernetes.io/instance-type",
                            "operator": "In",
                            "values": ["c5.large", "c5.xlarge"],
                        }
                    ],
                    "taints": [{"key": "dedicated", "value": name, "effect": "NoSchedule"}]
                    if name != GOOD_POOL
                    else [],
                    "expireAfter": "720h",
                },
            },
            "disruption": {
                "consolidationPolicy": "WhenEmptyOrUnderutilized",
                "consolidateAfter": "30s",
                "budgets": [{"nodes": "10%"}, {"nodes": "0", "schedule": "0 9 * * 1-5", "duration": "8h"}],
            },
            "limits": {"cpu": "100"},
            "weight": 10,
        },
    }


def pod(name: str, node: str | None = None, namespace: str = "default") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {"name": "app", "image": "app", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}
        ],
        "nodeSelector": {"karpenter.sh/nodepool": GOOD_POOL},
    }
    status: dict[str, Any]
    if node is None:
        status = {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        }
    else:
        spec["nodeName"] = node
        status = {"phase": "Running", "startTime": NOW}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta(name, 20, namespace, ownerReferences=OWNER, labels={"app": "web"}),
        "spec": spec,
        "status": status,
    }


def nodeclaim(name: str) -> dict[str, Any]:
    conditions = [
        {"type": kind, "status": "True", "lastTransitionTime": NOW, "reason": kind, "message": ""}
        for kind in ("Launched", "Registered", "Initialized", "Ready")
    ]
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": meta(name, 30, labels=dict(NODE_LABELS), creationTimestamp=NOW),
        "spec": {
            "nodeClassRef": KWOK,
            "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.xlarge"]}
            ],
            "resources": {"requests": {"cpu": "1"}},
            "expireAfter": "720h",
        },
        "status": {
            "providerID": f"kwok://{name}",
            "nodeName": name,
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "58"},
            "allocatable": {"cpu": "3920m", "memory": "7Gi", "pods": "58"},
            "conditions": conditions,
        },
    }


def node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": meta(name, 40, labels=dict(NODE_LABELS, **{"kubernetes.io/hostname": name})),
        "spec": {"providerID": f"kwok://{name}", "taints": []},
        "status": {
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "58"},
            "allocatable": {"cpu": "3920m", "memory": "7Gi", "pods": "58"},
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": NOW}],
        },
    }


def kwok_class(name: str) -> dict[str, Any]:
    return {"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "metadata": meta(name, 1)}


def ec2_class(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": meta(name, 3),
        "spec": {
            "role": "KarpenterNodeRole",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
            "blockDeviceMappings": [
                {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "40Gi", "volumeType": "gp3"}}
            ],
            "kubelet": {"maxPods": 110},
        },
    }


def pdb(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": meta(name, 50, "default"),
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        "status": {"disruptionsAllowed": 1, "currentHealthy": 2, "desiredHealthy": 1, "expectedPods": 2},
    }


def daemonset(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": meta(name, 60, "kube-system"),
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {"name": "agent", "image": "agent", "resources": {"requests": {"cpu": "100m"}}}
                    ],
                    "tolerations": [{"operator": "Exists"}],
                    "nodeSelector": {"kubernetes.io/os": "linux"},
                },
            },
        },
    }


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta(name, 5, labels={"team": name})}


def good_objects() -> list[dict[str, Any]]:
    return [
        namespace("default"),
        kwok_class("default"),
        nodepool(GOOD_POOL),
        nodeclaim("good-node"),
        node("good-node"),
        pod("bound-0", node="good-node"),
        pod("pending-0"),
        pod("pending-1"),
        pdb("web"),
        daemonset("agent"),
    ]


# Per kind: the object to spoil (named apart from the good ones) and the fields to spoil in it.
Path = tuple[str | int, ...]
VICTIMS: dict[str, tuple[Callable[[], dict[str, Any]], list[Path]]] = {
    "NodePool": (
        lambda: nodepool("victim"),
        [
            ("spec", "template", "spec", "requirements", 0, "values"),
            ("spec", "template", "spec", "requirements", 0, "operator"),
            ("spec", "template", "spec", "requirements", 0, "minValues"),
            ("spec", "template", "spec", "requirements"),
            ("spec", "template", "spec", "taints", 0, "effect"),
            ("spec", "template", "spec", "expireAfter"),
            ("spec", "template", "spec", "nodeClassRef"),
            ("spec", "template", "metadata", "labels"),
            ("spec", "disruption", "budgets", 0, "nodes"),
            ("spec", "disruption", "budgets", 1, "schedule"),
            ("spec", "disruption", "budgets", 1, "duration"),
            ("spec", "disruption", "budgets"),
            ("spec", "disruption", "consolidateAfter"),
            ("spec", "disruption", "consolidationPolicy"),
            ("spec", "limits", "cpu"),
            ("spec", "limits"),
            ("spec", "weight"),
            ("spec",),
        ],
    ),
    "NodeClaim": (
        lambda: nodeclaim("victim"),
        [
            ("spec", "requirements", 0, "values"),
            ("spec", "requirements"),
            ("spec", "resources", "requests", "cpu"),
            ("spec", "nodeClassRef"),
            ("spec", "expireAfter"),
            ("status", "capacity", "cpu"),
            ("status", "allocatable", "memory"),
            ("status", "conditions", 0, "status"),
            ("status", "conditions", 0, "lastTransitionTime"),
            ("status", "conditions"),
            ("status", "providerID"),
            ("metadata", "labels"),
            ("metadata", "creationTimestamp"),
        ],
    ),
    "KWOKNodeClass": (
        lambda: kwok_class("victim"),
        [("metadata", "labels"), ("spec",), ("status",), ("status", "conditions")],
    ),
    "EC2NodeClass": (
        lambda: ec2_class("victim"),
        [
            ("spec", "amiSelectorTerms"),
            ("spec", "amiSelectorTerms", 0, "alias"),
            ("spec", "subnetSelectorTerms"),
            ("spec", "blockDeviceMappings", 0, "ebs", "volumeSize"),
            ("spec", "blockDeviceMappings"),
            ("spec", "kubelet", "maxPods"),
            ("spec", "role"),
        ],
    ),
    "Pod": (
        lambda: pod("victim", namespace="other"),
        [
            ("spec", "containers", 0, "resources", "requests", "cpu"),
            ("spec", "containers", 0, "resources"),
            ("spec", "containers"),
            ("spec", "nodeSelector"),
            ("spec", "affinity"),
            ("spec", "tolerations"),
            ("spec", "topologySpreadConstraints"),
            ("spec", "priority"),
            ("spec", "nodeName"),
            ("metadata", "annotations"),
            ("metadata", "ownerReferences"),
            ("metadata", "labels"),
            ("status", "phase"),
            ("status", "conditions"),
        ],
    ),
    "Node": (
        lambda: node("victim"),
        [
            ("status", "allocatable", "cpu"),
            ("status", "allocatable"),
            ("status", "conditions"),
            ("metadata", "labels"),
            ("spec", "taints"),
            ("spec", "providerID"),
        ],
    ),
    "PodDisruptionBudget": (
        lambda: pdb("victim"),
        [
            ("spec", "minAvailable"),
            ("spec", "maxUnavailable"),
            ("spec", "selector"),
            ("status", "disruptionsAllowed"),
        ],
    ),
    "DaemonSet": (
        lambda: daemonset("victim"),
        [
            ("spec", "template", "spec", "containers", 0, "resources", "requests", "cpu"),
            ("spec", "template", "spec", "nodeSelector"),
            ("spec", "template", "spec", "tolerations"),
            ("spec", "template"),
        ],
    ),
    "Namespace": (lambda: namespace("victim"), [("metadata", "labels"), ("metadata",)]),
}

# Bad values: any field gets the generic ones, and those of its own type.
GENERIC: list[object] = [None, True, [], {}, [1, "a", None], {"a": {"b": []}}, "", "x" * 5000, -(2**70)]
QUANTITY: list[object] = ["-5", "1e999", "NaN", "\u221e", "10y", 2**70, 1.5, float("inf"), -1]
DURATION: list[object] = ["10y", "-1", "1.5", "@every 5m", "1e999h", 0, -1]
CRON: list[object] = ["61 25 32 13 8", "* * * *", "@every 5m", "0 0 30 2 *", "a b c d e", 5]
NUMBER: list[object] = [-1, 0, 2**70, 1.5, "NaN", "-5", float("inf")]
TEXT: list[object] = [5, "\u221e", "a" * 300, "-"]


def bad_values(path: Path) -> list[object]:
    """The generic bad values and those of the field's type, told by its name."""
    field = next((step for step in reversed(path) if isinstance(step, str)), "")
    if field in ("cpu", "memory", "volumeSize"):
        return GENERIC + QUANTITY
    if field in ("expireAfter", "consolidateAfter", "duration", "lastTransitionTime", "creationTimestamp"):
        return GENERIC + DURATION
    if field == "schedule":
        return GENERIC + CRON
    if field in (
        "weight",
        "priority",
        "minValues",
        "maxPods",
        "disruptionsAllowed",
        "minAvailable",
        "maxUnavailable",
    ):
        return GENERIC + NUMBER + QUANTITY[:2]
    return GENERIC + TEXT + NUMBER[:3]


PATHS = [(kind, path) for kind, (_, paths) in VICTIMS.items() for path in paths]
CASES = [
    (kind, path, value)
    for kind, (_, paths) in VICTIMS.items()
    for path in paths
    for value in bad_values(path)
]


class RefusingTransport:
    """No server: karpy only reads here, and sends Events; any other write would be a bug."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.repeats = 0

    def request(self, method: str, path: str, *, body: object = None, **_: object) -> ApiResponse:
        if method == "POST" and path.endswith("/events") and isinstance(body, dict):
            self.events.append(body)
            return ApiResponse(201, {**body, "metadata": {**body.get("metadata", {}), "name": "event"}})
        if method == "PATCH" and "/events/" in path:
            self.repeats += 1  # the same Event again: its count is raised
            return ApiResponse(200, {})
        raise AssertionError(f"unexpected request {method} {path}")

    def interrupt_streams(self) -> None:
        pass

    def close(self) -> None:
        pass


def loaded(
    objects: list[dict[str, Any]],
    transport: RefusingTransport | None = None,
    clock: VirtualClock | None = None,
) -> KubeCluster:
    cluster = KubeCluster(cast(ApiTransport, transport or RefusingTransport()), clock=clock)
    for raw in objects:
        cluster.apply(TYPES_BY_KIND[raw["kind"]], "ADDED", raw)
    return cluster


def spoiled(raw: dict[str, Any], path: Path, value: object) -> dict[str, Any]:
    spoilt = copy.deepcopy(raw)
    holder: Any = spoilt
    for step in path[:-1]:
        holder = holder.setdefault(step, {}) if isinstance(step, str) else holder[step]
    holder[path[-1]] = copy.deepcopy(value)
    return spoilt


def written(path: Path) -> str:
    text = ""
    for step in path:
        text += f"[{step}]" if isinstance(step, int) else (f".{step}" if text else step)
    return text


def reads(cluster: KubeCluster) -> Mapping[str, object]:
    """Every good object as karpy reads it."""
    return {
        **{f"NodePool/{p.name}": p for p in cluster.nodepools() if p.name != "victim"},
        **{f"NodeClaim/{c.name}": c for c in cluster.nodeclaims() if c.name != "victim"},
        **{f"Node/{n.name}": n for n in cluster.nodes() if n.name != "victim"},
        **{f"Pod/{p.key}": p for p in cluster.pods() if p.metadata.name != "victim"},
    }


def test_the_good_objects_are_all_read() -> None:
    cluster = loaded(good_objects())
    assert pending_placed(cluster)
    assert set(reads(cluster)) == {
        "NodePool/good",
        "NodeClaim/good-node",
        "Node/good-node",
        "Pod/default/bound-0",
        "Pod/default/pending-0",
        "Pod/default/pending-1",
    }
    assert not list(cluster.unreadable_nodepools())
    for kind, (make, _) in VICTIMS.items():
        # Unspoilt, each victim reads too: what the test spoils is a good object.
        with_victim = loaded([*good_objects(), make()])
        assert not list(with_victim.unreadable_nodepools()), kind


def pending_placed(cluster: KubeCluster) -> bool:
    pending = [p for p in cluster.pods() if p.metadata.name.startswith("pending-")]
    plan = scheduling_snapshot(cluster, KwokCloudProvider(cluster)).solve(pending)
    return len(pending) == 2 and not plan.unschedulable


@pytest.mark.parametrize(("kind", "path"), PATHS, ids=[f"{kind}:{written(path)}" for kind, path in PATHS])
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_an_object_karpy_cannot_read_stops_nothing_else(kind: str, path: Path, data: st.DataObject) -> None:
    # Every field of every kind, three of its bad values each run: 216 cases. All of them
    # (CASES, 1,181) pass too, in about a minute: `python -m tests.kube.test_unreadable_objects`.
    value = data.draw(st.sampled_from(bad_values(path)), label="value")
    spoil_one(kind, path, value)


def spoil_one(kind: str, path: Path, value: object) -> None:
    """Load the good objects and one spoilt one; assert that nothing else is affected."""
    make, _ = VICTIMS[kind]
    good = good_objects()
    before = loaded(good)
    victim = spoiled(make(), path, value)
    cluster = loaded(good)
    cluster.apply(TYPES_BY_KIND[kind], "ADDED", victim)
    assert reads(cluster) == reads(before)
    assert pending_placed(cluster), (kind, written(path), value)
    DisruptionController(
        cluster, KwokCloudProvider(cluster), cluster.clock, rules=ConsolidationRules()
    ).decide()
    if kind == "NodePool":
        read = [p for p in cluster.nodepools() if p.name == "victim"]
        unreadable = [p for p in cluster.unreadable_nodepools() if p.name == "victim"]
        assert len(read) + len(unreadable) == 1, (written(path), value)
        for record in unreadable:
            field = written(path)
            assert record.path.startswith(field) or field.startswith(record.path), (record.path, field)


@pytest.mark.parametrize("schedule", ["61 25 32 13 8", "* * * *", "@every 5m"])
def test_a_budget_schedule_that_is_no_cron_names_its_field(schedule: str) -> None:
    raw = nodepool("victim")
    raw["spec"]["disruption"]["budgets"] = [{"nodes": "1", "schedule": schedule, "duration": "10m"}]
    cluster = loaded([*good_objects(), raw])
    (unreadable,) = cluster.unreadable_nodepools()
    assert unreadable.path == "spec.disruption.budgets[0].schedule"
    assert pending_placed(cluster)


@pytest.mark.parametrize(
    ("disruption", "path"),
    [
        ({"budgets": [{"nodes": 5}]}, "spec.disruption.budgets[0].nodes"),  # a string in the CRD
        ({"consolidateAfter": "1.5h"}, "spec.disruption.consolidateAfter"),  # whole units only
    ],
)
def test_a_nodepool_karpys_crd_would_refuse_is_read_as_karpy_validate_reads_it(
    disruption: dict[str, Any], path: str
) -> None:
    # Stored under a laxer CRD than karpy's: karpy run refuses it as karpy validate does.
    raw = nodepool("victim")
    raw["spec"]["disruption"].update(disruption)
    cluster = loaded([*good_objects(), raw])
    (unreadable,) = cluster.unreadable_nodepools()
    assert unreadable.path == path
    assert pending_placed(cluster)


def test_a_pod_karpy_cannot_read_gets_a_warning_event_once_per_version() -> None:
    transport = RefusingTransport()
    clock = VirtualClock()
    cluster = loaded(good_objects(), transport, clock)
    raw = spoiled(
        pod("victim", namespace="other"), ("spec", "containers", 0, "resources", "requests", "cpu"), "-5"
    )
    cluster.apply(TYPES_BY_KIND["Pod"], "ADDED", raw)
    cluster.apply(TYPES_BY_KIND["Pod"], "MODIFIED", raw)  # a relist brings the same version again
    assert cluster.flush_events()
    assert transport.repeats == 0
    (event,) = transport.events
    assert event["type"] == "Warning" and event["reason"] == "FailedToRead"
    assert event["involvedObject"]["kind"] == "Pod"
    assert (event["involvedObject"]["namespace"], event["involvedObject"]["name"]) == ("other", "victim")
    assert event["message"].startswith("spec.containers[0].resources.requests.cpu: ")
    assert event["message"].endswith("karpy does not consider this pod until it is fixed")
    assert "other/victim" not in {p.key for p in cluster.pods()}
    # A new version still unreadable is told again (once the Event dedupe window has passed);
    # fixed, it is an ordinary pod.
    clock.advance(EVENT_DEDUPE_SECONDS)
    raw["metadata"]["resourceVersion"] = "21"
    cluster.apply(TYPES_BY_KIND["Pod"], "MODIFIED", raw)
    assert cluster.flush_events()
    assert (len(transport.events), transport.repeats) == (1, 1)
    fixed = pod("victim", namespace="other")
    fixed["metadata"]["resourceVersion"] = "22"
    cluster.apply(TYPES_BY_KIND["Pod"], "MODIFIED", fixed)
    assert "other/victim" in {p.key for p in cluster.pods()}


if __name__ == "__main__":
    logging.disable(logging.WARNING)
    for case in CASES:
        spoil_one(*case)
    print(f"{len(CASES)} cases: every other object read, provisioned and decided on as without them")


class RecordingCloud:
    """A cloud that lists one instance, old enough to be collected, and records deletions."""

    def __init__(self, provider_id: str, name: str) -> None:
        self.instance = NodeClaim(
            metadata=ObjectMeta(name=name, creation_timestamp=0.0),
            spec=NodeClaimSpec(node_class_ref=NodeClassRef("", "", "")),
            status=NodeClaimStatus(provider_id=provider_id),
        )
        self.deleted: list[str] = []

    def list(self) -> list[NodeClaim]:
        return [self.instance]

    def get(self, provider_id: str) -> NodeClaim:
        return self.instance  # every instance asked about exists (the good NodeClaim's too)

    def delete(self, nodeclaim: NodeClaim) -> None:
        self.deleted.append(nodeclaim.status.provider_id)


@pytest.mark.parametrize("provider_id", ["kwok://victim", ""])
def test_the_instance_of_a_nodeclaim_karpy_cannot_read_is_not_collected(provider_id: str) -> None:
    # Left out of the cache altogether, the NodeClaim would leave its instance owned by none,
    # and the garbage collector would terminate a running node for a field it cannot read.
    raw = nodeclaim("victim")
    raw["status"]["capacity"]["cpu"] = "1e999"
    raw["status"]["providerID"] = provider_id
    cluster = loaded([*good_objects(), raw])
    assert "victim" not in {claim.name for claim in cluster.nodeclaims()}
    (unreadable,) = cluster.unreadable_nodeclaims()
    assert (unreadable.name, unreadable.provider_id, unreadable.path) == (
        "victim",
        provider_id,
        "status.capacity.cpu",
    )
    cloud = RecordingCloud("kwok://victim", "victim")
    collector = GarbageCollector(cluster, cast(CloudProvider, cloud), cluster.clock)
    collector.reconcile("pass")
    assert cloud.deleted == []
    # Once it reads again (fixed), it is an ordinary NodeClaim; gone, its instance is a leak.
    cluster.apply(TYPES_BY_KIND["NodeClaim"], "DELETED", raw)
    assert not list(cluster.unreadable_nodeclaims())
    collector.reconcile("pass")
    assert cloud.deleted == ["kwok://victim"]
