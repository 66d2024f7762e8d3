"""KubeCluster's writes without a server: error mapping, evictions in a namespace being deleted, events.

A fake transport stands in for the apiserver: it records every request and
answers with what the test scripted, including the Status bodies a real
kube-apiserver sends (the 403 of a namespace being deleted names its cause
``NamespaceTerminating``; Go's StatusCause.Type is "reason" in JSON).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, cast

import orjson
import pytest

from karpy.api.core import Pod, PodSpec
from karpy.api.meta import ObjectMeta, format_timestamp
from karpy.api.nodeclaim import NodeClaim, NodeClaimSpec
from karpy.api.nodepool import NodeClassRef
from karpy.api.requirements import LABEL_INSTANCE_TYPE, Requirement
from karpy.kube._encode import nodeclaim_to_dict
from karpy.kube._events import EventSender, PendingEvent
from karpy.kube._http import ApiResponse, ApiTransport, status_error
from karpy.kube._resources import NODE, NODECLAIM
from karpy.kube.cluster import EVENT_DEDUPE_SECONDS, KubeCluster, NamespaceTerminatingError
from karpy.operator.cluster import EVENT_NORMAL, ConflictError, InvalidError, KubeError
from karpy.sim.clock import VirtualClock

TERMINATING = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "message": 'pods "web-1" is forbidden: unable to create new content in namespace shop '
    "because it is being terminated",
    "reason": "Forbidden",
    "details": {
        "name": "web-1",
        "kind": "pods",
        "causes": [
            {
                "reason": "NamespaceTerminating",
                "message": "namespace shop is being terminated",
                "field": "metadata.namespace",
            }
        ],
    },
    "code": 403,
}
RBAC_FORBIDDEN = {
    "kind": "Status",
    "status": "Failure",
    "message": 'pods "web-1" is forbidden: User "karpy" cannot create resource "pods/eviction"',
    "reason": "Forbidden",
    "code": 403,
}
CONFLICT = {"kind": "Status", "reason": "Conflict", "message": "the object has been modified", "code": 409}

Answer = Callable[[str, str, object], dict[str, Any]]


class FakeTransport:
    """Answers requests with ``answer(method, path, body)``; raising ApiStatusError is a refusal."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests: list[tuple[str, str, object]] = []
        self.lock = threading.Lock()

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: object = None,
        content_type: str = "application/json",
        timeout: float = 30.0,
    ) -> ApiResponse:
        with self.lock:
            self.requests.append((method, path, body))
        return ApiResponse(200, self.answer(method, path, body))

    def interrupt_streams(self) -> None:
        pass

    def close(self) -> None:
        pass


def refuse(status: dict[str, Any]) -> Answer:
    def answer(method: str, path: str, body: object) -> dict[str, Any]:
        raise status_error(int(status["code"]), orjson.dumps(status))

    return answer


def cluster_over(transport: FakeTransport, clock: VirtualClock | None = None) -> KubeCluster:
    return KubeCluster(cast(ApiTransport, transport), clock=clock)


def pod(namespace: str = "shop", name: str = "web-1") -> Pod:
    return Pod(metadata=ObjectMeta(name=name, namespace=namespace, uid="u1"), spec=PodSpec())


def test_a_status_body_keeps_its_causes() -> None:
    error = status_error(403, orjson.dumps(TERMINATING))
    assert error.code == 403 and error.reason == "Forbidden"
    assert error.causes == ("NamespaceTerminating",)
    assert status_error(403, orjson.dumps(RBAC_FORBIDDEN)).causes == ()
    assert status_error(500, b"not json").causes == ()


def test_an_eviction_in_a_namespace_being_deleted_is_no_failure() -> None:
    transport = FakeTransport(refuse(TERMINATING))
    cluster = cluster_over(transport)
    cluster.evict(pod())  # the pod goes with its namespace: nothing to raise
    assert [(method, path) for method, path, _ in transport.requests] == [
        ("POST", "/api/v1/namespaces/shop/pods/web-1/eviction")
    ]


def test_other_refusals_keep_their_types() -> None:
    with pytest.raises(KubeError) as forbidden:
        cluster_over(FakeTransport(refuse(RBAC_FORBIDDEN))).evict(pod())
    assert not isinstance(forbidden.value, NamespaceTerminatingError)
    with pytest.raises(ConflictError):
        cluster_over(FakeTransport(refuse(CONFLICT))).evict(pod())
    with pytest.raises(NamespaceTerminatingError):
        cluster_over(FakeTransport(refuse(TERMINATING))).delete(pod())


