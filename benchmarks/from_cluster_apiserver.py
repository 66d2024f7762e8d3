"""``karpy simulate --from-cluster`` and ``karpy plan`` on a cluster of 1,000 nodes and 20,000 pods.

The cluster is stored in the project's control plane (``scripts/control-plane``: etcd,
kube-apiserver with its watch cache on as in a real cluster, kube-scheduler,
kube-controller-manager), then each command runs as a process of its own, as a user
runs it, and is timed: wall seconds, CPU seconds and peak RSS of the process, and per
stage (reading the cluster, split into the lists and their parse; the starting state;
the seed; the run) as :mod:`benchmarks.timed_karpy` measures them.

The cluster (:func:`cluster`), as a real one looks to karpy:

- ten namespaces, a PriorityClass, a KWOKNodeClass and the NodePool ``general``
  (on-demand m5 or c5);
- ``nodes`` Nodes: nine in ten karpy's (a NodeClaim each, initialized, every fifth a
  c5.2xlarge, the rest m5.2xlarge, in three zones), one in ten not (a node group's
  m5.2xlarge nodes, no NodeClaim);
- 50 Deployments with their ReplicaSets (300m CPU, 512Mi per pod, half of them with
  the PriorityClass, every other one with a PodDisruptionBudget of ``maxUnavailable:
  1``), a DaemonSet with a pod on every node, and the Deployment ``batch`` whose pods
  (3 CPUs each, one in a hundred of the pods) fit no node and stay Pending;
- ``pods`` pods in all: the DaemonSet's, the pending ones, and the Deployments' spread
  evenly over the nodes, bound and Running (status written as a kubelet writes it).

Every object is created through the API server by the admin user, many at once; an
owner reference names its owner's uid, so an owner is created before what it owns.
There is no kubelet, so the controllers that would act on the stored objects are off
(``KARPY_CONTROLLER_MANAGER_ARGS``): the Deployment, ReplicaSet, DaemonSet and StatefulSet
controllers (they would make pods of their own while the loader makes them) and the
node lifecycle and taint eviction controllers (no heartbeat: they would evict every
pod). The statuses those controllers write are written by the loader.

Then, each run once: ``karpy simulate --from-cluster --duration D`` and ``karpy plan
FILE`` with FILE the NodePool allowing m5 only: the c5 nodes (a fifth of karpy's)
drift. The load average (``os.getloadavg``) is recorded before each figure.

Run: ``python -m benchmarks.from_cluster_apiserver [--nodes N] [--pods P] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.run_scale import control_plane, install_crds
from karpy.kube._http import (
    CONTENT_MERGE_PATCH,
    HTTP_CONFLICT,
    HTTP_TOO_MANY_REQUESTS,
    ApiStatusError,
    ApiTransport,
)
from karpy.kube._resources import (
    DAEMONSET,
    DEPLOYMENT,
    KWOK_NODE_CLASS,
    NAMESPACE,
    NODE,
    NODECLAIM,
    NODEPOOL,
    POD,
    POD_DISRUPTION_BUDGET,
    PRIORITY_CLASS,
    REPLICA_SET,
    ResourceType,
)

REPO = Path(__file__).resolve().parents[1]
POOL = "general"
NAMESPACES = [f"team-{index}" for index in range(10)]
DEPLOYMENTS = 50
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
PRIORITY_CLASS_NAME = "business-critical"
TEMPLATE_HASH = "5d8f7c9b4"
PAUSE_DIGEST = "ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a"
# Every fifth of karpy's nodes is a c5: the share the plan's NodePool drifts.
DRIFTED_TYPE, KEPT_TYPE = "c5.2xlarge", "m5.2xlarge"
DRIFT_EVERY = 5
# One node in UNMANAGED_EVERY belongs to a node group, not to karpy.
UNMANAGED_EVERY = 10
# Requests in flight at once while storing the cluster.
LOADERS = 16
# The controllers that would act on what the loader stores (see the module's docstring).
CONTROLLERS_OFF = (
    "deployment-controller",
    "replicaset-controller",
    "daemonset-controller",
    "statefulset-controller",
    "node-lifecycle-controller",
    "taint-eviction-controller",
)
CAPACITY = {
    KEPT_TYPE: {"cpu": "8", "memory": "32Gi", "pods": "58", "ephemeral-storage": "20Gi"},
    DRIFTED_TYPE: {"cpu": "8", "memory": "16Gi", "pods": "58", "ephemeral-storage": "20Gi"},
}
ALLOCATABLE = {
    KEPT_TYPE: {"cpu": "7910m", "memory": "30310Mi", "pods": "58", "ephemeral-storage": "17Gi"},
    DRIFTED_TYPE: {"cpu": "7910m", "memory": "14480Mi", "pods": "58", "ephemeral-storage": "17Gi"},
}


def log(message: str) -> None:
    print(f"[from_cluster_apiserver] {message}", file=sys.stderr, flush=True)


def _time(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- the cluster ----------------------------------------------------------------------


@dataclass
class Item:
    """One object to store: its body, the status written after it, and the owner its references name."""

    resource: ResourceType
    body: dict[str, Any]
    status: dict[str, Any] | None = None
    # (kind, namespace, name) of the controller whose uid the object's ownerReference takes.
    owner: tuple[str, str, str] | None = None


@dataclass
class Cluster:
    """The objects to store, in stages: an object's owner is in an earlier stage."""

    stages: list[list[Item]] = field(default_factory=list)
    managed_nodes: int = 0
    drifting_nodes: int = 0
    pending_pods: int = 0

    def count(self, kind: str) -> int:
        return sum(1 for stage in self.stages for item in stage if item.resource.kind == kind)


