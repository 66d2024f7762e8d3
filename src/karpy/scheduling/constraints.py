"""A pod's scheduling constraints, typed, with its preferences in relaxable form.

Pods carry their inter-pod constraints (topology spread, pod affinity and
anti-affinity) as Kubernetes wrote them; this module reads them once per pod
into small typed records the solver can evaluate quickly, and reports
malformed ones as a reason instead of an exception, so one bad pod never
stops a scheduling pass.

Preferences are handled as Karpenter does: at first the solver treats every
preference as if it were required (preferred node affinity, preferred pod
affinity and anti-affinity, ScheduleAnyway spread, PreferNoSchedule taints),
because honouring them is what the user asked for when there is room. When a
pod fits nowhere, :meth:`PodConstraints.relax` drops one preference, in
Karpenter's order, and the pod is tried again:

1. the first of several required node-affinity terms (they are ORed, so
   dropping one widens nothing else);
2. a preferred pod-affinity term (lowest weight first);
3. a preferred pod anti-affinity term (lowest weight first);
4. a preferred node-affinity term (lowest weight first);
5. a ScheduleAnyway topology spread constraint;
6. PreferNoSchedule taints (tolerated from then on).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from karpy.api.core import NAMESPACE_NAME_LABEL, LabelSelector, Pod
from karpy.api.requirements import Requirements
from karpy.api.taints import PREFER_NO_SCHEDULE, Toleration

DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
HONOR = "Honor"
IGNORE = "Ignore"


# Every namespace's labels by its name (``kubernetes.io/metadata.name`` included).
NamespaceLabels = Mapping[str, Mapping[str, str]]


class ConstraintError(ValueError):
    """A pod constraint that cannot be read; the pod is reported unschedulable."""


@dataclass(frozen=True, slots=True)
class PodSelector:
    """Which pods a term or constraint counts: a label selector within some namespaces.

    ``namespaces`` None means every namespace. A namespaceSelector is
    resolved, when the cluster's namespaces and their labels are given, into
    the namespaces it selects now (as kube-scheduler resolves it from its
    namespace lister), and kept as ``namespaces``; without them it is matched
    against the ``kubernetes.io/metadata.name`` label alone, the one label
    every namespace has.
    """

    selector: LabelSelector
    namespaces: frozenset[str] | None
    namespace_selector: LabelSelector | None = None

    def matches(self, pod: Pod) -> bool:
        return self.matches_labels(pod.metadata.namespace, pod.metadata.labels)

    def matches_labels(self, namespace: str, labels: Mapping[str, str]) -> bool:
        if self.namespace_selector is not None:
            in_namespace = self.namespace_selector.matches({NAMESPACE_NAME_LABEL: namespace})
            if self.namespaces is not None:
                in_namespace = in_namespace or namespace in self.namespaces
        else:
            in_namespace = self.namespaces is None or namespace in self.namespaces
        return in_namespace and self.selector.matches(labels)


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    topology_key: str
    max_skew: int
    hard: bool
    selects: PodSelector
    min_domains: int | None = None
    honor_node_affinity: bool = True
    honor_node_taints: bool = False


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    topology_key: str
    selects: PodSelector
    weight: int = 0  # 0 for a required term


@dataclass(frozen=True, slots=True)
class PodConstraints:
    """Everything the solver checks for one pod, preferences included until relaxed."""

    pod: Pod
    node_alternatives: tuple[Requirements, ...]
    tolerations: tuple[Toleration, ...]
    spread: tuple[SpreadConstraint, ...] = ()
    affinity: tuple[AffinityTerm, ...] = ()
    anti_affinity: tuple[AffinityTerm, ...] = ()
    host_ports: tuple[int, ...] = ()
    # Preferences still being honoured, in the order they are given up.
    preferred_affinity: tuple[AffinityTerm, ...] = ()
    preferred_anti_affinity: tuple[AffinityTerm, ...] = ()
    preferred_node_terms: tuple[Requirements, ...] = ()
    soft_spread: tuple[SpreadConstraint, ...] = ()
    tolerate_prefer_no_schedule: bool = False
    relaxed: tuple[str, ...] = field(default=())

    def all_spread(self) -> tuple[SpreadConstraint, ...]:
        return self.spread + self.soft_spread

    def all_affinity(self) -> tuple[AffinityTerm, ...]:
        return self.affinity + self.preferred_affinity

    def all_anti_affinity(self) -> tuple[AffinityTerm, ...]:
        return self.anti_affinity + self.preferred_anti_affinity

    def node_options(self) -> tuple[Requirements, ...]:
        """Node requirement alternatives with the preferred node terms still held ANDed in."""
        if not self.preferred_node_terms:
            return self.node_alternatives
        options = []
        for alternative in self.node_alternatives:
            combined = alternative.copy()
            for term in self.preferred_node_terms:
                combined = combined.intersection(term)
            options.append(combined)
        return tuple(options)

    def effective_tolerations(self) -> tuple[Toleration, ...]:
        if self.tolerate_prefer_no_schedule:
            return (*self.tolerations, Toleration(operator="Exists", effect=PREFER_NO_SCHEDULE))
        return self.tolerations

    @property
    def has_preferences(self) -> bool:
        return bool(
            len(self.node_alternatives) > 1
            or self.preferred_affinity
            or self.preferred_anti_affinity
            or self.preferred_node_terms
            or self.soft_spread
            or not self.tolerate_prefer_no_schedule
        )

    def for_pod(self, pod: Pod) -> PodConstraints:
        """The same constraints for an alike pod (a replica of the same spec and labels).

        A field-by-field copy: ``dataclasses.replace`` re-runs ``__init__``
        with every field as a keyword, which costs more than the rest of a
        typical placement step when done for each of thousands of replicas.
        """
        if pod is self.pod:
            return self
        duplicate = object.__new__(PodConstraints)
        for name in _FIELD_NAMES:
            object.__setattr__(duplicate, name, getattr(self, name))
        object.__setattr__(duplicate, "pod", pod)
        return duplicate

    def without_preferences(self) -> PodConstraints:
        """These constraints with no preferred affinity term and no ScheduleAnyway spread, as
        PREFERENCE_POLICY=Ignore plans (:mod:`karpy.scheduling.policy`); PreferNoSchedule taints
        are still avoided until relaxed, and nothing dropped counts as relaxed."""
        preferred = self.preferred_affinity or self.preferred_anti_affinity or self.preferred_node_terms
        if not (preferred or self.soft_spread):
            return self
        return dataclasses.replace(
            self, preferred_affinity=(), preferred_anti_affinity=(), preferred_node_terms=(), soft_spread=()
        )

    def relax(self) -> PodConstraints | None:
        """These constraints with one preference given up, or None when none is left."""
        if len(self.node_alternatives) > 1:
            return dataclasses.replace(
                self,
                node_alternatives=self.node_alternatives[1:],
                relaxed=(*self.relaxed, "a required node affinity term"),
            )
        if self.preferred_affinity:
            return dataclasses.replace(
                self,
                preferred_affinity=_without_lightest(self.preferred_affinity),
                relaxed=(*self.relaxed, "a preferred pod affinity term"),
            )
        if self.preferred_anti_affinity:
            return dataclasses.replace(
                self,
                preferred_anti_affinity=_without_lightest(self.preferred_anti_affinity),
                relaxed=(*self.relaxed, "a preferred pod anti-affinity term"),
            )
        if self.preferred_node_terms:
            return dataclasses.replace(
                self,
                preferred_node_terms=self.preferred_node_terms[:-1],
                relaxed=(*self.relaxed, "a preferred node affinity term"),
            )
        if self.soft_spread:
            return dataclasses.replace(
                self,
                soft_spread=self.soft_spread[1:],
                relaxed=(*self.relaxed, "a ScheduleAnyway topology spread constraint"),
            )
        if not self.tolerate_prefer_no_schedule:
            return dataclasses.replace(
                self,
                tolerate_prefer_no_schedule=True,
                relaxed=(*self.relaxed, "PreferNoSchedule taints"),
            )
        return None


_FIELD_NAMES = tuple(item.name for item in dataclasses.fields(PodConstraints))


def _without_lightest(terms: tuple[AffinityTerm, ...]) -> tuple[AffinityTerm, ...]:
    lightest = min(range(len(terms)), key=lambda index: (terms[index].weight, index))
    return terms[:lightest] + terms[lightest + 1 :]


def _mapping(value: object, where: str) -> Mapping[str, object]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConstraintError(f"{where}: expected an object")
    return value


def _sequence(value: object, where: str) -> Sequence[object]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ConstraintError(f"{where}: expected a list")
    return value


def _selector(value: object, where: str) -> LabelSelector:
    raw = _mapping(value, where)
    labels = _mapping(raw.get("matchLabels"), f"{where}.matchLabels")
    expressions: list[tuple[str, str, tuple[str, ...]]] = []
    for index, item in enumerate(_sequence(raw.get("matchExpressions"), f"{where}.matchExpressions")):
        expression = _mapping(item, f"{where}.matchExpressions[{index}]")
        key = expression.get("key")
        operator = expression.get("operator")
        values = _sequence(expression.get("values"), f"{where}.matchExpressions[{index}].values")
        if not isinstance(key, str) or not key:
            raise ConstraintError(f"{where}.matchExpressions[{index}].key: required")
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise ConstraintError(
                f"{where}.matchExpressions[{index}].operator: unknown operator {operator!r}"
            )
        expressions.append((key, str(operator), tuple(str(value) for value in values)))
    return LabelSelector({str(k): str(v) for k, v in labels.items()}, tuple(expressions))


def _with_match_label_keys(selector: LabelSelector, keys: Sequence[object], pod: Pod) -> LabelSelector:
    """matchLabelKeys: the selector also requires the pod's own values of these keys."""
    if not keys:
        return selector
    labels = dict(selector.match_labels)
    expressions = list(selector.match_expressions)
    for key in keys:
        value = pod.metadata.labels.get(str(key))
        if value is not None:
            expressions.append((str(key), "In", (value,)))
    return LabelSelector(labels, tuple(expressions))