def test_a_refusal_of_the_object_as_written_is_invalid_and_names_its_fields() -> None:
    invalid = {
        "kind": "Status",
        "status": "Failure",
        "message": 'Pod "web-1" is invalid: metadata.labels: Invalid value: "bad key!": name part must ...',
        "reason": "Invalid",
        "details": {
            "causes": [
                {
                    "reason": "FieldValueInvalid",
                    "message": 'Invalid value: "bad key!": name part must ...',
                    "field": "metadata.labels",
                }
            ]
        },
        "code": 422,
    }
    with pytest.raises(InvalidError) as refused:
        cluster_over(FakeTransport(refuse(invalid))).delete(pod())
    assert refused.value.fields == (("metadata.labels", 'Invalid value: "bad key!": name part must ...'),)
    webhook = {
        "kind": "Status",
        "status": "Failure",
        "message": 'admission webhook "policy.example.com" denied the request: no',
        "code": 400,
    }
    with pytest.raises(InvalidError):
        cluster_over(FakeTransport(refuse(webhook))).delete(pod())


def test_record_event_returns_at_once_and_the_event_is_sent_in_the_background() -> None:
    release = threading.Event()

    def slow_server(method: str, path: str, body: object) -> dict[str, Any]:
        release.wait(10)
        return {"metadata": {"name": "web-1.abc"}}

    transport = FakeTransport(slow_server)
    cluster = cluster_over(transport)
    cluster.record_event(pod(), EVENT_NORMAL, "Nominated", "Pod should schedule on: nodeclaim/x")
    assert not cluster.flush_events(0.05), "the event was sent while the server was still answering"
    release.set()
    assert cluster.flush_events(10)
    method, path, body = transport.requests[0]
    assert (method, path) == ("POST", "/api/v1/namespaces/shop/events")
    assert isinstance(body, dict) and body["reason"] == "Nominated" and body["count"] == 1
    cluster.close()


def test_repeats_of_an_event_are_written_once_per_window_with_their_count() -> None:
    transport = FakeTransport(lambda method, path, body: {"metadata": {"name": "web-1.abc"}})
    clock = VirtualClock(1000.0)
    cluster = cluster_over(transport, clock=clock)

    def record(message: str = "Pod should schedule on: nodeclaim/x") -> None:
        cluster.record_event(pod(), EVENT_NORMAL, "Nominated", message)
        assert cluster.flush_events(10)

    record()
    # Three repeats within the window cost no request; a different message is an Event of its own.
    for _ in range(3):
        clock.advance(30)
        record()
    record("Pod should schedule on: nodeclaim/y")
    assert [(method, cast(dict[str, Any], body)["message"]) for method, _, body in transport.requests] == [
        ("POST", "Pod should schedule on: nodeclaim/x"),
        ("POST", "Pod should schedule on: nodeclaim/y"),
    ]
    # Past the window the next repeat is written, counting the ones held.
    clock.advance(EVENT_DEDUPE_SECONDS)
    record()
    method, path, body = transport.requests[2]
    assert (method, path) == ("PATCH", "/api/v1/namespaces/shop/events/web-1.abc")
    assert body == {"count": 5, "lastTimestamp": format_timestamp(clock.now())}
    cluster.close()


def test_an_event_in_a_namespace_being_deleted_is_dropped_quietly(caplog: pytest.LogCaptureFixture) -> None:
    cluster = cluster_over(FakeTransport(refuse(TERMINATING)))
    with caplog.at_level(logging.WARNING):
        cluster.record_event(pod(), EVENT_NORMAL, "Evicted", "Evicted pod")
        assert cluster.flush_events(10)
    assert caplog.records == []
    cluster.close()


