"""Node repair: the policy matcher (reason regex, fallback, priority, action) and the method."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from tests.support import make_nodepool, make_pod

from karpy.api.conditions import Condition
from karpy.api.core import DO_NOT_DISRUPT_ANNOTATION, Node, NodeCondition, Pod
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import CONDITION_INITIALIZED, NodeClaim, NodeClaimSpec, NodeClaimStatus
from karpy.api.nodepool import REASON_UNHEALTHY, NodeClassRef
from karpy.api.requirements import Requirements
from karpy.cloud.repair_policies import AWS_REPAIR_POLICIES, KWOK_REPAIR_POLICIES, KWOK_UNHEALTHY_CONDITION
from karpy.disruption.method import Candidate
from karpy.disruption.rejection import RejectionKind
from karpy.disruption.repair import (
    DO_NOT_REPAIR_ANNOTATION,
    InvalidRepairPoliciesError,
    Repair,
    RepairAction,
    RepairCommand,
    RepairPolicy,
    RepairPolicyMatcher,
    drain_bound,
    resolve,
    tripped_pools,
)
from karpy.scheduling.solver import NewNodeClaim, Plan

POOL = make_nodepool("default")
MINUTE = 60.0
NOW = 100_000.0
KWOK = RepairPolicyMatcher(KWOK_REPAIR_POLICIES)


def node(name: str, *conditions: NodeCondition, annotations: dict[str, str] | None = None) -> Node:
    ready = NodeCondition("Ready", "True", last_transition_time=0.0)
    types = {c.type for c in conditions}
    return Node(
        metadata=ObjectMeta(name=name, annotations=annotations or {}, creation_timestamp=0.0),
        conditions=(*([ready] if "Ready" not in types else []), *conditions),
    )


def unhealthy(since: float = NOW - 10 * MINUTE, reason: str = "E2ETest") -> NodeCondition:
    return NodeCondition(KWOK_UNHEALTHY_CONDITION, "True", reason, last_transition_time=since)


def candidate(n: Node, pods: Sequence[Pod] = (), grace: float | None = None) -> Candidate:
    claim = NodeClaim(
        metadata=ObjectMeta(name=n.name),
        spec=NodeClaimSpec(
            node_class_ref=NodeClassRef("karpenter.kwok.sh", "KWOKNodeClass", "default"),
            termination_grace_period=grace,
        ),
        status=NodeClaimStatus(node_name=n.name, conditions=(Condition(CONDITION_INITIALIZED, "True"),)),
    )
    return Candidate(claim, n, POOL, list(pods))


def placer(candidate: Candidate, pods: Sequence[Pod]) -> Plan:
    """A stand-in for the controller's solve: one new NodeClaim for the pods, if any."""
    if not pods:
        return Plan()
    return Plan(new_nodeclaims=[NewNodeClaim("default", Requirements(), [], list(pods), {}, {})])


def repair(candidates: Sequence[Candidate], healthy: int = 4, **kwargs: object) -> Repair:
    nodes = [c.node for c in candidates] + [node(f"healthy-{i}") for i in range(healthy)]
    return Repair(KWOK, NOW, {"default": nodes}, placer, **kwargs)  # type: ignore[arg-type]


# -- the matcher ---------------------------------------------------------------


def test_karpy_providers_policy_sets_are_valid_as_karpenter_validates_them() -> None:
    for policies in (KWOK_REPAIR_POLICIES, AWS_REPAIR_POLICIES):
        assert RepairPolicyMatcher(policies).fallback.condition_type == "Ready"


@pytest.mark.parametrize(
    ("policies", "problem"),
    [
        ([RepairPolicy("Ready", "False", 60.0, reason_regex=".*")], "no default fallback"),
        (
            [RepairPolicy("Ready", "False", 60.0), RepairPolicy("Ready", "Unknown", 60.0)],
            "both default fallbacks",
        ),
        ([RepairPolicy("Ready", "False", 60.0, action=RepairAction.REBOOT)], "must replace the node"),
        ([RepairPolicy("Ready", "Maybe", 60.0)], "invalid condition status"),
        ([RepairPolicy("Ready", "False", -1.0)], "negative toleration"),
        ([RepairPolicy("Ready", "False", 1.0, priority=101)], "outside [0, 100]"),
        (
            [RepairPolicy("Ready", "False", 1.0), RepairPolicy("X", "True", 1.0, reason_regex="(")],
            "invalid reason",
        ),
    ],
)
def test_an_invalid_policy_set_is_refused_naming_the_problem(
    policies: list[RepairPolicy], problem: str
) -> None:
    with pytest.raises(InvalidRepairPoliciesError, match=problem.replace("[", r"\[")):
        RepairPolicyMatcher(policies)


