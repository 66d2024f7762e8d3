"""A fake kubelet for nodes that have no machine behind them.

It plays the kubelet's part towards the API server for every Node annotated
``kwok.x-k8s.io/node: fake`` (the annotation kwok uses), and for nothing else:

* the Node's status gets the conditions a healthy kubelet posts (Ready, and no
  memory, disk or PID pressure), node info, addresses, and allocatable equal to
  capacity where those are missing; it goes through the ``nodes/status``
  subresource, and nothing is removed (not taints, not labels: the node lifecycle
  controller lifts the ``not-ready`` taint itself once the node is Ready);
* a Lease in ``kube-node-lease`` is renewed every few seconds, so the node
  lifecycle controller sees a live kubelet and never marks the node NotReady;
* pods bound to the node (``spec.nodeName``) are reported Running: phase, the
  Initialized/ContainersReady/Ready conditions, running container statuses, a
  pod IP (through the ``pods/status`` subresource);
* a pod on the node that is being deleted (``deletionTimestamp`` set) is deleted
  with grace period 0, as the kubelet does once the containers have stopped.

Run it with ``python -m karpy.cloud.kwok.fake_kubelet [--kubeconfig FILE]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import hashlib
import ipaddress
import logging
import signal
import sys
from collections.abc import AsyncIterable, Awaitable, Callable, Sequence
from typing import Any

from lightkube import ALL_NS, ApiError, AsyncClient, KubeConfig
from lightkube.core.client import FieldSelector
from lightkube.models.core_v1 import Container
from lightkube.operators import not_equal
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node, NodeStatus, Pod, PodStatus
from lightkube.types import OnErrorAction, OnErrorResult, PatchType

FAKE_NODE_ANNOTATION = "kwok.x-k8s.io/node"
FAKE_NODE_VALUE = "fake"
LEASE_NAMESPACE = "kube-node-lease"
FIELD_MANAGER = "karpy-fake-kubelet"

#: Capacity given to a fake Node that was created without one.
DEFAULT_CAPACITY = {"cpu": "32", "memory": "256Gi", "pods": "110", "ephemeral-storage": "100Gi"}

_HTTP_NOT_FOUND = 404

log = logging.getLogger("karpy.fake_kubelet")

JSON = dict[str, Any]


def _time(now: dt.datetime) -> str:
    """A metav1.Time: RFC 3339, whole seconds."""
    return now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_time(now: dt.datetime) -> str:
    """A metav1.MicroTime: RFC 3339 with microseconds."""
    return now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def is_fake_node(node: Node) -> bool:
    annotations = (node.metadata.annotations if node.metadata else None) or {}
    return annotations.get(FAKE_NODE_ANNOTATION) == FAKE_NODE_VALUE


def _condition_status(conditions: Sequence[Any] | None, kind: str) -> str | None:
    for condition in conditions or ():
        if condition.type == kind:
            return str(condition.status)
    return None


def node_status_patch(node: Node, node_ip: str, now: dt.datetime) -> JSON:
    """The strategic-merge patch of ``nodes/status`` that makes ``node`` a healthy node.

    Conditions are merged by type; lastTransitionTime is set only where a condition
    changes. Capacity, allocatable, addresses and node info are filled in only where
    they are missing.
    """
    status = node.status
    existing = status.conditions if status else None
    conditions: list[JSON] = []
    for kind, value, reason, message in (
        ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ):
        condition: JSON = {
            "type": kind,
            "status": value,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": _time(now),
        }
        if _condition_status(existing, kind) != value:
            condition["lastTransitionTime"] = _time(now)
        conditions.append(condition)
    patch: JSON = {"conditions": conditions}

    capacity = dict(status.capacity or {}) if status else {}
    if not capacity:
        capacity = dict(DEFAULT_CAPACITY)
        patch["capacity"] = capacity
    if not (status and status.allocatable):
        patch["allocatable"] = capacity
    if not (status and status.addresses):
        name = node.metadata.name if node.metadata else ""
        patch["addresses"] = [
            {"type": "InternalIP", "address": node_ip},
            {"type": "Hostname", "address": name},
        ]
    if not (status and status.nodeInfo and status.nodeInfo.kubeletVersion):
        labels = (node.metadata.labels if node.metadata else None) or {}
        uid = (node.metadata.uid if node.metadata else None) or ""
        patch["nodeInfo"] = {
            "machineID": uid.replace("-", ""),
            "systemUUID": uid,
            "bootID": uid,
            "kernelVersion": "fake",
            "osImage": "fake",
            "containerRuntimeVersion": "fake://fake",
            "kubeletVersion": "fake",
            "kubeProxyVersion": "",
            "operatingSystem": labels.get("kubernetes.io/os", "linux"),
            "architecture": labels.get("kubernetes.io/arch", "amd64"),
        }
    return {"status": patch}


def node_needs_status(node: Node) -> bool:
    """Whether ``node``'s status is not yet the one :func:`node_status_patch` gives."""
    status = node.status
    if status is None:
        return True
    if _condition_status(status.conditions, "Ready") != "True":
        return True
    return not (
        status.allocatable and status.addresses and status.nodeInfo and status.nodeInfo.kubeletVersion
    )


