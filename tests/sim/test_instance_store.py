"""instanceStorePolicy RAID0 in the simulator: the instance store is the node's ephemeral storage.

Karpenter's AWS provider sizes a node of a class with ``instanceStorePolicy:
RAID0`` by the total of its instance store disks (the user data assembles them
into one array); a simulation must plan the same nodes ``karpy run`` launches.
"""

from __future__ import annotations

from tests.support import load_objects, spot_ec2_cluster

from karpy.sim.simulation import Simulation

# A pod whose scratch space no 20Gi root volume holds, but a g4dn.xlarge's 125 GB NVMe does.
SCRATCH_POD = """
apiVersion: v1
kind: Pod
metadata: {name: scratch, namespace: default}
spec:
  containers: [{name: main, resources: {requests: {cpu: "1", memory: 1Gi, ephemeral-storage: 100Gi}}}]
"""


def run(cluster: str) -> Simulation:
    simulation = Simulation()
    simulation.apply(load_objects(cluster, SCRATCH_POD))
    simulation.run(120)
    return simulation


def test_raid0_lets_a_pod_use_the_instance_store_of_its_node() -> None:
    cluster = spot_ec2_cluster(("g4dn.xlarge", "c5.xlarge")).replace(
        "  role: KarpenterNodeRole\n", "  role: KarpenterNodeRole\n  instanceStorePolicy: RAID0\n", 1
    )
    simulation = run(cluster)
    [pod] = [pod for pod in simulation.pods() if pod.metadata.name == "scratch"]
    assert pod.phase == "Running"
    [claim] = simulation.nodeclaims()
    assert claim.metadata.labels["node.kubernetes.io/instance-type"] == "g4dn.xlarge"
    assert claim.status.capacity["ephemeral-storage"] == 125 * 10**9


def test_without_raid0_the_same_pod_finds_no_node() -> None:
    simulation = run(spot_ec2_cluster(("g4dn.xlarge", "c5.xlarge")))
    [pod] = [pod for pod in simulation.pods() if pod.metadata.name == "scratch"]
    assert pod.phase == "Pending"
    assert simulation.nodeclaims() == []