def test_a_condition_is_eligible_only_past_its_toleration_from_the_last_transition() -> None:
    fresh = node("a", unhealthy(since=NOW - 20.0))
    assert resolve(KWOK.match(fresh), NOW) is None  # 30 s toleration, 20 s held
    aged = node("a", unhealthy(since=NOW - 31.0))
    decision = resolve(KWOK.match(aged), NOW)
    assert decision is not None and decision.action is RepairAction.REPLACE
    assert decision.condition_type == KWOK_UNHEALTHY_CONDITION and decision.termination_grace_period == 45.0


def test_a_transition_before_the_node_existed_counts_from_its_creation() -> None:
    n = node("a", unhealthy(since=0.0))
    young = Node(
        metadata=ObjectMeta(name="a", creation_timestamp=NOW - 10.0),
        conditions=n.conditions,
    )
    assert resolve(KWOK.match(young), NOW) is None


def test_a_healthy_node_or_an_uncovered_condition_matches_nothing() -> None:
    assert KWOK.match(node("a")) == []
    assert KWOK.match(node("a", NodeCondition("MemoryPressure", "True", last_transition_time=0.0))) == []
    assert not KWOK.is_unhealthy(node("a"))


def test_a_reason_no_specific_policy_matches_falls_back_to_the_default() -> None:
    policies = [
        RepairPolicy("Ready", "False", 10 * MINUTE),
        RepairPolicy("Kernel", "False", MINUTE, reason_regex="^Deadlock$", termination_grace_period=0.0),
    ]
    matcher = RepairPolicyMatcher(policies)
    deadlock = node("a", NodeCondition("Kernel", "False", "Deadlock", last_transition_time=NOW - 2 * MINUTE))
    other = node("a", NodeCondition("Kernel", "False", "Oops", last_transition_time=NOW - 2 * MINUTE))
    matched = resolve(matcher.match(deadlock), NOW)
    assert matched is not None and not matched.fallback and matched.termination_grace_period == 0.0
    # The fallback's toleration (10 minutes) applies to a reason the specific policy does not name.
    assert resolve(matcher.match(other), NOW) is None
    later = resolve(matcher.match(other), NOW + 9 * MINUTE)
    assert later is not None and later.fallback and later.termination_grace_period is None


def test_the_most_disruptive_eligible_action_wins_and_the_shortest_drain_bound_is_kept() -> None:
    policies = [
        RepairPolicy("Ready", "False", MINUTE, termination_grace_period=0.0),
        RepairPolicy("Gpu", "False", MINUTE, reason_regex=".*", priority=90, action=RepairAction.REBOOT),
        RepairPolicy("Disk", "False", MINUTE, reason_regex=".*", termination_grace_period=300.0),
    ]
    matcher = RepairPolicyMatcher(policies)
    since = NOW - 5 * MINUTE
    both = node(
        "a",
        NodeCondition("Gpu", "False", "Xid", last_transition_time=since),
        NodeCondition("Disk", "False", "Full", last_transition_time=since),
    )
    decision = resolve(matcher.match(both), NOW)
    assert decision is not None
    # Replace beats a higher-priority reboot; the reboot's priority still ranks the node.
    assert decision.action is RepairAction.REPLACE and decision.condition_type == "Disk"
    assert (
        decision.termination_grace_period == 300.0 and decision.termination_grace_period_condition == "Disk"
    )
    assert decision.score_rank == 1  # priorities 0 and 90: dense ranks 0 and 1
    reboot_only = node("a", NodeCondition("Gpu", "False", "Xid", last_transition_time=since))
    rebooted = resolve(matcher.match(reboot_only), NOW)
    assert rebooted is not None and rebooted.action is RepairAction.REBOOT


def test_among_equal_actions_the_higher_priority_then_the_earlier_eligibility_is_selected() -> None:
    policies = [
        RepairPolicy("Ready", "False", MINUTE),
        RepairPolicy("A", "False", MINUTE, reason_regex=".*", priority=10),
        RepairPolicy("B", "False", MINUTE, reason_regex=".*", priority=50),
    ]
    matcher = RepairPolicyMatcher(policies)
    n = node(
        "a",
        NodeCondition("A", "False", last_transition_time=NOW - 50 * MINUTE),
        NodeCondition("B", "False", last_transition_time=NOW - 2 * MINUTE),
    )
    decision = resolve(matcher.match(n), NOW)
    assert decision is not None and decision.condition_type == "B"


