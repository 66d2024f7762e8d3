"""Helpers shared by the test modules (imported as tests.support)."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from karpy.api.core import Pod
from karpy.api.instancetype import InstanceType, Offering, Overhead
from karpy.api.manifest import LoadedObject, parse_manifests
from karpy.api.nodepool import NodePool
from karpy.api.requirements import (
    LABEL_ARCH,
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    LABEL_OS,
    LABEL_ZONE,
    Requirement,
    Requirements,
)
from karpy.cli import main

DATA = Path(__file__).parent / "data"


@contextlib.contextmanager
def root_logging_kept() -> Iterator[None]:
    """Put the root logger's handlers and level back afterwards.

    ``karpy run`` installs its own handler on the root logger, writing to the
    stderr of the moment: under capsys that stream is closed after the test, and
    every later log record would print a logging error into other tests' output.
    """
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def simulate_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any], str]:
    code, out, err = run_cli(capsys, "simulate", "--output", "json", *args)
    return code, json.loads(out), err


def make_instance_type(
    name: str,
    cpu: int,
    memory_gib: int,
    price: float,
    *,
    arch: str = "amd64",
    zones: tuple[str, ...] = ("zone-a", "zone-b"),
    capacity_types: tuple[str, ...] = ("spot", "on-demand"),
    pods: int = 110,
) -> InstanceType:
    """A synthetic instance type with no overhead: allocatable equals capacity."""
    offerings = tuple(
        Offering(zone, capacity_type, price * (0.4 if capacity_type == "spot" else 1.0))
        for zone in zones
        for capacity_type in capacity_types
    )
    requirements = Requirements.from_labels({LABEL_INSTANCE_TYPE: name, LABEL_ARCH: arch, LABEL_OS: "linux"})
    requirements.add(Requirement.from_operator(LABEL_ZONE, "In", zones))
    requirements.add(Requirement.from_operator(LABEL_CAPACITY_TYPE, "In", capacity_types))
    capacity = {"cpu": cpu * 1000, "memory": memory_gib * 1024**3, "pods": pods}
    return InstanceType.build(name, requirements, offerings, capacity, Overhead())


def load_objects(*texts: str) -> list[LoadedObject]:
    """The objects of YAML documents joined into one stream; failing the test on any error."""
    result = parse_manifests("\n---\n".join(texts), "test.yaml")
    assert not result.errors, result.errors
    return result.objects


def parse_object(text: str) -> Any:
    result = parse_manifests(text, "test.yaml")
    assert not result.errors, result.errors
    assert len(result.objects) == 1
    return result.objects[0].obj


def make_pod(
    name: str,
    cpu: str = "1",
    memory: str = "1Gi",
    *,
    namespace: str = "default",
    extra_spec: str = "",
    labels: str = "{}",
) -> Pod:
    text = f"""
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {namespace}, labels: {labels}}}
spec:
  containers:
    - name: main
      resources: {{requests: {{cpu: "{cpu}", memory: "{memory}"}}}}
{extra_spec}
"""
    pod = parse_object(text)
    assert isinstance(pod, Pod)
    return pod


def make_nodepool(name: str = "default", spec: str = "", template_spec: str = "") -> NodePool:
    # The CRD requires requirements (an empty list is fine).
    requirements = "" if "requirements:" in template_spec else "      requirements: []"
    text = f"""
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {name}}}
spec:
  template:
    spec:
      nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}}
{requirements}
{template_spec}
{spec}
"""
    nodepool = parse_object(text)
    assert isinstance(nodepool, NodePool)
    return nodepool


# Manifests for simulator tests: one KWOK node class, one NodePool, Deployments.
KWOK_NODE_CLASS = """
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: default}
"""


def kwok_nodepool(
    extra_spec: str = "",
    disruption: str = "consolidateAfter: 30s",
    instance_types: Sequence[str] = ("c5.large", "c5.xlarge", "m5.large", "m5.xlarge"),
) -> str:
    """The ``default`` NodePool on the KWOK node class, limited to ``instance_types``."""
    return f"""
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: default}}
spec:
  template:
    spec:
      nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}}
      requirements:
        - key: node.kubernetes.io/instance-type
          operator: In
          values: [{", ".join(instance_types)}]
  disruption: {{{disruption}}}
{extra_spec}
"""


def deployment_manifest(
    name: str = "app", replicas: int = 3, cpu: str = "1", annotations: str = "{}", memory: str = "1Gi"
) -> str:
    """A Deployment of ``replicas`` pods labelled ``app: name``, one container requesting cpu and memory."""
    return f"""
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: default}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}, annotations: {annotations}}}
    spec:
      containers: [{{name: main, resources: {{requests: {{cpu: "{cpu}", memory: {memory}}}}}}}]
"""


def spot_ec2_cluster(instance_types: Sequence[str] = ("m5.large", "c5.large")) -> str:
    """An EC2NodeClass and the ``default`` NodePool on it, spot or on-demand, limited to ``instance_types``.

    The simulated cloud gives its instances AWS provider IDs (``aws:///<zone>/i-...``) and, as
    Karpenter's AWS provider, launches spot whenever the pool allows it and spot is available.
    """
    nodepool = (
        kwok_nodepool(
            disruption="consolidationPolicy: WhenEmpty, consolidateAfter: 1h", instance_types=instance_types
        )
        .replace(
            "{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}",
            "{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}",
        )
        .replace(
            "      requirements:\n",
            "      requirements:\n"
            "        - {key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]}\n",
        )
    )
    return f"""
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {{name: default}}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{{alias: al2023@latest}}]
  subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: demo}}}}]
  securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: demo}}}}]
---
{nodepool}"""
