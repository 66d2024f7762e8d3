"""The narrow interfaces controllers are written against.

Controllers read cluster state through :class:`ClusterReader`, write through
:class:`ClusterWriter`, ask :class:`Clock` for the time and talk to a cloud
through :class:`karpy.cloud.provider.CloudProvider`; a refused write raises
one of the typed errors (:class:`KubeError` and its kinds), whether
``karpy run`` or ``karpy simulate`` implements them.
The protocols and errors are defined in :mod:`karpy.cloud.cluster`, below the
controllers, so that cloud providers can use them without importing any
controller; controllers and the adapters that implement them import them from
here.
"""

from __future__ import annotations

from karpy.cloud.cluster import (
    EVENT_NORMAL,
    EVENT_WARNING,
    AlreadyExistsError,
    Clock,
    Cluster,
    ClusterReader,
    ClusterWriter,
    ConflictError,
    EvictionRefusedError,
    InvalidError,
    KubeError,
    KubeObject,
    NotFoundError,
    NotLeaderError,
    WallClock,
)

__all__ = [
    "EVENT_NORMAL",
    "EVENT_WARNING",
    "AlreadyExistsError",
    "Clock",
    "Cluster",
    "ClusterReader",
    "ClusterWriter",
    "ConflictError",
    "EvictionRefusedError",
    "InvalidError",
    "KubeError",
    "KubeObject",
    "NotFoundError",
    "NotLeaderError",
    "WallClock",
]
