"""The ``autoscaling/v2`` HorizontalPodAutoscaler, as far as the simulator drives it.

What is read: ``scaleTargetRef`` (a Deployment or StatefulSet), ``minReplicas``
(default 1), ``maxReplicas``, ``metrics`` of type ``Resource`` (``cpu`` or
``memory``, target ``Utilization`` or ``AverageValue``) and ``behavior``.
Defaults are the API server's: no metrics means one, CPU at 80% utilization;
``scaleUp`` waits 0 s and allows the larger of +100% and +4 pods per 15 s;
``scaleDown`` waits 300 s and allows -100% per 15 s; ``selectPolicy`` is Max.

Errors are the ones the API server's validation gives (a missing target,
``maxReplicas`` below ``minReplicas``, an unknown metric type, a policy value
out of range), raised with the field path so the loader can name the file and
the object. Metric types the API knows but the simulator has no load for
(``Pods``, ``Object``, ``External``, ``ContainerResource``) are kept by name:
the object is valid, and the simulator says once that it ignores them.
"""

from __future__ import annotations

from dataclasses import dataclass

from karpy.api._reader import FieldReader, ManifestError
from karpy.api.meta import ObjectMeta
from karpy.api.quantity import parse_resource_list

API_VERSION = "autoscaling/v2"
KIND = "HorizontalPodAutoscaler"
TARGET_KINDS = ("Deployment", "StatefulSet")
RESOURCE_METRIC = "Resource"
# Metric types the API accepts that the simulator has no model of.
OTHER_METRIC_TYPES = ("Pods", "Object", "External", "ContainerResource")
RESOURCES = ("cpu", "memory")
UTILIZATION = "Utilization"
AVERAGE_VALUE = "AverageValue"
POLICY_PODS = "Pods"
POLICY_PERCENT = "Percent"
SELECT_MAX, SELECT_MIN, SELECT_DISABLED = "Max", "Min", "Disabled"
# The API server's bounds on behavior fields.
MAX_STABILIZATION_WINDOW = 3600
MAX_POLICY_PERIOD = 1800
DEFAULT_CPU_UTILIZATION = 80


@dataclass(frozen=True, slots=True)
class ScalingPolicy:
    type: str  # POLICY_PODS or POLICY_PERCENT
    value: int
    period_seconds: int


@dataclass(frozen=True, slots=True)
class ScalingRules:
    stabilization_window_seconds: int
    select_policy: str
    policies: tuple[ScalingPolicy, ...]


DEFAULT_SCALE_UP = ScalingRules(
    0, SELECT_MAX, (ScalingPolicy(POLICY_PERCENT, 100, 15), ScalingPolicy(POLICY_PODS, 4, 15))
)
DEFAULT_SCALE_DOWN = ScalingRules(300, SELECT_MAX, (ScalingPolicy(POLICY_PERCENT, 100, 15),))


@dataclass(frozen=True, slots=True)
class ResourceMetric:
    """A Resource metric: ``resource`` is cpu or memory.

    ``average_utilization`` is a percentage of the pods' requests;
    ``average_value`` is per pod, in millicores for cpu and bytes for memory.
    Exactly one is set.
    """

    resource: str
    average_utilization: int | None = None
    average_value: int | None = None


