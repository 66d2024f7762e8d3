"""Which new NodeClaims a pod's first-fit walk may pass over: closed to its kind, or passed by an alike pod.

Beside the room indexes (:mod:`karpy.scheduling._rooms`), two shortcuts keep
a pod from asking NodeClaims that would turn it away; each skips only those.

- Closed for good (:class:`OpenBins`), per kind of pod: a NodeClaim full of
  the pod's hostname spread or anti-affinity group, or committed to a zone
  the pod may not use. Kinds are keyed by a topology signature (the pod, its
  inter-pod terms, its node options) or by the domains the pod may go to.
  Safe because nothing reopens a NodeClaim while a plan is made: counts on a
  node only grow, and a domain once chosen stays.
- Resumed walks (:func:`walk_resumes_at`): alike pods allowed the same
  domains start their walk where the last of them went, since every target
  before it turned that pod away for reasons that hold for them too (room
  and options only shrink, a domain once chosen stays). The one target that
  changed is the one the pod went to, so walks of pods allowed other domains
  are pulled back to it; and a pod that went to a new NodeClaim was turned
  away by every existing node first (:func:`walk_skips_existing`).
"""

from __future__ import annotations

# The domains a pod may go to, per zone-like key, as a dictionary key.
DomainsKey = frozenset[tuple[str, frozenset[str]]]


class OpenBins:
    """Which new NodeClaims are still open to pods of one kind (see the module docstring).

    Closed positions are skipped with a disjoint-set forest (each
    closed position points further on, paths are compressed), so a walk
    jumps over any run of closed NodeClaims in near-constant time and
    closing one costs a single write. Nothing is kept per NodeClaim's room:
    the plan's one room index answers that, whatever the kind.
    """

    __slots__ = ("_next",)

    def __init__(self) -> None:
        # _next[i] == i: open; otherwise a position after i to look at next.
        self._next: list[int] = []

    def close(self, position: int) -> None:
        following = self._next
        while len(following) <= position + 1:
            following.append(len(following))
        following[position] = position + 1

    def first_open(self, position: int) -> int:
        """The first open position at or after ``position``."""
        following = self._next
        root = position
        while root < len(following) and following[root] != root:
            root = following[root]
        while position < len(following) and following[position] != position:
            following[position], position = root, following[position]
        return root


def walk_resumes_at(walk_from: dict[DomainsKey, int], domains: DomainsKey | None, position: int) -> None:
    """A pod allowed ``domains`` went to the target at ``position``.

    Alike pods allowed the same domains may start their walk there: every
    target before it turned this pod away, for reasons that hold for them
    too (room and options only shrink, a domain once chosen stays). The
    target at ``position`` is the one that changed: a NodeClaim's cheapest
    option may now be a bigger type with more room, so pods allowed other
    domains must not start past it. ``domains`` None: not known, nothing to
    resume from, but the change still counts for the others.
    """
    for key, start in walk_from.items():
        if start > position:
            walk_from[key] = position
    if domains is not None:
        walk_from[domains] = position


def walk_skips_existing(existing_from: dict[DomainsKey, int], domains: DomainsKey | None, end: int) -> None:
    """A pod allowed ``domains`` went to a new NodeClaim: every existing node turned it away."""
    if domains is not None:
        existing_from[domains] = end
