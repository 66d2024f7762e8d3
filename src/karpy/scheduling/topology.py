"""Topology: spread constraints and pod (anti-)affinity over domains.

A *domain* is a value of a topology key: a zone for
``topology.kubernetes.io/zone``, a node for ``kubernetes.io/hostname``, any
label value for a custom key. Constraints count the pods a selector matches
in each domain, both pods already running and pods placed earlier in the same
plan, and admit a new pod only into some domains:

- **spread** (maxSkew): a domain is allowed if its count plus this pod minus
  the smallest count over the eligible domains stays within maxSkew; with
  fewer eligible domains than minDomains the smallest count is taken as 0.
  For the hostname key a new node is always a possible domain with count 0,
  as in Karpenter;
- **affinity**: only domains where a selected pod already is; if there is
  none anywhere and the pod selects itself, the first pod may go anywhere
  (self-affinity would otherwise never start);
- **anti-affinity**: no domain where a selected pod is, and no domain of a
  pod whose own anti-affinity selects this pod (the inverse rule).

Where the target is a new NodeClaim whose domain is still open (its zone
requirement lists several zones), :meth:`Topology.admit` answers with the
allowed domains and the solver narrows the NodeClaim's requirement to the
best one (the least crowded, then by name, for determinism).

Counters are built lazily per distinct (key, selector) and kept up to date
as pods are placed, so each check costs a dictionary look-up per domain
rather than a scan of every pod.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from karpy.api.core import Pod
from karpy.api.requirements import LABEL_HOSTNAME, Requirement
from karpy.scheduling.constraints import AffinityTerm, PodConstraints, PodSelector, SpreadConstraint

# A target's domain for one key: known (a string), open (the possible values), or absent (None).
Domain = str | frozenset[str] | None


@dataclass(slots=True)
class _Placed:
    namespace: str
    labels: Mapping[str, str]
    target: str


def _selector_key(topology_key: str, selects: PodSelector) -> str:
    selector = selects.selector
    namespaces = sorted(selects.namespaces) if selects.namespaces is not None else None
    namespace_selector = (
        (
            sorted(selects.namespace_selector.match_labels.items()),
            selects.namespace_selector.match_expressions,
        )
        if selects.namespace_selector is not None
        else None
    )
    return repr(
        (
            topology_key,
            sorted(selector.match_labels.items()),
            selector.match_expressions,
            namespaces,
            namespace_selector,
        )
    )


@dataclass(slots=True)
class _Counter:
    topology_key: str
    selects: PodSelector
    counts: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class Admission:
    """Allowed domains per key for one pod on one target (keys absent: unconstrained)."""

    allowed: dict[str, frozenset[str]] = field(default_factory=dict)
    reason: str = ""

    @property
    def ok(self) -> bool:
        return not self.reason


class Topology:
    def __init__(
        self,
        universe: Mapping[str, Iterable[str]] | None = None,
        discover: Callable[[str], Iterable[str]] | None = None,
    ) -> None:
        # Every known domain per key (zones offered, labels of existing nodes);
        # ``discover`` supplies a key's offered values the first time it is asked.
        self.universe: dict[str, set[str]] = {key: set(values) for key, values in (universe or {}).items()}
        self._discover = discover
        self._discovered: set[str] = set()
        self._placed: dict[str, list[_Placed]] = {}
        self._placed_with_label: dict[tuple[str, str], list[_Placed]] = {}
        self._eligible_cache: dict[tuple[str, int, tuple[frozenset[Requirement], ...]], frozenset[str]] = {}
        # Each target's domains; shared with the caller until ``narrow`` changes them (then
        # copied, and the target is in ``_own_domains``). Added targets' domains join the
        # universe when it is first read: most plans never ask.
        self._target_domains: dict[str, Mapping[str, str]] = {}
        self._own_domains: set[str] = set()
        self._unfolded: list[Mapping[str, str]] = []
        self._counters: dict[str, _Counter] = {}
        # Anti-affinity held by placed pods: term identity -> (term, domain -> count).
        self._anti: dict[str, tuple[AffinityTerm, dict[str, int]]] = {}
        self._anti_by_target: dict[str, list[AffinityTerm]] = {}
        # Counters by one label their selector requires, so a placed pod is only
        # matched against the counters that could count it.
        self._counter_index: dict[tuple[str, str], list[_Counter]] = {}
        self._identities: dict[tuple[int, str], tuple[PodSelector, str]] = {}
        self._unindexed: list[_Counter] = []
        # Anti-affinity terms of placed pods that select a given kind of pod.
        self._inverse_cache: dict[
            tuple[str, frozenset[tuple[str, str]]], tuple[int, list[tuple[AffinityTerm, dict[str, int]]]]
        ] = {}

    def domains(self, key: str) -> set[str]:
        """Every domain known for ``key``."""
        if self._unfolded:
            universe = self.universe
            for domains in self._unfolded:
                for domain_key, value in domains.items():
                    values = universe.get(domain_key)
                    if values is None:
                        universe[domain_key] = {value}
                    else:
                        values.add(value)
            self._unfolded = []
        if key not in self._discovered:
            self._discovered.add(key)
            if self._discover is not None:
                self.universe.setdefault(key, set()).update(self._discover(key))
        return self.universe.setdefault(key, set())

    # -- bookkeeping ---------------------------------------------------------

    def add_target(self, target: str, domains: Mapping[str, str]) -> None:
        """A target and its domains, which must not change while the topology is in use."""
        self._target_domains[target] = domains
        self._own_domains.discard(target)
        self._unfolded.append(domains)

    def add_targets(self, domains: Mapping[str, Mapping[str, str]]) -> None:
        """Targets by name with their domains, at once (see :meth:`add_target`)."""
        self._target_domains.update(domains)
        self._own_domains.difference_update(domains)
        self._unfolded.extend(domains.values())

    def add_existing_pod(self, pod: Pod, target: str, anti_affinity: Iterable[AffinityTerm] = ()) -> None:
        self._record(pod.metadata.namespace, pod.metadata.labels, target, tuple(anti_affinity))

    def place(self, constraints: PodConstraints, target: str) -> None:
        pod = constraints.pod
        self._record(pod.metadata.namespace, pod.metadata.labels, target, constraints.all_anti_affinity())

    def _record(
        self, namespace: str, labels: Mapping[str, str], target: str, anti: tuple[AffinityTerm, ...]
    ) -> None:
        placed = _Placed(namespace, labels, target)
        self._placed.setdefault(target, []).append(placed)
        for item in labels.items():
            self._placed_with_label.setdefault(item, []).append(placed)
        domains = self._target_domains.get(target, {})
        for counter in self._candidate_counters(labels):
            domain = domains.get(counter.topology_key)
            if domain is not None and counter.selects.matches_labels(namespace, labels):
                counter.counts[domain] = counter.counts.get(domain, 0) + 1
        for term in anti:
            self._anti_by_target.setdefault(target, []).append(term)
            domain = domains.get(term.topology_key)
            if domain is not None:
                self._note_anti(term, domain)

    def _note_anti(self, term: AffinityTerm, domain: str) -> None:
        identity = _selector_key(term.topology_key, term.selects)
        entry = self._anti.get(identity)
        if entry is None:
            entry = (term, {})
            self._anti[identity] = entry
        entry[1][domain] = entry[1].get(domain, 0) + 1

    def narrow(self, target: str, key: str, domain: str) -> None:
        """``target``'s domain for ``key`` is now known: count the pods already on it."""
        shared = self._target_domains.get(target, {})
        if shared.get(key) == domain:
            return
        if target in self._own_domains:
            domains = shared
        else:
            domains = dict(shared)
            self._own_domains.add(target)
        assert isinstance(domains, dict)
        domains[key] = domain
        self._target_domains[target] = domains
        self.universe.setdefault(key, set()).add(domain)
        for pod in self._placed.get(target, ()):
            for counter in self._candidate_counters(pod.labels):
                if counter.topology_key == key and counter.selects.matches_labels(pod.namespace, pod.labels):
                    counter.counts[domain] = counter.counts.get(domain, 0) + 1
        for term in self._anti_by_target.get(target, ()):
            if term.topology_key == key:
                self._note_anti(term, domain)

    def _candidate_counters(self, labels: Mapping[str, str]) -> list[_Counter]:
        candidates = list(self._unindexed)
        index = self._counter_index
        for item in labels.items():
            found = index.get(item)
            if found:
                candidates.extend(found)
        return candidates

    def inverse_terms(
        self, namespace: str, labels: Mapping[str, str]
    ) -> list[tuple[AffinityTerm, dict[str, int]]]:
        """Anti-affinity terms of placed pods that select a pod like this, with their domains."""
        key = (namespace, frozenset(labels.items()))
        cached = self._inverse_cache.get(key)
        if cached is None or cached[0] != len(self._anti):
            matching = [
                (term, domains)
                for term, domains in self._anti.values()
                if term.selects.matches_labels(namespace, labels)
            ]
            cached = (len(self._anti), matching)
            self._inverse_cache[key] = cached
        return cached[1]

    def _counter(self, key: str, selects: PodSelector) -> _Counter:
        # The same selector object is asked about again and again (once per target a
        # pod tries); its identity string is worked out once. The object is kept with
        # it, so a recycled id can never stand for another selector.
        cached = self._identities.get((id(selects), key))
        if cached is not None and cached[0] is selects:
            identity = cached[1]
        else:
            identity = _selector_key(key, selects)
            self._identities[(id(selects), key)] = (selects, identity)
        counter = self._counters.get(identity)
        if counter is None:
            counter = _Counter(key, selects)
            required = sorted(selects.selector.match_labels.items())
            # Only pods with the selector's first required label can match: a counter made
            # late in a large plan looks at those, not at every pod placed so far.
            if required:
                candidates: Iterable[_Placed] = self._placed_with_label.get(required[0], ())
            else:
                candidates = (pod for placed in self._placed.values() for pod in placed)
            counts = counter.counts
            for pod in candidates:
                domain = self._target_domains.get(pod.target, {}).get(key)
                if domain is not None and selects.matches_labels(pod.namespace, pod.labels):
                    counts[domain] = counts.get(domain, 0) + 1
            self._counters[identity] = counter
            if required:
                self._counter_index.setdefault(required[0], []).append(counter)
            else:
                self._unindexed.append(counter)
        return counter

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """Whether any constraint met so far counts or repels a pod like this.

        Every spread and affinity selector a pod was checked against has a
        counter, and every placed pod's anti-affinity is kept, so after a
        solve this tells whether moving such a pod between nodes could change
        another pod's verdict.
        """
        if any(counter.selects.matches_labels(namespace, labels) for counter in self._counters.values()):
            return True
        return any(
            term.selects.matches_labels(namespace, labels)
            for terms in self._anti_by_target.values()
            for term in terms
        )

    def inverse_keys(self, constraints: PodConstraints) -> set[str]:
        """Keys of anti-affinity held by placed pods that select this pod."""
        pod = constraints.pod
        return {
            term.topology_key for term, _ in self.inverse_terms(pod.metadata.namespace, pod.metadata.labels)
        }

    def count(self, key: str, selects: PodSelector, domain: str) -> int:
        """How many pods ``selects`` matches in ``domain`` of ``key``, placed or running."""
        return self._counter(key, selects).counts.get(domain, 0)

    def known_domain(self, target: str, key: str) -> str | None:
        return self._target_domains.get(target, {}).get(key)

    def allowed_anywhere(self, constraints: PodConstraints) -> dict[str, frozenset[str]] | None:
        """Domains the pod could go to at all, per zone-like key (hostnames left out).

        A target whose domain is known and not among these can be skipped
        without the full admission; None means no domain at all.
        """
        keys = {s.topology_key for s in constraints.all_spread()}
        keys.update(t.topology_key for t in constraints.all_affinity())
        keys.discard(LABEL_HOSTNAME)
        if not keys:
            return {}
        domains: dict[str, Domain] = {key: frozenset(self.domains(key)) for key in keys}
        admission = self.admit(constraints, "", domains)
        if not admission.ok:
            return None
        return {key: admission.allowed[key] for key in keys if key in admission.allowed}

    # -- admission -------------------------------------------------------------

    def admit(self, constraints: PodConstraints, target: str, domain_of: Mapping[str, Domain]) -> Admission:
        """Which domains ``constraints`` allow on ``target``, whose domains are ``domain_of``."""
        admission = Admission()
        pod = constraints.pod
        namespace, labels = pod.metadata.namespace, pod.metadata.labels
        for spread in constraints.all_spread():
            self._admit_spread(spread, constraints, target, domain_of, admission)
            if not admission.ok:
                return admission
        for term in constraints.all_affinity():
            counter = self._counter(term.topology_key, term.selects)
            occupied = {domain for domain, count in counter.counts.items() if count > 0}
            if not occupied:
                if term.selects.matches_labels(namespace, labels):
                    # The first of a self-affine group may start anywhere, but somewhere
                    # definite: the rest of the group must be able to follow it.
                    occupied = set(self.domains(term.topology_key))
                    if term.topology_key == LABEL_HOSTNAME:
                        occupied.add(target)
                else:
                    key = term.topology_key
                    admission.reason = f"no pod matching its pod affinity runs in any {key} domain"
                    return admission
            self._restrict(admission, term.topology_key, target, domain_of, occupied, "pod affinity")
            if not admission.ok:
                return admission
        # Anti-affinity, own and inverse: a domain is out if any selected pod is in it.
        # Only the target's own possible domains are looked up, never every domain.
        occupied_by_key: dict[str, list[dict[str, int]]] = {}
        for term in constraints.all_anti_affinity():
            counter = self._counter(term.topology_key, term.selects)
            occupied_by_key.setdefault(term.topology_key, []).append(counter.counts)
        for term, domains in self.inverse_terms(namespace, labels):
            occupied_by_key.setdefault(term.topology_key, []).append(domains)
        for key, occupied_maps in occupied_by_key.items():
            domain = self._domain(key, target, domain_of)
            if domain is None:
                continue
            possible = (domain,) if isinstance(domain, str) else domain
            free = {value for value in possible if all(not counts.get(value) for counts in occupied_maps)}
            if isinstance(domain, str):
                if not free:
                    admission.reason = f"pod anti-affinity: {key}={domain} already runs a selected pod"
                    return admission
                continue
            self._restrict(admission, key, target, domain_of, free, "pod anti-affinity")
            if not admission.ok:
                return admission
        return admission

    def _domain(self, key: str, target: str, domain_of: Mapping[str, Domain]) -> Domain:
        known = self._target_domains.get(target, {}).get(key)
        if known is not None:
            return known
        return domain_of.get(key)

    def _restrict(
        self,
        admission: Admission,
        key: str,
        target: str,
        domain_of: Mapping[str, Domain],
        allowed: set[str],
        what: str,
    ) -> None:
        domain = self._domain(key, target, domain_of)
        if domain is None:
            admission.reason = f"{what}: the node would have no {key} label"
            return
        possible = frozenset((domain,)) if isinstance(domain, str) else domain
        current = admission.allowed.get(key, possible)
        remaining = current & allowed
        if not remaining:
            admission.reason = (
                f"{what}: no allowed {key} domain on this node ({', '.join(sorted(possible)) or 'none'})"
            )
            return
        admission.allowed[key] = frozenset(remaining)

    def _admit_spread(
        self,
        spread: SpreadConstraint,
        constraints: PodConstraints,
        target: str,
        domain_of: Mapping[str, Domain],
        admission: Admission,
    ) -> None:
        key = spread.topology_key
        counter = self._counter(key, spread.selects)
        pod = constraints.pod
        self_match = 1 if spread.selects.matches_labels(pod.metadata.namespace, pod.metadata.labels) else 0
        if key == LABEL_HOSTNAME:
            # A new node is always possible, with no pod on it: the minimum is 0.
            minimum = 0
            eligible: frozenset[str] | None = None
        else:
            eligible = self._eligible(key, constraints, spread)
            counts = [counter.counts.get(domain, 0) for domain in eligible]
            minimum = min(counts) if counts else 0
            if spread.min_domains is not None and len(eligible) < spread.min_domains:
                minimum = 0
        domain = self._domain(key, target, domain_of)
        if domain is None:
            admission.reason = f"topology spread on {key}: the node would have no {key} label"
            return
        possible = frozenset((domain,)) if isinstance(domain, str) else domain
        allowed = {
            value
            for value in possible
            if (eligible is None or value in eligible)
            and counter.counts.get(value, 0) + self_match - minimum <= spread.max_skew
        }
        if not allowed:
            admission.reason = (
                f"topology spread on {key} (maxSkew {spread.max_skew}) allows none of "
                f"{', '.join(sorted(possible)) or 'no domain'}"
            )
            return
        self._restrict(admission, key, target, domain_of, allowed, "topology spread")

    def _eligible(self, key: str, constraints: PodConstraints, spread: SpreadConstraint) -> frozenset[str]:
        """The domains a spread counts: every known one, or those the pod's node affinity allows.

        Cached by what decides it; the known domains only ever grow, so their
        number tells whether they changed.
        """
        domains = self.domains(key)
        options = constraints.node_options() if spread.honor_node_affinity else ()
        cache_key = (key, len(domains), tuple(option.identity() for option in options))
        eligible = self._eligible_cache.get(cache_key)
        if eligible is None:
            eligible = frozenset(
                domain
                for domain in domains
                if not options or any(option.get(key).has(domain) for option in options)
            )
            self._eligible_cache[cache_key] = eligible
        return eligible

    def least_crowded(self, constraints: PodConstraints, key: str, allowed: frozenset[str]) -> str:
        """The domain to commit a new NodeClaim to: fewest selected pods, then name."""
        selectors = [s.selects for s in constraints.all_spread() if s.topology_key == key]

        def crowd(domain: str) -> int:
            return sum(self._counter(key, selects).counts.get(domain, 0) for selects in selectors)

        return min(sorted(allowed), key=crowd)
