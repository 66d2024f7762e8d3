"""While every node waits out consolidateAfter, a disruption pass builds no capacity snapshot.

The disruption controller runs every few seconds. During a scale-up every
node is new, so none may be consolidated yet, and simulating removals
against the whole cluster's capacity (a walk over every node and pod) would
decide nothing: the pass only reports why each node waits. Once a node is
due, the full simulation runs, and consolidation still acts.
"""

from __future__ import annotations

import pytest
from tests.support import KWOK_NODE_CLASS, deployment_manifest, kwok_nodepool, load_objects

from karpy.api.core import Deployment
from karpy.controllers.state import scheduling_snapshot
from karpy.sim.simulation import Simulation

CONSOLIDATE_AFTER = 600.0

MANIFESTS = (
    KWOK_NODE_CLASS,
    kwok_nodepool(
        disruption=f"consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: {CONSOLIDATE_AFTER:g}s",
        instance_types=("c5.large",),
    ),
    deployment_manifest("web", replicas=12, cpu="600m", memory="512Mi"),
)


def test_no_snapshot_while_every_node_waits_then_consolidation_acts(monkeypatch: pytest.MonkeyPatch) -> None:
    snapshots: list[float] = []
    simulation = Simulation()
    start = simulation.clock.now()

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        snapshots.append(simulation.clock.now() - start)
        return scheduling_snapshot(*args, **kwargs)

    monkeypatch.setattr("karpy.controllers.disruption.scheduling_snapshot", counting)
    simulation.apply(load_objects(*MANIFESTS))
    simulation.run(CONSOLIDATE_AFTER / 2, until_steady=False)
    launched = len(simulation.nodeclaims())
    assert launched >= 4 and all(pod.phase == "Running" for pod in simulation.pods())
    assert snapshots == []
    assert simulation.disruption.consolidation_due is not None

    deployment = simulation.cluster.get("Deployment", "default/web")
    assert isinstance(deployment, Deployment)
    simulation.cluster.update(deployment.with_changes(replicas=3))
    simulation.run(3 * CONSOLIDATE_AFTER, until_steady=False)
    assert snapshots, "a due node is simulated against the cluster's capacity"
    assert min(snapshots) >= CONSOLIDATE_AFTER
    assert len(simulation.nodeclaims()) < launched
    assert all(pod.phase == "Running" for pod in simulation.pods())
