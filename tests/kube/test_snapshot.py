"""Reading a cluster once for ``karpy simulate --from-cluster`` (karpy.kube.snapshot).

Against an in-process API server: every kind is listed (in pages, a 404 for a
CRD not installed is an empty list), the objects are karpy's records, one karpy
cannot read is named and left out, and only GETs are sent.
"""

from __future__ import annotations

from typing import Any

import httpx2
from lightkube import Client, KubeConfig

from karpy.api.core import Node, Pod, PriorityClass
from karpy.kube._http import ApiTransport
from karpy.kube._resources import EC2_NODE_CLASS, NODE, POD, PRIORITY_CLASS
from karpy.kube.snapshot import SNAPSHOT_TYPES, fetch_snapshot

NODE_A = {"metadata": {"name": "a", "uid": "u-a"}, "status": {"allocatable": {"cpu": "2"}}}
POD_1 = {
    "metadata": {"name": "p1", "namespace": "default", "uid": "u-p1"},
    "spec": {"nodeName": "a", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
    "status": {"phase": "Running"},
}
POD_2 = {**POD_1, "metadata": {"name": "p2", "namespace": "default", "uid": "u-p2"}}
SYSTEM_CLASS = {"metadata": {"name": "system-node-critical"}, "value": 2000001000}
HIGH_CLASS = {"metadata": {"name": "high"}, "value": 1000}
BROKEN_POD = {
    "metadata": {"name": "broken", "namespace": "default"},
    "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]},
}


def fake_server(pages: dict[str, list[list[dict[str, Any]]]]) -> tuple[ApiTransport, list[tuple[str, str]]]:
    """A transport to a server that answers each list path with its pages (404 for other paths)."""
    seen: list[tuple[str, str]] = []

    def handle(request: httpx2.Request) -> httpx2.Response:
        seen.append((request.method, str(request.url)))
        found = pages.get(request.url.path)
        if found is None:
            return httpx2.Response(404, json={"kind": "Status", "code": 404, "reason": "NotFound"})
        page = int(request.url.params.get("continue") or 0)
        metadata = {"continue": str(page + 1)} if page + 1 < len(found) else {}
        return httpx2.Response(200, json={"items": found[page], "metadata": metadata})

    config = KubeConfig.from_dict(
        {
            "clusters": [{"name": "c", "cluster": {"server": "http://api.test"}}],
            "users": [{"name": "u", "user": {}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "c",
        }
    )
    return ApiTransport(Client(config, transport=httpx2.MockTransport(handle))), seen


def test_every_kind_is_listed_in_pages_and_parsed_into_karpys_records() -> None:
    pages = {
        POD.collection_path(): [[POD_1], [POD_2, BROKEN_POD]],
        NODE.collection_path(): [[NODE_A]],
        # The system classes every cluster has (values karpy refuses of a user's class) are known, not read.
        PRIORITY_CLASS.collection_path(): [[SYSTEM_CLASS, HIGH_CLASS]],
    }
    transport, seen = fake_server(pages)
    snapshot = fetch_snapshot(transport, lambda: 1234.0)
    assert snapshot.taken_at == 1234.0
    assert [type(obj) for obj in snapshot.objects] == [PriorityClass, Node, Pod, Pod]
    assert [obj.metadata.name for obj in snapshot.objects if isinstance(obj, Pod)] == ["p1", "p2"]
    assert len(snapshot.unreadable) == 1 and snapshot.unreadable[0].startswith("Pod default/broken:")
    # Each kind once (the pods in two pages); EC2NodeClasses' 404 (no CRD) is no error.
    assert {method for method, _ in seen} == {"GET"}
    paths = [url.split("?")[0].removeprefix("http://api.test") for _, url in seen]
    assert sorted(set(paths)) == sorted({resource.collection_path() for resource in SNAPSHOT_TYPES})
    assert paths.count(POD.collection_path()) == 2
    assert EC2_NODE_CLASS.collection_path() in paths
