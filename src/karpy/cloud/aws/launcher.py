"""Launches run on a bounded pool of threads; their results wait, per NodeClaim, for the reconcile loop.

A CreateFleet call takes seconds on AWS. Made from the single reconcile
thread, a scale-out of 50 NodeClaims would take 50 times that; made from
unbounded threads, it would hammer the API into throttling. So a launch is a
job on a pool of ``concurrency`` threads (``KARPY_AWS_LAUNCH_CONCURRENCY``),
keyed by the NodeClaim's name:

- :meth:`Launcher.submit` starts the job unless one for that name is in
  flight or its result is still waiting: a NodeClaim reconciled again while
  its launch runs never starts a second launch, so it never gets a second
  instance;
- when the job ends (a result or an exception), the result is kept and
  ``wake(name)`` is called from the worker thread (the runner turns it into
  a change on its queue, so the NodeClaim is reconciled again);
- :meth:`Launcher.take` hands the result over once and forgets it.

:meth:`close` stops taking jobs and waits for those running (a CreateFleet
cut off halfway would leave an instance nobody records; the garbage
collector would catch it, but not leaving it is better).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

log = logging.getLogger("karpy.cloud.aws")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Finished(Generic[T]):
    """A finished job: its value, or the exception it raised."""

    value: T | None
    error: BaseException | None = None

    def get(self) -> T:
        if self.error is not None:
            raise self.error
        assert self.value is not None
        return self.value


class Launcher(Generic[T]):
    def __init__(self, concurrency: int, wake: Callable[[str], None]) -> None:
        self.wake = wake
        self._pool = ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="karpy-launch")
        self._lock = threading.Lock()
        self._running: dict[str, Future[T]] = {}
        self._finished: dict[str, Finished[T]] = {}
        self._closed = False

    def submit(self, name: str, job: Callable[[], T]) -> bool:
        """Run ``job`` for ``name``; False (and nothing runs) if one is in flight or its result waits."""
        with self._lock:
            if self._closed or name in self._running or name in self._finished:
                return False
            future = self._pool.submit(job)
            self._running[name] = future
        future.add_done_callback(lambda done: self._done(name, done))
        return True

    def _done(self, name: str, future: Future[T]) -> None:
        error = future.exception()
        finished: Finished[T] = Finished(None, error) if error is not None else Finished(future.result())
        with self._lock:
            self._running.pop(name, None)
            self._finished[name] = finished
        try:
            self.wake(name)
        except Exception:  # the worker has nobody to raise to; the launch TTL requeue still comes
            log.exception("waking the reconcile loop for %s failed", name)

    def in_flight(self, name: str) -> bool:
        with self._lock:
            return name in self._running

    def take(self, name: str) -> Finished[T] | None:
        """The finished result for ``name``, once; None while running or when there is none."""
        with self._lock:
            return self._finished.pop(name, None)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
