"""Demand over time for the workloads a HorizontalPodAutoscaler scales.

A Scenario's ``spec.load`` names a Deployment or StatefulSet (kind,
namespace, name) and gives its total demand over cluster time: ``cpu`` in
cores, ``memory`` in GiB, each one of four shapes:

- ``constant: {value: 3}``;
- ``steps: [{at: 0s, value: 2}, {at: 10m, value: 12}]``: the value of the last
  step at or before the time (0 before the first);
- ``sine: {mean: 8, amplitude: 6, period: 24h, phase: 0s, noise: 0.1, seed: 1}``:
  ``mean + amplitude * sin(2π (t - phase) / period)``, times ``1 + noise * u``
  with ``u`` uniform in [-1, 1]; the period defaults to a day;
- ``csv: {file: trace.csv}``: rows ``time,value`` (seconds or a duration such
  as ``90s``; an optional header row), held from one row to the next, the
  file relative to the Scenario's.

Demand is never negative (a sine that dips below zero reads as zero).

Noise is deterministic: ``u`` is a hash of the seed and the whole second of
the time, not a draw from a stream, so the value at a moment does not depend
on how often or in which order the run looked at it (the HPA's 15 s syncs, a
report's sampling) and two runs of one Scenario see the same demand.

A pod's usage is the demand spread evenly over the workload's ready pods;
the HPA reads it as the metrics server would. Bad traces (negative or
non-numeric values, times out of order or repeated, a missing or empty file)
are load errors naming the file, the object and the field.
"""

from __future__ import annotations

import bisect
import csv
import hashlib
import math
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from karpy.api._reader import FieldReader, ManifestError
from karpy.api.duration import DurationError, parse_duration
from karpy.sim.field_errors import FieldErrors
from karpy.sim.files import UnreadableFileError, read_regular_file

LOAD_KINDS = ("Deployment", "StatefulSet")
SHAPES = ("constant", "steps", "sine", "csv")
RESOURCES = ("cpu", "memory")
DAY = 24 * 3600.0
GIB = 1024**3


@dataclass(frozen=True, slots=True)
class Demand:
    """One resource's demand over time; :meth:`at` is the total at a moment (cluster seconds)."""

    shape: str
    # constant: one point at 0; steps and csv: sorted (time, value) points.
    times: tuple[float, ...] = ()
    values: tuple[float, ...] = ()
    mean: float = 0.0
    amplitude: float = 0.0
    period: float = DAY
    phase: float = 0.0
    noise: float = 0.0
    seed: int = 0

    def at(self, time: float) -> float:
        if self.shape == "sine":
            value = self.mean + self.amplitude * math.sin(2 * math.pi * (time - self.phase) / self.period)
            if self.noise:
                value *= 1.0 + self.noise * _uniform(self.seed, time)
            return max(value, 0.0)
        index = bisect.bisect_right(self.times, time) - 1
        return self.values[index] if index >= 0 else 0.0

    def changes_after(self, time: float) -> bool:
        """Whether the demand will differ from now at some later moment."""
        if self.shape == "sine":
            return self.amplitude != 0.0 or self.noise != 0.0
        return self.times[-1] > time if self.times else False


