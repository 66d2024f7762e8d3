"""The metrics registry and its Prometheus text exposition, read back with an independent parser."""

from __future__ import annotations

import math
import threading

import pytest
from tests.prometheus_text import ExpositionError, parse

from karpy.operator.metrics import (
    CONTENT_TYPE,
    MetricError,
    Registry,
    format_value,
    quantile,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_counters_with_labels_read_back_with_help_and_type() -> None:
    registry = Registry()
    created = registry.counter("karpy_things_created_total", "Things created.", ["nodepool", "reason"])
    created.labels(nodepool="default", reason="provisioned").inc()
    created.labels(nodepool="default", reason="provisioned").inc(2)
    created.labels(nodepool="gpu", reason="drifted").inc()

    text = registry.exposition()
    exposition = parse(text)
    assert exposition.types["karpy_things_created_total"] == "counter"
    assert exposition.help["karpy_things_created_total"] == "Things created."
    assert exposition.value("karpy_things_created_total", nodepool="default", reason="provisioned") == 3
    assert exposition.value("karpy_things_created_total", nodepool="gpu", reason="drifted") == 1
    assert created.value(nodepool="gpu", reason="drifted") == 1
    assert created.value(nodepool="none", reason="drifted") == 0
    # HELP and TYPE come before the samples, once.
    lines = text.splitlines()
    assert lines[0] == "# HELP karpy_things_created_total Things created."
    assert lines[1] == "# TYPE karpy_things_created_total counter"
    assert text.count("# TYPE") == 1


def test_label_values_and_help_are_escaped() -> None:
    registry = Registry()
    gauge = registry.gauge("karpy_odd", 'Help with a \\ backslash,\na newline and "quotes".', ["value"])
    awkward = 'a "quoted" \\ back\\slash\nand a newline'
    gauge.labels(value=awkward).set(1)
    text = registry.exposition()
    assert "\n" not in text.split("karpy_odd{")[1].split("}")[0]  # the newline is escaped, not written
    exposition = parse(text)
    assert exposition.value("karpy_odd", value=awkward) == 1
    assert exposition.help["karpy_odd"] == 'Help with a \\ backslash,\na newline and "quotes".'


def test_unlabelled_metrics_show_from_the_start_and_empty_families_do_not() -> None:
    registry = Registry()
    registry.gauge("karpy_synced", "Synced.")
    registry.counter("karpy_created_total", "Created.", ["nodepool"])
    exposition = parse(registry.exposition())
    assert exposition.value("karpy_synced") == 0
    assert "karpy_created_total" not in exposition.types


def test_gauges_set_inc_dec_and_remove() -> None:
    registry = Registry()
    usage = registry.gauge("karpy_usage", "Usage.", ["resource_type", "nodepool"])
    usage.labels(resource_type="cpu", nodepool="a").set(4)
    usage.labels(resource_type="cpu", nodepool="a").inc(0.5)
    usage.labels(resource_type="memory", nodepool="a").set(2**33)
    usage.labels(resource_type="cpu", nodepool="b").set(1)
    usage.labels(resource_type="cpu", nodepool="b").dec()
    exposition = parse(registry.exposition())
    assert exposition.value("karpy_usage", resource_type="cpu", nodepool="a") == 4.5
    assert exposition.value("karpy_usage", resource_type="memory", nodepool="a") == 2**33
    assert exposition.value("karpy_usage", resource_type="cpu", nodepool="b") == 0

    usage.remove_matching(nodepool="a")
    assert usage.label_values() == [("cpu", "b")]
    usage.remove(resource_type="cpu", nodepool="b")
    assert registry.exposition() == ""


def test_histograms_have_cumulative_buckets_an_inf_bucket_a_sum_and_a_count() -> None:
    registry = Registry()
    duration = registry.histogram("karpy_duration_seconds", "Duration.", ["controller"], buckets=[0.1, 1, 10])
    for seconds in (0.05, 0.1, 0.5, 1.0, 3.0, 30.0):
        duration.labels(controller="provisioning").observe(seconds)
    exposition = parse(registry.exposition())
    assert exposition.types["karpy_duration_seconds"] == "histogram"

    def bucket(le: str) -> float:
        return exposition.value("karpy_duration_seconds_bucket", controller="provisioning", le=le)

    # A value equal to a bound counts in that bucket ("le": less than or equal).
    assert [bucket("0.1"), bucket("1"), bucket("10"), bucket("+Inf")] == [2, 4, 5, 6]
    assert exposition.value("karpy_duration_seconds_count", controller="provisioning") == 6
    assert exposition.value("karpy_duration_seconds_sum", controller="provisioning") == pytest.approx(34.65)
    assert duration.count(controller="provisioning") == 6


def test_summaries_report_quantiles_of_a_recent_window() -> None:
    clock = FakeClock()
    registry = Registry()
    startup = registry.summary("karpy_startup_seconds", "Startup.", max_age=600, clock=clock)
    for seconds in range(1, 101):  # 1..100
        startup.observe(float(seconds))
    exposition = parse(registry.exposition())
    assert exposition.types["karpy_startup_seconds"] == "summary"
    assert exposition.value("karpy_startup_seconds", quantile="0") == 1
    assert exposition.value("karpy_startup_seconds", quantile="0.5") == 50
    assert exposition.value("karpy_startup_seconds", quantile="0.9") == 90
    assert exposition.value("karpy_startup_seconds", quantile="0.99") == 99
    assert exposition.value("karpy_startup_seconds", quantile="1") == 100
    assert exposition.value("karpy_startup_seconds_count") == 100
    assert exposition.value("karpy_startup_seconds_sum") == 5050

    clock.now += 601  # the window moves on; the lifetime sum and count stay
    startup.observe(7.0)
    exposition = parse(registry.exposition())
    assert exposition.value("karpy_startup_seconds", quantile="0.5") == 7
    assert exposition.value("karpy_startup_seconds_count") == 101

    clock.now += 601
    exposition = parse(registry.exposition())
    assert math.isnan(exposition.value("karpy_startup_seconds", quantile="0.5"))
    assert exposition.value("karpy_startup_seconds_sum") == 5057


def test_quantile_is_the_smallest_value_covering_the_fraction() -> None:
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.0
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.51) == 3.0
    assert quantile([5.0], 0.0) == 5.0
    assert math.isnan(quantile([], 0.5))


