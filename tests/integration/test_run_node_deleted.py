"""``kubectl delete node`` on a node karpy launched, against the real control plane.

The Node carries karpy's ``karpenter.sh/termination`` finalizer, so the API
server only marks it. As in Karpenter v1, karpy deletes its NodeClaim, drains
the node, terminates the instance and lifts the finalizer: the Node and the
NodeClaim are gone, and the pod runs again on a new node. (Before, the Node
stayed Terminating for good, its pod still on it.)
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

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

POOL = "it-node-deleted"


@pytest.fixture
def runner(crds: ControlPlane) -> Iterator[ControlPlane]:
    with running_karpy(crds, pools=[POOL]):
        yield crds


def test_a_deleted_node_is_drained_and_goes_with_its_nodeclaim(runner: ControlPlane, namespace: str) -> None:
    plane = runner
    app = "deleted-node-app"
    plane.kubectl(
        "apply",
        "-f",
        "-",
        stdin=as_yaml(
            node_class(POOL),
            nodepool(POOL, ["c5.large"], consolidate_after="10m"),
            deployment(POOL, namespace, app, 1),
        ),
    )
    wait_until(lambda: len(running_pods(plane, namespace, app)) == 1, timeout=60, what="the pod Running")
    (pod,) = running_pods(plane, namespace, app)
    victim = pod["spec"]["nodeName"]
    (claim,) = pool_claims(plane, POOL)

    plane.kubectl("delete", "node", victim, "--wait=false")

    def replaced() -> bool:
        nodes = {n["metadata"]["name"] for n in get_items(plane, "nodes")}
        pods = running_pods(plane, namespace, app)
        return (
            victim not in nodes
            and claim not in pool_claims(plane, POOL)
            and len(pods) == 1
            and pods[0]["spec"]["nodeName"] != victim
        )

    wait_until(
        replaced, timeout=120, what="the deleted node gone, its NodeClaim gone, the pod running elsewhere"
    )