def _requests(cpu: str, memory: str) -> dict[str, Any]:
    return {"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": memory}}


def _pod_spec(app: str, cpu: str, memory: str, priority: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 30,
        "containers": [
            {
                "name": app,
                "image": "registry.k8s.io/pause:3.10",
                "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                "env": [{"name": "APP", "value": app}, {"name": "LOG_LEVEL", "value": "info"}],
                "resources": _requests(cpu, memory),
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10},
            }
        ],
    }
    if priority:
        spec["priorityClassName"] = PRIORITY_CLASS_NAME
    return spec


def _workload(
    resource: ResourceType,
    name: str,
    namespace: str,
    labels: dict[str, str],
    spec: dict[str, Any],
    replicas: int | None,
    status: dict[str, Any],
    owner: tuple[str, str, str] | None = None,
) -> Item:
    body_spec: dict[str, Any] = {
        "selector": {"matchLabels": labels},
        "template": {"metadata": {"labels": labels}, "spec": spec},
    }
    if replicas is not None:
        body_spec["replicas"] = replicas
    body = {"metadata": {"name": name, "namespace": namespace, "labels": labels}, "spec": body_spec}
    return Item(resource, body, {**status, "observedGeneration": 1}, owner)


def _replica_status(replicas: int, ready: int) -> dict[str, Any]:
    return {"replicas": replicas, "readyReplicas": ready, "availableReplicas": ready}


def _node_and_claim(index: int, managed: bool, now: float) -> list[Item]:
    name = f"node-{index:05d}"
    instance_type = DRIFTED_TYPE if managed and index % DRIFT_EVERY == 0 else KEPT_TYPE
    zone = ZONES[index % len(ZONES)]
    labels = {
        "node.kubernetes.io/instance-type": instance_type,
        "topology.kubernetes.io/zone": zone,
        "kubernetes.io/hostname": name,
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
    }
    if managed:
        family, size = instance_type.split(".")
        labels |= {
            "karpenter.k8s.aws/instance-family": family,
            "karpenter.k8s.aws/instance-size": size,
            "karpenter.k8s.aws/instance-category": family[0],
            "karpenter.k8s.aws/instance-cpu": "8",
            "karpenter.sh/nodepool": POOL,
            "karpenter.sh/capacity-type": "on-demand",
            "karpenter.sh/registered": "true",
            "karpenter.sh/initialized": "true",
        }
    else:
        labels |= {"node-group": "system"}
    launched = _time(now - 7200)
    conditions = [
        {"type": kind, "status": "False", "reason": f"Kubelet{ok}", "lastHeartbeatTime": _time(now)}
        for kind, ok in (("MemoryPressure", "HasSufficientMemory"), ("DiskPressure", "HasNoDiskPressure"))
    ] + [{"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": _time(now)}]
    for condition in conditions:
        condition["lastTransitionTime"] = launched
    node_status = {
        "capacity": CAPACITY[instance_type],
        "allocatable": ALLOCATABLE[instance_type],
        "conditions": conditions,
        "addresses": [
            {"type": "InternalIP", "address": f"10.{index // 65536}.{index // 256 % 256}.{index % 256}"},
            {"type": "Hostname", "address": name},
        ],
        "nodeInfo": {
            "architecture": "amd64",
            "operatingSystem": "linux",
            "kubeletVersion": "v1.37.2",
            "containerRuntimeVersion": "containerd://2.1.0",
            "kernelVersion": "6.12.0",
            "osImage": "Bottlerocket OS 1.40.0",
            "machineID": f"{index:032x}",
            "systemUUID": f"{index:032x}",
            "bootID": f"{index:032x}",
            "kubeProxyVersion": "",
        },
    }
    node = Item(
        NODE,
        {"metadata": {"name": name, "labels": labels}, "spec": {"providerID": f"kwok://{name}"}},
        node_status,
        ("NodeClaim", "", name) if managed else None,
    )
    if not managed:
        return [node]
    claim = Item(
        NODECLAIM,
        {
            "metadata": {"name": name, "labels": labels, "finalizers": ["karpenter.sh/termination"]},
            "spec": {
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": POOL},
                "requirements": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [instance_type]},
                    {"key": "karpenter.sh/nodepool", "operator": "In", "values": [POOL]},
                ],
            },
        },
        {
            "providerID": f"kwok://{name}",
            "nodeName": name,
            "capacity": CAPACITY[instance_type],
            "allocatable": ALLOCATABLE[instance_type],
            "conditions": [
                {
                    "type": kind,
                    "status": "True",
                    "lastTransitionTime": launched,
                    "reason": kind,
                    "message": "",
                }
                for kind in ("Launched", "Registered", "Initialized", "Ready")
            ],
            "lastPodEventTime": _time(now - 3600),
        },
    )
    return [claim, node]


