"""A provisioning pass creates its NodeClaims together, and a failure among them loses none.

``Cluster.create_all`` may send the creations at once (the real writer does);
one refused must neither hide the ones created (their logs, events and
metrics, and the retry's view of them as in flight) nor be swallowed: the
pass fails once the rest are accounted for, and the retry launches only
what is still missing.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from tests.support import KWOK_NODE_CLASS, deployment_manifest, kwok_nodepool, load_objects

from karpy.operator.cluster import NotLeaderError
from karpy.sim.simulation import Simulation
from karpy.sim.store import InMemoryCluster

ONE_PER_NODE = kwok_nodepool(instance_types=("c5.large",))


class RefusingSecond:
    """Refuses the second creation of the next ``create_all`` with ``error``, once."""

    def __init__(self, cluster: InMemoryCluster, error: Exception) -> None:
        self.cluster = cluster
        self.error = error
        self.armed = True
        self.original = cluster.create_all

    def __call__(self, objs: Sequence[object]) -> list[object]:
        if not self.armed or len(objs) < 2:
            return self.original(objs)
        self.armed = False
        (first,) = self.original([objs[0]])
        return [first, self.error, *self.original(objs[2:])]


def pending_simulation() -> Simulation:
    simulation = Simulation()
    simulation.apply(
        load_objects(KWOK_NODE_CLASS, ONE_PER_NODE, deployment_manifest(replicas=3, cpu="1500m"))
    )
    simulation.runtime.run_due()  # the pods are made and found unschedulable; the batch is still open
    assert not simulation.nodeclaims()
    assert len(simulation.provisioner.provisionable_pods()) == 3
    return simulation


def test_a_refused_creation_fails_the_pass_after_the_others_are_counted_and_the_retry_makes_only_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    simulation = pending_simulation()
    refusing = RefusingSecond(simulation.cluster, RuntimeError("the server said no"))
    monkeypatch.setattr(simulation.cluster, "create_all", refusing)
    with pytest.raises(RuntimeError, match="the server said no"):
        simulation.provisioner.provision()
    created = simulation.nodeclaims()
    assert len(created) == 2
    launching = sorted(event.name for event in simulation.cluster.events if event.reason == "Launching")
    assert launching == [claim.name for claim in created]
    simulation.provisioner.provision()
    assert len(simulation.nodeclaims()) == 3


def test_a_lost_leadership_among_the_failures_is_the_one_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    simulation = pending_simulation()
    monkeypatch.setattr(
        simulation.cluster, "create_all", RefusingSecond(simulation.cluster, NotLeaderError("lost the lease"))
    )
    with pytest.raises(NotLeaderError):
        simulation.provisioner.provision()
