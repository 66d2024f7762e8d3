"""Consolidation does not churn: it pays for each disruption and leaves new nodes alone.

(i) A steady workload sees no node replaced twice within an hour: a node
consolidation launched is not a candidate before it has served
consolidateAfter, and a replacement must save 10% (see the module docstring
of :mod:`karpy.disruption.consolidation`), so a fleet that has converged is
left alone. (ii) Replicas swinging every 10 minutes cause no more
replacements under karpy's rules than under Karpenter's.
"""

from __future__ import annotations

from benchmarks.consolidation_cases import run_case

from karpy.disruption.consolidation import KARPENTER_RULES, ConsolidationRules

HOUR = 3600.0


def test_a_steady_workload_never_sees_a_node_replaced_twice_in_an_hour() -> None:
    result = run_case("steady", ConsolidationRules())
    simulation = result.simulation
    launched_by_consolidation = {
        event.name
        for event in simulation.cluster.events
        if event.kind == "NodeClaim" and event.reason == "DisruptionLaunching"
    }
    records = simulation.recorder.nodeclaims
    for name in launched_by_consolidation:
        record = records[name]
        if record.deleted_at is not None:
            assert record.deleted_at - record.created_at >= HOUR, f"{name} was replaced within an hour"
    # And after the first hour nothing is replaced at all.
    late = [
        event
        for event in simulation.cluster.events
        if event.reason == "DisruptionLaunching" and event.time - simulation.clock.start > HOUR
    ]
    assert late == []


def test_oscillating_replicas_cause_no_more_replacements_than_under_karpenters_rules() -> None:
    karpy = run_case("oscillating", ConsolidationRules())
    karpenter = run_case("oscillating", KARPENTER_RULES)
    assert karpy.replacements <= karpenter.replacements
    assert all(pod.phase == "Running" for pod in karpy.simulation.pods() if not pod.is_daemonset_pod)
