"""``karpy simulate``: the real controllers, an in-memory cluster, virtual time.

The provisioning, NodeClaim lifecycle, disruption, termination, interruption and
NodePool status controllers are the very objects ``karpy run`` uses; only what they are wired to differs:
an :class:`~karpy.sim.store.InMemoryCluster` instead of an apiserver, a
:class:`~karpy.sim.cloud.SimulatedCloud` instead of EC2, a
:class:`~karpy.sim.clock.VirtualClock` instead of the wall clock, and
stand-ins for kube-scheduler, the kubelets and the workload controllers.

The loop: reconcile everything due now; if the cluster is steady, stop;
otherwise jump the clock to the next due timer.
Steady means every pod runs, finished, or was found unschedulable with a
reason, every NodeClaim is initialized, nothing is being deleted,
disruption has nothing due now or later, and no running pod finishes nor
CronJob fires before the run's end (what follows those is still to come).

It also means nothing the scenario scheduled is still ahead within the run:
no step, no interruption warning, and no start or end of a cloud window
(capacity failures, launch errors, registration failures). A cluster that
looks settled while spot is refused is settled only on the refusal: when
the window closes, spot is offered again and consolidation may move the
on-demand nodes it forced onto spot, so stopping before then would report a
fleet the run never ends with. A window boundary past the run's end, or an
open-ended window (no ``until``), changes nothing within the run and does
not hold it. For the same reason an offering the cloud refused (kept
unavailable for 3 minutes, as Karpenter's unavailable-offerings cache
keeps it) holds the run until it is offered again, unless a capacity
failure will still refuse it then. Each boundary within the run is also a timer
(:class:`CloudWindowTimer`), so the clock stops there and the loop looks
again at the cluster as the cloud then is, even when no controller has
anything due.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from karpy.api.core import POD_RUNNING, CronJob, Deployment, Node, Pod, ReplicaSet, StatefulSet
from karpy.api.cron import CronSchedule
from karpy.api.duration import format_duration
from karpy.api.manifest import LoadedObject
from karpy.api.nodeclaim import NodeClaim
from karpy.api.nodecost import node_cost
from karpy.api.nodepool import STATIC_TRANSITION_MESSAGE, NodePool, static_transition_problem
from karpy.api.taints import DISRUPTED_TAINT_KEY
from karpy.baselines.cluster_autoscaler import ClusterAutoscalerFlags
from karpy.cloud.provider import CloudProvider
from karpy.cloud.reservations import CAPACITY_BLOCK_EXPIRING_WINDOW
from karpy.controllers.cluster_autoscaler import ClusterAutoscaler
from karpy.controllers.core import core_controllers
from karpy.controllers.interruption import InterruptionController
from karpy.controllers.metering import MeteredCloudProvider
from karpy.controllers.provisioning import ProvisioningSettings
from karpy.disruption.consolidation import ConsolidationRules
from karpy.disruption.expiration import expires_at
from karpy.operator.cluster import NotFoundError
from karpy.operator.karpenter_metrics import Metrics
from karpy.operator.reads import object_key, object_kind, object_meta
from karpy.operator.runtime import Runtime, Watch
from karpy.sim.clock import VirtualClock
from karpy.sim.cloud import SimulatedCloud, SimulatedCloudSettings
from karpy.sim.hpa import HorizontalPodAutoscalerController
from karpy.sim.interruptions import SimulatedInterruptions
from karpy.sim.kubelet import KubeletSettings, SimulatedKubelet
from karpy.sim.node_failures import SimulatedNodeFailures
from karpy.sim.recorder import Recorder
from karpy.sim.scenario import Scenario, Step
from karpy.sim.scheduler import SimulatedKubeScheduler
from karpy.sim.store import AdmissionError, InMemoryCluster
from karpy.sim.workloads import SimulatedWorkloadControllers

log = logging.getLogger("karpy.sim")
INFINITY = float("inf")


@dataclass(slots=True)
class SimulationSettings:
    """The settings of :class:`Simulation`, one group per part (a Scenario's ``spec.settings`` fill them)."""

    provisioning: ProvisioningSettings = field(default_factory=ProvisioningSettings)
    """The provisioner's batching, and the per-node overhead cost nodes are priced with."""

    consolidation: ConsolidationRules = field(default_factory=ConsolidationRules)
    """The rules consolidation decides by, with what the feature gates switch (``consolidation_rules``)."""

    capacity_buffers: bool = False
    """The CapacityBuffer feature gate: the scenario's CapacityBuffers are resolved and their room kept."""
    static_capacity: bool = True
    """The StaticCapacity feature gate: static NodePools are kept at their replica count."""
    node_repair: bool = False
    """The NodeRepair feature gate: unhealthy nodes are repaired (:mod:`karpy.disruption.repair`)."""
    terminate_first_drift: bool = False
    """The TerminateFirstDrift feature gate: a drifted node no replacement can be staged for is deleted
    first (:mod:`karpy.disruption.terminate_first`)."""
    terminate_first_repair: bool = False
    """The TerminateFirstRepair feature gate: the same for an unhealthy node node repair replaces."""
    node_overlays: bool = False
    """The NodeOverlay feature gate: the scenario's NodeOverlays price and size nodes, the bill included."""

    cloud: SimulatedCloudSettings = field(default_factory=SimulatedCloudSettings)
    """The simulated cloud: its catalog, prices, delays and failures."""

    kubelet: KubeletSettings = field(default_factory=KubeletSettings)
    """The simulated kubelets: how long pods take to start and Jobs to finish."""

    autoscaler: str = "karpy"
    """Which autoscaler runs the cluster (:data:`AUTOSCALERS`): karpy (its provisioner and disruption
    controllers), or the Cluster Autoscaler baseline in their place (everything else the same)."""

    cluster_autoscaler: ClusterAutoscalerFlags = field(default_factory=ClusterAutoscalerFlags)
    """The Cluster Autoscaler baseline's flags (used only with ``autoscaler="cluster-autoscaler"``)."""


AUTOSCALERS = ("karpy", "cluster-autoscaler")


class ScenarioDriver:
    """Applies a scenario's steps at their times, through the same writer as everything else."""

    name = "sim.scenario"

    def __init__(self, simulation: Simulation, steps: list[Step]) -> None:
        self.simulation = simulation
        self.steps = steps
        self.done = 0
        self.start = simulation.clock.now()

    def watches(self) -> list[Watch]:
        return []

    def reconcile(self, key: str) -> float | None:
        step = self.steps[int(key)]
        self.simulation.perform(step)
        self.done += 1
        return None

    @property
    def finished(self) -> bool:
        return self.done == len(self.steps)

    @property
    def next_at(self) -> float:
        """When the next step is applied (steps are applied in the order of their times)."""
        return self.start + self.steps[self.done].at if not self.finished else INFINITY


class CloudWindowTimer:
    """Due at every start and end of the scenario's cloud windows; reconciling it does nothing.

    Its only effect is that the clock stops at each boundary and the steady
    check runs there (the controllers' own timers may all be later, or none).
    """

    name = "sim.cloud-windows"

    def watches(self) -> list[Watch]:
        return []

    def reconcile(self, key: str) -> float | None:
        return None


class Simulation:
    def __init__(
        self,
        settings: SimulationSettings | None = None,
        metrics: Metrics | None = None,
        *,
        start: float | None = None,
    ) -> None:
        self.settings = settings or SimulationSettings()
        # A run from a real cluster starts when the cluster was read, so its timestamps keep their meaning.
        self.clock = VirtualClock() if start is None else VirtualClock(start)
        self.cluster = InMemoryCluster(self.clock)
        self._pods_settled_answer: tuple[tuple[int, object, float], bool] | None = None
        self.runtime = Runtime(self.clock)
        self.recorder = Recorder(self.clock)
        self.cloud = SimulatedCloud(self.cluster, self.clock, self.settings.cloud)
        self.recorder.cloud = self.cloud
        self.cluster.subscribe(self.runtime.on_change)
        self.cluster.subscribe(self.recorder.on_change)
        # Karpenter's metrics are recorded only when the caller asks for them (to read them).
        self.metrics = metrics if metrics is not None else Metrics()

        def cloud_for(controller: str) -> CloudProvider:
            return (
                self.cloud if metrics is None else MeteredCloudProvider(self.cloud, self.metrics, controller)
            )

        # The controllers karpy run has, built by the same function (karpy.controllers.core). The
        # garbage collector is left out: nothing leaks here (karpy.run), and its periodic pass stops
        # the virtual clock where the disruption passes would wait (see run), which moves results,
        # not only reconcile counts (tests/data/scenarios/convergence/ice-fragments ends 7 s later).
        core = core_controllers(
            self.cluster,
            cloud_for,
            self.clock,
            provisioning=self.settings.provisioning,
            rules=self.settings.consolidation,
            metrics=self.metrics,
            garbage_collection=False,
            record_metrics=metrics is not None,
            capacity_buffers=self.settings.capacity_buffers,
            static_capacity=self.settings.static_capacity,
            node_repair=self.settings.node_repair,
            terminate_first_drift=self.settings.terminate_first_drift,
            terminate_first_repair=self.settings.terminate_first_repair,
            node_overlays=self.settings.node_overlays,
            periodic_metrics=False,
        )
        self.provisioner = core.provisioner
        self.provisioner.refusals.subscribe(self.runtime.on_change)
        if self.provisioner.buffers is not None:
            self.provisioner.buffers.subscribe(self.runtime.on_change)
        self.overlays = core.overlays
        if self.overlays is not None:
            self.overlays.subscribe(self.runtime.on_change)
            # The bill is what the overlays say an instance costs (a Savings Plan's price, say).
            self.recorder.price_of = self._overlaid_price
        # Every other controller of karpy run too is given the catalogs the overlays priced.
        controller_cloud = core.cloud_for
        self.disruption = core.disruption
        self.kubelet = SimulatedKubelet(
            self.cluster, self.cloud, self.clock, self.runtime, self.settings.kubelet
        )
        if self.overlays is not None:
            # A node reports the extended resources overlays say its type has (its device plugins').
            self.kubelet.extended_resources = self.overlays.extended_capacity
        # The cloud's warnings (a scenario's cloud.interruptions), and the controller karpy run has for them.
        self.interruptions = SimulatedInterruptions(
            self.cluster, self.cloud, self.clock, self.runtime, self.recorder.note
        )
        # The cloud's node failures (a scenario's cloud.nodeFailures), for node repair to find.
        self.node_failures = SimulatedNodeFailures(
            self.cluster, self.cloud, self.clock, self.runtime, self.recorder.note
        )
        self.hpa = HorizontalPodAutoscalerController(
            self.cluster, self.clock, self.recorder.note, self.recorder.workload_sample
        )
        # With the Cluster Autoscaler baseline, it takes the place of karpy's provisioner and
        # disruption controllers (built all the same, unregistered, so views of them read empty).
        self.cluster_autoscaler: ClusterAutoscaler | None = None
        deciders = core.deciders
        if self.settings.autoscaler == "cluster-autoscaler":
            self.cluster_autoscaler = ClusterAutoscaler(
                self.cluster,
                controller_cloud(ClusterAutoscaler.name),
                self.clock,
                flags=self.settings.cluster_autoscaler,
                note=self.recorder.note,
            )
            deciders = (self.cluster_autoscaler,)
            self.runtime.enqueue(ClusterAutoscaler.name, "scan", 0.0)
        elif self.settings.autoscaler != "karpy":
            raise ValueError(f"autoscaler: one of {', '.join(AUTOSCALERS)}, not {self.settings.autoscaler!r}")
        for controller in (
            *deciders,
            *core.rest,
            # What the simulated cloud and cluster add: the interruption warnings (and the controller
            # that acts on them, as karpy run's AWS provider has), kube-scheduler, the kubelets, the
            # workload controllers and the HPA.
            InterruptionController(
                self.cluster, controller_cloud(InterruptionController.name), self.clock, metrics=self.metrics
            ),
            self.interruptions,
            self.node_failures,
            SimulatedKubeScheduler(self.cluster, self.settings.provisioning.scheduler_config),
            self.kubelet,
            SimulatedWorkloadControllers(self.cluster, self.clock),
            self.hpa,
            CloudWindowTimer(),
        ):
            self.runtime.register(controller)
        if metrics is not None:
            self.metrics.cluster_state(True, self.clock.now())  # the in-memory store is its own cache
        self.driver: ScenarioDriver | None = None
        # Objects the API server refused to create when applied (a pod naming a missing PriorityClass):
        # (when, "Kind namespace/name: why").
        self.refused: list[tuple[float, str]] = []
        # The controllers whose passes, while the cluster is settled, find nothing to do.
        self._idle_pollers = {self.disruption.name, ClusterAutoscaler.name}
        # The most NodeClaims of each NodePool disrupted at one moment (deleting,
        # or tainted for a disruption in flight): what budgets must bound.
        self.disruption_peak: dict[str, int] = {}
        # NodeClaims being disrupted now, with their NodePool; and each Node's NodeClaim.
        self._disrupted: dict[str, str] = {}
        self._claim_of_node: dict[str, str] = {}
        self.cluster.subscribe(self._track_disruption)
        self.end = self.clock.now()
        # Called every turn of the loop (karpy.sim.budget.RunWatch): may stop the run by raising.
        self.watch: Callable[[], None] | None = None

    def _overlaid_price(
        self, claim: NodeClaim, instance_type: str, zone: str, capacity_type: str, price: float
    ) -> float:
        """What the NodeOverlays say an instance launched for ``claim`` costs an hour."""
        if self.overlays is None:
            return price
        pool = claim.nodepool
        if not pool and self.cluster_autoscaler is not None:
            pool = self.cluster_autoscaler.nodepool_of(claim.name)
        return self.overlays.price(pool, instance_type, zone, capacity_type, price)

    def _track_disruption(self, kind: str, old: object | None, new: object | None) -> None:
        """Keep ``disruption_peak`` up to date as NodeClaims and Nodes change.

        A change to a NodeClaim can change only whether that NodeClaim is
        being disrupted, and a change to a Node only whether the NodeClaim
        it belongs to is: so only that one is looked at, not every NodeClaim
        on every change (which made building a 10,000-pod cluster quadratic).
        """
        claim: NodeClaim | None = None
        if kind == "NodeClaim":
            gone = old if new is None else None
            if isinstance(gone, NodeClaim):
                self._disrupted.pop(gone.name, None)
                return
            if not isinstance(new, NodeClaim):
                return
            claim = new
            if claim.status.node_name:
                self._claim_of_node[claim.status.node_name] = claim.name
        elif kind == "Node":
            changed = new if new is not None else old
            if not isinstance(changed, Node):
                return
            name = self._claim_of_node.get(changed.name)
            claim = self.cluster.nodeclaim(name) if name is not None else None
            if claim is None or claim.status.node_name != changed.name:
                return
        else:
            return
        node = self.cluster.node(claim.status.node_name) if claim.status.node_name else None
        tainted = node is not None and any(t.key == DISRUPTED_TAINT_KEY for t in node.taints)
        if claim.metadata.deleting or tainted:
            self._disrupted[claim.name] = claim.nodepool
        else:
            self._disrupted.pop(claim.name, None)
        counts = Counter(self._disrupted.values())
        for pool, count in counts.items():
            self.disruption_peak[pool] = max(self.disruption_peak.get(pool, 0), count)

    # -- writes from outside the controllers --------------------------------

    def apply(self, loaded: Iterable[LoadedObject]) -> None:
        for item in loaded:
            obj = item.obj
            kind = object_kind(obj)
            current = self.cluster.get(kind, object_key(obj))
            if current is None:
                try:
                    self.cluster.create(obj)
                except AdmissionError as error:
                    self.recorder.note(f"refused {kind} {object_key(obj)}: {error}")
                    self.refused.append((self.clock.now(), f"{kind} {object_key(obj)}: {error}"))
                    continue
            else:
                problem = (
                    static_transition_problem(current, obj)
                    if isinstance(current, NodePool) and isinstance(obj, NodePool)
                    else None
                )
                if problem is not None:  # the CRD's transition rule, as the API server applies it
                    self.recorder.note(f"refused {kind} {object_key(obj)}: {problem}")
                    self.refused.append((self.clock.now(), f"{kind} {object_key(obj)}: {problem}"))
                    continue
                meta = object_meta(obj).with_changes(resource_version=object_meta(current).resource_version)
                changes: dict[str, object] = {"metadata": meta}
                if hasattr(current, "status"):
                    changes["status"] = current.status  # as kubectl apply, the spec only
                self.cluster.update(dataclasses.replace(obj, **changes))  # type: ignore[type-var]
            self.recorder.note(f"applied {kind} {object_key(obj)}")

    def perform(self, step: Step) -> None:
        if step.action == "apply":
            self.apply(step.objects.objects)
            return
        key = f"{step.namespace}/{step.name}" if step.namespace else step.name
        current = self.cluster.get(step.kind, key)
        if current is None:
            self.recorder.note(f"step skipped: {step.kind} {key} not found")
            return
        if step.action == "delete":
            try:
                self.cluster.delete(current)
            except NotFoundError:
                pass
            self.recorder.note(f"deleted {step.kind} {key}")
        elif step.action == "scale" and isinstance(current, Deployment | ReplicaSet | StatefulSet):
            self.cluster.update(dataclasses.replace(current, replicas=step.replicas))
            self.recorder.note(f"scaled {step.kind} {key} to {step.replicas} replicas")
        elif step.action == "scale" and isinstance(current, NodePool):
            if not current.is_static:
                # `kubectl scale` would set spec.replicas on a dynamic pool: the transition rule refuses it.
                self.recorder.note(f"refused scaling {step.kind} {key}: {STATIC_TRANSITION_MESSAGE}")
                self.refused.append((self.clock.now(), f"{step.kind} {key}: {STATIC_TRANSITION_MESSAGE}"))
                return
            self.cluster.update(dataclasses.replace(current, replicas=step.replicas))
            self.recorder.note(f"scaled {step.kind} {key} to {step.replicas} replicas")

    # -- the loop ------------------------------------------------------------

    def steady(self) -> bool:
        return self.settled_until() == INFINITY

    def settled_until(self) -> float | None:
        """None while something is under way; else when the next scheduled thing happens.

        Settled is steady but for what is scheduled within the run: a step, an
        interruption warning, a cloud window's start or end, an offering
        offered again, a CronJob's fire, a NodeClaim's expiry. Until the
        first of those (INFINITY: none) nothing changes, so the loop jumps
        there instead of stepping through the controllers' polls (the
        disruption pass's every 10 s): idle cluster time costs nothing.
        """
        ahead: list[float] = []
        if self.driver is not None:
            ahead.append(self.driver.next_at)
        warning = self.interruptions.next_warning_at()
        if warning is None:
            return None  # an instance warned of is still to be reclaimed
        ahead.append(warning)
        ahead.append(self.node_failures.next_failure_at())
        now = self.clock.now()
        ahead += (moment for moment in self.cloud_window_boundaries() if now < moment <= self.end)
        if self.hpa.holds_run(self.end):
            return None  # demand still changes, or an HPA still wants other replicas
        available_again = self.offering_available_again()
        if available_again is not None:
            # An offering refused earlier is offered again within the run: decisions may change then.
            self.runtime.enqueue(CloudWindowTimer.name, "offerings", available_again - now)
            ahead.append(available_again)
        if not self._pods_settled():
            return None
        if self.provisioner.buffers is not None and self.provisioner.batch_open:
            return None  # a pass is due for the CapacityBuffers' room, which no pending pod stands for
        for cronjob in self.cluster.objects("CronJob"):
            if isinstance(cronjob, CronJob) and not cronjob.suspend and not cronjob.metadata.deleting:
                since = cronjob.status.last_schedule_time or cronjob.metadata.creation_timestamp or 0.0
                due = CronSchedule(cronjob.schedule).next_fire_after(since)
                if due is not None and due <= self.end:
                    ahead.append(due)
        for nodepool in self.cluster.nodepools():
            for budget in nodepool.disruption.budgets:
                if budget.schedule is not None and budget.duration is not None:
                    # A budget's window opening or closing may let disruption act, or stop it.
                    schedule = CronSchedule(budget.schedule)
                    opened = schedule.last_fire_within(now, budget.duration)
                    change = opened + budget.duration if opened is not None else schedule.next_fire_after(now)
                    if change is not None and change <= self.end:
                        ahead.append(change)
        for nodeclaim in self.cluster.nodeclaims():
            if nodeclaim.metadata.deleting or not nodeclaim.initialized:
                return None
            deadline = expires_at(nodeclaim)
            if deadline is not None and deadline <= self.end:
                ahead.append(deadline)  # it expires within the run: that is still to come
        if self.cluster_autoscaler is not None:
            if self.cluster_autoscaler.has_work():
                return None
        elif self.disruption.has_work():
            return None
        return min(ahead, default=INFINITY)

    def _pods_settled(self) -> bool:
        """Every pod running (and not finishing within the run), done, or known unschedulable.

        Asked after every round of reconciles; the answer is kept while the store, the
        unschedulable pods and the end of the run stay the same, so a quiet round does not
        read every pod of a large cluster again.
        """
        unschedulable = (
            self.cluster_autoscaler.unschedulable
            if self.cluster_autoscaler is not None
            else self.provisioner.last.unschedulable
        )
        inputs = (self.cluster.changes, unschedulable, self.end)
        kept = self._pods_settled_answer
        if (
            kept is not None
            and kept[0][0] == inputs[0]
            and kept[0][1] is inputs[1]
            and kept[0][2] == inputs[2]
        ):
            return kept[1]
        settled = True
        for pod in self.cluster.pods():
            if pod.is_terminal or (pod.is_daemonset_pod and pod.phase == POD_RUNNING):
                continue
            if pod.metadata.deleting or (pod.phase != POD_RUNNING and pod.key not in unschedulable):
                settled = False
                break
            finish_at = self.kubelet.finishes_at(pod)
            if finish_at is not None and finish_at <= self.end:
                settled = False
                break
        self._pods_settled_answer = (inputs, settled)
        return settled

    def cloud_window_boundaries(self) -> list[float]:
        """Every start and end of the cloud's windows, in cluster time (infinite ends left out)."""
        settings = self.cloud.settings
        windows: list[tuple[float, float]] = [
            *((failure.start, failure.end) for failure in settings.capacity_failures),
            *((error.start, error.end) for error in settings.launch_errors),
            *((failure.start, failure.end) for failure in settings.registration_failures),
            # A reservation's end, and a Capacity Block's expiring window: its offerings change then.
            *(
                (held.reservation.end_time - CAPACITY_BLOCK_EXPIRING_WINDOW, held.reservation.end_time)
                for held in settings.capacity_reservations
                if held.reservation.end_time is not None
            ),
        ]
        return sorted(
            {self.cloud.start + moment for window in windows for moment in window if moment != float("inf")}
        )

    def cloud_window_ahead(self) -> bool:
        """Whether a cloud window starts or ends after now and by the run's end."""
        now = self.clock.now()
        return any(now < moment <= self.end for moment in self.cloud_window_boundaries())

    def offering_available_again(self) -> float | None:
        """The first moment within the run an offering marked unavailable can be launched again.

        An offering whose mark expires while a capacity failure still refuses
        it is left out: it would only be refused and marked again, which
        changes no decision (else a refusal without end would hold every
        run to its time limit).
        """
        moments = [
            until
            for (instance_type, zone, capacity_type), until in self.cloud.unavailable.expiries().items()
            if until <= self.end
            and not any(
                failure.matches(instance_type, zone, capacity_type, until - self.cloud.start)
                for failure in self.cloud.settings.capacity_failures
            )
        ]
        return min(moments, default=None)

    def run_scenario(self, scenario: Scenario) -> None:
        if scenario.registration_delay is not None:
            self.cloud.settings.registration_delay = scenario.registration_delay
        if scenario.kwok_instance_types is not None:
            self.cloud.settings.kwok_instance_types = scenario.kwok_instance_types
        self.cloud.settings.capacity_failures.extend(scenario.capacity_failures)
        self.cloud.settings.launch_errors.extend(scenario.launch_errors)
        self.cloud.settings.registration_failures.extend(scenario.registration_failures)
        self.cloud.settings.interruptions.extend(scenario.interruptions)
        self.interruptions.schedule()
        self.cloud.settings.node_failures.extend(scenario.node_failures)
        self.cloud.settings.capacity_reservations.extend(scenario.capacity_reservations)
        self.node_failures.schedule()
        now = self.clock.now()
        for moment in self.cloud_window_boundaries():
            if moment > now:
                self.runtime.enqueue(CloudWindowTimer.name, f"{moment}", moment - now)
        self.hpa.loads, self.hpa.start = {load.key: load for load in scenario.loads}, now
        if scenario.job_duration is not None:
            self.kubelet.settings.job_duration = scenario.job_duration
        if self.cluster_autoscaler is not None:
            spec = scenario.cluster_autoscaler
            if spec is not None:
                self.cluster_autoscaler.configure(spec.flags, spec.node_groups)
        self.driver = ScenarioDriver(self, scenario.steps)
        self.runtime.register(self.driver)
        for index, step in enumerate(scenario.steps):
            self.runtime.enqueue(self.driver.name, str(index), step.at)
        self.run(scenario.duration, until_steady=scenario.run_until_steady)

    def run(self, duration: float, *, until_steady: bool = True) -> None:
        """Run for at most ``duration`` seconds of cluster time from now."""
        end = self.clock.now() + duration
        self.end = end
        while True:
            self.runtime.run_due()
            if self.watch is not None:
                self.watch()
            settled_until = self.settled_until()
            if until_steady and settled_until == INFINITY:
                break
            if settled_until is not None:
                # Nothing changes before then: the disruption passes in between would decide what
                # this one did (settled says so), so they wait; every other controller's timer
                # still stops the clock, and what is overdue runs there.
                others = self.runtime.next_due_except(self._idle_pollers)
                target = min(settled_until, end, INFINITY if others is None else others)
                if target > self.clock.now():
                    self.clock.advance_to(target)
                    continue
            due = self.runtime.next_due()
            if due is None:
                break  # nothing will ever happen again
            if due > end:
                self.clock.advance_to(max(end, self.clock.now()))
                break
            self.clock.advance_to(due)
        self.recorder.finish(self.cluster)

    # -- views ---------------------------------------------------------------

    def progress_line(self) -> str:
        """How far the run is, in a few words (for a long run's progress on the side)."""
        return (
            f"cluster time {format_duration(self.clock.elapsed)} of"
            f" {format_duration(self.end - self.clock.start)}, {self.cluster.count('Pod'):,} pods,"
            f" {self.cluster.count('Node'):,} nodes"
        )

    def nodeclaims(self) -> list[NodeClaim]:
        return sorted(self.cluster.nodeclaims(), key=lambda claim: claim.name)

    def node_cost(self, nodepool: str) -> float:
        """$/h a node of ``nodepool`` costs beyond its instance, as the controllers price it (0: no pool)."""
        pool = self.cluster.get("NodePool", nodepool)
        if not isinstance(pool, NodePool):
            return 0.0
        ref = pool.template.node_class_ref
        node_class = self.cluster.node_class(ref.group, ref.kind, ref.name)
        return node_cost(node_class, self.settings.provisioning.node_overhead_cost).total

    def pods(self) -> list[Pod]:
        return sorted(self.cluster.pods(), key=lambda pod: pod.key)
