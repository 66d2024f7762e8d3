"""``karpy run`` under the real kwok: the seed walkthrough with kwok, not the fake kubelet, running the nodes.

This module brings up a control plane of its own with ``kwok`` (built from
``sigs.k8s.io/kwok`` by ``scripts/kwok build``) as the node agent in place of
the fake kubelet: kwok manages the Nodes annotated ``kwok.x-k8s.io/node: fake``
that karpy's kwok provider creates, keeps them Ready through their Leases and
runs the pods bound to them. A NodePool, a Deployment of five 1 CPU / 1Gi pods:
the pods run on karpy's nodes; the Deployment deleted, the empty nodes go.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import KWOK_AGENT, ControlPlane, running_control_plane, wait_until
from .karpy_run import (
    LABEL_ARCH,
    LABEL_OS,
    as_yaml,
    condition,
    deployment,
    get_items,
    node_class,
    nodepool,
    pool_claims,
    requirement,
    running_karpy,
)

pytestmark = pytest.mark.integration

NODEPOOL = "it-kwok"
APP = "kwok-walkthrough"
INSTANCE_TYPES = ["c5.large", "c5.xlarge", "m5.large", "m5.xlarge"]
CONSOLIDATE_AFTER = 15.0
REPLICAS = 5


@pytest.fixture(scope="module")
def control_plane(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[ControlPlane]:
    """This module's own control plane, its nodes run by kwok (no fake kubelet on it)."""
    with running_control_plane(tmp_path_factory, pytestconfig, KWOK_AGENT) as plane:
        yield plane


def running_on_ready_nodes(plane: ControlPlane, namespace: str) -> list[dict[str, Any]] | None:
    pods = get_items(plane, "pods", "-n", namespace, "-l", f"app={APP}")
    running = [
        pod
        for pod in pods
        if pod["spec"].get("nodeName")
        and pod.get("status", {}).get("phase") == "Running"
        and condition(pod, "Ready").get("status") == "True"
    ]
    return running if len(running) == REPLICAS == len(pods) else None


def test_kwok_runs_karpys_nodes_and_their_pods(crds: ControlPlane, namespace: str) -> None:
    plane = crds
    plane.kubectl(
        "apply",
        "-f",
        "-",
        stdin=as_yaml(
            node_class(NODEPOOL),
            nodepool(
                NODEPOOL,
                INSTANCE_TYPES,
                capacity_types=("spot", "on-demand"),
                consolidation_policy="WhenEmptyOrUnderutilized",
                consolidate_after=f"{CONSOLIDATE_AFTER:g}s",
                requirements=[requirement(LABEL_ARCH, "amd64"), requirement(LABEL_OS, "linux")],
            ),
        ),
    )
    with running_karpy(plane, pools=[NODEPOOL]):
        applied = time.monotonic()
        plane.kubectl("apply", "-f", "-", stdin=as_yaml(deployment(NODEPOOL, namespace, APP, REPLICAS)))
        pods = wait_until(
            lambda: running_on_ready_nodes(plane, namespace), timeout=60, what=f"{REPLICAS} pods Running"
        )
        print(
            f"\nDeployment applied -> {REPLICAS} pods Running under kwok: {time.monotonic() - applied:.1f}s"
        )

        claims = list(pool_claims(plane, NODEPOOL).values())
        node_names = {
            claim["status"]["nodeName"] for claim in claims if claim.get("status", {}).get("nodeName")
        }
        assert claims and len(node_names) == len(claims)
        assert {pod["spec"]["nodeName"] for pod in pods} <= node_names
        nodes = {node["metadata"]["name"]: node for node in get_items(plane, "nodes")}
        leases = {lease["metadata"]["name"] for lease in get_items(plane, "leases", "-n", "kube-node-lease")}
        for name in node_names:
            node = nodes[name]
            assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
            assert condition(node, "Ready").get("status") == "True"
            # kwok's doing, not the fake kubelet's: the Node heartbeats through its Lease,
            # and kwok kept the capacity karpy registered the Node with.
            assert name in leases, f"no Lease for {name}: kwok does not manage it"
            assert node["status"]["capacity"]["cpu"] in ("2", "4"), node["status"]["capacity"]
        for pod in pods:
            assert pod["status"].get("podIP"), pod["status"]

        plane.kubectl("delete", "deployment", APP, "-n", namespace, "--wait=false")
        deleted = time.monotonic()

        def all_gone() -> bool:
            remaining = {node["metadata"]["name"] for node in get_items(plane, "nodes")} & node_names
            return not pool_claims(plane, NODEPOOL) and not remaining

        wait_until(all_gone, timeout=CONSOLIDATE_AFTER + 45, interval=1.0, what="the empty nodes removed")
        print(
            f"Deployment deleted -> NodeClaims and Nodes gone under kwok: {time.monotonic() - deleted:.1f}s"
        )


def test_a_standalone_nodeclaim_naming_a_karpenter_kwok_type_gets_that_node(crds: ControlPlane) -> None:
    """As Karpenter's StandaloneNodeClaim specs: a KWOKNodeClass offering Karpenter's types."""
    plane = crds
    plane.kubectl(
        "apply",
        "-f",
        "-",
        stdin=as_yaml(
            {
                **node_class("it-karpenter-types"),
                "metadata": {
                    "name": "it-karpenter-types",
                    "annotations": {"karpy.dev/kwok-instance-types": "karpenter"},
                },
            },
            {
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodeClaim",
                "metadata": {"name": "it-standalone", "labels": {"app": "standalone"}},
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.kwok.sh",
                        "kind": "KWOKNodeClass",
                        "name": "it-karpenter-types",
                    },
                    "requirements": [requirement("node.kubernetes.io/instance-type", "c-16x-amd64-linux")],
                },
            },
        ),
    )
    with running_karpy(plane):

        def ready() -> dict[str, Any] | None:
            claims = get_items(plane, "nodeclaims")
            claim = next((c for c in claims if c["metadata"]["name"] == "it-standalone"), None)
            return claim if claim and condition(claim, "Ready").get("status") == "True" else None

        claim = wait_until(ready, timeout=60, what="the standalone NodeClaim Ready")
        node = next(
            n for n in get_items(plane, "nodes") if n["metadata"]["name"] == claim["status"]["nodeName"]
        )
        labels = node["metadata"]["labels"]
        assert labels["node.kubernetes.io/instance-type"] == "c-16x-amd64-linux"
        assert labels["karpenter.kwok.sh/instance-family"] == "c"
        assert labels["karpenter.kwok.sh/instance-cpu"] == "16"
        assert labels["karpenter.kwok.sh/instance-memory"] == "32Gi"
        assert labels["topology.kubernetes.io/zone"].startswith("test-zone-")
        assert node["status"]["capacity"]["cpu"] == "16"
        assert condition(node, "Ready").get("status") == "True"
        plane.kubectl("delete", "nodeclaim", "it-standalone", "--wait=false")
        wait_until(
            lambda: (
                not [c for c in get_items(plane, "nodeclaims") if c["metadata"]["name"] == "it-standalone"]
            ),
            timeout=60,
            what="the standalone NodeClaim gone",
        )
    plane.kubectl("delete", "kwoknodeclass", "it-karpenter-types")
