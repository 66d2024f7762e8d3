"""controller-runtime's work queue metrics and operatorpkg's status condition metrics.

Karpenter exports both besides its own: every controller's work queue
(``workqueue_*``, from controller-runtime's priority queue, which Karpenter's
controllers use) and, for each kind it watches the conditions of, what those
conditions are and how they move (``operator_<kind>_status_condition_*`` and
``operator_<kind>_termination_*``, from operatorpkg's status controller, plus
the ``operator_status_condition_*`` and ``operator_termination_*`` families
operatorpkg keeps, deprecated, with ``group`` and ``kind`` labels in place of
the kind in the name). The names, types, labels, help texts and buckets are
those of controller-runtime v0.24 and operatorpkg at the version Karpenter
v1.15 pins; :class:`karpy.operator.karpenter_metrics.Metrics` declares them on
its registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from karpy.operator.metrics import CounterSeries, HistogramSeries, Registry
from karpy.operator.runtime import QueueState


# controller-runtime's work queue buckets: prometheus.ExponentialBuckets(10e-9, 10, 12), 10 ns to
# 1,000 s, computed as Go does (each the previous times ten, so 1e-05 is 9.999999999999999e-06).
def exponential_buckets(start: float, factor: float, count: int) -> tuple[float, ...]:
    """client_golang's ``prometheus.ExponentialBuckets``, float for float."""
    buckets: list[float] = []
    for _ in range(count):
        buckets.append(start)
        start *= factor
    return tuple(buckets)


WORKQUEUE_BUCKETS = exponential_buckets(10e-9, 10, 12)

# The priority label of workqueue_depth: controller-runtime's priority queue counts its ready items
# by priority, and karpy's keys all have the default one.
DEFAULT_PRIORITY = "0"

# Karpenter's buckets of its status controllers' histograms: prometheus.ExponentialBuckets(0.5, 2, 15).
STATUS_BUCKETS = exponential_buckets(0.5, 2, 15)
# client_golang's DefBuckets, which the deprecated families keep (they are declared without buckets).
DEFAULT_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

OPERATOR_NAMESPACE = "operator"


class WorkQueueMetrics:
    """controller-runtime's ``workqueue_*`` families, one series per controller (``name`` and
    ``controller`` both its name), told by the Runtime what its queue does (a
    :class:`karpy.operator.runtime.QueueObserver`) and reading the rest at each scrape."""

    def __init__(self, registry: Registry) -> None:
        r = registry
        self.depth = r.gauge(
            "workqueue_depth",
            "Current depth of workqueue by workqueue and priority",
            ["name", "controller", "priority"],
        )
        self.adds = r.counter(
            "workqueue_adds_total", "Total number of adds handled by workqueue", ["name", "controller"]
        )
        self.queue_duration = r.histogram(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            ["name", "controller"],
            WORKQUEUE_BUCKETS,
        )
        self.work_duration = r.histogram(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            ["name", "controller"],
            WORKQUEUE_BUCKETS,
        )
        self.unfinished_work = r.gauge(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been observed by "
            "work_duration. Large values indicate stuck threads. One can deduce the number of stuck "
            "threads by observing the rate at which this increases.",
            ["name", "controller"],
        )
        self.longest_running = r.gauge(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running.",
            ["name", "controller"],
        )
        self.retries = r.counter(
            "workqueue_retries_total",
            "Total number of items added to the workqueue with a non-zero delay (rate-limited requeues, "
            "explicit RequeueAfter or AddAfter calls)",
            ["name", "controller"],
        )
        # Each controller's series, made once (controller-runtime makes them with the queue).
        self._series: dict[str, tuple[CounterSeries, CounterSeries, HistogramSeries, HistogramSeries]] = {}
        # The controllers a key was ever ready for: the priority queue makes a depth series at the first.
        self._ever_added: set[str] = set()
        self._states: Callable[[], Mapping[str, QueueState]] | None = None
        r.on_scrape(self._refresh)

    def watch(self, states: Callable[[], Mapping[str, QueueState]]) -> None:
        """Read the queues' depth and running work from ``states`` (``Runtime.queue_states``) at scrapes."""
        self._states = states

    def _of(self, controller: str) -> tuple[CounterSeries, CounterSeries, HistogramSeries, HistogramSeries]:
        series = self._series.get(controller)
        if series is None:
            series = self._series[controller] = (
                self.adds.labels(name=controller, controller=controller),
                self.retries.labels(name=controller, controller=controller),
                self.queue_duration.labels(name=controller, controller=controller),
                self.work_duration.labels(name=controller, controller=controller),
            )
        return series

    def added(self, controller: str) -> None:
        self._of(controller)[0].inc()
        self._ever_added.add(controller)

    def retried(self, controller: str) -> None:
        self._of(controller)[1].inc()

    def started(self, controller: str, waited: float) -> None:
        self._of(controller)[2].observe(waited)

    def finished(self, controller: str, seconds: float) -> None:
        self._of(controller)[3].observe(seconds)

    def _refresh(self) -> None:
        """At a scrape (under the registry's lock): each queue's depth and unfinished work now."""
        if self._states is None:
            return
        for controller, state in self._states().items():
            for series in self._of(controller):
                series.present()  # at zero from the start, as controller-runtime makes them with the queue
            labels = {"name": controller, "controller": controller}
            if controller in self._ever_added:
                self.depth.labels(**labels, priority=DEFAULT_PRIORITY).set(state.depth)
            self.unfinished_work.labels(**labels).set(state.unfinished_seconds)
            self.longest_running.labels(**labels).set(state.longest_running_seconds)


