"""``karpy run`` against the real control plane: the seed walkthrough, end to end, with kwok nodes.

The runner (:func:`karpy.run.run`) runs in a background thread against the
session's control plane; the real kube-scheduler binds the pods and the fake
kubelet reports them Running, so every step a user would watch happens for
real: pending pods become NodeClaims, the NodeClaims' Nodes register and go
Ready, the pods run; once the Deployment is gone, the empty nodes are removed
after ``consolidateAfter``.

The pods select the test's NodePool by label, so other tests' fake nodes (the
control plane is shared by the session) can never take them. The CRDs are
applied idempotently and left in place, as other modules expect; the NodePool
and node class are deleted at the end.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from tests.test_run_docs import documented_nodes

from .conftest import ControlPlane, wait_until
from .karpy_run import (
    LABEL_ARCH,
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
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

NODEPOOL = "it-run"
APP = "karpenter-test"
INSTANCE_TYPES = ["c5.large", "c5.xlarge", "m5.large", "m5.xlarge"]
CONSOLIDATE_AFTER = 30.0
REPLICAS = 5

MANIFESTS = as_yaml(
    node_class(NODEPOOL),
    nodepool(
        NODEPOOL,
        INSTANCE_TYPES,
        capacity_types=("spot", "on-demand"),
        consolidation_policy="WhenEmptyOrUnderutilized",
        consolidate_after=f"{CONSOLIDATE_AFTER:g}s",
        requirements=[requirement(LABEL_ARCH, "amd64"), requirement(LABEL_OS, "linux")],
    ),
)


@pytest.fixture
def runner(crds: ControlPlane) -> Iterator[ControlPlane]:
    """``karpy run`` in a background thread; the NodePool goes before it stops."""
    with running_karpy(crds, pools=[NODEPOOL]):
        yield crds


def pool_nodeclaims(plane: ControlPlane) -> list[dict[str, Any]]:
    return list(pool_claims(plane, NODEPOOL).values())


def test_pending_pods_get_kwok_nodes_and_empty_nodes_go(runner: ControlPlane, namespace: str) -> None:
    plane = runner
    plane.kubectl("apply", "-f", "-", stdin=MANIFESTS)
    applied = time.monotonic()
    plane.kubectl("apply", "-f", "-", stdin=as_yaml(deployment(NODEPOOL, namespace, APP, REPLICAS)))

    def all_running() -> list[dict[str, Any]] | None:
        pods = get_items(plane, "pods", "-n", namespace, "-l", f"app={APP}")
        running = [
            pod
            for pod in pods
            if pod["spec"].get("nodeName") and pod.get("status", {}).get("phase") == "Running"
        ]
        return running if len(running) == REPLICAS and len(pods) == REPLICAS else None

    pods = wait_until(all_running, timeout=60, what=f"{REPLICAS} pods Running")
    elapsed = time.monotonic() - applied
    print(f"\nDeployment applied -> all {REPLICAS} pods Running: {elapsed:.1f}s")

    def claims_ready() -> list[dict[str, Any]] | None:
        claims = pool_nodeclaims(plane)
        ready = [
            claim
            for claim in claims
            if claim["metadata"].get("labels", {}).get("node.kubernetes.io/instance-type")
            and claim.get("status", {}).get("nodeName")
            and condition(claim, "Ready").get("status") == "True"
        ]
        return claims if claims and len(ready) == len(claims) else None

    claims = wait_until(claims_ready, timeout=60, what="the NodeClaims Ready")
    node_names = {claim["status"]["nodeName"] for claim in claims}
    assert {pod["spec"]["nodeName"] for pod in pods} <= node_names
    nodes = {node["metadata"]["name"]: node for node in get_items(plane, "nodes")}
    for claim in claims:
        node = nodes[claim["status"]["nodeName"]]
        labels = claim["metadata"]["labels"]
        assert node["spec"]["providerID"] == f"kwok://{claim['metadata']['name']}"
        assert (
            node["metadata"]["labels"]["node.kubernetes.io/instance-type"]
            == (labels["node.kubernetes.io/instance-type"])
        )
        assert labels["node.kubernetes.io/instance-type"] in INSTANCE_TYPES
        # The instance type's allocatable, not the fake kubelet's default capacity.
        assert node["status"]["capacity"]["cpu"] in ("2", "4"), node["status"]["capacity"]
        assert node["status"]["allocatable"]["cpu"] != node["status"]["capacity"]["cpu"]
        assert not any(t["key"] == "karpenter.sh/unregistered" for t in node["spec"].get("taints") or ())
    # docs/run.md names the nodes this walkthrough gets; tests/test_run_docs.py checks the simulator's.
    launched = Counter(
        (claim["metadata"]["labels"][LABEL_INSTANCE_TYPE], claim["metadata"]["labels"][LABEL_CAPACITY_TYPE])
        for claim in claims
    )
    assert launched == documented_nodes(), "docs/run.md names other nodes than karpy run launched"
    print(
        "NodeClaims: "
        + ", ".join(
            f"{claim['metadata']['name']} {claim['metadata']['labels']['node.kubernetes.io/instance-type']}"
            f" ({claim['metadata']['labels']['karpenter.sh/capacity-type']})"
            for claim in claims
        )
    )

    plane.kubectl("delete", "deployment", APP, "-n", namespace, "--wait=false")
    deleted = time.monotonic()

    def all_gone() -> bool:
        remaining_nodes = {node["metadata"]["name"] for node in get_items(plane, "nodes")} & node_names
        return not pool_nodeclaims(plane) and not remaining_nodes

    # consolidateAfter, one 15 s re-check, then one node after another as the default
    # budget (one of three) frees up: the nodes held back need no re-check of their own.
    wait_until(all_gone, timeout=CONSOLIDATE_AFTER + 30, interval=1.0, what="the empty nodes removed")
    print(f"Deployment deleted -> NodeClaims and Nodes gone: {time.monotonic() - deleted:.1f}s")
