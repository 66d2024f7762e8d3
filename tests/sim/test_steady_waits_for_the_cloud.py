"""A run is not steady while something the scenario scheduled in the cloud is still ahead.

Spot is refused for the first 30 minutes on a pool that allows spot and
on-demand: the pods land on on-demand nodes and the cluster looks settled
within a minute. It is settled only on the refusal: once spot is offered
again, consolidation replaces the on-demand nodes by cheaper spot ones.
"""

from __future__ import annotations

from pathlib import Path

from karpy.sim.scenario import load_inputs
from karpy.sim.simulation import Simulation

WINDOW_END = 30 * 60.0

SCENARIO = """
apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {name: spot-refused-for-30m}
spec:
  duration: 2h
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
                    - {key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]}
                    - key: node.kubernetes.io/instance-type
                      operator: In
                      values: [c5.large, c5.xlarge, m5.large, m5.xlarge]
              disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 30s}
          - apiVersion: apps/v1
            kind: Deployment
            metadata: {name: app, namespace: default}
            spec:
              replicas: 3
              selector: {matchLabels: {app: app}}
              template:
                metadata: {labels: {app: app}}
                spec:
                  containers: [{name: app, image: pause, resources: {requests: {cpu: "1", memory: 1Gi}}}]
"""


def run(tmp_path: Path, text: str = SCENARIO) -> Simulation:
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    scenario, problems = load_inputs([path])
    assert problems.errors == []
    simulation = Simulation()
    simulation.run_scenario(scenario)
    assert simulation.runtime.errors == []
    return simulation


def test_the_run_goes_on_past_a_spot_refusal_and_ends_on_spot(tmp_path: Path) -> None:
    simulation = run(tmp_path)
    elapsed = simulation.clock.now() - simulation.clock.start
    assert elapsed >= WINDOW_END
    assert simulation.steady()
    # During the window the pods could only go on on-demand nodes...
    launched_in_window = [
        record
        for record in simulation.recorder.nodeclaims.values()
        if record.launched_at is not None and record.launched_at - simulation.clock.start < WINDOW_END
    ]
    assert launched_in_window and {r.capacity_type for r in launched_in_window} == {"on-demand"}
    # ... and after it consolidation moved them to cheaper spot capacity.
    assert {claim.capacity_type for claim in simulation.nodeclaims()} == {"spot"}
    running = [pod for pod in simulation.pods() if pod.phase == "Running" and not pod.is_daemonset_pod]
    assert len(running) == 3


def test_a_window_ending_after_the_run_does_not_hold_it(tmp_path: Path) -> None:
    simulation = run(tmp_path, SCENARIO.replace("duration: 2h", "duration: 20m"))
    elapsed = simulation.clock.now() - simulation.clock.start
    assert elapsed < 20 * 60  # steady before the end: the window's end is not within the run
    assert {claim.capacity_type for claim in simulation.nodeclaims()} == {"on-demand"}


def test_an_open_ended_window_does_not_hold_the_run(tmp_path: Path) -> None:
    simulation = run(tmp_path, SCENARIO.replace(", until: 30m}", "}"))
    elapsed = simulation.clock.now() - simulation.clock.start
    assert elapsed < 15 * 60
    assert {claim.capacity_type for claim in simulation.nodeclaims()} == {"on-demand"}