def _pod(
    name: str,
    namespace: str,
    labels: dict[str, str],
    spec: dict[str, Any],
    node: str | None,
    owner: tuple[str, str, str],
    now: float,
    index: int,
) -> Item:
    body_spec = dict(spec)
    if node is not None:
        body_spec["nodeName"] = node
    body = {"metadata": {"name": name, "namespace": namespace, "labels": labels}, "spec": body_spec}
    if node is None:
        return Item(POD, body, None, owner)  # kube-scheduler finds it no node and says so
    started = _time(now - 3000)
    container = spec["containers"][0]
    status = {
        "phase": "Running",
        "hostIP": "10.0.0.1",
        "podIP": f"10.{64 + index // 65536}.{index // 256 % 256}.{index % 256}",
        "startTime": started,
        "conditions": [
            {"type": kind, "status": "True", "lastTransitionTime": started}
            for kind in (
                "PodReadyToStartContainers",
                "Initialized",
                "Ready",
                "ContainersReady",
                "PodScheduled",
            )
        ],
        "containerStatuses": [
            {
                "name": container["name"],
                "image": container["image"],
                "imageID": f"registry.k8s.io/pause@sha256:{PAUSE_DIGEST}",
                "containerID": f"containerd://{index:064x}",
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": started}},
            }
        ],
    }
    return Item(POD, body, status, owner)


