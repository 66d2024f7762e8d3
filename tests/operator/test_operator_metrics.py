"""controller-runtime's work queue metrics and operatorpkg's status condition metrics.

The declarations are checked against the Go sources Karpenter v1.15 builds
with (controller-runtime v0.24.1, the operatorpkg commit its go.mod pins, and
Karpenter's own registration of the status controllers), read from the Go
module cache: names, types, help texts and label names. Then what they count:
a key queued, run and requeued in the Runtime, a condition that moves.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest
from tests.prometheus_text import Exposition, parse
from tests.support import KWOK_NODE_CLASS, deployment_manifest, kwok_nodepool, load_objects

from karpy.controllers.metering import StatusConditionMetricsController
from karpy.operator.karpenter_metrics import Metrics
from karpy.operator.operator_metrics import ObservedCondition, StatusRecorder
from karpy.operator.runtime import Runtime, Watch
from karpy.sim.clock import VirtualClock
from karpy.sim.simulation import Simulation, SimulationSettings

GO_MODULES = Path.home() / "go/pkg/mod"
CONTROLLER_RUNTIME = GO_MODULES / "sigs.k8s.io/controller-runtime@v0.24.1"
KARPENTER = GO_MODULES / "sigs.k8s.io/karpenter@v1.15.0"
KARPENTER_AWS = GO_MODULES / "github.com/aws/karpenter-provider-aws@v1.15.0"


def operatorpkg() -> Path:
    """The operatorpkg Karpenter v1.15's go.mod pins."""
    found = re.search(r"github\.com/awslabs/operatorpkg (\S+)", (KARPENTER / "go.mod").read_text())
    assert found is not None
    return GO_MODULES / f"github.com/awslabs/operatorpkg@{found.group(1)}"


needs_go_sources = pytest.mark.skipif(
    not (CONTROLLER_RUNTIME.is_dir() and KARPENTER.is_dir()),
    reason="Karpenter v1.15's Go modules are not in the module cache (go mod download)",
)


def go_string(expression: str) -> str:
    """A Go string expression of literals joined by ``+``."""
    return "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', expression))


def scrape(metrics: Metrics) -> Exposition:
    return parse(metrics.registry.exposition())


def declared(metrics: Metrics, name: str) -> tuple[str, str, tuple[str, ...]]:
    """(type, help, label names) of a family of karpy's registry."""
    family = metrics.registry._families[name]
    return family.type_name, family.help, family.label_names


HELP = r'Help:\s*((?:"(?:[^"\\]|\\.)*"\s*\+?\s*)+),'


@needs_go_sources
def test_workqueue_families_are_controller_runtimes() -> None:
    keys = dict(
        re.findall(r'(\w+Key)\s*=\s*"(\w+)"', (CONTROLLER_RUNTIME / "pkg/metrics/workqueue.go").read_text())
    )
    source = (CONTROLLER_RUNTIME / "pkg/internal/metrics/workqueue.go").read_text()
    families = re.findall(
        r"prometheus\.New(Gauge|Counter|Histogram)Vec\(prometheus\.\w+Opts\{(.*?)\n\t\}, "
        r"\[\]string\{([^}]*)\}\)",
        source,
        re.DOTALL,
    )
    assert len(families) == 7
    metrics = Metrics()
    for kind, options, labels in families:
        name_key = re.search(r"Name:\s*(\w+)", options)
        help_text = re.search(HELP, options)
        assert name_key is not None and help_text is not None
        name = "workqueue_" + keys[name_key.group(1)]
        expected = (kind.lower(), go_string(help_text.group(1)), tuple(re.findall(r'"(\w+)"', labels)))
        assert declared(metrics, name) == expected, name
        if kind == "Histogram":
            assert "prometheus.ExponentialBuckets(10e-9, 10, 12)" in options


