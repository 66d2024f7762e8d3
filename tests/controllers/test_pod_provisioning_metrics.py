"""Pods timed from when provisioning first saw them and first found them a place (Karpenter's alpha
``karpenter_pods_provisioning_*`` and ``karpenter_pods_scheduling_decision_duration_seconds``)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tests.controllers.test_disruption_metrics import NODEPOOL, scrape
from tests.prometheus_text import Exposition
from tests.support import KWOK_NODE_CLASS, deployment_manifest, load_objects, make_pod

from karpy.api.core import Pod
from karpy.controllers.metering import POD_RESYNC, WAITING_PODS_KEY, PodMetrics
from karpy.operator.karpenter_metrics import Metrics
from karpy.operator.metrics import Gauge
from karpy.sim.clock import VirtualClock
from karpy.sim.simulation import Simulation


def of_pod(exposition: Exposition, metric: str, pod: str, **more: str) -> float | None:
    """A per-pod sample (``name`` is a label here, so not through ``Exposition.value``); None: none."""
    labels = frozenset({("name", pod), ("namespace", "default"), *more.items()})
    return exposition.samples.get((metric, labels))


def ages_refreshed(simulation: Simulation) -> None:
    """The waiting pods' ages worked out now, as ``karpy run`` does every 5 s (the simulator, on changes)."""
    simulation.runtime.enqueue("metrics.pod", WAITING_PODS_KEY)
    simulation.runtime.run_due()


def test_pods_placed_are_timed_from_their_place_until_bound_and_running() -> None:
    metrics = Metrics()
    simulation = Simulation(metrics=metrics)
    simulation.apply(load_objects(KWOK_NODE_CLASS, NODEPOOL, deployment_manifest(replicas=3)))
    # The batch has closed and the NodeClaims are launched, the node is not up: placed, waiting.
    simulation.run(5, until_steady=False)
    waiting = [pod for pod in simulation.pods() if pod.phase == "Pending"]
    assert len(waiting) == 3 and not any(pod.node_name for pod in waiting)
    ages_refreshed(simulation)
    exposition = scrape(metrics)
    assert exposition.types["karpenter_pods_scheduling_decision_duration_seconds"] == "histogram"
    assert exposition.value("karpenter_pods_scheduling_decision_duration_seconds_count") == 3
    for pod in waiting:
        name = pod.metadata.name
        since_place = of_pod(exposition, "karpenter_pods_provisioning_unstarted_time_seconds", name)
        since_creation = of_pod(exposition, "karpenter_pods_unstarted_time_seconds", name)
        assert since_place is not None and since_creation is not None
        assert 0 <= since_place < since_creation
        unbound = of_pod(
            exposition, "karpenter_pods_provisioning_unbound_time_seconds", name, dynamic_resources="false"
        )
        assert unbound == since_place
        # Decided: no longer undecided.
        undecided = "karpenter_pods_provisioning_scheduling_undecided_time_seconds"
        assert of_pod(exposition, undecided, name) is None
    simulation.run(600)
    assert all(pod.phase == "Running" for pod in simulation.pods())
    exposition = scrape(metrics)
    assert (
        exposition.value(
            "karpenter_pods_provisioning_bound_duration_seconds_count", dynamic_resources="false"
        )
        == 3
    )
    assert exposition.value("karpenter_pods_provisioning_startup_duration_seconds_count") == 3
    # From the place found, later than the creation: shorter than the durations from creation.
    assert exposition.value("karpenter_pods_provisioning_startup_duration_seconds_sum") < exposition.value(
        "karpenter_pods_startup_duration_seconds_sum"
    )
    assert not exposition.find("karpenter_pods_provisioning_unstarted_time_seconds")
    assert not exposition.find("karpenter_pods_provisioning_unbound_time_seconds")
    assert metrics.pod_scheduling.acked == metrics.pod_scheduling.schedulable == {}


