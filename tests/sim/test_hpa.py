"""The HorizontalPodAutoscaler's arithmetic, against the Kubernetes documentation's worked cases.

The documentation's algorithm: desiredReplicas = ceil(currentReplicas ×
currentMetricValue / desiredMetricValue), no change within a 0.1 tolerance,
pods not yet ready counted as using nothing when scaling up, the largest
recommendation of the scale-down stabilization window, and policies that cap
each step.
"""

from __future__ import annotations

from karpy.api.hpa import (
    DEFAULT_SCALE_DOWN,
    DEFAULT_SCALE_UP,
    ResourceMetric,
    ScalingPolicy,
    ScalingRules,
)
from karpy.sim.hpa import (
    AutoscalerState,
    ScaleEvent,
    proposal_for_metric,
    rate_limited,
    stabilized,
    usage_ratio,
)


def test_the_ratio_of_current_to_desired_scales_the_replicas() -> None:
    # "if the current metric value is 200m, and the desired value is 100m, the number of
    # replicas will be doubled ... If the current value is instead 50m, you'll halve" it.
    assert proposal_for_metric(current_replicas=4, ready=4, not_ready=0, usage_ratio=200 / 100) == 8
    assert proposal_for_metric(current_replicas=4, ready=4, not_ready=0, usage_ratio=50 / 100) == 2
    # The product is rounded up: 3 pods at 1.5x their target need 4.5, so 5.
    assert proposal_for_metric(current_replicas=3, ready=3, not_ready=0, usage_ratio=1.5) == 5


def test_within_the_tolerance_nothing_changes() -> None:
    assert proposal_for_metric(current_replicas=10, ready=10, not_ready=0, usage_ratio=1.09) == 10
    assert proposal_for_metric(current_replicas=10, ready=10, not_ready=0, usage_ratio=0.91) == 10
    assert proposal_for_metric(current_replicas=10, ready=10, not_ready=0, usage_ratio=1.2) == 12


def test_utilization_is_usage_over_request_over_target() -> None:
    cpu_at_50 = ResourceMetric("cpu", average_utilization=50)
    # 6 cores over 4 ready pods requesting 1 core each: 150% used, 3x the 50% target.
    assert usage_ratio(cpu_at_50, total_demand=6.0, ready=4, request=1000) == 3.0
    per_pod_500m = ResourceMetric("cpu", average_value=500)
    assert usage_ratio(per_pod_500m, total_demand=6.0, ready=4, request=1000) == 3.0
    assert usage_ratio(cpu_at_50, total_demand=6.0, ready=4, request=0) is None


def test_pods_not_yet_ready_count_as_idle_when_scaling_up() -> None:
    # 10 ready pods at 1.2x: 12 would be asked for; counting the one not-ready pod at
    # zero usage, the ratio over 11 pods is 1.09, within tolerance: no scale-up.
    assert proposal_for_metric(current_replicas=11, ready=10, not_ready=1, usage_ratio=1.2) == 11
    # Counted as idle, 4 pods still booting turn a 1.3x ratio over 4 ready pods into 0.65
    # over 8: the direction reverses, so the replicas stay (no scale-down either).
    assert proposal_for_metric(current_replicas=8, ready=4, not_ready=4, usage_ratio=1.3) == 8
    # A large overload still scales up, damped: 3x over 2 ready + 2 booting is 1.5x over 4.
    assert proposal_for_metric(current_replicas=4, ready=2, not_ready=2, usage_ratio=3.0) == 6


def test_the_scale_down_window_holds_the_highest_recommendation() -> None:
    state = AutoscalerState(recommendations=[(0.0, 10)])
    up, down = DEFAULT_SCALE_UP, DEFAULT_SCALE_DOWN
    # Demand fell at 60 s: 5 replicas would do, but 10 was recommended within 300 s.
    assert stabilized(state, 60.0, current=10, proposal=5, up=up, down=down) == 10
    assert stabilized(state, 240.0, current=10, proposal=5, up=up, down=down) == 10
    # At 301 s the recommendation of 0 s has left the window; 60 s and 240 s said 5.
    assert stabilized(state, 301.0, current=10, proposal=5, up=up, down=down) == 5


def test_scale_up_is_not_stabilized_by_default() -> None:
    state = AutoscalerState(recommendations=[(0.0, 4)])
    assert stabilized(state, 15.0, current=4, proposal=9, up=DEFAULT_SCALE_UP, down=DEFAULT_SCALE_DOWN) == 9


def test_default_scale_up_policies_allow_the_larger_of_double_and_four_pods() -> None:
    state = AutoscalerState()
    up, down = DEFAULT_SCALE_UP, DEFAULT_SCALE_DOWN
    assert (
        rate_limited(state, 0.0, current=10, desired=100, min_replicas=1, max_replicas=200, up=up, down=down)
        == 20
    )
    assert (
        rate_limited(state, 0.0, current=2, desired=100, min_replicas=1, max_replicas=200, up=up, down=down)
        == 6
    )
    assert (
        rate_limited(state, 0.0, current=10, desired=100, min_replicas=1, max_replicas=15, up=up, down=down)
        == 15
    )


def test_a_policy_counts_the_changes_made_within_its_period() -> None:
    # The documentation's example: scale down at most 10% a minute.
    down = ScalingRules(300, "Max", (ScalingPolicy("Percent", 10, 60),))
    state = AutoscalerState()
    assert rate_limited(state, 0.0, 100, 10, 1, 200, DEFAULT_SCALE_UP, down) == 90
    # 30 s later 10 pods have gone within the minute: the period started at 100, so no more.
    state.events.append(ScaleEvent(0.0, -10))
    assert rate_limited(state, 30.0, 90, 10, 1, 200, DEFAULT_SCALE_UP, down) == 90
    # After the minute, another 10% of 90.
    assert rate_limited(state, 61.0, 90, 10, 1, 200, DEFAULT_SCALE_UP, down) == 81


def test_select_policy_min_and_disabled() -> None:
    up = ScalingRules(0, "Min", (ScalingPolicy("Percent", 100, 15), ScalingPolicy("Pods", 4, 15)))
    assert rate_limited(AutoscalerState(), 0.0, 10, 100, 1, 200, up, DEFAULT_SCALE_DOWN) == 14
    disabled = ScalingRules(300, "Disabled", ())
    assert rate_limited(AutoscalerState(), 0.0, 10, 2, 1, 200, DEFAULT_SCALE_UP, disabled) == 10
