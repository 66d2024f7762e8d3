"""A scale-in in the simulator: consolidation moves few pods to end as cheap (issue 31).

Karpenter's performance suite's basic shape at a fifth (100 pods of 900m/3100Mi and
100 of 3500m/28Gi on Karpenter's kwok instance types, nodes registering 5 s after
launch), scaled in to 70 + 70 as ``benchmarks.side_by_side`` does. karpy used to merge
19 nodes into 14 new ones for a quarter of their price, evicting 125 pods in all, and
drop 3 commands at their validation because the pods of the last one were still
moving. A merge into several NodeClaims must now pay for the pods it moves
(``multi_node.merge_rejection``), and consolidation waits for the pods of the nodes it
deleted to land (``Orchestrator.evicting``): 71 pods evicted, no command dropped, and a
fleet of 22 NodeClaims instead of 25.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest

from karpy.sim.scenario import load_inputs
from karpy.sim.simulation import Simulation

SCALE_IN_AT = 300.0
SCALED_IN = 60  # pods the scale-in itself deletes

CLUSTER = """
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: default}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 30s
    budgets: [{nodes: 100%}]
  template:
    spec:
      expireAfter: Never
      requirements:
        - {key: kubernetes.io/os, operator: In, values: [linux]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
        - {key: karpenter.kwok.sh/instance-size, operator: Lt, values: ["32"]}
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
"""


def deployment(name: str, cpu: str, memory: str) -> str:
    return f"""
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: default}}
spec:
  replicas: 100
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers:
        - name: app
          image: registry.k8s.io/pause:3.9
          resources: {{requests: {{cpu: {cpu}, memory: {memory}}}}}
"""


SCENARIO = f"""
apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {{name: basic-scale-in}}
spec:
  duration: 1h
  cloud: {{registrationDelay: 5s, kwokInstanceTypes: karpenter}}
  steps:
    - {{at: 0s, apply: {{files: [cluster.yaml, deployments.yaml]}}}}
    - {{at: {SCALE_IN_AT:g}s, scale: {{kind: Deployment, namespace: default, name: small, replicas: 70}}}}
    - {{at: {SCALE_IN_AT:g}s, scale: {{kind: Deployment, namespace: default, name: large, replicas: 70}}}}
"""


class _Messages(logging.Handler):
    """The messages logged after the scale-in."""

    def __init__(self, simulation: Simulation) -> None:
        super().__init__()
        self.simulation = simulation
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        clock = self.simulation.clock
        if clock.now() - clock.start > SCALE_IN_AT:
            self.messages.append(record.getMessage())


@dataclass(frozen=True, slots=True)
class _Run:
    simulation: Simulation
    # Pods deleted after the scale-in (the scale-in's own included).
    pods_deleted: int
    # The disruption controller's messages after the scale-in.
    messages: list[str]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> _Run:
    directory = tmp_path_factory.mktemp("basic-scale-in")
    (directory / "cluster.yaml").write_text(CLUSTER)
    (directory / "deployments.yaml").write_text(
        deployment("small", "900m", "3100Mi") + "---" + deployment("large", "3500m", "28Gi")
    )
    (directory / "scenario.yaml").write_text(SCENARIO)
    scenario, problems = load_inputs([directory / "scenario.yaml"])
    assert not problems.errors, problems.errors
    simulation = Simulation()
    deleted: list[float] = []

    def watch(kind: str, old: object | None, new: object | None) -> None:
        if kind == "Pod" and old is not None and new is None:
            deleted.append(simulation.clock.now() - simulation.clock.start)

    simulation.cluster.subscribe(watch)
    handler = _Messages(simulation)
    logger = logging.getLogger("karpy.disruption")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        simulation.run_scenario(scenario)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert simulation.runtime.errors == []
    after = [moment for moment in deleted if moment > SCALE_IN_AT]
    return _Run(simulation, len(after), handler.messages)


def test_a_scale_in_consolidates_with_few_pods_moved(run: _Run) -> None:
    evicted = run.pods_deleted - SCALED_IN
    assert evicted <= 80, evicted  # 125 before
    assert len(run.simulation.nodeclaims()) <= 22  # 25 before: no dearer for it


def test_no_command_is_dropped_while_the_pods_of_the_last_still_move(run: _Run) -> None:
    dropped = [message for message in run.messages if "no longer valid" in message]
    assert dropped == []  # 3 before