@dataclass(frozen=True, slots=True)
class HorizontalPodAutoscaler:
    metadata: ObjectMeta
    target_kind: str
    target_name: str
    min_replicas: int
    max_replicas: int
    metrics: tuple[ResourceMetric, ...]
    scale_up: ScalingRules = DEFAULT_SCALE_UP
    scale_down: ScalingRules = DEFAULT_SCALE_DOWN
    # Metric types kept by name only (see the module's docstring).
    unsimulated_metrics: tuple[str, ...] = ()

    kind = "HorizontalPodAutoscaler"

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"

    @property
    def target_key(self) -> str:
        return f"{self.metadata.namespace}/{self.target_name}"

    @classmethod
    def parse(cls, reader: FieldReader) -> HorizontalPodAutoscaler:
        spec = reader.obj("spec")
        if not spec.has("scaleTargetRef"):
            raise spec.error("scaleTargetRef", "required")
        target = spec.obj("scaleTargetRef")
        target_kind = target.required_str("kind")
        if target_kind not in TARGET_KINDS:
            raise target.error(
                "kind", f"the simulator scales {' or '.join(TARGET_KINDS)}, not {target_kind!r}"
            )
        target_name = target.required_str("name")
        target.string("apiVersion")
        min_replicas = spec.integer("minReplicas", 1)
        assert min_replicas is not None
        if min_replicas < 1:
            raise spec.error("minReplicas", "must be greater than or equal to 1")
        max_replicas = spec.integer("maxReplicas")
        if max_replicas is None:
            raise spec.error("maxReplicas", "required")
        if max_replicas < min_replicas:
            raise spec.error("maxReplicas", f"must be greater than or equal to minReplicas ({min_replicas})")
        metrics: list[ResourceMetric] = []
        others: list[str] = []
        for item in spec.items("metrics", lambda item: item):
            metric_type = item.required_str("type")
            if metric_type in OTHER_METRIC_TYPES:
                others.append(metric_type)
            elif metric_type != RESOURCE_METRIC:
                known = ", ".join((RESOURCE_METRIC, *OTHER_METRIC_TYPES))
                raise item.error("type", f"must be one of {known}, not {metric_type!r}")
            else:
                metrics.append(_resource_metric(item.obj("resource")))
        if not metrics and not others:
            metrics.append(ResourceMetric("cpu", average_utilization=DEFAULT_CPU_UTILIZATION))
        behavior = spec.obj("behavior")
        return cls(
            metadata=ObjectMeta.parse(reader.obj("metadata"), namespaced=True),
            target_kind=target_kind,
            target_name=target_name,
            min_replicas=min_replicas,
            max_replicas=max_replicas,
            metrics=tuple(metrics),
            scale_up=_rules(behavior, "scaleUp", DEFAULT_SCALE_UP),
            scale_down=_rules(behavior, "scaleDown", DEFAULT_SCALE_DOWN),
            unsimulated_metrics=tuple(others),
        )


def _resource_metric(resource: FieldReader) -> ResourceMetric:
    name = resource.required_str("name")
    if name not in RESOURCES:
        raise resource.error("name", f"the simulator models {' and '.join(RESOURCES)}, not {name!r}")
    target = resource.obj("target")
    target_type = target.required_str("type")
    if target_type == UTILIZATION:
        utilization = target.integer("averageUtilization")
        if utilization is None or utilization < 1:
            raise target.error("averageUtilization", "required, greater than 0, for type Utilization")
        return ResourceMetric(name, average_utilization=utilization)
    if target_type == AVERAGE_VALUE:
        text = target.scalar_str("averageValue")
        if text is None:
            raise target.error("averageValue", "required for type AverageValue")
        try:
            amount = parse_resource_list({name: text})[name]
        except ValueError as error:
            raise target.error("averageValue", str(error)) from error
        if amount <= 0:
            raise target.error("averageValue", "must be positive")
        return ResourceMetric(name, average_value=amount)
    raise target.error(
        "type", f"must be {UTILIZATION} or {AVERAGE_VALUE} for a Resource metric, not {target_type!r}"
    )


def _rules(behavior: FieldReader, key: str, default: ScalingRules) -> ScalingRules:
    if not behavior.has(key):
        return default
    rules = behavior.obj(key)
    window = rules.integer("stabilizationWindowSeconds", default.stabilization_window_seconds)
    assert window is not None
    if not 0 <= window <= MAX_STABILIZATION_WINDOW:
        raise rules.error("stabilizationWindowSeconds", f"must be between 0 and {MAX_STABILIZATION_WINDOW}")
    select = rules.string("selectPolicy", SELECT_MAX)
    if select not in (SELECT_MAX, SELECT_MIN, SELECT_DISABLED):
        raise rules.error("selectPolicy", f"must be Max, Min or Disabled, not {select!r}")

    def policy(item: FieldReader) -> ScalingPolicy:
        policy_type = item.required_str("type")
        if policy_type not in (POLICY_PODS, POLICY_PERCENT):
            raise item.error("type", f"must be Pods or Percent, not {policy_type!r}")
        value = item.integer("value")
        if value is None or value <= 0:
            raise item.error("value", "must be greater than zero")
        period = item.integer("periodSeconds")
        if period is None or not 0 < period <= MAX_POLICY_PERIOD:
            raise item.error("periodSeconds", f"must be greater than zero and at most {MAX_POLICY_PERIOD}")
        return ScalingPolicy(policy_type, value, period)

    policies = rules.items("policies", policy) if rules.has("policies") else default.policies
    if not policies and select != SELECT_DISABLED:
        raise rules.error("policies", "must specify at least one policy")
    return ScalingRules(window, select, policies)


__all__ = [
    "API_VERSION",
    "DEFAULT_SCALE_DOWN",
    "DEFAULT_SCALE_UP",
    "HorizontalPodAutoscaler",
    "ManifestError",
    "ResourceMetric",
    "ScalingPolicy",
    "ScalingRules",
]
