"""When the provisioner looks at pending pods again.

A pod refused at a NodePool's limit must not wait for an unrelated change:
an in-flight NodeClaim counts against the limit at the largest type it lists
until it launches, and the type the cloud launches is often smaller, which
frees room. Its launch therefore opens a batch when pods are pending.

Nor must a pod wait when kube-scheduler binds another pod into the room a pass
planned for it (it spreads by least allocation, not as the plan packed): that
bind opens a batch, so the next pass sees the room as it is. A pod bound where
it was planned, or where no pending pod was planned, opens none. Likewise a
NodeClaim that initializes while pods planned for it are still pending opens a
batch (when they do not fit it, the pass sees why); one with none opens none.
"""

from __future__ import annotations

import dataclasses

from tests.support import KWOK_NODE_CLASS, deployment_manifest, kwok_nodepool, load_objects

from karpy.api.conditions import FALSE, TRUE, Condition
from karpy.api.core import Pod
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import CONDITION_INITIALIZED, NodeClaim
from karpy.api.nodepool import CONDITION_NODECLASS_READY, CONDITION_READY, NodePool
from karpy.controllers.provisioning import BATCH_KEY
from karpy.sim.simulation import Simulation

UNPLACEABLE_POD = """
apiVersion: v1
kind: Pod
metadata: {name: huge, namespace: default}
spec:
  containers: [{name: main, resources: {requests: {cpu: "500"}}}]
"""


def _launch_handler_result(extra_spec: str) -> list[str]:
    simulation = Simulation()
    simulation.apply(
        load_objects(KWOK_NODE_CLASS, kwok_nodepool(extra_spec), deployment_manifest(replicas=1))
    )
    simulation.run(120, until_steady=False)
    simulation.apply(load_objects(UNPLACEABLE_POD))
    assert simulation.cluster.pending_pods()
    (launched,) = simulation.nodeclaims()
    assert launched.launched
    not_yet = launched.with_status(conditions=())
    assert isinstance(not_yet, NodeClaim) and not not_yet.launched
    (watch,) = [w for w in simulation.provisioner.watches() if w.kind == "NodeClaim"]
    keys = list(watch.mapper(not_yet, launched))
    # An update that does not launch anything opens no batch.
    assert list(watch.mapper(launched, dataclasses.replace(launched))) == []
    return keys


def test_a_launch_in_a_pool_with_limits_opens_a_batch_for_pending_pods() -> None:
    assert _launch_handler_result("  limits: {cpu: 100}") == [BATCH_KEY]


def test_a_launch_in_a_pool_without_limits_changes_nothing_for_pending_pods() -> None:
    assert _launch_handler_result("") == []


def _planned_pods() -> tuple[Simulation, dict[str, str]]:
    """Two pods, each planned for a NodeClaim of its own that has not registered yet, by pod name."""
    simulation = Simulation()
    simulation.apply(
        load_objects(
            KWOK_NODE_CLASS, kwok_nodepool(instance_types=("c5.large",)), deployment_manifest(replicas=2)
        )
    )
    simulation.run(2, until_steady=False)
    nominated = {
        event.name: event.message.rsplit("/", 1)[1]
        for event in simulation.cluster.events
        if event.reason == "Nominated"
    }
    assert len(nominated) == 2 and len(set(nominated.values())) == 2
    assert len(simulation.cluster.pending_pods()) == 2
    return simulation, nominated


def _bind(simulation: Simulation, pod_name: str, node_name: str) -> list[str]:
    (pod,) = [pod for pod in simulation.cluster.pending_pods() if pod.metadata.name == pod_name]
    bound = pod.with_changes(spec=dataclasses.replace(pod.spec, node_name=node_name))
    assert isinstance(bound, Pod)
    (watch,) = [w for w in simulation.provisioner.watches() if w.kind == "Pod"]
    return list(watch.mapper(pod, bound))


def test_a_pod_bound_into_room_planned_for_a_pending_pod_opens_a_batch() -> None:
    simulation, nominated = _planned_pods()
    first, second = sorted(nominated)
    assert _bind(simulation, first, nominated[second]) == [BATCH_KEY]


def test_a_pod_bound_where_it_was_planned_opens_no_batch() -> None:
    simulation, nominated = _planned_pods()
    first, _ = sorted(nominated)
    assert _bind(simulation, first, nominated[first]) == []


def test_a_pod_bound_where_no_pending_pod_was_planned_opens_no_batch() -> None:
    simulation, nominated = _planned_pods()
    first, _ = sorted(nominated)
    assert _bind(simulation, first, "elsewhere") == []


