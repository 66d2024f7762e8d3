"""``karpy run`` announces kube-scheduler's binding of a pod as the provisioner's watch needs it.

The provisioner reopens a batch when a pod is bound into room it planned for
other pods still pending (:mod:`karpy.controllers.provisioning`). Under
``karpy run`` the binding reaches it as the Pod informer's MODIFIED event; the
cluster must announce it with the unbound pod as ``old`` and the bound one as
``new``, as the simulator's store does.
"""

from __future__ import annotations

from typing import Any, cast

from karpy.api.core import Pod
from karpy.kube._http import ApiTransport
from karpy.kube._resources import POD
from karpy.kube.cluster import KubeCluster


class NoServer:
    def request(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("no request expected")


def raw_pod(resource_version: str, node_name: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web-1", "namespace": "shop", "uid": "u1", "resourceVersion": resource_version},
        "spec": spec,
        "status": {"phase": "Pending"},
    }


def test_a_binding_is_announced_with_the_unbound_pod_as_old() -> None:
    cluster = KubeCluster(cast(ApiTransport, NoServer()))
    seen: list[tuple[str, object | None, object | None]] = []
    cluster.subscribe(lambda kind, old, new: seen.append((kind, old, new)))
    cluster.apply(POD, "ADDED", raw_pod("1"))
    cluster.apply(POD, "MODIFIED", raw_pod("2", node_name="node-a"))
    (_, _, pending), (kind, old, new) = seen
    assert kind == "Pod" and old == pending
    assert isinstance(old, Pod) and not old.spec.node_name and old.is_provisionable()
    assert isinstance(new, Pod) and new.spec.node_name == "node-a"
    assert cluster.pending_pods() == []
