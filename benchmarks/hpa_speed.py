"""The simulator's speed with HorizontalPodAutoscalers: a day of a 300-node cluster, 20 HPAs.

Twenty Deployments (pods of 1 CPU, 1Gi) each have an HPA at 60% CPU
(min 2, max 120 replicas) and a daily sine of demand (mean 20 cores,
amplitude 12, 5% seeded noise, each with its own phase), on one NodePool
of c5.xlarge on-demand nodes: about 20 × 32/0.6 ≈ 1,070 pods at the daily
mean, 1,700 at the peak, so 300 to 550 nodes over the day. The HPAs sync
every 15 s (5,760 syncs each in a day); karpy provisions for the pods they
add and consolidates the nodes they free.

What is reported: the wall time of the run, the virtual time reached, the
HPA syncs done and the time spent in them, the nodes at the peak, and the
time of the three busiest controllers (so the figure says where the time
goes). The target is a simulated day in under 2 minutes.

Run: ``python -m benchmarks.hpa_speed [--hours H] [--workloads N]``.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from collections.abc import Callable

from karpy.api.manifest import parse_manifests
from karpy.sim.load import Demand, WorkloadLoad
from karpy.sim.scenario import Scenario, Step
from karpy.sim.simulation import Simulation

POOL = """
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
        - {key: node.kubernetes.io/instance-type, operator: In, values: [c5.xlarge]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 5m
"""

WORKLOAD = """
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web-{index}, namespace: default}}
spec:
  replicas: 30
  selector: {{matchLabels: {{app: web-{index}}}}}
  template:
    metadata: {{labels: {{app: web-{index}}}}}
    spec:
      containers:
        - name: app
          image: app
          resources: {{requests: {{cpu: "1", memory: 1Gi}}}}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {{name: web-{index}, namespace: default}}
spec:
  scaleTargetRef: {{apiVersion: apps/v1, kind: Deployment, name: web-{index}}}
  minReplicas: 2
  maxReplicas: 120
  metrics:
    - type: Resource
      resource: {{name: cpu, target: {{type: Utilization, averageUtilization: 60}}}}
"""


def scenario(hours: float, workloads: int) -> Scenario:
    text = POOL + "".join("---" + WORKLOAD.format(index=index) for index in range(workloads))
    loaded = parse_manifests(text, "hpa_speed")
    assert not loaded.errors, loaded.errors
    loads = [
        WorkloadLoad(
            "Deployment",
            "default",
            f"web-{index}",
            {"cpu": Demand("sine", mean=20.0, amplitude=12.0, phase=index * 1800.0, noise=0.05, seed=index)},
        )
        for index in range(workloads)
    ]
    return Scenario(
        name="hpa-speed",
        duration=hours * 3600.0,
        steps=[Step(at=0.0, action="apply", objects=loaded)],
        loads=loads,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--workloads", type=int, default=20)
    args = parser.parse_args()
    simulation = Simulation()
    spent: dict[str, float] = defaultdict(float)
    for name, controller in list(simulation.runtime._controllers.items()):  # timing only
        original: Callable[[str], float | None] = controller.reconcile

        def timed(
            key: str, original: Callable[[str], float | None] = original, name: str = name
        ) -> float | None:
            started = time.perf_counter()
            try:
                return original(key)
            finally:
                spent[name] += time.perf_counter() - started

        controller.reconcile = timed  # type: ignore[method-assign]
    started = time.perf_counter()
    simulation.run_scenario(scenario(args.hours, args.workloads))
    wall = time.perf_counter() - started
    simulated = simulation.clock.now() - simulation.hpa.start
    syncs = sum(len(samples) for samples in simulation.recorder.workloads.values())
    records = list(simulation.recorder.nodeclaims.values())
    peak = max(
        (
            sum(
                1
                for record in records
                if record.created_at <= moment and (record.deleted_at is None or record.deleted_at > moment)
            )
            for moment in {record.created_at for record in records}
        ),
        default=0,
    )
    print(f"simulated            {simulated / 3600:.2f} h ({args.workloads} HPAs, 15 s sync)")
    print(f"wall time            {wall:.1f} s")
    print(f"HPA syncs            {syncs} ({spent['sim.hpa']:.2f} s in the HPA controller)")
    print(f"nodes at the peak    {peak}")
    print(f"nodes launched       {len(simulation.recorder.nodeclaims)}")
    busiest = sorted(spent.items(), key=lambda item: -item[1])[:3]
    print("busiest controllers  " + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in busiest))


if __name__ == "__main__":
    main()