def test_the_sender_keeps_order_drops_when_full_and_survives_failures(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sent: list[str] = []
    gate = threading.Event()

    def send(event: PendingEvent) -> None:
        gate.wait(10)
        if event.reason == "bad":
            raise RuntimeError("the server said no")
        sent.append(event.reason)

    sender = EventSender(send, capacity=3)
    with caplog.at_level(logging.WARNING, logger="karpy.kube.events"):
        for reason in ("a", "bad", "b", "c", "d", "e"):
            sender.submit(PendingEvent(object(), EVENT_NORMAL, reason, "", 0.0))
        # One is being sent, three wait: the rest were dropped, without blocking.
        assert sender.dropped >= 1
        gate.set()
        assert sender.flush(10)
    assert sent[:2] == ["a", "b"]
    assert sender.failed == 1 and sender.sent == len(sent)
    assert any("dropped" in record.getMessage() for record in caplog.records)
    assert any("the server said no" in record.getMessage() for record in caplog.records)
    sender.close(1)
    # After close, a new event starts a new thread.
    sender.submit(PendingEvent(object(), EVENT_NORMAL, "later", "", 0.0))
    assert sender.flush(10) and sent[-1] == "later"
    sender.close(1)


def _created_nodeclaim(method: str, path: str, body: object) -> dict[str, Any]:
    assert method == "POST" and path == "/apis/karpenter.sh/v1/nodeclaims"
    created = cast(dict[str, Any], orjson.loads(orjson.dumps(body)))
    created["metadata"].update(uid="u-1", resourceVersion="7", creationTimestamp="2026-01-01T00:00:00Z")
    return created


def _nodeclaim(name: str) -> NodeClaim:
    return NodeClaim(
        metadata=ObjectMeta(name=name),
        spec=NodeClaimSpec(
            node_class_ref=NodeClassRef("karpenter.kwok.sh", "KWOKNodeClass", "default"),
            requirements=(Requirement.from_operator(LABEL_INSTANCE_TYPE, "In", ["c5.large"]),),
        ),
    )


def test_a_created_nodeclaim_is_in_the_cache_before_any_watch_brings_it() -> None:
    # Without it, a provisioning pass between the create and the watch's ADDED sees the
    # pods still pending and nothing in flight for them, and launches a second time.
    cluster = cluster_over(FakeTransport(_created_nodeclaim))
    announced: list[tuple[str, object | None, object | None]] = []
    cluster.subscribe(lambda kind, old, new: announced.append((kind, old, new)))
    cluster.create(_nodeclaim("default-abc"))
    cached = cluster.nodeclaim("default-abc")
    assert cached is not None and cached.metadata.uid == "u-1"
    assert [(kind, old) for kind, old, _ in announced] == [("NodeClaim", None)]


def test_what_the_watch_delivered_first_is_not_overwritten_by_the_create_answer() -> None:
    cluster = cluster_over(FakeTransport(_created_nodeclaim))
    newer = nodeclaim_to_dict(_nodeclaim("default-abc"))
    newer["metadata"].update(uid="u-1", resourceVersion="9")
    newer.update(apiVersion="karpenter.sh/v1", kind="NodeClaim")
    cluster.apply(NODECLAIM, "ADDED", newer)
    cluster.create(_nodeclaim("default-abc"))
    cached = cluster.nodeclaim("default-abc")
    assert cached is not None and cached.metadata.resource_version == "9"


def _stored_nodeclaim(cluster: KubeCluster, last_pod_event: float) -> NodeClaim:
    """A NodeClaim in the cache as the watch brought it, its lastPodEventTime written by the server."""
    raw = nodeclaim_to_dict(_nodeclaim("default-abc").with_status(last_pod_event_time=last_pod_event))
    raw["metadata"].update(uid="u-1", resourceVersion="9")
    raw.update(apiVersion="karpenter.sh/v1", kind="NodeClaim")
    cluster.apply(NODECLAIM, "ADDED", raw)
    stored = cluster.nodeclaim("default-abc")
    assert stored is not None
    return stored


def _echo_status(method: str, path: str, body: object) -> dict[str, Any]:
    assert method == "PUT" and path.endswith("/status") and isinstance(body, dict)
    return {**body, "metadata": {**body["metadata"], "resourceVersion": "10"}}


def test_a_status_the_server_would_store_unchanged_is_not_written() -> None:
    # lastPodEventTime is kept to the second: a pod event later in the same second
    # writes the bytes the server has, and the pod-events controller asks for it on every bind.
    transport = FakeTransport(_echo_status)
    cluster = cluster_over(transport)
    stored = _stored_nodeclaim(cluster, 1_780_000_000.0)
    cluster.update(stored.with_status(last_pod_event_time=1_780_000_000.6))
    assert transport.requests == []
    # The next second is a change.
    cluster.update(stored.with_status(last_pod_event_time=1_780_000_001.2))
    [(method, path, body)] = transport.requests
    assert (method, path) == ("PUT", "/apis/karpenter.sh/v1/nodeclaims/default-abc/status")
    assert cast(dict[str, Any], body)["status"]["lastPodEventTime"] == "2026-05-28T20:26:41Z"


def test_a_stale_write_of_an_unchanged_status_still_goes_to_the_server_to_be_refused() -> None:
    transport = FakeTransport(refuse(CONFLICT))
    cluster = cluster_over(transport)
    stored = _stored_nodeclaim(cluster, 1_780_000_000.0)
    stale = stored.with_metadata(resource_version="8").with_status(last_pod_event_time=1_780_000_000.6)
    with pytest.raises(ConflictError):
        cluster.update(stale)
    assert len(transport.requests) == 1


def _cached_node(cluster: KubeCluster, version: str, boot_id: str) -> None:
    cluster.apply(
        NODE,
        "ADDED",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "node-a", "uid": "n-1", "resourceVersion": version},
            "spec": {"providerID": "kwok://node-a"},
            "status": {"nodeInfo": {"bootID": boot_id}},
        },
    )


def test_a_node_read_before_a_reboot_does_not_write_the_old_boot_id_back() -> None:
    # The reboot wrote boot ID "second" (resourceVersion 12); a controller still holding the
    # Node as it was (11, boot ID "first") updates a label: its boot ID differs from the
    # server's only because it is stale, and the server must refuse it, not take it.
    transport = FakeTransport(refuse(CONFLICT))
    cluster = cluster_over(transport)
    _cached_node(cluster, "11", "first")
    stale = cluster.node("node-a")
    assert stale is not None
    _cached_node(cluster, "12", "second")
    with pytest.raises(ConflictError):
        cluster.update(stale.with_changes(metadata=stale.metadata.with_changes(labels={"x": "y"})))
    [(method, path, body)] = transport.requests
    assert (method, path) == ("PATCH", "/api/v1/nodes/node-a/status")
    assert cast(dict[str, Any], body)["metadata"] == {"resourceVersion": "11"}
