"""A small Prometheus metrics registry: counters, gauges, histograms and summaries.

``karpy run`` serves its metrics on ``/metrics`` for Prometheus to scrape, under
Karpenter's names (:mod:`karpy.operator.karpenter_metrics` declares them).
The controllers record into a :class:`Registry`; the HTTP thread renders it in
the Prometheus text exposition format, version 0.0.4. That is the whole
contract with Prometheus, so this module implements it directly instead of
pulling in a client library: four metric types, labels, and the text format.

**Families and series.** A metric is a *family* (a name, a help text, a type
and the names of its labels); each distinct set of label values is a *series*
of that family. ``family.labels(nodepool="default").inc()`` finds or creates a
series; a family without labels is its own single series (``gauge.set(1)``).
Label values are always strings; every label must be given, no more, no less,
because a series missing a label in one place and carrying it in another
would be two series to Prometheus and a silent split of the data.

**Why one lock for the registry.** Series are written by the reconcile thread
and read by the HTTP thread(s) that serve scrapes. Every read and write of a
value happens under the registry's lock, so a scrape sees each series
consistently (a histogram's buckets, sum and count from the same
observations). Updates are a few arithmetic operations, so one lock never
becomes a bottleneck, and there is no lock ordering to get wrong.

**The types**, as Prometheus defines them:

- :class:`Counter`: only goes up (``inc``); reset only by a restart.
- :class:`Gauge`: any value (``set``, ``inc``, ``dec``).
- :class:`Histogram`: observations counted into cumulative buckets
  (``_bucket{le=...}``, with ``+Inf`` equal to ``_count``), plus ``_sum`` and
  ``_count``; cheap to aggregate across processes.
- :class:`Summary`: quantiles of the observations of a recent window (by
  default the last 10 minutes, as Prometheus' Go client keeps), plus ``_sum``
  and ``_count`` over the whole lifetime. Karpenter reports pod start-up
  durations as one, so karpy does too. Quantiles here are exact over the
  window (at most :data:`SUMMARY_MAX_SAMPLES` observations are kept).

**The text format.** One ``# HELP`` and one ``# TYPE`` line per family, then
one line per sample, families sorted by name and series by label values, so
the output is deterministic. Help text escapes backslash and newline; label
values also escape the double quote. Values print as integers when they are
whole (``3``, not ``3.0``), otherwise in Python's shortest round-trip form;
infinities and NaN print as ``+Inf``, ``-Inf`` and ``NaN``. A family with
labels but no series yet prints nothing, as Prometheus' own clients do.

**What a scrape costs.** At 10,000 pods the text is 15 MB: a series per pod
and, for each node, gauges with thirty-odd labels. A counter's or gauge's
series keeps its ``name{labels} `` text, UTF-8, from its first scrape, and a
family its series in order until one comes or goes, so a scrape formats only
the values and hands out the pieces (:meth:`Registry.exposition_pieces`)
for the HTTP server to send a few at a time: it allocates a few hundred KB,
not the body as strings, joined and encoded (three copies, which the short
threads serving scrapes left resident in glibc's arenas: +240 MB after a few
dozen scrapes, benchmarks/metrics_scrape.py). :meth:`Gauge.replace` keeps the
series that stay, so a pass over every node every few seconds keeps their text.
"""

from __future__ import annotations

import bisect
import math
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Karpenter's duration buckets (seconds), also used by controller-runtime: fine
# below a second, coarse up to ten minutes for the slow singleton controllers.
DURATION_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0, 120.0, 150.0, 300.0, 450.0, 600.0,
)  # fmt: skip
# The quantiles Karpenter's summaries report: minimum, median, 90th, 99th, maximum.
SUMMARY_QUANTILES: tuple[float, ...] = (0.0, 0.5, 0.9, 0.99, 1.0)
SUMMARY_MAX_AGE = 600.0
SUMMARY_MAX_SAMPLES = 10_000

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
# Label names each type uses for its own samples.
_RESERVED_LABELS = {"histogram": ("le",), "summary": ("quantile",)}

LabelValues = tuple[str, ...]


