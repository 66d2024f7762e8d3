"""What a run looked like over time, and in figures: the data behind ``--report``.

Everything here is read from the recorder after a run; nothing samples the
cluster while it runs, so a report costs nothing when it is not asked for,
and the series are exact rather than sampled: each is a step function that
changes only where something happened (a node launched or deleted, a pod
created, running or gone), given as the points where it changes.

- **nodes by offering**: the NodeClaims launched and not yet deleted, per
  instance type and capacity type, from launch (when the cloud starts
  charging) to deletion;
- **price per hour**: the sum of those nodes' launched offering prices;
- **pending pods**: workload pods (not DaemonSet pods) created and neither
  running nor gone yet.

Times are seconds since the start of the run, as in ``--output json``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from karpy.sim.recorder import Recorder


@dataclass(frozen=True, slots=True)
class Series:
    """A step function: ``values[i]`` holds from ``times[i]`` to the next time (or the end)."""

    label: str
    times: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)

    def mean(self, end: float) -> float:
        """The time-weighted mean from the first point to ``end``."""
        if not self.times or end <= self.times[0]:
            return self.values[0] if self.values else 0.0
        total = 0.0
        for index, (moment, value) in enumerate(zip(self.times, self.values, strict=True)):
            until = self.times[index + 1] if index + 1 < len(self.times) else end
            total += value * max(0.0, min(until, end) - moment)
        return total / (end - self.times[0])

    @property
    def peak(self) -> float:
        return max(self.values, default=0.0)


def step_series(label: str, changes: Iterable[tuple[float, float]], start: float = 0.0) -> Series:
    """The running sum of ``(time, delta)`` changes, one point per distinct time, from 0 at ``start``."""
    series = Series(label, [start], [0.0])
    level = 0.0
    for moment, delta in sorted(changes):
        level += delta
        if moment == series.times[-1]:
            series.values[-1] = level
        else:
            series.times.append(moment)
            series.values.append(level)
    return series


# HPA targets drawn in the replicas and demand panels (those that reached the most replicas).
MAX_WORKLOADS_SHOWN = 8


def _workload_panels(recorder: Recorder, start: float) -> list[tuple[str, list[Series]]]:
    """Replicas, HPA desired replicas and CPU demand of each HPA target, as its syncs recorded them."""
    ranked = sorted(
        recorder.workloads.items(),
        key=lambda item: (-max((sample.desired for sample in item[1]), default=0), item[0]),
    )[:MAX_WORKLOADS_SHOWN]
    if not ranked:
        return []
    replicas: list[Series] = []
    demand: list[Series] = []
    for target, samples in sorted(ranked):
        times = [sample.time - start for sample in samples]
        replicas.append(Series(f"{target} replicas", times, [float(s.replicas) for s in samples]))
        replicas.append(Series(f"{target} HPA desired", times, [float(s.desired) for s in samples]))
        cpu = [(moment, s.cpu) for moment, s in zip(times, samples, strict=True) if s.cpu is not None]
        if cpu:
            demand.append(Series(f"{target} CPU demand", [m for m, _ in cpu], [v for _, v in cpu]))
    panels = [("Replicas and HPA desired replicas (pods)", replicas)]
    if demand:
        panels.append(("CPU demand (cores)", demand))
    return panels


@dataclass(slots=True)
class RunSeries:
    """The time series and figures of one run, for a report."""

    name: str
    end: float
    nodes_by_offering: list[Series]
    nodes: Series
    price_per_hour: Series
    pending_pods: Series
    figures: dict[str, str]
    # Further panels, each a title (with its unit) and the series drawn on it.
    panels: list[tuple[str, list[Series]]] = field(default_factory=list)


def _percentile(values: list[float], fraction: float) -> float:
    """The nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def run_series(
    name: str,
    recorder: Recorder,
    start: float,
    evictions: Iterable[float] = (),
    until: float | None = None,
) -> RunSeries:
    """The series and the summary figures of a finished run (its recorder, its clock's start).

    ``until`` (clock time, not before the run's end) extends a run that
    stopped steady to a common end with another, so that two runs compare
    over the same time: steady means nothing changes, so its last fleet is
    what it would have kept paying for.
    """
    finish = max(recorder.end, until) if until is not None else recorder.end
    end = finish - start
    by_offering: dict[str, list[tuple[float, float]]] = {}
    price: list[tuple[float, float]] = []
    nodes: list[tuple[float, float]] = []
    launched = [record for record in recorder.nodeclaims.values() if record.launched_at is not None]
    for record in launched:
        assert record.launched_at is not None
        label = f"{record.instance_type or '?'} ({record.capacity_type or '?'})"
        changes = by_offering.setdefault(label, [])
        up = record.launched_at - start
        changes.append((up, 1.0))
        price.append((up, record.price_per_hour))
        nodes.append((up, 1.0))
        if record.deleted_at is not None:
            down = record.deleted_at - start
            changes.append((down, -1.0))
            price.append((down, -record.price_per_hour))
            nodes.append((down, -1.0))
    pending: list[tuple[float, float]] = []
    waits: list[float] = []
    for pod in recorder.pods.values():
        if pod.daemonset:
            continue
        created = pod.created_at - start
        ends = (pod.running_at, pod.deleted_at, pod.succeeded_at)
        stops = [moment for moment in ends if moment is not None]
        pending.append((created, 1.0))
        if stops:
            pending.append((min(stops) - start, -1.0))
        if pod.running_at is not None:
            waits.append(pod.running_at - pod.created_at)
    node_series = step_series("nodes", nodes)
    price_series = step_series("$/hour", price)
    hours = end / 3600.0
    cost = 0.0
    for record in launched:
        assert record.launched_at is not None
        until_then = record.deleted_at if record.deleted_at is not None else finish
        cost += record.price_per_hour * max(0.0, until_then - record.launched_at) / 3600.0
    types = Counter(f"{record.instance_type} ({record.capacity_type})" for record in launched)
    figures = {
        "cost of the run": f"${cost:.2f}" if cost >= 1 else f"${cost:.4f}",
        "mean price": f"${cost / hours:.4f}/h" if hours > 0 else "-",
        "peak price": f"${price_series.peak:.4f}/h",
        "peak nodes": f"{node_series.peak:.0f}",
        "mean nodes": f"{node_series.mean(end):.1f}",
        "nodes launched": str(len(launched)),
        "nodes deleted": str(sum(1 for record in launched if record.deleted_at is not None)),
        "instance types": ", ".join(f"{count} x {name}" for name, count in sorted(types.items())) or "-",
        "pending p50": f"{_percentile(waits, 0.50):.0f}s",
        "pending p95": f"{_percentile(waits, 0.95):.0f}s",
        "pending max": f"{max(waits, default=0.0):.0f}s",
        "pods evicted": str(sum(1 for _ in evictions)),
        # NodeClaims created (deleted) at one moment are one scale-up (scale-down) decision.
        "scale-up events": str(len({record.created_at for record in launched})),
        "scale-down events": str(
            len({record.deleted_at for record in launched if record.deleted_at is not None})
        ),
    }
    return RunSeries(
        panels=_workload_panels(recorder, start),
        name=name,
        end=end,
        nodes_by_offering=[step_series(label, changes) for label, changes in sorted(by_offering.items())],
        nodes=node_series,
        price_per_hour=price_series,
        pending_pods=step_series("pending pods", pending),
        figures=figures,
    )
