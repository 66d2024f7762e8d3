"""Room indexes: targets by the CPU and memory they may still take, so first-fit jumps to one with room.

First-fit asks targets in order, and a plan of 20,000 pods has thousands
of them, nearly all full: asking each one for each pod is what makes
first-fit quadratic. The solver keeps two room indexes (:class:`RoomIndex`), one over
existing capacity (nodes and in-flight NodeClaims, by what each has free:
:func:`room_free_on`) and one over the plan's new NodeClaims (by the room
left in their cheapest options), and a pod's walk asks only the targets an
index offers (:meth:`RoomIndex.first_fit`).

An index is a segment tree over the targets in order holding, per subtree,
the most CPU and the most memory any of its targets may still take. Both
resources, because a CPU-only index offers every target whose memory is
spent to each pod that is light on CPU, and each of those then says no.

Why skipping is safe: an entry is never less than what its target can take
without growing, so a target the index skips would have said no; one it
offers may still say no (the two maxima of a subtree may come from
different targets, and CPU and memory are not all a pod asks for), and is
asked. Three values keep the comparisons total: a resource no instance type
has a column for is :data:`UNBOUNDED_ROOM`; a pod that requests no CPU or no
memory asks for any room at all (:func:`room_asked_by`), since an existing
node may be overcommitted and have less than none; and the tree's padding
is below anything asked. New NodeClaims that could take a pod only by
growing to a bigger type are the solver's to offer (its growth window), not
the index's.
"""

from __future__ import annotations

from karpy.api.quantity import ResourceAmounts

# A room index's value for a resource no instance type has a column for; what a pod that
# requests none of a resource asks of it (existing nodes may be overcommitted: room < 0);
# and the value of the index's padding, below anything asked.
UNBOUNDED_ROOM = 1 << 62
_ANY_ROOM = -(1 << 62)
_NEVER = -(1 << 63)


class RoomIndex:
    """Targets in order by the CPU and memory they may still take: a segment tree of both maxima.

    Entries are appended in the order targets are walked and updated in
    place as targets fill (:meth:`set`); :meth:`first_fit` finds the first
    at or after a position whose entry reaches what a pod asks.
    """

    __slots__ = ("count", "cpu", "memory", "size")

    def __init__(self) -> None:
        self.size = 1
        self.count = 0
        self.cpu = [_NEVER, _NEVER]
        self.memory = [_NEVER, _NEVER]

    def append(self, room: tuple[int, int]) -> int:
        if self.count == self.size:
            self.size *= 2
            self.cpu = self._grown(self.cpu)
            self.memory = self._grown(self.memory)
        index = self.count
        self.count += 1
        self.set(index, room)
        return index

    @classmethod
    def of(cls, rooms: list[tuple[int, int]]) -> RoomIndex:
        """An index of these entries in order, built bottom-up (as appending each would)."""
        index = cls()
        size = 1
        while size < len(rooms):
            size *= 2
        index.size = size
        index.count = len(rooms)
        for resource, tree in enumerate(([_NEVER] * (2 * size), [_NEVER] * (2 * size))):
            tree[size : size + len(rooms)] = [room[resource] for room in rooms]
            for position in range(size - 1, 0, -1):
                tree[position] = max(tree[2 * position], tree[2 * position + 1])
            if resource == 0:
                index.cpu = tree
            else:
                index.memory = tree
        return index

    def copy(self) -> RoomIndex:
        """An index of the same entries that changes on its own."""
        index = RoomIndex()
        index.size, index.count = self.size, self.count
        index.cpu, index.memory = self.cpu[:], self.memory[:]
        return index

    def close(self, index: int) -> None:
        """Entry ``index`` takes nothing any more: no pod is offered it."""
        self.set(index, (_NEVER, _NEVER))

    def _grown(self, tree: list[int]) -> list[int]:
        half = self.size // 2
        grown = [_NEVER] * (2 * self.size)
        grown[self.size : self.size + half] = tree[half : 2 * half]
        for position in range(self.size - 1, 0, -1):
            grown[position] = max(grown[2 * position], grown[2 * position + 1])
        return grown

    def set(self, index: int, room: tuple[int, int]) -> None:
        for tree, value in ((self.cpu, room[0]), (self.memory, room[1])):
            position = index + self.size
            tree[position] = value
            position //= 2
            while position:
                best = max(tree[2 * position], tree[2 * position + 1])
                if tree[position] == best:
                    break
                tree[position] = best
                position //= 2

    def first_fit(self, start: int, cpu: int, memory: int) -> int:
        """The first bin at or after ``start`` that may have room for both, or -1."""
        cpu_tree, memory_tree = self.cpu, self.memory
        if start == 0:
            return self._leftmost(1, cpu, memory) if cpu_tree[1] >= cpu and memory_tree[1] >= memory else -1
        if start >= self.count:
            return -1
        position = start + self.size
        if cpu_tree[position] >= cpu and memory_tree[position] >= memory:
            return start
        # Climb; each right sibling whose maxima both reach is searched, leftmost first.
        while position > 1:
            if not position & 1:
                sibling = position + 1
                if cpu_tree[sibling] >= cpu and memory_tree[sibling] >= memory:
                    found = self._leftmost(sibling, cpu, memory)
                    if found >= 0:
                        return found
            position //= 2
        return -1

    def _leftmost(self, root: int, cpu: int, memory: int) -> int:
        """The leftmost bin under ``root`` (whose maxima reach) that may have room, or -1.

        The two maxima of a subtree may come from different bins, so a
        subtree can reach both and still hold no such bin: the search then
        backs up to the last right child it passed over.
        """
        cpu_tree, memory_tree, size = self.cpu, self.memory, self.size
        passed_over: list[int] = []
        position = root
        while position < size:
            left = 2 * position
            right = left + 1
            if cpu_tree[left] >= cpu and memory_tree[left] >= memory:
                if cpu_tree[right] >= cpu and memory_tree[right] >= memory:
                    passed_over.append(right)
                position = left
            elif cpu_tree[right] >= cpu and memory_tree[right] >= memory:
                position = right
            elif passed_over:
                position = passed_over.pop()
            else:
                return -1
        return position - size


def room_asked_by(requests: ResourceAmounts) -> tuple[int, int]:
    """What a pod asks of a room index: its CPU and memory, or any room for what it does not request."""
    return (requests.get("cpu") or _ANY_ROOM, requests.get("memory") or _ANY_ROOM)


def room_free_on(available: ResourceAmounts) -> tuple[int, int]:
    """An existing node's entry in the room index: the CPU and memory it has free."""
    return (available.get("cpu", 0), available.get("memory", 0))