def test_workqueue_buckets_are_written_as_client_golang_writes_them() -> None:
    metrics = Metrics()
    runtime = Runtime(VirtualClock(), queue_observer=metrics.work_queues)
    runtime.register(Controller("provisioner"))
    runtime.enqueue("provisioner", "a")
    runtime.run_due()
    exposition = scrape(metrics)
    # Go's ExponentialBuckets(10e-9, 10, 12) multiplies up, and strconv prints the floats it gets.
    les = [
        dict(labels)["le"]
        for labels in exposition.series("workqueue_queue_duration_seconds_bucket")
        if dict(labels)["name"] == "provisioner"
    ]
    assert sorted(les, key=float) == [
        "1e-08", "1e-07", "1e-06", "9.999999999999999e-06", "9.999999999999999e-05", "0.001", "0.01",
        "0.1", "1", "10", "100", "1000", "+Inf",
    ]  # fmt: skip


class Controller:
    """A controller that requeues its keys ``requeue`` seconds later, and may look at the metrics
    while it reconciles."""

    def __init__(self, name: str, requeue: float | None = None, kind: str = "Thing") -> None:
        self.name = name
        self.kind = kind
        self.requeue = requeue
        self.during: list[Exposition] = []
        self.metrics: Metrics | None = None
        self.clock: VirtualClock | None = None

    def watches(self) -> list[Watch]:
        return [Watch(self.kind, lambda old, new: [str(new)])]

    def reconcile(self, key: str) -> float | None:
        if self.metrics is not None and self.clock is not None:
            self.clock.advance(3.0)  # the reconcile takes 3 s of the clock
            self.during.append(scrape(self.metrics))
        return self.requeue


def queue(
    metrics: Metrics, exposition: Exposition | None = None, *, controller: str = "disruption"
) -> dict[str, float]:
    found = exposition or scrape(metrics)
    labels = {"name": controller, "controller": controller}
    return {
        "adds": found.value("workqueue_adds_total", **labels),
        "retries": found.value("workqueue_retries_total", **labels),
        "depth": found.value("workqueue_depth", **labels, priority="0"),
        "waits": found.value("workqueue_queue_duration_seconds_count", **labels),
        "waited": found.value("workqueue_queue_duration_seconds_sum", **labels),
        "works": found.value("workqueue_work_duration_seconds_count", **labels),
        "unfinished": found.value("workqueue_unfinished_work_seconds", **labels),
        "longest": found.value("workqueue_longest_running_processor_seconds", **labels),
    }


def test_a_key_queued_is_an_add_and_the_depth_until_it_runs() -> None:
    metrics = Metrics()
    clock = VirtualClock()
    runtime = Runtime(clock, queue_observer=metrics.work_queues)
    metrics.work_queues.watch(runtime.queue_states)
    runtime.register(Controller("disruption"))
    runtime.register(Controller("provisioner", kind="Other"))
    exposition = scrape(metrics)
    # Every controller's series are there from the start, at zero, but the depth, which the priority
    # queue makes at the first add.
    assert exposition.value("workqueue_adds_total", name="provisioner", controller="provisioner") == 0
    assert not exposition.find("workqueue_depth")
    runtime.on_change("Thing", None, "a")
    runtime.on_change("Thing", None, "b")
    runtime.on_change("Thing", None, "a")  # queued already: one add, as a deduplicating queue counts
    clock.advance(2.0)
    assert queue(metrics) == {
        "adds": 2, "retries": 0, "depth": 2, "waits": 0, "waited": 0, "works": 0,
        "unfinished": 0, "longest": 0,
    }  # fmt: skip
    assert runtime.run_due() == 2
    assert queue(metrics) == {
        "adds": 2, "retries": 0, "depth": 0, "waits": 2, "waited": 4.0, "works": 2,
        "unfinished": 0, "longest": 0,
    }  # fmt: skip


def test_a_requeue_after_is_a_retry_and_an_add_when_it_comes_due() -> None:
    metrics = Metrics()
    clock = VirtualClock()
    runtime = Runtime(clock, queue_observer=metrics.work_queues)
    metrics.work_queues.watch(runtime.queue_states)
    runtime.register(Controller("disruption", requeue=10.0))
    runtime.on_change("Thing", None, "a")
    runtime.run_due()
    assert queue(metrics)["adds"] == 1 and queue(metrics)["retries"] == 1 and queue(metrics)["depth"] == 0
    clock.advance(9.0)
    assert queue(metrics)["depth"] == 0  # waiting for its time: not in the queue's depth yet
    clock.advance(2.0)
    assert queue(metrics)["depth"] == 1
    runtime.run_due()
    found = queue(metrics)
    assert (found["adds"], found["retries"], found["depth"], found["waits"]) == (2, 2, 0, 2)
    assert found["waited"] == pytest.approx(1.0)  # ready at 10 s, started at 11 s


