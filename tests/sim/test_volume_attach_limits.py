"""The simulator counts volume attach limits as Karpenter v1.15 and kube-scheduler do.

A StatefulSet whose every pod mounts an EBS volume: the pods are small enough
for one node, but a node attaches only so many EBS volumes (its CSINode says
how many, from its instance type), so provisioning launches enough nodes for
the volumes and the stand-in kube-scheduler puts no more on a node than it
can attach.
"""

from __future__ import annotations

from collections import Counter

from tests.support import load_objects, spot_ec2_cluster

from karpy.api.core import POD_RUNNING
from karpy.api.storage import EBS_CSI_DRIVER
from karpy.sim.simulation import Simulation

STORAGE_CLASS = """
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: gp3}
provisioner: ebs.csi.aws.com
volumeBindingMode: WaitForFirstConsumer
"""


def statefulset(replicas: int, storage_class: str = "gp3") -> str:
    return f"""
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: db, namespace: default}}
spec:
  replicas: {replicas}
  podManagementPolicy: Parallel
  serviceName: db
  selector: {{matchLabels: {{app: db}}}}
  template:
    metadata: {{labels: {{app: db}}}}
    spec:
      containers:
        - name: main
          resources: {{requests: {{cpu: 50m, memory: 64Mi}}}}
          volumeMounts: [{{name: data, mountPath: /data}}]
  volumeClaimTemplates:
    - metadata: {{name: data}}
      spec:
        storageClassName: {storage_class}
        accessModes: [ReadWriteOnce]
        resources: {{requests: {{storage: 10Gi}}}}
"""


def run(*texts: str) -> Simulation:
    simulation = Simulation()
    simulation.apply(load_objects(spot_ec2_cluster(("m5.4xlarge",)), *texts))
    simulation.run(3600)
    return simulation


def db_pods_per_node(simulation: Simulation) -> Counter[str]:
    pods = [pod for pod in simulation.pods() if pod.metadata.labels.get("app") == "db"]
    assert pods and all(pod.phase == POD_RUNNING for pod in pods)
    return Counter(pod.node_name for pod in pods)


def test_each_node_takes_no_more_volumes_than_its_csinode_allows() -> None:
    simulation = run(STORAGE_CLASS, statefulset(40))
    per_node = db_pods_per_node(simulation)
    # An m5.4xlarge attaches 26 EBS volumes (28 Nitro slots less the root volume and the ENI):
    # two nodes, which kube-scheduler fills least allocated first.
    assert len(per_node) == 2 and max(per_node.values()) <= 26
    for node_name in per_node:
        csi_node = simulation.cluster.csi_node(node_name)
        assert csi_node is not None and csi_node.limits == {EBS_CSI_DRIVER: 26}


def test_volumes_of_a_class_no_csi_driver_provisions_count_against_no_limit() -> None:
    other = STORAGE_CLASS.replace("name: gp3", "name: local").replace("ebs.csi.aws.com", "example.com/local")
    simulation = run(other, statefulset(40, storage_class="local"))
    assert sorted(db_pods_per_node(simulation).values()) == [40]


def test_consolidation_moves_no_pods_onto_a_node_that_cannot_attach_their_volumes() -> None:
    # 40 pods on two m5.4xlarge (20 volumes each, 6 more allowed): by CPU one node holds them all,
    # by volumes it does not, so deleting either would leave 14 pods nowhere to go. Consolidation
    # simulates with the same attach limits as provisioning: it deletes neither, and nothing churns.
    cluster = spot_ec2_cluster(("m5.4xlarge",)).replace(
        "consolidationPolicy: WhenEmpty, consolidateAfter: 1h",
        "consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 30s",
    )
    simulation = Simulation()
    simulation.apply(load_objects(cluster, STORAGE_CLASS, statefulset(40)))
    simulation.run(3 * 3600, until_steady=False)
    assert len(db_pods_per_node(simulation)) == 2
    assert len(list(simulation.cluster.nodeclaims())) == 2
    disrupted = [event for event in simulation.cluster.events if event.reason == "DisruptionTerminating"]
    assert disrupted == []