def _initialize(simulation: Simulation, claim_name: str) -> list[str]:
    claim = simulation.cluster.nodeclaim(claim_name)
    assert isinstance(claim, NodeClaim) and not claim.initialized
    initialized = claim.with_status(
        node_name=claim_name,
        conditions=(*claim.status.conditions, Condition(CONDITION_INITIALIZED, TRUE, "Initialized")),
    )
    assert isinstance(initialized, NodeClaim) and initialized.initialized
    (watch,) = [w for w in simulation.provisioner.watches() if w.kind == "NodeClaim"]
    return list(watch.mapper(claim, initialized))


def test_a_nodeclaim_initialized_under_pods_planned_for_it_opens_a_batch() -> None:
    simulation, nominated = _planned_pods()
    first, _ = sorted(nominated)
    assert _initialize(simulation, nominated[first]) == [BATCH_KEY]


def test_a_nodeclaim_initialized_after_its_pods_were_bound_opens_no_batch() -> None:
    simulation, nominated = _planned_pods()
    first, _ = sorted(nominated)
    assert _bind(simulation, first, nominated[first]) == []
    assert _initialize(simulation, nominated[first]) == []


def test_a_pool_still_not_ready_but_for_another_reason_opens_a_batch_for_pending_pods() -> None:
    """Pods are told why their pool cannot launch by the pass after the reason changed.

    A node class' status first says "not resolved yet", then names the selector that
    matches nothing; the pool's NodeClassReady stays False across both, and without a
    pass after the second its pending pods are never told which selector it was.
    """
    simulation = Simulation()
    simulation.apply(load_objects(KWOK_NODE_CLASS, kwok_nodepool(""), UNPLACEABLE_POD))
    simulation.run(30, until_steady=False)
    assert simulation.cluster.pending_pods()
    (pool,) = simulation.cluster.nodepools()
    (watch,) = [w for w in simulation.provisioner.watches() if w.kind == "NodePool"]

    def not_ready(message: str) -> NodePool:
        conditions = (
            Condition(CONDITION_READY, FALSE, "NodeClassNotReady", "NodeClassReady=False"),
            Condition(CONDITION_NODECLASS_READY, FALSE, "NodeClassNotReady", message),
        )
        return dataclasses.replace(pool, status=dataclasses.replace(pool.status, conditions=conditions))

    unresolved = not_ready("EC2NodeClass/default is not ready: subnets not resolved yet")
    named = not_ready("EC2NodeClass/default is not ready: no subnet matches karpenter.sh/discovery=my-k3z")
    assert list(watch.mapper(unresolved, named)) == [BATCH_KEY]
    # The same reason written again opens none: the pass would tell the pods nothing new.
    assert list(watch.mapper(named, dataclasses.replace(named))) == []


ZONED_VOLUME_POD = """
apiVersion: v1
kind: PersistentVolume
metadata: {name: old-data}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  csi: {driver: ebs.csi.aws.com, volumeHandle: vol-old}
  nodeAffinity:
    required:
      nodeSelectorTerms:
        - matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [eu-west-1a]}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: default}
spec:
  accessModes: [ReadWriteOnce]
  volumeName: old-data
  resources: {requests: {storage: 1Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: db, namespace: default}
spec:
  containers: [{name: main, resources: {requests: {cpu: 100m}}}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
"""


def test_a_claim_recreated_unbound_opens_a_batch_for_the_pod_its_old_volume_kept_out() -> None:
    # The pod's claim is bound to a volume in a zone no pool launches in: unschedulable. The claim
    # is deleted and made again unbound (a volume to be provisioned where the pod lands): the
    # pod itself does not change, but now it fits a new node.
    simulation = Simulation()
    simulation.apply(load_objects(KWOK_NODE_CLASS, kwok_nodepool(), ZONED_VOLUME_POD))
    simulation.run(120, until_steady=False)
    assert "default/db" in simulation.provisioner.last.unschedulable
    assert simulation.nodeclaims() == []
    claim = simulation.cluster.persistent_volume_claim("default", "data")
    assert claim is not None
    simulation.cluster.delete(claim)
    simulation.cluster.create(
        dataclasses.replace(claim, metadata=ObjectMeta(name="data", namespace="default"), volume_name="")
    )
    simulation.run(120, until_steady=False)
    assert len(simulation.nodeclaims()) == 1
    pod = simulation.cluster.pod("default", "db")
    assert pod is not None and pod.spec.node_name
