"""Reading a cluster once for ``karpy simulate --from-cluster`` (karpy.kube.snapshot).

Against an in-process API server: every kind is listed (in pages, a 404 for a
CRD not installed is an empty list), the objects are karpy's records, one karpy
cannot read is named and left out, and only GETs are sent.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from typing import Any

import httpx2
import pytest
from lightkube import Client, KubeConfig

from karpy.api.core import Node, Pod, PriorityClass
from karpy.kube import snapshot as snapshot_module
from karpy.kube._http import ApiTransport
from karpy.kube._resources import EC2_NODE_CLASS, NODE, POD, PRIORITY_CLASS
from karpy.kube.cluster import parse_record
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


def fake_server(
    pages: dict[str, list[list[dict[str, Any]]]],
    answer: Callable[[httpx2.Request], httpx2.Response | None] = lambda request: None,
) -> tuple[ApiTransport, list[tuple[str, str]]]:
    """A transport to a server that answers each list path with its pages (404 for other paths).

    ``answer(request)`` is asked first: a response of its own, or None for the pages'.
    """
    seen: list[tuple[str, str]] = []

    def handle(request: httpx2.Request) -> httpx2.Response:
        seen.append((request.method, str(request.url)))
        own = answer(request)
        if own is not None:
            return own
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


def test_a_page_is_parsed_while_the_server_makes_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    # The server answers the second page of pods only once the first page's pod is parsed: it
    # is, as each page is parsed as soon as it is in, not once the whole list is.
    first_parsed = threading.Event()

    def parse(resource: Any, raw: dict[str, Any]) -> object:
        if raw["metadata"]["name"] == "p1":
            first_parsed.set()
        return parse_record(resource, raw)

    monkeypatch.setattr(snapshot_module, "parse_record", parse)
    waited: list[bool] = []

    def answer(request: httpx2.Request) -> None:
        if request.url.path == POD.collection_path() and request.url.params.get("continue"):
            waited.append(first_parsed.wait(timeout=5))

    transport, _ = fake_server({POD.collection_path(): [[POD_1], [POD_2]]}, answer)
    snapshot = fetch_snapshot(transport, lambda: 1234.0)
    assert waited == [True]
    assert [obj.metadata.name for obj in snapshot.objects if isinstance(obj, Pod)] == ["p1", "p2"]


def test_a_list_whose_continue_token_expired_is_read_again_from_the_start() -> None:
    expired: list[str] = []

    def answer(request: httpx2.Request) -> httpx2.Response | None:
        if request.url.path == POD.collection_path() and request.url.params.get("continue") and not expired:
            expired.append(str(request.url))
            return httpx2.Response(410, json={"kind": "Status", "code": 410, "reason": "Expired"})
        return None

    transport, seen = fake_server({POD.collection_path(): [[POD_1], [POD_2]]}, answer)
    snapshot = fetch_snapshot(transport, lambda: 1234.0)
    assert len(expired) == 1
    # p1 once: the records of the first pass were dropped with it.
    assert [obj.metadata.name for obj in snapshot.objects if isinstance(obj, Pod)] == ["p1", "p2"]
    paths = [url.split("?")[0].removeprefix("http://api.test") for _, url in seen]
    assert paths.count(POD.collection_path()) == 4


def test_the_garbage_collector_is_paused_while_the_objects_are_parsed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Reading 20,000 pods makes millions of objects that all stay: the collector walking them over
    # and over cost more than half the read's CPU. It is off while they are read, on again after.
    collecting: list[bool] = []

    def parse(resource: Any, raw: dict[str, Any]) -> object:
        collecting.append(gc.isenabled())
        return parse_record(resource, raw)

    monkeypatch.setattr(snapshot_module, "parse_record", parse)
    transport, _ = fake_server(
        {POD.collection_path(): [[POD_1], [POD_2]], NODE.collection_path(): [[NODE_A]]}
    )
    assert gc.isenabled()
    fetch_snapshot(transport, lambda: 1234.0)
    assert collecting == [False, False, False]
    assert gc.isenabled()
    gc.disable()
    try:
        fetch_snapshot(transport, lambda: 1234.0)
        assert not gc.isenabled()  # left as it was
    finally:
        gc.enable()