def prometheus_label(key: str) -> str:
    """A label key as operatorpkg names the label it becomes (``karpenter.sh/nodepool`` →
    ``karpenter_sh_nodepool``)."""
    return key.replace("/", "_").replace(".", "_").replace("-", "_")


class _StatusFamilies:
    """The six families of one status controller (operatorpkg's ``status.Controller``)."""

    def __init__(
        self,
        registry: Registry,
        subject: str,
        buckets: Sequence[float],
        extra: Sequence[str],
    ) -> None:
        r = registry
        conditions = f"{OPERATOR_NAMESPACE}_{subject}status_condition"
        termination = f"{OPERATOR_NAMESPACE}_{subject}termination"
        self.transition_seconds = r.histogram(
            f"{conditions}_transition_seconds",
            "The amount of time a condition was in a given state (status) before transitioning to another "
            "state (to_status). e.g. Alarm := P99(Updated=False) > 5 minutes",
            ["type", "status", "to_status", *extra],
            buckets,
        )
        self.count = r.gauge(
            f"{conditions}_count",
            "The number of a condition for a given object, type and status. "
            "e.g. Alarm := Available=False > 0",
            ["namespace", "name", "type", "status", "reason", *extra],
        )
        self.current_status_seconds = r.gauge(
            f"{conditions}_current_status_seconds",
            "The current amount of time in seconds that a status condition has been in a specific state. "
            "Alarm := P99(Updated=Unknown) > 5 minutes",
            ["namespace", "name", "type", "status", "reason", *extra],
        )
        self.transitions = r.counter(
            f"{conditions}_transitions_total",
            "The count of transitions of a given object, type and status.",
            ["type", "status", "reason", *extra],
        )
        self.termination_current_time = r.gauge(
            f"{termination}_current_time_seconds",
            "The current amount of time in seconds that an object has been in terminating state.",
            ["namespace", "name", *extra],
        )
        self.termination_duration = r.histogram(
            f"{termination}_duration_seconds",
            "The amount of time taken by an object to terminate completely.",
            list(extra),
            buckets,
            vector=True,  # a HistogramVec with no labels for most kinds: no series until one terminates
        )


@dataclass(frozen=True, slots=True)
class StatusKind:
    """A kind Karpenter v1.15 registers operatorpkg's status controller for, as it registers it."""

    group: str
    kind: str
    # The object's labels its series carry (by key; operatorpkg's WithLabels).
    labels: tuple[str, ...] = ()
    # Karpenter's are prometheus.ExponentialBuckets(0.5, 2, 15); the AWS provider's, the default.
    buckets: tuple[float, ...] = STATUS_BUCKETS
    # Whether it emits the deprecated kind-less families too (operatorpkg's EmitDeprecatedMetrics).
    deprecated: bool = True


class StatusConditionMetrics:
    """operatorpkg's status condition metrics for ``kinds``: each kind's six families and the
    deprecated kind-less ones the kinds that emit them share.

    The NodeClaim and Node families carry a label per node class kind karpy
    serves (``karpenter_k8s_aws_ec2nodeclass``, ``karpenter_kwok_sh_kwoknodeclass``),
    as Karpenter's carry one per kind its cloud provider supports: the one of
    the other provider is always empty, which Prometheus stores as no label,
    so the series are Karpenter's under either provider.
    """

    def __init__(self, registry: Registry, kinds: Iterable[StatusKind]) -> None:
        self.deprecated = _StatusFamilies(registry, "", DEFAULT_BUCKETS, ("group", "kind"))
        self.kinds: dict[str, tuple[StatusKind, _StatusFamilies]] = {
            kind.kind: (
                kind,
                _StatusFamilies(
                    registry,
                    f"{kind.kind.lower()}_",
                    kind.buckets,
                    [prometheus_label(key) for key in kind.labels],
                ),
            )
            for kind in kinds
        }


@dataclass(frozen=True, slots=True)
class ObservedCondition:
    type: str
    status: str
    reason: str
    last_transition_time: float


@dataclass(slots=True)
class _Observed:
    """What the status controller last saw of one object, to tell transitions and drop series."""

    namespace: str
    name: str
    conditions: dict[str, ObservedCondition]
    # The (namespace, name, type, status, reason) of the condition series it set, and the
    # additional labels they carry; the deletion time if it was terminating.
    gauges: set[tuple[str, str, str, str, str]]
    extra: dict[str, str]
    deleted_at: float | None


