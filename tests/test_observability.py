"""``/metrics``, ``/healthz`` and ``/readyz`` over real HTTP on free ports."""

from __future__ import annotations

import tracemalloc
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from tests.prometheus_text import parse

from karpy.observability import Endpoints, Health, ObservabilitySettings, RunObservability
from karpy.operator.karpenter_metrics import Metrics
from karpy.operator.metrics import Registry


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def get(port: int | None, path: str) -> tuple[int, str, str]:
    assert port is not None
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


class Synced:
    def __init__(self) -> None:
        self.value = False

    def __call__(self) -> bool:
        return self.value


@pytest.fixture
def served() -> Iterator[tuple[Endpoints, FakeClock, Synced]]:
    clock, synced = FakeClock(), Synced()
    registry = Registry()
    registry.counter("karpy_test_total", "A test counter.").inc(3)
    health = Health(synced, stall_timeout=60, clock=clock)
    endpoints = Endpoints(
        registry, health, ObservabilitySettings(metrics_port=0, health_probe_port=0, bind_address="127.0.0.1")
    )
    endpoints.start()
    try:
        yield endpoints, clock, synced
    finally:
        endpoints.stop()


def test_metrics_are_served_in_the_text_format(served: tuple[Endpoints, FakeClock, Synced]) -> None:
    endpoints, _, _ = served
    status, content_type, body = get(endpoints.metrics_port, "/metrics")
    assert status == 200
    assert content_type.startswith("text/plain; version=0.0.4")
    assert parse(body).value("karpy_test_total") == 3
    assert endpoints.metrics_port != endpoints.health_probe_port
    # Each port serves its own paths only, as Karpenter's do.
    assert get(endpoints.metrics_port, "/healthz")[0] == 404
    assert get(endpoints.health_probe_port, "/metrics")[0] == 404


def scrape_streamed(port: int | None) -> tuple[int, bytes]:
    """Read ``/metrics`` in chunks, keeping only its last bytes: the test's own copy is not the server's."""
    size, tail = 0, b""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        assert int(response.headers["Content-Length"]) > 0
        while chunk := response.read(64 * 1024):
            size += len(chunk)
            tail = (tail + chunk)[-200:]
        assert size == int(response.headers["Content-Length"])
    return size, tail


def test_a_large_scrape_allocates_a_fraction_of_its_body() -> None:
    """Thousands of series with thirty-odd labels (a node gauge's): a scrape sends each series' kept text
    and its value, and does not build the body (15 MB at 10,000 pods) as strings and again as bytes,
    which, freed in the arena of the thread serving it, stayed resident (benchmarks/metrics_scrape.py)."""
    registry = Registry()
    names = [f"label_{index}" for index in range(36)]
    gauge = registry.gauge("karpy_node_figure", "A figure per node.", names)

    def rows(value: float) -> list[tuple[tuple[str, ...], float]]:
        return [(tuple(f"value-{node:05d}-{label}" for label in names), value) for node in range(4000)]

    gauge.replace(rows(1.5))
    endpoints = Endpoints(registry, Health(lambda: True), ObservabilitySettings(metrics_port=0))
    endpoints.start()
    try:
        size, _ = scrape_streamed(endpoints.metrics_port)  # the series' text is made once, here
        assert size > 3_000_000
        gauge.replace(rows(2.5))  # the same series, each pass's label values new tuples
        tracemalloc.start()
        try:
            again, tail = scrape_streamed(endpoints.metrics_port)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    finally:
        endpoints.stop()
    assert again == size
    assert tail.endswith(b'label_35="value-03999-label_35"} 2.5\n')
    assert peak < size / 4


def test_ready_once_synced(served: tuple[Endpoints, FakeClock, Synced]) -> None:
    endpoints, _, synced = served
    status, _, body = get(endpoints.health_probe_port, "/readyz")
    assert (status, body) == (500, "informer caches not synced\n")
    synced.value = True
    assert get(endpoints.health_probe_port, "/readyz")[:1] == (200,)


def test_alive_until_the_loop_stalls(served: tuple[Endpoints, FakeClock, Synced]) -> None:
    endpoints, clock, _ = served
    assert get(endpoints.health_probe_port, "/healthz")[0] == 200  # no turn yet: starting
    endpoints.health.beat()
    clock.now += 59
    assert get(endpoints.health_probe_port, "/healthz")[0] == 200
    clock.now += 2
    status, _, body = get(endpoints.health_probe_port, "/healthz")
    assert status == 500
    assert "stalled for 61s" in body
    endpoints.health.beat()
    assert get(endpoints.health_probe_port, "/healthz?verbose")[0] == 200


def test_one_port_for_everything() -> None:
    probe = Endpoints(Registry(), Health(lambda: True), ObservabilitySettings(0, None, "127.0.0.1"))
    probe.start()
    port = probe.metrics_port
    probe.stop()
    assert port is not None
    shared = Endpoints(Registry(), Health(lambda: True), ObservabilitySettings(port, port, "127.0.0.1"))
    shared.start()
    try:
        assert shared.metrics_port == shared.health_probe_port == port
        assert get(port, "/metrics")[0] == 200
        assert get(port, "/healthz")[0] == 200
        assert get(port, "/readyz")[0] == 200
    finally:
        shared.stop()


def test_nothing_is_served_without_ports() -> None:
    observability = RunObservability(ObservabilitySettings(), lambda: True)
    observability.start()
    assert observability.endpoints.metrics_port is None
    assert observability.endpoints.health_probe_port is None
    observability.turn(True)
    assert parse(observability.registry.exposition()).value("karpenter_cluster_state_synced") == 1
    observability.stop()


def test_a_taken_port_fails_the_start_and_frees_what_it_took() -> None:
    first = Endpoints(Registry(), Health(lambda: True), ObservabilitySettings(0, None, "127.0.0.1"))
    first.start()
    try:
        clash = Endpoints(
            Registry(), Health(lambda: True), ObservabilitySettings(0, first.metrics_port, "127.0.0.1")
        )
        with pytest.raises(OSError):
            clash.start()
        assert clash._servers == []
    finally:
        first.stop()


def test_the_time_unsynced_counts_from_the_first_unsynced_turn_and_is_0_once_synced() -> None:
    metrics = Metrics()
    metrics.cluster_state(False, 100.0)
    metrics.cluster_state(False, 130.0)
    exposition = parse(metrics.registry.exposition())
    assert exposition.types["karpenter_cluster_state_unsynced_time_seconds"] == "gauge"
    assert exposition.value("karpenter_cluster_state_unsynced_time_seconds") == 30
    assert exposition.value("karpenter_cluster_state_synced") == 0
    metrics.cluster_state(True, 140.0)
    assert parse(metrics.registry.exposition()).value("karpenter_cluster_state_unsynced_time_seconds") == 0
    metrics.cluster_state(False, 200.0)  # unsynced again: counted afresh
    metrics.cluster_state(False, 205.0)
    assert parse(metrics.registry.exposition()).value("karpenter_cluster_state_unsynced_time_seconds") == 5