def cluster(nodes: int, pods: int, now: float) -> Cluster:
    """The objects of the cluster the module's docstring describes."""
    result = Cluster()
    basics = [Item(NAMESPACE, {"metadata": {"name": name}}) for name in NAMESPACES]
    basics.append(
        Item(
            PRIORITY_CLASS,
            {"metadata": {"name": PRIORITY_CLASS_NAME}, "value": 100000, "description": "user facing"},
        )
    )
    basics.append(Item(KWOK_NODE_CLASS, {"metadata": {"name": POOL}, "spec": {}}))
    basics.append(
        Item(
            NODEPOOL,
            {
                "metadata": {"name": POOL},
                "spec": nodepool_spec(["m5", "c5"]),
            },
        )
    )
    claims: list[Item] = []
    node_items: list[Item] = []
    for index in range(nodes):
        for item in _node_and_claim(index, managed=index % UNMANAGED_EVERY != UNMANAGED_EVERY - 1, now=now):
            (claims if item.resource is NODECLAIM else node_items).append(item)
    result.managed_nodes = len(claims)
    result.drifting_nodes = sum(
        1
        for claim in claims
        if claim.body["metadata"]["labels"]["node.kubernetes.io/instance-type"] == DRIFTED_TYPE
    )
    node_names = [item.body["metadata"]["name"] for item in node_items]

    pending = pods // 100
    per_app = pods - nodes - pending
    deployments: list[tuple[str, str, dict[str, Any], int]] = []  # name, namespace, pod spec, replicas
    for index in range(DEPLOYMENTS):
        replicas = per_app // DEPLOYMENTS + (1 if index < per_app % DEPLOYMENTS else 0)
        deployments.append(
            (
                f"app-{index}",
                NAMESPACES[index % len(NAMESPACES)],
                _pod_spec(f"app-{index}", "300m", "512Mi", index % 2 == 0),
                replicas,
            )
        )
    batch_spec = _pod_spec("batch", "3", "4Gi", priority=False)
    workloads, replica_sets, budgets, pod_items = [], [], [], []
    for name, namespace, spec, replicas in [*deployments, ("batch", NAMESPACES[0], batch_spec, pending)]:
        ready = 0 if name == "batch" else replicas
        labels = {"app": name}
        workloads.append(
            _workload(DEPLOYMENT, name, namespace, labels, spec, replicas, _replica_status(replicas, ready))
        )
        rs_labels = {**labels, "pod-template-hash": TEMPLATE_HASH}
        replica_sets.append(
            _workload(
                REPLICA_SET,
                f"{name}-{TEMPLATE_HASH}",
                namespace,
                rs_labels,
                spec,
                replicas,
                _replica_status(replicas, ready),
                ("Deployment", namespace, name),
            )
        )
        if name != "batch" and int(name.split("-")[1]) % 2 == 1:
            budgets.append(
                Item(
                    POD_DISRUPTION_BUDGET,
                    {
                        "metadata": {"name": name, "namespace": namespace},
                        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}},
                    },
                )
            )
    agent_labels = {"app": "node-agent"}
    agent_spec = _pod_spec("node-agent", "100m", "128Mi", priority=False)
    agent_spec["tolerations"] = [{"operator": "Exists"}]
    scheduled = {"desiredNumberScheduled": nodes, "numberReady": nodes, "numberAvailable": nodes}
    workloads.append(
        _workload(
            DAEMONSET,
            "node-agent",
            "kube-system",
            agent_labels,
            agent_spec,
            None,
            {
                **scheduled,
                "currentNumberScheduled": nodes,
                "updatedNumberScheduled": nodes,
                "numberMisscheduled": 0,
            },
        )
    )
    for index, node in enumerate(node_names):
        pod_items.append(
            _pod(
                f"node-agent-{index:05d}",
                "kube-system",
                agent_labels,
                agent_spec,
                node,
                ("DaemonSet", "kube-system", "node-agent"),
                now,
                index,
            )
        )
    placed = 0
    for name, namespace, spec, replicas in deployments:
        for replica in range(replicas):
            node = node_names[placed % len(node_names)]
            pod_items.append(
                _pod(
                    f"{name}-{TEMPLATE_HASH}-{replica:05d}",
                    namespace,
                    {"app": name, "pod-template-hash": TEMPLATE_HASH},
                    spec,
                    node,
                    ("ReplicaSet", namespace, f"{name}-{TEMPLATE_HASH}"),
                    now,
                    nodes + placed,
                )
            )
            placed += 1
    for replica in range(pending):
        pod_items.append(
            _pod(
                f"batch-{TEMPLATE_HASH}-{replica:05d}",
                NAMESPACES[0],
                {"app": "batch", "pod-template-hash": TEMPLATE_HASH},
                batch_spec,
                None,
                ("ReplicaSet", NAMESPACES[0], f"batch-{TEMPLATE_HASH}"),
                now,
                0,
            )
        )
    result.pending_pods = pending
    result.stages = [basics, claims, [*node_items, *workloads, *budgets], replica_sets, pod_items]
    return result


