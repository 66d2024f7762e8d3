"""KubeCluster: the controllers' Cluster protocol over a real kube-apiserver.

``karpy simulate`` runs the controllers against ``InMemoryCluster``; ``karpy
run`` runs the same controllers against this class. Both implement
:class:`karpy.operator.cluster.Cluster` and raise the same typed errors,
and both announce every change to subscribers as ``(kind, old, new)``, so a
controller cannot tell them apart except by timing.

**Reads come from informer caches.** One :class:`~karpy.kube._informer.Informer` per kind (Pods,
Nodes, NodeClaims, NodePools, both node classes, DaemonSets, PodDisruptionBudgets,
PersistentVolumeClaims, PersistentVolumes, Namespaces, LimitRanges and RuntimeClasses) streams
its kind's objects and then watches (one request; a list first where the server does not stream,
see :mod:`karpy.kube._informer`) in a background thread and hands objects to this class, which
keeps, under one lock, the server's dict of each object, the record parsed from it (with the parser
:data:`karpy.api.manifest.PARSERS` registers for its apiVersion and kind), and the same indexes as
the in-memory store: pods by node name and unbound pods. A read never makes a request. After a 410
Gone the informer lists again and this class diffs the list against its cache, so objects that
appeared, changed or vanished during the gap are announced like any other change.

**Writes go over HTTP, checked against the caller's resourceVersion.** A
caller's stale object gets a 409 from the server and a
:class:`~karpy.operator.cluster.ConflictError` here, exactly as the
in-memory store raises it. A write returns the object the server answered
with (its resourceVersion is fresh); the cache is *not* updated from the
answer but from the watch event that follows, so the cache never goes back in
time, at the price that a read right after a write may still see the old
object (a controller then gets a ConflictError on its next write and retries
from fresh state, which it must handle anyway). How each kind is written:

- NodeClaims (karpy's own) are written whole from the record: a PUT of the
  object when metadata or spec changed, then a PUT of the ``/status``
  subresource when the status changed, with the resourceVersion the first
  answer returned. The controllers change spec-side and status fields in one
  ``update()`` (a launch sets labels and status together); the CRD has a
  status subresource, so a PUT of the object ignores its status and a PUT of
  ``/status`` ignores everything else. Two requests are the price; a conflict
  on the second (someone wrote in between) raises ConflictError with the first
  one applied, which a reconcile that retries from fresh state handles.
- Nodes and Pods (not karpy's) are written with JSON merge patches of exactly
  the fields karpy changed (see :mod:`karpy.kube._encode`), carrying
  ``metadata.resourceVersion`` as a precondition, so nothing karpy's slim
  records leave out (a Node's nodeInfo, a Pod's containers) is lost.
- Other kinds get a metadata merge patch (labels, annotations, finalizers).
- The status of NodePools and node classes (``update_status``) is a PUT of
  the ``/status`` subresource: the server's object with the status fields
  karpy owns replaced, the others kept, checked against the resourceVersion.

**A NodePool that cannot be read** (the CRD accepted what karpy's reading
refuses, say ``limits.cpu: -5``) is not in :meth:`nodepools`, so nothing is
ever launched from it, but it is not forgotten either: it is kept as an
:class:`~karpy.api.nodepool.UnreadableNodePool` (its metadata, the field at
fault, its status) in :meth:`unreadable_nodepools`, and its changes are
announced under ``UnreadableNodePool``, so the NodePool status controller can
report the fault on the object itself. Any other object that cannot be read
is left out with a log line, and nothing else is affected; two kinds get more:
a NodeClaim is kept as an :class:`~karpy.api.nodeclaim.UnreadableNodeClaim`
(its name and provider ID), so its instance still has an owner and is not
garbage collected, and a Pod gets a Warning Event (``FailedToRead``, the
field and why), once per version.

A 403 whose Status names the cause ``NamespaceTerminating`` (a namespace
being deleted accepts nothing new) raises :class:`NamespaceTerminatingError`;
an eviction refused that way is no failure (the pod goes with its namespace).
Events are sent from a thread of their own (:mod:`karpy.kube._events`), so a
reconcile never waits for one; :meth:`KubeCluster.stop` sends what is queued.
A repeat of an Event (same object, type, reason and message) is written at
most once per two minutes, as Karpenter's recorder dedupes; the repeats held
meanwhile are added to the count of the next write.

Change notifications are delivered from the informer threads, one at a time
(a dispatch lock serializes them across kinds), never while the cache lock is
held, so a listener may read the cluster. A listener that drives a
:class:`karpy.operator.runtime.Runtime` from another thread must hand the
notification over (a queue), since the Runtime is not thread-safe.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import orjson

from karpy.api._reader import FieldReader, ManifestError
from karpy.api.capacitybuffer import CapacityBufferStatus
from karpy.api.core import (
    Node,
    Pod,
    PodSpec,
)
from karpy.api.manifest import PARSERS
from karpy.api.meta import ObjectMeta, format_timestamp
from karpy.api.nodeclaim import UNREADABLE_NODECLAIM, NodeClaim, UnreadableNodeClaim
from karpy.api.nodeclass import NodeClassStatus
from karpy.api.nodeoverlay import NodeOverlayStatus
from karpy.api.nodepool import UNREADABLE_NODEPOOL, NodePoolStatus, UnreadableNodePool
from karpy.api.structural import manifest_errors
from karpy.kube._encode import (
    merged_metadata,
    merged_nodeclaim_status,
    merged_owned_status,
    metadata_merge_patch,
    node_merge_patch,
    node_to_dict,
    nodeclaim_spec_to_dict,
    nodeclaim_status_to_dict,
    nodeclaim_to_dict,
    pod_merge_patch,
    resources_to_dict,
)
from karpy.kube._events import EventSender, PendingEvent
from karpy.kube._http import (
    CONTENT_MERGE_PATCH,
    HTTP_BAD_REQUEST,
    HTTP_CONFLICT,
    HTTP_FORBIDDEN,
    HTTP_NOT_FOUND,
    HTTP_TOO_MANY_REQUESTS,
    HTTP_UNPROCESSABLE,
    JSON,
    ApiStatusError,
    ApiTransport,
)
from karpy.kube._informer import EVENT_DELETED, Informer
from karpy.kube._resources import EVENT, NODECLAIM, NODEPOOL, POD, TYPES_BY_KIND, WATCHED_TYPES, ResourceType
from karpy.operator.cluster import (
    EVENT_WARNING,
    AlreadyExistsError,
    Clock,
    ConflictError,
    EvictionRefusedError,
    InvalidError,
    KubeError,
    NotFoundError,
    WallClock,
)
from karpy.operator.reads import NodeClaimIndex, TypedReads
from karpy.operator.reads import object_meta as _meta_of

log = logging.getLogger("karpy.kube.cluster")

T = TypeVar("T")
Listener = Callable[[str, object | None, object | None], None]

EVENT_SOURCE = "karpy"
# Events are recorded in this namespace for cluster-scoped objects (Nodes, NodeClaims).
EVENT_NAMESPACE_FOR_CLUSTER_OBJECTS = "default"
# How many distinct events are remembered to count repeats (then the memory starts over).
MAX_REMEMBERED_EVENTS = 4096
# A repeat of an Event within this long of its last write is not sent (Karpenter's recorder
# drops such repeats for two minutes); its count rides on the next write after the window.
EVENT_DEDUPE_SECONDS = 120.0
# How long ``stop`` waits for queued events to be sent.
EVENT_FLUSH_TIMEOUT = 5.0
# Creations ``create_all`` sends at once: enough to hide the round trip of a busy server,
# few enough not to crowd out everyone else's writes (kube-apiserver takes 200 at once by default).
CREATE_CONCURRENCY = 16
# The Status cause of a 403 for a write into a namespace being deleted.
CAUSE_NAMESPACE_TERMINATING = "NamespaceTerminating"
_DELETE_OPTIONS = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}


class NamespaceTerminatingError(KubeError):
    """403: the namespace is being deleted, so nothing new may be created in it (an Eviction included)."""


@dataclass
class _RememberedEvent:
    """An Event karpy wrote: its name, the count written, when, and the repeats held since."""

    name: str
    count: int
    written_at: float
    held: int = 0


def _resource_of(obj: object) -> ResourceType:
    kind = getattr(obj, "kind", None)
    resource = TYPES_BY_KIND.get(kind) if isinstance(kind, str) else None
    if resource is None:
        raise TypeError(f"KubeCluster does not handle {kind!r} objects")
    return resource


def _raw_meta(raw: JSON) -> JSON:
    meta = raw.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _raw_version(raw: JSON) -> str:
    return str(_raw_meta(raw).get("resourceVersion") or "")


def _raw_key(resource: ResourceType, raw: JSON) -> str:
    meta = _raw_meta(raw)
    return resource.key(str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _copy(raw: JSON) -> JSON:
    copied = orjson.loads(orjson.dumps(raw))
    assert isinstance(copied, dict)
    return copied


def parse_record(resource: ResourceType, raw: JSON) -> object:
    """The karpy record of a server object (raises ManifestError if it cannot be read)."""
    parser = PARSERS[(resource.api_version, resource.kind)]
    record = parser(FieldReader(raw), resource.api_version)
    # As karpy validate and simulate read it: an object stored under a laxer CRD than karpy's
    # (Karpenter's own, an older karpy's) that karpy's CRD would refuse is not read either.
    problems = manifest_errors(raw, resource.api_version, resource.kind)
    if problems:
        raise problems[0]
    return record


# The reason of the Warning Event on a pod karpy cannot read.
REASON_UNREADABLE = "FailedToRead"


class KubeCluster(TypedReads):
    """Implements karpy.operator.cluster.Cluster over a kube-apiserver."""

    def __init__(
        self,
        transport: ApiTransport,
        *,
        clock: Clock | None = None,
        kinds: Iterable[ResourceType] = WATCHED_TYPES,
    ) -> None:
        self._transport = transport
        self.clock: Clock = clock if clock is not None else WallClock()
        self._lock = threading.RLock()
        self._dispatch_lock = threading.Lock()
        self._resources = {resource.kind: resource for resource in kinds}
        self._raw: dict[str, dict[str, JSON]] = {kind: {} for kind in self._resources}
        self._records: dict[str, dict[str, object]] = {kind: {} for kind in self._resources}
        self._records[UNREADABLE_NODEPOOL] = {}
        self._records[UNREADABLE_NODECLAIM] = {}
        # Changes to UnreadableNodePool records made under the lock, announced after it.
        self._unreadable_changes: list[tuple[object | None, object | None]] = []
        # Pods that cannot be read: the version last warned about, and the Warnings to send.
        self._warned_unreadable: dict[str, str] = {}
        self._unreadable_warnings: list[tuple[Pod, str]] = []
        self._pods_by_node: dict[str, set[str]] = {}
        self._unbound_pods: set[str] = set()
        self._nodeclaim_index = NodeClaimIndex()
        self._listeners: list[Listener] = []
        self._informers = {
            kind: Informer(transport, resource, self) for kind, resource in self._resources.items()
        }
        # Per distinct event: the Event's name, the count last written, when, and repeats held since.
        self._event_counts: dict[tuple[str, ...], _RememberedEvent] = {}
        self._events = EventSender(self._send_event, name="kube-events")

    @classmethod
    def from_kubeconfig(cls, path: str | Path | None = None, *, clock: Clock | None = None) -> KubeCluster:
        """A cluster for the kubeconfig at ``path`` (``$KUBECONFIG`` or in-cluster config when None)."""
        return cls(ApiTransport.from_kubeconfig(path), clock=clock)

    # -- lifecycle --------------------------------------------------------

    def start(self) -> None:
        """Start the informers (again after :meth:`stop`, resuming from where they were)."""
        for informer in self._informers.values():
            informer.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the informers; the caches keep their contents."""
        for informer in self._informers.values():
            informer.stop()
        self._transport.interrupt_streams()
        deadline = time.monotonic() + timeout
        for informer in self._informers.values():
            informer.join(max(0.0, deadline - time.monotonic()))
        # Events still queued go out while the connection is there.
        self._events.flush(min(EVENT_FLUSH_TIMEOUT, max(0.0, deadline - time.monotonic())))

    def close(self) -> None:
        self.stop()
        self._events.close(EVENT_FLUSH_TIMEOUT)
        self._transport.close()

    def flush_events(self, timeout: float = EVENT_FLUSH_TIMEOUT) -> bool:
        """Wait until every event recorded so far was sent; False if ``timeout`` passed first."""
        return self._events.flush(timeout)

    def __enter__(self) -> KubeCluster:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def synced(self) -> bool:
        """Whether every informer has its kind's complete first state (listed or streamed)."""
        return all(informer.synced.is_set() for informer in self._informers.values())

    def wait_for_sync(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        for informer in self._informers.values():
            if not informer.synced.wait(max(0.0, deadline - time.monotonic())):
                return False
        return True

    def relists_after_gone(self, kind: str) -> int:
        """How many times the ``kind`` informer listed (or streamed) again after a 410 Gone."""
        return self._informers[kind].relists_after_gone

    def lists(self, kind: str) -> int:
        """How many times the ``kind`` informer listed (not counting streamed initial events)."""
        return self._informers[kind].lists

    def initial_streams(self, kind: str) -> int:
        """How many streaming watches (initial events first) the ``kind`` informer opened."""
        return self._informers[kind].initial_streams

    # -- subscriptions ----------------------------------------------------

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def _announce(self, kind: str, changes: list[tuple[object | None, object | None]]) -> None:
        if not changes:
            return
        with self._dispatch_lock:
            for old, new in changes:
                for listener in list(self._listeners):
                    try:
                        listener(kind, old, new)
                    except Exception:  # a listener's bug must not stop the informer
                        log.exception("change listener failed for %s", kind)

    # -- the informers' sink ---------------------------------------------

    def replace(self, resource: ResourceType, items: list[JSON]) -> None:
        changes: list[tuple[object | None, object | None]] = []
        with self._lock:
            table = self._raw[resource.kind]
            seen: set[str] = set()
            for item in items:
                key = _raw_key(resource, item)
                seen.add(key)
                stored = table.get(key)
                if stored is not None and _raw_version(stored) == _raw_version(item):
                    continue
                changes.append(self._store(resource, key, item))
            for key in [key for key in table if key not in seen]:
                changes.append(self._store(resource, key, None))
        self._announce(resource.kind, [change for change in changes if change != (None, None)])
        self._announce_unreadable()

    def apply(self, resource: ResourceType, event_type: str, obj: JSON) -> None:
        key = _raw_key(resource, obj)
        with self._lock:
            change = self._store(resource, key, None if event_type == EVENT_DELETED else obj)
        if change != (None, None):
            self._announce(resource.kind, [change])
        self._announce_unreadable()

    def _store(
        self, resource: ResourceType, key: str, raw: JSON | None
    ) -> tuple[object | None, object | None]:
        kind = resource.kind
        old = self._records[kind].get(key)
        new: object | None = None
        unreadable: UnreadableNodePool | None = None
        unreadable_claim: UnreadableNodeClaim | None = None
        if raw is not None:
            try:
                new = parse_record(resource, raw)
            except (ManifestError, ValueError) as error:
                log.warning("%s %s cannot be read, ignored: %s", kind, key, error)
                if kind == NODEPOOL.kind and isinstance(error, ManifestError):
                    unreadable = self._unreadable_nodepool(raw, error)
                if kind == NODECLAIM.kind:
                    path = error.path if isinstance(error, ManifestError) else ""
                    message = error.message if isinstance(error, ManifestError) else str(error)
                    unreadable_claim = UnreadableNodeClaim.of(raw, path, message)
                if kind == POD.kind:
                    self._warn_unreadable_pod(key, raw, str(error))
        if kind == POD.kind and (new is not None or raw is None):
            self._warned_unreadable.pop(key, None)
        if kind == NODEPOOL.kind:
            self._keep_unreadable(key, unreadable)
        if kind == NODECLAIM.kind:
            claims = self._records[UNREADABLE_NODECLAIM]
            claims.pop(key, None)
            if unreadable_claim is not None:
                claims[key] = unreadable_claim
        if new is None:
            self._raw[kind].pop(key, None)
            self._records[kind].pop(key, None)
        else:
            assert raw is not None
            self._raw[kind][key] = raw
            self._records[kind][key] = new
        if kind == POD.kind:
            self._index_pod(key, old, new)
        elif kind == NODECLAIM.kind:
            self._nodeclaim_index.update(old, new)
        return old, new

    @staticmethod
    def _unreadable_nodepool(raw: JSON, error: ManifestError) -> UnreadableNodePool | None:
        try:
            return UnreadableNodePool.of(raw, error)
        except ManifestError:
            return None  # not even its metadata reads: nothing to report it on

    def _keep_unreadable(self, key: str, record: UnreadableNodePool | None) -> None:
        """Keep (or drop) the record of a NodePool that cannot be read; the change is announced later."""
        table = self._records[UNREADABLE_NODEPOOL]
        old = table.pop(key, None)
        if record is not None:
            table[key] = record
        if old is not None or record is not None:
            self._unreadable_changes.append((old, record))

    def _announce_unreadable(self) -> None:
        with self._lock:
            changes, self._unreadable_changes = self._unreadable_changes, []
            warnings, self._unreadable_warnings = self._unreadable_warnings, []
        self._announce(UNREADABLE_NODEPOOL, changes)
        for pod, why in warnings:
            self.record_event(
                pod,
                EVENT_WARNING,
                REASON_UNREADABLE,
                f"{why}; karpy does not consider this pod until it is fixed",
            )

    def _warn_unreadable_pod(self, key: str, raw: JSON, why: str) -> None:
        """A Warning Event on a pod karpy cannot read, once per version of it (sent after the lock)."""
        version = _raw_version(raw)
        if self._warned_unreadable.get(key) == version:
            return
        self._warned_unreadable[key] = version
        meta = _raw_meta(raw)
        name, namespace, uid = meta.get("name"), meta.get("namespace"), meta.get("uid")
        if not isinstance(name, str) or not isinstance(namespace, str):
            return  # nothing to name in an Event
        subject = Pod(
            metadata=ObjectMeta(name=name, namespace=namespace, uid=uid if isinstance(uid, str) else ""),
            spec=PodSpec(),
        )
        self._unreadable_warnings.append((subject, why))

    def _index_pod(self, key: str, old: object | None, new: object | None) -> None:
        if isinstance(old, Pod):
            if old.spec.node_name:
                on_node = self._pods_by_node.get(old.spec.node_name)
                if on_node is not None:
                    on_node.discard(key)
                    if not on_node:
                        del self._pods_by_node[old.spec.node_name]
            self._unbound_pods.discard(key)
        if isinstance(new, Pod):
            if new.spec.node_name:
                self._pods_by_node.setdefault(new.spec.node_name, set()).add(key)
            elif not new.is_terminal:
                self._unbound_pods.add(key)

    # -- ClusterReader ----------------------------------------------------

    def _all(self, kind: str) -> list[Any]:
        with self._lock:
            return list(self._records.get(kind, {}).values())

    def _get(self, kind: str, key: str) -> object | None:
        with self._lock:
            return self._records.get(kind, {}).get(key)

    def raw(self, kind: str, key: str) -> JSON | None:
        """A copy of the server's dict of a cached object (``namespace/name`` or ``name``)."""
        with self._lock:
            stored = self._raw.get(kind, {}).get(key)
            return _copy(stored) if stored is not None else None

    def pods_on_node(self, node_name: str) -> list[Pod]:
        with self._lock:
            table = self._records["Pod"]
            return [table[key] for key in sorted(self._pods_by_node.get(node_name, ()))]  # type: ignore[misc]

    def pending_pods(self) -> list[Pod]:
        with self._lock:
            table = self._records["Pod"]
            return [table[key] for key in sorted(self._unbound_pods)]  # type: ignore[misc]

    # -- HTTP -------------------------------------------------------------

    def _call(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        content_type: str = "application/json",
        on_conflict: type[KubeError] = ConflictError,
    ) -> JSON:
        try:
            return self._transport.request(method, path, body=body, content_type=content_type).body
        except ApiStatusError as error:
            if error.code == HTTP_CONFLICT:
                raise on_conflict(error.message) from error
            if error.code == HTTP_NOT_FOUND:
                raise NotFoundError(error.message) from error
            if error.code == HTTP_TOO_MANY_REQUESTS:
                raise EvictionRefusedError(error.message) from error
            if error.code == HTTP_FORBIDDEN and CAUSE_NAMESPACE_TERMINATING in error.causes:
                raise NamespaceTerminatingError(error.message) from error
            if error.code in (HTTP_UNPROCESSABLE, HTTP_BAD_REQUEST):
                # 422 Invalid (the schema, a ValidatingAdmissionPolicy) or 400 (an admission
                # webhook's denial by default): the object as written will be refused again.
                raise InvalidError(error.message, error.fields) from error
            raise KubeError(str(error)) from error

    def _remember_created(self, resource: ResourceType, created: JSON) -> None:
        """Put an object this process just created into the cache, unless the watch was first.

        The controllers read only the cache. A NodeClaim created for pending pods
        reaches it through the watch, usually within milliseconds; but with the
        watch slow, in backoff or relisting, the next provisioning pass would see
        the pods still pending and no NodeClaim in flight for them, and launch
        again. Karpenter's cluster state takes in its own creations for the same
        reason. Only an absent key is written: anything the watch delivered is
        at least as new. The watch's own ADDED then replaces this copy.
        """
        raw = dict(created)
        raw.setdefault("apiVersion", resource.api_version)
        raw.setdefault("kind", resource.kind)
        key = _raw_key(resource, raw)
        with self._lock:
            records = self._records.get(resource.kind)
            if records is None or key in records:
                return
            change = self._store(resource, key, raw)
        if change != (None, None):
            self._announce(resource.kind, [change])

    def _decode(self, resource: ResourceType, body: JSON, like: T) -> T:
        body.setdefault("apiVersion", resource.api_version)
        body.setdefault("kind", resource.kind)
        record = parse_record(resource, body)
        if not isinstance(record, type(like)):
            raise TypeError(f"the server answered a {type(record).__name__} for a {type(like).__name__}")
        return record

    def _current(self, resource: ResourceType, meta: ObjectMeta) -> JSON:
        """The server's dict of an object: from the cache, else fetched (404 → NotFoundError)."""
        stored = self.raw(resource.kind, resource.key(meta.namespace, meta.name))
        if stored is not None:
            return stored
        return self._call("GET", resource.object_path(meta.namespace, meta.name))

    # -- ClusterWriter ----------------------------------------------------

    def create_all(self, objs: Sequence[T]) -> list[T | Exception]:
        """Each of ``objs`` created, up to CREATE_CONCURRENCY requests at a time.

        A provisioning pass at scale creates hundreds of NodeClaims. One after
        another, each waits a round trip to a busy API server (50 ms measured
        with 10,000 pods arriving), and the pass takes longer than the batch
        window the pods waited in. The requests are independent (each name is
        the server's to generate), the HTTP client is shared safely between
        threads and the cache takes its own creations under its lock, so they
        go out together; each request still passes the write fence.
        """
        if len(objs) <= 1:
            return [self._create_or_error(obj) for obj in objs]
        with ThreadPoolExecutor(
            max_workers=min(CREATE_CONCURRENCY, len(objs)), thread_name_prefix="karpy-create"
        ) as pool:
            return list(pool.map(self._create_or_error, objs))

    def _create_or_error(self, obj: T) -> T | Exception:
        try:
            return self.create(obj)
        except Exception as error:  # handed to the caller with the others' results
            return error

    def create(self, obj: T) -> T:
        resource = _resource_of(obj)
        meta = _meta_of(obj)
        if isinstance(obj, NodeClaim):
            body = nodeclaim_to_dict(obj)
        elif isinstance(obj, Node):
            body = node_to_dict(obj)
        else:
            raise TypeError(f"KubeCluster does not create {resource.kind} objects")
        body.pop("status", None)
        if isinstance(obj, Node):
            # A Node's status is accepted on create (a kubelet registers that way), and a
            # Node must have its capacity from the start: written afterwards through
            # nodes/status it races whoever else fills a capacity-less Node in.
            body["status"] = {
                "capacity": resources_to_dict(obj.capacity),
                "allocatable": resources_to_dict(obj.allocatable),
            }
        # A NodeClaim's status subresource ignores status on create; an update sets it below.
        metadata = body["metadata"]
        for server_owned in (
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "generation",
        ):
            metadata.pop(server_owned, None)
        created = self._call(
            "POST", resource.collection_path(meta.namespace), body, on_conflict=AlreadyExistsError
        )
        self._remember_created(resource, created)
        if isinstance(obj, NodeClaim) and obj.status != NodeClaim.parse(FieldReader(created)).status:
            # A status given at creation is written the way an update writes it.
            stored = self._decode(resource, created, obj)
            return self.update(  # type: ignore[return-value]
                obj.with_metadata(
                    name=stored.metadata.name,
                    uid=stored.metadata.uid,
                    resource_version=stored.metadata.resource_version,
                )
            )
        return self._decode(resource, created, obj)

    def update(self, obj: T) -> T:
        resource = _resource_of(obj)
        meta = _meta_of(obj)
        current = self._current(resource, meta)
        if isinstance(obj, NodeClaim):
            return self._update_nodeclaim(resource, current, obj)  # type: ignore[return-value]
        if isinstance(obj, Node):
            if obj.boot_id and obj.boot_id != Node.parse(FieldReader(current)).boot_id:
                # A new boot ID (a kwok Node's reboot) is status: the status subresource's to write.
                # Checked against the caller's resourceVersion: a Node read before a reboot differs
                # from the server in its boot ID too, and must not write the old one back.
                boot: JSON = {"status": {"nodeInfo": {"bootID": obj.boot_id}}}
                if meta.resource_version:
                    boot["metadata"] = {"resourceVersion": meta.resource_version}
                current = self._call(
                    "PATCH",
                    resource.object_path(meta.namespace, meta.name, "status"),
                    boot,
                    content_type=CONTENT_MERGE_PATCH,
                )
                meta = meta.with_changes(resource_version="")
            patch = node_merge_patch(current, obj)
        elif isinstance(obj, Pod):
            patch = pod_merge_patch(current, obj)
        else:
            patch = metadata_merge_patch(current, meta)
        if not patch and (not meta.resource_version or meta.resource_version == _raw_version(current)):
            return self._decode(resource, current, obj)  # nothing to write, as the apiserver would do
        if meta.resource_version:
            patch.setdefault("metadata", {})["resourceVersion"] = meta.resource_version
        patched = self._call(
            "PATCH",
            resource.object_path(meta.namespace, meta.name),
            patch,
            content_type=CONTENT_MERGE_PATCH,
        )
        return self._decode(resource, patched, obj)

    def _update_nodeclaim(self, resource: ResourceType, current: JSON, claim: NodeClaim) -> NodeClaim:
        stored = NodeClaim.parse(FieldReader(current))
        meta = claim.metadata
        path = resource.object_path("", meta.name)
        main = _copy(current)
        main["metadata"] = merged_metadata(_raw_meta(current), meta)
        if claim.spec != stored.spec:
            main["spec"] = nodeclaim_spec_to_dict(claim.spec)
        main_changed = main["metadata"] != _raw_meta(current) or claim.spec != stored.spec
        # Compared as written, not as records: the API keeps times to the second, so a
        # lastPodEventTime later in the same second (a pod bound after another) is no change.
        status_changed = claim.status != stored.status and nodeclaim_status_to_dict(
            claim.status
        ) != nodeclaim_status_to_dict(stored.status)
        version = meta.resource_version
        if not main_changed and not status_changed:
            if not version or version == _raw_version(current):
                return stored
            main_changed = True  # let the server refuse the stale resourceVersion
        answer: JSON | None = None
        if main_changed:
            self._set_version(main, version)
            answer = self._call("PUT", path, main)
            version = _raw_version(answer)
            answer_meta = _raw_meta(answer)
            if answer_meta.get("deletionTimestamp") and not answer_meta.get("finalizers"):
                return self._decode(resource, answer, claim)  # the last finalizer went: it is gone
        if status_changed:
            base = answer if answer is not None else _copy(current)
            status = base.get("status")
            base["status"] = merged_nodeclaim_status(status if isinstance(status, dict) else {}, claim.status)
            self._set_version(base, version)
            answer = self._call("PUT", f"{path}/status", base)
        assert answer is not None
        return self._decode(resource, answer, claim)

    @staticmethod
    def _set_version(body: JSON, version: str) -> None:
        metadata = body.setdefault("metadata", {})
        if version:
            metadata["resourceVersion"] = version
        else:
            metadata.pop("resourceVersion", None)

    def update_status(self, obj: T) -> T:
        """PUT the status subresource of a NodePool (readable or not), node class or CapacityBuffer.

        The body is the server's object with the status fields karpy owns
        replaced, so fields it does not model are kept. Nothing is sent when
        those fields already hold the record's values.
        """
        resource = _resource_of(obj)
        meta = _meta_of(obj)
        status = getattr(obj, "status", None)
        if not isinstance(
            status, NodePoolStatus | NodeClassStatus | CapacityBufferStatus | NodeOverlayStatus
        ):
            raise TypeError(f"KubeCluster does not write the status of {resource.kind} objects")
        current = self._current(resource, meta)
        stored = current.get("status")
        stored = stored if isinstance(stored, dict) else {}
        # A CapacityBuffer's and a NodeOverlay's status are all karpy's (as Karpenter writes them whole).
        wanted = (
            status.to_dict()
            if isinstance(status, CapacityBufferStatus | NodeOverlayStatus)
            else merged_owned_status(stored, status)
        )
        unchanged = wanted == stored
        if unchanged and (not meta.resource_version or meta.resource_version == _raw_version(current)):
            return self._decode_status(resource, current, obj)
        body = _copy(current)
        body["status"] = wanted
        self._set_version(body, meta.resource_version)
        answer = self._call("PUT", resource.object_path(meta.namespace, meta.name, "status"), body)
        return self._decode_status(resource, answer, obj)

    def _decode_status(self, resource: ResourceType, body: JSON, like: T) -> T:
        if isinstance(like, UnreadableNodePool):
            # It cannot be parsed: the record written, at the server's new resourceVersion.
            return like.with_version(_raw_version(body))  # type: ignore[return-value]
        return self._decode(resource, body, like)

    def delete(self, obj: object) -> None:
        resource = _resource_of(obj)
        meta = _meta_of(obj)
        self._call("DELETE", resource.object_path(meta.namespace, meta.name), _DELETE_OPTIONS)

    def bind(self, pod: Pod, node_name: str) -> None:
        meta = pod.metadata
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta.name, "namespace": meta.namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
        }
        self._call("POST", POD.object_path(meta.namespace, meta.name, "binding"), binding)

    def evict(self, pod: Pod) -> None:
        """Evict through the Eviction API.

        In a namespace being deleted the server refuses any eviction (403
        NamespaceTerminating), but the namespace controller is deleting every
        pod there anyway: the pod is on its way out, so that is no failure.
        The drain waits for it to go, as ``kubectl drain`` does.
        """
        meta = pod.metadata
        eviction = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": meta.name, "namespace": meta.namespace},
        }
        try:
            self._call("POST", POD.object_path(meta.namespace, meta.name, "eviction"), eviction)
        except NamespaceTerminatingError:
            log.debug("pod %s/%s goes with its namespace: no eviction needed", meta.namespace, meta.name)

    def record_event(self, obj: object, event_type: str, reason: str, message: str) -> None:
        """Record a core/v1 Event; a repeat of the same event raises its count (best effort).

        The Event is sent from a thread of its own (see :mod:`karpy.kube._events`),
        so this returns at once; :meth:`flush_events` waits for it.
        """
        self._events.submit(PendingEvent(obj, event_type, reason, message, self.clock.now()))

    def _send_event(self, event: PendingEvent) -> None:
        try:
            self._record_event(event.obj, event.event_type, event.reason, event.message, event.at)
        except NamespaceTerminatingError:
            pass  # an Event about an object of a namespace being deleted: nobody will read it

    def _record_event(self, obj: object, event_type: str, reason: str, message: str, at: float) -> None:
        resource = _resource_of(obj)
        meta = _meta_of(obj)
        namespace = meta.namespace or EVENT_NAMESPACE_FOR_CLUSTER_OBJECTS
        now = format_timestamp(at)
        identity = (resource.kind, meta.namespace, meta.name, meta.uid, event_type, reason, message)
        remembered = self._event_counts.get(identity)
        if remembered is not None:
            if at - remembered.written_at < EVENT_DEDUPE_SECONDS:
                # Repeats come in bursts (a pod event per bind, a retry per pass): one write per
                # window keeps them from costing a request each, and the count stays true.
                remembered.held += 1
                return
            count = remembered.count + remembered.held + 1
            try:
                self._call(
                    "PATCH",
                    EVENT.object_path(namespace, remembered.name),
                    {"count": count, "lastTimestamp": now},
                    content_type=CONTENT_MERGE_PATCH,
                )
            except NotFoundError:
                pass  # expired (events live an hour by default): record it anew
            else:
                self._event_counts[identity] = _RememberedEvent(remembered.name, count, at)
                return
        involved: JSON = {
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "name": meta.name,
            "uid": meta.uid,
            "resourceVersion": meta.resource_version,
        }
        if meta.namespace:
            involved["namespace"] = meta.namespace
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta.name}.", "namespace": namespace},
            "involvedObject": involved,
            "type": event_type,
            "reason": reason,
            "message": message,
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": EVENT_SOURCE},
        }
        created = self._call("POST", EVENT.collection_path(namespace), event)
        if len(self._event_counts) >= MAX_REMEMBERED_EVENTS:
            self._event_counts.clear()
        self._event_counts[identity] = _RememberedEvent(str(_raw_meta(created).get("name") or ""), 1, at)
