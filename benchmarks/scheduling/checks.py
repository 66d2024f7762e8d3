"""Whether a plan keeps the pods' topology constraints: speed only counts for a correct plan.

A solver that ignores topology spread and pod (anti-)affinity is fast and
cheap for the wrong reason: it packs the anti-affinity pods, which each need
a node of their own, onto a handful of nodes. The benchmark tables therefore
print, next to each plan, how many constraints it breaks, and the speed
target only passes for a plan that breaks none.

The check reads nothing but the public :class:`~karpy.scheduling.solver.Plan`
and the pods, and judges the plan's final placement the way the
kube-scheduler would when it binds the pods onto the planned nodes:

- Each distinct term (kind, topology key, maxSkew, selector) is one group;
  the pods it counts are the placed pods whose labels match its
  ``matchLabels``. A group is broken or kept as a whole.
- Hostname topology spread: every planned node is a domain (none of the
  pods has a node selector, so all are eligible); the counts of the
  group's pods per node may differ by at most ``maxSkew``. On a fixed set
  of nodes this final state is exactly what binding the pods one at a time
  under the spread rule can reach, when every pod the term counts carries
  it. When it also counts pods that do not carry it (Karpenter's own
  benchmark draws a spread pod's selector apart from its labels, so a
  spread counts generic pods), kube-scheduler checks the term only as each
  carrier binds, against the pods bound before it, and the final state may
  be uneven: the check then binds the pods in the solver's placement order
  (:func:`~karpy.scheduling._groups.alike_groups`) and applies the rule to
  each carrier as it binds (``count in its domain + 1 if it matches
  itself - the least count of any domain <= maxSkew``). Passing it proves a
  binding order kube-scheduler accepts exists.
- Zonal topology spread: the domains are the zones the NodePool offers
  (Karpenter's reading, which forces a spread over zones that have no node
  yet; the kube-scheduler only knows zones that have nodes, a weaker rule).
  A node whose zone the plan leaves open (its options are offered in
  several zones and its requirements do not pin one) breaks the group: the
  cloud could put it anywhere.
- Required pod affinity: all of the group's pods in one domain, pinned.
- Required pod anti-affinity: no domain holds a pod carrying the term and
  another pod the term selects.
- ``ScheduleAnyway`` spreads and unknown topology keys are not checked.

Pods on existing nodes (the benchmarks have none) are placed on their node
with an unknown zone.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from karpy.api.core import Pod
from karpy.api.requirements import LABEL_HOSTNAME, LABEL_ZONE
from karpy.scheduling._groups import alike_groups
from karpy.scheduling.solver import NewNodeClaim, Plan

SPREAD = "topology spread"
AFFINITY = "pod affinity"
ANTI_AFFINITY = "pod anti-affinity"
REQUIRED_TERMS = "requiredDuringSchedulingIgnoredDuringExecution"


@dataclass(frozen=True, slots=True)
class Term:
    """One distinct constraint term, shared by every pod that carries it."""

    kind: str
    topology_key: str
    selector: frozenset[tuple[str, str]]
    max_skew: int = 0

    def describe(self) -> str:
        labels = ",".join(f"{key}={value}" for key, value in sorted(self.selector))
        return f"{self.kind} on {self.topology_key} for {labels}"


@dataclass(slots=True)
class Violations:
    """The constraint groups a plan breaks, by kind of constraint and key."""

    broken: dict[str, int] = field(default_factory=dict)
    checked: int = 0
    examples: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.broken.values())


def _match_labels(selector: object) -> frozenset[tuple[str, str]] | None:
    if not isinstance(selector, Mapping):
        return None
    match_labels = selector.get("matchLabels") or {}
    if selector.get("matchExpressions") or not isinstance(match_labels, Mapping):
        return None  # only matchLabels selectors are understood here
    return frozenset((str(key), str(value)) for key, value in match_labels.items())


def pod_terms(pod: Pod) -> list[Term]:
    """The hard topology terms a pod carries, in a hashable form."""
    terms: list[Term] = []
    for constraint in pod.spec.topology_spread_constraints:
        selector = _match_labels(constraint.get("labelSelector"))
        skew = constraint.get("maxSkew")
        if constraint.get("whenUnsatisfiable", "DoNotSchedule") != "DoNotSchedule" or selector is None:
            continue
        terms.append(Term(SPREAD, str(constraint.get("topologyKey")), selector, int(str(skew or 1))))
    for kind, affinity in ((AFFINITY, pod.spec.pod_affinity), (ANTI_AFFINITY, pod.spec.pod_anti_affinity)):
        required = affinity.get(REQUIRED_TERMS) or []
        if not isinstance(required, list):
            continue
        for item in required:
            if not isinstance(item, Mapping):
                continue
            selector = _match_labels(item.get("labelSelector"))
            if selector is not None:
                terms.append(Term(kind, str(item.get("topologyKey")), selector))
    return terms


def claim_zones(claim: NewNodeClaim) -> frozenset[str]:
    """The zones a planned NodeClaim may be launched in: its options' offerings its requirements admit."""
    return frozenset(
        offering.zone
        for instance_type in claim.instance_types
        for offering in instance_type.available_offerings(claim.requirements)
    )