def test_a_pod_no_nodepool_can_take_is_decided_but_never_timed_from_a_place() -> None:
    metrics = Metrics()
    simulation = Simulation(metrics=metrics)
    simulation.apply(load_objects(KWOK_NODE_CLASS, NODEPOOL, deployment_manifest(replicas=1, cpu="500")))
    simulation.run(120, until_steady=False)
    [pod] = simulation.pods()
    assert pod.phase == "Pending"
    ages_refreshed(simulation)
    exposition = scrape(metrics)
    assert exposition.value("karpenter_pods_scheduling_decision_duration_seconds_count") == 1
    assert (of_pod(exposition, "karpenter_pods_unstarted_time_seconds", pod.metadata.name) or 0) > 0
    assert not exposition.find("karpenter_pods_provisioning_unstarted_time_seconds")
    assert not exposition.find("karpenter_pods_provisioning_scheduling_undecided_time_seconds")
    # Deleted: its times go with it.
    simulation.cluster.delete(simulation.cluster.get("Deployment", "default/app"))
    simulation.run(60, until_steady=False)
    assert metrics.pod_scheduling.acked == metrics.pod_scheduling.decided == {}


def test_without_the_pod_metrics_nothing_is_kept_per_pod() -> None:
    simulation = Simulation()  # no metrics: the pod metrics controller is not run
    simulation.apply(load_objects(KWOK_NODE_CLASS, NODEPOOL, deployment_manifest(replicas=3)))
    simulation.run(5, until_steady=False)
    times = simulation.metrics.pod_scheduling
    assert times.acked == times.decided == times.schedulable == {}


def test_a_refresh_drops_each_pods_series_by_its_labels_not_by_a_scan_of_every_series(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A removal by partial labels walks every series; one per waiting pod made a refresh at
    # 10,000 pods quadratic (most of a core in karpy run), so the pass must not use it.
    metrics = Metrics()
    simulation = Simulation(metrics=metrics)
    simulation.apply(load_objects(KWOK_NODE_CLASS, NODEPOOL, deployment_manifest(replicas=3)))
    simulation.run(5, until_steady=False)
    scans: list[str] = []

    def counted(self: Gauge, **values: str) -> None:
        if self.name.startswith("karpenter_pods_"):
            scans.append(self.name)

    monkeypatch.setattr(Gauge, "remove_matching", counted)
    simulation.run(60, until_steady=False)  # bound, then Running: their series go
    ages_refreshed(simulation)
    assert all(pod.phase == "Running" for pod in simulation.pods())
    assert scans == []
    exposition = scrape(metrics)
    for pod in simulation.pods():
        assert of_pod(exposition, "karpenter_pods_unbound_time_seconds", pod.metadata.name) is None


def test_in_karpy_run_a_pod_change_writes_its_own_ages_and_leaves_the_others_to_the_resync() -> None:
    # A pass over every waiting pod on each change took half a core at 10,000 pods in karpy run.
    clock = VirtualClock()
    metrics = Metrics()
    controller = PodMetrics(clock, metrics, resync=POD_RESYNC)

    def created(name: str) -> Pod:
        pod = make_pod(name)
        return pod.with_changes(metadata=replace(pod.metadata, creation_timestamp=clock.now()))

    pods = [created(f"pod-{index}") for index in range(100)]
    asked = [key for pod in pods for key in controller._on_pod(None, pod)]
    assert asked == [WAITING_PODS_KEY]  # one pass for the lot, not one a pod
    # Each pod's series is there before any pass.
    assert of_pod(scrape(metrics), "karpenter_pods_unstarted_time_seconds", "pod-99") == 0
    clock.advance(3)
    assert controller.reconcile(WAITING_PODS_KEY) == POD_RESYNC
    clock.advance(1)
    bound = pods[0].with_changes(spec=replace(pods[0].spec, node_name="node-a"))
    assert list(controller._on_pod(pods[0], bound)) == []  # the resync is 4 s away
    exposition = scrape(metrics)
    assert of_pod(exposition, "karpenter_pods_unstarted_time_seconds", "pod-0") == 4
    assert (
        of_pod(exposition, "karpenter_pods_unbound_time_seconds", "pod-0", dynamic_resources="false") is None
    )
    assert of_pod(exposition, "karpenter_pods_unstarted_time_seconds", "pod-1") == 3  # as of the pass
    # A resync overdue (its queue emptied, say) is asked for again by the next change.
    clock.advance(2 * POD_RESYNC)
    assert list(controller._on_pod(pods[1], pods[1])) == [WAITING_PODS_KEY]
    # Without a resync (the simulator) every change asks for a pass, as the queue folds them.
    simulated = PodMetrics(clock, Metrics())
    assert [key for pod in pods[:3] for key in simulated._on_pod(None, pod)] == [WAITING_PODS_KEY] * 3
