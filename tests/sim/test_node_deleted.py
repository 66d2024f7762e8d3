"""``kubectl delete node`` on a node karpy launched: the node is drained and goes, as in Karpenter v1.

The Node carries karpy's termination finalizer, so deleting it only marks
it. Before, nothing acted on that mark: the Node stayed Terminating for good
with its pods running on it. Now its NodeClaim is deleted, which drains the
node through the Eviction API, terminates the instance and lifts the
finalizer; the pods are replaced elsewhere.
"""

from __future__ import annotations

from tests.support import KWOK_NODE_CLASS, deployment_manifest, kwok_nodepool, load_objects

from karpy.api.core import Node
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import TERMINATION_FINALIZER
from karpy.sim.simulation import Simulation

MANIFESTS = (
    KWOK_NODE_CLASS,
    kwok_nodepool(disruption="consolidationPolicy: WhenEmpty, consolidateAfter: 1h"),
    deployment_manifest("web", replicas=4, cpu="1", memory="1Gi"),
)


def running(simulation: Simulation) -> list[str]:
    return [
        pod.node_name for pod in simulation.pods() if pod.phase == "Running" and not pod.metadata.deleting
    ]


def test_a_deleted_node_is_drained_its_nodeclaim_and_instance_go_and_its_pods_run_elsewhere() -> None:
    simulation = Simulation()
    simulation.apply(load_objects(*MANIFESTS))
    simulation.run(120, until_steady=False)
    assert len(running(simulation)) == 4
    victim = running(simulation)[0]
    claim = next(c for c in simulation.nodeclaims() if c.status.node_name == victim)
    node = simulation.cluster.node(victim)
    assert node is not None and TERMINATION_FINALIZER in node.metadata.finalizers

    simulation.cluster.delete(node)
    simulation.run(180, until_steady=False)

    assert simulation.cluster.node(victim) is None
    assert simulation.cluster.nodeclaim(claim.name) is None
    assert claim.status.provider_id not in {i.provider_id for i in simulation.cloud.instances.values()}
    assert len(running(simulation)) == 4 and victim not in running(simulation)
    evicted_from = {e.name for e in simulation.cluster.events if e.reason == "Deleting" and e.kind == "Node"}
    assert evicted_from == {victim}


def test_a_deleted_node_without_a_nodeclaim_loses_the_finalizer_instead_of_hanging() -> None:
    simulation = Simulation()
    simulation.apply(load_objects(KWOK_NODE_CLASS))
    orphan = Node(
        metadata=ObjectMeta(name="orphan", finalizers=(TERMINATION_FINALIZER,)),
        provider_id="kwok://orphan",
    )
    simulation.cluster.create(orphan)
    simulation.cluster.delete(orphan)
    node = simulation.cluster.node("orphan")
    assert node is not None and node.metadata.deleting
    simulation.run(10, until_steady=False)
    assert simulation.cluster.node("orphan") is None
