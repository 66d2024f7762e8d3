"""``karpy run`` against the real control plane: a NodePool karpy cannot read stops nothing else.

A NodePool whose disruption budget has ``schedule: "61 25 32 13 8"`` (no
minute 61, no hour 25) is written straight into etcd, as one stored before
the CRD checked schedules would be. karpy reads the schedule as cron when it
reads the NodePool, so the pool is one it cannot read: it gets
``ValidationSucceeded=False`` naming ``spec.disruption.budgets[0].schedule``,
nothing is launched from it, and it is left out of every disruption pass,
which goes on for the other pools: here a pool whose Deployment is deleted
has its empty nodes removed as usual.

Before the schedule was read with the NodePool, the budget was first read
inside the disruption pass, and the error failed every pass for every pool:
no node was consolidated, drifted or expired while the bad pool existed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import ControlPlane, wait_until
from .karpy_run import (
    as_yaml,
    condition,
    deployment,
    get_items,
    get_object,
    node_class,
    nodepool,
    pool_claims,
    running_karpy,
    store_past_the_crd,
)

pytestmark = pytest.mark.integration

GOOD_POOL = "it-iso-good"
BAD_POOL = "it-iso-bad"
APP = "isolation"
INSTANCE_TYPE = "c5.large"  # 2 vCPU: one 1-CPU pod per node
REPLICAS = 2
CONSOLIDATE_AFTER = 5.0
BAD_SCHEDULE = "61 25 32 13 8"


@pytest.fixture
def runner(crds: ControlPlane) -> Iterator[ControlPlane]:
    with running_karpy(crds, pools=[GOOD_POOL, BAD_POOL]):
        yield crds


def test_a_nodepool_with_a_bad_budget_schedule_fails_validation_and_the_others_go_on(
    runner: ControlPlane, namespace: str
) -> None:
    plane = runner
    bad = nodepool(BAD_POOL, [INSTANCE_TYPE], consolidation_policy="WhenEmptyOrUnderutilized")
    bad["spec"]["disruption"]["consolidateAfter"] = "0s"
    bad["spec"]["disruption"]["budgets"] = [{"nodes": "1", "schedule": BAD_SCHEDULE, "duration": "10m"}]
    plane.kubectl("apply", "-f", "-", stdin=as_yaml(node_class(BAD_POOL), node_class(GOOD_POOL)))
    store_past_the_crd(plane, bad)
    plane.kubectl(
        "apply",
        "-f",
        "-",
        stdin=as_yaml(
            nodepool(
                GOOD_POOL,
                [INSTANCE_TYPE],
                consolidation_policy="WhenEmptyOrUnderutilized",
                consolidate_after=f"{CONSOLIDATE_AFTER:g}s",
            ),
            deployment(GOOD_POOL, namespace, APP, REPLICAS),
        ),
    )

    def validation_failed() -> dict[str, Any] | None:
        found = condition(get_object(plane, "nodepool", BAD_POOL), "ValidationSucceeded")
        return found if found.get("status") == "False" else None

    found = wait_until(validation_failed, timeout=30, what="ValidationSucceeded=False on the bad NodePool")
    print(f"\nValidationSucceeded=False: {found['message']}")
    assert found["reason"] == "NodePoolValidationFailed"
    assert found["message"].startswith("spec.disruption.budgets[0].schedule: "), found
    assert "'61' is out of range 0-59" in found["message"]

    def all_running() -> list[dict[str, Any]] | None:
        pods = get_items(plane, "pods", "-n", namespace, "-l", f"app={APP}")
        running = [pod for pod in pods if pod.get("status", {}).get("phase") == "Running"]
        return running if len(running) == REPLICAS else None

    wait_until(all_running, timeout=60, what=f"{REPLICAS} pods of the good pool Running")
    claims = pool_claims(plane, GOOD_POOL)
    assert len(claims) == REPLICAS
    assert pool_claims(plane, BAD_POOL) == {}

    plane.kubectl("delete", "deployment", APP, "-n", namespace, "--wait=false")
    deleted = time.monotonic()

    def all_gone() -> bool:
        return not pool_claims(plane, GOOD_POOL)

    # consolidateAfter, the 15 s re-check of an empty node, one node after the other.
    wait_until(
        all_gone, timeout=CONSOLIDATE_AFTER + 60, interval=1.0, what="the good pool's empty nodes removed"
    )
    print(f"Deployment deleted -> the good pool's NodeClaims gone: {time.monotonic() - deleted:.1f}s")
    # The bad pool is still there, still reported.
    assert condition(get_object(plane, "nodepool", BAD_POOL), "ValidationSucceeded").get("status") == "False"
