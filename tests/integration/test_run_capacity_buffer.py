"""``karpy run`` keeps a CapacityBuffer's room on a real control plane, with the CapacityBuffer feature gate.

A PodTemplate of 1 CPU / 512Mi and a CapacityBuffer of two chunks on a NodePool
of 2-vCPU nodes that consolidates empty nodes at once: two nodes come up for
nothing but the buffer, the buffer's status says so (``replicas``, the
``ReadyForProvisioning`` and ``Provisioning`` conditions, written through the
status subresource of the CRD ``karpy crds`` installs), and the nodes stay.
A consumer of the same shape takes the room (kube-scheduler puts it there at
once) and a third node refills it. The buffer deleted, the nodes that held
only its room go.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from karpy.run import RunSettings

from .conftest import ControlPlane, wait_until
from .karpy_run import (
    LABEL_NODEPOOL,
    PAUSE_IMAGE,
    as_yaml,
    deployment,
    get_items,
    node_class,
    nodepool,
    pool_claims,
    running_karpy,
    running_pods,
)

pytestmark = pytest.mark.integration

NODEPOOL = "it-buffer"
HELD = 20.0  # seconds the room must stay, with consolidateAfter 0s


def template(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": "warm", "namespace": namespace},
        "template": {
            "spec": {
                "nodeSelector": {LABEL_NODEPOOL: NODEPOOL},
                "containers": [
                    {
                        "name": "pause",
                        "image": PAUSE_IMAGE,
                        "resources": {"requests": {"cpu": "1", "memory": "512Mi"}},
                    }
                ],
            }
        },
    }


def capacity_buffer(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling.x-k8s.io/v1beta1",
        "kind": "CapacityBuffer",
        "metadata": {"name": "warm", "namespace": namespace},
        "spec": {"podTemplateRef": {"name": "warm"}, "replicas": 2},
    }


def buffer_status(plane: ControlPlane, namespace: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(
        plane.kubectl("get", "capacitybuffer", "warm", "-n", namespace, "-o", "json")
    )
    status: dict[str, Any] = found.get("status", {})
    return status


def provisioned(plane: ControlPlane, namespace: str) -> bool:
    conditions = {c["type"]: c for c in buffer_status(plane, namespace).get("conditions", [])}
    fits = conditions.get("Provisioning", {})
    return (fits.get("status"), fits.get("reason")) == ("True", "FitsExistingCapacity")


def live_claims(plane: ControlPlane) -> dict[str, dict[str, Any]]:
    return {
        name: claim
        for name, claim in pool_claims(plane, NODEPOOL).items()
        if not claim["metadata"].get("deletionTimestamp")
    }


def initialized(claims: dict[str, dict[str, Any]]) -> int:
    return sum(
        1
        for claim in claims.values()
        if any(
            c["type"] == "Initialized" and c["status"] == "True"
            for c in claim.get("status", {}).get("conditions", [])
        )
    )


def test_a_buffers_room_is_launched_kept_refilled_and_let_go(crds: ControlPlane, namespace: str) -> None:
    plane = crds
    plane.kubectl(
        "apply",
        "-f",
        "-",
        stdin=as_yaml(
            node_class(NODEPOOL),
            nodepool(
                NODEPOOL,
                ["c5.large"],
                consolidation_policy="WhenEmptyOrUnderutilized",
                consolidate_after="0s",
            ),
        ),
    )
    with running_karpy(plane, RunSettings(capacity_buffers=True), pools=[NODEPOOL]):
        plane.kubectl("apply", "-f", "-", stdin=as_yaml(template(namespace), capacity_buffer(namespace)))
        wait_until(lambda: initialized(live_claims(plane)) == 2, timeout=90, what="two nodes for the buffer")
        wait_until(
            lambda: provisioned(plane, namespace), timeout=60, what="Provisioning FitsExistingCapacity"
        )
        status = buffer_status(plane, namespace)
        assert status["replicas"] == 2
        assert status["podTemplateRef"] == {"name": "warm"}
        ready = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
        assert ready["ReadyForProvisioning"] == ("True", "Resolved")
        held = set(live_claims(plane))

        time.sleep(HELD)  # empty nodes with consolidateAfter 0s would be gone by now
        assert set(live_claims(plane)) == held
        assert not [
            node
            for node in get_items(plane, "nodes")
            if any(t["key"] == "karpenter.sh/disrupted" for t in node.get("spec", {}).get("taints", []))
        ]

        plane.kubectl(
            "apply", "-f", "-", stdin=as_yaml(deployment(NODEPOOL, namespace, "consumer", 1, memory="512Mi"))
        )
        (consumer,) = wait_until(
            lambda: running_pods(plane, namespace, "consumer") or None,
            timeout=60,
            what="the consumer Running",
        )
        consumer_claim = next(
            name
            for name, claim in held_claims(plane, held).items()
            if claim["status"]["nodeName"] == consumer["spec"]["nodeName"]
        )
        wait_until(lambda: len(live_claims(plane)) == 3, timeout=60, what="a third node refilling the room")
        wait_until(lambda: initialized(live_claims(plane)) == 3, timeout=90, what="the third node up")
        wait_until(lambda: provisioned(plane, namespace), timeout=60, what="the buffer provisioned again")

        plane.kubectl("delete", "capacitybuffer", "warm", "-n", namespace)
        wait_until(
            lambda: set(live_claims(plane)) == {consumer_claim},
            timeout=90,
            what="the nodes that held only the buffer's room removed",
        )


def held_claims(plane: ControlPlane, names: set[str]) -> dict[str, dict[str, Any]]:
    return {name: claim for name, claim in live_claims(plane).items() if name in names}