def test_a_running_reconcile_is_unfinished_work() -> None:
    metrics = Metrics()
    clock = VirtualClock()
    runtime = Runtime(clock, queue_observer=metrics.work_queues)
    metrics.work_queues.watch(runtime.queue_states)
    controller = Controller("disruption")
    controller.metrics, controller.clock = metrics, clock
    runtime.register(controller)
    runtime.on_change("Thing", None, "a")
    runtime.run_round()
    (during,) = controller.during
    found = queue(metrics, during)
    assert (found["unfinished"], found["longest"], found["depth"]) == (3.0, 3.0, 0)
    assert queue(metrics)["unfinished"] == 0 and queue(metrics)["works"] == 1


def test_the_simulator_keeps_no_queue_metrics() -> None:
    simulation = Simulation()
    assert simulation.runtime.queue_observer is None


@needs_go_sources
def test_status_condition_families_are_operatorpkgs_as_karpenter_registers_them() -> None:
    label_names = {
        "pmetrics.Type": "type",
        "pmetrics.Reason": "reason",
        "ConditionStatus": "status",
        "ToConditionStatus": "to_status",
        "Namespace": "namespace",
        "Name": "name",
    }
    declarations = []
    for block in (operatorpkg() / "status/metrics.go").read_text().split("\nfunc ")[1:]:
        name = re.search(r'\bName:\s*"(\w+)"', block)
        help_text = re.search(HELP, block)
        kind = re.search(r"pmetrics\.NewPrometheus(Gauge|Counter|Histogram)\(", block)
        subsystem = re.search(r"len\(objectName\) == 0, (\w+)Subsystem", block)
        assert name and help_text and kind and subsystem, block
        own = re.search(r"append\(\[\]pmetrics\.Label\{(.*?)\}, additionalLabels\.\.\.\)", block, re.DOTALL)
        labels = [label.strip() for label in own.group(1).split(",") if label.strip()] if own else []
        base = {"Metric": "status_condition", "Termination": "termination"}[subsystem.group(1)]
        declarations.append(
            (
                base,
                name.group(1),
                kind.group(1).lower(),
                go_string(help_text.group(1)),
                [label_names[x] for x in labels],
            )
        )
    assert len(declarations) == 6
    # Karpenter v1.15's registrations (pkg/controllers/controllers.go): the NodeClaim's and the Node's
    # labels (a node class label per kind the provider supports, the NodePool's, the Node's
    # initialized label), the kinds that emit the deprecated families too.
    controllers = (KARPENTER / "pkg/controllers/controllers.go").read_text()
    for registration in (
        "status.NewController[*v1.NodeClaim]",
        "status.NewController[*v1.NodePool]",
        "status.NewGenericObjectController[*corev1.Node]",
        "status.NewGenericObjectController[*autoscalingv1beta1.CapacityBuffer]",
        "v1.NodePoolLabelKey)...)",
        "v1.NodePoolLabelKey, v1.NodeInitializedLabelKey)...)",
    ):
        assert registration in controllers
    node_class = ("karpenter_k8s_aws_ec2nodeclass", "karpenter_kwok_sh_kwoknodeclass")
    additional = {
        "nodeclaim_": (*node_class, "karpenter_sh_nodepool"),
        "nodepool_": (),
        "node_": (*node_class, "karpenter_sh_nodepool", "karpenter_sh_initialized"),
        "ec2nodeclass_": (),
        "capacitybuffer_": (),
        "": ("group", "kind"),  # the deprecated families: pmetrics.Group, pmetrics.Kind
    }
    metrics = Metrics()
    for base, suffix, type_name, help_of, label_list in declarations:
        for subject, extra in additional.items():
            family = f"operator_{subject}{base}_{suffix}"
            assert declared(metrics, family) == (type_name, help_of, (*label_list, *extra)), family