def test_a_toleration_counts_again_from_the_end_of_a_reboot() -> None:
    n = node("a", unhealthy(since=NOW - 10 * MINUTE))
    assert resolve(KWOK.match(n), NOW, not_before=NOW - 10.0) is None
    assert resolve(KWOK.match(n), NOW, not_before=NOW - 31.0) is not None


def test_the_drain_bound_is_the_policys_capped_by_the_nodeclaims_or_the_nodeclaims_own() -> None:
    decision = resolve(KWOK.match(node("a", unhealthy())), NOW)
    assert decision is not None
    assert drain_bound(decision, None) == 45.0
    assert drain_bound(decision, 30.0) == 30.0
    assert drain_bound(decision, 600.0) == 45.0


# -- the breaker ---------------------------------------------------------------


def test_the_breaker_trips_above_a_fifth_of_a_pool_rounded_up() -> None:
    sick = [node(f"s{i}", unhealthy()) for i in range(2)]
    well = [node(f"w{i}") for i in range(3)]
    assert tripped_pools({"p": [*sick[:1], *well]}, KWOK) == frozenset()  # 1 of 4: ceil(0.8) = 1
    assert tripped_pools({"p": [*sick, *well]}, KWOK) == frozenset({"p"})  # 2 of 5 > ceil(1) = 1
    assert tripped_pools({"p": sick[:1]}, KWOK) == frozenset()  # 1 of 1 is not over ceil(0.2) = 1
    # A fresh fault counts at once, toleration aside: the breaker guards against correlated failures.
    assert tripped_pools({"p": [node("x", unhealthy(since=NOW)), sick[0], *well]}, KWOK) == {"p"}


# -- the method -----------------------------------------------------------------


def test_repair_counts_against_the_unhealthy_budget_and_replaces_first() -> None:
    sick = candidate(node("sick", unhealthy()), [make_pod("web-1", "500m")])
    method = repair([sick])
    assert method.reason == REASON_UNHEALTHY == "Unhealthy"
    assert method.considers(sick) and not method.considers(candidate(node("fine")))
    result = method.compute([sick], {"default": 1})
    command = result.command
    assert isinstance(command, RepairCommand)
    assert command.nodeclaim_names == ["sick"] and len(command.replacements) == 1
    assert command.drain_bound == 45.0 and command.decision.condition_type == KWOK_UNHEALTHY_CONDITION


def test_an_empty_unhealthy_node_goes_without_a_replacement() -> None:
    sick = candidate(node("sick", unhealthy()))
    command = repair([sick]).compute([sick], {"default": 1}).command
    assert isinstance(command, RepairCommand) and command.replacements == []


def test_do_not_repair_on_the_node_vetoes_and_do_not_disrupt_does_not() -> None:
    vetoed = candidate(node("vetoed", unhealthy(), annotations={DO_NOT_REPAIR_ANNOTATION: "true"}))
    result = repair([vetoed]).compute([vetoed], {"default": 1})
    assert result.command is None and result.rejected["vetoed"].kind is RejectionKind.DO_NOT_REPAIR
    pinned = candidate(node("pinned", unhealthy(), annotations={DO_NOT_DISRUPT_ANNOTATION: "true"}))
    assert repair([pinned]).compute([pinned], {"default": 1}).command is not None


def test_the_budget_holds_repair_back() -> None:
    sick = candidate(node("sick", unhealthy()))
    result = repair([sick]).compute([sick], {"default": 0})
    assert result.command is None and result.rejected["sick"].kind is RejectionKind.BUDGET
    assert REASON_UNHEALTHY in result.rejected["sick"].message


def test_a_tripped_breaker_freezes_the_pool() -> None:
    a, b = candidate(node("a", unhealthy())), candidate(node("b", unhealthy()))
    result = repair([a, b], healthy=3).compute([a, b], {"default": 5})
    assert result.command is None
    assert {r.kind for r in result.rejected.values()} == {RejectionKind.REPAIR_BREAKER}


