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

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from karpy.run import run

from .conftest import ControlPlane, wait_until

pytestmark = pytest.mark.integration

NODEPOOL = "it-run"
CONSOLIDATE_AFTER = 30.0
REPLICAS = 5

NODE_CLASS_MANIFEST = f"""\
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {{name: {NODEPOOL}}}
"""

NODEPOOL_MANIFEST = f"""\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {NODEPOOL}}}
spec:
  template:
    spec:
      requirements:
        - {{key: kubernetes.io/arch, operator: In, values: ["amd64"]}}
        - {{key: kubernetes.io/os, operator: In, values: ["linux"]}}
        - {{key: karpenter.sh/capacity-type, operator: In, values: ["spot", "on-demand"]}}
        - key: node.kubernetes.io/instance-type
          operator: In
          values: ["c5.large", "c5.xlarge", "m5.large", "m5.xlarge"]
      nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: {NODEPOOL}}}
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: {CONSOLIDATE_AFTER:g}s
"""


def deployment_manifest(namespace: str) -> str:
    return json.dumps(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "karpenter-test", "namespace": namespace},
            "spec": {
                "replicas": REPLICAS,
                "selector": {"matchLabels": {"app": "karpenter-test"}},
                "template": {
                    "metadata": {"labels": {"app": "karpenter-test"}},
                    "spec": {
                        "terminationGracePeriodSeconds": 0,
                        "nodeSelector": {"karpenter.sh/nodepool": NODEPOOL},
                        "containers": [
                            {
                                "name": "pause",
                                "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                            }
                        ],
                    },
                },
            },
        }
    )


@pytest.fixture
def runner(crds: ControlPlane) -> Iterator[ControlPlane]:
    """``karpy.run.run`` in a background thread, stopped (and checked to have stopped) at the end."""
    stop = threading.Event()
    started = threading.Event()
    failures: list[BaseException] = []

    def target() -> None:
        try:
            run(str(crds.kubeconfig), stop=stop, started=started)
        except BaseException as error:  # reported by the test thread
            failures.append(error)

    thread = threading.Thread(target=target, name="karpy-run", daemon=True)
    thread.start()
    try:
        wait_until(lambda: started.is_set() or bool(failures), timeout=60, what="the runner to start")
        assert not failures, f"the runner failed: {failures[0]!r}"
        yield crds
    finally:
        crds.kubectl("delete", "nodepool", NODEPOOL, "--ignore-not-found", "--wait=false")
        crds.kubectl("delete", "kwoknodeclass", NODEPOOL, "--ignore-not-found", "--wait=false")
        stop.set()
        thread.join(30)
        assert not thread.is_alive(), "the runner did not stop"
        assert not failures, f"the runner failed: {failures[0]!r}"


def get_items(plane: ControlPlane, *args: str) -> list[dict[str, Any]]:
    items = json.loads(plane.kubectl("get", *args, "-o", "json"))["items"]
    assert isinstance(items, list)
    return items


def pool_nodeclaims(plane: ControlPlane) -> list[dict[str, Any]]:
    return get_items(plane, "nodeclaims", "-l", f"karpenter.sh/nodepool={NODEPOOL}")


def condition(obj: dict[str, Any], kind: str) -> str:
    for entry in obj.get("status", {}).get("conditions") or ():
        if entry.get("type") == kind:
            return str(entry.get("status"))
    return "Unknown"


def test_pending_pods_get_kwok_nodes_and_empty_nodes_go(runner: ControlPlane, namespace: str) -> None:
    plane = runner
    plane.kubectl("apply", "-f", "-", stdin=NODE_CLASS_MANIFEST)
    plane.kubectl("apply", "-f", "-", stdin=NODEPOOL_MANIFEST)
    applied = time.monotonic()
    plane.kubectl("apply", "-f", "-", stdin=deployment_manifest(namespace))

    def all_running() -> list[dict[str, Any]] | None:
        pods = get_items(plane, "pods", "-n", namespace, "-l", "app=karpenter-test")
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
            and condition(claim, "Ready") == "True"
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
        assert labels["node.kubernetes.io/instance-type"] in (
            "c5.large",
            "c5.xlarge",
            "m5.large",
            "m5.xlarge",
        )
        # The instance type's allocatable, not the fake kubelet's default capacity.
        assert node["status"]["capacity"]["cpu"] in ("2", "4"), node["status"]["capacity"]
        assert node["status"]["allocatable"]["cpu"] != node["status"]["capacity"]["cpu"]
        assert not any(t["key"] == "karpenter.sh/unregistered" for t in node["spec"].get("taints") or ())
    print(
        "NodeClaims: "
        + ", ".join(
            f"{claim['metadata']['name']} {claim['metadata']['labels']['node.kubernetes.io/instance-type']}"
            f" ({claim['metadata']['labels']['karpenter.sh/capacity-type']})"
            for claim in claims
        )
    )

    plane.kubectl("delete", "deployment", "karpenter-test", "-n", namespace, "--wait=false")
    deleted = time.monotonic()

    def all_gone() -> bool:
        remaining_nodes = {node["metadata"]["name"] for node in get_items(plane, "nodes")} & node_names
        return not pool_nodeclaims(plane) and not remaining_nodes

    # consolidateAfter, one 15 s re-check, then one node after another as the default
    # budget (one of three) frees up: the nodes held back need no re-check of their own.
    wait_until(all_gone, timeout=CONSOLIDATE_AFTER + 30, interval=1.0, what="the empty nodes removed")
    print(f"Deployment deleted -> NodeClaims and Nodes gone: {time.monotonic() - deleted:.1f}s")
