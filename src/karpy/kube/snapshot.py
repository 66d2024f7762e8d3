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
20,000 pods is read in the time its pods take.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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


def list_objects(transport: ApiTransport, resource: ResourceType) -> list[JSON]:
    """Every object of ``resource``'s kind, listed in pages (none on a 404: its CRD is not installed)."""
    items: list[JSON] = []
    params = {"limit": str(LIST_PAGE_SIZE)}
    while True:
        try:
            page = transport.request("GET", resource.collection_path(), params=params).body
        except ApiStatusError as error:
            if error.code == HTTP_GONE and "continue" in params:
                items, params = [], {"limit": str(LIST_PAGE_SIZE)}  # the continue token expired
                continue
            if error.code == HTTP_NOT_FOUND:
                return []  # a CRD not installed (no EC2NodeClasses on a kwok cluster)
            raise
        for item in page.get("items") or ():
            if isinstance(item, dict):
                item["apiVersion"] = resource.api_version  # list items carry neither
                item["kind"] = resource.kind
                items.append(item)
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items
        params = {"limit": str(LIST_PAGE_SIZE), "continue": str(token)}


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


def fetch_snapshot(
    transport: ApiTransport,
    now: Callable[[], float],
    kinds: Sequence[ResourceType] = SNAPSHOT_TYPES,
) -> ClusterSnapshot:
    """The cluster's objects of ``kinds``, read now (``now()`` is taken before the first list)."""
    taken_at = now()
    try:
        with ThreadPoolExecutor(CONCURRENT_LISTS, thread_name_prefix="snapshot") as pool:
            listed = list(pool.map(lambda resource: list_objects(transport, resource), kinds))
    except httpx2.TransportError as error:
        raise ClusterUnreachableError(f"the API server cannot be reached: {error}") from error
    unreadable: list[str] = []
    objects: list[object] = []
    for resource, items in zip(kinds, listed, strict=True):
        objects.extend(parse_objects(resource, items, unreadable))
    return ClusterSnapshot(tuple(objects), taken_at, tuple(unreadable))
