"""``karpy run`` against the real control plane: consolidationPolicy Balanced consolidates by the score.

Two NodePools alike but for their policy each get one node for 14 half-CPU
pods; scaled down to 3, the WhenEmptyOrUnderutilized pool replaces its node
by a smaller one. The Balanced pool keeps its node: the replacement would
save less than half of the pool's cost for all of its disruption (score
0.47 < 0.5), and the disruption controller says so in the node's reason.
A third, Balanced pool whose pods end up one on each of three nodes merges
them: deleting two saves as much of the pool's cost as of its disruption
(score 1). A pass that finds all three pools' nodes underused at once may
try a merge across the pools (each 2xlarge replaced, the merged pool's nodes
too): the Balanced pool's part is scored on its own saving (47%), not on a
share of the whole move's (53%, which once replaced its node), and held
(tests/disruption/test_balanced.py). The simulator's tests (tests/sim/test_balanced_consolidation.py)
run the same workloads.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from karpy.controllers.disruption import DisruptionController
from karpy.disruption.rejection import Rejection, RejectionKind
from karpy.run import Runner

from .conftest import ControlPlane, wait_until
from .karpy_run import (
    LABEL_INSTANCE_TYPE,
    as_yaml,
    condition,
    deployment,
    node_class,
    nodepool,
    pool_claims,
    running_karpy,
    running_pods,
)

pytestmark = pytest.mark.integration

BALANCED = "it-balanced"
EAGER = "it-underutilized"
MERGED = "it-balanced-merge"
SIZES = ["m5.large", "m5.xlarge", "m5.2xlarge"]


@pytest.fixture
def runner(crds: ControlPlane) -> Iterator[tuple[ControlPlane, Runner]]:
    with running_karpy(crds, pools=[BALANCED, EAGER, MERGED]) as running:
        yield crds, running


def manifests(namespace: str) -> str:
    pools: list[dict[str, Any]] = []
    for name, policy, types in (
        (BALANCED, "Balanced", SIZES),
        (EAGER, "WhenEmptyOrUnderutilized", SIZES),
        (MERGED, "Balanced", ["m5.large"]),
    ):
        pools += [
            node_class(name),
            nodepool(name, types, consolidation_policy=policy, consolidate_after="10s"),
            deployment(name, namespace, name, 14 if name != MERGED else 9, cpu="500m", memory="512Mi"),
        ]
    return as_yaml(*pools)


def ready_claims(plane: ControlPlane, pool: str) -> dict[str, str] | None:
    """The pool's NodeClaims by name with their instance types, once every one is Ready."""
    claims = pool_claims(plane, pool)
    if not claims or any(
        condition(claim, "Ready").get("status") != "True" or claim["metadata"].get("deletionTimestamp")
        for claim in claims.values()
    ):
        return None
    return {name: claim["metadata"]["labels"][LABEL_INSTANCE_TYPE] for name, claim in claims.items()}


def test_a_balanced_pool_consolidates_only_the_moves_that_score_enough(
    runner: tuple[ControlPlane, Runner], namespace: str
) -> None:
    plane, karpy = runner
    plane.kubectl("apply", "-f", "-", stdin=manifests(namespace))

    def all_running() -> bool:
        counts = [len(running_pods(plane, namespace, pool)) for pool in (BALANCED, EAGER, MERGED)]
        return counts == [14, 14, 9]

    wait_until(all_running, timeout=180, what="every pod Running")

    def every_pool_ready() -> dict[str, dict[str, str]] | None:
        ready: dict[str, dict[str, str]] = {}
        for pool in (BALANCED, EAGER, MERGED):
            claims = ready_claims(plane, pool)
            if claims is None:
                return None
            ready[pool] = claims
        return ready

    before = wait_until(every_pool_ready, timeout=60, what="every NodeClaim Ready")
    assert list(before[BALANCED].values()) == ["m5.2xlarge"] == list(before[EAGER].values())
    assert len(before[MERGED]) == 3
    for pool in (BALANCED, EAGER, MERGED):
        plane.kubectl("scale", "deployment", pool, "-n", namespace, "--replicas=3")
    disruption = karpy.runtime._controllers[DisruptionController.name]
    assert isinstance(disruption, DisruptionController)
    seen: list[str] = []

    def note_decisions() -> None:
        """What disruption decided, and why the Balanced node stays: a failure says it."""
        for held in (disruption.orchestrator.pending, disruption.orchestrator.in_flight):
            if held is not None and held.command.description not in seen:
                seen.append(held.command.description)
        for name, why in disruption.unconsolidatable.items():
            if name.startswith(BALANCED) and why.message not in seen:
                seen.append(why.message)

    def eager_replaced() -> bool:
        note_decisions()
        claims = ready_claims(plane, EAGER)
        return claims is not None and list(claims.values()) == ["m5.large"]

    # The eager pool's node is replaced by a smaller one; the merged pool keeps one node of three.
    wait_until(eager_replaced, timeout=180, what=f"{EAGER}'s node replaced by an m5.large")

    def merged() -> bool:
        note_decisions()
        claims = ready_claims(plane, MERGED)
        return claims is not None and len(claims) == 1

    wait_until(merged, timeout=180, what=f"{MERGED} merged onto one node")
    # The Balanced pool's node stays, and the reason is its score.
    [balanced_claim] = before[BALANCED]

    def reason_told() -> Rejection | None:
        assert ready_claims(plane, BALANCED) == before[BALANCED], "\n".join(seen)
        return disruption.unconsolidatable.get(balanced_claim)

    reason = wait_until(reason_told, timeout=60, what=f"the reason {BALANCED}'s node stays")
    assert reason.kind is RejectionKind.BALANCED_SCORE_TOO_LOW, reason
    assert ready_claims(plane, BALANCED) == before[BALANCED]
    for pool in (BALANCED, EAGER, MERGED):
        assert len(running_pods(plane, namespace, pool)) == 3
