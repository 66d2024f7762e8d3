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

A controller whose reconciles of different keys touch different objects may
say so with a ``max_concurrent_reconciles`` above 1 (the NodeClaim lifecycle:
each launch, registration and initialization is a few round trips to the API
server about its own NodeClaim and Node). In the real loop
(:meth:`Runtime.run_round`) up to that many of its keys are then reconciled at
once on worker threads, as controller-runtime's ``MaxConcurrentReconciles``
does: a due key starts as soon as a worker is free, and the loop goes on with
the other controllers meanwhile (the ``wake`` callback tells it a reconcile has
finished). Everything the Runtime keeps (the queue, requeues, errors) is still
touched by the loop's thread only, when it takes in the finished reconciles at
its next turn, and one key is never reconciled twice at once: a key requested
while it runs is held until it has finished. The simulator
(:meth:`Runtime.run_due`) reconciles them one after another at the same
virtual instant, which is the same thing there: a reconcile takes no virtual
time.

Given a :class:`QueueObserver` (``karpy run``'s), the queue is measured as
controller-runtime's work queues are (``workqueue_*``): it is told each key
that becomes ready, each request for later, each start and each end, and
:meth:`Runtime.queue_states` works the depth and the running work out when a
scrape asks. Without one (the simulator) the queue does nothing more.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
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


class QueueObserver(Protocol):
    """Told what each controller's work queue does, as controller-runtime's work queue metrics are.

    Its items are the Runtime's keys: an item is *ready* from its due time until its reconcile
    starts. ``karpy run`` passes one (:class:`karpy.operator.karpenter_metrics.Metrics`); the
    simulator none, so its queue does no more than it did without."""

    def added(self, controller: str) -> None:
        """A key became ready (queued for now, or its requeue came due): ``workqueue_adds_total``."""
        ...

    def retried(self, controller: str) -> None:
        """A key was queued for later (a requeue after, a retry): ``workqueue_retries_total``."""
        ...

    def started(self, controller: str, waited: float) -> None:
        """A key's reconcile started ``waited`` s after it was ready: ``workqueue_queue_duration_seconds``."""
        ...

    def finished(self, controller: str, seconds: float) -> None:
        """A key's reconcile took ``seconds``: ``workqueue_work_duration_seconds``."""
        ...


@dataclass(frozen=True, slots=True)
class QueueState:
    """One controller's work queue at an instant: what a scrape reads of it."""

    # Keys ready (due) and not yet started, as controller-runtime's ``workqueue_depth``.
    depth: int
    # Seconds the reconciles still running have taken so far, summed, and the longest of them.
    unfinished_seconds: float
    longest_running_seconds: float


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


def max_concurrent_reconciles(controller: Controller) -> int:
    """How many of ``controller``'s keys the real loop may reconcile at once (1 unless it says more).

    A controller says more with an attribute of that name, only when its reconciles of
    different keys share no state but thread-safe caches, writers and metrics."""
    return max(1, int(getattr(controller, "max_concurrent_reconciles", 1)))


@dataclass(frozen=True, slots=True)
class _Outcome:
    """What one reconcile came to, handed back to the loop's thread to act on."""

    requeue: float | None
    error: BaseException | None
    seconds: float


class LivelockError(RuntimeError):
    """Controllers kept requeueing each other without time moving on."""


class Runtime:
    """A deduplicating, time-ordered work queue over a set of controllers."""

    # Reconciles at one instant past which the controllers are surely looping.
    MAX_RECONCILES_PER_INSTANT = 200_000

    def __init__(
        self,
        clock: Clock,
        observer: ReconcileObserver | None = None,
        *,
        wake: Callable[[], None] | None = None,
        queue_observer: QueueObserver | None = None,
    ) -> None:
        self.clock = clock
        # Called from a worker thread when a concurrent reconcile has finished, so that a loop
        # waiting for its next due key or change takes the outcome in (``karpy run``'s queue).
        self.wake = wake
        # Told how long each reconcile took (``karpy run``'s reconcile metrics); the simulator
        # passes none, so its runs never read the wall clock.
        self.observer = observer
        self._controllers: dict[str, Controller] = {}
        self._watches: dict[str, list[tuple[str, ChangeMapper]]] = {}
        self._heap: list[tuple[float, int, str, str]] = []
        # Each key's current request: its due time, the sequence number of its heap entry and
        # whether it was for later (then the queue metrics count it added when it starts, as
        # controller-runtime's queue does when a waiting item comes due). An entry is current
        # only if its sequence is the key's: a superseded entry can share its due time with a
        # later request (a requeue to the same deadline), so the time alone cannot tell them apart.
        self._due: dict[tuple[str, str], tuple[float, int, bool]] = {}
        self._sequence = 0
        self.reconciles = 0
        self.errors: list[str] = []
        self.stale_writes = 0
        self._stale_in_a_row: dict[tuple[str, str], int] = {}
        # Worker threads for the concurrent reconciles of run_round, made on first use.
        self._workers: ThreadPoolExecutor | None = None
        self._worker_count = 0
        # The keys reconciling on a worker; the due time asked for each meanwhile, held until it
        # has finished (and whether it was asked for now, so counted added already); per
        # controller, its keys due that wait for a free worker (their entries, still current in
        # ``_due`` unless superseded).
        self._running: dict[tuple[str, str], Future[_Outcome]] = {}
        self._held: dict[tuple[str, str], tuple[float, bool]] = {}
        self._waiting: dict[str, list[tuple[float, int, str, str]]] = {}
        # The work queue metrics (``workqueue_*``), when asked for; then also when each running
        # reconcile started, on the clock, for their unfinished work (the one on the loop's thread
        # under None), read by :meth:`queue_states` from the thread that serves a scrape.
        self.queue_observer = queue_observer
        self._started_at: dict[tuple[str, str] | None, tuple[str, float]] = {}

    def close(self) -> None:
        """Let the worker threads go, once the reconciles they run have finished (their outcomes dropped)."""
        if self._workers is not None:
            self._workers.shutdown(wait=True)
            self._workers = None
        self._running.clear()

    def wait_for_workers(self, timeout: float | None = None) -> int:
        """Wait for the reconciles running on workers and take their outcomes in; how many."""
        wait(list(self._running.values()), timeout=timeout)
        return self._take_finished()

    def register(self, controller: Controller) -> None:
        if controller.name in self._controllers:
            raise ValueError(f"controller {controller.name!r} registered twice")
        self._controllers[controller.name] = controller
        for watch in controller.watches():
            self._watches.setdefault(watch.kind, []).append((controller.name, watch.mapper))

    def enqueue(self, controller: str, key: str, after: float = 0.0) -> None:
        """Reconcile ``key`` with ``controller`` in ``after`` seconds (earliest request wins)."""
        if after > 0.0 and self.queue_observer is not None:
            # Every request for later counts, kept or not, as controller-runtime's AddAfter does.
            self.queue_observer.retried(controller)
        self._request(controller, key, after)

    def _request(self, controller: str, key: str, after: float, *, added: bool = False) -> None:
        """Queue ``key``; ``added``: already counted ready (a request held while it ran)."""
        later = after > 0.0
        due = self.clock.now() + (after if later else 0.0)
        if (controller, key) in self._running:
            # Reconciling now: once more after it, as soon as it has finished if due by then. Asked
            # for now, it is ready (controller-runtime's queue takes it in, and hands it out after).
            held = self._held.get((controller, key))
            was_ready = held is not None and held[1]
            if not later and not was_ready and self.queue_observer is not None:
                self.queue_observer.added(controller)
            self._held[(controller, key)] = (
                due if held is None else min(held[0], due),
                was_ready or not later,
            )
            return
        current = self._due.get((controller, key))
        if current is not None and current[0] <= due:
            return
        self._sequence += 1
        self._due[(controller, key)] = (due, self._sequence, later)
        heapq.heappush(self._heap, (due, self._sequence, controller, key))
        if not later and not added and self.queue_observer is not None:
            self.queue_observer.added(controller)  # ready now (a key waiting for later is ready sooner)

    def forget(self, controller: str) -> int:
        """Drop every key of ``controller`` queued and not running; how many were dropped.

        For changes that are no events to it: a simulation seeded with a real cluster's pods
        must not have the pod-event controller take their creation for pods just bound.
        """
        dropped = [pair for pair in self._due if pair[0] == controller]
        for pair in dropped:
            del self._due[pair]  # its heap entry is no longer current: next_due skips it
        return len(dropped)

    def on_change(self, kind: str, old: object | None, new: object | None) -> None:
        """Feed one change notification (from an informer or the simulator's store)."""
        for controller, mapper in self._watches.get(kind, ()):
            for key in mapper(old, new):
                self.enqueue(controller, key)

    def next_due(self) -> float | None:
        while self._heap:
            due, sequence, controller, key = self._heap[0]
            current = self._due.get((controller, key))
            if current is None or current[1] != sequence:
                heapq.heappop(self._heap)  # superseded by an earlier request
                continue
            return due
        return None

    def next_due_except(self, controllers: set[str]) -> float | None:
        """When the first key of a controller not among ``controllers`` is due (None: none queued)."""
        return min(
            (due for (controller, _), (due, _, _) in self._due.items() if controller not in controllers),
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
            request = self._due.pop((name, key))
            count += 1
            if count > self.MAX_RECONCILES_PER_INSTANT:
                raise LivelockError(f"more than {self.MAX_RECONCILES_PER_INSTANT} reconciles at one instant")
            if self.queue_observer is not None:
                self._dequeued(name, request)
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
        each launch a turn of every other controller). A controller with a
        ``max_concurrent_reconciles`` above 1 has up to that many keys
        reconciling at once on worker threads, and the turn does not wait for them
        (:meth:`_start_concurrently`); what they came to is taken in at the
        start of a later turn.
        """
        self._take_finished()
        count = 0
        now = self.clock.now()
        queues: dict[str, list[tuple[float, int, str, str]]] = {
            name: waiting for name, waiting in self._waiting.items() if waiting
        }
        self._waiting = {}
        while self._heap and self._heap[0][0] <= now:
            entry = heapq.heappop(self._heap)
            _, sequence, name, key = entry
            current = self._due.get((name, key))
            if current is None or current[1] != sequence:
                continue  # superseded by an earlier request
            queues.setdefault(name, []).append(entry)
        for name, entries in queues.items():
            concurrency = max_concurrent_reconciles(self._controllers[name])
            if concurrency > 1:
                count += self._start_concurrently(name, entries, concurrency)
                continue
            started = self.clock.now()
            for position, (_, _, _, key) in enumerate(entries):
                if position and self.clock.now() - started >= TURN_BUDGET:
                    for entry in entries[position:]:
                        heapq.heappush(self._heap, entry)
                    break
                request = self._due.pop((name, key))
                if self.queue_observer is not None:
                    self._dequeued(name, request)
                self._reconcile(name, key)
                count += 1
        return count

    def _start_concurrently(
        self, name: str, entries: list[tuple[float, int, str, str]], concurrency: int
    ) -> int:
        """Start ``entries``' keys on worker threads, up to ``concurrency`` of ``name``'s at once; how many.

        The loop does not wait for them: it takes their outcomes in at a later
        turn (:meth:`_take_finished`). Keys beyond the bound wait for a free
        worker, outside the queue's time order, so the loop sleeps until a
        reconcile finishes (``wake``) instead of turning for them.
        """
        if self._workers is None or self._worker_count < concurrency:
            if self._workers is not None:
                self._workers.shutdown(wait=True)
            self._workers = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="karpy-reconcile")
            self._worker_count = concurrency
        controller = self._controllers[name]
        busy = sum(1 for running, _ in self._running if running == name)
        started = 0
        wake = self.wake
        waiting: list[tuple[float, int, str, str]] = []
        for entry in entries:
            _, sequence, _, key = entry
            current = self._due.get((name, key))
            if current is None or current[1] != sequence:
                continue  # superseded while it waited
            if busy >= concurrency:
                waiting.append(entry)
                continue
            request = self._due.pop((name, key))
            if self.queue_observer is not None:
                self._started_at[(name, key)] = (name, self._dequeued(name, request))
            self.reconciles += 1
            future = self._workers.submit(self._attempt, controller, key)
            self._running[(name, key)] = future
            if wake is not None:
                future.add_done_callback(lambda _: wake())
            busy += 1
            started += 1
        if waiting:
            self._waiting[name] = waiting
        return started

    def _take_finished(self) -> int:
        """Act on the outcomes of the concurrent reconciles that have finished, on this thread.

        A lost leadership is raised once the others finished are acted on.
        """
        finished = [(task, future) for task, future in self._running.items() if future.done()]
        lost: NotLeaderError | None = None
        for (name, key), future in finished:
            del self._running[(name, key)]
            self._started_at.pop((name, key), None)
            outcome = future.result()
            if isinstance(outcome.error, NotLeaderError):
                lost = lost or outcome.error
                continue
            self._settle(name, key, outcome)
            held = self._held.pop((name, key), None)
            if held is not None:
                # Its retry was counted when it was asked for, and its add if it was ready then.
                self._request(name, key, held[0] - self.clock.now(), added=held[1])
        if lost is not None:
            raise lost
        return len(finished)

    def _dequeued(self, name: str, request: tuple[float, int, bool]) -> float:
        """A key of ``name`` leaves the queue to be reconciled: count it for the queue metrics; now."""
        observer = self.queue_observer
        assert observer is not None
        due, _, later = request
        if later:
            observer.added(name)  # came due since it was asked for: ready from its due time
        now = self.clock.now()
        observer.started(name, max(0.0, now - due))
        return now

    def queue_states(self) -> dict[str, QueueState]:
        """Each registered controller's work queue now (for a scrape, from any thread).

        Read from copies of the queue's maps, which the loop's thread goes on changing: a copy of
        a dict is one step for the interpreter. Counted here rather than at each change so that the
        queue pays nothing per key for the depth."""
        now = self.clock.now()
        names = tuple(self._controllers)
        depth = dict.fromkeys(names, 0)
        for (name, _), (due, _, _) in self._due.copy().items():
            if due <= now and name in depth:
                depth[name] += 1
        for (name, _), (due, _) in self._held.copy().items():
            if due <= now and name in depth:
                depth[name] += 1  # asked for while it runs: ready, and started once it has finished
        unfinished = dict.fromkeys(names, 0.0)
        longest = dict.fromkeys(names, 0.0)
        for name, started in self._started_at.copy().values():
            if name not in unfinished:
                continue
            running = max(0.0, now - started)
            unfinished[name] += running
            longest[name] = max(longest[name], running)
        return {name: QueueState(depth[name], unfinished[name], longest[name]) for name in names}

    def _reconcile(self, name: str, key: str) -> None:
        self.reconciles += 1
        if self.queue_observer is None:
            outcome = self._attempt(self._controllers[name], key)
        else:
            self._started_at[None] = (name, self.clock.now())
            try:
                outcome = self._attempt(self._controllers[name], key)
            finally:
                del self._started_at[None]
        if isinstance(outcome.error, NotLeaderError):
            raise outcome.error  # not this reconcile's failure: the process may not write any more
        self._settle(name, key, outcome)

    def _attempt(self, controller: Controller, key: str) -> _Outcome:
        """Reconcile ``key``; what it returned or raised. Touches nothing of the Runtime's own."""
        timed = self.observer is not None or self.queue_observer is not None
        started = time.perf_counter() if timed else 0.0
        try:
            requeue = controller.reconcile(key)
        except Exception as error:  # acted on by _settle (or passed on, for a NotLeaderError)
            error_seconds = time.perf_counter() - started if timed else 0.0
            return _Outcome(None, error, error_seconds)
        seconds = time.perf_counter() - started if timed else 0.0
        return _Outcome(requeue, None, seconds)

    def _settle(self, name: str, key: str, outcome: _Outcome) -> None:
        """Act on a reconcile's outcome: log an error, count a stale write, requeue, observe."""
        error = outcome.error
        requeue = outcome.requeue
        if isinstance(error, ConflictError | NotFoundError):
            requeue = self._stale_write(name, key, error)
            result = "stale"
        elif error is not None:  # a reconcile error must not stop the other controllers
            log.error(
                "reconcile %s %s failed", name, key, exc_info=error, extra=about(controller=name, key=key)
            )
            self.errors.append(f"{name} {key}: {type(error).__name__}: {error}")
            requeue = 1.0
            result = "error"
        else:
            self._stale_in_a_row.pop((name, key), None)
            result = "success" if requeue is None else "requeue_after"
        if self.observer is not None:
            self.observer(name, outcome.seconds, result)
        if self.queue_observer is not None:
            self.queue_observer.finished(name, outcome.seconds)
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
