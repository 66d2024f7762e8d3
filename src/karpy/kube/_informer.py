"""List-then-watch for one kind, in a thread, without losing a change.

This is client-go's reflector, reduced to what karpy needs:

1. a streaming watch (client-go's WatchList, KEP 3157: ``sendInitialEvents=true``,
   ``resourceVersionMatch=NotOlderThan``) gives every object as an ADDED event,
   then a BOOKMARK annotated ``k8s.io/initial-events-end`` at the resourceVersion
   they are consistent at, and goes on as the watch of step 2: one request where a
   list and a watch took two (or more, paged). A server that refuses it (the
   WatchList gate off, before Kubernetes 1.27: 400/422), or answers without the
   end bookmark (the stream ends, a plain BOOKMARK comes first, or nothing comes
   for ``initial_events_timeout`` seconds), gets the list of step 1b instead, for
   good; ``KUBE_FEATURE_WatchListClient=false`` (client-go's own switch) asks for
   the list from the start;
1b. a paged LIST (``limit``/``continue``) gives every object and the
   resourceVersion the list is consistent at;
2. a WATCH from that resourceVersion (``allowWatchBookmarks=true``) delivers
   every change after it; BOOKMARK events move the resourceVersion on without
   a change, so a reconnect after a quiet hour does not start from a
   resourceVersion etcd has long compacted;
3. when the watch ends (the server's ``timeoutSeconds``, a dropped connection,
   an error) it is resumed from the last resourceVersion seen, after a backoff
   if it failed, so nothing between the two watches is missed;
4. when the server answers 410 Gone (that resourceVersion is compacted), the
   informer streams (or LISTs) again and hands the whole list to the sink, which diffs it
   against its cache: objects created, changed or deleted during the gap are
   announced as changes like any other, so no change is lost, only coalesced.

The informer does not keep a cache itself: its sink (the cluster adapter)
owns the cache and its indexes, so that reads and the diff of a relist see
the same state under one lock.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from typing import Protocol

import orjson

from karpy.kube._http import (
    HTTP_BAD_REQUEST,
    HTTP_GONE,
    HTTP_UNPROCESSABLE,
    JSON,
    ApiStatusError,
    ApiTransport,
    LineStream,
)
from karpy.kube._resources import ResourceType

log = logging.getLogger("karpy.kube.informer")

LIST_PAGE_SIZE = 500
# The server ends a watch after this many seconds (plus jitter, as client-go does),
# so connections are renewed now and then even when nothing fails.
WATCH_SECONDS = 300
BACKOFF_INITIAL = 0.5
BACKOFF_MAX = 30.0

EVENT_ADDED = "ADDED"
EVENT_MODIFIED = "MODIFIED"
EVENT_DELETED = "DELETED"
EVENT_BOOKMARK = "BOOKMARK"
EVENT_ERROR = "ERROR"

# The annotation of the BOOKMARK that ends a streaming watch's initial events.
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
# Seconds without any event before the initial events are judged never to end (a server that
# ignored sendInitialEvents sends no end bookmark); client-go warns after 10.
INITIAL_EVENTS_TIMEOUT = 30.0
# client-go's switch for streaming watches (on by default since client-go 0.35), read the same way.
WATCH_LIST_ENV = "KUBE_FEATURE_WatchListClient"


def watch_list_enabled() -> bool:
    """Whether informers start with a streaming watch (``KUBE_FEATURE_WatchListClient``, default on)."""
    return os.environ.get(WATCH_LIST_ENV, "true").strip().lower() not in ("false", "0")


class ResourceVersionExpiredError(Exception):
    """410 Gone: the resourceVersion to watch from is older than etcd's compaction."""


class InitialEventsUnsupportedError(Exception):
    """The server refused a streaming watch, or streamed without the initial-events-end bookmark."""


class InformerSink(Protocol):
    def replace(self, resource: ResourceType, items: list[JSON]) -> None:
        """The complete current list (after the first LIST and after every relist)."""
        ...

    def apply(self, resource: ResourceType, event_type: str, obj: JSON) -> None:
        """One ADDED, MODIFIED or DELETED event."""
        ...


