"""``karpy simulate --report``: a self-contained HTML file whose plots render, and the series behind it."""

from __future__ import annotations

import base64
import json
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from tests.support import run_cli

from karpy.sim.clock import VirtualClock
from karpy.sim.recorder import NodeClaimRecord, PodRecord, Recorder
from karpy.sim.scenario import builtin_scenario_path
from karpy.sim.timeseries import run_series, step_series

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class PageReader(HTMLParser):
    """Every attribute value of the page, the images' sources, and the table cells' text."""

    def __init__(self) -> None:
        super().__init__()
        self.attribute_values: list[str] = []
        self.images: list[str] = []
        self.cells: list[str] = []
        self._in_cell = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        self.attribute_values.extend(values.values())
        if tag == "img":
            self.images.append(values.get("src", ""))
        self._in_cell = tag in ("td", "th")

    def handle_endtag(self, tag: str) -> None:
        self._in_cell = False

    def handle_data(self, data: str) -> None:
        if self._in_cell:
            self.cells.append(data)


def assert_self_contained_with_rendered_plots(page: str) -> PageReader:
    """Every image an embedded, non-empty PNG; nothing to fetch (no link, script or style
    sheet; every attribute local); the page as read."""
    reader = PageReader()
    reader.feed(page)
    for source in reader.images:
        prefix = "data:image/png;base64,"
        assert source.startswith(prefix)
        picture = base64.b64decode(source[len(prefix) :], validate=True)
        assert picture.startswith(PNG_SIGNATURE) and len(picture) > 5_000
    for value in reader.attribute_values:
        assert "://" not in value and not value.startswith("//"), value
    assert "<script" not in page and "<link" not in page and "url(" not in page
    return reader