def nodepool_spec(families: list[str]) -> dict[str, Any]:
    return {
        "template": {
            "spec": {
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": POOL},
                "requirements": [
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                    {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": families},
                    {"key": "karpenter.k8s.aws/instance-size", "operator": "In", "values": ["2xlarge"]},
                ],
            }
        },
        "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "5m"},
    }


# -- storing it ---------------------------------------------------------------------------


class Loader:
    """Creates the objects through the API server, many requests at once, and writes their status."""

    def __init__(self, transport: ApiTransport) -> None:
        self.transport = transport
        self.uids: dict[tuple[str, str, str], str] = {}
        self.lock = threading.Lock()
        self.requests = 0

    def _send(self, method: str, path: str, body: dict[str, Any], content_type: str) -> dict[str, Any]:
        for attempt in range(10):
            try:
                with self.lock:
                    self.requests += 1
                return self.transport.request(method, path, body=body, content_type=content_type).body
            except ApiStatusError as error:
                if (error.code != HTTP_TOO_MANY_REQUESTS and error.code < 500) or attempt == 9:
                    raise
            time.sleep(0.2 * (attempt + 1))
        raise AssertionError("unreachable")

    def store(self, item: Item) -> None:
        meta = item.body["metadata"]
        namespace = meta.get("namespace", "")
        body = {"apiVersion": item.resource.api_version, "kind": item.resource.kind, **item.body}
        if item.owner is not None:
            kind, _, owner_name = item.owner
            api_version = "karpenter.sh/v1" if kind == "NodeClaim" else "apps/v1"
            reference = {
                "apiVersion": api_version,
                "kind": kind,
                "name": owner_name,
                "uid": self.uids[item.owner],
                "controller": True,
                "blockOwnerDeletion": True,
            }
            body["metadata"] = {**meta, "ownerReferences": [reference]}
        try:
            created = self._send("POST", item.resource.collection_path(namespace), body, "application/json")
            uid = created["metadata"]["uid"]
        except ApiStatusError as error:
            if error.code != HTTP_CONFLICT:  # stored by an earlier attempt whose answer was lost
                raise
            path = item.resource.object_path(namespace, meta["name"])
            uid = self.transport.request("GET", path).body["metadata"]["uid"]
        with self.lock:
            self.uids[(item.resource.kind, namespace, meta["name"])] = uid
        if item.status is not None:
            path = item.resource.object_path(namespace, meta["name"], "status")
            self._send("PATCH", path, {"status": item.status}, CONTENT_MERGE_PATCH)

    def store_all(self, items: list[Item]) -> None:
        with ThreadPoolExecutor(LOADERS, thread_name_prefix="loader") as pool:
            for _ in pool.map(self.store, items):
                pass


# -- timing karpy -------------------------------------------------------------------------


def run_timed(name: str, arguments: list[str], work: Path, timeout: float | None = None) -> dict[str, Any]:
    """Run ``karpy ARGUMENTS`` as a process of its own; its wall, CPU and peak RSS, and its stages.

    Past ``timeout`` seconds it is interrupted (SIGINT: its stages are still written), and the
    figures say so (``finished``) and how far its run got (``stoppedAt``, its last progress line).
    """
    stages = work / f"{name}-stages.json"
    stdout, stderr = work / f"{name}.out", work / f"{name}.err"
    load = os.getloadavg()[0]
    log(f"karpy {' '.join(arguments)} (load average {load:.2f})")
    started = time.perf_counter()
    with stdout.open("wb") as out, stderr.open("wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.timed_karpy", str(stages), *arguments],
            stdout=out,
            stderr=err,
            cwd=REPO,
        )
        stopper = threading.Timer(timeout or 0.0, process.send_signal, (signal.SIGINT,))
        if timeout is not None:
            stopper.start()
        _, status, usage = os.wait4(process.pid, 0)
        stopper.cancel()
        process.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    finished = process.returncode == 0
    if not finished and not (timeout is not None and wall >= timeout):
        raise RuntimeError(f"karpy {name} exited {process.returncode}:\n{stderr.read_text()[-2000:]}")
    figures: dict[str, Any] = {
        "loadAverage": round(load, 2),
        "loadAverageAfter": round(os.getloadavg()[0], 2),
        "finished": finished,
        "wallSeconds": round(wall, 2),
        "cpuSeconds": round(usage.ru_utime + usage.ru_stime, 2),
        "peakRssMiB": round(usage.ru_maxrss / 1024, 1),
        **json.loads(stages.read_text()),
    }
    figures["restSeconds"] = round(wall - figures.get("readSeconds", 0.0), 2)
    figures["restCpuSeconds"] = round(figures["cpuSeconds"] - figures.get("readCpuSeconds", 0.0), 2)
    figures["listCpuSeconds"] = round(figures["readCpuSeconds"] - figures["parseCpuSeconds"], 2)
    if not finished:
        progress = [line for line in stderr.read_text().splitlines() if "cluster time" in line]
        figures["stoppedAt"] = progress[-1].split(": ", 1)[-1] if progress else "before the run"
    figures["output"] = json.loads(stdout.read_text()) if finished else {}
    return figures


@dataclass
class Measured:
    figures: dict[str, Any]
    simulate_output: dict[str, Any]
    plan_output: dict[str, Any]


