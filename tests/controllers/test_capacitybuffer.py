"""The CapacityBuffer controller and the buffer room (karpy.controllers.capacitybuffer), step by step.

The controller resolves a buffer's shape and size into status and virtual pods;
the room tells the provisioner what to plan and the disruption controller which
nodes hold buffer room (their virtual pods count as their pods, so an empty node
holding room is not empty, and the room it holds is taken elsewhere in a
consolidation's simulation).
"""

from __future__ import annotations

import dataclasses

from tests.support import deployment_manifest, parse_object

from karpy.api.capacitybuffer import CapacityBuffer
from karpy.api.conditions import find_condition
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import NodeClaim, NodeClaimSpec
from karpy.api.nodepool import NodeClassRef
from karpy.api.quantity import parse_resource_list
from karpy.api.requirements import Requirements
from karpy.controllers.capacitybuffer import (
    BUFFER_ROOM,
    BufferRoom,
    CapacityBufferController,
    with_buffer_room,
)
from karpy.controllers.provisioning import BATCH_KEY, Provisioner
from karpy.scheduling.buffers import is_virtual
from karpy.scheduling.solver import ExistingCapacity, Plan
from karpy.sim.clock import VirtualClock
from karpy.sim.store import InMemoryCluster

TEMPLATE = """
apiVersion: v1
kind: PodTemplate
metadata: {name: shape, namespace: default}
template:
  spec:
    containers: [{name: pause, image: pause, resources: {requests: {cpu: "1", memory: 512Mi}}}]
"""


def buffer_object(spec: str) -> CapacityBuffer:
    buffer = parse_object(
        f"apiVersion: autoscaling.x-k8s.io/v1beta1\nkind: CapacityBuffer\n"
        f"metadata: {{name: warm, namespace: default}}\nspec: {spec}"
    )
    assert isinstance(buffer, CapacityBuffer)
    return buffer


def setup(spec: str, *others: str) -> tuple[InMemoryCluster, BufferRoom, CapacityBufferController]:
    clock = VirtualClock()
    cluster = InMemoryCluster(clock)
    for text in others:
        cluster.create(parse_object(text))
    cluster.create(buffer_object(spec))
    room = BufferRoom(cluster, clock)
    return cluster, room, CapacityBufferController(cluster, clock, room)


def stored(cluster: InMemoryCluster) -> CapacityBuffer:
    buffer = cluster.capacity_buffer("default", "warm")
    assert buffer is not None
    return buffer


def condition(cluster: InMemoryCluster, kind: str) -> tuple[str, str]:
    found = find_condition(stored(cluster).status.conditions, kind)
    assert found is not None
    return found.status, found.reason


def test_a_pod_template_ref_resolves_into_status_and_virtual_pods() -> None:
    cluster, room, controller = setup("{podTemplateRef: {name: shape}, replicas: 3}", TEMPLATE)
    assert controller.reconcile("default/warm") == 30.0  # resolved again every 30 s
    status = stored(cluster).status
    assert (status.replicas, status.pod_template_ref, status.pod_template_generation) == (3, "shape", 1)
    assert status.provisioning_strategy == "buffer.x-k8s.io/active-capacity"
    assert condition(cluster, "ReadyForProvisioning") == ("True", "Resolved")
    pods = room.pods()
    assert [pod.metadata.name for pod in pods] == [f"capacity-buffer-warm-{i}" for i in (1, 2, 3)]
    assert all(is_virtual(pod) and pod.spec.requests["cpu"] == 1000 for pod in pods)
    # A second reconcile with nothing changed writes nothing.
    version = stored(cluster).metadata.resource_version
    controller.reconcile("default/warm")
    assert stored(cluster).metadata.resource_version == version


def test_what_the_buffer_names_missing_is_not_ready_and_gives_no_room() -> None:
    cluster, room, controller = setup("{podTemplateRef: {name: shape}, replicas: 3}")
    controller.reconcile("default/warm")
    assert condition(cluster, "ReadyForProvisioning") == ("False", "PodTemplateNotFound")
    assert condition(cluster, "Provisioning") == ("False", "NotReadyForProvisioning")
    assert room.pods() == []
    # The template appearing wakes the buffer up.
    template = parse_object(TEMPLATE)
    (watch,) = [w for w in controller.watches() if w.kind == "PodTemplate"]
    assert list(watch.mapper(None, template)) == ["default/warm"]