def _resource_version(obj: JSON) -> str:
    metadata = obj.get("metadata")
    value = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
    return value if isinstance(value, str) else ""


class Informer:
    """Keeps a sink current with one kind; ``start`` runs it in a daemon thread."""

    def __init__(
        self,
        transport: ApiTransport,
        resource: ResourceType,
        sink: InformerSink,
        *,
        stream_initial_events: bool | None = None,
    ) -> None:
        self.transport = transport
        self.resource = resource
        self.sink = sink
        self.synced = threading.Event()
        self.resource_version = ""
        # Whether to start with a streaming watch; turned off for good once the server refuses.
        self.stream_initial_events = (
            watch_list_enabled() if stream_initial_events is None else stream_initial_events
        )
        self.initial_events_timeout = INITIAL_EVENTS_TIMEOUT
        self.lists = 0
        self.initial_streams = 0
        self.relists_after_gone = 0
        self.watch_errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Run (again, after :meth:`stop`, from the last resourceVersion seen)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, name=f"informer-{self.resource.plural}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def _run(self) -> None:
        backoff = BACKOFF_INITIAL
        while not self._stop.is_set():
            try:
                if not self.resource_version and self.stream_initial_events:
                    self._watch(initial=True)
                else:
                    if not self.resource_version:
                        self._list()
                    self._watch()
                backoff = BACKOFF_INITIAL
            except InitialEventsUnsupportedError as why:
                log.info("%s: no streaming watch (%s), listing instead", self.resource.plural, why)
                self.stream_initial_events = False
            except ResourceVersionExpiredError:
                log.info(
                    "%s: resourceVersion %s expired, listing again",
                    self.resource.plural,
                    self.resource_version,
                )
                self.relists_after_gone += 1
                self.resource_version = ""
            except Exception as error:  # any failure: back off, then resume from the last resourceVersion
                if self._stop.is_set():
                    return
                self.watch_errors += 1
                log.warning(
                    "%s: list/watch failed (%s), retrying in %.1fs", self.resource.plural, error, backoff
                )
                self._stop.wait(backoff * (1 + random.random() / 2))
                backoff = min(backoff * 2, BACKOFF_MAX)

    def _list(self) -> None:
        items: list[JSON] = []
        params = {"limit": str(LIST_PAGE_SIZE)}
        resource_version = ""
        while True:
            try:
                page = self.transport.request("GET", self.resource.collection_path(), params=params).body
            except ApiStatusError as error:
                if error.code == HTTP_GONE and "continue" in params:
                    # The continue token expired mid-list: start the list over.
                    items, params, resource_version = [], {"limit": str(LIST_PAGE_SIZE)}, ""
                    continue
                raise
            metadata = page.get("metadata") or {}
            resource_version = resource_version or str(metadata.get("resourceVersion") or "")
            for item in page.get("items") or ():
                if isinstance(item, dict):
                    # List items carry no apiVersion and kind; the cache keeps whole objects.
                    item["apiVersion"] = self.resource.api_version
                    item["kind"] = self.resource.kind
                    items.append(item)
            token = metadata.get("continue")
            if not token:
                break
            params = {"limit": str(LIST_PAGE_SIZE), "continue": str(token)}
        self.sink.replace(self.resource, items)
        self.resource_version = resource_version
        self.lists += 1
        self.synced.set()

    def _watch(self, *, initial: bool = False) -> None:
        """Watch from ``resource_version``; with ``initial``, stream every object first.

        The initial ADDED events are gathered and handed to the sink whole at the end
        bookmark, as a list would be, so objects deleted while the informer was not
        watching (after a 410) are found gone; the stream then goes on as the watch.
        """
        params = {
            "watch": "true",
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_SECONDS + random.randrange(WATCH_SECONDS // 5)),
        }
        if initial:
            params["sendInitialEvents"] = "true"
            params["resourceVersionMatch"] = "NotOlderThan"
        read_timeout = WATCH_SECONDS * 1.2 + 30
        try:
            with self.transport.stream_lines(self.resource.collection_path(), params, read_timeout) as lines:
                # A stop that came before the stream opened did not interrupt it: look again.
                if self._stop.is_set():
                    return
                if initial:
                    self.initial_streams += 1
                    if not self._initial_events(lines):
                        return
                for line in lines:
                    if self._stop.is_set():
                        return
                    if line.strip():
                        self._handle(orjson.loads(line))
        except ApiStatusError as error:
            if error.code == HTTP_GONE:
                raise ResourceVersionExpiredError(str(error)) from error
            if initial and error.code in (HTTP_BAD_REQUEST, HTTP_UNPROCESSABLE):
                raise InitialEventsUnsupportedError(str(error)) from error
            raise

    def _initial_events(self, lines: LineStream) -> bool:
        """Read the initial events up to the end bookmark and hand them to the sink.

        False when the informer is stopping. Raises InitialEventsUnsupportedError when
        the stream ends, sends anything but ADDED, or is silent for
        ``initial_events_timeout`` seconds before the end bookmark.
        """
        items: list[JSON] = []
        last_event = [time.monotonic()]
        ended = threading.Event()
        timed_out = threading.Event()

        def watchdog() -> None:
            while not ended.wait(max(0.0, last_event[0] + self.initial_events_timeout - time.monotonic())):
                if time.monotonic() - last_event[0] >= self.initial_events_timeout:
                    timed_out.set()
                    lines.interrupt()
                    return

        threading.Thread(target=watchdog, name=f"initial-events-{self.resource.plural}", daemon=True).start()
        try:
            for line in lines:
                if self._stop.is_set():
                    return False
                last_event[0] = time.monotonic()
                if not line.strip():
                    continue
                event = orjson.loads(line)
                event_type = event.get("type")
                obj = event.get("object")
                if event_type == EVENT_ERROR or not isinstance(obj, dict):
                    self._handle(event)  # an ERROR raises as in any watch
                    continue
                if event_type == EVENT_ADDED:
                    obj.setdefault("apiVersion", self.resource.api_version)
                    obj.setdefault("kind", self.resource.kind)
                    items.append(obj)
                    continue
                annotations = (obj.get("metadata") or {}).get("annotations") or {}
                if event_type == EVENT_BOOKMARK and annotations.get(INITIAL_EVENTS_END) == "true":
                    ended.set()
                    self.sink.replace(self.resource, items)
                    self.resource_version = _resource_version(obj)
                    self.synced.set()
                    return True
                raise InitialEventsUnsupportedError(
                    f"a {event_type} event before the initial-events-end bookmark"
                )
        except InitialEventsUnsupportedError:
            raise
        except Exception as error:
            if timed_out.is_set():
                raise InitialEventsUnsupportedError(
                    f"no initial-events-end bookmark within {self.initial_events_timeout:g}s"
                ) from error
            raise
        finally:
            ended.set()
        if self._stop.is_set():
            return False
        if timed_out.is_set():
            raise InitialEventsUnsupportedError(
                f"no initial-events-end bookmark within {self.initial_events_timeout:g}s"
            )
        raise InitialEventsUnsupportedError("the stream ended before the initial-events-end bookmark")

    def _handle(self, event: JSON) -> None:
        event_type = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            return
        if event_type == EVENT_ERROR:
            code = int(obj.get("code") or 0)
            if code == HTTP_GONE:
                raise ResourceVersionExpiredError(str(obj.get("message", "")))
            raise ApiStatusError(code, str(obj.get("reason", "")), str(obj.get("message", "")))
        resource_version = _resource_version(obj)
        if event_type in (EVENT_ADDED, EVENT_MODIFIED, EVENT_DELETED):
            obj.setdefault("apiVersion", self.resource.api_version)
            obj.setdefault("kind", self.resource.kind)
            self.sink.apply(self.resource, str(event_type), obj)
        if resource_version:
            self.resource_version = resource_version
