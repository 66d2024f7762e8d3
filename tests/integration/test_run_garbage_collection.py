"""Garbage collection under ``karpy run`` with the kwok provider, against the real control plane.

Two leaks that end, as with Karpenter: a NodeClaim deleted with its finalizer
stripped leaves its instance (a kwok Node) behind; the Node, owned by its
NodeClaim since registration, goes with it (Kubernetes' garbage collector
deletes it and karpy lifts its finalizer, no NodeClaim being left to drain it)
and its pods run again on a node a NodeClaim owns; a registered NodeClaim whose
``status.providerID`` names no instance is deleted. (Before, no collector ran for kwok, and the
kwok provider's instances carried no creation time: both stayed for good.)
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from karpy.controllers.garbagecollection import FIRST_INTERVAL, INSTANCE_GRACE

from .conftest import ControlPlane, wait_until
from .karpy_run import (
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

POOL = "it-gc"
# The window, a pass, and the time pods take to be replaced (kube-controller-manager's
# pod garbage collector removes the pods of a deleted Node after its 40 s quarantine).
COLLECTED_WITHIN = INSTANCE_GRACE + FIRST_INTERVAL + 30


@pytest.fixture
def runner(crds: ControlPlane) -> Iterator[ControlPlane]:
    with running_karpy(crds, pools=[POOL]):
        yield crds


def _apply(plane: ControlPlane, namespace: str, app: str) -> None:
    plane.kubectl(
        "apply",
        "-f",
        "-",
        stdin=as_yaml(
            node_class(POOL),
            nodepool(
                POOL, ["c5.large"], consolidation_policy="WhenEmptyOrUnderutilized", consolidate_after="0s"
            ),
            deployment(POOL, namespace, app, 1),
        ),
    )
    wait_until(lambda: len(running_pods(plane, namespace, app)) == 1, timeout=60, what="the pod Running")


def _node_names(plane: ControlPlane) -> set[str]:
    return {node["metadata"]["name"] for node in get_items(plane, "nodes")}


def test_the_node_of_a_nodeclaim_deleted_without_its_finalizer_is_collected(
    runner: ControlPlane, namespace: str
) -> None:
    plane = runner
    app = "gc-orphan"
    _apply(plane, namespace, app)
    (pod,) = running_pods(plane, namespace, app)
    orphan = pod["spec"]["nodeName"]
    (claim,) = pool_claims(plane, POOL)

    # Somebody strips the NodeClaim's finalizer and deletes it: no termination runs.
    plane.kubectl("patch", "nodeclaim", claim, "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
    plane.kubectl("delete", "nodeclaim", claim, "--wait=false")
    wait_until(lambda: claim not in pool_claims(plane, POOL), timeout=15, what="the NodeClaim gone")

    def collected_and_replaced() -> bool:
        pods = running_pods(plane, namespace, app)
        owned = {claim.get("status", {}).get("nodeName") for claim in pool_claims(plane, POOL).values()}
        return (
            orphan not in _node_names(plane)
            and len(pods) == 1
            and pods[0]["spec"]["nodeName"] != orphan
            and pods[0]["spec"]["nodeName"] in owned
        )

    wait_until(
        collected_and_replaced,
        timeout=COLLECTED_WITHIN + 60,
        what="the orphaned node collected and the pod running on a node a NodeClaim owns",
    )


def test_a_registered_nodeclaim_whose_provider_id_names_no_instance_is_collected(
    runner: ControlPlane, namespace: str
) -> None:
    plane = runner
    app = "gc-bogus"
    _apply(plane, namespace, app)
    (claim,) = pool_claims(plane, POOL)
    wait_until(
        lambda: any(
            c["type"] == "Registered" and c["status"] == "True"
            for c in pool_claims(plane, POOL)[claim]["status"].get("conditions", ())
        ),
        timeout=30,
        what="the NodeClaim registered",
    )
    plane.kubectl(
        "patch",
        "nodeclaim",
        claim,
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status":{"providerID":"kwok://no-such-instance"}}',
    )
    wait_until(
        lambda: claim not in pool_claims(plane, POOL),
        timeout=FIRST_INTERVAL + 30,
        what="the NodeClaim with a provider ID no instance has deleted",
    )
    events = get_items(plane, "events", "-A", "--field-selector", f"involvedObject.name={claim}")
    assert any(event["reason"] == "GarbageCollected" for event in events)
    wait_until(
        lambda: (
            len(running_pods(plane, namespace, app)) == 1
            and claim not in _node_names(plane)
            and len(pool_claims(plane, POOL)) == 1
        ),
        timeout=COLLECTED_WITHIN + 60,
        what="its node gone too and the pod running on a new node",
    )
