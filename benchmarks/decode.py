"""How fast ``karpy run`` takes a big cluster into its caches, under three garbage-collector settings.

An informer's first list of a large cluster allocates millions of small
objects (the decoded JSON, then karpy's records) and frees almost none:
they are the cache. CPython's cyclic garbage collector runs a generation-0
pass every 700 allocations and, every few of those, older passes that walk
everything allocated so far, so filling a cache costs time quadratic-ish in
its size for no garbage found. This measures filling the Pod cache from one
list body of N pods shaped like a kube-apiserver's (managedFields, status
conditions, owner references), in a fresh process per setting:

- ``default``: CPython's thresholds (700, 10, 10);
- ``karpy``: what ``karpy run`` sets at start (``karpy.run.tune_gc``):
  everything allocated at start-up frozen out of the collector's view and a
  first-generation threshold of 100,000;
- ``disabled``: no cyclic collection at all, the floor.

``python -m benchmarks.decode [--pods N]``; figures in benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing
import resource
import time
from multiprocessing.connection import Connection
from typing import Any

import orjson

SETTINGS = ("default", "karpy", "disabled")


def pod_json(index: int) -> dict[str, Any]:
    """One bound, running pod as the apiserver lists it."""
    name = f"web-{index // 100}-{index:06d}"
    return {
        "metadata": {
            "name": name,
            "namespace": "shop",
            "uid": f"00000000-0000-0000-0000-{index:012d}",
            "resourceVersion": str(1000 + index),
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app": f"web-{index // 100}", "pod-template-hash": "5d8f7c9b6"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"web-{index // 100}-5d8f7c9b6",
                    "uid": "11111111-0000-0000-0000-000000000000",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                {
                    "manager": "kube-controller-manager",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2026-01-01T00:00:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}, "f:spec": {}},
                }
            ],
        },
        "spec": {
            "nodeName": f"node-{index // 20}",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/web:1.0",
                    "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}},
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                }
            ],
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}
            ],
            "schedulerName": "default-scheduler",
            "priority": 0,
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": kind, "status": "True", "lastTransitionTime": "2026-01-01T00:00:05Z"}
                for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
            ],
            "podIP": f"10.0.{index // 250 % 250}.{index % 250}",
        },
    }


def list_body(pods: int) -> bytes:
    return orjson.dumps({"kind": "PodList", "apiVersion": "v1", "items": [pod_json(i) for i in range(pods)]})


def _fill(setting: str, body: bytes, sender: Connection) -> None:
    from karpy.kube._resources import POD
    from karpy.kube.cluster import KubeCluster
    from karpy.run import tune_gc

    if setting == "karpy":
        tune_gc()
    elif setting == "disabled":
        gc.disable()
    cluster = KubeCluster(None)  # type: ignore[arg-type]  # the cache alone: no request is made
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    for item in orjson.loads(body)["items"]:
        cluster.apply(POD, "ADDED", item)
    seconds = time.perf_counter() - started
    collections = sum(stats["collections"] for stats in gc.get_stats())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    sender.send((seconds, collections, before * 1024, peak * 1024, len(list(cluster.pods()))))


def measure(setting: str, body: bytes) -> tuple[float, int, int, int, int]:
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_fill, args=(setting, body, sender))
    process.start()
    result: tuple[float, int, int, int, int] = receiver.recv()
    process.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=50_000)
    args = parser.parse_args()
    body = list_body(args.pods)
    print(
        f"filling the Pod cache from one list of {args.pods:,} pods ({len(body) / 1024**2:.0f} MiB of JSON)"
    )
    print(f"{'gc setting':<10}  {'seconds':>8}  {'pods/s':>8}  {'collections':>11}  {'peak RSS':>9}")
    for setting in SETTINGS:
        seconds, collections, _, peak, cached = measure(setting, body)
        assert cached == args.pods
        print(
            f"{setting:<10}  {seconds:8.2f}  {args.pods / seconds:8,.0f}  {collections:11,}  "
            f"{peak / 1024**2:7.0f} MiB"
        )


if __name__ == "__main__":
    main()