def _container_id(pod_uid: str, name: str) -> str:
    digest = hashlib.sha256(f"{pod_uid}/{name}".encode()).hexdigest()
    return f"fake://{digest}"


def _running(pod_uid: str, container: Container, started: str) -> JSON:
    return {
        "name": container.name,
        "image": container.image or "",
        "imageID": container.image or "",
        "containerID": _container_id(pod_uid, container.name),
        "ready": True,
        "started": True,
        "restartCount": 0,
        "state": {"running": {"startedAt": started}},
    }


def _ready_status(pod: Pod) -> str:
    """What the Ready condition of a running ``pod`` is: True unless a readiness gate is not."""
    gates = [gate.conditionType for gate in (pod.spec.readinessGates if pod.spec else None) or ()]
    conditions = pod.status.conditions if pod.status else None
    return "True" if all(_condition_status(conditions, gate) == "True" for gate in gates) else "False"


def pod_status_patch(pod: Pod, pod_ip: str, host_ip: str, now: dt.datetime) -> JSON:
    """The strategic-merge patch of ``pods/status`` that reports ``pod`` Running and Ready.

    Conditions are merged by type (PodScheduled, set by the scheduler, stays);
    readiness gates are honoured: Ready is True only if every gate's condition is.
    """
    assert pod.spec is not None
    assert pod.metadata is not None
    uid = pod.metadata.uid or ""
    status = pod.status
    existing = status.conditions if status else None
    started = status.startTime if status and status.startTime else None
    start_time = _time(started) if started else _time(now)

    ready = _ready_status(pod)
    conditions: list[JSON] = []
    for kind, value in (
        ("PodReadyToStartContainers", "True"),
        ("Initialized", "True"),
        ("ContainersReady", "True"),
        ("Ready", ready),
    ):
        if _condition_status(existing, kind) != value:
            conditions.append({"type": kind, "status": value, "lastTransitionTime": _time(now)})

    init_statuses: list[JSON] = []
    for container in pod.spec.initContainers or ():
        if container.restartPolicy == "Always":  # a sidecar: it keeps running
            init_statuses.append(_running(uid, container, start_time))
            continue
        init_statuses.append(
            {
                "name": container.name,
                "image": container.image or "",
                "imageID": container.image or "",
                "containerID": _container_id(uid, container.name),
                "ready": True,
                "started": False,
                "restartCount": 0,
                "state": {
                    "terminated": {
                        "exitCode": 0,
                        "reason": "Completed",
                        "startedAt": start_time,
                        "finishedAt": start_time,
                    }
                },
            }
        )
    patch: JSON = {
        "phase": "Running",
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": start_time,
        "containerStatuses": [_running(uid, c, start_time) for c in pod.spec.containers],
    }
    if conditions:
        patch["conditions"] = conditions
    if init_statuses:
        patch["initContainerStatuses"] = init_statuses
    return {"status": patch}