def _matches(labels: Mapping[str, str], selector: Iterable[tuple[str, str]]) -> bool:
    return all(labels.get(key) == value for key, value in selector)


def plan_violations(
    pods: Sequence[Pod], plan: Plan, zones: Sequence[str], existing_zones: Mapping[str, str] | None = None
) -> Violations:
    """Check ``plan`` for ``pods`` against every hard topology term the pods carry.

    ``existing_zones``: the zone of each existing node the plan may use.
    """
    node_of: dict[str, str] = dict(plan.existing)
    known = existing_zones or {}
    zone_of_node: dict[str, str | None] = {node: known.get(node) for node in plan.existing.values()}
    for index, claim in enumerate(plan.new_nodeclaims):
        name = f"planned-{index}"
        allowed = claim_zones(claim)
        zone_of_node[name] = next(iter(allowed)) if len(allowed) == 1 else None
        for pod in claim.pods:
            node_of[pod.key] = name
    nodes = list(zone_of_node)

    carriers: dict[Term, list[Pod]] = defaultdict(list)
    for pod in pods:
        for term in pod_terms(pod):
            carriers[term].append(pod)
    placed = [pod for pod in pods if pod.key in node_of]
    rank = {pod.key: index for index, pod in enumerate(placement_order(placed))}

    result = Violations()
    for term, carrying in carriers.items():
        if term.topology_key not in (LABEL_HOSTNAME, LABEL_ZONE):
            continue
        result.checked += 1
        selected = [pod for pod in placed if _matches(pod.metadata.labels, term.selector)]
        if _broken(term, carrying, selected, node_of, zone_of_node, nodes, zones, rank):
            label = f"{term.kind} ({term.topology_key.rsplit('/', 1)[-1]})"
            result.broken[label] = result.broken.get(label, 0) + 1
            if len(result.examples) < 5:
                result.examples.append(term.describe())
    return result


def _broken_as_bound(
    term: Term,
    carrying: Sequence[Pod],
    selected: Sequence[Pod],
    domain: Callable[[Pod], str | None],
    domains: Sequence[str],
    rank: Mapping[str, int],
) -> bool:
    """Whether the spread ``term`` is broken in both binding orders the check tries.

    ``carrying`` are the placed pods that carry the term, ``selected`` every
    placed pod it counts. Pods it counts but that do not carry it constrain
    nothing and may bind at any time. The first order binds everything in
    the solver's order, those of them whose zone the cloud picks last (no
    carrier can count on where they land). The second binds the carriers in
    the solver's order and each of the others only when a carrier needs it:
    into a domain with the fewest pods, raising the least count the carrier
    is measured against. Either order, if every carrier passes as it binds,
    is one kube-scheduler accepts.
    """
    carriers = {pod.key for pod in carrying}
    counted = {pod.key for pod in selected}
    pods = sorted({pod.key: pod for pod in [*selected, *carrying]}.values(), key=lambda pod: rank[pod.key])
    if any(domain(pod) is None for pod in carrying):
        return True
    known_first = [pod for pod in pods if pod.key in carriers or domain(pod) is not None]
    unknown_last = [pod for pod in pods if pod.key not in carriers and domain(pod) is None]
    if not _breaks(term, [*known_first, *unknown_last], carriers, counted, domain, domains):
        return False
    return _breaks_binding_helpers_when_needed(term, pods, carriers, counted, domain, domains)


