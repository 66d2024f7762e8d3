"""NodePool limits and pod priority, end to end in the simulator.

A NodePool's limits are counted at the largest option of every NodeClaim
not yet launched (Karpenter's rule: the limit holds whatever type the cloud
picks); as Karpenter does, options that would break what the limits leave
are dropped and the NodeClaim launches with the rest, so a limit the
cluster is far from leaves no pod pending.
"""

from __future__ import annotations

from tests.support import KWOK_NODE_CLASS, deployment_manifest, load_objects

from karpy.sim.simulation import Simulation


def any_type_nodepool(limits: str) -> str:
    """The ``default`` NodePool on the KWOK node class, every instance type allowed."""
    return f"""
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: default}}
spec:
  template:
    spec:
      nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}}
      requirements: []
  limits: {limits}
"""


def priority_pod(name: str, cpu: str, priority: int) -> str:
    return f"""
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  priority: {priority}
  containers: [{{name: main, resources: {{requests: {{cpu: "{cpu}", memory: 1Gi}}}}}}]
"""


def run(*manifests: str) -> Simulation:
    simulation = Simulation()
    simulation.apply(load_objects(KWOK_NODE_CLASS, *manifests))
    simulation.run(900)
    return simulation


def running(simulation: Simulation) -> list[str]:
    return sorted(pod.metadata.name for pod in simulation.pods() if pod.phase == "Running")


def launched_cpu(simulation: Simulation) -> int:
    return sum(claim.status.capacity.get("cpu", 0) for claim in simulation.nodeclaims())


def test_all_five_pods_run_under_a_limit_the_cluster_is_far_from() -> None:
    # These five pods once got two nodes, and three stayed pending "at its cpu limit" for good.
    simulation = run(any_type_nodepool("{cpu: 100, memory: 400Gi}"), deployment_manifest(replicas=5))
    assert len(running(simulation)) == 5
    assert simulation.provisioner.last.unschedulable == {}
    assert launched_cpu(simulation) <= 100_000
    assert simulation.steady()


def test_under_a_limit_that_binds_as_many_pods_run_as_the_limit_allows() -> None:
    simulation = run(any_type_nodepool("{cpu: 8}"), deployment_manifest(replicas=10))
    assert len(running(simulation)) == 7  # on one 8-CPU node; 2-CPU nodes would take four
    assert launched_cpu(simulation) <= 8_000
    stuck = simulation.provisioner.last.unschedulable
    assert len(stuck) == 3 and all(
        "NodePool default is at its cpu limit" in reason for reason in stuck.values()
    )


def test_the_high_priority_pods_run_when_the_limit_allows_only_some() -> None:
    simulation = run(
        any_type_nodepool("{cpu: 2}"),
        priority_pod("batch", "1500m", 0),
        priority_pod("web", "1", 1000),
    )
    # One 2-CPU node, room for one of them: the larger would go first but for priority. (The
    # simulated kube-scheduler binds by priority too, so the plan is what tells the difference.)
    assert list(simulation.provisioner.last.unschedulable) == ["default/batch"]
    assert running(simulation) == ["web"]
