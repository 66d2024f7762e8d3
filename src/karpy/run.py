"""``karpy run``: the controllers against a real cluster, with kwok nodes.

The simulator and this module wire the very same controllers (provisioning,
the NodeClaim lifecycle and pod events, disruption conditions, disruption,
termination) to a :class:`~karpy.controllers.runtime.Runtime`; what differs is
what they are wired to: here a :class:`~karpy.kube.cluster.KubeCluster` over
the apiserver of a kubeconfig, the wall clock, and the
:class:`~karpy.cloud.kwok.provider.KwokCloudProvider`, whose "instances" are
Node objects kept Ready by kwok or karpy's fake kubelet. The real
kube-scheduler binds the pods and the real workload controllers make them, so
nothing of the simulator's stand-ins runs here.

**One thread owns the Runtime.** The Runtime is not thread-safe, and
KubeCluster announces changes from its informer threads. The bridge between
them is a queue: every notification ``(kind, old, new)`` is put on it as it
arrives, and a single loop (the thread that called :func:`run`) drains it into
``Runtime.on_change``, reconciles everything due, and then blocks on the queue
until the next timer is due (``Runtime.next_due``), a notification arrives, or
at most :data:`MAX_IDLE_WAIT` seconds pass (so a stop request is noticed
promptly). A reconcile therefore never runs concurrently with another, exactly
as in the simulator, and the controllers' determinism arguments still hold
modulo timing.

**Start-up waits for the caches.** The controllers read only from informer
caches; reconciling against a half-listed cache would, for instance, see
pending pods but not the NodeClaims already launched for them, and launch
twice. So the informers start first, :func:`run` waits until every one has
listed once, and only then does the loop start; the notifications of the
initial lists, queued meanwhile, give every controller its first keys.

**Shutdown** is cooperative: ``stop.set()`` from another thread, or SIGTERM or
SIGINT when :func:`run` runs on the main thread, ends the loop after the
reconcile in progress; the informers are then stopped and the connection
closed. Nothing is rolled back: NodeClaims and Nodes stay, and the next start
picks them up from the caches.

Reconcile errors are logged and recorded by the Runtime, which retries the key
a second later; one failing reconcile never stops the others.
"""

from __future__ import annotations

import logging
import queue
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from karpy.cloud.kwok.provider import KwokCloudProvider
from karpy.cloud.provider import CloudProvider
from karpy.controllers.disruption import DisruptionController, NodeClaimDisruptionConditions
from karpy.controllers.nodeclaim import NodeClaimLifecycle, NodeClaimPodEvents
from karpy.controllers.provisioning import Provisioner, ProvisioningSettings
from karpy.controllers.runtime import Runtime
from karpy.controllers.termination import Terminator
from karpy.kube._http import ApiTransport
from karpy.kube.cluster import KubeCluster, WallClock

log = logging.getLogger("karpy.run")

# The longest the loop sleeps without a timer or a notification: how late a stop is noticed.
MAX_IDLE_WAIT = 0.5

Change = tuple[str, object | None, object | None]


@dataclass(slots=True)
class RunSettings:
    provisioning: ProvisioningSettings = field(default_factory=ProvisioningSettings)
    # Seconds between a kwok launch and its Node's creation (0: at once).
    registration_delay: float = 0.0
    # How long to wait for the informers' first lists before giving up.
    sync_timeout: float = 60.0


class CacheSyncTimeoutError(RuntimeError):
    """The informers did not complete their first lists in time."""


@contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """Set ``stop`` on SIGTERM and SIGINT while inside (only the main thread may handle signals)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum: int, frame: FrameType | None) -> None:
        log.info("received %s, stopping", signal.Signals(signum).name)
        stop.set()

    previous = {signum: signal.signal(signum, handle) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class Runner:
    """The wiring of :func:`run`: a cluster, a cloud, the controllers and the loop that drives them."""

    def __init__(self, transport: ApiTransport, settings: RunSettings | None = None) -> None:
        self.settings = settings or RunSettings()
        self.transport = transport
        self.clock = WallClock()
        self.cluster = KubeCluster(transport, clock=self.clock)
        self.cloud = KwokCloudProvider(
            self.cluster,
            registration_delay=self.settings.registration_delay,
        )
        self.runtime = Runtime(self.clock)
        self.changes: queue.Queue[Change] = queue.Queue()
        self.cluster.subscribe(self._hand_over)
        cloud: CloudProvider = self.cloud
        for controller in (
            Provisioner(self.cluster, cloud, self.clock, self.settings.provisioning),
            NodeClaimLifecycle(self.cluster, cloud, self.clock),
            NodeClaimPodEvents(self.cluster, self.clock),
            Terminator(self.cluster, cloud, self.clock),
            NodeClaimDisruptionConditions(self.cluster, self.clock, cloud),
            DisruptionController(self.cluster, self.clock, cloud),
        ):
            self.runtime.register(controller)

    def _hand_over(self, kind: str, old: object | None, new: object | None) -> None:
        # Called from informer threads: only the queue is touched here.
        self.changes.put((kind, old, new))

    def run(self, stop: threading.Event, started: threading.Event | None = None) -> None:
        self.cluster.start()
        try:
            if not self._wait_for_sync(stop):
                return
            log.info("caches synced, controllers running")
            if started is not None:
                started.set()
            while not stop.is_set():
                self._drain()
                self.runtime.run_due()
                self._wait(self._idle_seconds())
        finally:
            self.cluster.stop()
            log.info(
                "stopped after %d reconciles (%d failed)", self.runtime.reconciles, len(self.runtime.errors)
            )

    def _wait_for_sync(self, stop: threading.Event) -> bool:
        waited = 0.0
        while not self.cluster.wait_for_sync(MAX_IDLE_WAIT):
            if stop.is_set():
                return False
            waited += MAX_IDLE_WAIT
            if waited >= self.settings.sync_timeout:
                raise CacheSyncTimeoutError(f"caches not synced after {self.settings.sync_timeout:g}s")
        return not stop.is_set()

    def _drain(self) -> None:
        while True:
            try:
                kind, old, new = self.changes.get_nowait()
            except queue.Empty:
                return
            self.runtime.on_change(kind, old, new)

    def _idle_seconds(self) -> float:
        due = self.runtime.next_due()
        if due is None:
            return MAX_IDLE_WAIT
        return min(MAX_IDLE_WAIT, max(0.0, due - self.clock.now()))

    def _wait(self, seconds: float) -> None:
        if seconds <= 0:
            return
        try:
            kind, old, new = self.changes.get(timeout=seconds)
        except queue.Empty:
            return
        self.runtime.on_change(kind, old, new)


def run(
    kubeconfig: str | Path | None,
    *,
    stop: threading.Event | None = None,
    started: threading.Event | None = None,
    settings: RunSettings | None = None,
) -> None:
    """Run the controllers against the cluster of ``kubeconfig`` until ``stop`` is set or a signal.

    ``kubeconfig`` None means ``$KUBECONFIG`` (or the in-cluster configuration);
    ``started`` is set once the caches are synced and the controllers run.
    """
    stop = stop if stop is not None else threading.Event()
    transport = ApiTransport.from_kubeconfig(kubeconfig)
    try:
        runner = Runner(transport, settings)
        with _stop_on_signals(stop):
            runner.run(stop, started)
    finally:
        transport.close()
