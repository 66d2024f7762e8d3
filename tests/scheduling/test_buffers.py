"""A CapacityBuffer resolved into virtual pods, and what a plan makes of them (karpy.scheduling.buffers)."""

from __future__ import annotations

import pytest
from tests.support import parse_object

from karpy.api.capacitybuffer import CapacityBuffer, CapacityBufferSpec, NamedPodTemplate
from karpy.api.core import Pod
from karpy.api.quantity import parse_resource_list
from karpy.api.requirements import Requirements
from karpy.scheduling.buffers import (
    BufferOutcome,
    buffer_key_of,
    buffer_replicas,
    is_virtual,
    limit_replicas,
    percentage_replicas,
    provisioning_outcome,
    provisioning_verdict,
    virtual_pods,
)
from karpy.scheduling.solver import NewNodeClaim, Plan

ONE_CPU = parse_resource_list({"cpu": "1", "memory": "512Mi"})


def spec(**fields: object) -> CapacityBufferSpec:
    return CapacityBufferSpec(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "scalable", "expected"),
    [
        ({"replicas": 3}, None, 3),
        ({"percentage": 20}, 10, 2),
        ({"percentage": 20}, 3, 1),  # rounded up, at least one
        ({"percentage": 20}, 0, 0),
        ({"percentage": 20, "replicas": 3}, 10, 3),  # the larger of the two
        ({"percentage": 50, "replicas": 3}, 10, 5),
        ({"limits": parse_resource_list({"cpu": "2"})}, None, 2),  # limits alone: as many as fit
        ({"limits": parse_resource_list({"cpu": "5"})}, None, 5),
        ({"replicas": 10, "limits": parse_resource_list({"cpu": "4"})}, None, 4),  # capped
        ({"replicas": 2, "limits": parse_resource_list({"memory": "10Gi"})}, None, 2),
        ({"replicas": 2, "limits": parse_resource_list({"nvidia.com/gpu": "1"})}, None, 2),  # limits nothing
        ({"percentage": 20}, None, 0),  # a percentage of no workload
    ],
)
def test_replicas_follow_karpenters_rules(
    fields: dict[str, object], scalable: int | None, expected: int
) -> None:
    assert buffer_replicas(spec(**fields), ONE_CPU, scalable) == expected


def test_percentage_and_limit_helpers() -> None:
    assert percentage_replicas(10, 0) == 0
    assert percentage_replicas(1, 1) == 1
    assert limit_replicas(parse_resource_list({"cpu": "2500m", "memory": "1Gi"}), ONE_CPU) == 2
    assert limit_replicas({}, ONE_CPU) is None


BUFFER = """
apiVersion: autoscaling.x-k8s.io/v1beta1
kind: CapacityBuffer
metadata: {name: warm, namespace: team, uid: u1}
spec:
  podTemplateRef: {name: shape}
  replicas: 2
  limits: {cpu: "8"}
"""

TEMPLATE = """
apiVersion: v1
kind: PodTemplate
metadata: {name: shape, namespace: team}
template:
  metadata: {labels: {app: warm}}
  spec:
    priorityClassName: high
    nodeSelector: {kubernetes.io/os: linux}
    containers: [{name: pause, image: pause, resources: {requests: {cpu: "1", memory: 512Mi}}}]
    volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
"""


def test_the_api_objects_parse_with_upstream_field_names() -> None:
    buffer = parse_object(BUFFER)
    assert isinstance(buffer, CapacityBuffer)
    assert buffer.spec.pod_template_ref == "shape"
    assert buffer.spec.replicas == 2
    assert buffer.spec.limits == parse_resource_list({"cpu": "8"})
    assert buffer.spec.provisioning_strategy == "buffer.x-k8s.io/active-capacity"
    template = parse_object(TEMPLATE)
    assert isinstance(template, NamedPodTemplate)
    assert template.template.spec.requests["cpu"] == ONE_CPU["cpu"]


def test_virtual_pods_carry_the_template_and_karpenters_marks_but_no_claims() -> None:
    template = parse_object(TEMPLATE).template
    pods = virtual_pods("team", "warm", "u1", template, 2, version="1/1")
    assert [pod.key for pod in pods] == ["team/capacity-buffer-warm-1", "team/capacity-buffer-warm-2"]
    for pod in pods:
        assert is_virtual(pod) and buffer_key_of(pod) == "team/warm"
        assert pod.metadata.labels == {"app": "warm"}
        assert pod.metadata.annotations["karpenter.sh/capacity-buffer-fake-pod"] == "true"
        assert pod.spec.priority == -(2**31)  # placed after every real pod
        assert pod.spec.node_selector == {"kubernetes.io/os": "linux"}
        assert pod.spec.claim_names == ()
        assert pod.spec.requests == template.spec.requests
        assert pod.is_provisionable()
        owner = pod.metadata.controller
        assert owner is not None and (owner.kind, owner.name) == ("CapacityBuffer", "warm")
    assert virtual_pods("team", "warm", "u1", template, 0) == []


def real_pod() -> Pod:
    pod = parse_object(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: app, namespace: team}\n"
        "spec: {containers: [{name: c, resources: {requests: {cpu: '1'}}}]}"
    )
    assert isinstance(pod, Pod) and not is_virtual(pod) and buffer_key_of(pod) == ""
    return pod


def test_the_outcome_counts_each_buffers_pods_by_where_the_plan_put_them() -> None:
    template = parse_object(TEMPLATE).template
    pods = [*virtual_pods("team", "warm", "u1", template, 3), real_pod()]
    plan = Plan(
        existing={"team/capacity-buffer-warm-1": "node-a", "team/app": "node-a"},
        new_nodeclaims=[NewNodeClaim("default", Requirements(), [], [pods[1]], {}, {})],
        unschedulable={"team/capacity-buffer-warm-3": "over the NodePool's limits"},
    )
    assert provisioning_outcome(plan, pods) == {"team/warm": BufferOutcome(existing=1, new=1, unplaced=1)}


def test_the_verdict_is_karpenters_provisioning_condition() -> None:
    fits = provisioning_verdict(3, BufferOutcome(existing=3))
    assert fits is not None and (fits.status, fits.reason) == ("True", "FitsExistingCapacity")
    new = provisioning_verdict(3, BufferOutcome(existing=1, new=2))
    assert new is not None and (new.status, new.reason) == ("False", "RequiresNewCapacity")
    failed = provisioning_verdict(3, BufferOutcome(existing=2, unplaced=1))
    assert failed is not None and failed.reason == "RequiresNewCapacity"
    assert provisioning_verdict(3, BufferOutcome(existing=2)) is None  # a plan of an older size