def _breaks(
    term: Term,
    order: Sequence[Pod],
    carriers: set[str],
    counted: set[str],
    domain: Callable[[Pod], str | None],
    domains: Sequence[str],
) -> bool:
    """Whether some carrier breaks ``term`` as the pods bind in ``order``."""
    counts = dict.fromkeys(domains, 0)
    for pod in order:
        where = domain(pod)
        matches = pod.key in counted
        if pod.key in carriers:
            assert where is not None
            least = min(counts.values(), default=0)
            if counts.get(where, 0) + matches - least > term.max_skew:
                return True
        elif where is None:
            continue  # bound after every carrier: counted by none of them
        if matches:
            counts[where] = counts.get(where, 0) + 1
    return False


def _breaks_binding_helpers_when_needed(
    term: Term,
    pods: Sequence[Pod],
    carriers: set[str],
    counted: set[str],
    domain: Callable[[Pod], str | None],
    domains: Sequence[str],
) -> bool:
    """Carriers in order; a counted non-carrier binds only when a carrier needs the least count raised."""
    counts = dict.fromkeys(domains, 0)
    waiting: dict[str, int] = {}
    for pod in pods:
        where = domain(pod)
        if pod.key not in carriers and pod.key in counted and where is not None:
            waiting[where] = waiting.get(where, 0) + 1
    for pod in pods:
        if pod.key not in carriers:
            continue
        where = domain(pod)
        assert where is not None
        matches = pod.key in counted
        while counts.get(where, 0) + matches - min(counts.values(), default=0) > term.max_skew:
            least = min(counts.values())
            helper = next(
                (name for name in domains if counts[name] == least and name != where and waiting.get(name)),
                None,
            )
            if helper is None:
                return True
            waiting[helper] -= 1
            counts[helper] += 1
        if matches:
            counts[where] = counts.get(where, 0) + 1
    return False


def placement_order(pods: Sequence[Pod]) -> list[Pod]:
    """``pods`` in the order the solver places them (groups of alike pods, then by key)."""
    return [pod for group in alike_groups(pods, {}) for pod in group]


def _broken(
    term: Term,
    carrying: Sequence[Pod],
    selected: Sequence[Pod],
    node_of: Mapping[str, str],
    zone_of_node: Mapping[str, str | None],
    nodes: Sequence[str],
    zones: Sequence[str],
    rank: Mapping[str, int],
) -> bool:
    by_zone = term.topology_key == LABEL_ZONE

    def domain(pod: Pod) -> str | None:
        node = node_of[pod.key]
        return zone_of_node[node] if by_zone else node

    selected_domains = [domain(pod) for pod in selected]
    if term.kind == SPREAD:
        if not any(pod.key in node_of for pod in carrying):
            return False
        domains = zones if by_zone else nodes
        carriers = {pod.key for pod in carrying}
        if any(pod.key not in carriers for pod in selected):
            placed_carriers = [pod for pod in carrying if pod.key in node_of]
            return _broken_as_bound(term, placed_carriers, selected, domain, domains, rank)
        if None in selected_domains:
            return True
        counts = Counter(selected_domains)
        per_domain = [counts.get(name, 0) for name in domains]
        return bool(per_domain) and max(per_domain) - min(per_domain) > term.max_skew
    carrying_domains = [domain(pod) for pod in carrying if pod.key in node_of]
    if term.kind == AFFINITY:
        together = set(selected_domains) | set(carrying_domains)
        return None in together or len(together) > 1
    # Anti-affinity: a carrier may share its domain with no selected pod but itself.
    if None in carrying_domains or None in selected_domains:
        return True
    selected_counts = Counter(selected_domains)
    for pod, pod_domain in zip(
        (pod for pod in carrying if pod.key in node_of), carrying_domains, strict=True
    ):
        others = selected_counts[pod_domain] - (1 if _matches(pod.metadata.labels, term.selector) else 0)
        if others > 0:
            return True
    return False
