"""What admission does to a pod's resources when it is created: LimitRange defaults, RuntimeClass overhead.

A pod does not run as its template says. When the API server creates it,
the LimitRanger admission plugin fills each container's missing limits with
the namespace's LimitRange ``default`` and its missing requests with
``defaultRequest``, and the RuntimeClass plugin sets the pod's overhead (and
adds the class's node selector and tolerations) for a pod that names a
``runtimeClassName``. A pod read back from the API server has been through
that already; a pod sized from a template has not: a DaemonSet's pod on a
node karpy is about to launch, a Deployment's replica the simulator creates.
Sizing those from the template alone is what made karpy launch a node too
small for a DaemonSet pod that LimitRange defaults to 2 CPUs, again and
again (Karpenter's regression specs "should account for LimitRange
Default/DefaultRequest on daemonSet pods for resources").

:class:`Admission` applies both rules to a pod spec, as the plugins do, so
``karpy run`` (DaemonSet overhead on new nodes) and ``karpy simulate`` (its
store admits every pod it creates, and the same DaemonSet overhead) size
pods by one rule:

- a LimitRange ``Container`` item, as the API server defaults it when it is
  stored: a ``default`` (limit) missing for a resource with a ``max`` is the
  max, a ``defaultRequest`` missing for a resource with a ``default`` is the
  default, and one still missing for a resource with a ``min`` is the min;
- per container (init containers too), in the order the LimitRanges are
  listed (by name), each limit the container lacks is the default and each
  request it lacks the default request; a resource left with a limit and no
  request requests its limit, as it would had the limit been written;
- a RuntimeClass's ``overhead.podFixed`` is the pod's overhead; a pod naming
  a class that does not exist, or with an overhead of its own that differs,
  is refused, in the words of the plugin.

A default limit below a container's own request makes the pod invalid, and
it is refused as the API server's validation refuses it. The LimitRange's
``min``/``max`` checks (which refuse a pod rather than change it) are not
applied.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from karpy.api._reader import FieldReader
from karpy.api.core import DaemonSet, Pod, PodSpec, PodTemplate, read_resources
from karpy.api.meta import ObjectMeta
from karpy.api.podresources import PodResources
from karpy.api.quantity import ResourceAmounts, format_amount
from karpy.api.taints import Toleration

LIMIT_TYPE_CONTAINER = "Container"
LIMIT_TYPES = ("Container", "Pod", "PersistentVolumeClaim")
# The PodOverhead rule's refusal, also said by offline validation of a workload's pod template.
OVERHEAD_WITHOUT_RUNTIME_CLASS = (
    "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"
)


class AdmissionRefusedError(ValueError):
    """An admission plugin refuses the pod as written (the API server's 403); the text is its message."""


@dataclass(frozen=True, slots=True)
class LimitRangeItem:
    type: str
    default: ResourceAmounts = field(default_factory=dict)
    default_request: ResourceAmounts = field(default_factory=dict)
    max: ResourceAmounts = field(default_factory=dict)
    min: ResourceAmounts = field(default_factory=dict)

    @classmethod
    def parse(cls, reader: FieldReader) -> LimitRangeItem:
        limit_type = reader.required_str("type")
        if limit_type not in LIMIT_TYPES:
            raise reader.error("type", f'Unsupported value: "{limit_type}": supported values: {LIMIT_TYPES}')
        item = cls(
            type=limit_type,
            default=read_resources(reader, "default"),
            default_request=read_resources(reader, "defaultRequest"),
            max=read_resources(reader, "max"),
            min=read_resources(reader, "min"),
        )
        return item.defaulted()

    def defaulted(self) -> LimitRangeItem:
        """The item as the API server stores it (SetDefaults_LimitRangeItem): Container items only."""
        if self.type != LIMIT_TYPE_CONTAINER:
            return self
        default = {**self.max, **self.default}
        default_request = {**self.min, **default, **self.default_request}
        return dataclasses.replace(self, default=default, default_request=default_request)


@dataclass(frozen=True, slots=True)
class LimitRange:
    """A v1 LimitRange: what it defaults containers to in its namespace."""

    metadata: ObjectMeta
    limits: tuple[LimitRangeItem, ...] = ()

    kind = "LimitRange"

    @classmethod
    def parse(cls, reader: FieldReader) -> LimitRange:
        return cls(
            metadata=ObjectMeta.parse(reader.obj("metadata"), namespaced=True),
            limits=reader.obj("spec").items("limits", LimitRangeItem.parse),
        )

    def container_defaults(self) -> tuple[ResourceAmounts, ResourceAmounts]:
        """(requests, limits) its Container items give a container that lacks them (a later item wins)."""
        requests: ResourceAmounts = {}
        limits: ResourceAmounts = {}
        for item in self.limits:
            if item.type == LIMIT_TYPE_CONTAINER:
                requests |= item.default_request
                limits |= item.default
        return requests, limits


@dataclass(frozen=True, slots=True)
class RuntimeClass:
    """A node.k8s.io/v1 RuntimeClass: the overhead, node selector and tolerations its pods get."""

    metadata: ObjectMeta
    handler: str
    overhead: ResourceAmounts = field(default_factory=dict)
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()

    kind = "RuntimeClass"

    @classmethod
    def parse(cls, reader: FieldReader) -> RuntimeClass:
        scheduling = reader.obj("scheduling")
        return cls(
            metadata=ObjectMeta.parse(reader.obj("metadata"), namespaced=False),
            handler=reader.required_str("handler"),
            overhead=read_resources(reader.obj("overhead"), "podFixed"),
            node_selector=scheduling.str_map("nodeSelector"),
            tolerations=scheduling.items("tolerations", Toleration.parse),
        )


@dataclass(frozen=True, slots=True)
class Admission:
    """The LimitRanges (by namespace, in list order) and RuntimeClasses (by name) pods are admitted under."""

    limit_ranges: Mapping[str, tuple[LimitRange, ...]] = field(default_factory=dict)
    runtime_classes: Mapping[str, RuntimeClass] = field(default_factory=dict)

    @classmethod
    def of(cls, limit_ranges: Iterable[LimitRange], runtime_classes: Iterable[RuntimeClass]) -> Admission:
        by_namespace: dict[str, list[LimitRange]] = {}
        for limit_range in sorted(limit_ranges, key=lambda lr: (lr.metadata.namespace, lr.metadata.name)):
            by_namespace.setdefault(limit_range.metadata.namespace, []).append(limit_range)
        return cls(
            {namespace: tuple(ranges) for namespace, ranges in by_namespace.items()},
            {runtime_class.metadata.name: runtime_class for runtime_class in runtime_classes},
        )

    def spec(self, spec: PodSpec, namespace: str, pod_name: str = "") -> PodSpec:
        """``spec`` as the pod the API server creates from it in ``namespace`` (the same object if unchanged).

        Raises :class:`AdmissionRefusedError` when the RuntimeClass plugin would refuse it, or
        validation the pod the LimitRange defaults made of it.
        """
        resources = spec.resources
        for limit_range in self.limit_ranges.get(namespace, ()):
            requests, limits = limit_range.container_defaults()
            if requests or limits:
                containers = tuple(c.with_defaults(requests, limits) for c in resources.containers)
                if any(new is not old for new, old in zip(containers, resources.containers, strict=True)):
                    resources = dataclasses.replace(resources, containers=containers)
        if resources is not spec.resources:
            _check_requests_within_limits(resources, pod_name)
            spec = dataclasses.replace(spec, resources=resources, requests=resources.effective_requests())
        if spec.runtime_class_name or resources.overhead:
            spec = self._runtime_class(spec, pod_name)
        return spec

    def _runtime_class(self, spec: PodSpec, pod_name: str) -> PodSpec:
        """What the RuntimeClass plugin does: overhead set, node selector and tolerations merged."""
        if not spec.runtime_class_name:
            raise AdmissionRefusedError(_forbidden(pod_name, OVERHEAD_WITHOUT_RUNTIME_CLASS))
        runtime_class = self.runtime_classes.get(spec.runtime_class_name)
        if runtime_class is None:
            raise AdmissionRefusedError(
                _forbidden(pod_name, f'pod rejected: RuntimeClass "{spec.runtime_class_name}" not found')
            )
        resources = spec.resources
        if resources.overhead and resources.overhead != runtime_class.overhead:
            raise AdmissionRefusedError(
                _forbidden(
                    pod_name, "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"
                )
            )
        for key, value in runtime_class.node_selector.items():
            if key in spec.node_selector and spec.node_selector[key] != value:
                raise AdmissionRefusedError(
                    _forbidden(
                        pod_name,
                        f"conflict: runtimeClass.scheduling.nodeSelector[{key}] = {value};"
                        f" pod.spec.nodeSelector[{key}] = {spec.node_selector[key]}",
                    )
                )
        added = tuple(t for t in runtime_class.tolerations if t not in spec.tolerations)
        if runtime_class.overhead and resources.overhead != runtime_class.overhead:
            resources = dataclasses.replace(resources, overhead=dict(runtime_class.overhead))
        selected = spec.node_selector.items() >= runtime_class.node_selector.items()
        if not added and resources is spec.resources and selected:
            return spec
        return dataclasses.replace(
            spec,
            node_selector={**spec.node_selector, **runtime_class.node_selector},
            tolerations=(*spec.tolerations, *added),
            resources=resources,
            requests=resources.effective_requests(),
        )

    def pod(self, pod: Pod) -> Pod:
        """``pod`` as created: its spec admitted in its namespace."""
        spec = self.spec(pod.spec, pod.metadata.namespace, pod.metadata.name)
        return pod if spec is pod.spec else pod.with_changes(spec=spec)

    def daemonset(self, daemonset: DaemonSet) -> DaemonSet | None:
        """``daemonset`` with the template its pods will have once admitted; None if they would be refused."""
        try:
            spec = self.spec(daemonset.template.spec, daemonset.metadata.namespace)
        except AdmissionRefusedError:
            return None
        if spec is daemonset.template.spec:
            return daemonset
        template = daemonset.template
        return dataclasses.replace(
            daemonset, template=PodTemplate(template.labels, template.annotations, spec)
        )

    def daemonsets(self, daemonsets: Iterable[DaemonSet]) -> tuple[DaemonSet, ...]:
        """The DaemonSets whose pods admission lets be created, sized as they will be."""
        admitted = (self.daemonset(daemonset) for daemonset in daemonsets)
        return tuple(daemonset for daemonset in admitted if daemonset is not None)


def _check_requests_within_limits(resources: PodResources, pod_name: str) -> None:
    """What validation then says of a defaulted limit below the container's own request."""
    index = {False: 0, True: 0}
    for container in resources.containers:
        field = f"spec.{'initContainers' if container.init else 'containers'}[{index[container.init]}]"
        index[container.init] += 1
        for name, request in sorted(container.requests.items()):
            limit = container.limits.get(name)
            if limit is not None and request > limit:
                raise AdmissionRefusedError(
                    f'Pod "{pod_name}" is invalid: {field}.resources.requests: Invalid value:'
                    f' "{format_amount(name, request)}": must be less than or equal to {name} limit'
                    f" of {format_amount(name, limit)}"
                )


def _forbidden(pod_name: str, message: str) -> str:
    return f'pods "{pod_name}" is forbidden: {message}' if pod_name else message
