"""Terminate-first (TerminateFirstDrift, TerminateFirstRepair): a node deleted before a replacement exists.

Each behaviour is checked with its gate on and off: off, karpy keeps the node
(replace-first, as before the gates); on, it issues Karpenter v1.15's
delete-only command with the reason Karpenter labels it with.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from tests.support import make_nodepool, make_pod

from karpy.api.conditions import Condition
from karpy.api.core import Node, NodeCondition, Pod
from karpy.api.instancetype import InstanceType, Offering
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import (
    CONDITION_DRIFTED,
    CONDITION_INITIALIZED,
    NodeClaim,
    NodeClaimSpec,
    NodeClaimStatus,
)
from karpy.api.nodepool import CONDITION_READY, NodeClassRef, NodePool, NodePoolStatus
from karpy.api.requirements import (
    AWS_LABEL_CAPACITY_RESERVATION_ID,
    CAPACITY_TYPE_ON_DEMAND,
    CAPACITY_TYPE_RESERVED,
    LABEL_CAPACITY_TYPE,
    Requirements,
)
from karpy.cloud.repair_policies import KWOK_REPAIR_POLICIES, KWOK_UNHEALTHY_CONDITION
from karpy.disruption.drift import Drift
from karpy.disruption.method import Candidate, RemovalCommand, TerminateFirstReason
from karpy.disruption.rejection import RejectionKind
from karpy.disruption.repair import Repair, RepairCommand, RepairPolicyMatcher
from karpy.disruption.static import StaticCount, StaticDrift
from karpy.disruption.terminate_first import (
    StaticReservations,
    credit_reservation,
    refillable,
    static_reservations,
)
from karpy.scheduling.solver import NewNodeClaim, NodePoolCapacity, Plan

NOW = 100_000.0
RESERVATION = "cr-full"
PODS = [make_pod("app-a"), make_pod("app-b")]


def ready(pool: NodePool) -> NodePool:
    return dataclasses.replace(pool, status=NodePoolStatus(conditions=(Condition(CONDITION_READY, "True"),)))


DYNAMIC = ready(make_nodepool("default"))


def static_pool(replicas: int = 3, limit: int | None = 3, *, is_ready: bool = True) -> NodePool:
    limits = f"  limits: {{nodes: {limit}}}\n" if limit is not None else ""
    pool = make_nodepool("static", spec=f"  replicas: {replicas}\n{limits}")
    return ready(pool) if is_ready else pool


def candidate(
    name: str,
    pool: NodePool = DYNAMIC,
    *,
    reservation: str = RESERVATION,
    drifted: bool = True,
    sick: bool = False,
    pods: Sequence[Pod] = PODS,
) -> Candidate:
    labels = {LABEL_CAPACITY_TYPE: CAPACITY_TYPE_ON_DEMAND}
    if reservation:
        labels = {LABEL_CAPACITY_TYPE: CAPACITY_TYPE_RESERVED, AWS_LABEL_CAPACITY_RESERVATION_ID: reservation}
    conditions = [Condition(CONDITION_INITIALIZED, "True")]
    if drifted:
        conditions.append(Condition(CONDITION_DRIFTED, "True", reason="NodeClassDrift"))
    claim = NodeClaim(
        metadata=ObjectMeta(name=name, labels=labels),
        spec=NodeClaimSpec(node_class_ref=NodeClassRef("karpenter.kwok.sh", "KWOKNodeClass", "default")),
        status=NodeClaimStatus(node_name=name, conditions=tuple(conditions)),
    )
    node_conditions = [NodeCondition("Ready", "True", last_transition_time=0.0)]
    if sick:
        node_conditions.append(
            NodeCondition(KWOK_UNHEALTHY_CONDITION, "True", "E2ETest", last_transition_time=NOW - 3600)
        )
    node = Node(metadata=ObjectMeta(name=name, creation_timestamp=0.0), conditions=tuple(node_conditions))
    return Candidate(claim, node, pool, list(pods))


def nowhere(candidate: Candidate, pods: Sequence[Pod]) -> Plan:
    """Replace-first's plan: the only capacity the pods may use is the full reservation."""
    return Plan(unschedulable={pod.key: "its capacity reservations are used up" for pod in pods})


