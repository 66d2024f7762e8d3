"""Pods are sized as admission makes them, so a LimitRange does not make karpy launch nodes without end.

Karpenter's regression specs "should account for LimitRange Default (and
DefaultRequest) on daemonSet pods for resources" (test/suites/regression/
integration_test.go): a LimitRange in ``default`` with container defaults of
2 CPUs and 1Gi, a high-priority DaemonSet whose template sets only a memory
limit, and one replica asking for 4 bytes of memory. The DaemonSet's pod that
runs gets 2 CPUs from the LimitRange; a node sized for the template's pod is
too small for both pods, the DaemonSet pod wins by priority and the app pod
is pending again, node after node.
"""

from __future__ import annotations

import pytest
from tests.support import load_objects

from karpy.sim.simulation import Simulation

MINUTE = 60.0

NODE_CLASS_AND_POOL = """
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: default}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
  disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 0s}
"""

WORKLOADS = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high-priority-daemonsets}
value: 10000000
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: daemonset, namespace: default}
spec:
  selector: {matchLabels: {app: daemonset}}
  template:
    metadata: {labels: {app: daemonset}}
    spec:
      priorityClassName: high-priority-daemonsets
      containers: [{name: app, image: pause, resources: {limits: {memory: 1Gi}}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: large-app, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: large-app}}
  template:
    metadata: {labels: {app: large-app}}
    spec:
      containers: [{name: app, image: pause, resources: {requests: {memory: "4"}}}]
"""


def limit_range(field: str) -> str:
    return f"""
apiVersion: v1
kind: LimitRange
metadata: {{name: limitrange, namespace: default}}
spec:
  limits:
    - type: Container
      {field}: {{cpu: "2", memory: 1Gi}}
"""


def run(*manifests: str, minutes: float = 15) -> Simulation:
    simulation = Simulation()
    simulation.apply(load_objects(*manifests))
    simulation.run(minutes * MINUTE, until_steady=False)
    assert simulation.runtime.errors == []
    return simulation


@pytest.mark.parametrize("field", ["default", "defaultRequest"])
def test_one_node_holds_the_daemonset_pod_and_the_app_pod_under_a_limitrange(field: str) -> None:
    simulation = run(NODE_CLASS_AND_POOL, limit_range(field), WORKLOADS)
    nodes = list(simulation.cluster.nodes())
    assert len(nodes) == 1, [node.name for node in nodes]
    pods = {pod.metadata.labels["app"]: pod for pod in simulation.pods()}
    assert pods["large-app"].phase == "Running" and pods["large-app"].node_name == nodes[0].name
    assert pods["daemonset"].phase == "Running" and pods["daemonset"].node_name == nodes[0].name
    # The pods run as admission made them: 2 CPUs each, from the LimitRange.
    assert pods["daemonset"].spec.requests == {"cpu": 2000, "memory": 1024**3}
    assert pods["large-app"].spec.requests == {"cpu": 2000, "memory": 4}
    # No churn: the one node launched for them, in 15 minutes.
    assert len(simulation.recorder.nodeclaims) == 1