def test_status_condition_histograms_have_karpenters_buckets() -> None:
    metrics = Metrics()
    recorder = StatusRecorder(metrics.status_conditions, "NodePool")
    recorder.observed("default", [ObservedCondition("Ready", "False", "NotReady", 100.0)], {}, None, 100.0)
    recorder.observed("default", [ObservedCondition("Ready", "True", "Ready", 130.0)], {}, None, 130.0)
    exposition = scrape(metrics)

    def les(name: str) -> list[str]:
        return sorted((dict(labels)["le"] for labels in exposition.series(name)), key=float)

    # Karpenter: prometheus.ExponentialBuckets(0.5, 2, 15); the deprecated family: DefBuckets.
    assert les("operator_nodepool_status_condition_transition_seconds_bucket") == [
        "0.5", "1", "2", "4", "8", "16", "32", "64", "128", "256", "512", "1024", "2048", "4096", "8192",
        "+Inf",
    ]  # fmt: skip
    assert les("operator_status_condition_transition_seconds_bucket") == [
        "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "+Inf",
    ]  # fmt: skip


def test_a_condition_transition_counts_and_times_how_long_the_status_held() -> None:
    metrics = Metrics()
    recorder = StatusRecorder(metrics.status_conditions, "NodePool")
    recorder.observed("default", [ObservedCondition("Ready", "False", "NotReady", 100.0)], {}, None, 110.0)
    exposition = scrape(metrics)
    gauge = {"namespace": "", "name": "default", "type": "Ready", "status": "False", "reason": "NotReady"}
    assert exposition.value("operator_nodepool_status_condition_count", **gauge) == 1
    assert exposition.value("operator_nodepool_status_condition_current_status_seconds", **gauge) == 10
    deprecated = {**gauge, "group": "karpenter.sh", "kind": "NodePool"}
    assert exposition.value("operator_status_condition_count", **deprecated) == 1
    # Its first sight counts as a transition (operatorpkg's rule), with nothing to time.
    assert (
        exposition.value(
            "operator_nodepool_status_condition_transitions_total",
            type="Ready",
            status="False",
            reason="NotReady",
        )
        == 1
    )
    assert not exposition.find("operator_nodepool_status_condition_transition_seconds_count")

    recorder.observed("default", [ObservedCondition("Ready", "True", "Ready", 130.0)], {}, None, 140.0)
    exposition = scrape(metrics)
    now = {**gauge, "status": "True", "reason": "Ready"}
    # The False series went with the status: one series per condition.
    assert exposition.series("operator_nodepool_status_condition_count") == {frozenset(now.items()): 1}
    assert exposition.series("operator_status_condition_count") == {
        frozenset({**now, "group": "karpenter.sh", "kind": "NodePool"}.items()): 1
    }
    assert exposition.value("operator_nodepool_status_condition_current_status_seconds", **now) == 10
    assert (
        exposition.value(
            "operator_nodepool_status_condition_transitions_total",
            type="Ready",
            status="True",
            reason="Ready",
        )
        == 1
    )
    held = {"type": "Ready", "status": "False", "to_status": "True"}
    assert exposition.value("operator_nodepool_status_condition_transition_seconds_count", **held) == 1
    assert exposition.value("operator_nodepool_status_condition_transition_seconds_sum", **held) == 30
    assert (
        exposition.value(
            "operator_status_condition_transition_seconds_sum", **held, group="karpenter.sh", kind="NodePool"
        )
        == 30
    )

    # The same status again (a new reason only): no transition.
    recorder.observed("default", [ObservedCondition("Ready", "True", "Other", 130.0)], {}, None, 150.0)
    assert (
        scrape(metrics).value(
            "operator_nodepool_status_condition_transitions_total",
            type="Ready",
            status="True",
            reason="Ready",
        )
        == 1
    )


