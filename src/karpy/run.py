"""``karpy run``: the controllers against a real cluster, with kwok nodes.

The simulator and this module register the very same controllers (provisioning,
the NodeClaim lifecycle and pod events, disruption conditions, disruption,
termination, NodePool status), built by one function
(:func:`karpy.controllers.core.core_controllers`), with a
:class:`~karpy.operator.runtime.Runtime`; what differs is what they are
wired to: here a :class:`~karpy.kube.cluster.KubeCluster` over the apiserver
of a kubeconfig, the wall clock, and the cloud provider of
:data:`karpy.providers.PROVIDERS` the settings name (with the controllers it
adds): by default :class:`~karpy.cloud.kwok.provider.KwokCloudProvider`,
whose "instances" are Node objects kept Ready by kwok or karpy's fake
kubelet. The real
kube-scheduler binds the pods and the real workload controllers make them, so
nothing of the simulator's stand-ins runs here. Garbage collection
(:mod:`karpy.controllers.garbagecollection`) runs here for every provider, and
not in the simulator, where nothing leaks: its store honours finalizers, a
scenario can neither strip one nor kill karpy mid-launch, and its cloud only
terminates instances through karpy or with a warning the interruption
controller acts on.

**One thread owns the Runtime.** The Runtime is not thread-safe, and
KubeCluster announces changes from its informer threads. The bridge between
them is a queue: every notification ``(kind, old, new)`` is put on it as it
arrives, and a single loop (the thread that called :func:`run`) drains it into
``Runtime.on_change``, reconciles a turn (each controller with keys due
reconciles them for at most ``TURN_BUDGET``, ``Runtime.run_round``: a
controller with hundreds of keys due does not hold the others back), and then
blocks on the queue
until the next timer is due (``Runtime.next_due``), a notification arrives, or
at most :data:`MAX_IDLE_WAIT` seconds pass (so a stop request is noticed
promptly). A reconcile therefore never runs concurrently with another, exactly
as in the simulator, and the controllers' determinism arguments still hold
modulo timing; the one exception is a controller that declares its reconciles
of different keys independent (the NodeClaim lifecycle's
``max_concurrent_reconciles``): the Runtime runs that many of its keys at once
on worker threads while the loop goes on, and acts on their outcomes on this
thread (a finished one puts a wake-up on the queue).

**Start-up waits for the caches.** The controllers read only from informer
caches; reconciling against a half-listed cache would, for instance, see
pending pods but not the NodeClaims already launched for them, and launch
twice. So the informers start first, :func:`run` waits until every one has
listed once, and only then does the loop start; the notifications of the
initial lists, queued meanwhile, give every controller its first keys.

**Only the leader reconciles.** With leader election on (``karpy run``'s
default; see :mod:`karpy.kube.leader`), every replica starts its informers
and keeps its caches synced, runs for the Lease once they have synced (as
controller-runtime's manager starts its election after its caches), and
reconciles only once it holds the Lease. Running for the lease only then
means a replica that cannot list (no RBAC, an apiserver it cannot reach)
never holds the lease that a working standby needs, and the log reads in the
order things happen: caches synced, running for the lease, acquired,
controllers running. A standby drains the notifications into the Runtime all the
same, which only marks keys due (a key queued twice is kept once, so the
backlog is bounded by the number of objects, not the wait), so a new leader
reconciles everything at once from warm caches. The loop checks leadership
before every pass; once it is lost (the renew deadline passed, or someone
else holds the lease) :func:`run` raises
:class:`~karpy.kube.leader.LeadershipLostError` and ``karpy run`` exits with
status 1, as controller-runtime's manager does, so that the pod restarts as a
fresh standby rather than acting on a lease it no longer holds.

**Fencing.** Checking between passes is not enough: a pass can take seconds,
a request can hang for as long as the API server does, and the kwok boot
timers, the event sender and the AWS launch jobs write from threads of their
own. So every write passes the elector's
:meth:`~karpy.kube.leader.LeaderElector.check_leading` first: the API
server's through :meth:`~karpy.kube._http.ApiTransport.fenced` (every method
but GET; the elector alone keeps the unfenced transport, for the lease), the
cloud's through :meth:`~karpy.cloud.aws.client.AwsClient.fence` (every EC2,
SSM and IAM operation but Describe, Get and List). Past the renew deadline a
reconcile stops at its next write with
:class:`~karpy.operator.cluster.NotLeaderError`, which the Runtime lets
through to end the loop; a boot timer or a launch job leaves its result to
the next leader, which adopts launched instances from the NodeClaims and the
instances' tags. A write sent before the deadline may still land after it
(a hung request cannot be called back); it was made by the leader, and the
next one starts from what the server holds at least ``lease_duration -
renew_deadline`` (5 s by default) later.

**Shutdown** is cooperative: ``stop.set()`` from another thread, or SIGTERM or
SIGINT when :func:`run` runs on the main thread, ends the loop after the
reconcile in progress; the lease is then released (if held), the informers
stopped and the connection closed. Nothing is rolled back: NodeClaims and
Nodes stay, and the next start picks them up from the caches.

Reconcile errors are logged and recorded by the Runtime, which retries the key
a second later; one failing reconcile never stops the others.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import queue
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from karpy.cloud.kwok.provider import KwokCloudProvider
from karpy.cloud.provider import CloudProvider
from karpy.controllers.core import core_controllers
from karpy.controllers.garbagecollection import PASS_KEY as GC_PASS_KEY
from karpy.controllers.garbagecollection import GarbageCollector
from karpy.controllers.metering import MeteredCloudProvider
from karpy.controllers.provisioning import ProvisioningSettings
from karpy.disruption.consolidation import ConsolidationRules
from karpy.kube._http import ApiTransport
from karpy.kube._resources import BUFFER_TYPES, OVERLAY_TYPES, SPREAD_TYPES, WATCHED_TYPES
from karpy.kube.cluster import KubeCluster
from karpy.kube.leader import LeaderElectionConfig, LeaderElector, LeadershipLostError
from karpy.logs import about
from karpy.observability import ObservabilitySettings, RunObservability
from karpy.operator.cluster import WallClock
from karpy.operator.runtime import Runtime
from karpy.providers import KwokSettings, ProviderContext, provider_of

if TYPE_CHECKING:
    # Loaded only for --cloud-provider aws (karpy.providers), so that a kwok run never imports boto3.
    from karpy.cloud.aws.settings import AwsSettings

log = logging.getLogger("karpy.run")

# The longest the loop sleeps without a timer or a notification: how late a stop is noticed.
MAX_IDLE_WAIT = 0.5

Change = tuple[str, object | None, object | None]
# Put on the queue when a reconcile running on a worker thread has finished: no controller
# watches it, it only wakes the loop to take the outcome in (Runtime.run_round).
RECONCILE_FINISHED = "karpy.run/ReconcileFinished"


@dataclass(slots=True)
class RunSettings:
    """The settings of :class:`Runner`, one group per part of karpy (``karpy`` fills them from its flags)."""

    provisioning: ProvisioningSettings = field(default_factory=ProvisioningSettings)
    """The provisioner's batching, and the per-node overhead cost nodes are priced with."""

    consolidation: ConsolidationRules = field(default_factory=ConsolidationRules)
    """The rules consolidation decides by, with what the feature gates switch (``consolidation_rules``)."""

    capacity_buffers: bool = False
    """The CapacityBuffer feature gate: CapacityBuffers (and the PodTemplates and workloads they name)
    are watched and the room they ask for kept (:mod:`karpy.controllers.capacitybuffer`)."""
    static_capacity: bool = True
    """The StaticCapacity feature gate: static NodePools are kept at their replica count."""
    node_repair: bool = False
    """The NodeRepair feature gate: unhealthy nodes are repaired (:mod:`karpy.disruption.repair`)."""
    terminate_first_drift: bool = False
    """The TerminateFirstDrift feature gate: a drifted node no replacement can be staged for is deleted
    first (:mod:`karpy.disruption.terminate_first`)."""
    terminate_first_repair: bool = False
    """The TerminateFirstRepair feature gate: the same for an unhealthy node node repair replaces."""
    node_overlays: bool = False
    """The NodeOverlay feature gate: NodeOverlays are watched, evaluated and applied to every catalog
    (:mod:`karpy.controllers.nodeoverlay`)."""

    cloud: KwokSettings | AwsSettings = field(default_factory=KwokSettings)
    """The cloud provider's settings (:mod:`karpy.providers`): kwok's (the default) or AWS's."""

    leader_election: LeaderElectionConfig | None = None
    """The Lease to hold before reconciling; None: this is the only replica (no election)."""

    observability: ObservabilitySettings = field(default_factory=ObservabilitySettings)
    """/metrics, /healthz and /readyz (none unless ports are given; ``karpy run`` gives 8080 and 8081)."""

    sync_timeout: float = 60.0
    """Seconds to wait for the informers' first lists before giving up."""

    cluster_name: str = ""
    """The cluster's name (CLUSTER_NAME), for the logs."""

    tune_gc: bool = False
    """Tune the garbage collector for a cache-sized heap (:func:`tune_gc`): the whole process's setting,
    so only ``karpy run`` itself asks for it."""


