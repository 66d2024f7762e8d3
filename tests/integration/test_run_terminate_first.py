"""``karpy run`` with TerminateFirstDrift on the real control plane: a static pool at its node limit rolls.

A static NodePool of two replicas with ``limits.nodes: 2`` cannot stage a
replacement for a drifted node (it would be a third node). With the gate, each
drifted node is deleted first and the static capacity controller launches its
successor once the deletion frees the count; the pool never has more than two
NodeClaims. (Without the gate the nodes stay drifted for ever: the simulator
tests, tests/controllers/test_terminate_first_controller.py and
tests/sim/test_static_nodepools.py, run the same controllers both ways.)
"""

from __future__ import annotations

import pytest

from karpy.run import RunSettings

from .conftest import ControlPlane, wait_until
from .karpy_run import LABEL_GENERATION, as_yaml, node_class, nodepool, pool_claims, running_karpy

pytestmark = pytest.mark.integration

POOL = "it-terminate-first"


def static_pool(generation: int) -> dict[str, object]:
    pool = nodepool(POOL, ["c5.large"], generation=generation, limits={"nodes": "2"})
    spec = pool["spec"]
    assert isinstance(spec, dict)
    spec["replicas"] = 2
    return pool


def test_a_static_pool_at_its_node_limit_rolls_its_drifted_nodes_deleting_first(crds: ControlPlane) -> None:
    plane = crds
    plane.kubectl("apply", "-f", "-", stdin=as_yaml(node_class(POOL), static_pool(1)))
    most = 0

    def claims_of(generation: str) -> set[str]:
        nonlocal most
        claims = pool_claims(plane, POOL)
        most = max(most, len(claims))
        return {
            name
            for name, claim in claims.items()
            if claim["metadata"].get("labels", {}).get(LABEL_GENERATION) == generation
            and claim.get("status", {}).get("nodeName")
        }

    with running_karpy(plane, RunSettings(terminate_first_drift=True), pools=[POOL]):
        first: set[str] = wait_until(
            lambda: claims_of("1") if len(claims_of("1")) == 2 else None, timeout=90, what="two nodes"
        )
        plane.kubectl("apply", "-f", "-", stdin=as_yaml(static_pool(2)))
        wait_until(
            lambda: len(claims_of("2")) == 2 and not claims_of("1"),
            timeout=240,
            interval=1.0,
            what="both nodes rolled to generation 2",
        )
        assert not set(pool_claims(plane, POOL)) & first
        assert most <= 2  # never over limits.nodes: the drifted node went first each time