def test_an_object_gone_leaves_no_series_and_its_termination_is_timed() -> None:
    metrics = Metrics()
    recorder = StatusRecorder(metrics.status_conditions, "NodeClaim")
    labels = {
        "karpenter_k8s_aws_ec2nodeclass": "",
        "karpenter_kwok_sh_kwoknodeclass": "default",
        "karpenter_sh_nodepool": "default",
    }
    ready = [ObservedCondition("Ready", "True", "Ready", 100.0)]
    recorder.observed("default-abcde", ready, labels, None, 110.0)
    recorder.observed("default-abcde", ready, labels, 200.0, 215.0)
    exposition = scrape(metrics)
    assert (
        exposition.value(
            "operator_nodeclaim_termination_current_time_seconds",
            namespace="",
            name="default-abcde",
            **labels,
        )
        == 15
    )
    assert (
        exposition.value(
            "operator_termination_current_time_seconds",
            namespace="",
            name="default-abcde",
            group="karpenter.sh",
            kind="NodeClaim",
        )
        == 15
    )
    assert not exposition.find("operator_nodeclaim_termination_duration_seconds_count")
    assert not exposition.find("operator_nodepool_termination_duration_seconds_count")  # no labels, no series
    recorder.gone("default-abcde", 230.0)
    exposition = scrape(metrics)
    for family in (
        "operator_nodeclaim_status_condition_count",
        "operator_nodeclaim_status_condition_current_status_seconds",
        "operator_nodeclaim_termination_current_time_seconds",
        "operator_status_condition_count",
        "operator_status_condition_current_status_seconds",
        "operator_termination_current_time_seconds",
    ):
        assert not exposition.find(family), family
    assert exposition.value("operator_nodeclaim_termination_duration_seconds_sum", **labels) == 30
    assert (
        exposition.value("operator_termination_duration_seconds_sum", group="karpenter.sh", kind="NodeClaim")
        == 30
    )
    # The counters stay: they count what happened.
    assert (
        exposition.value(
            "operator_nodeclaim_status_condition_transitions_total",
            type="Ready",
            status="True",
            reason="Ready",
            **labels,
        )
        == 1
    )


def test_the_status_controllers_keep_nodeclaims_nodepools_and_nodes_conditions() -> None:
    metrics = Metrics()
    simulation = Simulation(metrics=metrics)
    simulation.apply(load_objects(KWOK_NODE_CLASS, kwok_nodepool(), deployment_manifest(replicas=3)))
    simulation.run(600)
    claims = simulation.nodeclaims()
    assert claims
    names = {"operatorpkg.nodeclaim.status", "operatorpkg.nodepool.status", "operatorpkg.node.status"}
    assert names <= set(simulation.runtime._controllers)
    exposition = scrape(metrics)
    for claim in claims:
        found = exposition.find(
            "operator_nodeclaim_status_condition_count",
            name=claim.name,
            type="Ready",
            status="True",
            karpenter_kwok_sh_kwoknodeclass=claim.spec.node_class_ref.name,
            karpenter_sh_nodepool="default",
        )
        assert found == [1], claim.name
    assert exposition.find(
        "operator_nodepool_status_condition_count", name="default", type="Ready", status="True"
    ) == [1]
    assert exposition.value(
        "operator_nodeclaim_status_condition_transitions_total",
        type="Initialized",
        status="True",
        reason="Initialized",
        karpenter_k8s_aws_ec2nodeclass="",
        karpenter_kwok_sh_kwoknodeclass=claims[0].spec.node_class_ref.name,
        karpenter_sh_nodepool="default",
    ) == len(claims)
    # Every NodeClaim gone (the Deployment deleted, the nodes consolidated away): no series of theirs.
    simulation.cluster.delete(simulation.cluster.get("Deployment", "default/app"))
    simulation.run(3600)
    assert not simulation.nodeclaims()
    exposition = scrape(metrics)
    assert not exposition.find("operator_nodeclaim_status_condition_count")
    assert not exposition.find("operator_node_status_condition_count")
    assert not exposition.find("operator_nodeclaim_termination_current_time_seconds")