class MetricError(ValueError):
    """A metric used against its declaration (unknown labels, a counter going down...)."""


def format_value(value: float) -> str:
    """A sample value as the text format writes it."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def escape_label_value(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def format_labels(pairs: Sequence[tuple[str, str]]) -> str:
    if not pairs:
        return ""
    return "{" + ",".join(f'{name}="{escape_label_value(value)}"' for name, value in pairs) + "}"


class _Series:
    """One series' state; subclasses hold the numbers. Guarded by the registry's lock."""

    __slots__ = ()


class _Value(_Series):
    __slots__ = ("sample", "value")

    def __init__(self, value: float = 0.0) -> None:
        self.value = value
        # ``name{labels} `` encoded, made at the series' first scrape and kept while the series lives.
        self.sample: bytes | None = None


class _Observations(_Series):
    """The ``_sum`` and ``_count`` that histograms and summaries both keep, over every observation."""

    __slots__ = ("count", "sum")

    def __init__(self) -> None:
        self.sum = 0.0
        self.count = 0

    def add(self, value: float) -> None:
        self.sum += value
        self.count += 1

    def render(self, out: list[str], name: str, labels: list[tuple[str, str]]) -> None:
        out.append(f"{name}_sum{format_labels(labels)} {format_value(self.sum)}")
        out.append(f"{name}_count{format_labels(labels)} {self.count}")


class _Buckets(_Observations):
    __slots__ = ("counts",)

    def __init__(self, size: int) -> None:
        super().__init__()
        self.counts = [0] * size  # per bucket, not cumulative; made cumulative when rendered


class _Window(_Observations):
    __slots__ = ("samples",)

    def __init__(self) -> None:
        super().__init__()
        self.samples: deque[tuple[float, float]] = deque(maxlen=SUMMARY_MAX_SAMPLES)


S = TypeVar("S", bound=_Series)


class _Family(Generic[S]):
    """What every metric type shares: a name, help, label names and the series by label values."""

    type_name = ""

    def __init__(
        self,
        registry: Registry,
        name: str,
        help_text: str,
        label_names: Sequence[str],
        *,
        vector: bool = False,
    ) -> None:
        if not _METRIC_NAME.match(name):
            raise MetricError(f"invalid metric name {name!r}")
        reserved = _RESERVED_LABELS.get(self.type_name, ())
        for label in label_names:
            if not _LABEL_NAME.match(label) or label.startswith("__") or label in reserved:
                raise MetricError(f"{name}: invalid label name {label!r}")
        if len(set(label_names)) != len(label_names):
            raise MetricError(f"{name}: duplicate label names {list(label_names)}")
        self.name = name
        self.help = help_text
        self.label_names = tuple(label_names)
        self._lock = registry.lock
        self._series: dict[LabelValues, S] = {}
        # The series sorted by their label values, as a scrape writes them; None once one comes or goes.
        self._order: list[tuple[LabelValues, S]] | None = None
        # A vector (client_golang's ``*Vec``) has no series until one is used, even without labels.
        self._vector = vector
        if not self.label_names and not vector:
            self._series[()] = self._new_series()

    def _new_series(self) -> S:
        raise NotImplementedError

    def _key(self, values: Mapping[str, str]) -> LabelValues:
        if set(values) != set(self.label_names):
            raise MetricError(
                f"{self.name}: expected labels {sorted(self.label_names)}, got {sorted(values)}"
            )
        return tuple(str(values[label]) for label in self.label_names)

    def _get(self, key: LabelValues) -> S:
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = self._new_series()
            self._order = None
        return series

    def remove(self, **values: str) -> None:
        """Forget one series (an object that no longer exists)."""
        key = self._key(values)
        with self._lock:
            if self._series.pop(key, None) is not None:
                self._order = None

    def remove_matching(self, **values: str) -> None:
        """Forget every series whose labels include ``values`` (all of a NodePool's, say)."""
        unknown = set(values) - set(self.label_names)
        if unknown:
            raise MetricError(f"{self.name}: unknown labels {sorted(unknown)}")
        positions = [(self.label_names.index(label), value) for label, value in values.items()]
        with self._lock:
            for key in [k for k in self._series if all(k[i] == v for i, v in positions)]:
                del self._series[key]
                self._order = None

    def clear(self) -> None:
        with self._lock:
            self._series.clear()
            self._order = None
            if not self.label_names and not self._vector:
                self._series[()] = self._new_series()

    def label_values(self) -> list[LabelValues]:
        with self._lock:
            return sorted(self._series)

    def _sorted(self) -> list[tuple[LabelValues, S]]:
        if self._order is None:
            self._order = sorted(self._series.items(), key=_by_key)
        return self._order

    def _header(self) -> bytes:
        return f"# HELP {self.name} {escape_help(self.help)}\n# TYPE {self.name} {self.type_name}\n".encode()

    def render(self, out: list[bytes]) -> None:
        """Append this family's text to ``out`` (the caller holds the lock)."""
        if not self._series:
            return
        out.append(self._header())
        lines: list[str] = []
        for key in sorted(self._series):
            self._render_series(lines, list(zip(self.label_names, key, strict=True)), self._series[key])
        lines.append("")
        out.append("\n".join(lines).encode())

    def _render_series(self, out: list[str], labels: list[tuple[str, str]], series: S) -> None:
        raise NotImplementedError


class _ValueFamily(_Family[_Value]):
    def _new_series(self) -> _Value:
        return _Value()

    def _render_series(self, out: list[str], labels: list[tuple[str, str]], series: _Value) -> None:
        out.append(f"{self.name}{format_labels(labels)} {format_value(series.value)}")

    def render(self, out: list[bytes]) -> None:
        """Each series' kept ``name{labels} `` and its value: a scrape of tens of thousands of series
        with thirty labels each formats the labels of the new series only, and copies no text."""
        if not self._series:
            return
        out.append(self._header())
        for key, series in self._sorted():
            sample = series.sample
            if sample is None:
                labels = format_labels(list(zip(self.label_names, key, strict=True)))
                sample = series.sample = f"{self.name}{labels} ".encode()
            out.append(sample)
            out.append(_value_line(series.value))

    def value(self, **values: str) -> float:
        """The current value of a series (0 if it does not exist)."""
        key = self._key(values)
        with self._lock:
            series = self._series.get(key)
            return series.value if series is not None else 0.0


def _by_key(item: tuple[LabelValues, _Series]) -> LabelValues:
    return item[0]


# The values most series have (a pod's state, a count of one), written without formatting.
_COMMON_VALUES = {value: f"{format_value(value)}\n".encode() for value in (0.0, 1.0)}


def _value_line(value: float) -> bytes:
    line = _COMMON_VALUES.get(value)
    return line if line is not None else f"{format_value(value)}\n".encode()


FamilyT = TypeVar("FamilyT", bound=_Family[Any])


class _Handle(Generic[FamilyT]):
    """What ``family.labels(...)`` hands out: the family and one key, the series itself left to the family.

    The series may be removed and made anew while a handle is kept, so a handle
    holds no state of its own and looks its series up under the lock each time.
    """

    __slots__ = ("_family", "_key")

    def __init__(self, family: FamilyT, key: LabelValues) -> None:
        self._family = family
        self._key = key

    def present(self) -> None:
        """Make the series if it is not there yet, at zero (a Go client's ``WithLabelValues``)."""
        with self._family._lock:
            self._family._get(self._key)


class CounterSeries(_Handle["Counter"]):
    __slots__ = ()

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise MetricError(f"{self._family.name}: a counter cannot go down ({amount})")
        with self._family._lock:
            self._family._get(self._key).value += amount


class Counter(_ValueFamily):
    type_name = "counter"

    def labels(self, **values: str) -> CounterSeries:
        return CounterSeries(self, self._key(values))

    def inc(self, amount: float = 1.0) -> None:
        self.labels().inc(amount)


class GaugeSeries(_Handle["Gauge"]):
    __slots__ = ()

    def set(self, value: float) -> None:
        with self._family._lock:
            self._family._get(self._key).value = float(value)

    def inc(self, amount: float = 1.0) -> None:
        with self._family._lock:
            self._family._get(self._key).value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.inc(-amount)


class Gauge(_ValueFamily):
    type_name = "gauge"

    def labels(self, **values: str) -> GaugeSeries:
        return GaugeSeries(self, self._key(values))

    def set(self, value: float) -> None:
        self.labels().set(value)

    def inc(self, amount: float = 1.0) -> None:
        self.labels().inc(amount)

    def dec(self, amount: float = 1.0) -> None:
        self.labels().dec(amount)

    def replace(
        self, values: Iterable[tuple[Mapping[str, str] | LabelValues, float]], **matching: str
    ) -> None:
        """Replace every series whose labels include ``matching`` (all, when none) by ``values``, at once.

        A scrape sees either the old series or the new, never an empty family
        in between (as a :meth:`remove_matching` then sets would let it). Each
        value's labels are a mapping (to which ``matching`` is added) or, for
        the many series of one pass, every label value in declaration order.
        A series that stays keeps its state (and its text for the next scrape):
        a pass over a thousand nodes every few seconds makes no new series.
        """
        unknown = set(matching) - set(self.label_names)
        if unknown:
            raise MetricError(f"{self.name}: unknown labels {sorted(unknown)}")
        fresh: dict[LabelValues, float] = {}
        width = len(self.label_names)
        for labels, value in values:
            if isinstance(labels, tuple):
                if len(labels) != width:
                    raise MetricError(f"{self.name}: expected {width} label values, got {labels}")
                key = labels
            else:
                key = self._key({**labels, **matching})
            fresh[key] = float(value)
        positions = [(self.label_names.index(label), value) for label, value in matching.items()]
        with self._lock:
            series = self._series
            gone = [k for k in series if k not in fresh and all(k[i] == v for i, v in positions)]
            for key in gone:
                del series[key]
            for key, value in fresh.items():
                kept = series.get(key)
                if kept is None:
                    series[key] = _Value(value)
                    self._order = None
                else:
                    kept.value = value
            if gone:
                self._order = None


class HistogramSeries(_Handle["Histogram"]):
    __slots__ = ()

    def observe(self, value: float) -> None:
        family = self._family
        index = bisect.bisect_left(family.buckets, value)  # first bucket whose bound >= value
        with family._lock:
            series = family._get(self._key)
            series.counts[index] += 1
            series.add(value)


class Histogram(_Family[_Buckets]):
    type_name = "histogram"

    def __init__(
        self,
        registry: Registry,
        name: str,
        help_text: str,
        label_names: Sequence[str],
        buckets: Iterable[float] = DURATION_BUCKETS,
        *,
        vector: bool = False,
    ) -> None:
        bounds = sorted(float(bound) for bound in buckets if not math.isinf(bound))
        if not bounds or len(set(bounds)) != len(bounds):
            raise MetricError(f"{name}: buckets must be distinct and not empty")
        self.buckets: tuple[float, ...] = (*bounds, math.inf)
        super().__init__(registry, name, help_text, label_names, vector=vector)

    def _new_series(self) -> _Buckets:
        return _Buckets(len(self.buckets))

    def labels(self, **values: str) -> HistogramSeries:
        return HistogramSeries(self, self._key(values))

    def observe(self, value: float) -> None:
        self.labels().observe(value)

    def count(self, **values: str) -> int:
        key = self._key(values)
        with self._lock:
            series = self._series.get(key)
            return series.count if series is not None else 0

    def _render_series(self, out: list[str], labels: list[tuple[str, str]], series: _Buckets) -> None:
        cumulative = 0
        for bound, count in zip(self.buckets, series.counts, strict=True):
            cumulative += count
            bucket_labels = format_labels([*labels, ("le", format_value(bound))])
            out.append(f"{self.name}_bucket{bucket_labels} {cumulative}")
        series.render(out, self.name, labels)


class SummarySeries(_Handle["Summary"]):
    __slots__ = ()

    def observe(self, value: float) -> None:
        family = self._family
        now = family.clock()
        with family._lock:
            series = family._get(self._key)
            series.samples.append((now, value))
            series.add(value)


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of sorted values: the smallest value with at least q of them at or below it."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


class Summary(_Family[_Window]):
    type_name = "summary"

    def __init__(
        self,
        registry: Registry,
        name: str,
        help_text: str,
        label_names: Sequence[str],
        quantiles: Iterable[float] = SUMMARY_QUANTILES,
        max_age: float = SUMMARY_MAX_AGE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.quantiles = tuple(sorted(set(quantiles)))
        if any(not 0.0 <= q <= 1.0 for q in self.quantiles):
            raise MetricError(f"{name}: quantiles must be between 0 and 1")
        self.max_age = max_age
        self.clock = clock
        super().__init__(registry, name, help_text, label_names)

    def _new_series(self) -> _Window:
        return _Window()

    def labels(self, **values: str) -> SummarySeries:
        return SummarySeries(self, self._key(values))

    def observe(self, value: float) -> None:
        self.labels().observe(value)

    def _render_series(self, out: list[str], labels: list[tuple[str, str]], series: _Window) -> None:
        horizon = self.clock() - self.max_age
        while series.samples and series.samples[0][0] < horizon:
            series.samples.popleft()
        values = sorted(value for _, value in series.samples)
        for q in self.quantiles:
            quantile_labels = format_labels([*labels, ("quantile", format_value(q))])
            out.append(f"{self.name}{quantile_labels} {format_value(quantile(values, q))}")
        series.render(out, self.name, labels)


F = TypeVar("F", bound=_Family[Any])


class Registry:
    """The metrics of one process, rendered together for a scrape."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._families: dict[str, _Family[Any]] = {}
        self._on_scrape: list[Callable[[], None]] = []

    def on_scrape(self, refresh: Callable[[], None]) -> None:
        """Have ``refresh`` set its series at each scrape, under the lock, before they are read: a
        value that is a time elapsed until now (work still in progress) is then current."""
        with self.lock:
            self._on_scrape.append(refresh)

    def _register(self, family: F) -> F:
        with self.lock:
            if family.name in self._families:
                raise MetricError(f"metric {family.name!r} registered twice")
            self._families[family.name] = family
        return family

    def counter(self, name: str, help_text: str, labels: Sequence[str] = ()) -> Counter:
        return self._register(Counter(self, name, help_text, labels))

    def gauge(self, name: str, help_text: str, labels: Sequence[str] = ()) -> Gauge:
        return self._register(Gauge(self, name, help_text, labels))

    def histogram(
        self,
        name: str,
        help_text: str,
        labels: Sequence[str] = (),
        buckets: Iterable[float] = DURATION_BUCKETS,
        *,
        vector: bool = False,
    ) -> Histogram:
        """``vector``: no series until one is observed, even without labels (a Go ``HistogramVec``)."""
        return self._register(Histogram(self, name, help_text, labels, buckets, vector=vector))

    def summary(
        self,
        name: str,
        help_text: str,
        labels: Sequence[str] = (),
        quantiles: Iterable[float] = SUMMARY_QUANTILES,
        max_age: float = SUMMARY_MAX_AGE,
        clock: Callable[[], float] = time.monotonic,
    ) -> Summary:
        return self._register(Summary(self, name, help_text, labels, quantiles, max_age, clock))

    def names(self) -> list[str]:
        with self.lock:
            return sorted(self._families)

    def exposition_pieces(self) -> list[bytes]:
        """Every family in the Prometheus text format (version 0.0.4), UTF-8, in pieces to send one after
        the other: mostly each series' kept text and its value, so that a scrape allocates little
        besides the list (see :mod:`karpy.observability`)."""
        out: list[bytes] = []
        with self.lock:
            for refresh in self._on_scrape:
                refresh()
            for name in sorted(self._families):
                self._families[name].render(out)
        return out

    def exposition(self) -> str:
        """Every family in the Prometheus text format (version 0.0.4)."""
        return b"".join(self.exposition_pieces()).decode()