def test_a_scalable_ref_takes_the_workloads_template_and_a_percentage_of_its_replicas() -> None:
    cluster, room, controller = setup(
        "{scalableRef: {apiGroup: apps, kind: Deployment, name: app}, percentage: 20}",
        deployment_manifest("app", replicas=10, cpu="500m", memory="256Mi"),
    )
    controller.reconcile("default/warm")
    assert stored(cluster).status.replicas == 2
    assert stored(cluster).status.pod_template_ref == ""
    assert [pod.spec.requests["cpu"] for pod in room.pods()] == [500, 500]
    assert room.pods()[0].metadata.labels == {"app": "app"}
    # Scaling the workload wakes the buffer; a status change of it does not.
    app = cluster.scalable("Deployment", "default", "app")
    assert app is not None
    (watch,) = [w for w in controller.watches() if w.kind == "Deployment"]
    assert list(watch.mapper(app, dataclasses.replace(app, replicas=20))) == ["default/warm"]
    assert list(watch.mapper(app, dataclasses.replace(app))) == []


def test_a_deleted_buffer_gives_its_room_back() -> None:
    cluster, room, controller = setup("{podTemplateRef: {name: shape}, replicas: 1}", TEMPLATE)
    controller.reconcile("default/warm")
    assert room.pods()
    cluster.delete(stored(cluster))
    controller.reconcile("default/warm")
    assert room.pods() == []


def capacity(name: str, cpu: str) -> ExistingCapacity:
    return ExistingCapacity(
        name, "default", Requirements(), (), parse_resource_list({"cpu": cpu, "pods": "10"})
    )


def test_a_pass_places_the_room_writes_provisioning_and_disruption_counts_it() -> None:
    cluster, room, controller = setup("{podTemplateRef: {name: shape}, replicas: 2}", TEMPLATE)
    controller.reconcile("default/warm")
    one, two = room.pods()
    room.after_pass(Plan(existing={one.key: "node-a", two.key: "node-b"}), [])
    assert condition(cluster, "Provisioning") == ("True", "FitsExistingCapacity")
    assert room.on("node-a") == [one] and room.on("node-c") == []
    adjusted = with_buffer_room([capacity("node-a", "2"), capacity("node-c", "2")], room)
    assert adjusted[0].available["cpu"] == 1000 and adjusted[0].pods == (one,)
    assert adjusted[1].available["cpu"] == 2000
    # A pass that left one of them out says more capacity is needed.
    room.after_pass(Plan(existing={one.key: "node-a"}, unschedulable={two.key: "limits"}), [])
    assert condition(cluster, "Provisioning") == ("False", "RequiresNewCapacity")
    assert room.on("node-b") == []


def test_losing_capacity_that_holds_room_opens_a_batch() -> None:
    cluster, room, controller = setup("{podTemplateRef: {name: shape}, replicas: 1}", TEMPLATE)
    controller.reconcile("default/warm")
    (pod,) = room.pods()
    room.after_pass(Plan(existing={pod.key: "claim-a"}), [])
    spec = NodeClaimSpec(node_class_ref=NodeClassRef("karpenter.kwok.sh", "KWOKNodeClass", "default"))
    claim = NodeClaim(metadata=ObjectMeta(name="claim-a"), spec=spec)
    other = NodeClaim(metadata=ObjectMeta(name="claim-b"), spec=spec)
    assert room.lost(claim, None) and not room.lost(other, None)
    deleting = claim.with_metadata(deletion_timestamp=1.0)
    assert room.lost(claim, deleting) and not room.lost(claim, claim)

    provisioner = Provisioner(cluster, None, cluster.clock, buffers=room)  # type: ignore[arg-type]
    (watch,) = [w for w in provisioner.watches() if w.kind == "NodeClaim"]
    assert list(watch.mapper(claim, None)) == [BATCH_KEY]


def test_a_change_of_the_room_is_announced_and_opens_a_batch() -> None:
    cluster, room, controller = setup("{podTemplateRef: {name: shape}, replicas: 1}", TEMPLATE)
    announced: list[tuple[str, object, object]] = []
    room.subscribe(lambda kind, old, new: announced.append((kind, old, new)))
    controller.reconcile("default/warm")
    assert announced == [(BUFFER_ROOM, None, "default/warm")]
    # Resolved again to the same pods (its own status write, the 30 s resync): nothing to plan.
    controller.reconcile("default/warm")
    assert len(announced) == 1
    # A new shape is (the workload's or PodTemplate's template changed, its size).
    buffer = stored(cluster)
    cluster.update(dataclasses.replace(buffer, spec=dataclasses.replace(buffer.spec, replicas=3)))
    controller.reconcile("default/warm")
    assert len(announced) == 2 and len(room.pods()) == 3
    cluster.delete(stored(cluster))
    controller.reconcile("default/warm")
    assert len(announced) == 3 and room.pods() == []

    provisioner = Provisioner(cluster, None, cluster.clock, buffers=room)  # type: ignore[arg-type]
    (watch,) = [w for w in provisioner.watches() if w.kind == BUFFER_ROOM]
    assert list(watch.mapper(None, "default/warm")) == [BATCH_KEY]
    gate_off = Provisioner(cluster, None, cluster.clock)  # type: ignore[arg-type]
    assert not [w for w in gate_off.watches() if w.kind == BUFFER_ROOM]
