"""The reconcile loop shared by ``karpy run`` and ``karpy simulate``.

karpy's controllers are synchronous reconcilers, the shape of Karpenter's
controller-runtime reconcilers: ``reconcile(key)`` reads the cluster through
the injected reader, writes through the injected writer, and returns when it
wants to be called again (``None`` for "only when something changes"). The
:class:`Runtime` owns the work queue: change notifications map to keys,
requeues are timers on the injected clock, and a key queued twice before it
runs is reconciled once.

Why synchronous: a reconcile that cannot suspend half-way is deterministic by
construction, so the simulator can run a day of cluster time in seconds and
get the same result every time, and a crash between two lines is handled by
idempotence alone. The real runtime drives the same queue from a thread that
sleeps until ``next_due()`` or a change notification, whichever comes first;
the simulator jumps its virtual clock to ``next_due()`` instead.

A reconcile that raises is logged as an error and retried a second later,
except for a stale write: a :class:`~karpy.operator.cluster.ConflictError`
(409: it wrote an object that changed since its cache saw it) or a
:class:`~karpy.operator.cluster.NotFoundError` (404: the object went
meanwhile, say a NodeClaim whose last finalizer another reconcile already
lifted). That is the ordinary price of optimistic concurrency against caches
that trail the server, not a failure: it is logged at debug level and retried
from fresh state shortly after (a warning only when one key keeps at it).
A :class:`~karpy.operator.cluster.NotLeaderError` (the process no
longer leads: ``karpy run``'s write fence refused the write) is nobody's
failure either, but it ends the loop: it passes through :meth:`Runtime.run_due`.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from karpy.logs import about
from karpy.operator.cluster import Clock, ConflictError, NotFoundError, NotLeaderError

log = logging.getLogger("karpy.runtime")

# A stale write (409 Conflict, 404 Not Found) is retried this soon (then twice as
# late each time in a row, up to STALE_RETRY_MAX): by then the watch has usually
# brought the object's fresh state into the cache the reconcile reads.
STALE_RETRY = 0.1
STALE_RETRY_MAX = 2.0
# How long one controller may go on reconciling the keys it has due in a turn of the real
# loop before the others get theirs (see ``Runtime.run_round``).
TURN_BUDGET = 0.25
# Stale writes in a row on one key after which it is worth a warning: the cache is not catching up.
STALE_WRITES_WORTH_A_WARNING = 10

# (old, new): ``old`` is None on creation, ``new`` is None on removal.
ChangeMapper = Callable[[object | None, object | None], Iterable[str]]
# (controller, seconds the reconcile took on the wall clock, result): result is "success",
# "requeue_after" (asked to be called again), "error" or "stale" (a 409 or 404, retried).
ReconcileObserver = Callable[[str, float, str], None]


@dataclass(frozen=True, slots=True)
class Watch:
    """Reconcile the keys ``mapper`` returns whenever an object of ``kind`` changes."""

    kind: str
    mapper: ChangeMapper


class Controller(Protocol):
    name: str

    def watches(self) -> list[Watch]: ...

    def reconcile(self, key: str) -> float | None:
        """Bring ``key`` toward its desired state; return seconds until the next call, if any."""
        ...


class LivelockError(RuntimeError):
    """Controllers kept requeueing each other without time moving on."""


class Runtime:
    """A deduplicating, time-ordered work queue over a set of controllers."""

    # Reconciles at one instant past which the controllers are surely looping.
    MAX_RECONCILES_PER_INSTANT = 200_000

    def __init__(self, clock: Clock, observer: ReconcileObserver | None = None) -> None:
        self.clock = clock
        # Told how long each reconcile took (``karpy run``'s reconcile metrics); the simulator
        # passes none, so its runs never read the wall clock.
        self.observer = observer
        self._controllers: dict[str, Controller] = {}
        self._watches: dict[str, list[tuple[str, ChangeMapper]]] = {}
        self._heap: list[tuple[float, int, str, str]] = []
        # Each key's current request: its due time and the sequence number of its heap entry.
        # An entry is current only if its sequence is the key's: a superseded entry can share
        # its due time with a later request (a requeue to the same deadline), so the time
        # alone cannot tell them apart.
        self._due: dict[tuple[str, str], tuple[float, int]] = {}
        self._sequence = 0
        self.reconciles = 0
        self.errors: list[str] = []
        self.stale_writes = 0
        self._stale_in_a_row: dict[tuple[str, str], int] = {}

    def register(self, controller: Controller) -> None:
        if controller.name in self._controllers:
            raise ValueError(f"controller {controller.name!r} registered twice")
        self._controllers[controller.name] = controller
        for watch in controller.watches():
            self._watches.setdefault(watch.kind, []).append((controller.name, watch.mapper))

    def enqueue(self, controller: str, key: str, after: float = 0.0) -> None:
        """Reconcile ``key`` with ``controller`` in ``after`` seconds (earliest request wins)."""
        due = self.clock.now() + max(0.0, after)
        current = self._due.get((controller, key))
        if current is not None and current[0] <= due:
            return
        self._sequence += 1
        self._due[(controller, key)] = (due, self._sequence)
        heapq.heappush(self._heap, (due, self._sequence, controller, key))

    def on_change(self, kind: str, old: object | None, new: object | None) -> None:
        """Feed one change notification (from an informer or the simulator's store)."""
        for controller, mapper in self._watches.get(kind, ()):
            for key in mapper(old, new):
                self.enqueue(controller, key)

    def next_due(self) -> float | None:
        while self._heap:
            due, sequence, controller, key = self._heap[0]
            if self._due.get((controller, key)) != (due, sequence):
                heapq.heappop(self._heap)  # superseded by an earlier request
                continue
            return due
        return None

    def next_due_except(self, controllers: set[str]) -> float | None:
        """When the first key of a controller not among ``controllers`` is due (None: none queued)."""
        return min(
            (due for (controller, _), (due, _) in self._due.items() if controller not in controllers),
            default=None,
        )

    def run_due(self) -> int:
        """Reconcile everything due now, including what those reconciles queue for now."""
        now = self.clock.now()
        count = 0
        while True:
            due = self.next_due()
            if due is None or due > now:
                return count
            _, _, name, key = heapq.heappop(self._heap)
            del self._due[(name, key)]
            count += 1
            if count > self.MAX_RECONCILES_PER_INSTANT:
                raise LivelockError(f"more than {self.MAX_RECONCILES_PER_INSTANT} reconciles at one instant")
            self._reconcile(name, key)

    def run_round(self) -> int:
        """A turn of the real loop: each controller with keys due reconciles them, for a while.

        :meth:`run_due` reconciles everything due, earliest first, which is
        what the simulator needs: there a reconcile takes no time. On the wall
        clock each takes a round trip or more, and a controller with hundreds
        of keys due (the lifecycle controller's launches after a large
        provisioning pass) held every other controller back until all of them
        were done: a provisioning batch waited 90 s behind 350 launches, with
        10,000 pods arriving. So in a turn each controller that has keys due
        (the one due earliest first) reconciles them, earliest first, until it
        has none due left or has spent :data:`TURN_BUDGET` seconds of the
        clock; what is left waits for the next turn, and the loop takes in the
        informers' changes in between. A controller then waits at most about
        one budget of each of the others, as with controller-runtime's workers
        per controller, while one with a long queue still gets most of the loop
        when the others have little to do (one key each per turn would hand
        each launch a turn of every other controller).
        """
        now = self.clock.now()
        queues: dict[str, list[tuple[float, int, str, str]]] = {}
        while self._heap and self._heap[0][0] <= now:
            entry = heapq.heappop(self._heap)
            _, _, name, key = entry
            if self._due.get((name, key)) != entry[:2]:
                continue  # superseded by an earlier request
            queues.setdefault(name, []).append(entry)
        count = 0
        for name, entries in queues.items():
            started = self.clock.now()
            for position, (_, _, _, key) in enumerate(entries):
                if position and self.clock.now() - started >= TURN_BUDGET:
                    for entry in entries[position:]:
                        heapq.heappush(self._heap, entry)
                    break
                del self._due[(name, key)]
                self._reconcile(name, key)
                count += 1
        return count

    def _reconcile(self, name: str, key: str) -> None:
        self.reconciles += 1
        controller = self._controllers[name]
        started = time.perf_counter() if self.observer is not None else 0.0
        try:
            requeue = controller.reconcile(key)
        except (ConflictError, NotFoundError) as error:
            requeue = self._stale_write(name, key, error)
            result = "stale"
        except NotLeaderError:
            raise  # not this reconcile's failure: the process may not write any more
        except Exception as error:  # a reconcile error must not stop the other controllers
            log.exception("reconcile %s %s failed", name, key, extra=about(controller=name, key=key))
            self.errors.append(f"{name} {key}: {type(error).__name__}: {error}")
            requeue = 1.0
            result = "error"
        else:
            self._stale_in_a_row.pop((name, key), None)
            result = "success" if requeue is None else "requeue_after"
        if self.observer is not None:
            self.observer(name, time.perf_counter() - started, result)
        if requeue is not None:
            self.enqueue(name, key, requeue)

    def _stale_write(self, name: str, key: str, error: ConflictError | NotFoundError) -> float:
        """The object changed or went since the cache saw it. Not a failure: retry from fresh state."""
        self.stale_writes += 1
        in_a_row = self._stale_in_a_row.get((name, key), 0) + 1
        self._stale_in_a_row[(name, key)] = in_a_row
        if in_a_row % STALE_WRITES_WORTH_A_WARNING == 0:
            log.warning("reconcile %s %s: %d stale writes in a row: %s", name, key, in_a_row, error)
        else:
            log.debug("reconcile %s %s: stale write, retrying from fresh state: %s", name, key, error)
        return min(STALE_RETRY * 2.0 ** (in_a_row - 1), STALE_RETRY_MAX)
