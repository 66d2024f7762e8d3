"""Memory and CPU of scraping ``/metrics`` at 10,000 pods, in one process.

``python -m benchmarks.metrics_scrape`` fills Karpenter's metrics as ``karpy
run`` would at the end of the 10,000-pod run of ``benchmarks.run_scale``: the
simulator runs 10,000 pods of 1500m/1Gi onto c5.4xlarge nodes (1,000 Nodes)
with the same metric controllers, so ``karpenter_pods_state`` has a series per
pod and the node gauges a series per node and resource, with their labels.
Then it serves the registry on ``/metrics`` with ``karpy run``'s endpoints and
scrapes it over HTTP ``--scrapes`` times, as a Prometheus would, while

- the node metrics pass (``metrics.node``) replaces its series again and
  again in a thread of its own, as the reconcile loop does every 5 s, and
- ``--threads`` threads allocate and free objects that live a while, as
  ``karpy run``'s informers, reconcile workers and launch pools do. glibc gives
  each thread's allocations a malloc arena of its own (up to eight per core),
  and the threading HTTP server serves each scrape in a new thread: memory a
  scrape frees in an arena another thread also keeps objects in is not given
  back, so what a scrape allocates decides how far the resident set grows.

It prints the resident set (``VmRSS``) once filled and after every fifth
scrape, the peak (``VmHWM``), and each scrape's wall time and the CPU time
the process spent on it (rendering and sending; the node pass and the
threads run meanwhile, so the CPU figure is an upper bound), and at the end
the CPU time of the ``/metrics`` route's rendering alone, in one thread. Run it with
``MALLOC_ARENA_MAX=2`` in the environment to see the part glibc's arenas play.
The figures for this checkout are in benchmarks/README.md ("Karpenter's
metrics at 10,000 pods").
"""

from __future__ import annotations

import argparse
import random
import re
import threading
import time
from pathlib import Path
from urllib.request import urlopen

from karpy.api.manifest import parse_manifests
from karpy.controllers.metering import NodeMetrics
from karpy.observability import Endpoints, Health, ObservabilitySettings
from karpy.operator.karpenter_metrics import Metrics
from karpy.sim.simulation import Simulation, SimulationSettings

MANIFESTS = """
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
      - {key: node.kubernetes.io/instance-type, operator: In, values: [c5.4xlarge]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: app, namespace: default}
spec:
  replicas: %d
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      containers:
      - name: app
        image: app
        resources: {requests: {cpu: 1500m, memory: 1Gi}}
"""


def memory_mb() -> tuple[float, float]:
    """The resident set and its peak, MB."""
    status = Path("/proc/self/status").read_text()
    figures = [re.search(rf"{field}:\s+(\d+)", status) for field in ("VmRSS", "VmHWM")]
    rss, peak = (int(found.group(1)) / 1024 if found else 0.0 for found in figures)
    return rss, peak


def fill(pods: int) -> tuple[Simulation, Metrics]:
    metrics = Metrics()
    simulation = Simulation(SimulationSettings(), metrics=metrics)
    loaded = parse_manifests(MANIFESTS % pods, "metrics_scrape")
    if loaded.errors:
        raise SystemExit(f"{loaded.errors}")
    simulation.apply(loaded.objects)
    simulation.run(600)
    running = sum(1 for pod in simulation.pods() if pod.phase == "Running")
    if running != pods:
        raise SystemExit(f"only {running} of {pods} pods running")
    return simulation, metrics


def churn(stop: threading.Event, seed: int) -> None:
    """Keep a few thousand objects of 0.5 to 4 KB, replacing some every few milliseconds."""
    rng = random.Random(seed)
    kept: list[bytes] = [bytes(rng.randrange(512, 4096)) for _ in range(2000)]
    while not stop.is_set():
        for _ in range(50):
            kept[rng.randrange(len(kept))] = bytes(rng.randrange(512, 4096))
        time.sleep(0.005)


def scrape_once(port: int | None) -> tuple[int, int]:
    """Read ``/metrics`` as it comes, keeping none of it (the scraper's memory is not karpy's):
    its size and how many samples it has (lines not comments)."""
    size = lines = comments = 0
    last = b"\n"
    with urlopen(f"http://127.0.0.1:{port}/metrics") as response:
        while chunk := response.read(64 * 1024):
            size += len(chunk)
            lines += chunk.count(b"\n")
            comments += chunk.count(b"\n#") + (last == b"\n" and chunk.startswith(b"#"))
            last = chunk[-1:]
    return size, lines - comments


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--scrapes", type=int, default=60)
    parser.add_argument("--threads", type=int, default=16, help="threads allocating meanwhile")
    args = parser.parse_args()

    started = time.perf_counter()
    simulation, metrics = fill(args.pods)
    node_metrics = NodeMetrics(simulation.cluster, simulation.clock, metrics, resync=5.0)
    node_metrics.reconcile("all")
    print(f"filled in {time.perf_counter() - started:.0f} s: {len(list(simulation.cluster.nodes()))} Nodes")

    stop = threading.Event()

    def node_passes() -> None:
        while not stop.is_set():
            node_metrics.reconcile("all")
            time.sleep(0.5)

    workers = [threading.Thread(target=node_passes, daemon=True)]
    workers += [threading.Thread(target=churn, args=(stop, n), daemon=True) for n in range(args.threads)]
    for worker in workers:
        worker.start()
    endpoints = Endpoints(metrics.registry, Health(lambda: True), ObservabilitySettings(metrics_port=0))
    endpoints.start()
    time.sleep(1.0)
    before, _ = memory_mb()
    print(f"before the first scrape: RSS {before:.0f} MB")
    walls: list[float] = []
    cpus: list[float] = []
    size = samples = 0
    try:
        for scrape in range(1, args.scrapes + 1):
            wall, cpu = time.perf_counter(), time.process_time()
            size, samples = scrape_once(endpoints.metrics_port)
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
            if scrape == 1 or scrape % 5 == 0:
                rss, peak = memory_mb()
                print(f"scrape {scrape}: RSS {rss:.0f} MB (peak {peak:.0f} MB), {walls[-1]:.2f} s")
        rss, peak = memory_mb()  # before the threads stop and free what they keep
    finally:
        stop.set()
        endpoints.stop()
    for worker in workers:
        worker.join()
    # What the route does for a scrape, alone in this thread: the CPU a Prometheus costs every 15 s.
    renders = []
    for _ in range(10):
        cpu = time.thread_time()
        endpoints._metrics()
        renders.append(time.thread_time() - cpu)
    print(
        f"/metrics: {size / 1e6:.1f} MB, {samples} samples; "
        f"RSS {before:.0f} MB before the scrapes, {rss:.0f} MB after {args.scrapes} "
        f"(+{rss - before:.0f} MB), peak {peak:.0f} MB; "
        f"a scrape: {sum(walls) / len(walls):.2f} s wall (max {max(walls):.2f} s), "
        f"{sum(cpus) / len(cpus):.2f} s CPU; rendering alone {sum(renders) / len(renders):.3f} s CPU"
    )


if __name__ == "__main__":
    main()
