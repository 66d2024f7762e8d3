"""The informer's streaming watch (WatchList) and its fallback to list-then-watch, over real HTTP.

A small HTTP server stands in for kube-apiserver's ``/api/v1/pods``: it answers
a list with a list, and a watch with watch events one per line, as the real one
does. How it treats ``sendInitialEvents`` is the test's choice: it streams the
initial events and the ``k8s.io/initial-events-end`` bookmark (a server with the
WatchList gate on), refuses with the 422 the real server sends when the gate is
off, or ignores the parameter (a watch from resourceVersion "" sends ADDED events
and no bookmark), ending the stream or falling silent.
"""

from __future__ import annotations

import gzip
import http.server
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from karpy.kube._http import JSON, ApiTransport
from karpy.kube._informer import WATCH_LIST_ENV, Informer
from karpy.kube._resources import POD, ResourceType

REFUSED = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "message": 'ListOptions.meta.k8s.io "" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is '
    "forbidden for watch unless the WatchList feature gate is enabled",
    "reason": "Invalid",
    "code": 422,
}


def pod(name: str, version: str) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "shop", "uid": name, "resourceVersion": version},
        "spec": {"containers": [{"name": "web", "image": "web"}]},
    }


def bookmark(version: str, *, initial_events_end: bool) -> JSON:
    metadata: JSON = {"resourceVersion": version}
    if initial_events_end:
        metadata["annotations"] = {"k8s.io/initial-events-end": "true"}
    return {"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1", "metadata": metadata}}


@dataclass
class FakeApiServer:
    """How a watch with sendInitialEvents is answered: ``mode`` stream, refuse, ignore-end or ignore-silent.

    A streaming answer is compressed as kube-apiserver 1.37's (WatchListCompression): one gzip
    member per event when the client accepts gzip.
    """

    mode: str
    pods: list[JSON]
    requests: list[dict[str, str]] = field(default_factory=list)
    # Sent, one per line, on the watch that goes on after the initial events (or a plain watch).
    later: list[JSON] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    def answer(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        query = dict(
            urllib.parse.parse_qsl(urllib.parse.urlsplit(handler.path).query, keep_blank_values=True)
        )
        self.requests.append(query)
        if query.get("watch") != "true":
            self._send(
                handler, 200, [{"kind": "PodList", "metadata": {"resourceVersion": "10"}, "items": self.pods}]
            )
            return
        if query.get("sendInitialEvents") == "true":
            if self.mode == "refuse":
                self._send(handler, 422, [REFUSED])
                return
            events = [{"type": "ADDED", "object": item} for item in self.pods]
            if self.mode == "stream":
                streamed = [*events, bookmark("10", initial_events_end=True), *self.later]
                self._stream(handler, streamed, gzipped="gzip" in handler.headers.get("Accept-Encoding", ""))
            elif self.mode == "ignore-end":
                self._send(handler, 200, events)  # the server's timeout ends it, without the bookmark
            else:
                self._stream(handler, events)  # ignore-silent: nothing more until released
            return
        self._stream(handler, self.later)

    @staticmethod
    def _send(
        handler: http.server.BaseHTTPRequestHandler, status: int, bodies: list[JSON], *, gzipped: bool = False
    ) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        if gzipped:
            handler.send_header("Content-Encoding", "gzip")
        handler.end_headers()
        for body in bodies:
            line = orjson.dumps(body) + b"\n"
            handler.wfile.write(gzip.compress(line) if gzipped else line)
            handler.wfile.flush()

    def _stream(
        self, handler: http.server.BaseHTTPRequestHandler, events: list[JSON], *, gzipped: bool = False
    ) -> None:
        self._send(handler, 200, events, gzipped=gzipped)
        self.release.wait(10)

    def watch_requests(self) -> list[dict[str, str]]:
        return [query for query in self.requests if query.get("watch") == "true"]

    def lists(self) -> int:
        return sum(1 for query in self.requests if query.get("watch") != "true")


class Sink:
    def __init__(self) -> None:
        self.replaced: list[list[str]] = []
        self.applied: list[tuple[str, str]] = []

    def replace(self, resource: ResourceType, items: list[JSON]) -> None:
        self.replaced.append([item["metadata"]["name"] for item in items])

    def apply(self, resource: ResourceType, event_type: str, obj: JSON) -> None:
        self.applied.append((event_type, obj["metadata"]["name"]))


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    servers: list[tuple[http.server.ThreadingHTTPServer, FakeApiServer, ApiTransport]] = []

    def start(
        mode: str, pods: list[JSON], later: list[JSON] | None = None
    ) -> tuple[FakeApiServer, ApiTransport]:
        fake = FakeApiServer(mode, pods, later=later or [])

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                fake.answer(self)

            def log_message(self, *args: object) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        kubeconfig = tmp_path / f"kubeconfig-{len(servers)}"
        kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
            f"clusters: [{{name: fake, cluster: {{server: 'http://127.0.0.1:{server.server_address[1]}'}}}}]\n"
            "users: [{name: fake, user: {token: secret}}]\n"
            "contexts: [{name: fake, context: {cluster: fake, user: fake}}]\n"
        )
        transport = ApiTransport.from_kubeconfig(kubeconfig)
        servers.append((server, fake, transport))
        return fake, transport

    yield start
    for server, fake, transport in servers:
        fake.release.set()
        transport.close()
        server.shutdown()
        server.server_close()