def pod_needs_status(pod: Pod) -> bool:
    """Whether ``pod`` is not yet reported Running with every container running."""
    status = pod.status
    if status is None or status.phase != "Running" or not status.podIP:
        return True
    spec_names = {c.name for c in pod.spec.containers} if pod.spec else set()
    running = {s.name for s in status.containerStatuses or () if s.state and s.state.running}
    return running != spec_names or _condition_status(status.conditions, "Ready") != _ready_status(pod)


class _IPPool:
    """Hands out pod IPs from a CIDR, one per pod UID; released IPs are used again."""

    def __init__(self, cidr: str) -> None:
        network = ipaddress.ip_network(cidr)
        self._first = int(network.network_address) + 1
        self._size = max(network.num_addresses - 2, 1)  # no network or broadcast address
        self._next = 0
        self._by_uid: dict[str, str] = {}
        self._used: set[str] = set()

    def claim(self, uid: str, ip: str) -> None:
        """Record an IP a pod already has (for instance from before a restart)."""
        self._by_uid[uid] = ip
        self._used.add(ip)

    def get(self, uid: str) -> str:
        if uid in self._by_uid:
            return self._by_uid[uid]
        for _ in range(self._size):
            ip = str(ipaddress.ip_address(self._first + self._next))
            self._next = (self._next + 1) % self._size
            if ip not in self._used:
                self.claim(uid, ip)
                return ip
        raise RuntimeError("pod CIDR exhausted")

    def release(self, uid: str) -> None:
        ip = self._by_uid.pop(uid, None)
        if ip is not None:
            self._used.discard(ip)


def _retry_watch(error: Exception, count: int) -> OnErrorResult:
    """Keep a watch going: lightkube restarts it (from scratch after a 410 Gone)."""
    log.warning("watch error (%d in a row): %s", count, error)
    return OnErrorResult(OnErrorAction.RETRY, sleep=min(count, 5))