_GAUGE_LABELS = ("namespace", "name", "type", "status", "reason")


class StatusRecorder:
    """operatorpkg's status controller's bookkeeping for one kind: set the gauges of an object's
    conditions, count and time their transitions, and drop an object's series when it goes."""

    def __init__(self, metrics: StatusConditionMetrics, kind: str) -> None:
        declared, self.families = metrics.kinds[kind]
        self.kind_labels = {"group": declared.group, "kind": kind}
        self.deprecated = metrics.deprecated if declared.deprecated else None
        self._observed: dict[str, _Observed] = {}

    def observed(
        self,
        key: str,
        conditions: Iterable[ObservedCondition],
        extra: Mapping[str, str],
        deleted_at: float | None,
        now: float,
        namespace: str = "",
    ) -> None:
        """The object ``key`` (its name, or namespace/name) as it is now: ``extra`` its additional
        label values (by label name), ``deleted_at`` when its deletion was asked for."""
        families, deprecated, kind_labels = self.families, self.deprecated, self.kind_labels
        name = key.rpartition("/")[2]
        current = {condition.type: condition for condition in conditions}
        before = self._observed.get(key)
        if before is not None and before.extra != extra:
            self._drop(before)  # its labels changed: the series under the old ones go (as operatorpkg's)
        observed = before.conditions if before is not None else {}
        if deleted_at is not None:
            terminating = now - deleted_at
            families.termination_current_time.labels(namespace=namespace, name=name, **extra).set(terminating)
            if deprecated is not None:
                deprecated.termination_current_time.labels(namespace=namespace, name=name, **kind_labels).set(
                    terminating
                )
        gauges: set[tuple[str, str, str, str, str]] = set()
        for condition in current.values():
            series = (namespace, name, condition.type, condition.status, condition.reason)
            labels = dict(zip(_GAUGE_LABELS, series, strict=True))
            age = now - condition.last_transition_time
            families.count.labels(**labels, **extra).set(1)
            families.current_status_seconds.labels(**labels, **extra).set(age)
            if deprecated is not None:
                deprecated.count.labels(**labels, **kind_labels).set(1)
                deprecated.current_status_seconds.labels(**labels, **kind_labels).set(age)
            gauges.add(series)
        if before is not None and before.extra == extra:
            # A condition whose status or reason changed, or that went: its series go with it.
            self._drop_gauges(before.gauges - gauges, before.extra)
        for condition in current.values():
            previous = observed.get(condition.type)
            if previous is not None and previous.status == condition.status:
                continue
            # A condition transitions when it appears or its status changes (operatorpkg's rule).
            counted = {"type": condition.type, "status": condition.status, "reason": condition.reason}
            families.transitions.labels(**counted, **extra).inc()
            if deprecated is not None:
                deprecated.transitions.labels(**counted, **kind_labels).inc()
            if previous is None:
                continue
            held = {"type": previous.type, "status": previous.status, "to_status": condition.status}
            seconds = condition.last_transition_time - previous.last_transition_time
            families.transition_seconds.labels(**held, **extra).observe(seconds)
            if deprecated is not None:
                deprecated.transition_seconds.labels(**held, **kind_labels).observe(seconds)
        self._observed[key] = _Observed(namespace, name, current, gauges, dict(extra), deleted_at)

    def gone(self, key: str, now: float) -> None:
        """The object ``key`` is no more: drop its series, and time its termination if it was seen going."""
        before = self._observed.pop(key, None)
        if before is None:
            return  # never seen: it has no series
        self._drop(before)
        if before.deleted_at is not None:
            self.families.termination_duration.labels(**before.extra).observe(now - before.deleted_at)
            if self.deprecated is not None:
                self.deprecated.termination_duration.labels(**self.kind_labels).observe(
                    now - before.deleted_at
                )

    def _drop(self, before: _Observed) -> None:
        """Every gauge series an object had."""
        self._drop_gauges(before.gauges, before.extra)
        self.families.termination_current_time.remove(
            namespace=before.namespace, name=before.name, **before.extra
        )
        if self.deprecated is not None:
            self.deprecated.termination_current_time.remove(
                namespace=before.namespace, name=before.name, **self.kind_labels
            )

    def _drop_gauges(self, gone: Iterable[tuple[str, str, str, str, str]], extra: Mapping[str, str]) -> None:
        for series in gone:
            labels = dict(zip(_GAUGE_LABELS, series, strict=True))
            self.families.count.remove(**labels, **extra)
            self.families.current_status_seconds.remove(**labels, **extra)
            if self.deprecated is not None:
                self.deprecated.count.remove(**labels, **self.kind_labels)
                self.deprecated.current_status_seconds.remove(**labels, **self.kind_labels)
