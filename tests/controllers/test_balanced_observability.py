"""Balanced consolidation as Karpenter v1.15 tells it: moves counted and scored, approvals in Events.

Each move consolidation works out is counted per NodePool in
``karpenter_consolidation_moves_total{decision,nodepool,policy}``; a Balanced
pool's score is observed in ``karpenter_consolidation_score``; an approved
Balanced move gets a ``ConsolidationApproved`` Event (on the Node and
NodeClaim for a single node, on the NodePool for a multi-node move) whose
message is Karpenter's; a rejected one gets none. Driven in the simulator,
read back as Prometheus text.
"""

from __future__ import annotations

import re

import pytest
from tests.prometheus_text import parse
from tests.support import KWOK_NODE_CLASS, deployment_manifest, kwok_nodepool, load_objects

from karpy.controllers.disruption import CONSOLIDATION_APPROVED
from karpy.operator.karpenter_metrics import Metrics
from karpy.sim.simulation import Simulation

ON_DEMAND = "        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}\n"
APPROVAL = re.compile(
    r"score (\d+\.\d\d|inf) >= threshold 0\.50 \(k: 2, savings \d+\.\d%, disruption \d+\.\d%\)"
)


def scaled_down(policy: str, types: tuple[str, ...], replicas: int) -> tuple[Simulation, Metrics]:
    """A pool of ``types`` under ``policy`` for ``replicas`` half-CPU pods, scaled down to 3."""
    metrics = Metrics()
    simulation = Simulation(metrics=metrics)
    pool = kwok_nodepool(
        disruption=f"consolidationPolicy: {policy}, consolidateAfter: 30s", instance_types=types
    ).replace("      requirements:\n", "      requirements:\n" + ON_DEMAND)
    simulation.apply(load_objects(KWOK_NODE_CLASS, pool, deployment_manifest(replicas=replicas, cpu="500m")))
    simulation.run(600)
    simulation.apply(load_objects(deployment_manifest(replicas=3, cpu="500m")))
    simulation.run(1800)
    assert simulation.runtime.errors == []
    assert sum(1 for pod in simulation.pods() if pod.phase == "Running") == 3
    return simulation, metrics


def approvals(simulation: Simulation) -> list[tuple[str, str, str]]:
    return [
        (event.kind, event.name, event.message)
        for event in simulation.cluster.events
        if event.reason == CONSOLIDATION_APPROVED
    ]


def test_a_rejected_balanced_move_is_counted_and_scored_but_told_in_no_event() -> None:
    simulation, metrics = scaled_down("Balanced", ("m5.large", "m5.xlarge", "m5.2xlarge"), 14)
    assert [claim.instance_type for claim in simulation.nodeclaims()] == ["m5.2xlarge"]
    exposition = parse(metrics.registry.exposition())
    labels = {"decision": "rejected", "nodepool": "default", "policy": "Balanced"}
    assert exposition.value("karpenter_consolidation_moves_total", **labels) >= 1
    count = exposition.value("karpenter_consolidation_score_count", **labels)
    assert count == exposition.value("karpenter_consolidation_moves_total", **labels)
    # Each one scored 0.47: below the 0.5 bucket, above 0.33.
    assert exposition.value("karpenter_consolidation_score_sum", **labels) / count == pytest.approx(
        0.473, abs=1e-3
    )
    assert exposition.value("karpenter_consolidation_score_bucket", **labels, le="0.5") == count
    assert exposition.value("karpenter_consolidation_score_bucket", **labels, le="0.33") == 0
    assert not any(
        sample == "karpenter_consolidation_moves_total" and ("decision", "approved") in series
        for sample, series in exposition.samples
    )
    assert approvals(simulation) == []


def test_an_approved_balanced_move_is_told_in_karpenters_event() -> None:
    simulation, metrics = scaled_down("Balanced", ("m5.large",), 9)
    assert len(simulation.nodeclaims()) == 1
    exposition = parse(metrics.registry.exposition())
    labels = {"decision": "approved", "nodepool": "default", "policy": "Balanced"}
    assert exposition.value("karpenter_consolidation_moves_total", **labels) >= 1
    assert exposition.value("karpenter_consolidation_score_count", **labels) >= 1
    told = approvals(simulation)
    assert told and all(APPROVAL.fullmatch(message) for _, _, message in told)
    # A single node's approval is on its NodeClaim and Node, a multi-node move's on the NodePool.
    kinds = {kind for kind, _, _ in told}
    assert kinds <= {"Node", "NodeClaim", "NodePool"}
    assert ("NodeClaim" in kinds) == ("Node" in kinds)


def test_moves_of_other_policies_are_counted_approved_and_never_scored() -> None:
    simulation, metrics = scaled_down("WhenEmptyOrUnderutilized", ("m5.large", "m5.xlarge", "m5.2xlarge"), 14)
    assert [claim.instance_type for claim in simulation.nodeclaims()] == ["m5.large"]
    exposition = parse(metrics.registry.exposition())
    labels = {"decision": "approved", "nodepool": "default", "policy": "WhenEmptyOrUnderutilized"}
    assert exposition.value("karpenter_consolidation_moves_total", **labels) >= 1
    assert not any(sample.startswith("karpenter_consolidation_score_") for sample, _ in exposition.samples)
    assert approvals(simulation) == []
