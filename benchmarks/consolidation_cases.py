"""Where consolidation leaves a fleet: three cases, end cost against a fresh plan.

Each case is a scenario file under ``tests/data/scenarios/convergence``:

* ``scale-down``: 30 pods of 1 CPU / 2Gi on a spot-or-on-demand NodePool of
  c, m and r types, then scaled to 6;
* ``ice-fragments``: spot refused for the first 30 minutes while 6 pods
  arrive in four batches, so they land on small on-demand nodes;
* ``weights``: a preferred NodePool (weight 100, limit 4 CPUs) and a
  fallback (weight 10) sharing 6 pods.

The scenario runs for its duration (until the cluster is steady after the
last step, and at least 30 simulated minutes after it); then the hourly
price of the live NodeClaims is compared with the price of a fresh plan for
the pods running then (``benchmarks.convergence.fresh_plan``: the provisioner's
plan for them on an empty cluster, each new NodeClaim priced at its cheapest
offering). A ratio of 1 means
consolidation converged to what provisioning from scratch would launch.
The rules are karpy's defaults (``ConsolidationRules()``) or Karpenter's
(``--karpenter``), or the defaults with one field changed (``--spot-to-spot
on|off``).

Run: ``python -m benchmarks.consolidation_cases [--karpenter] [--spot-to-spot on|off]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

from benchmarks.convergence import fleet_cost, fresh_plan
from karpy.disruption.consolidation import KARPENTER_RULES, ConsolidationRules
from karpy.sim.scenario import load_inputs
from karpy.sim.simulation import Simulation, SimulationSettings

CASES = Path(__file__).resolve().parent.parent / "tests" / "data" / "scenarios" / "convergence"
CASE_NAMES = ("scale-down", "ice-fragments", "weights")


@dataclass(slots=True)
class CaseResult:
    name: str
    end_cost: float
    fresh_cost: float
    # NodeClaims consolidation launched to replace others, and nodes it took away.
    replacements: int
    disrupted: int
    # The live NodeClaims at the end: (NodePool, instance type, capacity type).
    fleet: list[tuple[str, str, str]]
    simulation: Simulation

    @property
    def ratio(self) -> float:
        return self.end_cost / self.fresh_cost if self.fresh_cost else float("inf")


def run_case(name: str, rules: ConsolidationRules) -> CaseResult:
    scenario, problems = load_inputs([CASES / f"{name}.yaml"])
    assert problems.errors == [], problems.errors
    last_step = max(step.at for step in scenario.steps)
    scenario.duration = max(scenario.duration, last_step + 30 * 60)
    scenario.run_until_steady = False
    simulation = Simulation(SimulationSettings(consolidation=rules))
    simulation.run_scenario(scenario)
    replaced = [command for command in simulation.disruption.orchestrator.executed if command.replacements]
    fleet = sorted(
        (claim.nodepool, claim.instance_type, claim.capacity_type)
        for claim in simulation.nodeclaims()
        if not claim.metadata.deleting
    )
    return CaseResult(
        name,
        fleet_cost(simulation)[0],
        fresh_plan(simulation)[0],
        sum(len(command.replacements) for command in replaced),
        sum(len(command.candidates) for command in simulation.disruption.orchestrator.executed),
        fleet,
        simulation,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--karpenter", action="store_true", help="Karpenter v1's rules")
    parser.add_argument("--spot-to-spot", choices=("on", "off"))
    parser.add_argument("cases", nargs="*", default=list(CASE_NAMES))
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    rules = KARPENTER_RULES if args.karpenter else ConsolidationRules()
    if args.spot_to_spot is not None:
        rules = dataclasses.replace(rules, spot_to_spot=args.spot_to_spot == "on")
    print(f"rules: {rules}")
    for name in args.cases:
        result = run_case(name, rules)
        fleet = ", ".join(f"{pool}/{kind}/{capacity}" for pool, kind, capacity in result.fleet)
        print(
            f"{name:14} end ${result.end_cost:.4f}/h  fresh ${result.fresh_cost:.4f}/h  "
            f"ratio {result.ratio:.2f}  replacements {result.replacements}  nodes disrupted "
            f"{result.disrupted}  fleet: {fleet}"
        )


if __name__ == "__main__":
    main()