class FreedSlot:
    """Terminate-first's plan: with the node's slot credited back, every pod places."""

    def __init__(self, fits: bool = True) -> None:
        self.fits = fits
        self.asked: list[tuple[str, str]] = []

    def __call__(self, candidate: Candidate, pods: Sequence[Pod], reservation: str) -> Plan:
        self.asked.append((candidate.nodeclaim.name, reservation))
        if not self.fits:
            return nowhere(candidate, pods)
        return Plan(new_nodeclaims=[NewNodeClaim("default", Requirements(), [], list(pods), {}, {})])


# -- drift -------------------------------------------------------------------


def test_gate_off_a_drifted_node_whose_pods_fit_only_in_its_full_reservation_stays() -> None:
    result = Drift(nowhere, NOW).compute([candidate("a")], {"default": 1})
    assert result.command is None
    assert result.rejected["a"].kind is RejectionKind.POD_UNSCHEDULABLE


def test_gate_on_it_is_deleted_first_with_no_replacement_staged() -> None:
    freed = FreedSlot()
    result = Drift(nowhere, NOW, after_termination=freed).compute([candidate("a")], {"default": 1})
    command = result.command
    assert isinstance(command, RemovalCommand)
    assert command.nodeclaim_names == ["a"]
    assert command.replacements == []
    assert command.terminate_first is TerminateFirstReason.NO_RESERVED_CAPACITY
    assert freed.asked == [("a", RESERVATION)]


def test_gate_on_a_node_holding_no_reservation_slot_is_not_terminated_first() -> None:
    freed = FreedSlot()
    on_demand = candidate("a", reservation="")
    result = Drift(nowhere, NOW, after_termination=freed).compute([on_demand], {"default": 1})
    assert result.command is None
    assert result.rejected["a"].kind is RejectionKind.POD_UNSCHEDULABLE
    assert freed.asked == []  # on-demand or spot frees no slot: it is never asked


def test_gate_on_pods_that_would_not_fit_the_freed_slot_keep_the_node() -> None:
    result = Drift(nowhere, NOW, after_termination=FreedSlot(fits=False)).compute(
        [candidate("a")], {"default": 1}
    )
    assert result.command is None
    assert result.rejected["a"].kind is RejectionKind.POD_UNSCHEDULABLE


def test_gate_on_a_node_that_can_be_replaced_first_still_is() -> None:
    def somewhere(candidate: Candidate, pods: Sequence[Pod]) -> Plan:
        return Plan(new_nodeclaims=[NewNodeClaim("default", Requirements(), [], list(pods), {}, {})])

    result = Drift(somewhere, NOW, after_termination=FreedSlot()).compute([candidate("a")], {"default": 1})
    assert isinstance(result.command, RemovalCommand)
    assert result.command.terminate_first is None
    assert len(result.command.replacements) == 1


def test_terminate_first_keeps_to_the_drifted_budget() -> None:
    result = Drift(nowhere, NOW, after_termination=FreedSlot()).compute([candidate("a")], {"default": 0})
    assert result.command is None
    assert result.rejected["a"].kind is RejectionKind.BUDGET


# -- static drift --------------------------------------------------------------


def test_gate_off_a_static_pool_at_its_node_limit_keeps_its_drifted_nodes() -> None:
    pool = static_pool()
    drifted = [candidate(n, pool, reservation="") for n in ("a", "b")]
    result = StaticDrift({"static": StaticCount(active=3)}, NOW).compute(drifted, {"static": 2})
    assert result.command is None
    assert {why.kind for why in result.rejected.values()} == {RejectionKind.STATIC_AT_NODE_LIMIT}


