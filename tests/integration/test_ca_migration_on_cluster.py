"""``karpy plan --from-cluster-autoscaler`` on the control plane: its NodePools, applied, take every pod.

A Cluster Autoscaler cluster is built as its node groups would have built it:
Nodes registered by hand, as an instance's kubelet registers, with the labels the
node-group tooling puts on them (``eks.amazonaws.com/nodegroup`` and
``eks.amazonaws.com/capacityType`` for EKS managed groups,
``alpha.eksctl.io/nodegroup-name`` for an eksctl self-managed one), the instance
type, zone, region, architecture, and the capacity and allocatable of the type in
the bundled catalog; the fake kubelet keeps them Ready. Three groups:

- ``it-ca-general``: EKS managed, on-demand m5.xlarge, one node in us-east-1a and
  one in us-east-1b;
- ``it-ca-batch``: EKS managed, spot c5.xlarge, labelled ``workload=batch`` and
  tainted ``workload=batch:NoSchedule``;
- ``it-ca-arm``: eksctl, on-demand m6g.large (arm64) in us-east-1a.

A DaemonSet runs on every node, and four Deployments on the groups: ``web``
(asks for no architecture), ``zonal`` (required node affinity to us-east-1b),
``batch`` (selects ``workload=batch`` and EKS's ``capacityType: SPOT``, tolerates
the taint) and ``arm`` (selects arm64); what a proposal that lost a label, a
taint, a zone or an architecture would leave pending or misplace.

``karpy plan --from-cluster-autoscaler -o json --manifests-dir DIR`` runs as a
process against it. Then the migration: ``karpy run`` starts, the files of DIR
are applied as they are, the node groups' Nodes are cordoned, drained
(``kubectl drain``: evictions) group after group, the general group first, and
deleted. Every pod must be Running again, within two minutes, on a node of a
proposed NodePool, the batch pods on the batch pool's, each pod on the
architecture it ran on (``web`` never asked for amd64, but its image may have
no other), and the nodes ``karpy run`` launched must be as many, and cost as
much, as the plan predicted (tolerance at the check).
"""

from __future__ import annotations

import time
from collections.abc import Container, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from karpy.api.quantity import format_amount
from karpy.cloud.aws_catalog import instance_type_from_entry, load_catalog

from .conftest import ControlPlane, wait_until
from .karpy_run import (
    LABEL_ARCH,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    LABEL_OS,
    PAUSE_IMAGE,
    as_yaml,
    get_items,
    karpy_json,
    pool_claims,
    running_karpy,
)
from .test_run_cost_metrics import catalog_prices, launched

pytestmark = pytest.mark.integration

LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_REGION = "topology.kubernetes.io/region"
EKS_NODEGROUP = "eks.amazonaws.com/nodegroup"
EKS_CAPACITY_TYPE = "eks.amazonaws.com/capacityType"
EKSCTL_NODEGROUP = "alpha.eksctl.io/nodegroup-name"
BATCH_TAINT = {"key": "workload", "value": "batch", "effect": "NoSchedule"}
# How long every pod may take to run again once the node groups are drained: karpy batches the
# evicted pods (a second or two), launches, and the kwok Nodes register and go Ready in seconds.
REPLACED_WITHIN = 120.0
AGENT = "node-agent"


@dataclass(frozen=True)
class NodeGroup:
    name: str
    group_label: str
    instance_type: str
    zones: tuple[str, ...]
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[dict[str, str], ...] = ()

    def node_names(self) -> list[str]:
        return [f"{self.name}-{index}" for index in range(len(self.zones))]


GROUPS = (
    NodeGroup(
        "it-ca-general",
        EKS_NODEGROUP,
        "m5.xlarge",
        ("us-east-1a", "us-east-1b"),
        labels={EKS_CAPACITY_TYPE: "ON_DEMAND"},
    ),
    NodeGroup(
        "it-ca-batch",
        EKS_NODEGROUP,
        "c5.xlarge",
        ("us-east-1a",),
        labels={EKS_CAPACITY_TYPE: "SPOT", "workload": "batch"},
        taints=(BATCH_TAINT,),
    ),
    NodeGroup("it-ca-arm", EKSCTL_NODEGROUP, "m6g.large", ("us-east-1a",)),
)
CA_NODES = [name for group in GROUPS for name in group.node_names()]


