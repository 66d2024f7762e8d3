"""The real control plane with fake nodes: scheduling, the fake kubelet, evictions, 410 Gone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, Iterable
from typing import Any, TypeVar

import pytest
from lightkube import ApiError, AsyncClient, Client, KubeConfig
from lightkube.models.core_v1 import NodeStatus
from lightkube.models.meta_v1 import LabelSelector, ObjectMeta
from lightkube.models.policy_v1 import PodDisruptionBudgetSpec
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import ConfigMap, Node, Pod, PodEviction
from lightkube.resources.policy_v1 import PodDisruptionBudget
from lightkube.types import PatchType, on_error_raise, on_error_retry

from karpy.cloud.kwok.fake_kubelet import FAKE_NODE_ANNOTATION, FAKE_NODE_VALUE

from .conftest import ControlPlane, wait_until

pytestmark = pytest.mark.integration

HTTP_NOT_FOUND = 404
HTTP_GONE = 410
HTTP_TOO_MANY_REQUESTS = 429
REPLICAS = 3

DEPLOYMENT = f"""\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: {REPLICAS}
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      nodeSelector: {{karpy.dev/test-fake-node: "true"}}
      containers:
      - name: web
        image: registry.invalid/web:1
        resources:
          requests: {{cpu: 250m, memory: 128Mi}}
"""

T = TypeVar("T")


def _condition(conditions: Iterable[Any] | None, kind: str) -> str | None:
    for condition in conditions or ():
        if condition.type == kind:
            return str(condition.status)
    return None


def _fake_node(name: str) -> Node:
    return Node(
        metadata=ObjectMeta(
            name=name,
            annotations={FAKE_NODE_ANNOTATION: FAKE_NODE_VALUE},
            labels={
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "karpy.dev/test-fake-node": "true",
            },
        ),
        status=NodeStatus(capacity={"cpu": "4", "memory": "16Gi", "pods": "110"}),
    )


def _running_web_pods(client: Client, namespace: str, node: str) -> list[Pod] | None:
    """The web pods, if all of them run, Ready, on ``node`` (and none is terminating)."""
    pods = [
        p
        for p in client.list(Pod, namespace=namespace, labels={"app": "web"})
        if p.metadata and p.metadata.deletionTimestamp is None
    ]
    running = [
        p
        for p in pods
        if p.spec
        and p.spec.nodeName == node
        and p.status
        and p.status.phase == "Running"
        and p.status.podIP
        and _condition(p.status.conditions, "Ready") == "True"
    ]
    return running if len(running) == len(pods) == REPLICAS else None


def _placement(client: Client, namespace: str) -> str:
    """Where the namespace's pods are and what the nodes are, for a failed wait's report."""
    lines = []
    for pod in client.list(Pod, namespace=namespace):
        node = pod.spec.nodeName if pod.spec else None
        phase = pod.status.phase if pod.status else None
        name = pod.metadata.name if pod.metadata else None
        lines.append(f"pod {name} on {node}: {phase}")
    for each in client.list(Node):
        conditions = each.status.conditions if each.status and each.status.conditions else []
        ready = [c.status for c in conditions if c.type == "Ready"]
        taints = each.spec.taints if each.spec else None
        lines.append(f"node {each.metadata.name if each.metadata else None}: Ready={ready} taints={taints}")
    return "\n".join(lines)


def _pdb_allows(client: Client, namespace: str, disruptions: int) -> bool:
    """Whether the PDB's status is current, counts every replica healthy, and allows ``disruptions``."""
    pdb = client.get(PodDisruptionBudget, "web", namespace=namespace)
    return bool(
        pdb.status
        and pdb.metadata
        and pdb.status.observedGeneration == pdb.metadata.generation
        and pdb.status.currentHealthy == REPLICAS
        and pdb.status.disruptionsAllowed == disruptions
    )


def _evict(client: Client, name: str, namespace: str) -> None:
    client.create(PodEviction(metadata=ObjectMeta(name=name, namespace=namespace)), name, namespace=namespace)


