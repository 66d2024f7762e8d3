"""The Kubernetes core, apps, batch and scheduling objects karpy schedules around.

Pods, Nodes, Namespaces, Deployments, ReplicaSets, StatefulSets, DaemonSets,
Jobs, CronJobs, PriorityClasses, PodDisruptionBudgets and persistent volumes
are read from ordinary Kubernetes YAML (or the apiserver's JSON) into slim frozen
records holding only what the controllers act on. Keeping them slim is what
lets one process hold tens of thousands of pods; keeping them frozen is what
makes a snapshot a snapshot: a controller changes an object by writing a new
one through the cluster writer, never by mutating what it read.

A pod's resource requests are reduced here, once, to the *effective* requests
Kubernetes schedules by (init containers, restartable sidecars, pod-level
resources and pod overhead included), so no later stage needs to know about
containers.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Self

from karpy.api._reader import FieldReader, ManifestError
from karpy.api.cron import read_schedule
from karpy.api.duration import DurationError, parse_duration
from karpy.api.limits import INT32_MAX, labels_problem
from karpy.api.meta import ObjectMeta, parse_timestamp
from karpy.api.podresources import POD_LEVEL_RESOURCES as POD_LEVEL_RESOURCES  # noqa: PLC0414 (re-exported)
from karpy.api.podresources import ContainerResources, PodResources
from karpy.api.quantity import (
    QuantityError,
    ResourceAmounts,
    parse_resource_list,
)
from karpy.api.requirements import Requirement, RequirementError, Requirements
from karpy.api.taints import Taint, Toleration

DO_NOT_DISRUPT_ANNOTATION = "karpenter.sh/do-not-disrupt"
# How long a pod's containers run before they exit successfully (a Job's work, in the simulator).
RUN_DURATION_ANNOTATION = "karpy.dev/duration"
DEFAULT_SCHEDULER = "default-scheduler"
# The label the apiserver sets on every Namespace: its name.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"

POD_PENDING = "Pending"
POD_RUNNING = "Running"
POD_SUCCEEDED = "Succeeded"
POD_FAILED = "Failed"


def read_resources(reader: FieldReader, key: str) -> ResourceAmounts:
    """A ResourceList field (``requests``, ``limits``, ``capacity``) as integer amounts.

    A bad quantity is reported at its own path (``spec.limits.cpu``).
    """
    raw = reader.raw(key)
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise reader.error(key, "expected a map of resource names to quantities")
    resources = reader.obj(key)
    amounts: ResourceAmounts = {}
    for name, value in raw.items():
        try:
            amounts.update(parse_resource_list({name: value}))
        except QuantityError as error:
            # The path names the resource; drop the message's own 'resource "cpu": ' prefix.
            message = str(error).removeprefix(f'resource "{name}": ')
            raise resources.error(str(name), message) from error
    return amounts


def read_match_expressions(reader: FieldReader, key: str = "matchExpressions") -> Requirements:
    """A list of node selector requirements (key, operator, values, minValues) as one set."""

    def parse(item: FieldReader) -> Requirement:
        operator = item.required_str("operator")
        try:
            return Requirement.from_operator(
                item.required_str("key"),
                operator,
                item.str_list("values"),
                item.integer("minValues"),
            )
        except RequirementError as error:
            raise ManifestError(item.path, str(error)) from error

    requirements = Requirements()
    for requirement in reader.items(key, parse):
        requirements.add(requirement)
    return requirements


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A metav1.LabelSelector; an empty selector matches everything."""

    match_labels: dict[str, str] = field(default_factory=dict)
    match_expressions: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    @classmethod
    def parse(cls, reader: FieldReader) -> LabelSelector:
        def expression(item: FieldReader) -> tuple[str, str, tuple[str, ...]]:
            operator = item.required_str("operator")
            if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
                raise item.error("operator", f"unknown label selector operator {operator!r}")
            return (item.required_str("key"), operator, item.str_list("values"))

        return cls(reader.str_map("matchLabels"), reader.items("matchExpressions", expression))

    def matches(self, labels: Mapping[str, str]) -> bool:
        return label_selector_matches(self.match_labels, self.match_expressions, labels)