def test_the_report_is_one_file_with_rendered_plots_and_no_remote_reference(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    report, pictures = tmp_path / "r.html", tmp_path / "plots"
    code, _, err = run_cli(
        capsys,
        "simulate",
        str(builtin_scenario_path()),
        "--report",
        str(report),
        "--report-dir",
        str(pictures),
    )
    assert code == 0, err
    reader = assert_self_contained_with_rendered_plots(report.read_text(encoding="utf-8"))
    assert len(reader.images) >= 3
    assert "cost of the run" in reader.cells and "pending p95" in reader.cells
    written = sorted(path.name for path in pictures.iterdir())
    assert written == ["nodes.png", "pending.png", "price.png"]
    assert all((pictures / name).read_bytes().startswith(PNG_SIGNATURE) for name in written)


def test_without_matplotlib_the_report_says_how_to_get_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    code, _, err = run_cli(capsys, "simulate", "--report", str(tmp_path / "r.html"))
    assert code == 2
    assert "karpy[report]" in err
    assert not (tmp_path / "r.html").exists()


def test_step_series_sums_changes_and_keeps_one_point_per_time() -> None:
    series = step_series("nodes", [(10.0, 1.0), (0.0, 1.0), (10.0, 1.0), (20.0, -2.0)])
    assert series.times == [0.0, 10.0, 20.0]
    assert series.values == [1.0, 3.0, 1.0]
    assert series.peak == 3.0
    # 1 for 10 s, 3 for 10 s, 1 for 20 s: 60 node-seconds over 40 s.
    assert series.mean(40.0) == pytest.approx(1.5)


def test_run_figures_come_from_the_records() -> None:
    clock = VirtualClock()
    start = clock.now()
    recorder = Recorder(clock)
    recorder.nodeclaims["a"] = NodeClaimRecord(
        "a", "default", start, "m5.large", "spot", price_per_hour=0.5, launched_at=start
    )
    recorder.nodeclaims["a"].deleted_at = start + 3600
    recorder.nodeclaims["b"] = NodeClaimRecord(
        "b", "default", start + 1800, "c5.large", "on-demand", price_per_hour=1.0, launched_at=start + 1800
    )
    for index, wait in enumerate([10.0, 20.0, 30.0, 40.0]):
        recorder.pods[str(index)] = PodRecord("default", f"p{index}", start, running_at=start + wait)
    recorder.pods["ds"] = PodRecord("default", "ds", start, daemonset=True)
    recorder.end = start + 7200
    run = run_series("karpy", recorder, start, evictions=[1.0, 2.0])
    # 0.5 for an hour, 1.0 for an hour and a half.
    assert run.figures["cost of the run"] == "$2.00"
    assert run.figures["peak nodes"] == "2"
    assert run.figures["peak price"] == "$1.5000/h"
    assert run.figures["pending p50"] == "20s" and run.figures["pending max"] == "40s"
    assert run.figures["pods evicted"] == "2"
    assert [series.label for series in run.nodes_by_offering] == ["c5.large (on-demand)", "m5.large (spot)"]
    # The DaemonSet pod is not a pending workload pod; the others wait 10 to 40 s.
    assert run.pending_pods.values[0] == 4.0 and run.pending_pods.values[-1] == 0.0


def test_compare_runs_both_autoscalers_and_reports_them_side_by_side(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    report = tmp_path / "r.html"
    code, out, err = run_cli(capsys, "simulate", "--compare", "cluster-autoscaler", "--report", str(report))
    assert code == 0, err
    table = out[out.index("== karpy vs cluster-autoscaler ==") :].splitlines()
    assert table[1].split() == ["karpy", "cluster-autoscaler"]
    rows = {line.split("  ")[0]: line for line in table[2:]}
    assert {"cost of the run", "peak nodes", "pending p95", "scale-up events"} <= set(rows)
    reader = assert_self_contained_with_rendered_plots(report.read_text(encoding="utf-8"))
    # One nodes plot per run, then the price and pending plots with both runs on each.
    assert len(reader.images) == 4
    assert "karpy" in reader.cells and "cluster-autoscaler" in reader.cells


def test_compare_as_json_holds_both_runs_and_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "simulate", "-o", "json", "--compare", "cluster-autoscaler")
    assert code == 0, err
    document = json.loads(out)
    assert set(document["runs"]) == {"karpy", "cluster-autoscaler"}
    karpy, baseline = document["runs"]["karpy"], document["runs"]["cluster-autoscaler"]
    assert karpy["nodeclaims"] and baseline["nodeclaims"]
    # The baseline's nodes are its node groups' (labelled), karpy's are its NodePool's.
    assert all(claim["nodepool"] == "default" for claim in karpy["nodeclaims"])
    header, *rows = document["comparison"]
    assert header == ["", "karpy", "cluster-autoscaler"]
    assert dict((row[0], row[1:]) for row in rows)["nodes launched"] == [
        str(len(karpy["nodeclaims"])),
        str(len(baseline["nodeclaims"])),
    ]


def test_the_daily_sine_compared_with_cluster_autoscaler_gives_the_table_and_a_rendered_report(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The whole day of the HPA example, both autoscalers: the guide's comparison, watched."""
    example = Path(__file__).parents[2] / "examples" / "hpa-daily-web" / "scenario.yaml"
    report = tmp_path / "daily.html"
    code, out, err = run_cli(
        capsys, "simulate", str(example), "--compare", "cluster-autoscaler", "--report", str(report)
    )
    assert code == 0, err
    table = out[out.index("== karpy vs cluster-autoscaler ==") :].splitlines()
    assert table[1].split() == ["karpy", "cluster-autoscaler"]
    rows = {line.split("  ")[0]: line.split("  ")[1:] for line in table[2:]}
    assert {"cost of the run", "mean nodes", "pending p95", "pods evicted", "scale-down events"} <= set(rows)
    # The day's demand rises and falls: both scale up and both scale down again.
    scale_downs = [int(cell) for cell in rows["scale-down events"] if cell.strip()]
    assert len(scale_downs) == 2 and min(scale_downs) > 0
    reader = assert_self_contained_with_rendered_plots(report.read_text(encoding="utf-8"))
    # Nodes of each run, price and pending of both, then the HPA's replicas and the demand.
    assert len(reader.images) >= 6
    assert "karpy" in reader.cells and "cluster-autoscaler" in reader.cells


def test_hpa_targets_get_replica_and_demand_plots(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    example = Path(__file__).parents[2] / "examples" / "hpa-daily-web" / "scenario.yaml"
    arguments = ["simulate", str(example), "--duration", "5m", "--report-dir", str(tmp_path)]
    code, _, err = run_cli(capsys, *arguments)
    assert code == 0, err
    written = sorted(path.name for path in tmp_path.iterdir())
    assert "replicas-and-hpa-desired-replicas-pods.png" in written
    assert "cpu-demand-cores.png" in written