def test_gate_on_a_static_pool_at_its_limit_deletes_as_many_drifted_nodes_as_the_budget_allows() -> None:
    pool = static_pool()
    drifted = [candidate(n, pool, reservation="") for n in ("a", "b", "c")]
    method = StaticDrift({"static": StaticCount(active=3)}, NOW, terminate_first=True)
    result = method.compute(drifted, {"static": 2})
    command = result.command
    assert isinstance(command, RemovalCommand)
    assert command.nodeclaim_names == ["a", "b"]
    assert command.replacements == []
    assert command.terminate_first is TerminateFirstReason.STATIC_AT_LIMIT


def test_gate_on_a_static_pool_with_room_still_replaces_first() -> None:
    pool = static_pool(limit=4)
    method = StaticDrift({"static": StaticCount(active=3)}, NOW, terminate_first=True)
    result = method.compute([candidate("a", pool, reservation="")], {"static": 1})
    assert isinstance(result.command, RemovalCommand)
    assert result.command.terminate_first is None
    assert len(result.command.replacements) == 1


def test_gate_on_a_static_pool_not_ready_is_not_terminated_first_nothing_would_refill_it() -> None:
    pool = static_pool(is_ready=False)
    method = StaticDrift({"static": StaticCount(active=3)}, NOW, terminate_first=True)
    result = method.compute([candidate("a", pool, reservation="")], {"static": 1})
    assert result.command is None
    assert result.rejected["a"].kind is RejectionKind.STATIC_AT_NODE_LIMIT


def test_gate_on_full_reservations_let_only_the_nodes_holding_an_offered_slot_go_first() -> None:
    pool = static_pool(limit=None)
    holder = candidate("b-holder", pool)
    stranger = candidate("a-stranger", pool, reservation="cr-elsewhere")
    full = StaticReservations(full=True, offered=frozenset({RESERVATION}))
    method = StaticDrift(
        {"static": StaticCount(active=3)}, NOW, terminate_first=True, reservations={"static": full}
    )
    result = method.compute([stranger, holder], {"static": 2})
    command = result.command
    assert isinstance(command, RemovalCommand)
    assert command.nodeclaim_names == ["b-holder"]
    assert command.terminate_first is TerminateFirstReason.NO_RESERVED_CAPACITY
    assert result.rejected["a-stranger"].kind is RejectionKind.STATIC_RESERVATIONS_FULL


def test_gate_off_full_reservations_are_not_looked_at() -> None:
    pool = static_pool(limit=None)
    full = StaticReservations(full=True, offered=frozenset({RESERVATION}))
    method = StaticDrift({"static": StaticCount(active=3)}, NOW, reservations={"static": full})
    result = method.compute([candidate("a", pool)], {"static": 1})
    assert isinstance(result.command, RemovalCommand)
    assert result.command.terminate_first is None  # replace-first, as without the gate


# -- repair --------------------------------------------------------------------

KWOK = RepairPolicyMatcher(KWOK_REPAIR_POLICIES)


def repair(candidates: Sequence[Candidate], **kwargs: object) -> Repair:
    nodes = [c.node for c in candidates] + [
        Node(metadata=ObjectMeta(name=f"healthy-{i}"), conditions=(NodeCondition("Ready", "True"),))
        for i in range(9)
    ]
    pools = {c.nodepool.name for c in candidates}
    return Repair(KWOK, NOW, {pool: nodes for pool in pools}, nowhere, **kwargs)  # type: ignore[arg-type]


def test_gate_off_an_unhealthy_node_whose_pods_fit_only_in_its_full_reservation_stays() -> None:
    sick = candidate("a", drifted=False, sick=True)
    result = repair([sick]).compute([sick], {"default": 1})
    assert result.command is None
    assert result.rejected["a"].kind is RejectionKind.POD_UNSCHEDULABLE


def test_gate_on_an_unhealthy_reserved_node_is_deleted_first() -> None:
    sick = candidate("a", drifted=False, sick=True)
    result = repair([sick], after_termination=FreedSlot()).compute([sick], {"default": 1})
    command = result.command
    assert isinstance(command, RepairCommand)
    assert command.replacements == []
    assert command.terminate_first is TerminateFirstReason.NO_RESERVED_CAPACITY
    assert "a" not in result.rejected