def test_the_aws_provider_keeps_its_node_class_conditions() -> None:
    controller = StatusConditionMetricsController(None, VirtualClock(), Metrics(), "EC2NodeClass")  # type: ignore[arg-type]
    assert controller.name == "operatorpkg.ec2nodeclass.status"
    assert [watch.kind for watch in controller.watches()] == ["EC2NodeClass"]


@pytest.mark.skipif(
    not KARPENTER_AWS.is_dir(), reason="the AWS provider's Go module is not in the module cache"
)
def test_the_aws_providers_node_class_status_controller_is_registered_as_karpy_declares_it() -> None:
    controllers = (KARPENTER_AWS / "pkg/controllers/controllers.go").read_text()
    found = re.search(
        r"status\.NewController\[\*v1\.EC2NodeClass\]\(kubeClient, "
        r'mgr\.GetEventRecorderFor\("karpenter"\)(.*?)\),',
        controllers,
    )
    assert found is not None
    # The deprecated families too, no labels, no buckets (client_golang's default ones).
    assert found.group(1) == ", status.EmitDeprecatedMetrics"
    declared_kind, _ = Metrics().status_conditions.kinds["EC2NodeClass"]
    assert (declared_kind.labels, declared_kind.deprecated) == ((), True)
    assert declared_kind.buckets == (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


def test_capacity_buffers_conditions_are_kept_by_namespace_with_the_gate() -> None:
    buffer = """
apiVersion: autoscaling.x-k8s.io/v1beta1
kind: CapacityBuffer
metadata: {name: warm, namespace: shop}
spec: {podTemplateRef: {name: missing}, replicas: 1}
"""
    metrics = Metrics()
    simulation = Simulation(SimulationSettings(capacity_buffers=True), metrics=metrics)
    simulation.apply(load_objects(KWOK_NODE_CLASS, kwok_nodepool(), buffer))
    simulation.run(60, until_steady=False)
    exposition = scrape(metrics)
    found = exposition.series("operator_capacitybuffer_status_condition_count")
    assert found and all(dict(labels)["namespace"] == "shop" for labels in found)
    assert all(dict(labels)["name"] == "warm" for labels in found)
    assert exposition.find("operator_status_condition_count", kind="CapacityBuffer", namespace="shop")
    simulation.cluster.delete(simulation.cluster.get("CapacityBuffer", "shop/warm"))
    simulation.run(60, until_steady=False)
    assert not scrape(metrics).series("operator_capacitybuffer_status_condition_count")
    # Without the gate there is no such controller, as in Karpenter.
    plain = Simulation(metrics=Metrics())
    assert "operatorpkg.capacitybuffer.status" not in plain.runtime._controllers


class Blocking:
    """A controller whose reconciles run on worker threads, two at once, until let go."""

    name = "nodeclaim.lifecycle"
    max_concurrent_reconciles = 2

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Semaphore(0)

    def watches(self) -> list[Watch]:
        return [Watch("Thing", lambda old, new: [str(new)])]

    def reconcile(self, key: str) -> float | None:
        self.started.release()
        self.release.wait(10)
        return None


def test_concurrent_reconciles_running_are_unfinished_work_and_a_key_asked_for_meanwhile_is_depth() -> None:
    metrics = Metrics()
    clock = VirtualClock()
    runtime = Runtime(clock, queue_observer=metrics.work_queues)
    metrics.work_queues.watch(runtime.queue_states)
    controller = Blocking()
    runtime.register(controller)
    try:
        for key in ("a", "b"):
            runtime.on_change("Thing", None, key)
        assert runtime.run_round() == 2
        assert controller.started.acquire(timeout=5) and controller.started.acquire(timeout=5)
        clock.advance(4.0)
        runtime.on_change("Thing", None, "a")  # asked for again while it runs: held, ready
        found = queue(metrics, controller="nodeclaim.lifecycle")
        assert (found["unfinished"], found["longest"], found["depth"], found["adds"]) == (8.0, 4.0, 1, 3)
    finally:
        controller.release.set()
        runtime.wait_for_workers(10)
        runtime.close()
    found = queue(metrics, controller="nodeclaim.lifecycle")
    assert (found["unfinished"], found["longest"], found["works"]) == (0, 0, 2)