def measure(
    nodes: int,
    pods: int,
    simulate_duration: str,
    plan_duration: str | None,
    work_dir: Path | None = None,
    plan_timeout: float | None = None,
    kubeconfig: Path | None = None,
) -> Measured:
    """Store the cluster, then time the two commands; their outputs and logs are left in ``work_dir``."""
    settings = {
        "KARPY_WATCH_CACHE": "true",
        "KARPY_CONTROLLER_MANAGER_ARGS": "--controllers=*,"
        + ",".join(f"-{name}" for name in CONTROLLERS_OFF),
    }
    work = work_dir or Path(tempfile.mkdtemp(prefix="karpy-from-cluster-"))
    work.mkdir(parents=True, exist_ok=True)
    with control_plane(kubeconfig, fake_kubelet=False, settings=settings) as config:
        install_crds(config)
        transport = ApiTransport.from_kubeconfig(config)
        loader = Loader(transport)
        now = time.time()
        wanted = cluster(nodes, pods, now)
        figures: dict[str, Any] = {
            "nodes": wanted.count("Node"),
            "karpyNodes": wanted.managed_nodes,
            "driftingNodes": wanted.drifting_nodes,
            "pods": wanted.count("Pod"),
            "pendingPods": wanted.pending_pods,
            "objects": sum(len(stage) for stage in wanted.stages),
            "storeLoadAverage": round(os.getloadavg()[0], 2),
        }
        log(f"storing {figures['objects']} objects ({figures['nodes']} nodes, {figures['pods']} pods)")
        started = time.perf_counter()
        for stage in wanted.stages:
            loader.store_all(stage)
            log(f"{len(loader.uids)} objects stored in {time.perf_counter() - started:.1f} s")
        figures["storeSeconds"] = round(time.perf_counter() - started, 1)
        figures["storeRequests"] = loader.requests
        transport.close()
        log(f"stored in {figures['storeSeconds']} s ({loader.requests} requests)")
        simulate = run_timed(
            "simulate",
            [
                "simulate",
                "--from-cluster",
                "--kubeconfig",
                str(config),
                "--duration",
                simulate_duration,
                "-o",
                "json",
            ],
            work,
        )
        manifest = work / "nodepool.yaml"
        manifest.write_text(
            json.dumps(
                {
                    "apiVersion": NODEPOOL.api_version,
                    "kind": "NodePool",
                    "metadata": {"name": POOL},
                    "spec": nodepool_spec(["m5"]),
                }
            )
        )
        plan_arguments = ["plan", str(manifest), "--kubeconfig", str(config), "-o", "json"]
        if plan_duration is not None:
            plan_arguments += ["--duration", plan_duration]
        plan = run_timed("plan", plan_arguments, work, plan_timeout)
    log(f"the commands' outputs and logs are in {work}")
    simulate_output, plan_output = simulate.pop("output"), plan.pop("output")
    return Measured({**figures, "simulate": simulate, "plan": plan}, simulate_output, plan_output)


def summary(measured: Measured) -> Iterator[str]:
    figures = measured.figures
    for key, value in figures.items():
        if not isinstance(value, dict):
            yield f"{key:28} {value}"
    drifted = [d for d in measured.plan_output.get("disruptions", []) if d.get("reason") == "Drifted"]
    yield f"{'plan: drifted NodeClaims':28} {len(drifted)}"
    for command in ("simulate", "plan"):
        yield f"-- karpy {command}"
        for key, value in figures[command].items():
            yield f"{key:28} {value}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument(
        "--pods", type=int, default=20000, help="pods in all (DaemonSet's and pending included)"
    )
    parser.add_argument("--simulate-duration", default="2m", help="karpy simulate's --duration")
    parser.add_argument("--plan-duration", help="karpy plan's --duration (default: its own)")
    parser.add_argument(
        "--plan-timeout",
        type=float,
        metavar="SECONDS",
        help="interrupt karpy plan after this long (default: none)",
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the figures to FILE")
    parser.add_argument(
        "--work-dir", type=Path, help="where the commands' outputs and logs go (default: a new temporary dir)"
    )
    args = parser.parse_args(argv)
    measured = measure(
        args.nodes, args.pods, args.simulate_duration, args.plan_duration, args.work_dir, args.plan_timeout
    )
    for line in summary(measured):
        print(line)
    if args.json is not None:
        args.json.write_text(json.dumps(measured.figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
