"""Convergence: how close consolidation gets to a fresh plan, how fast, and at what disruption.

Each scenario under ``benchmarks/convergence/`` is a Scenario file as a user
would write one (a Scenario, an EC2NodeClass, NodePools, Deployments), run by
the simulator twice: under karpy's consolidation rules
(``ConsolidationRules()``) and under Karpenter v1's (``KARPENTER_RULES``).
The rules are the only difference between the two runs.

Per scenario and rules, the figures are:

- **end cost / fresh plan**: the hourly price of the NodeClaims alive at the
  end of the run, over the price of a plan made from nothing for the pods
  then running. The fresh plan is made by the provisioner's own solver, on
  the end cluster's snapshot (``scheduling_snapshot``) with every NodeClaim
  left out and each NodePool's limits whole again (as if none of its nodes
  existed), so DaemonSet overhead, NodePool weights and requirements, and the
  unavailable offerings of the moment count exactly as they do when karpy
  provisions. Both prices are the cheapest offering of what was (or would
  be) launched, spot where a pool allows it. A ratio below 1 is possible: the
  fresh plan honours NodePool weights, which can cost more than the fleet
  consolidation ended with.
- **converge**: virtual time from the last scenario change (the last step, a
  cloud window's start or end, an interruption) to the last change of the
  fleet (a NodeClaim created or deleted); 0 when the fleet did not change
  after it.
- **evicted**: pods evicted (drains of disrupted nodes, PodDisruptionBudgets
  permitting), counted at the eviction API; in all and since the last
  change.
- **commands / launched**: consolidation commands started (a group of
  NodeClaims disrupted at one moment) and the replacement NodeClaims they
  launched, read from the disruption controller's Events
  (``DisruptionTerminating``, ``DisruptionLaunching``), as
  ``kubectl get events`` would show them; of the commands, those rolled back
  (``DisruptionFailed``: a replacement that did not launch or initialize).
- **min evictions**: a lower bound of the evictions any controller needed to
  reach the end fleet from the fleet of the last change: the workload pods
  running, right after the last change, on nodes that are gone at the end.
  Every one of them had to leave its node, and a pod deleted by the change
  itself (a scale-down) is not counted. The ratio is evictions since the
  last change over this bound (1.0 when both are 0; none when only the
  bound is 0).

A run stops once the cluster is steady (see :mod:`karpy.sim.simulation`), at
the latest at the scenario's duration. Nothing here is timed but the whole
benchmark's wall time, printed at the end.

Run: ``python -m benchmarks.convergence [--scenario NAME ...] [--rules karpy|karpenter] [--json]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from karpy.api.core import POD_RUNNING
from karpy.controllers.state import scheduling_snapshot
from karpy.disruption.consolidation import KARPENTER_RULES, ConsolidationRules
from karpy.sim.recorder import PodRecord
from karpy.sim.scenario import Scenario, load_inputs
from karpy.sim.simulation import Simulation, SimulationSettings

SCENARIOS = Path(__file__).parent / "convergence"
RULES: dict[str, ConsolidationRules] = {"karpy": ConsolidationRules(), "karpenter": KARPENTER_RULES}
# The targets the figures are read against (benchmarks/README.md, "Convergence").
COST_TARGET = 1.15
EVICTION_TARGET = 1.5
CONVERGE_TARGET_SECONDS = 30 * 60.0
# Consolidation's reasons, as the disruption controller writes them in its Events.
CONSOLIDATION_REASONS = ("Underutilized", "Empty")


@dataclass(slots=True)
class Result:
    scenario: str
    rules: str
    end_cost_per_hour: float
    fresh_plan_cost_per_hour: float
    fresh_plan_unschedulable: int
    running_pods: int
    end_nodes: int
    last_change_seconds: float
    converge_seconds: float
    evicted: int
    evicted_since_last_change: int
    commands: int
    commands_rolled_back: int
    replacements_launched: int
    min_evictions: int
    simulated_seconds: float
    steady: bool
    wall_seconds: float

    @property
    def cost_ratio(self) -> float | None:
        if self.fresh_plan_cost_per_hour <= 0:
            return None
        return self.end_cost_per_hour / self.fresh_plan_cost_per_hour

    @property
    def eviction_ratio(self) -> float | None:
        if self.min_evictions == 0:
            return 1.0 if self.evicted_since_last_change == 0 else None
        return self.evicted_since_last_change / self.min_evictions

    def as_json(self) -> dict[str, object]:
        ratios = {"costRatio": self.cost_ratio, "evictionRatio": self.eviction_ratio}
        return {**dataclasses.asdict(self), **ratios}


def scenario_names() -> list[str]:
    return sorted(path.parent.name for path in SCENARIOS.glob("*/scenario.yaml"))


def load(name: str) -> Scenario:
    scenario, problems = load_inputs([SCENARIOS / name / "scenario.yaml"])
    if problems.errors:
        raise ValueError(f"{name}: {'; '.join(problems.errors)}")
    return scenario


def last_change(scenario: Scenario, simulation: Simulation) -> float:
    """When the scenario last changed anything, in cluster time: a step, a cloud window, an interruption."""
    start = simulation.clock.start
    moments = [start + step.at for step in scenario.steps]
    moments += [moment for moment in simulation.cloud_window_boundaries() if moment <= simulation.end]
    moments += [start + interruption.at for interruption in scenario.interruptions]
    return max(moment for moment in moments if moment <= simulation.end)


def fresh_plan(simulation: Simulation) -> tuple[float, int, int]:
    """(hourly price, unschedulable pods, pods) of a plan from nothing for the running workload pods."""
    cluster = simulation.cluster
    pods = [
        pod.with_changes(spec=dataclasses.replace(pod.spec, node_name=""))
        for pod in cluster.pods()
        if pod.phase == POD_RUNNING
        and not pod.is_daemonset_pod
        and not pod.metadata.deleting
        and not pod.is_terminal
    ]
    every_nodeclaim = frozenset(claim.name for claim in cluster.nodeclaims())
    snapshot = scheduling_snapshot(cluster, simulation.cloud, exclude=every_nodeclaim)
    # Limits whole again: no node of the pool exists in a plan made from nothing.
    snapshot.pools = [
        dataclasses.replace(pool, remaining=dict(pool.nodepool.limits) if pool.nodepool.limits else None)
        for pool in snapshot.pools
    ]
    plan = snapshot.solve(pods)
    return sum(claim.price for claim in plan.new_nodeclaims), len(plan.unschedulable), len(pods)


def min_evictions(simulation: Simulation, moment: float) -> int:
    """Workload pods running right after ``moment`` on a node that is gone at the end."""
    gone_nodes = {
        record.node
        for record in simulation.recorder.nodeclaims.values()
        if record.node and record.deleted_at is not None
    }

    def there_after(record: PodRecord) -> bool:
        return (
            not record.daemonset
            and record.node in gone_nodes
            and record.running_at is not None
            and record.running_at <= moment
            and (record.deleted_at is None or record.deleted_at > moment)
            and (record.succeeded_at is None or record.succeeded_at > moment)
        )

    return sum(1 for record in simulation.recorder.pods.values() if there_after(record))


def fleet_cost(simulation: Simulation) -> tuple[float, int]:
    """The hourly price of the live NodeClaims (not being deleted), and their number.

    Each is priced as the fresh plan is: its launched offering plus what a node
    of its pool costs beyond it (:meth:`Simulation.node_cost`), so the ratio
    compares like with like.
    """
    records = simulation.recorder.nodeclaims
    alive = [
        records[claim.name]
        for claim in simulation.nodeclaims()
        if claim.name in records and not claim.metadata.deleting
    ]
    price = sum(record.price_per_hour + simulation.node_cost(record.nodepool) for record in alive)
    return price, len(alive)


def run_one(name: str, rules_name: str) -> Result:
    started = time.perf_counter()
    scenario, simulation = simulate(name, RULES[rules_name])
    return measure(scenario, simulation, rules_name, time.perf_counter() - started)


def simulate(name: str, rules: ConsolidationRules) -> tuple[Scenario, Simulation]:
    """Run scenario ``name`` under ``rules``; a controller error fails the run."""
    scenario = load(name)
    simulation = Simulation(SimulationSettings(consolidation=rules))
    simulation.run_scenario(scenario)
    if simulation.runtime.errors:
        raise RuntimeError(f"{name} ({rules}): controller errors: {simulation.runtime.errors[:3]}")
    return scenario, simulation


def measure(scenario: Scenario, simulation: Simulation, rules_name: str, wall_seconds: float) -> Result:
    """The figures of a finished run (see :class:`Result`)."""
    name = scenario.name
    # The eviction API's log: accepted evictions only (a refused one raises and is not kept).
    evictions = simulation.cluster.evictions
    changed = last_change(scenario, simulation)
    records = simulation.recorder.nodeclaims.values()
    fleet_changes = [
        moment
        for record in records
        for moment in (record.created_at, record.deleted_at)
        if moment is not None
    ]
    last_fleet_change = max(fleet_changes, default=changed)
    end_cost, end_nodes = fleet_cost(simulation)
    fresh_price, unschedulable, running = fresh_plan(simulation)
    events = [event for event in simulation.cluster.events if event.kind == "NodeClaim"]
    commands = {
        event.time
        for event in events
        if event.reason == "DisruptionTerminating"
        and event.message.endswith(tuple(f": {reason}" for reason in CONSOLIDATION_REASONS))
    }
    rolled_back = {event.time for event in events if event.reason == "DisruptionFailed"}
    launched = sum(
        1
        for event in events
        if event.reason == "DisruptionLaunching"
        and event.message.endswith(tuple(f": {reason}" for reason in CONSOLIDATION_REASONS))
    )
    return Result(
        scenario=name,
        rules=rules_name,
        end_cost_per_hour=end_cost,
        fresh_plan_cost_per_hour=fresh_price,
        fresh_plan_unschedulable=unschedulable,
        running_pods=running,
        end_nodes=end_nodes,
        last_change_seconds=changed - simulation.clock.start,
        converge_seconds=max(0.0, last_fleet_change - changed),
        evicted=len(evictions),
        evicted_since_last_change=sum(1 for moment in evictions if moment >= changed),
        commands=len(commands),
        commands_rolled_back=len(rolled_back),
        replacements_launched=launched,
        min_evictions=min_evictions(simulation, changed),
        simulated_seconds=simulation.clock.now() - simulation.clock.start,
        steady=simulation.steady(),
        wall_seconds=wall_seconds,
    )


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f}m"


def table(results: Sequence[Result]) -> str:
    """Markdown: one row per scenario, karpy's and Karpenter's figures side by side."""
    by_key = {(result.scenario, result.rules): result for result in results}
    names = list(dict.fromkeys(result.scenario for result in results))
    header = (
        "| scenario | rules | end $/h | fresh $/h | cost ratio | converge | evicted (since change)"
        " | min evictions | eviction ratio | commands (rolled back) | launched | nodes | pods |"
    )
    lines = [header, "|" + "---|" * header.count(" | ") + "---|"]
    for name in names:
        for rules_name in RULES:
            result = by_key.get((name, rules_name))
            if result is None:
                continue
            lines.append(
                f"| {name} | {rules_name} | {result.end_cost_per_hour:.4f} | "
                f"{result.fresh_plan_cost_per_hour:.4f} | {_ratio(result.cost_ratio)} | "
                f"{_minutes(result.converge_seconds)} | {result.evicted} ({result.evicted_since_last_change})"
                f" | {result.min_evictions} | {_ratio(result.eviction_ratio)} | {result.commands}"
                f" ({result.commands_rolled_back}) | "
                f"{result.replacements_launched} | {result.end_nodes} | {result.running_pods} |"
            )
    return "\n".join(lines)


def verdicts(results: Sequence[Result]) -> list[str]:
    """Each result against the targets; a miss is named with its figure, not hidden."""
    lines: list[str] = []
    for result in results:
        misses: list[str] = []
        ratio = result.cost_ratio
        if ratio is not None and ratio > COST_TARGET:
            misses.append(f"cost {ratio:.2f} > {COST_TARGET}")
        if result.converge_seconds > CONVERGE_TARGET_SECONDS:
            misses.append(f"converged in {_minutes(result.converge_seconds)} > 30m")
        evictions = result.eviction_ratio
        if evictions is None or evictions > EVICTION_TARGET:
            misses.append(f"evictions {_ratio(evictions)} > {EVICTION_TARGET}")
        if result.fresh_plan_unschedulable:
            misses.append(f"{result.fresh_plan_unschedulable} pods unschedulable in the fresh plan")
        if not result.steady:
            misses.append("not steady at the end")
        verdict = "PASS" if not misses else "MISS: " + "; ".join(misses)
        lines.append(f"{result.scenario} ({result.rules}): {verdict}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--scenario",
        action="append",
        choices=scenario_names(),
        help="run only this scenario (repeat for several)",
    )
    parser.add_argument(
        "--rules", action="append", choices=list(RULES), help="run only under these rules (default: both)"
    )
    parser.add_argument(
        "--jobs", type=int, default=1, help="runs at once, each in a process of its own (default 1)"
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of the table")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    # The controllers' warnings (a launch refused by a capacity failure) are the scenario's story, not news.
    logging.getLogger("karpy").setLevel(logging.ERROR)
    names = args.scenario or scenario_names()
    runs = [(name, rules_name) for name in names for rules_name in args.rules or list(RULES)]
    results: list[Result] = []
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for result in pool.map(run_one, *zip(*runs, strict=True)):
            print(
                f"{result.scenario} ({result.rules}): {result.wall_seconds:.1f} s, "
                f"{_minutes(result.simulated_seconds)} simulated",
                file=sys.stderr,
            )
            results.append(result)
    wall = time.perf_counter() - started
    if args.json:
        document = {"results": [result.as_json() for result in results], "wallSeconds": wall}
        print(json.dumps(document, indent=2))
    else:
        print(table(results))
        print()
        for line in verdicts(results):
            print(line)
        print(f"\nwall time: {wall:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