def _pod_selector(
    raw: Mapping[str, object], pod: Pod, where: str, namespace_labels: NamespaceLabels | None
) -> PodSelector:
    selector = _selector(raw.get("labelSelector"), f"{where}.labelSelector")
    selector = _with_match_label_keys(
        selector, _sequence(raw.get("matchLabelKeys"), f"{where}.matchLabelKeys"), pod
    )
    namespaces_raw = _sequence(raw.get("namespaces"), f"{where}.namespaces")
    namespace_selector_raw = raw.get("namespaceSelector")
    namespace_selector = (
        _selector(namespace_selector_raw, f"{where}.namespaceSelector")
        if namespace_selector_raw is not None
        else None
    )
    namespaces: frozenset[str] | None
    if namespace_selector is not None:
        # An empty namespaceSelector selects every namespace.
        empty = not namespace_selector.match_labels and not namespace_selector.match_expressions
        namespaces = None if empty else frozenset(str(n) for n in namespaces_raw)
        if empty:
            namespace_selector = None
        elif namespace_labels is not None and namespaces is not None:
            selected = (
                name for name, labels in namespace_labels.items() if namespace_selector.matches(labels)
            )
            namespaces = namespaces.union(selected)
            namespace_selector = None
    else:
        namespaces = frozenset(str(n) for n in namespaces_raw) or frozenset((pod.metadata.namespace,))
    return PodSelector(selector, namespaces, namespace_selector)