def _uniform(seed: int, time: float) -> float:
    """A number in [-1, 1] fixed by the seed and the whole second of ``time``."""
    digest = hashlib.blake2b(f"{seed}:{math.floor(time)}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / float(2**64 - 1) * 2.0 - 1.0


@dataclass(frozen=True, slots=True)
class WorkloadLoad:
    kind: str
    namespace: str
    name: str
    demands: dict[str, Demand] = field(default_factory=dict)  # by resource: cpu, memory

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"


def _number(reader: FieldReader, key: str, *, required: bool = True, default: float = 0.0) -> float:
    text = reader.scalar_str(key)
    if text is None:
        if required:
            raise reader.error(key, "required")
        return default
    try:
        value = float(text)
    except ValueError:
        raise reader.error(key, f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise reader.error(key, f"expected a finite number, got {text!r}")
    return value


def _non_negative(reader: FieldReader, key: str, **kwargs: float | bool) -> float:
    value = _number(reader, key, **kwargs)  # type: ignore[arg-type]
    if value < 0:
        raise reader.error(key, f"must not be negative, got {value:g}")
    return value


def _seconds(reader: FieldReader, key: str, default: float) -> float:
    text = reader.scalar_str(key)
    if text is None:
        return default
    try:
        return parse_duration(text)
    except DurationError as error:
        raise reader.error(key, str(error)) from error


def _time(text: str) -> float:
    """Seconds from a bare number or a duration (``90s``, ``1h``)."""
    try:
        return float(text)
    except ValueError:
        return parse_duration(text)


def _csv(reader: FieldReader, base: Path | None) -> Demand:
    file_name = reader.required_str("file")
    path = (base / file_name) if base is not None else Path(file_name)
    where = reader.child_path("file")
    try:
        text = read_regular_file(path).decode("utf-8")
    except UnreadableFileError as error:
        raise ManifestError(where, f"cannot read {file_name}: {error}") from None
    except UnicodeDecodeError as error:
        raise ManifestError(
            where, f"{file_name}: not UTF-8 text ({error.reason} at byte {error.start})"
        ) from None
    times: list[float] = []
    values: list[float] = []
    for line_number, row in enumerate(csv.reader(text.splitlines()), start=1):
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != 2:
            raise ManifestError(
                where, f"{file_name}:{line_number}: expected 'time,value', got {len(row)} fields"
            )
        time_text, value_text = row[0].strip(), row[1].strip()
        try:
            time = _time(time_text)
        except DurationError:
            if not times and line_number == 1:
                continue  # a header row
            raise ManifestError(
                where, f"{file_name}:{line_number}: time {time_text!r} is not a number"
            ) from None
        try:
            value = float(value_text)
        except ValueError:
            raise ManifestError(
                where, f"{file_name}:{line_number}: value {value_text!r} is not a number"
            ) from None
        if not math.isfinite(value) or value < 0:
            raise ManifestError(
                where, f"{file_name}:{line_number}: value {value_text} must be a non-negative number"
            )
        if time < 0:
            raise ManifestError(where, f"{file_name}:{line_number}: time {time_text} must not be negative")
        if times and time <= times[-1]:
            raise ManifestError(
                where,
                f"{file_name}:{line_number}: time {time_text} is not after"
                f" the previous row's ({times[-1]:g})",
            )
        times.append(time)
        values.append(value)
    if not times:
        raise ManifestError(where, f"{file_name}: no rows")
    return Demand("csv", tuple(times), tuple(values))


def parse_demand(reader: FieldReader, base: Path | None, errors: FieldErrors | None = None) -> Demand:
    """One resource's demand: exactly one of the :data:`SHAPES`.

    With ``errors``, every error is recorded there and the parse goes on;
    without, the first is raised.
    """
    found = errors if errors is not None else FieldErrors()
    demand = _demand(reader, base, found)
    if errors is None:
        found.raise_first()
    return demand


def _demand(reader: FieldReader, base: Path | None, errors: FieldErrors) -> Demand:
    shapes = [shape for shape in SHAPES if reader.has(shape)]
    if len(shapes) != 1:
        raise reader.error("", f"needs exactly one of {', '.join(SHAPES)}")
    shape = shapes[0]
    if shape == "constant":
        constant = reader.obj("constant")
        value = errors.read(constant, lambda: _non_negative(constant, "value"), 0.0)
        return Demand("constant", (0.0,), (value,))
    if shape == "steps":

        def step(item: FieldReader) -> tuple[float, float]:
            at = errors.read(item, lambda: _seconds(item, "at", 0.0), 0.0)
            return at, errors.read(item, lambda: _non_negative(item, "value"), 0.0)

        steps = errors.items(reader, "steps", step)
        if reader.raw("steps") == []:
            errors.add(reader.error("steps", "needs at least one step"))
        for index in range(1, len(steps)):
            if steps[index][0] <= steps[index - 1][0]:
                errors.add(
                    ManifestError(
                        f"{reader.child_path('steps')}[{index}].at", "must be after the previous step's"
                    )
                )
        return Demand("steps", tuple(at for at, _ in steps), tuple(value for _, value in steps))
    if shape == "sine":
        sine = reader.obj("sine")
        mean = errors.read(sine, lambda: _non_negative(sine, "mean"), 0.0)
        amplitude = errors.read(sine, lambda: _non_negative(sine, "amplitude", required=False), 0.0)
        period = errors.read(sine, lambda: _seconds(sine, "period", DAY), DAY)
        if period <= 0:
            errors.add(sine.error("period", "must be positive"))
            period = DAY
        noise = errors.read(sine, lambda: _non_negative(sine, "noise", required=False), 0.0)
        if noise > 1:
            errors.add(sine.error("noise", f"a fraction from 0 to 1, got {noise:g}"))
        seed = errors.read(sine, lambda: sine.integer("seed"), None)
        return Demand(
            "sine",
            mean=mean,
            amplitude=amplitude,
            period=period,
            phase=errors.read(sine, lambda: _seconds(sine, "phase", 0.0), 0.0),
            noise=noise,
            seed=seed or 0,
        )
    return _csv(reader.obj("csv"), base)


def parse_load(item: FieldReader, base: Path | None, errors: FieldErrors | None = None) -> WorkloadLoad:
    """One entry of ``spec.load``; ``errors`` as for :func:`parse_demand`."""
    found = errors if errors is not None else FieldErrors()
    kind = found.read(item, lambda: item.required_str("kind"), "")
    if kind and kind not in LOAD_KINDS:
        found.add(item.error("kind", f"one of {' or '.join(LOAD_KINDS)}, not {kind!r}"))
    namespace = found.read(item, lambda: item.string("namespace"), "") or "default"
    name = found.read(item, lambda: item.required_str("name"), "")
    demands: dict[str, Demand] = {}
    for resource in RESOURCES:
        if item.has(resource):
            demand = found.read(item, partial(_resource_demand, item, resource, base, found), None)
            if demand is not None:
                demands[resource] = demand
    if not any(item.has(resource) for resource in RESOURCES):
        found.add(item.error("cpu", "required (or memory)"))
    if errors is None:
        found.raise_first()
    return WorkloadLoad(kind, namespace, name, demands)


def _resource_demand(item: FieldReader, resource: str, base: Path | None, errors: FieldErrors) -> Demand:
    return _demand(item.obj(resource), base, errors)
