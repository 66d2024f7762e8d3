"""Cost-aware packing of interchangeable pods: choose whole node patterns, cheapest work first.

First-fit decreasing, the shape of the main solver (and of Karpenter's), is
blind to how pods complement each other. Taken largest CPU first, the pods
that ask for 1.5 CPUs fill node after node together, each node's memory half
idle, and the memory-hungry small pods come later and fill others, their
CPU idle. On a real catalog, where the cheapest nodes per unit of resource
are small ones, that costs 14–20% more than the best plan (measured against
the configuration LP bound in ``benchmarks/scheduling``).

For pods that constrain nothing but resources (no topology, no host ports,
no node requirements beyond their NodePool's), which pod lands on which node
is free, and the problem is a variable-sized vector bin packing. This module
solves it greedily by *patterns*: a pattern is one instance type and a
number of pods of each request class that fit it together. Each round:

1. every type proposes the pattern it would fill now: pods are added one
   class at a time, each time the class with the most value per share of
   the node's *remaining* room in its tightest resource (so a node short of
   memory takes CPU-hungry pods, and the reverse: complementary pods end up
   together), a few at a time;
2. the pattern with the most value per dollar wins, where a pod's value is
   what it costs on nodes of its own class alone (the cheapest type per pod
   for that class);
3. it is repeated as many times as the remaining pods allow.

Patterns repeat, so the rounds number in the tens even for tens of
thousands of pods, and each round touches one small matrix per type. A
type's proposal only changes when a class it used runs short, so proposals
are cached between rounds. Types another type beats on price and on every
resource are left out from the start.

Pure numpy: the solver calls :func:`pack` and turns the patterns into
NodeClaims; nothing here knows about pods or Kubernetes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

# Pods of the chosen class added at once: what fits divided by this (at least one).
# Greedy packing is sensitive to it, and no one value is best for every workload, so
# callers try a few (see :func:`pack`) and keep the cheapest plan.
CHUNK_DIVISORS = (1, 2, 4)
# Types kept per class: those cheapest per pod of that class alone.
TYPES_PER_CLASS = 4

Int64Array = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Pattern:
    """``repeat`` nodes of type ``type_index``, each with ``pods[c]`` pods of class ``c``."""

    type_index: int
    pods: Int64Array
    repeat: int


def undominated(capacity: Int64Array, price: FloatArray) -> npt.NDArray[np.intp]:
    """Indexes of the types that no other type beats: none as cheap with at least as much of everything."""
    order = np.lexsort((-capacity.sum(axis=1), price))
    kept: list[int] = []
    for index in order.tolist():
        if kept:
            others = np.asarray(kept, dtype=np.intp)
            if bool(
                ((price[others] <= price[index]) & (capacity[others] >= capacity[index]).all(axis=1)).any()
            ):
                continue
        kept.append(index)
    return np.asarray(sorted(kept), dtype=np.intp)


def _how_many(capacity: Int64Array, requests: Int64Array) -> Int64Array:
    """How many pods of each class (rows of ``requests``) one node of ``capacity`` holds."""
    used = requests > 0
    ratios = np.where(used, np.maximum(capacity, 0) // np.where(used, requests, 1), np.iinfo(np.int64).max)
    fewest: Int64Array = ratios.min(axis=1)
    return fewest


def pack(
    requests: Int64Array,
    counts: Int64Array,
    capacity: Int64Array,
    price: FloatArray,
    chunk_divisor: int = 2,
) -> list[Pattern] | None:
    """Patterns holding every pod: ``counts[c]`` pods of ``requests[c]``, on types of ``capacity``.

    ``requests`` is classes × resources and ``capacity`` types × resources,
    both in the same integer units (every class must ask for at least one
    resource: pods count as one of the pod resource). None when some class
    fits no type or a price is not positive and finite: the caller keeps
    its own plan then.
    """
    if len(counts) == 0:
        return []
    if not bool(np.isfinite(price).all()) or bool((price <= 0).any()):
        return None
    types = undominated(capacity, price)
    capacity = capacity[types]
    price = price[types]
    # Per type and class: pods per node; a class's value is its cheapest price per pod alone.
    fits = np.stack([_how_many(row, requests) for row in capacity])
    with np.errstate(divide="ignore"):
        per_pod = np.where(fits > 0, price[:, None] / np.maximum(fits, 1), np.inf)
    value = per_pod.min(axis=0)
    if not bool(np.isfinite(value).all()):
        return None
    # The few types cheapest per pod for some class are where good patterns are; the
    # others only slow every round down (a catalog priced by size has hundreds).
    shortlist = np.unique(np.argsort(per_pod, axis=0, kind="stable")[:TYPES_PER_CLASS].ravel())
    types, capacity, price = types[shortlist], capacity[shortlist], price[shortlist]
    remaining = counts.astype(np.int64).copy()
    # Each type's current proposal (types × classes), refilled only where stale.
    proposals = np.zeros((len(types), len(counts)), dtype=np.int64)
    stale: npt.NDArray[np.bool_] = np.ones(len(types), dtype=np.bool_)
    patterns: list[Pattern] = []
    while remaining.any():
        if stale.any():
            proposals[stale] = _fill(capacity[stale], requests, remaining, value, chunk_divisor)
        worth = (proposals @ value) / price
        worth[~proposals.any(axis=1)] = -1.0
        best = int(np.argmax(worth))
        if worth[best] <= 0:  # cannot happen while every class fits some type; kept as a guard
            return None
        chosen = proposals[best].copy()
        used = chosen > 0
        repeat = int((remaining[used] // chosen[used]).min())
        remaining -= chosen * repeat
        patterns.append(Pattern(int(types[best]), chosen, repeat))
        # A proposal stays valid while every class it uses still has the pods it takes.
        stale = np.asarray((proposals > remaining).any(axis=1), dtype=np.bool_)
    return patterns


def _fill(
    rooms: Int64Array, requests: Int64Array, available: Int64Array, value: FloatArray, chunk_divisor: int
) -> Int64Array:
    """The pattern one node of each of ``rooms`` gets: complementary pods first, a few at a time.

    All the types are filled together, one step per numpy operation over
    types × classes, so the cost is the length of the longest fill, not
    its sum over types.
    """
    rooms = rooms.copy()
    left = np.broadcast_to(available, (len(rooms), len(available))).copy()
    taken = np.zeros_like(left)
    used = requests > 0
    active = np.arange(len(rooms))
    while len(active):
        room = rooms[active]
        fitting = (left[active] > 0) & (requests[None, :, :] <= room[:, None, :]).all(axis=2)
        going = fitting.any(axis=1)
        active, room, fitting = active[going], room[going], fitting[going]
        if not len(active):
            break
        # Share of the remaining room each class would take in its tightest resource.
        share = np.where(used[None, :, :], requests[None, :, :] / np.maximum(room[:, None, :], 1), 0.0).max(
            axis=2
        )
        score = np.where(fitting, value[None, :] / np.maximum(share, 1e-12), -1.0)
        chosen = score.argmax(axis=1)
        wanted = requests[chosen]
        most = np.where(wanted > 0, room // np.where(wanted > 0, wanted, 1), np.iinfo(np.int64).max).min(
            axis=1
        )
        count = np.maximum(1, np.minimum(left[active, chosen], most) // chunk_divisor)
        taken[active, chosen] += count
        left[active, chosen] -= count
        rooms[active] -= wanted * count[:, None]
    return taken
