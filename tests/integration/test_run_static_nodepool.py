"""``karpy run`` keeps a static NodePool at its replicas: ``kubectl scale nodepool`` on the control plane.

The CRD's scale subresource (``spec.replicas``, ``status.nodes``) is what
``kubectl scale`` writes and reads; ``--replicas 3`` gives three Ready nodes,
``--replicas 0`` removes them. Scaling a pool without replicas is refused by
the CRD's transition rule (static and dynamic do not turn into each other).
"""

from __future__ import annotations

import subprocess
import time
from typing import Any

import pytest

from karpy.api.nodepool import STATIC_TRANSITION_MESSAGE

from .conftest import ControlPlane, wait_until
from .karpy_run import as_yaml, condition, get_items, node_class, nodepool, pool_claims, running_karpy

pytestmark = pytest.mark.integration

STATIC = "it-static"
DYNAMIC = "it-static-dynamic"
INSTANCE_TYPES = ["c5.large", "m5.large"]


def ready_pool_nodes(plane: ControlPlane, pool: str) -> list[dict[str, Any]]:
    nodes = get_items(plane, "nodes", "-l", f"karpenter.sh/nodepool={pool}")
    return [node for node in nodes if condition(node, "Ready").get("status") == "True"]


def test_kubectl_scale_nodepool_gives_and_takes_nodes(crds: ControlPlane) -> None:
    plane = crds
    static = nodepool(STATIC, INSTANCE_TYPES)
    static["spec"]["replicas"] = 0
    plane.kubectl(
        "apply", "-f", "-", stdin=as_yaml(node_class(STATIC), static, nodepool(DYNAMIC, INSTANCE_TYPES))
    )
    with running_karpy(plane, pools=[STATIC, DYNAMIC]):
        plane.kubectl("scale", "nodepool", STATIC, "--replicas", "3")
        started = time.monotonic()
        wait_until(lambda: len(ready_pool_nodes(plane, STATIC)) == 3, timeout=90, what="3 Ready nodes")
        print(f"\nkubectl scale nodepool --replicas 3 -> 3 Ready nodes: {time.monotonic() - started:.1f}s")
        assert len(pool_claims(plane, STATIC)) == 3
        # The scale subresource reads status.nodes back.
        wait_until(
            lambda: plane.kubectl("get", "nodepool", STATIC, "-o", "jsonpath={.status.nodes}") == "3",
            timeout=30,
            what="status.nodes 3",
        )
        time.sleep(5)  # nothing more is launched for a pool at its replicas
        assert len(pool_claims(plane, STATIC)) == 3

        refused = subprocess.run(
            [
                plane.kubectl_path,
                "--kubeconfig",
                str(plane.kubeconfig),
                "scale",
                "nodepool",
                DYNAMIC,
                "--replicas",
                "2",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert refused.returncode != 0 and STATIC_TRANSITION_MESSAGE in refused.stderr, refused.stderr

        plane.kubectl("scale", "nodepool", STATIC, "--replicas", "0")
        started = time.monotonic()
        wait_until(
            lambda: (
                not pool_claims(plane, STATIC)
                and not get_items(plane, "nodes", "-l", f"karpenter.sh/nodepool={STATIC}")
            ),
            timeout=90,
            what="the static pool's NodeClaims and Nodes gone",
        )
        print(f"kubectl scale nodepool --replicas 0 -> all gone: {time.monotonic() - started:.1f}s")
        assert pool_claims(plane, DYNAMIC) == {}
