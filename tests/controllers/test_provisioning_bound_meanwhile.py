"""A pod kube-scheduler binds while a provisioning pass reads the cluster is not provisioned for.

``karpy run``'s pass reads the pending pods, then the nodes and the pods on
them, from caches that watches keep changing meanwhile. A pod bound in between
was counted twice: pending (so to be placed) and on its node (taking the room
it would be placed in). With the nodes full, the pass launched a NodeClaim for
it that then stayed empty. That is what left one empty NodeClaim now and then
in ``tests/integration/test_run_scale.py``: the pass that a bind reopens runs
while kube-scheduler binds hundreds of pods a second. The pass now plans only
the pods still pending once it has read the nodes.
"""

from __future__ import annotations

import dataclasses

import pytest
from tests.support import KWOK_NODE_CLASS, deployment_manifest, kwok_nodepool, load_objects

from karpy.api.core import Pod
from karpy.sim.simulation import Simulation

ONE_PER_NODE = kwok_nodepool(instance_types=("c5.large",))


def test_a_pod_bound_after_it_was_read_as_pending_gets_no_nodeclaim(monkeypatch: pytest.MonkeyPatch) -> None:
    simulation = Simulation()
    simulation.apply(
        load_objects(KWOK_NODE_CLASS, ONE_PER_NODE, deployment_manifest(replicas=2, cpu="1500m"))
    )
    simulation.run(120.0)
    running = [pod for pod in simulation.pods() if pod.node_name]
    assert len(running) == 2 and len(simulation.nodeclaims()) == 2  # one pod fills each node
    # The pass's read of the pending pods came just before kube-scheduler bound the second one;
    # its read of the nodes, just after.
    bound = running[1]
    as_read = dataclasses.replace(bound, spec=dataclasses.replace(bound.spec, node_name=""))
    reads: list[list[Pod]] = [[as_read]]
    monkeypatch.setattr(simulation.cluster, "pending_pods", lambda: reads.pop() if reads else [])
    result = simulation.provisioner.provision()
    assert result.created == []
    assert len(simulation.nodeclaims()) == 2