def catalog_node(group: NodeGroup, name: str, zone: str) -> dict[str, Any]:
    """The Node an instance of ``group`` registers: its type's arch, capacity and allocatable."""
    catalog = load_catalog()
    entry = catalog.entry(group.instance_type)
    assert entry is not None, group.instance_type
    instance_type = instance_type_from_entry(entry, catalog.region, catalog.zones)
    arch = instance_type.requirements.labels(include_well_known=True)[LABEL_ARCH]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                LABEL_ARCH: arch,
                LABEL_OS: "linux",
                "kubernetes.io/hostname": name,
                LABEL_INSTANCE_TYPE: group.instance_type,
                LABEL_ZONE: zone,
                LABEL_REGION: catalog.region,
                group.group_label: group.name,
                **group.labels,
            },
            # The fake kubelet keeps the Node Ready and runs its pods.
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "spec": {"providerID": f"kwok://{name}", "taints": list(group.taints)},
        "status": {
            "capacity": {key: format_amount(key, value) for key, value in instance_type.capacity.items()},
            "allocatable": {
                key: format_amount(key, value) for key, value in instance_type.allocatable.items()
            },
        },
    }


def ca_nodes() -> list[dict[str, Any]]:
    return [
        catalog_node(group, name, zone)
        for group in GROUPS
        for name, zone in zip(group.node_names(), group.zones, strict=True)
    ]


def workload(namespace: str, app: str, replicas: int, cpu: str, **placement: Any) -> dict[str, Any]:
    """``replicas`` pause pods labelled ``app=<app>``; ``placement`` goes into the pod spec as it is."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": app, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "pause",
                            "image": PAUSE_IMAGE,
                            "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}},
                        }
                    ],
                    **placement,
                },
            },
        },
    }


def workloads(namespace: str) -> dict[str, tuple[dict[str, Any], int]]:
    """Each Deployment, by app, with its replicas."""
    zone_1b = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": LABEL_ZONE, "operator": "In", "values": ["us-east-1b"]}]}
                ]
            }
        }
    }
    toleration = {"key": "workload", "operator": "Equal", "value": "batch", "effect": "NoSchedule"}
    specs: dict[str, tuple[int, str, dict[str, Any]]] = {
        "arm": (2, "500m", {"nodeSelector": {LABEL_ARCH: "arm64"}}),
        # No architecture asked for, as most pods: their images may be amd64's only.
        "web": (5, "1", {}),
        "zonal": (2, "500m", {"affinity": zone_1b}),
        # Spot by EKS's label, as pods on EKS often ask for it: the pool must keep that label.
        "batch": (
            3,
            "1",
            {"nodeSelector": {"workload": "batch", EKS_CAPACITY_TYPE: "SPOT"}, "tolerations": [toleration]},
        ),
    }
    return {
        app: (workload(namespace, app, replicas, cpu, **placement), replicas)
        for app, (replicas, cpu, placement) in specs.items()
    }


def node_agent(namespace: str) -> dict[str, Any]:
    """A DaemonSet on every node, tolerating every taint, as a log or network agent is."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": AGENT, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": AGENT}},
            "template": {
                "metadata": {"labels": {"app": AGENT}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [
                        {
                            "name": "pause",
                            "image": PAUSE_IMAGE,
                            "resources": {"requests": {"cpu": "200m", "memory": "256Mi"}},
                        }
                    ],
                },
            },
        },
    }


def pods_running(
    plane: ControlPlane, namespace: str, expected: int, apps: Iterable[str] = ()
) -> list[dict[str, Any]] | None:
    """The Deployments' pods (``apps``' only if given) when exactly ``expected`` exist, none being
    deleted, all Running."""
    selector = f"app in ({','.join(apps)})" if apps else f"app!={AGENT}"
    pods = get_items(plane, "pods", "-n", namespace, "-l", selector)
    if len(pods) != expected or any(
        pod["metadata"].get("deletionTimestamp") or pod.get("status", {}).get("phase") != "Running"
        for pod in pods
    ):
        return None
    return pods