# The cyclic collector's first-generation threshold while karpy runs (CPython's is 700).
GC_THRESHOLD = 100_000


def tune_gc() -> None:
    """Make the garbage collector cheap for a process whose heap is mostly a cache.

    Filling the informer caches allocates millions of objects that live as long
    as the process, and the cyclic collector, run every 700 allocations, walks
    them again and again finding nothing; the cache records hold no cycles
    karpy relies on the collector for. What is allocated by start-up (modules,
    the instance catalog) is frozen out of its view, and its first generation
    waits for 100,000 allocations. Measured by ``python -m benchmarks.decode``
    (see benchmarks/README.md).
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, *gc.get_threshold()[1:])


# glibc's mallopt() parameter for the most malloc arenas (M_ARENA_MAX in malloc.h).
_M_ARENA_MAX = -8
MALLOC_ARENAS = 2


def limit_malloc_arenas(count: int = MALLOC_ARENAS) -> bool:
    """Keep glibc to ``count`` malloc arenas, unless ``MALLOC_ARENA_MAX`` says otherwise; True if set.

    glibc gives threads arenas of their own, up to eight a core, and memory a
    thread frees among another's live objects in an arena stays resident.
    ``karpy run``'s informers, workers, launch pool and scrape threads each
    allocate, so its resident set grew with the threads rather than the data
    (benchmarks/README.md, "Why scrapes grew the resident set"). The limit is
    read when the first thread other than the main one allocates, so this is
    called before any is started. Not glibc (musl, macOS): nothing to do.
    """
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(_M_ARENA_MAX, count))


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
        election = self.settings.leader_election
        self.elector = LeaderElector(transport, election) if election is not None else None
        # Every write but the lease's passes the elector's fence (see "Fencing" above).
        fenced = transport.fenced(self.elector.check_leading) if self.elector is not None else transport
        spread = self.settings.provisioning.scheduler_config
        kinds = tuple(
            dict.fromkeys(  # a kind two features need is watched once
                (
                    *WATCHED_TYPES,
                    *(BUFFER_TYPES if self.settings.capacity_buffers else ()),
                    *(OVERLAY_TYPES if self.settings.node_overlays else ()),
                    *(SPREAD_TYPES if spread is not None and spread.default_constraints else ()),
                )
            )
        )
        self.cluster = KubeCluster(fenced, clock=self.clock, kinds=kinds)
        self.changes: queue.Queue[Change] = queue.Queue()
        self.observability = RunObservability(
            self.settings.observability, lambda: self.cluster.synced, self._election_refused
        )
        metrics = self.observability.metrics
        # A concurrent reconcile that finished wakes the loop, as a change does.
        self.runtime = Runtime(
            self.clock,
            observer=metrics.reconciled,
            wake=lambda: self.changes.put((RECONCILE_FINISHED, None, None)),
            queue_observer=metrics.work_queues,
        )
        metrics.work_queues.watch(self.runtime.queue_states)
        # The cloud provider the settings name (karpy.providers), with the controllers it adds.
        self.provider = provider_of(self.settings.cloud).build(
            self.settings.cloud, ProviderContext(self.cluster, self.clock, metrics, fenced, self._hand_over)
        )
        if self.elector is not None:
            self.provider.fence(self.elector.check_leading)
        self.cloud: CloudProvider = self.provider.cloud
        self.cluster.subscribe(self._hand_over)

        def cloud(controller: str) -> CloudProvider:
            # Each controller's calls are counted under its name (karpenter_cloudprovider_*).
            return MeteredCloudProvider(self.cloud, metrics, controller)

        core = core_controllers(
            self.cluster,
            cloud,
            self.clock,
            provisioning=self.settings.provisioning,
            rules=self.settings.consolidation,
            metrics=metrics,
            capacity_buffers=self.settings.capacity_buffers,
            static_capacity=self.settings.static_capacity,
            node_repair=self.settings.node_repair,
            terminate_first_drift=self.settings.terminate_first_drift,
            terminate_first_repair=self.settings.terminate_first_repair,
            node_overlays=self.settings.node_overlays,
        )
        # A refused NodePool is announced on the loop's thread (the provisioner's), to its status.
        core.provisioner.refusals.subscribe(self.runtime.on_change)
        # So is a change of the CapacityBuffers' room, to the provisioner.
        if core.provisioner.buffers is not None:
            core.provisioner.buffers.subscribe(self.runtime.on_change)
        # And a new evaluation of the NodeOverlays, to the provisioner.
        if core.overlays is not None:
            core.overlays.subscribe(self.runtime.on_change)
            if isinstance(self.cloud, KwokCloudProvider):
                # A kwok node reports the extended resources overlays give its type, as device plugins would.
                self.cloud.extended_resources = core.overlays.extended_capacity
        for controller in (*core.controllers, *self.provider.controllers(core.cloud_for)):
            self.runtime.register(controller)

    def _election_refused(self) -> str:
        """Why this replica cannot take part in the election ("" if it can): not ready meanwhile."""
        return self.elector.refused if self.elector is not None else ""

    def _hand_over(self, kind: str, old: object | None, new: object | None) -> None:
        # Called from informer threads: only the queue is touched here.
        self.changes.put((kind, old, new))

    def run(self, stop: threading.Event, started: threading.Event | None = None) -> None:
        log.info(
            "starting",
            extra=about(cluster=self.settings.cluster_name) if self.settings.cluster_name else None,
        )
        self.observability.start()  # probes answer while the caches list
        self.cluster.start()
        try:
            if not self._wait_for_sync(stop) or not self._wait_for_leadership(stop):
                return
            log.info("controllers running")
            self.provider.start()  # e.g. the interruption queue: only the leader reads it
            # Even an empty cluster may hold instances that leaked.
            self.runtime.enqueue(GarbageCollector.name, GC_PASS_KEY)
            for controller, key in self.provider.first_keys():
                self.runtime.enqueue(controller, key)
            if started is not None:
                started.set()
            while not stop.is_set():
                self._drain()
                self._check_leadership()
                self.runtime.run_round()
                self._wait(self._idle_seconds())
        finally:
            self.runtime.close()
            self.provider.stop()
            if self.elector is not None:
                self.elector.stop()  # releases the lease if held, so a standby takes over at once
            self.cluster.stop()
            self.observability.stop()
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
        if stop.is_set():
            return False
        log.info("caches synced")
        return True

    def _wait_for_leadership(self, stop: threading.Event) -> bool:
        if self.elector is None:
            return True
        self.elector.start()  # only now: see "Only the leader reconciles" above
        while not self.elector.wait_for_leadership(MAX_IDLE_WAIT):
            if stop.is_set():
                return False
            if self.elector.lost.is_set():
                raise LeadershipLostError(f"the election for lease {self.elector.lease_name} failed")
            self._drain()  # marks keys due, reconciles nothing
        return not stop.is_set()

    def _check_leadership(self) -> None:
        if self.elector is not None:
            self.elector.check_leading()

    def _drain(self) -> None:
        self.observability.turn(self.cluster.synced)  # every loop turn passes here
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
    if settings is not None and settings.tune_gc:
        limit_malloc_arenas()  # before the first thread starts
    transport = ApiTransport.from_kubeconfig(kubeconfig)
    try:
        runner = Runner(transport, settings)
        if runner.settings.tune_gc:
            tune_gc()  # after the Runner: the catalog it loaded is frozen too
        with _stop_on_signals(stop):
            runner.run(stop, started)
    finally:
        transport.close()
