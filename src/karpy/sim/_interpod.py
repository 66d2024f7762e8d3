"""The stand-in kube-scheduler's inter-pod filters: required pod affinity and
anti-affinity (InterPodAffinity) and hard topology spread (PodTopologySpread).

kube-scheduler refuses a node when, for the pod being placed:

* a required pod affinity term finds no pod it selects in the node's domain
  (the node's value of the term's topologyKey; a node without the key has no
  domain). One exception lets the first pod of a group that selects itself
  start it: when no pod on a node with the key matches any of the pod's
  affinity terms and the pod matches all of them itself, any node that has
  every term's key is allowed;
* a required anti-affinity term finds a pod it selects in the node's domain;
* a pod already bound has a required anti-affinity term that selects the
  pod being placed, and the node is in that pod's domain (anti-affinity is
  symmetric);
* a DoNotSchedule spread constraint would be skewed beyond maxSkew: the
  pods it selects in the node's domain, plus one if the pod selects itself,
  less the fewest in any domain (0 when fewer domains than minDomains
  exist), over the nodes that pass the pod's node affinity
  (nodeAffinityPolicy Honor, the default) and, with nodeTaintsPolicy Honor,
  its tolerations; a node without the key is refused.

Pods being deleted or finished are not counted. This is what karpy's own
scheduler plans with (``karpy.scheduling.topology``), so a pod karpy reports
unschedulable for these reasons stays Pending here too, as it would in a
cluster; without these filters the stand-in bound such pods wherever they
fit, and the simulation never agreed with itself.

The counts are indexes kept up to date as pods are bound (per affinity
term, per anti-affinity term, per spread constraint and node filter), so a
Deployment of many replicas with anti-affinity or spread costs each pod a
look-up per distinct term, not a pass over every bound pod.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from karpy.api.core import LabelSelector, Node, Pod
from karpy.api.taints import untolerated
from karpy.scheduling.constraints import (
    AffinityTerm,
    ConstraintError,
    NamespaceLabels,
    PodConstraints,
    PodSelector,
    SpreadConstraint,
    pod_constraints,
)

# A term's identity: its topology key and what it selects.
_TermKey = tuple[str, object]


def has_inter_pod_terms(pod: Pod) -> bool:
    """Whether the pod has terms these filters read (cheap: no parsing)."""
    spec = pod.spec
    return bool(spec.pod_affinity or spec.pod_anti_affinity or spec.topology_spread_constraints)


def _selector_key(selects: PodSelector) -> object:
    def of(selector: LabelSelector | None) -> object:
        if selector is None:
            return None
        return (tuple(sorted(selector.match_labels.items())), selector.match_expressions)

    namespaces = None if selects.namespaces is None else tuple(sorted(selects.namespaces))
    return (of(selects.selector), namespaces, of(selects.namespace_selector))


def _term_key(term: AffinityTerm) -> _TermKey:
    return (term.topology_key, _selector_key(term.selects))


def _counts(pod: Pod) -> bool:
    return not pod.metadata.deleting and not pod.is_terminal


@dataclass(slots=True)
class _Spread:
    """One spread constraint's counts over the nodes one pod's node filter admits."""

    constraint: SpreadConstraint
    eligible: dict[str, str]  # node name -> its domain
    counts: dict[str, int]


@dataclass(slots=True)
class BoundPods:
    """Where pods are bound, indexed for the filters, kept up to date as the stand-in binds."""

    namespace_labels: NamespaceLabels | None
    nodes: dict[str, Node] = field(default_factory=dict)
    by_node: dict[str, list[Pod]] = field(default_factory=dict)
    # Per affinity term (key, selector): pods it selects, by domain.
    _affinity: dict[_TermKey, tuple[AffinityTerm, dict[str, int]]] = field(default_factory=dict)
    # Per bound pod's required anti-affinity term: the domains it holds pods in, by count.
    _repelling: dict[_TermKey, tuple[AffinityTerm, dict[str, int]]] = field(default_factory=dict)
    _spreads: dict[tuple[object, ...], _Spread] = field(default_factory=dict)

    @classmethod
    def of(
        cls, nodes: Iterable[Node], pods_on_node: dict[str, list[Pod]], labels: NamespaceLabels
    ) -> BoundPods:
        bound = cls(labels, {node.name: node for node in nodes})
        for node_name, pods in pods_on_node.items():
            for pod in pods:
                bound.add(node_name, pod)
        return bound

    def add(self, node_name: str, pod: Pod) -> None:
        self.by_node.setdefault(node_name, []).append(pod)
        if not _counts(pod):
            return
        node = self.nodes.get(node_name)
        labels = node.metadata.labels if node is not None else {}
        for term, domains in self._affinity.values():
            value = labels.get(term.topology_key)
            if value is not None and term.selects.matches(pod):
                domains[value] = domains.get(value, 0) + 1
        if pod.spec.pod_anti_affinity:
            try:
                terms = pod_constraints(pod, namespace_labels=self.namespace_labels).anti_affinity
            except ConstraintError:
                terms = ()
            for term in terms:
                value = labels.get(term.topology_key)
                if value is not None:
                    _, domains = self._repelling.setdefault(_term_key(term), (term, {}))
                    domains[value] = domains.get(value, 0) + 1
        for spread in self._spreads.values():
            domain = spread.eligible.get(node_name)
            if domain is not None and spread.constraint.selects.matches(pod):
                spread.counts[domain] += 1

    def repels(self, pod: Pod) -> bool:
        """Whether some bound pod's anti-affinity selects ``pod`` (its nodes must be filtered)."""
        return any(term.selects.matches(pod) for term, _ in self._repelling.values())

    def repelled(self, pod: Pod, node: Node) -> bool:
        """Whether a bound pod's anti-affinity keeps ``pod`` off ``node``'s domain."""
        for term, domains in self._repelling.values():
            value = node.metadata.labels.get(term.topology_key)
            if value is not None and domains.get(value) and term.selects.matches(pod):
                return True
        return False

    def affinity_domains(self, term: AffinityTerm) -> dict[str, int]:
        key = _term_key(term)
        entry = self._affinity.get(key)
        if entry is None:
            domains: dict[str, int] = {}
            for node_name, pods in self.by_node.items():
                node = self.nodes.get(node_name)
                value = node.metadata.labels.get(term.topology_key) if node is not None else None
                if value is None:
                    continue
                matching = sum(1 for pod in pods if _counts(pod) and term.selects.matches(pod))
                if matching:
                    domains[value] = domains.get(value, 0) + matching
            entry = self._affinity[key] = (term, domains)
        return entry[1]

    def spread(self, constraints: PodConstraints, constraint: SpreadConstraint) -> _Spread:
        options = tuple(option.identity() for option in constraints.node_options())
        key = (
            constraint.topology_key,
            _selector_key(constraint.selects),
            constraint.honor_node_affinity and options,
            constraint.honor_node_taints and constraints.tolerations,
        )
        spread = self._spreads.get(key)
        if spread is None:
            eligible: dict[str, str] = {}
            for node in self.nodes.values():
                domain = node.metadata.labels.get(constraint.topology_key)
                if domain is None or node.metadata.deleting:
                    continue
                if constraint.honor_node_affinity and not any(
                    option.is_satisfied_by_labels(node.metadata.labels) is None
                    for option in constraints.node_options()
                ):
                    continue
                if (
                    constraint.honor_node_taints
                    and untolerated(node.taints, constraints.tolerations) is not None
                ):
                    continue
                eligible[node.name] = domain
            counts = dict.fromkeys(eligible.values(), 0)
            for node_name, domain in eligible.items():
                counts[domain] += sum(
                    1
                    for pod in self.by_node.get(node_name, ())
                    if _counts(pod) and constraint.selects.matches(pod)
                )
            spread = self._spreads[key] = _Spread(constraint, eligible, counts)
        return spread


