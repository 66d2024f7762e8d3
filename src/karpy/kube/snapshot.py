"""Read a whole cluster once, for a simulation that starts from it (``karpy simulate --from-cluster``).

Each kind the simulator models is listed once, in pages, and every object is
parsed into karpy's record as ``karpy run``'s informers parse it
(:func:`karpy.kube.cluster.parse_record`); nothing is watched and nothing is
written: the caller passes a transport fenced against writes
(:meth:`karpy.kube._http.ApiTransport.fenced`), so the ServiceAccount needs
get/list/watch only, and a write would be refused before it left.
An object karpy cannot read is left out and named in the snapshot's
``unreadable`` lines; the two system PriorityClasses every cluster has are left
out as karpy knows them built in. The kinds are listed a few at a time, so a cluster of
20,000 pods is read in the time its pods take, and each page is parsed as soon as it is in,
while the server makes the next: the parse overlaps the lists instead of following them,
and a page's raw objects are dropped once parsed.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import httpx2

from karpy.api._reader import ManifestError
from karpy.api.core import SYSTEM_PRIORITY_CLASSES
from karpy.api.snapshot import ClusterSnapshot
from karpy.kube._http import HTTP_GONE, HTTP_NOT_FOUND, JSON, ApiStatusError, ApiTransport
from karpy.kube._informer import LIST_PAGE_SIZE
from karpy.kube._resources import (
    CSI_NODE,
    DAEMONSET,
    DEPLOYMENT,
    EC2_NODE_CLASS,
    KWOK_NODE_CLASS,
    LIMIT_RANGE,
    NAMESPACE,
    NODE,
    NODECLAIM,
    NODEPOOL,
    PERSISTENT_VOLUME,
    PERSISTENT_VOLUME_CLAIM,
    POD,
    POD_DISRUPTION_BUDGET,
    PRIORITY_CLASS,
    REPLICA_SET,
    RUNTIME_CLASS,
    STATEFUL_SET,
    STORAGE_CLASS,
    ResourceType,
)
from karpy.kube.cluster import parse_record

#: What a simulation of the cluster needs: karpy's objects, the nodes and pods, what owns, sizes,
#: prioritises and protects the pods, and what the scheduler reads about volumes.
SNAPSHOT_TYPES: tuple[ResourceType, ...] = (
    NAMESPACE,
    PRIORITY_CLASS,
    EC2_NODE_CLASS,
    KWOK_NODE_CLASS,
    NODEPOOL,
    NODE,
    NODECLAIM,
    CSI_NODE,
    STORAGE_CLASS,
    PERSISTENT_VOLUME,
    PERSISTENT_VOLUME_CLAIM,
    LIMIT_RANGE,
    RUNTIME_CLASS,
    DEPLOYMENT,
    REPLICA_SET,
    STATEFUL_SET,
    DAEMONSET,
    POD_DISRUPTION_BUDGET,
    POD,
)
# Kinds listed at once: enough to overlap the small lists with the pods', few enough for a busy server.
CONCURRENT_LISTS = 4


class ClusterUnreachableError(Exception):
    """The API server could not be reached (refused, timed out, TLS failed): one line, no traceback."""


class _ListExpiredError(Exception):
    """The continue token of a paged list expired (410 Gone): the list starts again from the first page."""


def _page(transport: ApiTransport, resource: ResourceType, token: str) -> tuple[list[JSON], str] | None:
    """One page of ``resource``'s list from ``token`` ("": the first) and the next token; None on a 404."""
    params = {"limit": str(LIST_PAGE_SIZE)}
    if token:
        params["continue"] = token
    try:
        page = transport.request("GET", resource.collection_path(), params=params).body
    except ApiStatusError as error:
        if error.code == HTTP_GONE and token:
            raise _ListExpiredError from error
        if error.code == HTTP_NOT_FOUND:
            return None  # a CRD not installed (no EC2NodeClasses on a kwok cluster)
        raise
    items: list[JSON] = []
    for item in page.get("items") or ():
        if isinstance(item, dict):
            item["apiVersion"] = resource.api_version  # list items carry neither
            item["kind"] = resource.kind
            items.append(item)
    return items, str((page.get("metadata") or {}).get("continue") or "")


def list_pages(transport: ApiTransport, resource: ResourceType) -> Iterator[list[JSON]]:
    """The pages of ``resource``'s list (none on a 404), each requested while the caller reads the last.

    So the server makes a page of 500 pods while karpy parses the one before, and no more
    than two pages of raw objects are held at once. Raises :class:`_ListExpiredError` when
    the continue token expired: what the caller took from the pages so far is then void.
    """
    with ThreadPoolExecutor(1, thread_name_prefix=f"snapshot-{resource.kind}") as fetcher:
        pending = fetcher.submit(_page, transport, resource, "")
        while True:
            page = pending.result()
            if page is None:
                return
            items, token = page
            if token:
                pending = fetcher.submit(_page, transport, resource, token)
            yield items
            if not token:
                return


def read_kind(transport: ApiTransport, resource: ResourceType) -> tuple[list[object], list[str]]:
    """The records of every object of ``resource``'s kind, and the lines naming those unreadable."""
    while True:
        records: list[object] = []
        unreadable: list[str] = []
        try:
            for items in list_pages(transport, resource):
                records.extend(parse_objects(resource, items, unreadable))
        except _ListExpiredError:
            continue  # listed again from the start, as a client-go reflector does
        return records, unreadable


def parse_objects(resource: ResourceType, items: Sequence[JSON], unreadable: list[str]) -> list[object]:
    """The records of ``items``; one that cannot be read is named in ``unreadable`` and left out."""
    records: list[object] = []
    for raw in items:
        if resource is PRIORITY_CLASS and (raw.get("metadata") or {}).get("name") in SYSTEM_PRIORITY_CLASSES:
            # Every cluster has them, above what a user's class may be; karpy knows them built in.
            continue
        try:
            records.append(parse_record(resource, raw))
        except (ManifestError, ValueError) as error:
            meta = raw.get("metadata") or {}
            name = meta.get("name")
            name = f"{meta.get('namespace')}/{name}" if meta.get("namespace") else name
            unreadable.append(f"{resource.kind} {name}: {error}")
    return records


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block (as it was after).

    Reading a cluster makes millions of dicts and records that all stay alive, none in a
    cycle; the collector, counting them as new, would walk the whole growing heap again and
    again (31 full collections for 20,000 pods: more than half the read's CPU).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def fetch_snapshot(
    transport: ApiTransport,
    now: Callable[[], float],
    kinds: Sequence[ResourceType] = SNAPSHOT_TYPES,
) -> ClusterSnapshot:
    """The cluster's objects of ``kinds``, read now (``now()`` is taken before the first list)."""
    taken_at = now()
    try:
        with collector_paused(), ThreadPoolExecutor(CONCURRENT_LISTS, thread_name_prefix="snapshot") as pool:
            read = list(pool.map(lambda resource: read_kind(transport, resource), kinds))
    except httpx2.TransportError as error:
        raise ClusterUnreachableError(f"the API server cannot be reached: {error}") from error
    objects = tuple(record for records, _ in read for record in records)
    return ClusterSnapshot(objects, taken_at, tuple(line for _, lines in read for line in lines))
