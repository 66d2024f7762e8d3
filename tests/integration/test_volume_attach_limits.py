"""``karpy run`` counts volume attach limits, on the real control plane (Karpenter v1.15).

A node of the pool is up, and its CSINode says it can attach two EBS volumes
(``ebs.csi.aws.com``, ``allocatable.count: 2``). Five small pods then come,
each mounting a persistent volume of that driver (a PersistentVolume bound
to its claim, as one the driver made). They all fit the node's CPU and
memory; kube-scheduler puts two there and leaves three pending ("exceed max
volume count"). karpy counts the node's volumes as kube-scheduler does and
launches a node for the other three; counting only CPU and memory, it saw
room for them on the node and launched nothing, leaving them pending.

And a CSINode changed alone has consolidation look again: two nodes, each at
its limit of two volumes, cannot take each other's pods; once the first
node's CSINode allows 25, the second's pods fit there and the second node is
consolidated away within moments. Before, consolidation answered from its last
pass while no pod, node or NodeClaim changed, for up to five minutes (the Nodes'
status is reported every five minutes here, as a kubelet reports it).
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import FAKE_KUBELET_AGENT, ControlPlane, running_control_plane, wait_until
from .karpy_run import (
    LABEL_NODEPOOL,
    PAUSE_IMAGE,
    NodeClaimWatch,
    as_yaml,
    deployment,
    get_items,
    node_class,
    nodepool,
    running_karpy,
    running_pods,
)

pytestmark = pytest.mark.integration

POOL = "it-volumes"
DRIVER = "ebs.csi.aws.com"
VOLUMES = 5
LIMIT = 2


# Node status reported as often as a kubelet reports it when nothing changed (nodeStatusReportFrequency,
# 5 minutes; the fake kubelet's default is 1 minute): a report changes every Node's resourceVersion,
# which would end consolidation's quiet pass by itself.
KUBELET_AGENT = dataclasses.replace(
    FAKE_KUBELET_AGENT,
    command=lambda kubeconfig: [*FAKE_KUBELET_AGENT.command(kubeconfig), "--status-report-interval", "300"],
)


@pytest.fixture(scope="module")
def control_plane(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[ControlPlane]:
    """This module's own control plane, its Nodes' status reported every 5 minutes."""
    with running_control_plane(tmp_path_factory, pytestconfig, KUBELET_AGENT) as plane:
        yield plane


@pytest.fixture
def runner(crds: ControlPlane) -> Iterator[ControlPlane]:
    with running_karpy(crds, pools=[POOL]):
        yield crds


def pool_nodes(plane: ControlPlane) -> list[str]:
    return [node["metadata"]["name"] for node in get_items(plane, "nodes", "-l", f"{LABEL_NODEPOOL}={POOL}")]


def csi_node(name: str, count: int) -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {"name": name, "labels": {LABEL_NODEPOOL: POOL}},
        "spec": {"drivers": [{"name": DRIVER, "nodeID": name, "allocatable": {"count": count}}]},
    }


def volume(namespace: str, index: int) -> list[dict[str, Any]]:
    """A PersistentVolume of the driver and the claim bound to it."""
    name = f"{namespace}-data-{index}"
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": name},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "",
                "csi": {"driver": DRIVER, "volumeHandle": f"vol-{name}"},
                "claimRef": {"namespace": namespace, "name": f"data-{index}"},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": f"data-{index}", "namespace": namespace},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "",
                "volumeName": name,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    ]


def pod(namespace: str, index: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"db-{index}", "namespace": namespace, "labels": {"app": "db"}},
        "spec": pod_spec(index),
    }


def db_deployment(namespace: str, index: int) -> dict[str, Any]:
    """One replica mounting ``data-<index>``: a pod consolidation may move."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": f"db-{index}", "namespace": namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "db", "index": str(index)}},
            "template": {"metadata": {"labels": {"app": "db", "index": str(index)}}, "spec": pod_spec(index)},
        },
    }


def pod_spec(index: int) -> dict[str, Any]:
    return {
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": {LABEL_NODEPOOL: POOL},
        "containers": [
            {
                "name": "pause",
                "image": PAUSE_IMAGE,
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }
        ],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": f"data-{index}"}}],
    }


