"""Loading a cluster of 1,000 nodes and 20,000 pods into the simulator, and its first planning pass.

``karpy simulate --from-cluster`` lists the cluster once (:mod:`karpy.kube.snapshot`),
parses each object into karpy's record, turns the records into the simulator's
starting state (:func:`karpy.sim.from_cluster.starting_state`), seeds a simulation
with it (:func:`karpy.sim.from_cluster.seed`) and runs the controllers. This
benchmark builds the list answers an API server would give for such a cluster,
in process (no server: the network is not what is measured), and times each
stage:

- **parse**: the JSON objects into records, as the snapshot reader parses them
  (``parse_record``, with the CRD's structural checks);
- **convert**: :func:`starting_state`;
- **seed**: :func:`seed` into a fresh :class:`~karpy.sim.simulation.Simulation`
  (every object created in the in-memory store, every NodeClaim's instance
  taken into the simulated cloud);
- **first pass**: the controllers' first round at the start (``run_due``): the
  provisioner, the NodeClaim lifecycle of 1,000 claims, the workload
  controllers, and the first disruption pass over every node;
- **to steady**: the run from then until it is steady (consolidation of what
  the first pass found, and what follows), in cluster time and wall time.

The cluster: one KWOKNodeClass and one NodePool (m5 types, on-demand,
``WhenEmptyOrUnderutilized`` after 30 s); 1,000 m5.2xlarge nodes, each with
19 pods of 50 Deployments (300m CPU, 512Mi each: 5.7 of 7.9 allocatable
CPUs) and one pod of a DaemonSet; 20,000 pods in all.

:mod:`benchmarks.from_cluster_apiserver` measures the same commands on a cluster stored in the
project's control plane, read through its API server.

With ``--drift N`` the NodePool's requirements exclude N of the nodes (by a label of
theirs) and the simulation runs ``--minutes`` of cluster time from the start, each disruption
pass timed (:func:`measure_drift`): what a pass over N drifted nodes costs.

Run: ``python -m benchmarks.from_cluster [--nodes N] [--pods-per-node P] [--json]
[--drift N [--minutes M]]``.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from karpy.api.core import Pod
from karpy.api.snapshot import ClusterSnapshot
from karpy.disruption.method import Candidate
from karpy.kube._resources import (
    DAEMONSET,
    DEPLOYMENT,
    KWOK_NODE_CLASS,
    NODE,
    NODECLAIM,
    NODEPOOL,
    POD,
    REPLICA_SET,
)
from karpy.kube.snapshot import parse_objects
from karpy.scheduling.solver import Plan
from karpy.sim.from_cluster import seed, starting_state
from karpy.sim.scenario import Scenario
from karpy.sim.simulation import Simulation

T = TypeVar("T")
INSTANCE_TYPE = "m5.2xlarge"
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
DEPLOYMENTS = 50
POOL = "default"
# The label by which --drift N drifts every (nodes / N)th node (the NodePool then excludes one value).
GROUP_LABEL = "benchmark.karpy.dev/group"
# When the cluster is read; everything in it is older.
NOW = datetime(2026, 6, 1, 12, tzinfo=UTC).timestamp()


def _time(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _meta(name: str, namespace: str = "", **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "uid": f"uid-{namespace}-{name}",
        "creationTimestamp": _time(NOW - 3600),
    }
    if namespace:
        meta["namespace"] = namespace
    meta.update(extra)
    return meta


def _template(app: str, cpu: str, memory: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": app}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {"name": "app", "image": "pause", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
            ],
        },
    }


def cluster_lists(
    nodes: int, pods_per_node: int, drifted: int = 0, app_cpu: str = "300m", in_flight: int = 0
) -> dict[str, list[dict[str, Any]]]:
    """The list answers (items) of each kind, by kind, for the cluster this module describes.

    With ``drifted``, every node carries a ``GROUP_LABEL`` of one of ``nodes // drifted`` groups
    and the NodePool's requirements exclude the first group's: that many nodes have drifted.
    ``app_cpu`` is what each Deployment's pod requests; ``in_flight`` NodeClaims more are launched
    and have no Node yet.
    """
    node_class = {"metadata": _meta(POOL), "spec": {}}
    nodepool = {
        "metadata": _meta(POOL),
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": POOL},
                    "requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                        {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]},
                        *(
                            [{"key": GROUP_LABEL, "operator": "NotIn", "values": ["group-0"]}]
                            if drifted
                            else []
                        ),
                    ],
                }
            },
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "30s"},
        },
    }
    deployments, replicasets = [], []
    per_deployment = -(-nodes * (pods_per_node - 1) // DEPLOYMENTS)
    for index in range(DEPLOYMENTS):
        app = f"app-{index}"
        template = _template(app, app_cpu, "512Mi")
        deployments.append(
            {
                "metadata": _meta(app, "default"),
                "spec": {
                    "replicas": per_deployment,
                    "selector": {"matchLabels": {"app": app}},
                    "template": template,
                },
            }
        )
        rs_template = {**template, "metadata": {"labels": {"app": app, "pod-template-hash": "5d8f7c9b4"}}}
        owner = {"apiVersion": "apps/v1", "kind": "Deployment", "name": app, "uid": f"uid-default-{app}"}
        replicasets.append(
            {
                "metadata": _meta(
                    f"{app}-5d8f7c9b4", "default", ownerReferences=[{**owner, "controller": True}]
                ),
                "spec": {
                    "replicas": per_deployment,
                    "selector": {"matchLabels": {"app": app}},
                    "template": rs_template,
                },
            }
        )
    daemonset = {
        "metadata": _meta("agent", "kube-system"),
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": _template("agent", "100m", "128Mi"),
        },
    }
    allocatable = {"cpu": "7910m", "memory": "30310Mi", "pods": "58", "ephemeral-storage": "17Gi"}
    capacity = {"cpu": "8", "memory": "32Gi", "pods": "58", "ephemeral-storage": "20Gi"}
    node_items, claim_items, pod_items = [], [], []
    launched = _time(NOW - 1800)
    placed = 0
    for index in range(nodes):
        name = f"{POOL}-{index:05d}"
        zone = ZONES[index % len(ZONES)]
        labels = {
            "karpenter.sh/nodepool": POOL,
            "karpenter.sh/capacity-type": "on-demand",
            "node.kubernetes.io/instance-type": INSTANCE_TYPE,
            "topology.kubernetes.io/zone": zone,
            "kubernetes.io/hostname": name,
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
            "karpenter.sh/registered": "true",
            "karpenter.sh/initialized": "true",
        }
        if drifted:
            labels[GROUP_LABEL] = f"group-{index % max(1, nodes // drifted)}"
        claim_owner = {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "name": name,
            "uid": f"uid--{name}",
        }
        node_items.append(
            {
                "metadata": _meta(name, labels=labels, ownerReferences=[claim_owner]),
                "spec": {"providerID": f"kwok://{name}"},
                "status": {
                    "capacity": capacity,
                    "allocatable": allocatable,
                    "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": launched}],
                },
            }
        )
        conditions = [
            {"type": kind, "status": "True", "lastTransitionTime": launched, "reason": kind, "message": ""}
            for kind in ("Launched", "Registered", "Initialized", "Ready")
        ]
        claim_items.append(
            {
                "metadata": _meta(name, labels=labels, finalizers=["karpenter.sh/termination"]),
                "spec": {
                    "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": POOL},
                    "requirements": [
                        {
                            "key": "node.kubernetes.io/instance-type",
                            "operator": "In",
                            "values": [INSTANCE_TYPE],
                        }
                    ],
                },
                "status": {
                    "providerID": f"kwok://{name}",
                    "nodeName": name,
                    "capacity": capacity,
                    "allocatable": allocatable,
                    "conditions": conditions,
                    "lastPodEventTime": _time(NOW - 600),
                },
            }
        )
        ds_owner = {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "name": "agent",
            "uid": "uid-kube-system-agent",
        }
        pod_items.append(_pod(f"agent-{index:05d}", "kube-system", "agent", "100m", "128Mi", name, ds_owner))
        for _ in range(pods_per_node - 1):
            app = f"app-{placed % DEPLOYMENTS}"
            owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{app}-5d8f7c9b4"}
            owner["uid"] = f"uid-default-{app}-5d8f7c9b4"
            pod_items.append(_pod(f"{app}-{placed:06d}", "default", app, app_cpu, "512Mi", name, owner))
            placed += 1
    for index in range(in_flight):
        name = f"{POOL}-in-flight-{index}"
        # Launched a minute ago: well within the registration TTL, which would delete the claim.
        launched_only = [
            {
                "type": "Launched",
                "status": "True",
                "lastTransitionTime": _time(NOW - 60),
                "reason": "Launched",
            }
        ]
        claim_items.append(
            {
                "metadata": _meta(
                    name,
                    labels={
                        key: value
                        for key, value in claim_items[0]["metadata"]["labels"].items()
                        if key not in ("kubernetes.io/hostname", "karpenter.sh/registered", GROUP_LABEL)
                        and key != "karpenter.sh/initialized"
                    },
                    finalizers=["karpenter.sh/termination"],
                ),
                "spec": claim_items[0]["spec"],
                "status": {
                    "providerID": f"kwok://{name}",
                    "capacity": capacity,
                    "allocatable": allocatable,
                    "conditions": launched_only,
                },
            }
        )
    return {
        "KWOKNodeClass": [node_class],
        "NodePool": [nodepool],
        "Node": node_items,
        "NodeClaim": claim_items,
        "Deployment": deployments,
        "ReplicaSet": replicasets,
        "DaemonSet": [daemonset],
        "Pod": pod_items,
    }


def _pod(
    name: str, namespace: str, app: str, cpu: str, memory: str, node: str, owner: dict[str, Any]
) -> dict[str, Any]:
    started = _time(NOW - 1700)
    return {
        "metadata": _meta(
            name, namespace, labels={"app": app}, ownerReferences=[{**owner, "controller": True}]
        ),
        "spec": {**_template(app, cpu, memory)["spec"], "nodeName": node},
        "status": {
            "phase": "Running",
            "startTime": started,
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": started}],
        },
    }


RESOURCES = {
    resource.kind: resource
    for resource in (KWOK_NODE_CLASS, NODEPOOL, NODE, NODECLAIM, DEPLOYMENT, REPLICA_SET, DAEMONSET, POD)
}


def timed(what: Callable[[], T]) -> tuple[T, float, float]:
    """``what()``, and the wall and CPU seconds it took (on a shared machine the CPU time is the cost)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = what()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def measure(nodes: int, pods_per_node: int) -> dict[str, Any]:
    lists = cluster_lists(nodes, pods_per_node)
    for kind, items in lists.items():
        for item in items:
            item["apiVersion"], item["kind"] = RESOURCES[kind].api_version, kind
    gc.collect()
    unreadable: list[str] = []

    def parse() -> list[object]:
        return [
            record
            for kind, items in lists.items()
            for record in parse_objects(RESOURCES[kind], items, unreadable)
        ]

    figures: dict[str, Any] = {}

    def stage(name: str, what: Callable[[], T]) -> T:
        result, wall, cpu = timed(what)
        figures[f"{name}Seconds"] = round(wall, 2)
        figures[f"{name}CpuSeconds"] = round(cpu, 2)
        return result

    records = stage("parse", parse)
    assert not unreadable, unreadable[:3]
    state = stage("convert", lambda: starting_state(ClusterSnapshot(tuple(records), NOW)))
    simulation = Simulation(start=state.start)
    notes = stage("seed", lambda: seed(simulation, state))
    assert not [note for note in notes if "unpriced" in note], notes[:3]
    figures["firstPassReconciles"] = stage("firstPass", simulation.runtime.run_due)
    stages = ("parse", "convert", "seed", "firstPass")
    figures["loadAndFirstPassSeconds"] = round(sum(figures[f"{name}Seconds"] for name in stages), 2)
    figures["loadAndFirstPassCpuSeconds"] = round(sum(figures[f"{name}CpuSeconds"] for name in stages), 2)
    figures["nodeclaimsAfterFirstPass"] = simulation.cluster.count("NodeClaim")
    stage("toSteady", lambda: simulation.run_scenario(Scenario(name="cluster", duration=3600.0)))
    return {
        "nodes": state.count("Node"),
        "pods": state.count("Pod"),
        **figures,
        "toSteadyClusterSeconds": round(simulation.clock.elapsed, 1),
        "nodeclaimsAtSteady": simulation.cluster.count("NodeClaim"),
        "steady": simulation.steady(),
    }


