"""The removal simulator: where the pods of some nodes would go if those nodes went away.

Each consolidation evaluation asks it about one set of nodes: the pods that
move, the capacity they are offered (every other node, and what each
NodePool can launch) and the provisioning solver's plan for them. A pass asks
hundreds of such questions of the same cluster, so the simulator works out
once per pass what they share (the nodes offered to each set of pod shapes,
where first-fit stops, each node's memo key) and settles some questions
without solving (a first target not yet initialized, a merge that needs as
many new nodes as it removes). None of it changes an answer, only the time
it takes; docs/consolidation.md ("Simulating many removals") says what is
shared and why that is safe.

The pods that move are planned as provisioning plans pending pods
(``SchedulingSnapshot.solve`` in :mod:`karpy.controllers.state`): with the
cluster's default topology spread constraints when they declare none
(:class:`~karpy.scheduling.default_spread.DefaultSpread`), and with the
volumes each attaches counted against every node's attach limit per CSI
driver (``volume_counts``, :mod:`karpy.api.storage`), so a consolidation
never moves pods where the provisioner would not put them.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from collections.abc import Mapping, Sequence

from karpy.api.core import Pod
from karpy.api.instancetype import InstanceType
from karpy.api.quantity import ResourceAmounts, add_amounts, fits, how_many_fit
from karpy.api.requirements import Requirements
from karpy.api.taints import UNREGISTERED_TAINT_KEY, untolerated, untolerated_preferences
from karpy.disruption.candidates import capacity_type_of
from karpy.disruption.emptiness import reschedulable
from karpy.disruption.memo import EvaluationMemo
from karpy.disruption.method import Candidate
from karpy.scheduling.constraints import NamespaceLabels
from karpy.scheduling.default_spread import DefaultSpread
from karpy.scheduling.policy import SchedulingPolicy
from karpy.scheduling.solver import (
    DEFAULT_POLICY,
    NODES_RESOURCE,
    CapacityLeftOut,
    ExistingCapacity,
    NodePoolCapacity,
    Plan,
    PreparedCapacity,
    pod_requests,
    solve,
)


def _capacity_key(item: ExistingCapacity) -> tuple[object, ...] | None:
    pods: list[object] = []
    for pod in item.pods:
        if not pod.metadata.resource_version:
            return None
        pods.append((pod.key, pod.metadata.resource_version))
    return (
        item.name,
        item.nodepool,
        item.requirements.identity(),
        item.taints,
        item.ephemeral_taints,
        tuple(sorted(item.available.items())),
        item.in_flight,
        tuple(pods),
    )


def _has_inter_pod_terms(pod: Pod) -> bool:
    spec = pod.spec
    return bool(
        spec.pod_affinity or spec.pod_anti_affinity or spec.topology_spread_constraints or spec.host_ports
    )


def _constrains_neighbours(pod: Pod) -> bool:
    """Whether a bound pod can keep another pod off its node (anti-affinity, host ports)."""
    return bool(pod.spec.pod_anti_affinity or pod.spec.host_ports)


class _Offered:
    """The nodes offered to pods of some shapes in one pass, in name order, as the solver sees them."""

    __slots__ = ("_prepared", "_running", "indices", "items", "key_parts", "memo_keys", "names", "positions")

    def __init__(self, indices: list[int], items: list[ExistingCapacity]) -> None:
        self.indices = indices
        self.items = items
        self.names = [item.name for item in items]
        self.positions = {name: position for position, name in enumerate(self.names)}
        self._running: dict[int, list[int]] = {}
        self._prepared: PreparedCapacity | None = None
        # What every node of the list is, for memo keys (see ``RemovalSimulator.memo_key``).
        self.memo_keys: list[int | None] | None = None
        # Per length of the slice a simulation is offered, that slice's keys as one key part.
        self.key_parts: dict[int, _KeyPart | None] = {}

    def running(self, holds: list[int]) -> list[int]:
        """``holds`` (per node of the pass, by index) summed along this list; kept per ``holds``."""
        running = self._running.get(id(holds))
        if running is None:
            running = self._running[id(holds)] = list(
                itertools.accumulate(holds[index] for index in self.indices)
            )
        return running

    def prepared(self) -> PreparedCapacity:
        """These nodes set up for the solver (only for nodes that carry no pods)."""
        if self._prepared is None:
            self._prepared = PreparedCapacity(self.items)
        return self._prepared


class _OfferedNodes(list[ExistingCapacity]):
    """The nodes a simulation offers its pods: the first ``taken`` of ``offered``, less the removed."""

    def __init__(self, kept: list[ExistingCapacity], offered: _Offered, taken: int) -> None:
        super().__init__(kept)
        self.offered = offered
        self.taken = taken


class _KeyPart:
    """A long tuple in a memo key, hashed once: the same list of nodes is in thousands of keys."""

    __slots__ = ("_hash", "items")

    def __init__(self, items: tuple[object, ...]) -> None:
        self.items = items
        self._hash = hash(items)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, _KeyPart) and self._hash == other._hash and self.items == other.items
        )


class RemovalSimulator:
    """Where the pods of some nodes would go if those nodes went away.

    Built once per decision from every node's capacity and the NodePools, then
    asked about many sets of candidates; docs/consolidation.md ("Simulating many
    removals") says what it precomputes and why that leaves the solver's answer
    unchanged.
    """

    def __init__(
        self,
        capacity: Sequence[ExistingCapacity],
        pools: Sequence[NodePoolCapacity],
        volume_terms: Mapping[str, Sequence[Requirements]] | None = None,
        namespace_labels: NamespaceLabels | None = None,
        *,
        give_back_limits: bool = False,
        memo: EvaluationMemo | None = None,
        policy: SchedulingPolicy = DEFAULT_POLICY,
        volume_counts: Mapping[str, ResourceAmounts] | None = None,
        default_spread: DefaultSpread | None = None,
    ) -> None:
        self.capacity = sorted(capacity, key=lambda item: item.name)
        # Per moving pod, the volumes of each CSI driver it attaches, as the solver's resources.
        self.volume_counts: dict[str, ResourceAmounts] = dict(volume_counts or {})
        # The cluster's default spread constraints, given to the moving pods that declare none.
        self.default_spread = default_spread
        # Each candidate's moving pods, as planned (defaults given), by NodeClaim name.
        self._moving: dict[str, list[Pod]] = {}
        # MIN_VALUES_POLICY and PREFERENCE_POLICY: where pods would go is where provisioning puts them.
        self.policy = policy
        self.memo = memo
        # What every evaluation of this pass shares (pools, namespaces), for memo keys;
        # None when something cannot be told apart (the memo is then not used).
        self._pass_key: tuple[object, ...] | None = None
        self._capacity_keys: dict[int, int | None] = {}
        self.pools = list(pools)
        self.weights = {pool.nodepool.name: pool.nodepool.weight or 0 for pool in self.pools}
        self.give_back_limits = give_back_limits
        self.volume_terms: dict[str, Sequence[Requirements]] = dict(volume_terms or {})
        self.namespace_labels = namespace_labels
        self.uninitialized = frozenset(item.name for item in self.capacity if item.in_flight)
        # Each node as the solver needs to see it when the moving pods have no inter-pod
        # terms: without its pods if none of them constrains its neighbours.
        self._lean = [
            (
                item,
                None
                if any(_constrains_neighbours(pod) for pod in item.pods)
                else dataclasses.replace(item, pods=()),
            )
            for item in self.capacity
        ]
        # No node carries pods that count for others (see ``_prepared_for``).
        self._all_lean = all(lean is not None for _, lean in self._lean)
        # Without anti-affinity anywhere, a bound pod cannot keep a moving pod off any
        # node but its own (host ports): first-fit never looks past a node that takes them all.
        self._first_fit_stops = not any(
            pod.spec.pod_anti_affinity for item in self.capacity for pod in item.pods
        )
        # Per pod shape (its requests, sorted), the indices in _lean of the nodes offered.
        self._fitting: dict[tuple[tuple[str, int], ...], list[int]] = {}
        # Per size of the largest moving pod, how many such pods each node holds.
        self._holds: dict[tuple[tuple[str, int], ...], list[int]] = {}
        # Per set of pod shapes, the nodes offered to them (see ``_Offered``).
        self._offered_lists: dict[tuple[tuple[tuple[str, int], ...], ...], _Offered] = {}
        # Per pod shape, the most pods of it one new node of any pool holds; per candidate,
        # whether its pods alone find new capacity (see ``needs_new_nodes``).
        self._most_per_node: dict[tuple[tuple[str, int], ...], int] = {}
        self._most_room: dict[str, int] = {}
        self._placeable_afresh: dict[str, bool] = {}

    def simulate(self, removed: Sequence[Candidate]) -> Plan:
        """The whole plan for the removed nodes' pods."""
        return self.solve(self.inputs(removed), whole=True)

    def place_elsewhere(
        self,
        candidate: Candidate,
        pods: Sequence[Pod],
        volume_terms: Mapping[str, Sequence[Requirements]],
        volume_counts: Mapping[str, ResourceAmounts],
    ) -> Plan:
        """The whole plan for ``pods`` were ``candidate``'s node gone (drift's and repair's question),
        with the volume terms and counts of those pods.

        The answer a solve on a snapshot without the node gives, from the capacity this
        simulator shares among all its questions: a pass over many drifted nodes sets up the
        cluster's nodes and their pods once, not once per node. A pod's volumes are the same
        whichever node asks, so they join those of the pass.
        """
        self.volume_terms.update(volume_terms)
        self.volume_counts.update(volume_counts)
        moving = list(pods) if self.default_spread is None else self.default_spread.apply(pods)
        gone = {candidate.node.name, candidate.nodeclaim.name}
        return self.solve((moving, self._existing_for(moving, gone)), (candidate,), whole=True)

    def inputs(self, removed: Sequence[Candidate]) -> tuple[list[Pod], list[ExistingCapacity]]:
        """The pods that move and the capacity the solver is offered for them."""
        gone = {name for c in removed for name in (c.node.name, c.nodeclaim.name)}
        pods = [pod for c in removed for pod in self._moving_pods(c)]
        return pods, self._existing_for(pods, gone)

    def _moving_pods(self, candidate: Candidate) -> list[Pod]:
        """The candidate's pods that would move, as provisioning would plan them (default spread)."""
        name = candidate.nodeclaim.name
        pods = self._moving.get(name)
        if pods is None:
            pods = [pod for pod in candidate.pods if reschedulable(pod)]
            if self.default_spread is not None:
                pods = self.default_spread.apply(pods)
            self._moving[name] = pods
        return pods

    def _attaches(self, pod: Pod) -> bool:
        """Whether the pod has volume terms or attaches volumes: its placement depends on them."""
        return bool(self.volume_terms.get(pod.key) or self.volume_counts.get(pod.key))

    def solve(
        self,
        inputs: tuple[list[Pod], list[ExistingCapacity]],
        removed: Sequence[Candidate] = (),
        *,
        whole: bool = False,
    ) -> Plan:
        """The plan for the moving pods; unless ``whole``, it may stop early (``Plan.stopped_at``)."""
        pods, existing = inputs
        pools = self._pools_without(removed) if self.give_back_limits else self.pools
        # A pod on a node not yet initialized ends the simulation (see ``_worked_out``), and the
        # answer names the first such node by name: stop at that one, the rest is not needed.
        waiting = None if whole else min((item.name for item in existing if item.in_flight), default=None)
        return solve(
            pods,
            self._prepared_for(existing, removed) or existing,
            pools,
            self.volume_terms,
            self.namespace_labels,
            stop_at=() if waiting is None else frozenset((waiting,)),
            policy=self.policy,
            volume_counts=self.volume_counts,
        )

    def certain_first_target(self, inputs: tuple[list[Pod], list[ExistingCapacity]]) -> str | None:
        """The not yet initialized node the solver is sure to place a pod on first, if any.

        The solver offers existing capacity first-fit in name order, so the
        first pod it places (whichever group it takes first) goes to the
        first node offered when that node has room for every pod's requests,
        admits every pod (one of its node affinity terms, as the solver asks of
        an existing node; every taint, PreferNoSchedule too), and nothing sends
        the pods down another path: no inter-pod terms, preferences, volume
        terms or anti-affinity among the bound pods. On a growing cluster
        that node is nearly always a NodeClaim just launched, and the answer
        is known without a simulation.
        """
        pods, existing = inputs
        if not pods or not existing or not existing[0].in_flight or not self._first_fit_stops:
            return None
        first = existing[0]
        blocking = [
            taint
            for taint in first.taints
            if taint.key != UNREGISTERED_TAINT_KEY and taint not in first.ephemeral_taints
        ]
        for pod in pods:
            spec = pod.spec
            if _has_inter_pod_terms(pod) or spec.preferred_node_terms or self._attaches(pod):
                return None
            if untolerated(blocking, spec.tolerations) or untolerated_preferences(blocking, spec.tolerations):
                return None
            if not any(first.requirements.compatible(option) is None for option in spec.node_requirements()):
                return None
            if how_many_fit(pod_requests(pod), first.available) < 1:
                return None
        return first.name

    def needs_new_nodes(
        self,
        removed: Sequence[Candidate],
        inputs: tuple[list[Pod], list[ExistingCapacity]],
        count: int,
    ) -> int | None:
        """At least how many new NodeClaims the solver would open for these pods, if that is
        ``count`` or more and the solver is sure to place every pod on a node it may count on;
        else None.

        A merge of N nodes that needs N new ones is no command, and most merge trials on a
        busy cluster end so: a lower bound settles them without a simulation. The bound
        counts what the offered nodes have free as if every pod could use it, and a new
        node as the largest any pool offers (net of its DaemonSets): per resource, the
        requests left over divided by the most a node has of it; with pods of one shape,
        those left over the free places divided by the most one node holds. The solver
        cannot need fewer. It answers only where the simulation could not have ended
        otherwise, so the merge search takes the same path: no offered node is still
        being initialized (a pod there makes the removal infeasible, not too large), no
        pool has limits, no moving pod has inter-pod terms, host ports or volume terms,
        and each removed node's pods are placed on new capacity when simulated alone (so
        each pod can always have a node of its own). The alone simulations are made once
        per pass and node, and only when the bound is reached.
        """
        pods, existing = inputs
        if not pods or count < 1 or any(item.in_flight for item in existing):
            return None
        if any(pool.remaining is not None for pool in self.pools):
            return None
        if any(_has_inter_pod_terms(pod) or self._attaches(pod) for pod in pods):
            return None
        at_least = self._new_nodes_at_least(pods, existing)
        if at_least < count:
            return None
        for candidate in removed:
            name = candidate.nodeclaim.name
            alone = self._placeable_afresh.get(name)
            if alone is None:
                alone = not solve(
                    self._moving_pods(candidate),
                    [],
                    self.pools,
                    self.volume_terms,
                    self.namespace_labels,
                    policy=self.policy,
                    volume_counts=self.volume_counts,
                ).unschedulable
                self._placeable_afresh[name] = alone
            if not alone:
                return None
        return at_least

    def _new_nodes_at_least(self, pods: Sequence[Pod], existing: Sequence[ExistingCapacity]) -> int:
        shapes = {tuple(sorted(pod_requests(pod).items())) for pod in pods}
        if len(shapes) == 1:
            (key,) = shapes
            shape = dict(key)
            most = self._most_per_node.get(key)
            if most is None:
                most = self._most_per_node[key] = max(
                    (
                        how_many_fit(shape, _net_room(pool, instance_type))
                        for pool in self.pools
                        for instance_type in pool.instance_types
                    ),
                    default=0,
                )
            left = len(pods) - sum(how_many_fit(shape, item.available) for item in existing)
            return -(-left // most) if left > 0 and most > 0 else 0
        requested: ResourceAmounts = {}
        for pod in pods:
            requested = add_amounts(requested, pod_requests(pod))
        at_least = 0
        for resource, amount in requested.items():
            left = amount - sum(max(0, item.available.get(resource, 0)) for item in existing)
            if left <= 0:
                continue
            most = self._most_room.get(resource)
            if most is None:
                most = self._most_room[resource] = max(
                    (
                        _net_room(pool, instance_type).get(resource, 0)
                        for pool in self.pools
                        for instance_type in pool.instance_types
                    ),
                    default=0,
                )
            if most <= 0:
                return 0
            at_least = max(at_least, -(-left // most))
        return at_least

    def memo_key(
        self,
        removed: Sequence[Candidate],
        inputs: tuple[list[Pod], list[ExistingCapacity]],
        prices: Mapping[str, float],
        question: tuple[object, ...],
    ) -> tuple[object, ...] | None:
        """What an evaluation's answer depends on, as a hashable value; None: do not memoize.

        The removed nodes (their NodeClaim's and Node's versions and prices),
        the moving pods (their versions, volume terms, volumes attached and
        default spread given), every node offered to
        the solver (its free room, labels, taints, whether it is initialized
        and, where they count, its pods), the pools (their types, by the memo
        object that stands for them, their NodePool's version, limits left)
        and the namespaces' labels, and ``question``: the rest of what the
        evaluation is asked (rules, nodes disrupted now, new nodes allowed).
        Objects without a resourceVersion cannot be told apart from a changed
        copy: their evaluations are not kept.
        """
        pass_key = self._pass_memo_key()
        if pass_key is None:
            return None
        pods, existing = inputs
        moving: list[object] = []
        for pod in pods:
            version = pod.metadata.resource_version
            if not version:
                return None
            terms = self.volume_terms.get(pod.key)
            counts = self.volume_counts.get(pod.key)
            moving.append(
                (
                    pod.key,
                    version,
                    tuple(t.identity() for t in terms) if terms else (),
                    tuple(sorted(counts.items())) if counts else (),
                    # The default spread given to it: what the Services and owners select may change.
                    repr(pod.spec.topology_spread_constraints) if self.default_spread is not None else "",
                )
            )
        nodes: list[object] = []
        for candidate in removed:
            claim_version = candidate.nodeclaim.metadata.resource_version
            node_version = candidate.node.metadata.resource_version
            if not claim_version or not node_version:
                return None
            nodes.append(
                (candidate.nodeclaim.name, claim_version, node_version, prices.get(candidate.nodeclaim.name))
            )
        if isinstance(existing, _OfferedNodes):
            offered_key = self._offered_key(existing)
            if offered_key is None:
                return None
            return (pass_key, question, tuple(nodes), tuple(moving), offered_key)
        offered: list[object] = []
        for item in existing:
            key = self._capacity_key(item)
            if key is None:
                return None
            offered.append(key)
        return (pass_key, question, tuple(nodes), tuple(moving), tuple(offered))

    def alike_key(
        self,
        candidate: Candidate,
        inputs: tuple[list[Pod], list[ExistingCapacity]],
        prices: Mapping[str, float],
        question: tuple[object, ...],
    ) -> tuple[object, ...] | None:
        """A single node's evaluation by what the node and its pods are, not who they are.

        Nodes that one plan launched are often alike: the same type, price
        and capacity type, full with the same mix of a few Deployments'
        replicas. Each one's evaluation (its pods against the rest of the
        cluster and the pools) then comes out the same, and a pass over a
        cluster of thousands such nodes made that same simulation thousands
        of times. This key names the node by what ``_worked_out`` reads of a
        single removed node (its NodePool, weight, capacity type, capacity
        and price), its moving pods by their placement signatures in the
        order of their keys (the solver breaks ties between pods by key, so
        the same sequence means the same choices) and, as
        :meth:`memo_key` does, the pass and the nodes offered. A node that
        is itself among those offered is named there, so it shares nothing.
        None where the pods have inter-pod or volume terms (their labels or
        volumes count), or something has no resourceVersion.

        The caller keeps only answers that name none of the node's pods: an
        answer that names a pod (one that would not schedule) is this node's
        alone.
        """
        pods, existing = inputs
        if not pods or not isinstance(existing, _OfferedNodes):
            return None
        pass_key = self._pass_memo_key()
        if pass_key is None:
            return None
        assert self.memo is not None
        signatures: list[int] = []
        for pod in sorted(pods, key=lambda pod: pod.key):
            if self._attaches(pod):
                return None
            signature = self.memo.pod_signature(pod)
            if signature is None:
                return None
            signatures.append(signature)
        offered_key = self._offered_key(existing)
        if offered_key is None:
            return None
        claim = candidate.nodeclaim
        capacity = claim.status.capacity or candidate.node.allocatable
        node = (
            candidate.nodepool.name,
            candidate.nodepool.weight,
            capacity_type_of(candidate),
            tuple(sorted(capacity.items())),
            prices.get(claim.name),
        )
        return (pass_key, "alike", question, node, tuple(signatures), offered_key)

    def _pass_memo_key(self) -> tuple[object, ...] | None:
        """The pass's part of every memo key; None when there is no memo or it cannot be told."""
        if self.memo is None:
            return None
        pass_key = self._pass_key
        if pass_key is None:
            pass_key = self._pass_key = self._shared_key()
        return pass_key or None

    def _offered_key(self, existing: _OfferedNodes) -> _KeyPart | None:
        """The first ``taken`` nodes of the pass's list for these shapes, the removed among them
        included: a slice of keys made once per list."""
        offered = existing.offered
        if existing.taken in offered.key_parts:
            return offered.key_parts[existing.taken]
        keys = offered.memo_keys
        if keys is None:
            keys = offered.memo_keys = [self._capacity_key(item) for item in offered.items]
        part = None if None in keys[: existing.taken] else _KeyPart(tuple(keys[: existing.taken]))
        offered.key_parts[existing.taken] = part
        return part

    def _capacity_key(self, item: ExistingCapacity) -> int | None:
        if id(item) in self._capacity_keys:
            return self._capacity_keys[id(item)]
        assert self.memo is not None
        written = _capacity_key(item)
        key = self._capacity_keys[id(item)] = None if written is None else self.memo.number(written)
        return key

    def _shared_key(self) -> tuple[object, ...]:
        """The pools and namespaces as a key; () when a pool has no memo object to stand for its types."""
        assert self.memo is not None
        pools: list[object] = []
        for pool in self.pools:
            if pool.memo is None:
                return ()
            self.memo.pin(pool.memo)
            remaining = tuple(sorted(pool.remaining.items())) if pool.remaining is not None else None
            # The pool's memo stands for its types, their overheads and its template (a new
            # one whenever any of them changes); the rest of the NodePool the solver reads
            # is its weight and, through ``remaining``, its limits. Not its status, which
            # changes with every node.
            pools.append(
                (pool.nodepool.name, id(pool.memo), pool.nodepool.weight, remaining, pool.unavailable)
            )
        namespaces = tuple(
            sorted(
                (name, tuple(sorted(labels.items())))
                for name, labels in (self.namespace_labels or {}).items()
            )
        )
        return (tuple(pools), namespaces, self.give_back_limits)

    def _pools_without(self, removed: Sequence[Candidate]) -> list[NodePoolCapacity]:
        """The NodePools with the removed nodes' capacity no longer counted against their limits.

        A pool's ``remaining`` is its limits less its NodeClaims' capacity,
        the removed ones included; once they are gone, that capacity is the
        pool's again. Without this, a preferred pool at its limit looks full
        for the very pods that fill it, and they are replaced into a
        lower-weight pool.
        """
        freed: dict[str, ResourceAmounts] = {}
        for candidate in removed:
            capacity = dict(candidate.nodeclaim.status.capacity or candidate.node.allocatable)
            capacity[NODES_RESOURCE] = 1
            freed[candidate.nodepool.name] = add_amounts(freed.get(candidate.nodepool.name, {}), capacity)
        return [
            pool
            if pool.remaining is None or pool.nodepool.name not in freed
            else dataclasses.replace(
                pool,
                remaining={
                    resource: amount + freed[pool.nodepool.name].get(resource, 0)
                    for resource, amount in pool.remaining.items()
                },
            )
            for pool in self.pools
        ]

    def _existing_for(self, pods: Sequence[Pod], gone: set[str]) -> list[ExistingCapacity]:
        if any(_has_inter_pod_terms(pod) for pod in pods):
            return [item for item in self.capacity if item.name not in gone]
        shapes: list[ResourceAmounts] = []
        for pod in pods:
            requests = pod_requests(pod)
            if requests not in shapes:
                shapes.append(requests)
        # The largest pod in every resource: a node that holds k of those holds at
        # least k of the moving pods however first-fit fills it.
        largest: ResourceAmounts | None = None
        if self._first_fit_stops and not any(self._has_node_terms(pod) for pod in pods):
            largest = {}
            for shape in shapes:
                for resource, amount in shape.items():
                    largest[resource] = max(largest.get(resource, 0), amount)
        if not pods:
            return []
        offered = self._offered_list(shapes)
        if largest is None:
            return _OfferedNodes(
                [item for item, name in zip(offered.items, offered.names, strict=True) if name not in gone],
                offered,
                len(offered.items),
            )
        # First-fit offers existing nodes in name order: once the nodes so far (the removed
        # ones aside) hold as many of the largest pod as there are pods, a pod that got past
        # all of them would mean each holds at least its share. Found by bisection on the
        # running count, with the removed nodes' part taken off until it settles.
        holds = self._holding(largest)
        running = offered.running(holds)
        left_out = sorted(position for name in gone if (position := offered.positions.get(name)) is not None)
        end = len(running)
        cut = bisect.bisect_left(running, len(pods))
        while cut < end:
            taken = sum(holds[offered.indices[position]] for position in left_out if position <= cut)
            settled = bisect.bisect_left(running, len(pods) + taken)
            if settled == cut:
                break
            cut = settled
        count = min(cut + 1, end)
        kept: list[ExistingCapacity] = []
        start = 0
        for position in left_out:
            if position >= count:
                break
            kept.extend(offered.items[start:position])
            start = position + 1
        kept.extend(offered.items[start:count])
        return _OfferedNodes(kept, offered, count)

    def _offered_list(self, shapes: list[ResourceAmounts]) -> _Offered:
        """The nodes offered to pods of these shapes, as the solver sees them, once per pass."""
        key = tuple(sorted(tuple(sorted(shape.items())) for shape in shapes))
        offered = self._offered_lists.get(key)
        if offered is None:
            indices = list(self._offered(shapes))
            items = [
                item if lean is None else lean for item, lean in (self._lean[index] for index in indices)
            ]
            offered = self._offered_lists[key] = _Offered(indices, items)
        return offered

    def _prepared_for(
        self, existing: list[ExistingCapacity], removed: Sequence[Candidate]
    ) -> CapacityLeftOut | None:
        """The nodes offered to these pods, set up for the solver once per pass, less the removed.

        Only where that is the same to the solver as the list ``inputs`` gives: no bound pod
        constrains its neighbours, and the moving pods have no inter-pod terms (``inputs``
        then takes the pass's list for their shapes), so the nodes carry no pods and the
        topology reads none. The list may have been cut short where the nodes before the cut
        hold every pod; first-fit never goes past them, so the nodes after it change nothing.
        """
        if not removed or not self._all_lean or not isinstance(existing, _OfferedNodes):
            return None
        prepared = existing.offered.prepared()
        return prepared.without(name for c in removed for name in (c.node.name, c.nodeclaim.name))

    def _holding(self, largest: ResourceAmounts) -> list[int]:
        """Per node (by index in ``_lean``), how many pods of this size it holds; 0 if tainted.

        Worked out once per pass and size: every simulation of the pass counts with it.
        """
        key = tuple(sorted(largest.items()))
        holds = self._holds.get(key)
        if holds is None:
            holds = [0 if item.taints else how_many_fit(largest, item.available) for item, _ in self._lean]
            self._holds[key] = holds
        return holds

    def _offered(self, shapes: list[ResourceAmounts]) -> Sequence[int]:
        """In name order, the nodes offered to pods of these shapes: those with pods that
        constrain their neighbours, and those with room for one of the shapes.

        Each shape's list is worked out once per pass (simulations ask about the
        same few shapes again and again), so a simulation reads only the nodes
        it may be offered, not every node.
        """
        lists = []
        for shape in shapes:
            key = tuple(sorted(shape.items()))
            indices = self._fitting.get(key)
            if indices is None:
                indices = [
                    index
                    for index, (item, lean) in enumerate(self._lean)
                    if lean is None or fits(shape, item.available)
                ]
                self._fitting[key] = indices
            lists.append(indices)
        if len(lists) == 1:
            return lists[0]
        return sorted(set().union(*lists))

    def _has_node_terms(self, pod: Pod) -> bool:
        spec = pod.spec
        return bool(
            spec.node_selector or spec.required_node_terms or spec.preferred_node_terms or self._attaches(pod)
        )


def _net_room(pool: NodePoolCapacity, instance_type: InstanceType) -> ResourceAmounts:
    """What a new node of this type has for pods: its allocatable less its DaemonSets."""
    overhead = pool.overhead(instance_type)
    return {
        resource: amount - overhead.get(resource, 0) for resource, amount in instance_type.allocatable.items()
    }
