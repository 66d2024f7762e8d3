"""Pods evicted while a budget holds consolidation to one node per pass go to the nodes that stay.

300 pods of 1 CPU scaled down to 60 leave seven large spot nodes; the
default budget (10%) lets one go per pass. kube-scheduler's default profile
(least allocated first) used to send each drained node's pods to the
emptiest nodes left: the next ones consolidation removed, so the same pods
moved again (92 evictions where 51 pods had to move). The nodes a plan will
remove later are now tainted ``karpy.dev/consolidation-planned:PreferNoSchedule``,
which kube-scheduler (and the simulator's stand-in, see
``tests/sim/test_kube_scheduler.py``) scores below the others.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from benchmarks.convergence import Result, load, measure

from karpy.api.core import Node, Pod
from karpy.api.taints import CONSOLIDATION_PLANNED_TAINT_KEY
from karpy.disruption.consolidation import ConsolidationRules
from karpy.sim.scenario import load_inputs
from karpy.sim.simulation import Simulation, SimulationSettings

SCENARIO = "scale-down-300-60"


def marked(node: Node | None) -> bool:
    return node is not None and any(taint.key == CONSOLIDATION_PLANNED_TAINT_KEY for taint in node.taints)


class Watcher:
    """Which nodes were ever marked, and how many pods were bound to a node while it was."""

    def __init__(self, simulation: Simulation) -> None:
        self.simulation = simulation
        self.marked_nodes: set[str] = set()
        self.bound = 0
        self.bound_to_marked = 0

    def __call__(self, kind: str, old: object | None, new: object | None) -> None:
        if isinstance(new, Node) and marked(new):
            self.marked_nodes.add(new.name)
        if isinstance(new, Pod) and new.node_name and isinstance(old, Pod) and not old.node_name:
            self.bound += 1
            self.bound_to_marked += marked(self.simulation.cluster.node(new.node_name))


def run(rules: ConsolidationRules) -> tuple[Result, Simulation, Watcher]:
    scenario = load(SCENARIO)
    simulation = Simulation(SimulationSettings(consolidation=rules))
    watcher = Watcher(simulation)
    simulation.cluster.subscribe(watcher)
    simulation.run_scenario(scenario)
    assert not simulation.runtime.errors
    return measure(scenario, simulation, "karpy", 0.0), simulation, watcher


def test_evicted_pods_avoid_the_nodes_planned_to_go_next() -> None:
    with_marks, simulation, watcher = run(ConsolidationRules())
    without_marks, _, unmarked = run(dataclasses.replace(ConsolidationRules(), mark_planned=False))

    assert with_marks.eviction_ratio is not None and with_marks.eviction_ratio <= 1.5
    assert with_marks.evicted_since_last_change < without_marks.evicted_since_last_change
    # Fewer evictions, not a dearer fleet: both end at the fresh plan's price.
    assert with_marks.end_cost_per_hour <= without_marks.end_cost_per_hour + 1e-9
    assert with_marks.cost_ratio is not None and with_marks.cost_ratio <= 1.15

    # Nodes were marked while the plan ran, no evicted pod went to one, and no mark is
    # left once the plan is done.
    assert watcher.marked_nodes and watcher.bound > 0
    assert watcher.bound_to_marked == 0
    assert not [node.name for node in simulation.cluster.nodes() if marked(node)]
    assert not unmarked.marked_nodes


def test_the_capacity_a_cut_short_merge_launched_is_not_merged_again_before_its_plan_is_done() -> None:
    """5,000 pods down to 500 on an open pool: merges the budget cuts to two nodes a pass.

    Each such merge launches the capacity for its whole group; until the rest of the group is
    gone the new nodes are nearly empty, the most wasteful of the pool. Taken as the start of
    the next merge they were replaced in turn, pass after pass: 12 replacements every
    5 minutes for the whole hour, the rest of the group never removed. Now the run settles
    with a handful of replacements, the new nodes taking the pods of the nodes planned to go.
    """
    scenario, problems = load_inputs(
        [Path(__file__).parents[2] / "benchmarks/scale-down/scale-down-5000.yaml"]
    )
    assert problems.errors == []
    simulation = Simulation()
    simulation.run_scenario(scenario)
    assert simulation.steady()
    assert simulation.clock.now() - simulation.clock.start < 45 * 60
    launched_by_consolidation = [
        event for event in simulation.cluster.events if event.reason == "DisruptionLaunching"
    ]
    assert len(launched_by_consolidation) <= 10
    # Every node left is one a fresh plan would need: 500 pods of 500m/1Gi, about 90 a node.
    assert len(simulation.nodeclaims()) <= 7