def _term(
    raw_item: object, pod: Pod, where: str, namespace_labels: NamespaceLabels | None, weight: int = 0
) -> AffinityTerm:
    raw = _mapping(raw_item, where)
    key = raw.get("topologyKey")
    if not isinstance(key, str) or not key:
        raise ConstraintError(f"{where}.topologyKey: required")
    return AffinityTerm(key, _pod_selector(raw, pod, where, namespace_labels), weight)


def _terms(
    raw: Mapping[str, object], pod: Pod, where: str, namespace_labels: NamespaceLabels | None
) -> tuple[list[AffinityTerm], list[AffinityTerm]]:
    required = [
        _term(item, pod, f"{where}.requiredDuringSchedulingIgnoredDuringExecution[{index}]", namespace_labels)
        for index, item in enumerate(
            _sequence(raw.get("requiredDuringSchedulingIgnoredDuringExecution"), f"{where}.required")
        )
    ]
    preferred: list[AffinityTerm] = []
    for index, item in enumerate(
        _sequence(raw.get("preferredDuringSchedulingIgnoredDuringExecution"), f"{where}.preferred")
    ):
        entry = _mapping(item, f"{where}.preferred[{index}]")
        weight = entry.get("weight", 1)
        if not isinstance(weight, int) or isinstance(weight, bool) or not 1 <= weight <= 100:
            raise ConstraintError(f"{where}.preferred[{index}].weight: must be an integer from 1 to 100")
        preferred.append(
            _term(
                entry.get("podAffinityTerm"),
                pod,
                f"{where}.preferred[{index}].podAffinityTerm",
                namespace_labels,
                weight,
            )
        )
    return required, preferred