class FakeKubelet:
    """Keeps fake Nodes Ready and their pods Running; see the module docstring."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        node_ip: str = "127.0.0.1",
        pod_cidr: str = "10.244.0.0/16",
        lease_duration_seconds: int = 40,
        heartbeat_interval: float = 10.0,
        status_report_interval: float = 60.0,
    ) -> None:
        self._client = client
        self._node_ip = node_ip
        self._pod_ips = _IPPool(pod_cidr)
        self._lease_duration = lease_duration_seconds
        self._heartbeat_interval = heartbeat_interval
        self._status_report_interval = status_report_interval
        self._fake: dict[str, str] = {}  # fake node name -> uid
        self._not_fake: set[str] = set()
        self._status_reported: dict[str, float] = {}  # node name -> loop time
        self._status_version: dict[str, int] = {}  # node name -> resourceVersion our last patch made
        self._ready = asyncio.Event()

    @property
    def fake_nodes(self) -> frozenset[str]:
        return frozenset(self._fake)

    async def wait_started(self) -> None:
        """Return once the nodes that existed at the start have been taken over."""
        await self._ready.wait()

    async def run(self) -> None:
        """Run until cancelled."""
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self._forever("nodes", self._watch_nodes))
            tasks.create_task(self._forever("pods", self._watch_pods))
            tasks.create_task(self._forever("heartbeat", self._heartbeat))

    @staticmethod
    async def _forever(name: str, loop: Callable[[], Awaitable[None]]) -> None:
        """Run ``loop`` again whenever it fails (the API server restarting, say)."""
        while True:
            try:
                await loop()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s loop failed; restarting in 1s", name)
            await asyncio.sleep(1)

    # ------------------------------------------------------------------ nodes

    async def _watch_nodes(self) -> None:
        listing = self._client.list(Node)
        async for node in listing:
            await self._guard(self._on_node("ADDED", node))
        self._ready.set()
        nodes: AsyncIterable[tuple[str, Node]] = self._client.watch(
            Node, resource_version=listing.resourceVersion, on_error=_retry_watch
        )
        async for event, node in nodes:
            await self._guard(self._on_node(event, node))

    async def _on_node(self, event: str, node: Node) -> None:
        if node.metadata is None or node.metadata.name is None:
            return
        name = node.metadata.name
        if event == "DELETED":
            self._forget_node(name)
            return
        if not is_fake_node(node):
            self._forget_node(name)
            self._not_fake.add(name)
            return
        self._not_fake.discard(name)
        new = name not in self._fake
        self._fake[name] = node.metadata.uid or ""
        if new:
            log.info("fake node %s: taking over", name)
            await self._guard(self._renew_lease(name))
        if node_needs_status(node) and not self._older_than_own_report(node):
            await self._report_node_status(node)
        if new:
            async for pod in self._client.list(Pod, namespace=ALL_NS, fields={"spec.nodeName": name}):
                await self._guard(self._on_pod("ADDED", pod))

    def _older_than_own_report(self, node: Node) -> bool:
        """Whether ``node`` is a version from before our last status patch (a stale event)."""
        assert node.metadata is not None
        reported = self._status_version.get(node.metadata.name or "")
        version = node.metadata.resourceVersion or ""
        return reported is not None and version.isdigit() and int(version) < reported

    def _forget_node(self, name: str) -> None:
        self._fake.pop(name, None)
        self._not_fake.discard(name)
        self._status_reported.pop(name, None)
        self._status_version.pop(name, None)

    async def _report_node_status(self, node: Node) -> None:
        assert node.metadata is not None and node.metadata.name is not None
        name = node.metadata.name
        now = dt.datetime.now(dt.UTC)
        patch = node_status_patch(node, self._node_ip, now)
        patched = await self._client.patch(NodeStatus, name, patch, patch_type=PatchType.STRATEGIC)
        self._status_reported[name] = asyncio.get_running_loop().time()
        version = (patched.metadata.resourceVersion if patched.metadata else None) or ""
        if version.isdigit():
            self._status_version[name] = int(version)
        log.debug("fake node %s: status reported", name)

    async def _renew_lease(self, name: str) -> None:
        """Create or renew the node's Lease (server-side apply does both)."""
        lease: JSON = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": name,
                "namespace": LEASE_NAMESPACE,
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": name, "uid": self._fake[name]}
                ],
            },
            "spec": {
                "holderIdentity": name,
                "leaseDurationSeconds": self._lease_duration,
                "renewTime": _micro_time(dt.datetime.now(dt.UTC)),
            },
        }
        await self._client.patch(
            Lease, name, lease, namespace=LEASE_NAMESPACE, patch_type=PatchType.APPLY, force=True
        )

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self._heartbeat_interval)
            now = asyncio.get_running_loop().time()
            for name in list(self._fake):
                await self._guard(self._renew_lease(name))
                if now - self._status_reported.get(name, 0.0) >= self._status_report_interval:
                    await self._guard(self._refresh_node(name))

    async def _refresh_node(self, name: str) -> None:
        try:
            node = await self._client.get(Node, name)
        except ApiError as error:
            if error.status.code == _HTTP_NOT_FOUND:
                self._forget_node(name)
                return
            raise
        if is_fake_node(node):
            await self._report_node_status(node)

    async def _node_is_fake(self, name: str) -> bool:
        if name in self._fake:
            return True
        if name in self._not_fake:
            return False
        try:
            node = await self._client.get(Node, name)
        except ApiError as error:
            if error.status.code == _HTTP_NOT_FOUND:
                return False
            raise
        # The node watch takes it over (status, lease) when its event arrives.
        return is_fake_node(node)

    # ------------------------------------------------------------------ pods

    async def _watch_pods(self) -> None:
        bound: FieldSelector = {"spec.nodeName": not_equal("")}
        listing = self._client.list(Pod, namespace=ALL_NS, fields=bound)
        async for pod in listing:
            await self._guard(self._on_pod("ADDED", pod))
        pods: AsyncIterable[tuple[str, Pod]] = self._client.watch(
            Pod,
            namespace=ALL_NS,
            fields=bound,
            resource_version=listing.resourceVersion,
            on_error=_retry_watch,
        )
        async for event, pod in pods:
            await self._guard(self._on_pod(event, pod))

    async def _on_pod(self, event: str, pod: Pod) -> None:
        meta, spec, status = pod.metadata, pod.spec, pod.status
        if meta is None or spec is None or not spec.nodeName or meta.name is None:
            return
        uid = meta.uid or ""
        if event == "DELETED":
            self._pod_ips.release(uid)
            return
        if status and status.podIP and not spec.hostNetwork:
            self._pod_ips.claim(uid, status.podIP)
        if not await self._node_is_fake(spec.nodeName):
            return
        if meta.deletionTimestamp is not None:
            log.info("pod %s/%s on %s: terminating", meta.namespace, meta.name, spec.nodeName)
            try:
                await self._client.delete(Pod, meta.name, namespace=meta.namespace, grace_period=0)
            except ApiError as error:
                if error.status.code != _HTTP_NOT_FOUND:
                    raise
            return
        if status and status.phase in ("Succeeded", "Failed"):
            return
        if not pod_needs_status(pod):
            return
        pod_ip = self._node_ip if spec.hostNetwork else self._pod_ips.get(uid)
        patch = pod_status_patch(pod, pod_ip, self._node_ip, dt.datetime.now(dt.UTC))
        try:
            await self._client.patch(
                PodStatus, meta.name, patch, namespace=meta.namespace, patch_type=PatchType.STRATEGIC
            )
        except ApiError as error:
            if error.status.code != _HTTP_NOT_FOUND:
                raise
            return
        log.info("pod %s/%s on %s: running (%s)", meta.namespace, meta.name, spec.nodeName, pod_ip)

    @staticmethod
    async def _guard(step: Awaitable[None]) -> None:
        """Run one reconcile step; a failure is logged and must not stop the watch."""
        try:
            await step
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("reconcile step failed")


