"""What a cluster held at one moment: the records read from it, and when they were read.

A :class:`ClusterSnapshot` is the hand-over between the code that reads a real
cluster (:mod:`karpy.kube.snapshot`, which lists each kind once through a
connection that refuses every write) and the code that starts a simulation
from it (:mod:`karpy.sim.from_cluster`): the two may not import each other,
so what passes between them is plain records of the API model.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """The cluster's objects as karpy's records (Pods, Nodes, NodePools...), read at ``taken_at``."""

    objects: tuple[object, ...]
    taken_at: float
    # One line per object that could not be read ("Pod default/web-1: spec.x: why"), left out.
    unreadable: tuple[str, ...] = ()