def label_selector_matches(
    match_labels: Mapping[str, object],
    match_expressions: Iterable[tuple[str, object, Collection[object]]],
    labels: Mapping[str, object],
) -> bool:
    """Whether ``labels`` satisfy a selector's labels and (key, operator, values) expressions.

    Shared by :class:`LabelSelector` and the validation of raw manifests, which reads selectors unparsed.
    """
    for key, value in match_labels.items():
        if labels.get(key) != value:
            return False
    for key, operator, values in match_expressions:
        present = key in labels
        if operator == "In" and (not present or labels[key] not in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


@dataclass(frozen=True, slots=True)
class PreferredTerm:
    weight: int
    requirements: Requirements


@dataclass(frozen=True, slots=True)
class PodSpec:
    """What scheduling needs of a pod spec, with effective requests precomputed."""

    requests: ResourceAmounts = field(default_factory=dict)
    node_selector: dict[str, str] = field(default_factory=dict)
    required_node_terms: tuple[Requirements, ...] = ()
    preferred_node_terms: tuple[PreferredTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    priority: int = 0
    priority_class_name: str = ""
    scheduler_name: str = DEFAULT_SCHEDULER
    node_name: str = ""
    termination_grace_period_seconds: int = 30
    # Kept as written for the scheduling core to interpret (affinity terms and
    # spread constraints have many shapes; parsing them is the scheduler's job).
    pod_affinity: Mapping[str, object] = field(default_factory=dict)
    pod_anti_affinity: Mapping[str, object] = field(default_factory=dict)
    topology_spread_constraints: tuple[Mapping[str, object], ...] = ()
    host_ports: tuple[int, ...] = ()
    # PersistentVolumeClaims the pod mounts: a zonal volume pins the pod's zone.
    claim_names: tuple[str, ...] = ()
    # What ``requests`` is worked out from, kept for admission to default (karpy.api.admission);
    # out of the repr, which a workload's template hash is made of, so pod names stay as they were.
    resources: PodResources = field(default_factory=PodResources, repr=False)
    runtime_class_name: str = field(default="", repr=False)

    @classmethod
    def parse(cls, reader: FieldReader) -> PodSpec:
        resources = pod_resources(reader)
        requests = resources.effective_requests()
        node_selector = reader.str_map("nodeSelector")
        affinity = reader.obj("affinity")
        node_affinity = affinity.obj("nodeAffinity")
        required = node_affinity.obj("requiredDuringSchedulingIgnoredDuringExecution")
        terms = required.items("nodeSelectorTerms", read_match_expressions)
        if required.has("nodeSelectorTerms") and not terms:
            raise required.error("nodeSelectorTerms", "must have at least one term")

        def preferred(item: FieldReader) -> PreferredTerm:
            weight = item.integer("weight", 1)
            if weight is None or not 1 <= weight <= 100:
                raise item.error("weight", f"must be between 1 and 100, got {weight}")
            return PreferredTerm(weight, read_match_expressions(item.obj("preference")))

        def spread(item: FieldReader) -> Mapping[str, object]:
            item.required_str("topologyKey")
            max_skew = item.integer("maxSkew")
            if max_skew is None or max_skew < 1:
                raise item.error("maxSkew", "must be a positive integer")
            when = item.required_str("whenUnsatisfiable")
            if when not in WHEN_UNSATISFIABLE:
                raise item.error(
                    "whenUnsatisfiable", f"must be one of {', '.join(WHEN_UNSATISFIABLE)}, got {when!r}"
                )
            return dict((key, item.raw(key)) for key in item)

        host_ports: list[int] = []
        for container in reader.items("containers", lambda c: c):
            for port in container.items("ports", lambda p: p):
                host_port = port.integer("hostPort")
                if host_port:
                    host_ports.append(host_port)
        for kind in ("podAffinity", "podAntiAffinity"):
            _check_pod_affinity_terms(affinity.obj(kind))
        pod_affinity = affinity.raw("podAffinity")
        pod_anti_affinity = affinity.raw("podAntiAffinity")
        claim_names = tuple(
            name
            for volume in reader.items("volumes", lambda v: v)
            if (name := volume.obj("persistentVolumeClaim").string("claimName"))
        )
        return cls(
            requests=requests,
            node_selector=node_selector,
            required_node_terms=terms,
            preferred_node_terms=node_affinity.items(
                "preferredDuringSchedulingIgnoredDuringExecution", preferred
            ),
            tolerations=reader.items("tolerations", Toleration.parse),
            priority=reader.integer("priority", 0) or 0,
            priority_class_name=reader.string("priorityClassName"),
            scheduler_name=reader.string("schedulerName", DEFAULT_SCHEDULER),
            node_name=reader.string("nodeName"),
            termination_grace_period_seconds=reader.integer("terminationGracePeriodSeconds", 30) or 0,
            pod_affinity=pod_affinity if isinstance(pod_affinity, Mapping) else {},
            pod_anti_affinity=pod_anti_affinity if isinstance(pod_anti_affinity, Mapping) else {},
            topology_spread_constraints=reader.items("topologySpreadConstraints", spread),
            host_ports=tuple(host_ports),
            claim_names=claim_names,
            resources=resources,
            runtime_class_name=reader.string("runtimeClassName"),
        )

    def node_requirements(self) -> tuple[Requirements, ...]:
        """The pod's hard node constraints as alternatives (one per required term).

        The nodeSelector is ANDed into every term; with no required terms the
        nodeSelector alone is the single alternative.
        """
        selector = Requirements.from_labels(self.node_selector)
        if not self.required_node_terms:
            return (selector,)
        alternatives: list[Requirements] = []
        for term in self.required_node_terms:
            combined = Requirements()
            for requirement in selector:
                combined.add(requirement)
            for requirement in term:
                combined.add(requirement)
            alternatives.append(combined)
        return tuple(alternatives)


def _container_resources(container: FieldReader, *, init: bool = False) -> ContainerResources:
    resources = container.obj("resources")
    sidecar = init and container.string("restartPolicy") == "Always"
    return ContainerResources.of(
        read_resources(resources, "requests"), read_resources(resources, "limits"), init=init, sidecar=sidecar
    )


def pod_resources(spec: FieldReader) -> PodResources:
    """What a pod spec says of resources, container by container (:mod:`karpy.api.podresources`)."""
    containers = spec.items("containers", _container_resources)
    init_containers = spec.items("initContainers", lambda item: _container_resources(item, init=True))
    pod_level = spec.obj("resources")
    return PodResources(
        containers=(*containers, *init_containers),
        pod_requests=read_resources(pod_level, "requests"),
        pod_limits=read_resources(pod_level, "limits"),
        overhead=read_resources(spec, "overhead"),
    )


def effective_requests(spec: FieldReader) -> ResourceAmounts:
    """Requests as the kube-scheduler computes them for a pod (:meth:`PodResources.effective_requests`)."""
    return pod_resources(spec).effective_requests()


def run_duration(annotations: Mapping[str, str]) -> float | None:
    """The seconds a pod runs for by its ``karpy.dev/duration`` annotation; None if it has none."""
    text = annotations.get(RUN_DURATION_ANNOTATION)
    if text is None:
        return None
    value = parse_duration(text)
    if value < 0:
        raise DurationError("must not be negative")
    return value


def _read_annotations(metadata: FieldReader) -> dict[str, str]:
    """The annotations, with a ``karpy.dev/duration`` one checked to be a duration."""
    annotations = metadata.str_map("annotations")
    try:
        run_duration(annotations)
    except DurationError as error:
        raise metadata.obj("annotations").error(RUN_DURATION_ANNOTATION, str(error)) from error
    return annotations


WHEN_UNSATISFIABLE = ("DoNotSchedule", "ScheduleAnyway")


def _check_pod_affinity_terms(reader: FieldReader) -> None:
    """What the API server requires of (anti-)affinity terms: a topologyKey in each.

    The terms themselves are kept as written for the scheduling core; a term
    without a topologyKey never reaches a scheduler, so it must not reach the
    simulator's either.
    """
    for term in reader.items("requiredDuringSchedulingIgnoredDuringExecution", lambda t: t):
        term.required_str("topologyKey")
    for weighted in reader.items("preferredDuringSchedulingIgnoredDuringExecution", lambda t: t):
        weighted.obj("podAffinityTerm").required_str("topologyKey")


@dataclass(frozen=True, slots=True)
class PodTemplate:
    labels: dict[str, str]
    annotations: dict[str, str]
    spec: PodSpec

    @classmethod
    def parse(cls, reader: FieldReader) -> PodTemplate:
        metadata = reader.obj("metadata")
        labels = metadata.str_map("labels")
        problem = labels_problem(labels)
        if problem is not None:
            raise metadata.error("labels", problem)
        return cls(labels, _read_annotations(metadata), PodSpec.parse(reader.obj("spec")))


@dataclass(frozen=True, slots=True)
class Pod:
    metadata: ObjectMeta
    spec: PodSpec
    phase: str = POD_PENDING
    unschedulable_reason: str = ""
    start_time: float | None = None
    # The Ready condition is True (read for Karpenter's karpenter_pods_state only).
    ready: bool = False

    kind = "Pod"

    @classmethod
    def parse(cls, reader: FieldReader) -> Pod:
        status = reader.obj("status")
        conditions = status.items(
            "conditions", lambda c: (c.string("type"), c.string("status"), c.string("message"))
        )
        unschedulable = next(
            (message for kind, state, message in conditions if kind == "PodScheduled" and state == "False"),
            "",
        )
        _read_annotations(reader.obj("metadata"))
        started = status.string("startTime")
        return cls(
            metadata=ObjectMeta.parse(reader.obj("metadata"), namespaced=True),
            spec=PodSpec.parse(reader.obj("spec")),
            phase=status.string("phase", POD_PENDING),
            unschedulable_reason=unschedulable,
            start_time=parse_timestamp(started, status.child_path("startTime")) if started else None,
            ready=any(kind == "Ready" and state == "True" for kind, state, _ in conditions),
        )

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"

    @property
    def node_name(self) -> str:
        return self.spec.node_name

    @property
    def owner_kind(self) -> str:
        controller = self.metadata.controller
        return controller.kind if controller else ""

    @property
    def is_daemonset_pod(self) -> bool:
        return self.owner_kind == "DaemonSet"

    @property
    def is_terminal(self) -> bool:
        return self.phase in (POD_SUCCEEDED, POD_FAILED)

    @property
    def do_not_disrupt(self) -> bool:
        """Whether ``karpenter.sh/do-not-disrupt`` protects the pod for good (``"true"``)."""
        return self.metadata.annotations.get(DO_NOT_DISRUPT_ANNOTATION) == "true"

    def do_not_disrupt_until(self) -> float | None:
        """Until when ``karpenter.sh/do-not-disrupt`` protects the pod: ``inf`` for ``"true"``.

        As in Karpenter (v1.12+), the value may also be a duration (``"1m"``), counted from the
        pod's start: a pod not started yet is protected, and a value that is neither ``"true"``
        nor a positive duration protects nothing (None), as if the annotation were absent.
        """
        value = self.metadata.annotations.get(DO_NOT_DISRUPT_ANNOTATION)
        if value is None:
            return None
        if value == "true":
            return math.inf
        try:
            duration = parse_duration(value)
        except DurationError:
            return None
        if duration <= 0:
            return None
        return math.inf if self.start_time is None else self.start_time + duration

    def do_not_disrupt_at(self, now: float) -> bool:
        """Whether ``karpenter.sh/do-not-disrupt`` still protects the pod at ``now``."""
        until = self.do_not_disrupt_until()
        return until is not None and now < until

    def is_provisionable(self) -> bool:
        """A pod karpy should find capacity for: unbound, alive, and the default scheduler's or
        one its own scheduler found no node for (as Karpenter, which goes by that verdict: a
        profile of kube-scheduler's other than the default, such as one with its own spread
        defaults, is served too; a pod no scheduler has looked at is not)."""
        return (
            not self.spec.node_name
            and not self.is_terminal
            and not self.metadata.deleting
            and (self.spec.scheduler_name == DEFAULT_SCHEDULER or bool(self.unschedulable_reason))
            and not self.is_daemonset_pod
        )

    def with_changes(self, **changes: object) -> Pod:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class NodeCondition:
    type: str
    status: str
    reason: str = ""
    message: str = ""
    # When the status last changed (seconds since the epoch): node repair's tolerations count from it.
    last_transition_time: float | None = None


@dataclass(frozen=True, slots=True)
class Node:
    metadata: ObjectMeta
    provider_id: str = ""
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    capacity: ResourceAmounts = field(default_factory=dict)
    allocatable: ResourceAmounts = field(default_factory=dict)
    conditions: tuple[NodeCondition, ...] = ()
    # status.nodeInfo.bootID: a new one says the node rebooted.
    boot_id: str = ""

    kind = "Node"

    @classmethod
    def parse(cls, reader: FieldReader) -> Node:
        spec = reader.obj("spec")
        status = reader.obj("status")
        return cls(
            metadata=ObjectMeta.parse(reader.obj("metadata"), namespaced=False),
            provider_id=spec.string("providerID"),
            taints=spec.items("taints", Taint.parse),
            unschedulable=spec.boolean("unschedulable"),
            capacity=read_resources(status, "capacity"),
            allocatable=read_resources(status, "allocatable"),
            conditions=status.items(
                "conditions",
                lambda c: NodeCondition(
                    c.required_str("type"),
                    c.string("status", "Unknown"),
                    c.string("reason"),
                    last_transition_time=_timestamp(c, "lastTransitionTime"),
                ),
            ),
            boot_id=status.obj("nodeInfo").string("bootID"),
        )

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def ready(self) -> bool:
        return any(c.type == "Ready" and c.status == "True" for c in self.conditions)

    def with_changes(self, **changes: object) -> Node:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


def _timestamp(reader: FieldReader, key: str) -> float | None:
    written = reader.string(key)
    return parse_timestamp(written, reader.child_path(key)) if written else None


def _non_negative(reader: FieldReader, key: str) -> int | None:
    """A count of the API (replicas, parallelism, ...): an int32, so at most 2147483647."""
    value = reader.integer(key)
    if value is not None and value < 0:
        raise reader.error(key, "must not be negative")
    if value is not None and value > INT32_MAX:
        raise reader.error(key, f"{value} does not fit the field's int32 (at most {INT32_MAX})")
    return value


def _selecting(reader: FieldReader, selector: LabelSelector, template: PodTemplate) -> LabelSelector:
    """A workload's selector, which must select its own template's pods (the API server says so)."""
    if (selector.match_labels or selector.match_expressions) and not selector.matches(template.labels):
        raise reader.error("template.metadata.labels", "`selector` does not match template `labels`")
    return selector


def _replicas(reader: FieldReader) -> int:
    replicas = _non_negative(reader, "replicas")
    return 1 if replicas is None else replicas


@dataclass(frozen=True, slots=True)
class ScaledWorkload:
    """What Deployments and ReplicaSets share: a pod template and a replica count."""

    metadata: ObjectMeta
    replicas: int
    selector: LabelSelector
    template: PodTemplate

    kind = ""

    @classmethod
    def parse(cls, reader: FieldReader) -> Self:
        metadata = ObjectMeta.parse(reader.obj("metadata"), namespaced=True)
        spec = reader.obj("spec")
        template = PodTemplate.parse(spec.obj("template"))
        return cls(
            metadata=metadata,
            replicas=_replicas(spec),
            selector=_selecting(spec, LabelSelector.parse(spec.obj("selector")), template),
            template=template,
        )

    def with_changes(self, **changes: object) -> Self:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Deployment(ScaledWorkload):
    kind = "Deployment"


@dataclass(frozen=True, slots=True)
class ReplicaSet(ScaledWorkload):
    kind = "ReplicaSet"


@dataclass(frozen=True, slots=True)
class DaemonSet:
    metadata: ObjectMeta
    selector: LabelSelector
    template: PodTemplate

    kind = "DaemonSet"

    @classmethod
    def parse(cls, reader: FieldReader) -> DaemonSet:
        metadata = ObjectMeta.parse(reader.obj("metadata"), namespaced=True)
        spec = reader.obj("spec")
        template = PodTemplate.parse(spec.obj("template"))
        return cls(
            metadata=metadata,
            selector=_selecting(spec, LabelSelector.parse(spec.obj("selector")), template),
            template=template,
        )


def _int_or_percent(reader: FieldReader, key: str) -> int | str | None:
    raw = reader.raw(key)
    if raw is None:
        return None
    if isinstance(raw, int) and not isinstance(raw, bool):
        if raw < 0:
            raise reader.error(key, "must not be negative")
        return raw
    if isinstance(raw, str) and raw.endswith("%") and raw[:-1].isascii() and raw[:-1].isdigit():
        if int(raw[:-1]) > 100:
            raise reader.error(key, f"must not be more than 100%, got {raw!r}")
        return raw
    if isinstance(raw, str) and raw.isascii() and raw.isdigit():
        return int(raw)
    raise reader.error(key, f"expected an integer or a percentage, got {raw!r}")


def resolve_int_or_percent(value: int | str, total: int, *, round_up: bool) -> int:
    if isinstance(value, int):
        return value
    percent = int(value[:-1])
    scaled = percent * total
    return -(-scaled // 100) if round_up else scaled // 100


@dataclass(frozen=True, slots=True)
class PodDisruptionBudget:
    metadata: ObjectMeta
    # policy/v1: a missing selector selects no pod; an empty one selects every pod.
    selector: LabelSelector | None
    min_available: int | str | None = None
    max_unavailable: int | str | None = None

    kind = "PodDisruptionBudget"

    @classmethod
    def parse(cls, reader: FieldReader) -> PodDisruptionBudget:
        spec = reader.obj("spec")
        min_available = _int_or_percent(spec, "minAvailable")
        max_unavailable = _int_or_percent(spec, "maxUnavailable")
        if min_available is not None and max_unavailable is not None:
            raise spec.error("maxUnavailable", "minAvailable and maxUnavailable are mutually exclusive")
        return cls(
            metadata=ObjectMeta.parse(reader.obj("metadata"), namespaced=True),
            selector=LabelSelector.parse(spec.obj("selector")) if spec.raw("selector") is not None else None,
            min_available=min_available,
            max_unavailable=max_unavailable,
        )

    def selects(self, pod: Pod) -> bool:
        if self.selector is None or pod.metadata.namespace != self.metadata.namespace:
            return False
        return self.selector.matches(pod.metadata.labels)

    def disruptions_allowed(self, healthy: int, expected: int) -> int:
        """How many more matching pods may be evicted now (the PDB's status.disruptionsAllowed).

        As Kubernetes' disruption controller: none while no pod is expected, and
        never more than the healthy pods (the desired count does not go below zero).
        """
        if expected <= 0:
            return 0
        if self.max_unavailable is not None:
            unavailable = resolve_int_or_percent(self.max_unavailable, expected, round_up=True)
            desired_healthy = max(0, expected - unavailable)
        elif self.min_available is not None:
            desired_healthy = resolve_int_or_percent(self.min_available, expected, round_up=True)
        else:
            desired_healthy = 0
        return max(0, healthy - desired_healthy)


@dataclass(frozen=True, slots=True)
class PersistentVolumeClaim:
    metadata: ObjectMeta
    volume_name: str = ""
    storage_class_name: str = ""

    kind = "PersistentVolumeClaim"

    @classmethod
    def parse(cls, reader: FieldReader) -> PersistentVolumeClaim:
        spec = reader.obj("spec")
        return cls(
            metadata=ObjectMeta.parse(reader.obj("metadata"), namespaced=True),
            volume_name=spec.string("volumeName"),
            storage_class_name=spec.string("storageClassName"),
        )


@dataclass(frozen=True, slots=True)
class PersistentVolume:
    """A volume; its node affinity (a zonal EBS volume's zone, say) binds its pods' placement."""

    metadata: ObjectMeta
    node_terms: tuple[Requirements, ...] = ()
    # The CSI driver that attaches it ("" for a volume no CSI driver or in-tree EBS attaches).
    csi_driver: str = ""

    kind = "PersistentVolume"

    @classmethod
    def parse(cls, reader: FieldReader) -> PersistentVolume:
        spec = reader.obj("spec")
        required = spec.obj("nodeAffinity").obj("required")
        driver = spec.obj("csi").string("driver")
        if not driver and spec.has("awsElasticBlockStore"):
            driver = "ebs.csi.aws.com"  # translated as Karpenter's driverFromVolume does
        return cls(
            metadata=ObjectMeta.parse(reader.obj("metadata"), namespaced=False),
            node_terms=required.items("nodeSelectorTerms", read_match_expressions),
            csi_driver=driver,
        )


def _deletes_claims(retention: FieldReader, key: str) -> bool:
    """Whether a StatefulSet's claim retention policy says ``Delete`` for ``key`` (default Retain)."""
    policy = retention.string(key, "Retain")
    if policy not in ("Retain", "Delete"):
        raise retention.error(key, f"must be Retain or Delete, got {policy!r}")
    return policy == "Delete"


@dataclass(frozen=True, slots=True)
class StatefulSet(ScaledWorkload):
    """A ScaledWorkload whose pods have stable names and each their own volumes.

    Pod ``<name>-<ordinal>`` mounts the claim ``<template>-<name>-<ordinal>``
    made from each of ``volume_claim_templates``; the claims outlive their
    pods (the default Retain policy), which is what keeps a pod with a zonal
    volume in its zone. The ordinals run from ``spec.ordinals.start`` (0
    unless set) for ``replicas`` pods.

    ``persistentVolumeClaimRetentionPolicy`` may say ``Delete`` instead:
    ``whenDeleted`` deletes the claims with the StatefulSet, ``whenScaled``
    deletes the claims of the pods a scale-down removes, so a pod that comes
    back later gets a new volume, in whatever zone it lands.
    """

    volume_claim_templates: tuple[PersistentVolumeClaim, ...] = ()
    # OrderedReady (the default) starts pod N+1 only when pod N runs; Parallel starts all at once.
    parallel: bool = False
    first_ordinal: int = 0
    delete_claims_when_deleted: bool = False
    delete_claims_when_scaled: bool = False

    @property
    def ordinals(self) -> range:
        """The ordinals of the pods the StatefulSet wants, in the order it creates them."""
        return range(self.first_ordinal, self.first_ordinal + self.replicas)

    kind = "StatefulSet"

    @classmethod
    def parse(cls, reader: FieldReader) -> StatefulSet:
        workload = ScaledWorkload.parse(reader)
        spec = reader.obj("spec")
        policy = spec.string("podManagementPolicy", "OrderedReady")
        if policy not in ("OrderedReady", "Parallel"):
            raise spec.error("podManagementPolicy", f"must be OrderedReady or Parallel, got {policy!r}")
        namespace = workload.metadata.namespace
        retention = spec.obj("persistentVolumeClaimRetentionPolicy")

        def claim_template(item: FieldReader) -> PersistentVolumeClaim:
            claim = PersistentVolumeClaim.parse(item)
            return dataclasses.replace(claim, metadata=claim.metadata.with_changes(namespace=namespace))

        return cls(
            metadata=workload.metadata,
            replicas=workload.replicas,
            selector=workload.selector,
            template=workload.template,
            volume_claim_templates=spec.items("volumeClaimTemplates", claim_template),
            parallel=policy == "Parallel",
            first_ordinal=_non_negative(spec.obj("ordinals"), "start") or 0,
            delete_claims_when_deleted=_deletes_claims(retention, "whenDeleted"),
            delete_claims_when_scaled=_deletes_claims(retention, "whenScaled"),
        )


@dataclass(frozen=True, slots=True)
class JobStatus:
    """What the Job controller records: pods counted as succeeded, and when the Job completed."""

    succeeded: int = 0
    completion_time: float | None = None

    @property
    def complete(self) -> bool:
        return self.completion_time is not None


@dataclass(frozen=True, slots=True)
class Job:
    """A batch/v1 Job: ``completions`` pods must succeed, at most ``parallelism`` at a time.

    Without ``completions`` the Job is done when its ``parallelism`` pods
    have succeeded (a work queue whose workers all finish). ``backoffLimit``
    and the other failure settings are read but not simulated: simulated
    pods do not fail.
    """

    metadata: ObjectMeta
    template: PodTemplate
    completions: int | None = 1
    parallelism: int = 1
    suspend: bool = False
    backoff_limit: int = 6
    status: JobStatus = field(default_factory=JobStatus)

    kind = "Job"

    @classmethod
    def parse(cls, reader: FieldReader) -> Job:
        spec = reader.obj("spec")
        parallelism = _non_negative(spec, "parallelism")
        backoff_limit = _non_negative(spec, "backoffLimit")
        status = reader.obj("status")
        return cls(
            metadata=ObjectMeta.parse(reader.obj("metadata"), namespaced=True),
            template=PodTemplate.parse(spec.obj("template")),
            completions=_non_negative(spec, "completions"),
            parallelism=1 if parallelism is None else parallelism,
            suspend=spec.boolean("suspend"),
            backoff_limit=6 if backoff_limit is None else backoff_limit,
            status=JobStatus(succeeded=_non_negative(status, "succeeded") or 0),
        )

    @property
    def wanted_successes(self) -> int:
        """How many pods must succeed for the Job to be complete."""
        return self.parallelism if self.completions is None else self.completions

    def with_changes(self, **changes: object) -> Job:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


CONCURRENCY_POLICIES = ("Allow", "Forbid", "Replace")


@dataclass(frozen=True, slots=True)
class CronJobStatus:
    """When the CronJob last created a Job (the fire it was for)."""

    last_schedule_time: float | None = None


@dataclass(frozen=True, slots=True)
class CronJob:
    """A batch/v1 CronJob: a Job from ``job_template`` at each fire of ``schedule`` (UTC)."""

    metadata: ObjectMeta
    schedule: str
    job_template: Job
    suspend: bool = False
    concurrency_policy: str = "Allow"
    # How many complete Jobs are kept; older ones are deleted, with their pods.
    successful_jobs_history_limit: int = 3
    status: CronJobStatus = field(default_factory=CronJobStatus)

    kind = "CronJob"

    @classmethod
    def parse(cls, reader: FieldReader) -> CronJob:
        metadata = ObjectMeta.parse(reader.obj("metadata"), namespaced=True)
        spec = reader.obj("spec")
        schedule = read_schedule(spec, "schedule", every=True)
        if schedule is None:
            raise spec.error("schedule", "required")
        time_zone = spec.string("timeZone", "UTC")
        if time_zone not in ("UTC", "Etc/UTC"):
            raise spec.error("timeZone", f"only UTC is simulated, got {time_zone!r}")
        policy = spec.string("concurrencyPolicy", "Allow")
        if policy not in CONCURRENCY_POLICIES:
            raise spec.error("concurrencyPolicy", f"must be one of {', '.join(CONCURRENCY_POLICIES)}")
        job_template = spec.obj("jobTemplate")
        job_metadata = job_template.obj("metadata")
        job = Job.parse(
            FieldReader(
                {
                    "metadata": {
                        "name": metadata.name,
                        "namespace": metadata.namespace,
                        "labels": job_metadata.raw("labels"),
                        "annotations": job_metadata.raw("annotations"),
                    },
                    "spec": job_template.raw("spec") or {},
                },
                spec.child_path("jobTemplate"),
            )
        )
        last = reader.obj("status").string("lastScheduleTime")
        history_limit = _non_negative(spec, "successfulJobsHistoryLimit")
        return cls(
            metadata=metadata,
            schedule=schedule,
            job_template=job,
            suspend=spec.boolean("suspend"),
            concurrency_policy=policy,
            successful_jobs_history_limit=3 if history_limit is None else history_limit,
            status=CronJobStatus(parse_timestamp(last, "status.lastScheduleTime") if last else None),
        )

    def with_changes(self, **changes: object) -> CronJob:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


# Classes every cluster has, as the apiserver creates them at start-up.
SYSTEM_PRIORITY_CLASSES = {"system-node-critical": 2000001000, "system-cluster-critical": 2000000000}


@dataclass(frozen=True, slots=True)
class PriorityClass:
    """A scheduling.k8s.io/v1 PriorityClass: the priority its pods get when they are created."""

    metadata: ObjectMeta
    value: int
    global_default: bool = False

    kind = "PriorityClass"

    @classmethod
    def parse(cls, reader: FieldReader) -> PriorityClass:
        value = reader.integer("value")
        if value is None:
            raise reader.error("value", "required")
        if value > 1_000_000_000:
            raise reader.error("value", "must not be more than 1000000000 (higher values are reserved)")
        return cls(
            metadata=ObjectMeta.parse(reader.obj("metadata"), namespaced=False),
            value=value,
            global_default=reader.boolean("globalDefault"),
        )


@dataclass(frozen=True, slots=True)
class Namespace:
    """A Namespace; its labels are what pod affinity's ``namespaceSelector`` selects by."""

    metadata: ObjectMeta

    kind = "Namespace"

    @classmethod
    def parse(cls, reader: FieldReader) -> Namespace:
        return cls(ObjectMeta.parse(reader.obj("metadata"), namespaced=False))

    @property
    def labels(self) -> dict[str, str]:
        """The labels, with the ``kubernetes.io/metadata.name`` label the apiserver always sets."""
        return {**self.metadata.labels, NAMESPACE_NAME_LABEL: self.metadata.name}
