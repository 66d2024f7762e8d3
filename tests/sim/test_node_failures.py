"""A scenario's ``cloud.nodeFailures``: Nodes break in virtual time and node repair replaces them.

Five pods of one Deployment on five nodes (1.5 CPU each on c5.large). At
10 minutes the oldest node's kubelet stops posting (Ready Unknown). With the
NodeRepair gate, the node is replaced once the simulated cloud's policy (30
minutes, Karpenter's AWS one) has tolerated it, replacement first; without
the gate it stays. Two broken nodes of five trip the breaker: neither goes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support import KWOK_NODE_CLASS, deployment_manifest, kwok_nodepool

from karpy.api.core import POD_RUNNING
from karpy.sim.cloud import NodeFailure
from karpy.sim.scenario import Scenario, load_inputs
from karpy.sim.simulation import Simulation, SimulationSettings

FAILURE_AT = 600.0
TOLERATION = 1800.0


def scenario(tmp_path: Path, failures: str, duration: str = "1h") -> Scenario:
    (tmp_path / "cluster.yaml").write_text(
        "\n---\n".join(
            [
                KWOK_NODE_CLASS,
                kwok_nodepool(
                    disruption="consolidationPolicy: WhenEmpty, consolidateAfter: 1h",
                    instance_types=("c5.large",),
                ),
                deployment_manifest("web", replicas=5, cpu="1500m"),
            ]
        )
    )
    (tmp_path / "scenario.yaml").write_text(
        "apiVersion: karpy.dev/v1alpha1\nkind: Scenario\nmetadata: {name: nodes-break}\n"
        f"spec:\n  duration: {duration}\n  cloud:\n    nodeFailures:\n{failures}"
        "  steps:\n    - {at: 0s, apply: {files: [cluster.yaml]}}\n"
    )
    loaded_scenario, loaded = load_inputs([tmp_path / "scenario.yaml"])
    assert loaded.errors == []
    return loaded_scenario


def run(tmp_path: Path, failures: str, *, repair: bool) -> Simulation:
    simulation = Simulation(SimulationSettings(node_repair=repair))
    simulation.run_scenario(scenario(tmp_path, failures))
    assert not simulation.runtime.errors
    return simulation


ONE = "      - {at: 10m, count: 1}\n"


def test_a_broken_node_is_replaced_after_the_policys_toleration(tmp_path: Path) -> None:
    simulation = run(tmp_path, ONE, repair=True)
    start = simulation.clock.start
    ((broken_at, node, what),) = simulation.node_failures.broken
    assert broken_at == start + FAILURE_AT and what == "Ready=Unknown"
    assert node not in {n.name for n in simulation.cluster.nodes()}
    records = simulation.recorder.nodeclaims.values()
    replacement = [r for r in records if r.created_at > start + FAILURE_AT]
    assert len(replacement) == 1
    # Launched once the 30 minutes had passed, not before.
    assert replacement[0].created_at >= start + FAILURE_AT + TOLERATION
    assert len(list(simulation.cluster.nodes())) == 5
    assert all(pod.phase == POD_RUNNING for pod in simulation.cluster.pods())


def test_without_the_gate_a_broken_node_stays(tmp_path: Path) -> None:
    simulation = run(tmp_path, ONE, repair=False)
    ((_, node, _),) = simulation.node_failures.broken
    assert node in {n.name for n in simulation.cluster.nodes()}


def test_two_broken_nodes_of_five_trip_the_breaker(tmp_path: Path) -> None:
    simulation = run(tmp_path, "      - {at: 10m, count: 2}\n", repair=True)
    broken = {node for _, node, _ in simulation.node_failures.broken}
    assert len(broken) == 2 and broken <= {n.name for n in simulation.cluster.nodes()}
    blocked = {event.name for event in simulation.cluster.events if event.reason == "NodeRepairBlocked"}
    assert broken & blocked


def test_node_failures_are_read_with_their_defaults(tmp_path: Path) -> None:
    read = scenario(
        tmp_path,
        "      - {at: 10m}\n"
        "      - {at: 20m, fraction: 0.5, instanceTypes: [c5.large],"
        " condition: {type: NetworkingReady, status: 'False', reason: IPAMDNotReady}}\n",
    )
    assert read.node_failures == [
        NodeFailure(600.0),
        NodeFailure(
            1200.0, "NetworkingReady", "False", "IPAMDNotReady", instance_types=("c5.large",), fraction=0.5
        ),
    ]


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        ("{count: 1}", "nodeFailures[0].at: required"),
        ("{at: 2h}", "nodeFailures[0].at:"),
        ("{at: 1m, condition: {status: Broken}}", "nodeFailures[0].condition.status: one of True"),
        ("{at: 1m, fraction: 0.5, count: 1}", "nodeFailures[0]: give fraction or count, not both"),
        ("{at: 1m, instanceTypes: [z9.huge]}", "nodeFailures[0].instanceTypes[0]"),
        ("{at: 1m, node: a}", "nodeFailures[0].node: unknown field"),
    ],
)
def test_bad_node_failures_are_errors_naming_the_field(tmp_path: Path, entry: str, error: str) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(
        "apiVersion: karpy.dev/v1alpha1\nkind: Scenario\nmetadata: {name: x}\n"
        f"spec:\n  duration: 1h\n  cloud:\n    nodeFailures:\n      - {entry}\n  steps: []\n"
    )
    _, loaded = load_inputs([path])
    assert any(error in message for message in loaded.errors), loaded.errors