def test_a_pod_that_cannot_be_evicted_holds_repair_only_without_any_drain_bound() -> None:
    pod = make_pod("db-0", "500m")
    pinned = pod.with_changes(
        metadata=pod.metadata.with_changes(annotations={DO_NOT_DISRUPT_ANNOTATION: "true"})
    )
    policies = [RepairPolicy("Ready", "False", MINUTE), RepairPolicy("X", "True", MINUTE, reason_regex=".*")]
    matcher = RepairPolicyMatcher(policies)
    sick = node("sick", NodeCondition("X", "True", last_transition_time=NOW - 5 * MINUTE))
    unbounded = Repair(matcher, NOW, {"default": [sick]}, placer)
    result = unbounded.compute([candidate(sick, [pinned])], {"default": 1})
    assert result.command is None and result.rejected["sick"].kind is RejectionKind.POD_DO_NOT_DISRUPT
    # The NodeClaim's own terminationGracePeriod bounds the drain: repair goes ahead.
    bounded = unbounded.compute([candidate(sick, [pinned], grace=300.0)], {"default": 1}).command
    assert isinstance(bounded, RepairCommand) and bounded.drain_bound is None
    # KWOKUnhealthy's policy bounds it itself (45 s), whatever the NodeClaim says.
    kwok = candidate(node("k", unhealthy()), [pinned])
    assert repair([kwok]).compute([kwok], {"default": 1}).command is not None


def test_the_longest_waiting_node_is_repaired_first() -> None:
    older = candidate(node("b-older", unhealthy(since=NOW - 60 * MINUTE)))
    newer = candidate(node("a-newer", unhealthy(since=NOW - 2 * MINUTE)))
    command = repair([older, newer], healthy=8).compute([newer, older], {"default": 2}).command
    assert command is not None and command.nodeclaim_names == ["b-older"]


def test_a_node_whose_pods_fit_nowhere_is_not_repaired() -> None:
    sick = candidate(node("sick", unhealthy()), [make_pod("big", "100")])
    method = Repair(
        KWOK, NOW, {"default": [sick.node]}, lambda c, pods: Plan(unschedulable={"default/big": "too big"})
    )
    result = method.compute([sick], {"default": 1})
    assert result.command is None and result.rejected["sick"].kind is RejectionKind.POD_UNSCHEDULABLE


def test_a_reboot_policy_escalates_to_replacement_when_the_cloud_cannot_reboot() -> None:
    reboot = NodeCondition("KWOKRebootRequired", "True", "E2E", last_transition_time=NOW - MINUTE)
    sick = candidate(node("sick", reboot), [make_pod("web", "500m")])
    command = repair([sick]).compute([sick], {"default": 1}).command
    assert isinstance(command, RepairCommand) and not command.reboot and len(command.replacements) == 1
    in_place = repair([sick], can_reboot=True).compute([sick], {"default": 1}).command
    assert isinstance(in_place, RepairCommand) and in_place.reboot and in_place.replacements == []


def test_a_node_rebooted_twice_is_replaced_instead_of_rebooted_again() -> None:
    reboot = NodeCondition("KWOKRebootRequired", "True", "E2E", last_transition_time=NOW - MINUTE)
    sick = candidate(node("sick", reboot), [make_pod("web", "500m")])
    exhausted = repair([sick], can_reboot=True, reboots_exhausted=frozenset({"sick"}))
    command = exhausted.compute([sick], {"default": 1}).command
    assert isinstance(command, RepairCommand) and not command.reboot and len(command.replacements) == 1


def test_after_a_reboot_the_toleration_counts_from_its_end() -> None:
    sick = candidate(node("sick", unhealthy(since=NOW - 60 * MINUTE)))
    method = repair([sick], rebooted_at={"sick": NOW - 10.0})
    assert not method.considers(sick)
    assert method.next_due([sick]) == NOW + 20.0  # 30 s from the reboot's end
    assert repair([sick]).next_due([sick]) is None  # eligible already


def test_an_empty_node_of_a_reboot_policy_is_replaced_when_the_cloud_cannot_reboot() -> None:
    reboot = NodeCondition("KWOKRebootRequired", "True", "E2E", last_transition_time=NOW - MINUTE)
    empty = candidate(node("empty", reboot))
    command = repair([empty]).compute([empty], {"default": 1}).command
    assert isinstance(command, RepairCommand) and not command.reboot and command.replacements == []


def test_a_node_whose_pods_would_wait_on_an_uninitialized_node_is_not_repaired() -> None:
    sick = candidate(node("sick", unhealthy()), [make_pod("web-1", "500m"), make_pod("web-0", "500m")])

    def onto_new(c: Candidate, pods: Sequence[Pod]) -> Plan:
        return Plan(existing={pod.key: "new-node" for pod in pods})

    method = Repair(KWOK, NOW, {"default": [sick.node]}, onto_new, uninitialized=frozenset({"new-node"}))
    rejection = method.compute([sick], {"default": 1}).rejected["sick"]
    assert rejection.kind is RejectionKind.TARGET_NOT_INITIALIZED
    assert rejection.pods == ("default/web-0",), "the first pod by key is named"
    assert "new-node" in rejection.message
