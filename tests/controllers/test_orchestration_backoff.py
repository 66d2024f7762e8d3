"""A consolidation whose replacement is refused is not retried pass after pass.

Spot is refused in every offering for 30 minutes on a pool of many instance
types. The pods land on on-demand nodes; consolidation then prices a spot
replacement on an offering the cloud has not refused yet, launches it, sees
it refused and rolls the command back. Without a back-off the next pass picks
the next spot offering and does the same again, tainting the node each time.
With it, the candidates wait 1, 2, 4, 8 ... minutes between attempts.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import pairwise
from pathlib import Path

from karpy.controllers.orchestration import REPLACEMENT_BACKOFF_CAP
from karpy.sim.scenario import load_inputs
from karpy.sim.simulation import Simulation

SCENARIO = """
apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {name: spot-refused-many-types}
spec:
  duration: 30m
  cloud:
    capacityFailures:
      - {capacityType: spot, from: 0s, until: 30m}
  steps:
    - at: 0s
      apply:
        objects:
          - apiVersion: karpenter.k8s.aws/v1
            kind: EC2NodeClass
            metadata: {name: default}
            spec:
              amiSelectorTerms: [{alias: al2023@latest}]
              role: KarpenterNodeRole-demo
              subnetSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
              securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
          - apiVersion: karpenter.sh/v1
            kind: NodePool
            metadata: {name: default}
            spec:
              template:
                spec:
                  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
                  requirements:
                    - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}
                    - {key: karpenter.k8s.aws/instance-generation, operator: Gt, values: ["4"]}
                    - {key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]}
              disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 30s}
          - apiVersion: apps/v1
            kind: Deployment
            metadata: {name: web, namespace: default}
            spec:
              replicas: 6
              selector: {matchLabels: {app: web}}
              template:
                metadata: {labels: {app: web}}
                spec:
                  containers: [{name: app, image: pause, resources: {requests: {cpu: "1", memory: 2Gi}}}]
"""


def test_a_refused_replacement_is_backed_off_not_retried_every_pass(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(SCENARIO)
    scenario, problems = load_inputs([path])
    assert problems.errors == []
    simulation = Simulation()
    simulation.run_scenario(scenario)
    assert simulation.runtime.errors == []
    failures: dict[str, list[float]] = defaultdict(list)
    for event in simulation.cluster.events:
        if event.reason == "DisruptionFailed" and event.kind == "NodeClaim":
            failures[event.name].append(event.time)
    # Spot is refused throughout, so attempts are made and fail: the back-off is what is tested.
    assert failures
    for times in failures.values():
        # Each failure of a node waits twice as long as the one before, from a minute up to
        # ten: attempts at 0, 1, 3, 7, 15 and 25 minutes after the first at the soonest.
        gaps = [later - earlier for earlier, later in pairwise(times)]
        for attempt, gap in enumerate(gaps):
            assert gap >= 60.0 * min(REPLACEMENT_BACKOFF_CAP / 60.0, 2**attempt)
        assert len(times) <= 6
    assert sum(len(times) for times in failures.values()) < 11
