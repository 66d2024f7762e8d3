"""Emptiness as a disruption method: which empty nodes it deletes now, and why it leaves others alone."""

from __future__ import annotations

from tests.support import make_nodepool, make_pod

from karpy.api.conditions import Condition
from karpy.api.core import DO_NOT_DISRUPT_ANNOTATION, Node, Pod
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import CONDITION_INITIALIZED, NodeClaim, NodeClaimSpec, NodeClaimStatus
from karpy.api.nodepool import REASON_EMPTY, NodeClassRef, NodePool
from karpy.disruption.emptiness import Emptiness, EmptinessDecision
from karpy.disruption.method import Candidate, Method
from karpy.disruption.rejection import RejectionKind

NOW = 10_000.0
POOL = make_nodepool("default", spec="  disruption: {consolidateAfter: 30s}")


def candidate(
    name: str,
    pods: list[Pod] | None = None,
    *,
    nodepool: NodePool = POOL,
    initialized_at: float = 0.0,
    node_annotations: dict[str, str] | None = None,
) -> Candidate:
    claim = NodeClaim(
        metadata=ObjectMeta(name=name, creation_timestamp=initialized_at),
        spec=NodeClaimSpec(node_class_ref=NodeClassRef("karpenter.kwok.sh", "KWOKNodeClass", "default")),
        status=NodeClaimStatus(
            node_name=name,
            conditions=(Condition(CONDITION_INITIALIZED, "True", last_transition_time=initialized_at),),
        ),
    )
    node = Node(metadata=ObjectMeta(name=name, annotations=node_annotations or {}))
    return Candidate(claim, node, nodepool, pods or [])


def compute(candidates: list[Candidate], allowed: dict[str, int]) -> EmptinessDecision:
    method: Method = Emptiness(NOW)
    result = method.compute([c for c in candidates if method.considers(c)], allowed)
    assert isinstance(result, EmptinessDecision)
    return result


def test_it_counts_against_the_empty_budget_and_looks_only_at_empty_nodes() -> None:
    method = Emptiness(NOW)
    assert method.reason == REASON_EMPTY
    assert method.considers(candidate("empty"))
    assert not method.considers(candidate("busy", [make_pod("web")]))
    never = make_nodepool("never", spec="  disruption: {consolidateAfter: Never}")
    assert not method.considers(candidate("never", nodepool=never))


def test_empty_nodes_past_consolidate_after_are_deleted_by_one_command() -> None:
    result = compute([candidate("b"), candidate("a"), candidate("c")], {"default": 5})
    assert result.command is not None
    assert result.command.reason == REASON_EMPTY
    assert result.command.nodeclaim_names == ["a", "b", "c"]
    assert result.command.replacements == []
    assert result.command.description == "delete empty a, b, c"
    assert result.rejected == {}
    assert result.due_at == {"a": 30.0, "b": 30.0, "c": 30.0}


def test_a_node_not_yet_empty_for_long_enough_is_no_command_but_says_when() -> None:
    result = compute([candidate("fresh", initialized_at=NOW - 10)], {"default": 5})
    assert result.command is None
    assert result.next_due == NOW + 20
    assert result.has_work


def test_the_budget_holds_back_the_rest_with_a_budget_rejection() -> None:
    result = compute([candidate("a"), candidate("b"), candidate("c")], {"default": 1})
    assert result.command is not None and result.command.nodeclaim_names == ["a"]
    assert result.deferred == ["b", "c"]
    assert {name: reason.kind for name, reason in result.rejected.items()} == {
        "b": RejectionKind.BUDGET,
        "c": RejectionKind.BUDGET,
    }
    assert "NodePool default" in result.rejected["b"].message


def test_a_nodepool_missing_from_the_budgets_gives_up_none() -> None:
    result = compute([candidate("a")], {})
    assert result.command is None
    assert result.rejected["a"].kind is RejectionKind.BUDGET
    assert result.deferred == ["a"]


def test_do_not_disrupt_on_the_node_is_a_rejection_of_its_kind() -> None:
    held = candidate("held", node_annotations={DO_NOT_DISRUPT_ANNOTATION: "true"})
    result = compute([held, candidate("free")], {"default": 5})
    assert result.command is not None and result.command.nodeclaim_names == ["free"]
    assert result.rejected["held"].kind is RejectionKind.NODE_DO_NOT_DISRUPT
    assert "held" not in result.due_at