def _spread(raw: Mapping[str, object], pod: Pod, where: str) -> SpreadConstraint:
    key = raw.get("topologyKey")
    if not isinstance(key, str) or not key:
        raise ConstraintError(f"{where}.topologyKey: required")
    max_skew = raw.get("maxSkew")
    if not isinstance(max_skew, int) or isinstance(max_skew, bool) or max_skew < 1:
        raise ConstraintError(f"{where}.maxSkew: must be a positive integer")
    when = raw.get("whenUnsatisfiable", DO_NOT_SCHEDULE)
    if when not in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY):
        raise ConstraintError(
            f"{where}.whenUnsatisfiable: must be DoNotSchedule or ScheduleAnyway, got {when!r}"
        )
    min_domains = raw.get("minDomains")
    if min_domains is not None and (not isinstance(min_domains, int) or min_domains < 1):
        raise ConstraintError(f"{where}.minDomains: must be a positive integer")
    affinity_policy = raw.get("nodeAffinityPolicy", HONOR)
    taints_policy = raw.get("nodeTaintsPolicy", IGNORE)
    for name, value in (("nodeAffinityPolicy", affinity_policy), ("nodeTaintsPolicy", taints_policy)):
        if value not in (HONOR, IGNORE):
            raise ConstraintError(f"{where}.{name}: must be Honor or Ignore, got {value!r}")
    selector = _selector(raw.get("labelSelector"), f"{where}.labelSelector")
    selector = _with_match_label_keys(
        selector, _sequence(raw.get("matchLabelKeys"), f"{where}.matchLabelKeys"), pod
    )
    return SpreadConstraint(
        topology_key=key,
        max_skew=max_skew,
        hard=when == DO_NOT_SCHEDULE,
        # Spread counts pods of the pod's own namespace.
        selects=PodSelector(selector, frozenset((pod.metadata.namespace,))),
        min_domains=min_domains if isinstance(min_domains, int) else None,
        honor_node_affinity=affinity_policy == HONOR,
        honor_node_taints=taints_policy == HONOR,
    )


def pod_constraints(
    pod: Pod, volume_terms: Sequence[Requirements] = (), namespace_labels: NamespaceLabels | None = None
) -> PodConstraints:
    """The typed constraints of ``pod``; raises ConstraintError on a malformed one.

    ``volume_terms`` are the node affinity terms (ORed) of the volumes the pod
    mounts; every node alternative of the pod must also satisfy one of them.
    ``namespace_labels`` are the labels of every namespace of the cluster, by
    name, for the affinity terms' namespaceSelectors.
    """
    spec = pod.spec
    alternatives = spec.node_requirements()
    if volume_terms:
        alternatives = tuple(
            alternative.intersection(term) for alternative in alternatives for term in volume_terms
        )
    spreads = [
        _spread(raw, pod, f"topologySpreadConstraints[{index}]")
        for index, raw in enumerate(spec.topology_spread_constraints)
    ]
    affinity, preferred_affinity = _terms(spec.pod_affinity, pod, "affinity.podAffinity", namespace_labels)
    anti_affinity, preferred_anti_affinity = _terms(
        spec.pod_anti_affinity, pod, "affinity.podAntiAffinity", namespace_labels
    )
    preferred_node_terms = tuple(
        term.requirements for term in sorted(spec.preferred_node_terms, key=lambda term: -term.weight)
    )
    return PodConstraints(
        pod=pod,
        node_alternatives=alternatives,
        tolerations=spec.tolerations,
        spread=tuple(s for s in spreads if s.hard),
        soft_spread=tuple(s for s in spreads if not s.hard),
        affinity=tuple(affinity),
        anti_affinity=tuple(anti_affinity),
        preferred_affinity=tuple(preferred_affinity),
        preferred_anti_affinity=tuple(preferred_anti_affinity),
        preferred_node_terms=preferred_node_terms,
        host_ports=spec.host_ports,
    )
