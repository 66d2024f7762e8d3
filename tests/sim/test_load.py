"""Load models: each shape's value over time, seeded noise, CSV traces and their errors."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from karpy.api._reader import FieldReader, ManifestError
from karpy.sim.load import DAY, parse_demand, parse_load


def demand(raw: dict[str, object], base: Path | None = None):  # type: ignore[no-untyped-def]
    return parse_demand(FieldReader(raw, "spec.load[0].cpu"), base)


def test_constant_and_steps() -> None:
    assert demand({"constant": {"value": 3}}).at(12345.0) == 3.0
    steps = demand({"steps": [{"at": "0s", "value": 2}, {"at": "10m", "value": 12}]})
    assert [steps.at(t) for t in (0.0, 599.0, 600.0, 7200.0)] == [2.0, 2.0, 12.0, 12.0]
    assert steps.changes_after(599.0) and not steps.changes_after(600.0)


def test_sine_is_daily_by_default_and_never_negative() -> None:
    sine = demand({"sine": {"mean": 8, "amplitude": 6}})
    assert sine.period == DAY
    assert math.isclose(sine.at(DAY / 4), 14.0)
    assert math.isclose(sine.at(3 * DAY / 4), 2.0)
    assert demand({"sine": {"mean": 1, "amplitude": 3}}).at(3 * DAY / 4) == 0.0


def test_seeded_noise_is_deterministic_and_bounded() -> None:
    noisy = demand({"sine": {"mean": 10, "amplitude": 0, "noise": 0.2, "seed": 3}})
    again = demand({"sine": {"mean": 10, "amplitude": 0, "noise": 0.2, "seed": 3}})
    other = demand({"sine": {"mean": 10, "amplitude": 0, "noise": 0.2, "seed": 4}})
    times = [15.0 * i for i in range(200)]
    values = [noisy.at(t) for t in times]
    assert values == [again.at(t) for t in times]
    # The value at a moment does not depend on what was read before it.
    assert [noisy.at(t) for t in reversed(times)] == list(reversed(values))
    assert values != [other.at(t) for t in times]
    assert all(8.0 <= v <= 12.0 for v in values) and len(set(values)) > 100


def test_csv_trace_is_held_between_rows(tmp_path: Path) -> None:
    (tmp_path / "trace.csv").write_text("time,value\n0,1.5\n60,4\n2m,0.5\n")
    trace = demand({"csv": {"file": "trace.csv"}}, tmp_path)
    assert [trace.at(t) for t in (0.0, 59.0, 60.0, 119.0, 120.0, 9999.0)] == [1.5, 1.5, 4.0, 4.0, 0.5, 0.5]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0,1\n60,-2\n", "t.csv:2: value -2 must be a non-negative number"),
        ("0,1\n60,lots\n", "t.csv:2: value 'lots' is not a number"),
        ("0,1\n60,2\n30,3\n", "t.csv:3: time 30 is not after the previous row's (60)"),
        ("0,1\nsoon,2\n", "t.csv:2: time 'soon' is not a number"),
        ("time,value\n", "t.csv: no rows"),
    ],
)
def test_bad_csv_traces(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "t.csv").write_text(text)
    with pytest.raises(ManifestError) as error:
        demand({"csv": {"file": "t.csv"}}, tmp_path)
    assert str(error.value) == f"spec.load[0].cpu.csv.file: {message}"


def test_a_missing_trace_file_and_bad_shapes(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match=r"csv.file: cannot read gone.csv"):
        demand({"csv": {"file": "gone.csv"}}, tmp_path)
    with pytest.raises(ManifestError, match=r"constant.value: must not be negative"):
        demand({"constant": {"value": -1}})
    with pytest.raises(ManifestError, match=r"steps\[1\].at: must be after the previous step's"):
        demand({"steps": [{"at": "5m", "value": 1}, {"at": "1m", "value": 2}]})
    with pytest.raises(ManifestError, match=r"needs exactly one of"):
        demand({"constant": {"value": 1}, "sine": {"mean": 1}})
    with pytest.raises(ManifestError, match=r"kind: one of Deployment or StatefulSet"):
        parse_load(FieldReader({"kind": "Job", "name": "x", "cpu": {"constant": {"value": 1}}}), None)
