"""Drift as a disruption method: the first drifted node that may go is replaced, the others say why not."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from tests.support import make_nodepool, make_pod

from karpy.api.conditions import Condition
from karpy.api.core import DO_NOT_DISRUPT_ANNOTATION, Node, Pod
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import (
    CONDITION_DRIFTED,
    CONDITION_INITIALIZED,
    NodeClaim,
    NodeClaimSpec,
    NodeClaimStatus,
)
from karpy.api.nodepool import REASON_DRIFTED, NodeClassRef
from karpy.api.requirements import Requirements
from karpy.disruption.drift import Drift
from karpy.disruption.method import Candidate, Method, MethodResult
from karpy.disruption.rejection import RejectionKind
from karpy.scheduling.solver import NewNodeClaim, Plan

POOL = make_nodepool("default")


def candidate(
    name: str,
    pods: Sequence[Pod] = (),
    *,
    drifted: bool = True,
    node_annotations: dict[str, str] | None = None,
) -> Candidate:
    conditions = [Condition(CONDITION_INITIALIZED, "True")]
    if drifted:
        conditions.append(Condition(CONDITION_DRIFTED, "True", reason="NodePoolDrifted"))
    claim = NodeClaim(
        metadata=ObjectMeta(name=name),
        spec=NodeClaimSpec(node_class_ref=NodeClassRef("karpenter.kwok.sh", "KWOKNodeClass", "default")),
        status=NodeClaimStatus(node_name=name, conditions=tuple(conditions)),
    )
    node = Node(metadata=ObjectMeta(name=name, annotations=node_annotations or {}))
    return Candidate(claim, node, POOL, list(pods))


def pinned(pod: Pod) -> Pod:
    return pod.with_changes(
        metadata=pod.metadata.with_changes(annotations={DO_NOT_DISRUPT_ANNOTATION: "true"})
    )


class Placer:
    """A stand-in for the controller's solve on a snapshot: one new NodeClaim, or a pod left over."""

    def __init__(self, unschedulable: dict[str, str] | None = None) -> None:
        self.unschedulable = unschedulable or {}
        self.asked: list[tuple[str, list[str]]] = []

    def __call__(self, candidate: Candidate, pods: Sequence[Pod]) -> Plan:
        self.asked.append((candidate.nodeclaim.name, [pod.key for pod in pods]))
        if self.unschedulable:
            return Plan(unschedulable=dict(self.unschedulable))
        return Plan(new_nodeclaims=[NewNodeClaim("default", Requirements(), [], list(pods), {}, {})])


def compute(method: Method, candidates: list[Candidate], allowed: dict[str, int]) -> MethodResult:
    return method.compute([c for c in candidates if method.considers(c)], allowed)


def test_it_counts_against_the_drifted_budget_and_looks_only_at_drifted_nodes() -> None:
    method = Drift(Placer(), 0.0)
    assert method.reason == REASON_DRIFTED
    assert method.considers(candidate("old"))
    assert not method.considers(candidate("current", drifted=False))


def test_the_first_drifted_node_by_name_is_replaced_by_what_its_pods_need() -> None:
    placer = Placer()
    result = compute(
        Drift(placer, 0.0),
        [candidate("b", [make_pod("app-y")]), candidate("a", [make_pod("app-x")])],
        {"default": 1},
    )
    assert result.command is not None
    assert result.command.reason == REASON_DRIFTED
    assert result.command.nodeclaim_names == ["a"]
    assert [claim.pods[0].key for claim in result.command.replacements] == ["default/app-x"]
    assert result.command.description == "replace drifted a with 1 new NodeClaims"
    # Only the node chosen was placed elsewhere: the pass stops at the first command.
    assert placer.asked == [("a", ["default/app-x"])]


def test_a_spent_drifted_budget_is_a_budget_rejection_and_nothing_is_solved() -> None:
    placer = Placer()
    result = compute(Drift(placer, 0.0), [candidate("a", [make_pod("app-x")])], {"default": 0})
    assert result.command is None
    assert result.rejected["a"].kind is RejectionKind.BUDGET
    assert "Drifted" in result.rejected["a"].message
    assert placer.asked == []


