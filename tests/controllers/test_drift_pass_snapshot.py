"""A disruption pass over many drifted nodes sets the cluster up for its simulations once.

Each drifted node is asked where its pods would go were it gone. While the
capacity they would land on is not initialized, every one of them is refused,
and each pass asks about them all: the cluster's nodes and their pods are
read into one view per pass, which each question takes its node out of, not
into a view of their own per node (1,000 nodes, 200 of them drifted, made a
pass of minutes).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from benchmarks.from_cluster import drifted_simulation

import karpy.controllers.disruption as disruption_module
from karpy.api.nodeclaim import CONDITION_DRIFTED
from karpy.controllers.state import invalid_nodepools, scheduling_snapshot
from karpy.disruption.emptiness import reschedulable
from karpy.disruption.rejection import RejectionKind
from karpy.sim.scenario import Scenario


def test_a_pass_over_drifted_nodes_reads_the_cluster_once_and_refuses_each_as_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 12 full nodes, 4 of them drifted; their pods would land on NodeClaims still in flight.
    simulation, delay = drifted_simulation(nodes=12, pods_per_node=20, drifted=4)
    simulation.run_scenario(Scenario(name="drift", duration=20.0, registration_delay=delay))
    controller = simulation.disruption
    drifted = sorted(c.name for c in simulation.cluster.nodeclaims() if c.is_true(CONDITION_DRIFTED))
    assert drifted == ["default-00000", "default-00003", "default-00006", "default-00009"]
    builds: list[frozenset[str]] = []
    build = scheduling_snapshot

    def counted_build(*args: Any, **kwargs: Any) -> Any:
        builds.append(kwargs.get("exclude", args[2] if len(args) > 2 else frozenset()))
        return build(*args, **kwargs)

    monkeypatch.setattr(disruption_module, "scheduling_snapshot", counted_build)
    monkeypatch.setattr(controller, "_consolidate", lambda *args: None)  # not what is counted
    command, _, _ = controller.decide()
    assert command is None
    refused = {name: why for name, why in controller.blocked.items() if name in drifted}
    assert sorted(refused) == drifted
    for why in refused.values():
        assert why.kind is RejectionKind.POD_UNSCHEDULABLE
        assert why.message.endswith("would schedule against default-in-flight-0, not initialized yet")
    assert len(builds) == 1, "the cluster was read once per drifted node, not once per pass"


@pytest.mark.parametrize("spread", [False, True], ids=["resources only", "zonal spread"])
def test_each_candidates_plan_is_the_one_a_snapshot_without_its_node_gives(spread: bool) -> None:
    simulation, delay = drifted_simulation(nodes=12, pods_per_node=20, drifted=4)
    simulation.run_scenario(Scenario(name="drift", duration=20.0, registration_delay=delay))
    controller = simulation.disruption
    assert controller.cloud is not None
    candidates = [c for c in controller.candidates()[0] if c.nodeclaim.is_true(CONDITION_DRIFTED)]
    assert len(candidates) == 4
    controller.decide()  # a pass: the simulator below is this pass's
    for candidate in candidates:
        pods = [pod for pod in candidate.pods if reschedulable(pod)]
        if spread:
            # Inter-pod terms: every node is offered with its pods, as a snapshot's solve offers them.
            zonal = {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "app-0"}},
            }
            pods = [
                dataclasses.replace(
                    pod, spec=dataclasses.replace(pod.spec, topology_spread_constraints=(zonal,))
                )
                for pod in pods
            ]
        snapshot = scheduling_snapshot(
            controller.cluster,
            controller.cloud,
            frozenset((candidate.nodeclaim.name,)),
            unavailable=invalid_nodepools(controller.cluster),
        )
        plan = controller._place_elsewhere(candidate, pods)
        assert plan.existing, "the pods land on the NodeClaims in flight"
        assert plan == snapshot.solve(pods)