def run(informer: Informer, until: Any, timeout: float = 10) -> None:
    informer.start()
    try:
        deadline = time.monotonic() + timeout
        while not until() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert until(), "the informer did not get there in time"
    finally:
        informer.stop()
        informer.transport.interrupt_streams()
        informer.join(5)


def test_a_server_that_streams_initial_events_is_never_listed(serve: Any) -> None:
    fake, transport = serve(
        "stream", [pod("a", "8"), pod("b", "9")], later=[{"type": "MODIFIED", "object": pod("a", "11")}]
    )
    sink = Sink()
    informer = Informer(transport, POD, sink, stream_initial_events=True)
    run(informer, lambda: sink.applied)

    assert fake.lists() == 0
    [watch] = fake.watch_requests()  # one request: the initial events, then the watch, on one stream
    assert watch["sendInitialEvents"] == "true"
    assert watch["resourceVersionMatch"] == "NotOlderThan"
    assert watch["allowWatchBookmarks"] == "true"
    assert watch["resourceVersion"] == ""
    assert sink.replaced == [["a", "b"]]  # handed over whole, as a list would be
    assert sink.applied == [("MODIFIED", "a")]
    assert informer.synced.is_set()
    assert informer.resource_version == "11"
    assert (informer.initial_streams, informer.lists) == (1, 0)


def test_a_server_that_refuses_streaming_is_listed_then_watched_and_not_asked_again(serve: Any) -> None:
    fake, transport = serve("refuse", [pod("a", "8")], later=[{"type": "MODIFIED", "object": pod("a", "11")}])
    sink = Sink()
    informer = Informer(transport, POD, sink, stream_initial_events=True)
    run(informer, lambda: sink.applied)

    assert fake.lists() == 1
    streaming, plain = fake.watch_requests()
    assert streaming.get("sendInitialEvents") == "true"
    assert "sendInitialEvents" not in plain and "resourceVersionMatch" not in plain
    assert plain["resourceVersion"] == "10"  # the list's
    assert sink.replaced == [["a"]] and sink.applied == [("MODIFIED", "a")]
    assert not informer.stream_initial_events


def test_a_stream_that_ends_without_the_end_bookmark_falls_back_to_a_list(serve: Any) -> None:
    fake, transport = serve("ignore-end", [pod("a", "8")])
    sink = Sink()
    informer = Informer(transport, POD, sink, stream_initial_events=True)
    run(informer, lambda: informer.synced.is_set() and len(fake.watch_requests()) >= 2)

    assert fake.lists() == 1
    assert sink.replaced == [["a"]]  # from the list: the streamed ADDED events were not taken as a list
    assert "sendInitialEvents" not in fake.watch_requests()[1]


def test_a_stream_silent_before_the_end_bookmark_falls_back_to_a_list(serve: Any) -> None:
    fake, transport = serve("ignore-silent", [pod("a", "8")])
    sink = Sink()
    informer = Informer(transport, POD, sink, stream_initial_events=True)
    informer.initial_events_timeout = 0.5
    started = time.monotonic()
    run(informer, informer.synced.is_set)

    assert time.monotonic() - started < 5  # not the server's watch timeout
    assert fake.lists() == 1
    assert sink.replaced == [["a"]]


def test_client_gos_switch_turns_streaming_off(serve: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WATCH_LIST_ENV, "false")
    fake, transport = serve("stream", [pod("a", "8")])
    sink = Sink()
    informer = Informer(transport, POD, sink)
    run(informer, fake.watch_requests)

    assert fake.lists() == 1
    assert "sendInitialEvents" not in fake.watch_requests()[0]
