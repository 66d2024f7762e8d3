"""Consolidation converges: the three cases where Karpenter's rules leave an expensive fleet.

Each case runs a scenario of ``tests/data/scenarios/convergence`` under
karpy's rules (``ConsolidationRules()``) and compares the price of the fleet
at the end with a fresh plan for the same pods (see
``benchmarks/consolidation_cases.py``, which prints the same figures for
both rule sets). Under Karpenter's rules the three end at 3.47x, 1.78x and
(abandoning the preferred pool) 0.45x of that plan, nodes priced with their
per-node costs (docs/node-cost.md).
"""

from __future__ import annotations

from benchmarks.consolidation_cases import run_case

from karpy.disruption.consolidation import KARPENTER_RULES, ConsolidationRules

TARGET_RATIO = 1.15


def test_a_scaled_down_spot_fleet_shrinks_to_the_fresh_plan() -> None:
    # One c5a.8xlarge spot node holds 6 pods; a c5a.2xlarge spot holds them for a quarter.
    result = run_case("scale-down", ConsolidationRules())
    assert result.ratio <= TARGET_RATIO, result.fleet
    assert all(capacity == "spot" for _, _, capacity in result.fleet)


def test_fragments_left_by_a_spot_shortage_are_merged_once_spot_is_back() -> None:
    # Four small on-demand nodes, launched while spot was refused, are merged into spot
    # nodes (Karpenter's rules replace them one by one: four spot nodes, 1.78x).
    result = run_case("ice-fragments", ConsolidationRules())
    assert result.ratio <= TARGET_RATIO, result.fleet
    assert len(result.fleet) <= 2
    assert all(capacity == "spot" for _, _, capacity in result.fleet)
    # While spot is refused, fragments may merge on on-demand (a replacement that saves
    # 10% is not held back waiting for spot, and with per-node costs two small nodes
    # merged save one node's); then spot: at most four replacements in all, ending on
    # one node at the fresh plan's price, where Karpenter's rules end at 1.78x.
    assert result.replacements <= 4


def test_the_preferred_nodepool_keeps_its_node() -> None:
    result = run_case("weights", ConsolidationRules())
    pools = [pool for pool, _, _ in result.fleet]
    assert "primary" in pools, result.fleet
    assert result.ratio <= TARGET_RATIO


def test_pods_move_back_to_the_preferred_nodepool_once_it_has_room() -> None:
    result = run_case("weights-move-back", ConsolidationRules())
    assert [pool for pool, _, _ in result.fleet] == ["primary", "primary"]
    events = result.simulation.cluster.events
    assert any(
        event.reason == "DisruptionTerminating" and "weight consolidation" in event.message
        for event in events
    )
    # Karpenter leaves them where they are: the move is karpy's.
    karpenter = run_case("weights-move-back", KARPENTER_RULES)
    assert [pool for pool, _, _ in karpenter.fleet] == ["primary", "secondary"]
