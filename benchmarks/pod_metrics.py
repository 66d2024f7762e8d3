"""CPU of the pod metrics (``metrics.pod``) while 10,000 pods start, in one process.

``python -m benchmarks.pod_metrics`` replays the pod changes of the
10,000-pod run of ``benchmarks.run_scale`` through the ``metrics.pod``
controller as ``karpy run`` builds it (a resync of 5 s), on a virtual clock:
the pods are created over the first 30 s, each is marked unschedulable a
second after, bound to a node at a moment spread over 30–300 s (as the
nodes come up) and Running 5 s after its bind. Karpy run's queue is modelled
as it behaves: one worker, a key asked for while a pass runs is taken once
when it ends, and the resync comes back 5 s after each pass. Each pass takes
the CPU time it really takes here, so a slow pass delays the next as it does
in ``karpy run``.

It prints the passes over every waiting pod, the CPU seconds spent in the
controller (the changes and the passes), and the busiest 10 s of the
worker. The figures for this checkout are in benchmarks/README.md ("Pod
metrics while 10,000 pods start").
"""

from __future__ import annotations

import argparse
import heapq
import random
import time
from dataclasses import replace

from karpy.api.core import POD_RUNNING, Pod
from karpy.api.manifest import parse_manifests
from karpy.controllers.metering import POD_RESYNC, WAITING_PODS_KEY, PodMetrics
from karpy.operator.karpenter_metrics import Metrics
from karpy.sim.clock import VirtualClock

POD = """
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: scale}}
spec:
  containers:
  - name: main
    resources: {{requests: {{cpu: 1500m, memory: 1Gi}}}}
"""


def pods(count: int) -> list[Pod]:
    template = parse_manifests(POD.format(name="template"), "pod_metrics").objects[0].obj
    assert isinstance(template, Pod)
    return [replace(template, metadata=replace(template.metadata, name=f"scale-{i}")) for i in range(count)]


def changes(count: int, seed: int) -> list[tuple[float, int, Pod | None, Pod]]:
    """Each pod's changes as (moment, order, old, new), in time order."""
    rng = random.Random(seed)
    timeline: list[tuple[float, int, Pod | None, Pod]] = []
    for index, pod in enumerate(pods(count)):
        created_at = 30.0 * index / count
        created = replace(pod, metadata=replace(pod.metadata, creation_timestamp=created_at))
        unschedulable = replace(created, unschedulable_reason="Unschedulable")
        bound_at = rng.uniform(30.0, 300.0)
        bound = replace(unschedulable, spec=replace(unschedulable.spec, node_name=f"node-{index // 10}"))
        running = replace(bound, phase=POD_RUNNING)
        timeline += [
            (created_at, 0, None, created),
            (created_at + 1.0, 1, created, unschedulable),
            (bound_at, 2, unschedulable, bound),
            (bound_at + 5.0, 3, bound, running),
        ]
    timeline.sort(key=lambda change: (change[0], change[1]))
    return timeline


def replay(count: int, seed: int, until: float) -> tuple[int, float, float, float]:
    """The passes, CPU seconds in changes and in passes, and the worker's busiest 10 s (seconds)."""
    clock = VirtualClock(start=0.0)
    controller = PodMetrics(clock, Metrics(), resync=POD_RESYNC)
    timeline = changes(count, seed)
    due: list[float] = []  # the moments a pass is asked for (a heap)
    free_at = 0.0  # when the worker has finished its pass
    passes, in_changes, in_passes = 0, 0.0, 0.0
    busy: dict[int, float] = {}

    def run_passes(upto: float) -> None:
        nonlocal free_at, passes, in_passes
        while due and max(due[0], free_at) <= upto:
            start = max(heapq.heappop(due), free_at)
            due[:] = [moment for moment in due if moment > start]  # the queue folds what was asked
            heapq.heapify(due)
            clock.advance_to(max(clock.now(), start))
            began = time.process_time()
            requeue = controller.reconcile(WAITING_PODS_KEY)
            spent = time.process_time() - began
            passes += 1
            in_passes += spent
            busy[int(start // 10)] = busy.get(int(start // 10), 0.0) + spent
            free_at = start + spent
            if requeue is not None:
                heapq.heappush(due, free_at + requeue)

    for moment, _, old, new in timeline:
        run_passes(moment)
        clock.advance_to(max(clock.now(), moment))
        began = time.process_time()
        asked = list(controller._on_pod(old, new))
        in_changes += time.process_time() - began
        if asked:
            heapq.heappush(due, moment)
    run_passes(until)
    return passes, in_changes, in_passes, max(busy.values(), default=0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--until", type=float, default=600.0, help="seconds of the run replayed")
    args = parser.parse_args()
    passes, in_changes, in_passes, busiest = replay(args.pods, args.seed, args.until)
    print(f"{args.pods} pods, {args.until:.0f} s replayed")
    print(f"passes over every waiting pod: {passes}")
    print(f"CPU s in the changes: {in_changes:.2f}")
    print(f"CPU s in the passes: {in_passes:.2f}")
    total = in_changes + in_passes
    print(f"CPU s in all (mean cores over the run): {total:.2f} ({total / args.until:.3f})")
    print(f"busiest 10 s of the worker: {busiest:.2f} s")


if __name__ == "__main__":
    main()
