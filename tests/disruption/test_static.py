"""Static NodePools' decisions: how many to launch or remove, which go first, how drift replaces them."""

from __future__ import annotations

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
from karpy.api.nodepool import REASON_DRIFTED, NodeClassRef, NodePool
from karpy.api.requirements import LABEL_NODEPOOL
from karpy.disruption.drift import Drift
from karpy.disruption.emptiness import considered
from karpy.disruption.method import Candidate
from karpy.disruption.rejection import RejectionKind
from karpy.disruption.static import (
    StaticCount,
    StaticDrift,
    StaticMember,
    scale_down_order,
    static_nodeclaim,
    to_launch,
    to_remove,
)


def static_pool(replicas: int, extra: str = "") -> NodePool:
    return make_nodepool("static", spec=f"  replicas: {replicas}\n{extra}")


def test_a_static_pool_launches_up_to_its_replicas() -> None:
    pool = static_pool(10)
    assert to_launch(pool, StaticCount()) == 10
    assert to_launch(pool, StaticCount(active=4, deleting=3)) == 6
    assert to_launch(pool, StaticCount(active=10)) == 0
    # A drifted node being replaced: its replacement is active already, nothing more to launch.
    assert to_launch(pool, StaticCount(active=9, pending_disruption=1)) == 0


def test_limits_nodes_caps_every_nodeclaim_of_the_pool_deleting_ones_included() -> None:
    pool = static_pool(10, "  limits: {nodes: 5}\n")
    assert to_launch(pool, StaticCount()) == 5
    assert to_launch(pool, StaticCount(active=3, deleting=2)) == 0
    assert to_launch(pool, StaticCount(active=5)) == 0


def test_a_static_pool_removes_active_nodeclaims_beyond_its_replicas() -> None:
    pool = static_pool(3)
    assert to_remove(pool, StaticCount(active=5)) == 2
    assert to_remove(pool, StaticCount(active=3, pending_disruption=1)) == 0
    assert to_remove(static_pool(0), StaticCount(active=3, deleting=1)) == 3


def pinned(pod: Pod) -> Pod:
    return pod.with_changes(
        metadata=pod.metadata.with_changes(annotations={DO_NOT_DISRUPT_ANNOTATION: "true"})
    )


def test_scale_down_takes_unlaunched_then_empty_then_cheapest_and_do_not_disrupt_last() -> None:
    members = [
        StaticMember("a-pinned", True, [pinned(make_pod("p0"))]),
        StaticMember("b-two-pods", True, [make_pod("p1"), make_pod("p2")]),
        StaticMember("c-one-pod", True, [make_pod("p3")]),
        StaticMember("d-empty", True, []),
        StaticMember("e-unlaunched", False),
        StaticMember("f-one-pod-expiring", True, [make_pod("p4")], lifetime_remaining=0.5),
    ]
    assert [member.name for member in scale_down_order(members)] == [
        "e-unlaunched",
        "d-empty",
        "f-one-pod-expiring",
        "c-one-pod",
        "b-two-pods",
        "a-pinned",
    ]


def test_a_static_nodeclaim_is_the_template_alone() -> None:
    new = static_nodeclaim(static_pool(1))
    assert new.pods == [] and new.requests == {}
    assert new.requirements.get(LABEL_NODEPOOL).values == frozenset({"static"})


def candidate(pool: NodePool, name: str, pods: Sequence[Pod] = (), *, drifted: bool = True) -> Candidate:
    conditions = [Condition(CONDITION_INITIALIZED, "True")]
    if drifted:
        conditions.append(Condition(CONDITION_DRIFTED, "True", reason="NodePoolDrifted"))
    claim = NodeClaim(
        metadata=ObjectMeta(name=name, labels={LABEL_NODEPOOL: pool.name}),
        spec=NodeClaimSpec(node_class_ref=NodeClassRef("karpenter.kwok.sh", "KWOKNodeClass", "default")),
        status=NodeClaimStatus(node_name=name, conditions=tuple(conditions)),
    )
    return Candidate(claim, Node(metadata=ObjectMeta(name=name)), pool, list(pods))


def test_consolidation_emptiness_and_dynamic_drift_leave_static_pools_alone() -> None:
    static = candidate(static_pool(3), "s1")
    dynamic = candidate(make_nodepool("dynamic"), "d1")
    assert not considered(static) and considered(dynamic)
    assert not Drift(None, 0.0).considers(static) and Drift(None, 0.0).considers(dynamic)
    assert StaticDrift({}, 0.0).considers(static) and not StaticDrift({}, 0.0).considers(dynamic)
    assert not StaticDrift({}, 0.0).considers(candidate(static_pool(3), "s2", drifted=False))


def test_static_drift_replaces_as_many_as_the_budget_and_the_node_limit_allow() -> None:
    pool = static_pool(10, "  limits: {nodes: 12}\n")
    drifted = [candidate(pool, f"n{i:02}") for i in range(10)]
    method = StaticDrift({"static": StaticCount(active=10)}, 0.0)
    result = method.compute(drifted, {"static": 4})
    assert result.command is not None
    assert result.command.reason == REASON_DRIFTED
    assert result.command.nodeclaim_names == ["n00", "n01"]  # two more nodes fit under the limit of 12
    assert [new.nodepool for new in result.command.replacements] == ["static", "static"]
    assert all(not new.pods for new in result.command.replacements)
    unlimited = StaticDrift({"static": StaticCount(active=10)}, 0.0).compute(
        [candidate(static_pool(10), f"n{i:02}") for i in range(10)], {"static": 2}
    )
    assert unlimited.command is not None and unlimited.command.nodeclaim_names == ["n00", "n01"]


def test_static_drift_waits_at_the_node_limit_for_the_budget_and_for_a_scale_down() -> None:
    pool = static_pool(3, "  limits: {nodes: 3}\n")
    drifted = [candidate(pool, "n1"), candidate(pool, "n2")]
    at_limit = StaticDrift({"static": StaticCount(active=3)}, 0.0).compute(drifted, {"static": 1})
    assert at_limit.command is None
    assert {why.kind for why in at_limit.rejected.values()} == {RejectionKind.STATIC_AT_NODE_LIMIT}
    no_budget = StaticDrift({"static": StaticCount(active=2)}, 0.0).compute(drifted, {"static": 0})
    assert {why.kind for why in no_budget.rejected.values()} == {RejectionKind.BUDGET}
    scaling = StaticDrift({"static": StaticCount(active=4)}, 0.0).compute(drifted, {"static": 1})
    assert {why.kind for why in scaling.rejected.values()} == {RejectionKind.STATIC_SCALING_DOWN}


def test_static_drift_keeps_nodes_with_do_not_disrupt_pods() -> None:
    pool = static_pool(2)
    result = StaticDrift({"static": StaticCount(active=2)}, 0.0).compute(
        [candidate(pool, "n1", [pinned(make_pod("p"))]), candidate(pool, "n2")], {"static": 2}
    )
    assert result.command is not None and result.command.nodeclaim_names == ["n2"]
    assert result.rejected["n1"].kind == RejectionKind.POD_DO_NOT_DISRUPT