def test_deployment_runs_on_fake_node_and_pdb_blocks_second_eviction(
    control_plane: ControlPlane, namespace: str
) -> None:
    control_plane.kubectl("apply", "--namespace", namespace, "-f", "-", stdin=DEPLOYMENT)
    node_name = f"fake-{namespace}"
    with control_plane.client() as client:
        client.create(_fake_node(node_name))
        try:
            # The real scheduler binds the pods to the node, the fake kubelet runs them.
            try:
                pods = wait_until(
                    lambda: _running_web_pods(client, namespace, node_name),
                    what=f"{REPLICAS} web pods Running on the fake node",
                )
            except BaseException:
                print(_placement(client, namespace))  # this wait has timed out in full runs only
                raise
            node = client.get(Node, node_name)
            assert node.status is not None
            assert _condition(node.status.conditions, "Ready") == "True"
            assert node.status.allocatable == {"cpu": "4", "memory": "16Gi", "pods": "110"}
            lease = client.get(Lease, node_name, namespace="kube-node-lease")
            assert lease.spec is not None and lease.spec.holderIdentity == node_name

            client.create(
                PodDisruptionBudget(
                    metadata=ObjectMeta(name="web", namespace=namespace),
                    spec=PodDisruptionBudgetSpec(
                        maxUnavailable=1, selector=LabelSelector(matchLabels={"app": "web"})
                    ),
                )
            )
            wait_until(lambda: _pdb_allows(client, namespace, 1), what="the PDB to allow one disruption")
            first, second = (str(p.metadata.name) for p in pods[:2] if p.metadata)

            # maxUnavailable: 1, and all replicas healthy: the first eviction is allowed.
            _evict(client, first, namespace)

            # The evicted pod terminates (the fake kubelet deletes it once it has a
            # deletionTimestamp) and the ReplicaSet's replacement runs on the fake node.
            def replaced() -> bool:
                running = _running_web_pods(client, namespace, node_name)
                return running is not None and first not in {p.metadata.name for p in running if p.metadata}

            wait_until(replaced, what="the evicted pod to be replaced")
            with pytest.raises(ApiError) as gone:
                client.get(Pod, first, namespace=namespace)
            assert gone.value.status.code == HTTP_NOT_FOUND
            wait_until(lambda: _pdb_allows(client, namespace, 1), what="the PDB to count 3 healthy again")

            # minAvailable: 3 of 3 allows no disruption: the second eviction is refused.
            client.patch(
                PodDisruptionBudget,
                "web",
                {"spec": {"maxUnavailable": None, "minAvailable": REPLICAS}},
                namespace=namespace,
                patch_type=PatchType.MERGE,
            )
            wait_until(lambda: _pdb_allows(client, namespace, 0), what="the PDB to allow no disruption")
            with pytest.raises(ApiError) as refused:
                _evict(client, second, namespace)
            assert refused.value.status.code == HTTP_TOO_MANY_REQUESTS
            survivor = client.get(Pod, second, namespace=namespace)
            assert survivor.metadata is not None and survivor.metadata.deletionTimestamp is None
        finally:
            client.delete(Node, node_name)


async def _first_event(watch: AsyncIterable[tuple[str, T]]) -> tuple[str, T]:
    """The first event of a watch, whose connection is then closed."""
    events = aiter(watch)
    try:
        return await anext(events)
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()


def test_watch_from_compacted_resource_version_gets_410(control_plane: ControlPlane, namespace: str) -> None:
    config = KubeConfig.from_file(control_plane.kubeconfig)

    async def scenario() -> None:
        async with AsyncClient(config, namespace=namespace, field_manager="karpy-tests") as client:
            created = await client.create(ConfigMap(metadata=ObjectMeta(name="cm"), data={"n": "0"}))
            assert created.metadata is not None and created.metadata.resourceVersion is not None
            old = latest = created.metadata.resourceVersion
            for n in range(1, 4):
                updated = await client.patch(ConfigMap, "cm", {"data": {"n": str(n)}})
                assert updated.metadata is not None and updated.metadata.resourceVersion is not None
                latest = updated.metadata.resourceVersion

            # Before compaction, a watch from the old version replays the updates.
            event, obj = await _first_event(
                client.watch(ConfigMap, resource_version=old, on_error=on_error_raise)
            )
            assert event == "MODIFIED" and obj.data == {"n": "1"}

            # The API server's watch cache is off (see docs/control-plane.md): watches
            # are served by etcd, so compacting etcd makes the old version unusable.
            control_plane.etcdctl("compact", latest)

            # The same watch is now answered with 410 Gone ...
            with pytest.raises(ApiError) as gone:
                await _first_event(client.watch(ConfigMap, resource_version=old, on_error=on_error_raise))
            assert gone.value.status.code == HTTP_GONE

            # ... upon which lightkube's retry handler starts over from the current state.
            event, obj = await _first_event(
                client.watch(ConfigMap, resource_version=old, on_error=on_error_retry)
            )
            assert event == "ADDED" and obj.data == {"n": "3"}

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))
