"""``karpy run`` with a NodeOverlay on a real control plane, with the NodeOverlay feature gate.

A NodePool of c5.large (2 vCPU) and c5.4xlarge (16 vCPU), on-demand, and four
pods of 1.5 CPU: at list price four c5.large cost half of one c5.4xlarge. A
NodeOverlay prices the c5.4xlarge of that pool at $0.05/h, so karpy launches
one c5.4xlarge for the four pods, its NodeClaim carries Karpenter's
``karpenter.sh/price-overlay-applied`` annotation, and the overlay's
``ValidationSucceeded`` condition (written through the status subresource of
the CRD ``karpy crds`` installs) is True.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from karpy.run import RunSettings

from .conftest import ControlPlane, wait_until
from .karpy_run import (
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    as_yaml,
    deployment,
    node_class,
    nodepool,
    pool_claims,
    running_karpy,
    running_pods,
)

pytestmark = pytest.mark.integration

NODEPOOL = "it-overlay"
OVERLAY = "it-overlay-discount"


def node_overlay() -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": OVERLAY},
        "spec": {
            "requirements": [
                {"key": LABEL_NODEPOOL, "operator": "In", "values": [NODEPOOL]},
                {"key": LABEL_INSTANCE_TYPE, "operator": "In", "values": ["c5.4xlarge"]},
            ],
            "price": "0.05",
        },
    }


@pytest.fixture
def overlay(crds: ControlPlane) -> Iterator[None]:
    crds.kubectl("apply", "-f", "-", stdin=as_yaml(node_overlay()))
    yield
    # Cluster-scoped, and the control plane is the session's: leave nothing for the next test.
    crds.kubectl("delete", "nodeoverlay", OVERLAY, "--ignore-not-found", "--wait=false")


def validation(plane: ControlPlane) -> tuple[str, str] | None:
    found = json.loads(plane.kubectl("get", "nodeoverlay", OVERLAY, "-o", "json"))
    for condition in found.get("status", {}).get("conditions", []):
        if condition["type"] == "ValidationSucceeded":
            return condition["status"], condition["reason"]
    return None


def launched_types(plane: ControlPlane) -> list[str]:
    return sorted(
        claim["metadata"]["labels"].get(LABEL_INSTANCE_TYPE, "")
        for claim in pool_claims(plane, NODEPOOL).values()
        if not claim["metadata"].get("deletionTimestamp")
    )


def test_an_overlaid_price_changes_what_is_launched(
    crds: ControlPlane, overlay: None, namespace: str
) -> None:
    plane = crds
    plane.kubectl(
        "apply",
        "-f",
        "-",
        stdin=as_yaml(node_class(NODEPOOL), nodepool(NODEPOOL, ["c5.large", "c5.4xlarge"])),
    )
    with running_karpy(plane, RunSettings(node_overlays=True), pools=[NODEPOOL]):
        succeeded = ("True", "ValidationSucceeded")
        wait_until(lambda: validation(plane) == succeeded, timeout=60, what="ValidationSucceeded")
        plane.kubectl("apply", "-f", "-", stdin=as_yaml(deployment(NODEPOOL, namespace, "app", 4, cpu="1.5")))
        wait_until(lambda: len(running_pods(plane, namespace, "app")) == 4, timeout=120, what="four pods")
        assert launched_types(plane) == ["c5.4xlarge"]
        (claim,) = pool_claims(plane, NODEPOOL).values()
        annotations = claim["metadata"].get("annotations", {})
        assert annotations.get("karpenter.sh/price-overlay-applied") == "true"
        assert "karpenter.sh/capacity-overlay-applied" not in annotations


GPU_POOL = "it-overlay-gpu"
GPU_OVERLAY = "it-overlay-gpu-slices"
GPU = "example.com/gpu"


def gpu_overlay() -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": GPU_OVERLAY},
        "spec": {
            "requirements": [
                {"key": LABEL_NODEPOOL, "operator": "In", "values": [GPU_POOL]},
                {"key": LABEL_INSTANCE_TYPE, "operator": "In", "values": ["c5.large"]},
            ],
            "capacity": {GPU: "2"},
        },
    }


@pytest.fixture
def gpu_slices(crds: ControlPlane) -> Iterator[None]:
    crds.kubectl("apply", "-f", "-", stdin=as_yaml(gpu_overlay()))
    yield
    crds.kubectl("delete", "nodeoverlay", GPU_OVERLAY, "--ignore-not-found", "--wait=false")


def test_a_kwok_node_reports_the_capacity_an_overlay_adds_so_its_pods_bind(
    crds: ControlPlane, gpu_slices: None, namespace: str
) -> None:
    """Two pods of one GPU slice each: the overlay gives c5.large two, so karpy launches one c5.large;
    the real kube-scheduler binds them only if the kwok Node reports the two slices."""
    plane = crds
    plane.kubectl("apply", "-f", "-", stdin=as_yaml(node_class(GPU_POOL), nodepool(GPU_POOL, ["c5.large"])))
    app = deployment(GPU_POOL, namespace, "gpu-app", 2, cpu="100m", memory="128Mi")
    (container,) = app["spec"]["template"]["spec"]["containers"]
    container["resources"]["requests"][GPU] = "1"
    container["resources"]["limits"] = {GPU: "1"}
    with running_karpy(plane, RunSettings(node_overlays=True), pools=[GPU_POOL]):
        wait_until(
            lambda: validation_of(plane, GPU_OVERLAY) == ("True", "ValidationSucceeded"),
            timeout=60,
            what="ValidationSucceeded",
        )
        plane.kubectl("apply", "-f", "-", stdin=as_yaml(app))
        wait_until(lambda: len(running_pods(plane, namespace, "gpu-app")) == 2, timeout=120, what="two pods")
        (claim,) = pool_claims(plane, GPU_POOL).values()
        assert claim["metadata"]["labels"][LABEL_INSTANCE_TYPE] == "c5.large"
        assert claim["metadata"].get("annotations", {}).get("karpenter.sh/capacity-overlay-applied") == "true"
        node = json.loads(plane.kubectl("get", "node", claim["status"]["nodeName"], "-o", "json"))
        assert node["status"]["capacity"][GPU] == "2"
        assert node["status"]["allocatable"][GPU] == "2"


def validation_of(plane: ControlPlane, name: str) -> tuple[str, str] | None:
    found = json.loads(plane.kubectl("get", "nodeoverlay", name, "-o", "json"))
    for condition in found.get("status", {}).get("conditions", []):
        if condition["type"] == "ValidationSucceeded":
            return condition["status"], condition["reason"]
    return None