def test_values_are_written_as_prometheus_reads_them() -> None:
    assert format_value(3.0) == "3"
    assert format_value(0.5) == "0.5"
    assert format_value(-2.0) == "-2"
    assert format_value(1e-05) == "1e-05"
    assert format_value(math.inf) == "+Inf"
    assert format_value(-math.inf) == "-Inf"
    assert format_value(math.nan) == "NaN"
    assert float(format_value(2.0**60)) == 2.0**60


def test_misuse_is_refused() -> None:
    registry = Registry()
    counter = registry.counter("karpy_total", "Total.", ["nodepool"])
    with pytest.raises(MetricError, match="expected labels"):
        counter.labels(pool="default")
    with pytest.raises(MetricError, match="expected labels"):
        counter.labels(nodepool="default", extra="x")
    with pytest.raises(MetricError, match="cannot go down"):
        counter.labels(nodepool="default").inc(-1)
    with pytest.raises(MetricError, match="registered twice"):
        registry.gauge("karpy_total", "Again.")
    with pytest.raises(MetricError, match="invalid metric name"):
        registry.gauge("karpy-total", "Dash.")
    with pytest.raises(MetricError, match="invalid label name"):
        registry.gauge("karpy_le", "Reserved.", ["__name"])
    with pytest.raises(MetricError, match="invalid label name"):
        registry.histogram("karpy_hist", "Reserved.", ["le"])
    with pytest.raises(MetricError, match="unknown labels"):
        counter.remove_matching(pool="default")


def test_a_scrape_during_updates_from_other_threads_is_consistent() -> None:
    registry = Registry()
    counter = registry.counter("karpy_increments_total", "Increments.", ["worker"])
    histogram = registry.histogram("karpy_observed_seconds", "Observed.", buckets=[1.0])
    start = threading.Barrier(5)

    def work(worker: int) -> None:
        start.wait()
        for _ in range(2000):
            counter.labels(worker=str(worker % 2)).inc()
            histogram.observe(0.5)

    threads = [threading.Thread(target=work, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    start.wait()
    while any(thread.is_alive() for thread in threads):
        exposition = parse(registry.exposition())  # never a torn histogram
        if "karpy_observed_seconds" in exposition.types:
            count = exposition.value("karpy_observed_seconds_count")
            assert exposition.value("karpy_observed_seconds_bucket", le="+Inf") == count
            assert exposition.value("karpy_observed_seconds_sum") == count * 0.5
    exposition = parse(registry.exposition())
    assert exposition.value("karpy_increments_total", worker="0") == 4000
    assert exposition.value("karpy_increments_total", worker="1") == 4000
    assert exposition.value("karpy_observed_seconds_count") == 8000


def test_the_parser_rejects_what_prometheus_would() -> None:
    with pytest.raises(ExpositionError):
        parse("karpy_x 1\n")  # no TYPE line
    with pytest.raises(ExpositionError):
        parse('# TYPE karpy_x gauge\nkarpy_x{a="\\t"} 1\n')  # unknown escape
    with pytest.raises(ExpositionError):
        parse("# TYPE karpy_x gauge\nkarpy_x 1\nkarpy_x 2\n")  # the same series twice
    with pytest.raises(ExpositionError):
        parse("# TYPE karpy_x gauge\nkarpy_x one\n")


def test_the_content_type_is_the_text_format_version() -> None:
    assert CONTENT_TYPE.startswith("text/plain; version=0.0.4")


def test_on_scrape_refreshes_series_before_each_scrape_reads_them() -> None:
    registry = Registry()
    elapsed = registry.gauge("work_seconds", "Work in progress.")
    clock = iter([1.5, 4.0])
    registry.on_scrape(lambda: elapsed.set(next(clock)))
    assert "work_seconds 1.5\n" in registry.exposition()
    assert "work_seconds 4\n" in registry.exposition()
