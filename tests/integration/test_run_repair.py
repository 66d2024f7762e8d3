"""``karpy run`` with the NodeRepair gate on the real control plane: an unhealthy node is replaced.

A NodePool on the KWOKNodeClass, one pod with do-not-disrupt on one node. The
node is given the condition Karpenter's e2e suites inject, ``KWOKUnhealthy``
True (the kwok provider's policy: 30 s toleration, drain bounded at 45 s), with
a strategic-merge patch of its status, as a node problem detector would post
it; the fake kubelet keeps posting Ready, so only repair can act. The node is
replaced first: a new node comes up and the pod runs there, and the old one is
gone once the drain bound forced the pod that do-not-disrupt pins. (Without the
gate nothing is repaired: tests/controllers/test_node_repair.py.)
"""

from __future__ import annotations

import json
import time

import pytest

from karpy.run import RunSettings

from .conftest import ControlPlane, wait_until
from .karpy_run import as_yaml, deployment, get_items, node_class, nodepool, pool_claims, running_karpy

pytestmark = pytest.mark.integration

POOL = "it-repair"
APP = "repair"


def fault(plane: ControlPlane, node: str) -> None:
    condition = {
        "type": "KWOKUnhealthy",
        "status": "True",
        "reason": "Injected",
        "message": "injected repair-eligible fault",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    patch = json.dumps({"status": {"conditions": [condition]}})
    plane.kubectl("patch", "node", node, "--subresource=status", "--type=strategic", "-p", patch)


def pool_nodes(plane: ControlPlane) -> set[str]:
    return {
        claim["status"]["nodeName"]
        for claim in pool_claims(plane, POOL).values()
        if claim.get("status", {}).get("nodeName")
    }


def running_on(plane: ControlPlane, namespace: str) -> str | None:
    pods = get_items(plane, "pods", "-n", namespace, "-l", f"app={APP}")
    running = [p for p in pods if p.get("status", {}).get("phase") == "Running" and p["spec"].get("nodeName")]
    return running[0]["spec"]["nodeName"] if len(running) == 1 == len(pods) else None


def test_an_unhealthy_node_is_replaced_first_and_its_pinned_pod_forced_at_the_drain_bound(
    crds: ControlPlane, namespace: str
) -> None:
    plane = crds
    plane.kubectl("apply", "-f", "-", stdin=as_yaml(node_class(POOL), nodepool(POOL, ["c5.large"])))
    with running_karpy(plane, RunSettings(node_repair=True), pools=[POOL]):
        plane.kubectl(
            "apply", "-f", "-", stdin=as_yaml(deployment(POOL, namespace, APP, 1, do_not_disrupt=True))
        )
        sick = wait_until(lambda: running_on(plane, namespace), timeout=60, what="the pod Running")
        fault(plane, sick)
        faulted = time.monotonic()
        # Replace-first: a second node of the pool exists while the unhealthy one is still there.
        wait_until(
            lambda: len(pool_nodes(plane)) == 2 and sick in pool_nodes(plane),
            timeout=90,
            interval=0.5,
            what="a replacement beside the unhealthy node",
        )
        replaced = time.monotonic()
        moved = wait_until(
            lambda: (on := running_on(plane, namespace)) is not None and on != sick and on,
            timeout=120,
            interval=0.5,
            what="the pod Running on the replacement",
        )
        wait_until(lambda: sick not in pool_nodes(plane), timeout=60, what="the unhealthy node gone")
        print(
            f"\nfault -> replacement launched {replaced - faulted:.1f}s; "
            f"-> pod on {moved} and {sick} gone {time.monotonic() - faulted:.1f}s"
        )
        events = get_items(plane, "events", "-A", "--field-selector", "reason=DisruptionTerminating")
        assert any(event["involvedObject"]["name"] == sick for event in events)
        # The pinned pod would hold its new node's drain for ever once the pool goes: it goes first.
        plane.kubectl("delete", "deployment", APP, "-n", namespace, "--wait=false")