def drifted_simulation(nodes: int, pods_per_node: int, drifted: int) -> tuple[Simulation, float]:
    """A simulation seeded with the cluster of :func:`measure_drift`, and the registration delay
    of the NodeClaims it launches (the seeded in-flight ones never register)."""
    # Pods that fill their nodes: a drifted node's pods fit nowhere but on its replacement, as on a
    # packed cluster, so each pass finds the candidates waiting on the replacements in flight.
    app_cpu = f"{(7910 - 100) // (pods_per_node - 1)}m"
    # Two NodeClaims launched whose Nodes do not join in the run: the drifted nodes' pods would
    # land on them, so every candidate of every pass is refused (waiting on an uninitialized node).
    lists = cluster_lists(nodes, pods_per_node, drifted, app_cpu, in_flight=2)
    for kind, items in lists.items():
        for item in items:
            item["apiVersion"], item["kind"] = RESOURCES[kind].api_version, kind
    unreadable: list[str] = []
    records = [
        record
        for kind, items in lists.items()
        for record in parse_objects(RESOURCES[kind], items, unreadable)
    ]
    assert not unreadable, unreadable[:3]
    state = starting_state(ClusterSnapshot(tuple(records), NOW))
    simulation = Simulation(start=state.start)
    registration_delay = simulation.cloud.settings.registration_delay
    simulation.cloud.settings.registration_delay = 10 * 24 * 3600.0  # the seeded in-flight claims'
    seed(simulation, state)
    return simulation, registration_delay