async def _serve(args: argparse.Namespace) -> None:
    config = KubeConfig.from_file(args.kubeconfig) if args.kubeconfig else KubeConfig.from_env()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with AsyncClient(config, field_manager=FIELD_MANAGER) as client:
        kubelet = FakeKubelet(
            client,
            node_ip=args.node_ip,
            pod_cidr=args.pod_cidr,
            heartbeat_interval=args.heartbeat_interval,
            status_report_interval=args.status_report_interval,
        )
        runner = asyncio.create_task(kubelet.run())
        started = asyncio.create_task(kubelet.wait_started())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({runner, started, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if started.done():
            log.info("fake kubelet started")
        await asyncio.wait({runner, stopping}, return_when=asyncio.FIRST_COMPLETED)
        for task in (runner, started, stopping):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await runner
    log.info("fake kubelet stopped")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m karpy.cloud.kwok.fake_kubelet",
        description=f"Keep nodes annotated {FAKE_NODE_ANNOTATION}={FAKE_NODE_VALUE} Ready, pods Running",
    )
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    parser.add_argument("--node-ip", default="127.0.0.1", help="InternalIP reported for fake nodes")
    parser.add_argument("--pod-cidr", default="10.244.0.0/16", help="range that pod IPs are taken from")
    parser.add_argument(
        "--heartbeat-interval", type=float, default=10.0, help="seconds between lease renewals"
    )
    parser.add_argument(
        "--status-report-interval",
        type=float,
        default=60.0,
        help="seconds between Node status reports when nothing changed (the kubelet's"
        " nodeStatusReportFrequency, 5 minutes by default)",
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ...")
    args = parser.parse_args(argv)
    level = logging.getLevelNamesMapping().get(args.log_level.upper(), logging.INFO)
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    if level > logging.DEBUG:  # one line per HTTP request only when debugging
        logging.getLogger("httpx2").setLevel(max(level, logging.WARNING))
    asyncio.run(_serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
