"""The HorizontalPodAutoscaler controller, as kube-controller-manager runs it, in virtual time.

Every 15 s (``--horizontal-pod-autoscaler-sync-period``) each HPA reads its
target's pods and the load model's demand, and writes the target's
``spec.replicas``, as the real controller writes the scale subresource; the
workload controllers create or remove pods, and karpy provisions for the ones
left pending. The arithmetic is the one the Kubernetes documentation gives
(and kube-controller-manager's replica calculator implements):

1. **Per metric.** Ready pods (Running, not being deleted) have metrics: each
   uses ``demand / ready pods``. The usage ratio is the pods' mean usage over
   the target (mean usage over mean request for ``Utilization``, over the
   value for ``AverageValue``). With no pod not yet ready, a ratio within the
   tolerance (0.1) of 1 keeps the current replicas; otherwise the proposal is
   ``ceil(ratio × ready pods)``. Pods not yet ready (in the simulator: not
   yet Running) are set aside; when the ratio asks to scale up
   they count as using nothing, which damps the step, and a scale-up the
   recomputed ratio no longer asks for (within tolerance, or below 1) keeps
   the current replicas. Pods being deleted and finished pods are ignored.
   Without any ready pod there are no metrics and the HPA does nothing.
2. **Across metrics** the largest proposal wins; a metric that cannot be
   computed (no request for a Utilization target, no demand for the resource)
   is left out.
3. **Bounds.** A target above ``maxReplicas`` or below ``minReplicas`` is
   brought within them with no metric read; one at 0 replicas is left alone
   (autoscaling is off while a workload is scaled to zero).
4. **Stabilization.** Each sync's proposal is remembered with its time. The
   result may not go below the largest proposal of the scale-down window
   (300 s by default) nor above the smallest of the scale-up window (0 s), so
   a dip in demand shorter than the window scales nothing down. As the
   controller does, a new HPA's window starts with the current replicas.
5. **Rate.** Each policy limits the change over its period, counted from the
   replicas the target had at the period's start (current replicas minus the
   changes the HPA made within the period): ``Pods`` adds or removes at most
   ``value`` pods, ``Percent`` at most ``value``% (rounded up for scale-up,
   down for scale-down); ``selectPolicy`` Max takes the policy allowing the
   most change, Min the least, Disabled forbids the direction.

Shortcuts, and why they are safe: usage is spread evenly, so each pod's
request is the template's and the mean over pods is one division; the pods
of all targets are indexed once per instant of virtual time, not per HPA,
since every HPA created at the same moment syncs at the same moments. An HPA
whose target has no load model keeps the target's replicas and says so once
in the run's notes, rather than reading zero usage and scaling to the floor.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from karpy.api.admission import Admission, AdmissionRefusedError
from karpy.api.core import POD_RUNNING, Deployment, Pod, ReplicaSet, StatefulSet
from karpy.api.hpa import (
    POLICY_PODS,
    SELECT_DISABLED,
    SELECT_MIN,
    HorizontalPodAutoscaler,
    ResourceMetric,
    ScalingRules,
)
from karpy.api.quantity import ResourceAmounts
from karpy.operator.cluster import Clock
from karpy.operator.runtime import Watch
from karpy.sim.load import GIB, WorkloadLoad
from karpy.sim.store import InMemoryCluster

SYNC_PERIOD = 15.0
TOLERANCE = 0.1
HPA_KIND = "HorizontalPodAutoscaler"


def proposal_for_metric(
    current_replicas: int, ready: int, not_ready: int, usage_ratio: float, tolerance: float = TOLERANCE
) -> int:
    """Replicas one metric asks for; ``usage_ratio`` is the ready pods' mean usage over the target.

    ``ready`` must be positive (without ready pods there is no metric).
    """
    if not_ready == 0:
        if abs(1.0 - usage_ratio) <= tolerance:
            return current_replicas
        return math.ceil(usage_ratio * ready)
    new_ratio = usage_ratio
    counted = ready
    if usage_ratio > 1.0:
        # Pods not yet ready count as using nothing: the scale-up is damped.
        new_ratio = usage_ratio * ready / (ready + not_ready)
        counted = ready + not_ready
    if (
        abs(1.0 - new_ratio) <= tolerance
        or (usage_ratio < 1.0 < new_ratio)
        or (usage_ratio > 1.0 > new_ratio)
    ):
        return current_replicas
    proposal = math.ceil(new_ratio * counted)
    if (new_ratio < 1.0 and proposal > current_replicas) or (new_ratio > 1.0 and proposal < current_replicas):
        return current_replicas
    return proposal


def usage_ratio(metric: ResourceMetric, total_demand: float, ready: int, request: int) -> float | None:
    """The ready pods' mean usage over the metric's target, or None if it cannot be computed.

    ``total_demand`` is in cores for cpu and GiB for memory; ``request`` is a
    pod's request in millicores or bytes.
    """
    per_pod = total_demand / ready * (1000.0 if metric.resource == "cpu" else GIB)
    if metric.average_utilization is not None:
        if request <= 0:
            return None
        return (per_pod / request * 100.0) / metric.average_utilization
    assert metric.average_value is not None
    return per_pod / metric.average_value


@dataclass(slots=True)
class ScaleEvent:
    time: float
    change: int  # replicas added (positive) or removed (negative)


@dataclass(slots=True)
class AutoscalerState:
    """What one HPA remembers between syncs, as the controller keeps it in memory."""

    recommendations: list[tuple[float, int]] = field(default_factory=list)
    events: list[ScaleEvent] = field(default_factory=list)
    proposal: int | None = None  # the last sync's proposal, bounded by min and max


def stabilized(
    state: AutoscalerState, now: float, current: int, proposal: int, up: ScalingRules, down: ScalingRules
) -> int:
    """``proposal`` kept within the scale-up window's smallest and the scale-down window's largest."""
    up_cutoff = now - up.stabilization_window_seconds
    down_cutoff = now - down.stabilization_window_seconds
    up_recommendation = proposal
    down_recommendation = proposal
    for time, recommendation in state.recommendations:
        if time > up_cutoff:
            up_recommendation = min(up_recommendation, recommendation)
        if time > down_cutoff:
            down_recommendation = max(down_recommendation, recommendation)
    oldest = now - max(up.stabilization_window_seconds, down.stabilization_window_seconds)
    state.recommendations = [(t, r) for t, r in state.recommendations if t > oldest]
    state.recommendations.append((now, proposal))
    result = max(current, up_recommendation)
    return min(result, down_recommendation)


def _changed_within(events: Iterable[ScaleEvent], now: float, period: int) -> tuple[int, int]:
    """Replicas added and removed by scale events within the last ``period`` seconds."""
    added = removed = 0
    for event in events:
        if event.time > now - period:
            if event.change > 0:
                added += event.change
            else:
                removed -= event.change
    return added, removed


def rate_limited(
    state: AutoscalerState,
    now: float,
    current: int,
    desired: int,
    min_replicas: int,
    max_replicas: int,
    up: ScalingRules,
    down: ScalingRules,
) -> int:
    """``desired`` within the scaling policies' limits and the HPA's bounds."""
    if desired > current:
        if up.select_policy == SELECT_DISABLED:
            return current
        choose: Callable[[int, int], int] = min if up.select_policy == SELECT_MIN else max
        limit: int | None = None
        for policy in up.policies:
            added, removed = _changed_within(state.events, now, policy.period_seconds)
            start = current - added + removed
            allowed = (
                start + policy.value
                if policy.type == POLICY_PODS
                else math.ceil(start * (1.0 + policy.value / 100.0))
            )
            limit = allowed if limit is None else choose(limit, allowed)
        ceiling = min(max_replicas, max(limit if limit is not None else current, current))
        return min(desired, ceiling)
    if desired < current:
        if down.select_policy == SELECT_DISABLED:
            return current
        choose = max if down.select_policy == SELECT_MIN else min
        limit = None
        for policy in down.policies:
            added, removed = _changed_within(state.events, now, policy.period_seconds)
            start = current + removed - added
            allowed = (
                start - policy.value
                if policy.type == POLICY_PODS
                else math.floor(start * (1.0 - policy.value / 100.0))
            )
            limit = allowed if limit is None else choose(limit, allowed)
        floor = max(min_replicas, min(limit if limit is not None else current, current))
        return max(desired, floor)
    return desired


@dataclass(frozen=True, slots=True)
class WorkloadSample:
    """One sync of one HPA: what a report plots as replicas, desired replicas and demand."""

    time: float
    replicas: int  # the target's spec.replicas before the sync wrote
    ready: int
    desired: int  # what the sync wrote (or kept)
    cpu: float | None  # demand, cores
    memory: float | None  # demand, GiB


class HorizontalPodAutoscalerController:
    """Syncs every HPA every :data:`SYNC_PERIOD` seconds; see the module docstring."""

    name = "sim.hpa"

    def __init__(
        self,
        cluster: InMemoryCluster,
        clock: Clock,
        note: Callable[[str], None],
        record: Callable[[str, WorkloadSample], None],
    ) -> None:
        self.cluster = cluster
        self.clock = clock
        self.note = note
        self.record = record
        self.loads: dict[str, WorkloadLoad] = {}  # by kind/namespace/name
        # The moment load models count from (a Scenario's time zero).
        self.start = clock.now()
        self.states: dict[str, AutoscalerState] = {}
        self._noted: set[str] = set()
        self._index_time: float | None = None
        self._pods_by_owner: dict[str, list[Pod]] = {}

    def watches(self) -> list[Watch]:
        def keys(old: object | None, new: object | None) -> Iterable[str]:
            changed = new if new is not None else old
            return [changed.key] if isinstance(changed, HorizontalPodAutoscaler) else []

        return [Watch(HPA_KIND, keys)]

    def _note_once(self, key: str, message: str) -> None:
        if key not in self._noted:
            self._noted.add(key)
            self.note(message)

    def _pods_of(self, owner_uid: str) -> list[Pod]:
        now = self.clock.now()
        if self._index_time != now:
            self._index_time = now
            index: dict[str, list[Pod]] = {}
            for pod in self.cluster.pods():
                controller = pod.metadata.controller
                if controller is not None:
                    index.setdefault(controller.uid, []).append(pod)
            self._pods_by_owner = index
        return self._pods_by_owner.get(owner_uid, [])

    def _target_pods(self, target: Deployment | StatefulSet) -> list[Pod]:
        if isinstance(target, StatefulSet):
            return self._pods_of(target.metadata.uid)
        pods: list[Pod] = []
        for replicaset in self.cluster.objects("ReplicaSet"):
            controller = replicaset.metadata.controller if isinstance(replicaset, ReplicaSet) else None
            if controller is not None and controller.uid == target.metadata.uid:
                pods.extend(self._pods_of(replicaset.metadata.uid))
        return pods

    def holds_run(self, end: float) -> bool:
        """Whether an HPA may still change replicas within the run (so the cluster is not steady)."""
        now = self.clock.now()
        for hpa in self.cluster.objects(HPA_KIND):
            if not isinstance(hpa, HorizontalPodAutoscaler) or hpa.metadata.deleting:
                continue
            load = self.loads.get(f"{hpa.target_kind}/{hpa.target_key}")
            if load is None:
                continue
            if now < end and any(demand.changes_after(now - self.start) for demand in load.demands.values()):
                return True
            target = self.cluster.get(hpa.target_kind, hpa.target_key)
            state = self.states.get(hpa.key)
            if target is None or state is None or state.proposal is None:
                continue
            if state.proposal != target.replicas:
                return True
        return False

    def reconcile(self, key: str) -> float | None:
        hpa = self.cluster.get(HPA_KIND, key)
        if not isinstance(hpa, HorizontalPodAutoscaler) or hpa.metadata.deleting:
            self.states.pop(key, None)
            return None
        target = self.cluster.get(hpa.target_kind, hpa.target_key)
        if not isinstance(target, Deployment | StatefulSet):
            self._note_once(f"target:{key}", f"HPA {key}: {hpa.target_kind} {hpa.target_key} not found")
            return SYNC_PERIOD
        for metric_type in hpa.unsimulated_metrics:
            self._note_once(
                f"type:{key}:{metric_type}", f"HPA {key}: {metric_type} metrics not simulated; ignored"
            )
        now = self.clock.now()
        current = target.replicas
        load = self.loads.get(f"{hpa.target_kind}/{hpa.target_key}")
        elapsed = now - self.start
        cpu = load.demands["cpu"].at(elapsed) if load is not None and "cpu" in load.demands else None
        memory = load.demands["memory"].at(elapsed) if load is not None and "memory" in load.demands else None
        pods = self._target_pods(target)
        ready = sum(1 for pod in pods if pod.phase == POD_RUNNING and not pod.metadata.deleting)
        not_ready = sum(
            1
            for pod in pods
            if pod.phase != POD_RUNNING and not pod.is_terminal and not pod.metadata.deleting
        )
        state = self.states.setdefault(key, AutoscalerState())
        if not state.recommendations and hpa.scale_down.stabilization_window_seconds > 0:
            state.recommendations.append((now, current))  # a new HPA's window starts at the current replicas
        desired = current
        if current == 0:
            pass  # scaled to zero: autoscaling is off
        elif current > hpa.max_replicas:
            desired = hpa.max_replicas
        elif current < hpa.min_replicas:
            desired = hpa.min_replicas
        elif load is None:
            self._note_once(
                f"load:{key}",
                f"HPA {key}: no load for {hpa.target_kind} {hpa.target_key} in the Scenario; replicas kept",
            )
        elif ready > 0:
            proposals = self._proposals(hpa, target, current, ready, not_ready, cpu, memory)
            if proposals:
                proposal = min(max(*proposals, hpa.min_replicas), hpa.max_replicas)
                state.proposal = proposal
                desired = stabilized(state, now, current, proposal, hpa.scale_up, hpa.scale_down)
                desired = rate_limited(
                    state,
                    now,
                    current,
                    desired,
                    hpa.min_replicas,
                    hpa.max_replicas,
                    hpa.scale_up,
                    hpa.scale_down,
                )
        self.record(
            f"{hpa.target_kind}/{hpa.target_key}", WorkloadSample(now, current, ready, desired, cpu, memory)
        )
        if desired != current:
            longest = max(
                (
                    policy.period_seconds
                    for rules in (hpa.scale_up, hpa.scale_down)
                    for policy in rules.policies
                ),
                default=0,
            )
            state.events = [event for event in state.events if event.time > now - longest]
            state.events.append(ScaleEvent(now, desired - current))
            self.cluster.update(dataclasses.replace(target, replicas=desired))
            self.note(
                f"HPA {key}: scaled {hpa.target_kind} {hpa.target_key} from {current} to {desired} replicas"
            )
        return SYNC_PERIOD

    def _pod_requests(self, target: Deployment | StatefulSet) -> ResourceAmounts:
        """The requests of the target's pods once admitted (LimitRange defaults too)."""
        admission = Admission.of(self.cluster.limit_ranges(), self.cluster.runtime_classes())
        try:
            return admission.spec(target.template.spec, target.metadata.namespace).requests
        except AdmissionRefusedError:
            return target.template.spec.requests

    def _proposals(
        self,
        hpa: HorizontalPodAutoscaler,
        target: Deployment | StatefulSet,
        current: int,
        ready: int,
        not_ready: int,
        cpu: float | None,
        memory: float | None,
    ) -> list[int]:
        proposals: list[int] = []
        for metric in hpa.metrics:
            demand = cpu if metric.resource == "cpu" else memory
            if demand is None:
                self._note_once(
                    f"demand:{hpa.key}:{metric.resource}",
                    f"HPA {hpa.key}: no {metric.resource} load for"
                    f" {hpa.target_kind} {hpa.target_key}; metric ignored",
                )
                continue
            request = self._pod_requests(target).get(metric.resource, 0)
            ratio = usage_ratio(metric, demand, ready, request)
            if ratio is None:
                self._note_once(
                    f"request:{hpa.key}:{metric.resource}",
                    f"HPA {hpa.key}: pods request no {metric.resource};"
                    " a Utilization target cannot be computed",
                )
                continue
            proposals.append(proposal_for_metric(current, ready, not_ready, ratio))
        return proposals