def measure_drift(nodes: int, pods_per_node: int, drifted: int, minutes: float) -> dict[str, Any]:
    """The disruption passes of ``minutes`` of cluster time once ``drifted`` nodes have drifted.

    The cluster is loaded and seeded as :func:`measure` does it, its nodes full, with the NodePool's
    requirements excluding ``drifted`` nodes' group label; then the simulation runs (the
    simulation ``karpy plan`` makes) and each disruption pass's decision is timed in CPU
    seconds. ``decisionsDigest`` is a hash of every pass's command and of why each node was
    held back, to tell that a change of speed changed no decision.
    """
    simulation, registration_delay = drifted_simulation(nodes, pods_per_node, drifted)
    controller = simulation.disruption
    decide = controller.decide
    passes: list[float] = []
    commands: dict[str, int] = {}
    decisions = hashlib.sha256()

    def timed_decide() -> Any:
        cpu = time.process_time()
        decided = decide()
        passes.append(time.process_time() - cpu)
        command = decided[0]
        described = "" if command is None else f"{command.reason} {command.candidates} {command.description}"
        if command is not None:
            commands[command.reason] = commands.get(command.reason, 0) + 1
        blocked = sorted((name, why.kind.value, why.message) for name, why in controller.blocked.items())
        decisions.update(repr((round(simulation.clock.elapsed, 3), described, blocked)).encode())
        return decided

    controller.decide = timed_decide  # type: ignore[method-assign]
    place_elsewhere = controller._place_elsewhere
    simulations = [0]

    def counted_place_elsewhere(candidate: Candidate, pods: Sequence[Pod]) -> Plan:
        simulations[0] += 1
        return place_elsewhere(candidate, pods)

    controller._place_elsewhere = counted_place_elsewhere  # type: ignore[method-assign]
    gc.collect()
    _, wall, cpu = timed(
        lambda: simulation.run_scenario(
            Scenario(name="drift", duration=minutes * 60, registration_delay=registration_delay)
        )
    )
    return {
        "nodes": simulation.cluster.count("Node"),
        "pods": simulation.cluster.count("Pod"),
        "driftedNodes": drifted,
        "clusterSeconds": round(simulation.clock.elapsed, 1),
        "wallSeconds": round(wall, 2),
        "cpuSeconds": round(cpu, 2),
        "disruptionPasses": len(passes),
        "cpuSecondsPerPass": round(sum(passes) / max(1, len(passes)), 3),
        "candidatesSimulated": simulations[0],
        "slowestPassCpuSeconds": round(max(passes, default=0.0), 3),
        "commands": commands,
        "nodeclaimsAtEnd": simulation.cluster.count("NodeClaim"),
        "decisionsDigest": decisions.hexdigest()[:16],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods-per-node", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--drift",
        type=int,
        metavar="N",
        help="drift N nodes by a NodePool requirement and time the disruption passes that follow",
    )
    parser.add_argument("--minutes", type=float, default=2.0, help="cluster time to run with --drift")
    args = parser.parse_args(argv)
    if args.drift:
        figures = measure_drift(args.nodes, args.pods_per_node, args.drift, args.minutes)
    else:
        figures = measure(args.nodes, args.pods_per_node)
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        for key, value in figures.items():
            print(f"{key:28} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
