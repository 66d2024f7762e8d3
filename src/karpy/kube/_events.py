"""Events go out from a thread of their own: a reconcile never waits for one.

Events are informational, and there can be many of them at once: one
provisioning pass over 1,000 pending pods nominates every pod to its
NodeClaim, and sending those 1,000 Events one request at a time takes the
apiserver several seconds, during which the reconcile loop would launch
nothing. client-go's event recorder (which Karpenter uses) is asynchronous
for the same reason; so is this one, in the simplest form that will do:

- :meth:`EventSender.submit` puts the event on a bounded queue and returns at
  once; a daemon thread, started on the first event, sends them in order;
- when the queue is full (the apiserver is slow or down), new events are
  dropped and counted, never blocking the caller, as client-go drops events
  past its broadcaster's buffer;
- :meth:`EventSender.flush` (from ``KubeCluster.stop``) waits, for a bounded
  time, until what is queued is sent, so nothing is lost on a clean shutdown;
  :meth:`EventSender.close` also ends the thread.

A failed send is logged and forgotten: an Event is never worth a retry loop.
One refused by the write fence (this replica no longer leads) is dropped
quietly: the log already says the lease was lost, once.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

from karpy.operator.cluster import NotLeaderError

log = logging.getLogger("karpy.kube.events")

# Events waiting to be sent past which new ones are dropped.
MAX_QUEUED_EVENTS = 10_000


@dataclass(frozen=True, slots=True)
class PendingEvent:
    """What ``record_event`` was called with, and when."""

    obj: object
    event_type: str
    reason: str
    message: str
    at: float


class EventSender:
    """Sends events through ``send`` from a daemon thread, in the order they were submitted."""

    def __init__(
        self, send: Callable[[PendingEvent], None], *, capacity: int = MAX_QUEUED_EVENTS, name: str = "events"
    ) -> None:
        self._send = send
        self._name = name
        self._queue: queue.Queue[PendingEvent | None] = queue.Queue(maxsize=capacity)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._unsent = 0
        self._thread: threading.Thread | None = None
        self.sent = 0
        self.failed = 0
        self.dropped = 0

    def submit(self, event: PendingEvent) -> None:
        """Queue ``event``; never blocks (a full queue drops it)."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            try:
                self._queue.put_nowait(event)
            except queue.Full:
                self.dropped += 1
                if self.dropped == 1 or self.dropped % 1000 == 0:
                    log.warning("%d events dropped: the apiserver does not keep up", self.dropped)
                return
            self._unsent += 1

    def flush(self, timeout: float) -> bool:
        """Wait until every submitted event was sent (or failed); False if ``timeout`` passed first."""
        with self._idle:
            return self._idle.wait_for(lambda: self._unsent == 0, timeout)

    def close(self, timeout: float) -> None:
        """Send what is queued (for at most ``timeout`` seconds), then end the thread.

        Only for the end of the cluster adapter's life: an event submitted
        afterwards starts a new thread.
        """
        if not self.flush(timeout):
            log.warning("%d events not sent before closing", self._unsent)
        with self._lock:
            thread = self._thread
            self._thread = None
        if thread is None:
            return
        self._queue.put(None)  # that thread ends at this marker
        thread.join(1.0)

    def _run(self) -> None:
        while True:
            event = self._queue.get()
            if event is None:
                return
            try:
                self._send(event)
            except NotLeaderError:
                self.failed += 1
                log.debug("event %s %s not recorded: not leading", event.reason, event.message)
            except Exception as error:  # events are informational: log and go on
                self.failed += 1
                log.warning("recording event %s %s failed: %s", event.reason, event.message, error)
            else:
                self.sent += 1
            finally:
                with self._idle:
                    self._unsent -= 1
                    self._idle.notify_all()