def test_pods_a_node_cannot_attach_the_volumes_of_get_a_node_of_their_own(
    runner: ControlPlane, namespace: str
) -> None:
    plane = runner
    with NodeClaimWatch(plane, POOL) as watch:
        plane.kubectl(
            "apply",
            "-f",
            "-",
            stdin=as_yaml(
                node_class(POOL), nodepool(POOL, ["m5.2xlarge"]), deployment(POOL, namespace, "first", 1)
            ),
        )
        (first,) = wait_until(
            lambda: running_pods(plane, namespace, "first") or None, timeout=90, what="a node"
        )
        node = first["spec"]["nodeName"]
        plane.kubectl("apply", "-f", "-", stdin=as_yaml(csi_node(node, LIMIT)))
        volumes = [obj for index in range(VOLUMES) for obj in volume(namespace, index)]
        plane.kubectl("apply", "-f", "-", stdin=as_yaml(*volumes))
        wait_until(
            lambda: (
                all(
                    claim.get("status", {}).get("phase") == "Bound"
                    for claim in get_items(plane, "pvc", "-n", namespace)
                )
                or None
            ),
            timeout=60,
            what="the claims bound",
        )
        plane.kubectl("apply", "-f", "-", stdin=as_yaml(*(pod(namespace, index) for index in range(VOLUMES))))

        def all_running() -> list[dict[str, Any]] | None:
            pods = running_pods(plane, namespace, "db")
            return pods if len(pods) == VOLUMES else None

        try:
            # The driver's node plugin registers the new node's CSINode (kube-scheduler puts a CSI
            # volume only on a node whose CSINode lists its driver): the test does it here.
            second = wait_until(
                lambda: next((name for name in pool_nodes(plane) if name != node), None),
                timeout=90,
                what="a second node for the pods the first cannot attach the volumes of",
            )
            plane.kubectl("apply", "-f", "-", stdin=as_yaml(csi_node(second, 25)))
            placed = wait_until(all_running, timeout=90, what=f"the {VOLUMES} pods with volumes running")
        finally:
            names = [f"{namespace}-data-{index}" for index in range(VOLUMES)]
            plane.kubectl("delete", "csinodes", "-l", f"{LABEL_NODEPOOL}={POOL}", "--ignore-not-found")
            plane.kubectl("delete", "pv", *names, "--ignore-not-found", "--wait=false")
        timeline = watch.snapshot()
    per_node = Counter(pod["spec"]["nodeName"] for pod in placed)
    assert per_node[node] <= LIMIT
    assert len(per_node) == 2
    assert len(timeline.created) == 2, f"NodeClaims launched: {sorted(timeline.created)}"


def db_running(plane: ControlPlane, namespace: str, count: int) -> list[dict[str, Any]] | None:
    pods = running_pods(plane, namespace, "db")
    return pods if len(pods) == count else None


def test_a_csinode_whose_limit_grows_has_the_node_it_kept_consolidated(
    runner: ControlPlane, namespace: str
) -> None:
    plane = runner
    pods = 2 * LIMIT
    plane.kubectl(
        "apply",
        "-f",
        "-",
        stdin=as_yaml(
            node_class(POOL),
            nodepool(
                POOL, ["m5.2xlarge"], consolidation_policy="WhenEmptyOrUnderutilized", consolidate_after="0s"
            ),
            deployment(POOL, namespace, "first", 1),
        ),
    )
    (first,) = wait_until(lambda: running_pods(plane, namespace, "first") or None, timeout=90, what="a node")
    node = first["spec"]["nodeName"]
    plane.kubectl("apply", "-f", "-", stdin=as_yaml(csi_node(node, LIMIT)))
    plane.kubectl(
        "apply", "-f", "-", stdin=as_yaml(*(obj for i in range(pods) for obj in volume(namespace, i)))
    )
    try:
        plane.kubectl("apply", "-f", "-", stdin=as_yaml(*(db_deployment(namespace, i) for i in range(pods))))
        second = wait_until(
            lambda: next((name for name in pool_nodes(plane) if name != node), None),
            timeout=90,
            what="a second node for the pods the first cannot attach the volumes of",
        )
        plane.kubectl("apply", "-f", "-", stdin=as_yaml(csi_node(second, LIMIT)))
        placed = wait_until(
            lambda: db_running(plane, namespace, pods),
            timeout=90,
            what=f"the {pods} pods with volumes running",
        )
        assert Counter(pod["spec"]["nodeName"] for pod in placed) == {node: LIMIT, second: LIMIT}
        # Neither node can take the other's pods: consolidation works that out and then answers from it.
        time.sleep(30)
        assert sorted(pool_nodes(plane)) == sorted([node, second])
        plane.kubectl("apply", "-f", "-", stdin=as_yaml(csi_node(node, 25)))
        # Within moments (a pass, the 15 s validation, the drain); before, not until the next status
        # report of a Node or the quiet pass's five minutes ran out.
        wait_until(
            lambda: pool_nodes(plane) == [node] or None,
            timeout=90,
            what="the second node consolidated once the first can attach its pods' volumes",
        )
        moved = wait_until(
            lambda: db_running(plane, namespace, pods),
            timeout=90,
            what="the pods running on the first node",
        )
        assert {pod["spec"]["nodeName"] for pod in moved} == {node}
    finally:
        names = [f"{namespace}-data-{index}" for index in range(pods)]
        plane.kubectl("delete", "csinodes", "-l", f"{LABEL_NODEPOOL}={POOL}", "--ignore-not-found")
        plane.kubectl("delete", "pv", *names, "--ignore-not-found", "--wait=false")