def architectures(plane: ControlPlane, pods: list[dict[str, Any]]) -> dict[str, set[str]]:
    """The architectures of the nodes each app's pods run on."""
    arch = {
        node["metadata"]["name"]: node["metadata"]["labels"].get(LABEL_ARCH)
        for node in get_items(plane, "nodes")
    }
    found: dict[str, set[str]] = {}
    for pod in pods:
        found.setdefault(pod["metadata"]["labels"]["app"], set()).add(str(arch.get(pod["spec"]["nodeName"])))
    return found


def on_proposed_pools(
    plane: ControlPlane, namespace: str, pools: Container[str], expected: int, apps: Iterable[str] = ()
) -> list[dict[str, Any]] | None:
    """:func:`pods_running`, once each of those pods is on a node of one of ``pools``."""
    found = pods_running(plane, namespace, expected, apps)
    if found is None:
        return None
    pool_of = {
        node["metadata"]["name"]: node["metadata"]["labels"].get(LABEL_NODEPOOL)
        for node in get_items(plane, "nodes")
    }
    return found if all(pool_of.get(pod["spec"]["nodeName"]) in pools for pod in found) else None


def drain(plane: ControlPlane, nodes: list[str]) -> None:
    """``kubectl drain``: each pod evicted, as the PodDisruptionBudgets allow."""
    plane.kubectl("drain", *nodes, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=50s")


def nodes_ready(plane: ControlPlane, names: list[str]) -> bool:
    nodes = {node["metadata"]["name"]: node for node in get_items(plane, "nodes")}
    for name in names:
        node = nodes.get(name)
        if node is None:
            return False
        conditions = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions") or ()}
        taints = [t["key"] for t in node["spec"].get("taints") or ()]
        if conditions.get("Ready") != "True" or "node.kubernetes.io/not-ready" in taints:
            return False
    return True


def plan_migration(kubeconfig: Path, manifests_dir: Path) -> dict[str, Any]:
    return karpy_json(kubeconfig, "plan", "--from-cluster-autoscaler", "--manifests-dir", str(manifests_dir))


@pytest.fixture
def ca_cluster(crds: ControlPlane) -> Iterator[ControlPlane]:
    """The node groups' Nodes, Ready; deleted at the end if the test has not.

    Nodes another module left on the shared control plane are cordoned meanwhile: the pods are to
    start on the node groups alone, as in a cluster of Cluster Autoscaler's.
    """
    others = [
        node["metadata"]["name"]
        for node in get_items(crds, "nodes")
        if not node.get("spec", {}).get("unschedulable") and node["metadata"]["name"] not in CA_NODES
    ]
    if others:
        crds.kubectl("cordon", *others)
    crds.kubectl("apply", "-f", "-", stdin=as_yaml(*ca_nodes()))
    try:
        wait_until(lambda: nodes_ready(crds, CA_NODES), timeout=60, what="the node groups' Nodes Ready")
        yield crds
    finally:
        crds.kubectl("delete", "node", *CA_NODES, "--ignore-not-found", "--wait=false")
        still = {node["metadata"]["name"] for node in get_items(crds, "nodes")}
        if [name for name in others if name in still]:
            crds.kubectl("uncordon", *[name for name in others if name in still])


def test_the_proposed_nodepools_applied_under_karpy_run_take_every_pod_off_the_node_groups(
    ca_cluster: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    plane = ca_cluster
    apps = workloads(namespace)
    total = sum(replicas for _, replicas in apps.values())
    # The agent, the arm and the zonal pods first: the arm node has then no room left for a web pod,
    # and no web pod takes the room in us-east-1b the zonal pods need.
    first = ("arm", "zonal")
    plane.kubectl("apply", "-f", "-", stdin=as_yaml(node_agent(namespace), *(apps[app][0] for app in first)))
    wait_until(
        lambda: pods_running(plane, namespace, sum(apps[app][1] for app in first)),
        timeout=60,
        what="the arm and zonal pods",
    )
    plane.kubectl("apply", "-f", "-", stdin=as_yaml(*(manifest for manifest, _ in apps.values())))
    pods = wait_until(
        lambda: pods_running(plane, namespace, total), timeout=90, what="pods on the node groups"
    )
    assert {pod["spec"]["nodeName"] for pod in pods} <= set(CA_NODES)
    arch_before = architectures(plane, pods)
    assert arch_before["web"] == arch_before["zonal"] == {"amd64"}, arch_before

    manifests_dir = tmp_path / "proposal"
    planned = plan_migration(plane.kubeconfig, manifests_dir)
    print("\nplan notes:\n" + "\n".join(planned["notes"]))
    pools = {m["metadata"]["name"]: m for m in planned["manifests"] if m["kind"] == "NodePool"}
    node_classes = [m for m in planned["manifests"] if m["kind"] == "KWOKNodeClass"]
    assert len(node_classes) == 1, planned["manifests"]
    # general's pods ask for no architecture: its pool is amd64's, apart from arm's and weighed first.
    assert sorted(pools) == ["default", "it-ca-arm", "it-ca-batch"], sorted(pools)
    assert (
        pools["default"]["metadata"]["annotations"]["karpy.dev/migrated-from-node-groups"] == "it-ca-general"
    )
    assert pools["default"]["spec"]["weight"] > pools["it-ca-arm"]["spec"].get("weight", 0)
    # The tainted group has its own pool, with its taint and the label its pods select on.
    batch = pools["it-ca-batch"]["spec"]["template"]
    assert batch["spec"]["taints"] == [BATCH_TAINT]
    assert batch["metadata"]["labels"] == {"workload": "batch", EKS_CAPACITY_TYPE: "SPOT"}
    written = sorted(path.name for path in manifests_dir.iterdir())
    assert len(written) == len(planned["manifests"]), written
    predicted = planned["karpy"]
    assert predicted["pods"] == total and predicted["podsPending"] == 0, predicted
    print(f"predicted under the proposed NodePools: {predicted}")

    with running_karpy(plane, pools=list(pools)):
        plane.kubectl("apply", "-f", str(manifests_dir))
        drained_at = time.monotonic()
        plane.kubectl("cordon", *CA_NODES)
        # One node group after the other, as a migration goes: the general group's pods first, with
        # no arm64 node of karpy's yet that kube-scheduler could put them on while it has room.
        general = GROUPS[0]
        assert general.name == "it-ca-general"
        moved = ("web", "zonal")
        drain(plane, general.node_names())
        wait_until(
            lambda: on_proposed_pools(plane, namespace, pools, sum(apps[app][1] for app in moved), moved),
            timeout=REPLACED_WITHIN,
            what="the general group's pods Running on a proposed NodePool",
        )
        drain(plane, [name for name in CA_NODES if name not in general.node_names()])
        plane.kubectl("delete", "node", *CA_NODES)
        pods = wait_until(
            lambda: on_proposed_pools(plane, namespace, pools, total),
            timeout=REPLACED_WITHIN,
            what="every pod Running on a proposed NodePool",
        )
        print(
            f"every pod Running on a proposed NodePool {time.monotonic() - drained_at:.1f}s"
            " after the drains began"
        )
        claims = [claim for pool in pools for claim in pool_claims(plane, pool).values()]
        prices = catalog_prices()
        offerings = launched(claims)
        price = sum(prices[offering] for offering in offerings)
        print(f"karpy run launched {len(claims)} nodes, ${price:.4f}/h: {sorted(offerings)}")
        # Each pod is on a node of the pool its placement needs.
        node_pool = {
            node["metadata"]["name"]: node["metadata"]["labels"].get(LABEL_NODEPOOL)
            for node in get_items(plane, "nodes")
        }
        for pod in pods:
            if pod["metadata"]["labels"]["app"] == "batch":
                assert node_pool[pod["spec"]["nodeName"]] == "it-ca-batch"
        # And on the architecture it ran on: Kubernetes does not show which an image has, so a
        # pod that ran on amd64 only is not moved to arm64 (nor the other way) by the migration.
        assert architectures(plane, pods) == arch_before
        # Same range as predicted: the plan's run sees every pod pending at once, ``karpy run`` those
        # the drains evict group after group and node after node, which it may launch for in more
        # batches (one node more per pool), and kube-scheduler binds to whichever new node is Ready
        # first, which can leave a pod for one node more; consolidation, a minute later, would
        # merge them.
        assert predicted["nodes"] <= len(claims) <= predicted["nodes"] + len(pools), (predicted, offerings)
        assert predicted["pricePerHour"] * 0.9 <= price <= predicted["pricePerHour"] * 1.5, (
            predicted,
            price,
        )
        plane.kubectl("delete", "deployment", *apps, "-n", namespace, "--wait=false")
        plane.kubectl("delete", "daemonset", AGENT, "-n", namespace, "--wait=false")