def test_do_not_disrupt_on_the_node_or_a_pod_is_a_rejection_of_its_kind() -> None:
    placer = Placer()
    nodes = [
        candidate("a", [make_pod("app-x")], node_annotations={DO_NOT_DISRUPT_ANNOTATION: "true"}),
        candidate("b", [pinned(make_pod("app-y"))]),
        candidate("c", [make_pod("app-z")]),
    ]
    result = compute(Drift(placer, 0.0), nodes, {"default": 3})
    assert result.rejected["a"].kind is RejectionKind.NODE_DO_NOT_DISRUPT
    assert result.rejected["b"].kind is RejectionKind.POD_DO_NOT_DISRUPT
    assert result.rejected["b"].pods == ("default/app-y",)
    assert result.command is not None and result.command.nodeclaim_names == ["c"]


def test_a_pod_that_would_not_schedule_elsewhere_keeps_the_node() -> None:
    placer = Placer(unschedulable={"default/app-x": "no instance type fits"})
    result = compute(Drift(placer, 0.0), [candidate("a", [make_pod("app-x")])], {"default": 1})
    assert result.command is None
    rejection = result.rejected["a"]
    assert rejection.kind is RejectionKind.POD_UNSCHEDULABLE
    assert rejection.pods == ("default/app-x",)
    assert "no instance type fits" in rejection.message


def test_without_a_cloud_drifted_nodes_are_only_checked_for_what_holds_them_back() -> None:
    result = compute(
        Drift(None, 0.0), [candidate("a", [make_pod("app-x")]), candidate("b")], {"default": 0, "x": 1}
    )
    assert result.command is None
    assert {reason.kind for reason in result.rejected.values()} == {RejectionKind.BUDGET}
    result = compute(Drift(None, 0.0), [candidate("a", [make_pod("app-x")])], {"default": 1})
    assert result.command is None and result.rejected == {}


def test_a_timed_do_not_disrupt_holds_a_drifted_node_only_until_it_lapses() -> None:
    pod = dataclasses.replace(
        make_pod("app-y").with_changes(
            metadata=make_pod("app-y").metadata.with_changes(annotations={DO_NOT_DISRUPT_ANNOTATION: "2m"})
        ),
        start_time=1000.0,
    )
    held = compute(Drift(Placer(), 1119.0), [candidate("b", [pod])], {"default": 1})
    assert held.command is None
    assert held.rejected["b"].kind is RejectionKind.POD_DO_NOT_DISRUPT
    lapsed = compute(Drift(Placer(), 1120.0), [candidate("b", [pod])], {"default": 1})
    assert lapsed.command is not None and lapsed.command.nodeclaim_names == ["b"]


def test_a_plan_onto_a_node_not_initialized_keeps_the_drifted_node() -> None:
    """As Karpenter: pods are not moved onto capacity that may never come up (its e2e "should not
    disrupt a drifted node if the replacement node registers but never initialized")."""

    def onto_new(candidate: Candidate, pods: Sequence[Pod]) -> Plan:
        return Plan(existing={pod.key: "new-node" for pod in pods})

    drifted = [candidate("a", [make_pod("app-x")])]
    result = compute(Drift(onto_new, 0.0, uninitialized=frozenset({"new-node"})), drifted, {"default": 1})
    assert result.command is None
    rejection = result.rejected["a"]
    assert rejection.kind is RejectionKind.POD_UNSCHEDULABLE
    assert rejection.pods == ("default/app-x",)
    assert "new-node" in rejection.message
    result = compute(Drift(onto_new, 0.0), drifted, {"default": 1})
    assert result.command is not None, "onto initialized capacity the node goes"


def test_a_pod_a_disruption_budget_holds_keeps_the_drifted_node() -> None:
    """Drift is graceful, as in Karpenter (its e2e "should not drift any nodes if their
    PodDisruptionBudgets are unhealthy"): nothing is launched for a node it could not drain."""
    placer = Placer()
    blocked = {"default/app-x": "PodDisruptionBudget default/app allows no disruption now"}
    drifted = [candidate("a", [make_pod("app-x")])]
    result = compute(Drift(placer, 0.0, pdb_blocked=blocked), drifted, {"default": 1})
    assert result.command is None and placer.asked == []
    rejection = result.rejected["a"]
    assert rejection.kind is RejectionKind.POD_DISRUPTION_BUDGET
    assert rejection.pods == ("default/app-x",)