def test_static_repair_at_the_node_limit_waits_without_the_gate_and_terminates_first_with_it() -> None:
    pool = static_pool()
    sick = candidate("a", pool, reservation="", drifted=False, sick=True)
    counts = {"static": StaticCount(active=3)}
    held = repair([sick], static_counts=counts).compute([sick], {"static": 1})
    assert held.command is None
    assert held.rejected["a"].kind is RejectionKind.STATIC_AT_NODE_LIMIT
    first = repair([sick], static_counts=counts, after_termination=FreedSlot()).compute([sick], {"static": 1})
    assert isinstance(first.command, RepairCommand)
    assert first.command.terminate_first is TerminateFirstReason.STATIC_AT_LIMIT
    assert first.command.replacements == []


def test_static_repair_with_room_replaces_one_for_one_and_waits_out_a_scale_down() -> None:
    pool = static_pool(limit=5)
    sick = candidate("a", pool, reservation="", drifted=False, sick=True)
    replaced = repair([sick], static_counts={"static": StaticCount(active=3)}).compute([sick], {"static": 1})
    assert isinstance(replaced.command, RepairCommand)
    assert len(replaced.command.replacements) == 1
    assert replaced.command.terminate_first is None
    scaling = repair([sick], static_counts={"static": StaticCount(active=4)}).compute([sick], {"static": 1})
    assert scaling.command is None
    assert scaling.rejected["a"].kind is RejectionKind.STATIC_SCALING_DOWN


def test_static_repair_with_full_reservations_blocks_a_node_that_frees_no_offered_slot() -> None:
    pool = static_pool(limit=None)
    sick = candidate("a", pool, reservation="cr-gone", drifted=False, sick=True)
    full = {"static": StaticReservations(full=True, offered=frozenset({RESERVATION}))}
    result = repair(
        [sick],
        static_counts={"static": StaticCount(active=3)},
        after_termination=FreedSlot(),
        static_reservations=full,
    ).compute([sick], {"static": 1})
    assert result.command is None
    assert result.rejected["a"].kind is RejectionKind.STATIC_RESERVATIONS_FULL


# -- the helpers ---------------------------------------------------------------


def instance_type(*offerings: Offering) -> InstanceType:
    return InstanceType("m5.large", Requirements(), offerings, {"cpu": 2000})


def test_crediting_a_reservation_adds_its_slot_and_leaves_other_offerings_and_unavailable_ones() -> None:
    full = Offering("a", CAPACITY_TYPE_RESERVED, 0.0, reservation_id=RESERVATION, reservation_capacity=0)
    other = Offering("a", CAPACITY_TYPE_RESERVED, 0.0, reservation_id="cr-other", reservation_capacity=0)
    pool = NodePoolCapacity(DYNAMIC, [instance_type(full, other)])
    untouched = NodePoolCapacity(DYNAMIC, [instance_type(other)])
    credited, same = credit_reservation([pool, untouched], RESERVATION)
    assert [o.reservation_capacity for o in credited.instance_types[0].offerings] == [1, 0]
    assert same is untouched


def test_a_static_pool_is_full_only_when_every_offering_is_a_reservation_without_room() -> None:
    pool = static_pool()
    full = Offering("a", CAPACITY_TYPE_RESERVED, 0.0, reservation_id=RESERVATION, reservation_capacity=0)
    gone = dataclasses.replace(full, reservation_id="cr-gone", available=False)
    room = dataclasses.replace(full, reservation_capacity=1)
    on_demand = Offering("a", CAPACITY_TYPE_ON_DEMAND, 0.1)
    assert static_reservations(pool, [instance_type(full, gone)]) == StaticReservations(
        full=True, offered=frozenset({RESERVATION})
    )
    assert not static_reservations(pool, [instance_type(full, room)]).full
    assert not static_reservations(pool, [instance_type(full, on_demand)]).full


def test_only_a_ready_pool_not_being_deleted_is_refilled() -> None:
    assert refillable(static_pool())
    assert not refillable(static_pool(is_ready=False))