def allowed_nodes(
    pod: Pod, candidates: Sequence[int], nodes: Sequence[Node], bound: BoundPods
) -> tuple[list[int], str]:
    """The indices of ``candidates`` (into ``nodes``) the filters let ``pod`` go to, and,
    when there are none, the filter that refused the last ones (kube-scheduler's words)."""
    if not candidates:
        return [], ""  # nothing passed the other filters: the usual message says so
    try:
        constraints = pod_constraints(pod, namespace_labels=bound.namespace_labels)
    except ConstraintError as error:
        return [], str(error)
    allowed = list(candidates)
    if constraints.affinity:
        allowed = _affinity(constraints, allowed, nodes, bound)
        if not allowed:
            return [], "node(s) didn't match pod affinity rules"
    if constraints.anti_affinity:
        allowed = [index for index in allowed if not _anti_affinity_hit(constraints, nodes[index], bound)]
        if not allowed:
            return [], "node(s) didn't match pod anti-affinity rules"
    if bound.repels(pod):
        allowed = [index for index in allowed if not bound.repelled(pod, nodes[index])]
        if not allowed:
            return [], "node(s) didn't satisfy existing pods anti-affinity rules"
    for constraint in constraints.spread:
        spread = bound.spread(constraints, constraint)
        allowed = [index for index in allowed if _spread_allows(constraints.pod, nodes[index], spread)]
        if not allowed:
            return [], "node(s) didn't match pod topology spread constraints"
    return allowed, ""


def _affinity(
    constraints: PodConstraints, allowed: list[int], nodes: Sequence[Node], bound: BoundPods
) -> list[int]:
    terms = constraints.affinity
    domains = [bound.affinity_domains(term) for term in terms]
    if not any(domains):
        # Nothing matches anywhere: only a pod that selects itself may start the group.
        if all(term.selects.matches(constraints.pod) for term in terms):
            return [
                index
                for index in allowed
                if all(term.topology_key in nodes[index].metadata.labels for term in terms)
            ]
        return []
    return [
        index
        for index in allowed
        if all(
            nodes[index].metadata.labels.get(term.topology_key) in found
            for term, found in zip(terms, domains, strict=True)
        )
    ]


def _anti_affinity_hit(constraints: PodConstraints, node: Node, bound: BoundPods) -> bool:
    for term in constraints.anti_affinity:
        value = node.metadata.labels.get(term.topology_key)
        if value is not None and bound.affinity_domains(term).get(value):
            return True
    return False


def _spread_allows(pod: Pod, node: Node, spread: _Spread) -> bool:
    value = spread.eligible.get(node.name)
    if value is None:
        # Not among the nodes the constraint counts (no key, or filtered out): kube-scheduler
        # refuses a node without the key; one the pod's own filters leave out is not offered.
        value = node.metadata.labels.get(spread.constraint.topology_key)
        if value is None or value not in spread.counts:
            return False
    fewest = min(spread.counts.values())
    if spread.constraint.min_domains is not None and len(spread.counts) < spread.constraint.min_domains:
        fewest = 0
    own = 1 if spread.constraint.selects.matches(pod) else 0
    return spread.counts[value] + own - fewest <= spread.constraint.max_skew
