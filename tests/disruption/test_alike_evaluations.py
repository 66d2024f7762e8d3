"""Single-node evaluations shared between alike nodes (``RemovalSimulator.alike_key``).

A plan launches many nodes of one type full of the same Deployments' pods;
consolidation evaluates each alone, and for alike nodes the answer is the
same, so it is worked out once per pass. These tests check that it is, and
that nodes that differ in what the evaluation reads (the node's price, the
pods' specs) are each worked out: a key that left either out would hand one
node's answer to the other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from tests.disruption.test_consolidation import ARM, LARGE, NOW, Cluster, owned
from tests.support import make_pod

from karpy.api.core import Pod
from karpy.disruption import consolidation as consolidation_module
from karpy.disruption.consolidation import KARPENTER_RULES
from karpy.disruption.decision import ConsolidationDecision, decide_consolidation
from karpy.disruption.memo import EvaluationMemo
from karpy.disruption.method import Candidate
from karpy.scheduling.solver import NodePoolCapacity, TypeMemo

AMD64_ONLY = "  nodeSelector: {kubernetes.io/arch: amd64}"


def versioned(pod: Pod) -> Pod:
    return pod.with_changes(metadata=pod.metadata.with_changes(resource_version="1"))


def replica(name: str, extra_spec: str = "") -> Pod:
    return versioned(owned(make_pod(name, "1", "1Gi", extra_spec=extra_spec, labels="{app: web}")))


def full_node(cluster: Cluster, name: str, *, extra_spec: str = "", price: float | None = None) -> None:
    """A LARGE node (4 CPUs) full of four 1-CPU replicas, every object with a resourceVersion."""
    cluster.add(name, LARGE, [replica(f"{name}-{i}", extra_spec) for i in range(4)])
    candidate = cluster.candidates[-1]
    claim_meta = candidate.nodeclaim.metadata.with_changes(resource_version="1")
    node_meta = candidate.node.metadata.with_changes(resource_version="1")
    cluster.candidates[-1] = Candidate(
        dataclasses.replace(candidate.nodeclaim, metadata=claim_meta),
        candidate.node.with_changes(metadata=node_meta),
        candidate.nodepool,
        candidate.pods,
    )
    if price is not None:
        cluster.prices[name] = price


def decide(cluster: Cluster, memo: EvaluationMemo | None) -> ConsolidationDecision:
    pools = [NodePoolCapacity(cluster.nodepool, cluster.types, memo=TypeMemo())]
    return decide_consolidation(
        cluster.candidates,
        cluster.capacity,
        pools,
        cluster.prices,
        {cluster.nodepool.name: 10},
        {},
        NOW,
        rules=KARPENTER_RULES,
        memo=memo,
    )


@pytest.fixture
def single_simulations(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the nodes each single-node evaluation worked out (not answered from the memo)."""
    worked: list[str] = []
    original = consolidation_module._worked_out

    def counting(removed: list[Candidate], *args: object, **kwargs: object) -> object:
        if len(removed) == 1:
            worked.append(removed[0].nodeclaim.name)
        return original(removed, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(consolidation_module, "_worked_out", counting)
    yield worked


def same_decision(first: ConsolidationDecision, second: ConsolidationDecision) -> None:
    assert (first.command.description if first.command else None) == (
        second.command.description if second.command else None
    )
    assert first.unconsolidatable == second.unconsolidatable
    assert first.blocked == second.blocked


def test_alike_full_nodes_are_worked_out_once_and_decide_as_each_worked_out(
    single_simulations: list[str],
) -> None:
    cluster = Cluster(types=[LARGE])
    for index in range(12):
        full_node(cluster, f"node-{index:02d}")
    without = decide(cluster, None)
    assert without.command is None
    assert len(without.unconsolidatable) == 12
    worked_without = len(single_simulations)
    single_simulations.clear()

    with_memo = decide(cluster, EvaluationMemo())
    same_decision(without, with_memo)
    assert worked_without == 12
    assert single_simulations == ["node-00"]


def test_nodes_alike_but_for_their_price_are_each_worked_out(single_simulations: list[str]) -> None:
    # node-a is priced as a LARGE is (nothing cheaper replaces it); node-b was launched dearer,
    # so a new LARGE replaces it. Both are alike otherwise, and node-a is evaluated first.
    cluster = Cluster(types=[LARGE])
    full_node(cluster, "node-a")
    full_node(cluster, "node-b", price=0.30)
    without = decide(cluster, None)
    with_memo = decide(cluster, EvaluationMemo())
    assert with_memo.command is not None
    assert with_memo.command.nodeclaim_names == ["node-b"]
    same_decision(without, with_memo)


def test_nodes_whose_pods_differ_in_spec_are_each_worked_out() -> None:
    # Same node, same requests; node-a's pods need amd64 (only a LARGE), node-b's may go to
    # the cheaper arm64 type: a replacement for node-b only.
    cluster = Cluster(types=[LARGE, ARM])
    full_node(cluster, "node-a", extra_spec=AMD64_ONLY)
    full_node(cluster, "node-b")
    without = decide(cluster, None)
    with_memo = decide(cluster, EvaluationMemo())
    assert with_memo.command is not None
    assert with_memo.command.nodeclaim_names == ["node-b"]
    same_decision(without, with_memo)


def test_an_answer_naming_a_pod_is_kept_for_its_node_alone() -> None:
    # Nothing can take the pods (no type is offered): each node's answer names one of its own
    # pods, and each node gets its own answer.
    cluster = Cluster(types=[LARGE])
    for name in ("node-a", "node-b"):
        full_node(cluster, name)
    cluster.types = []
    memo = EvaluationMemo()
    decision = decide(cluster, memo)
    assert decision.unconsolidatable["node-a"].message.startswith("pod default/node-a-")
    assert decision.unconsolidatable["node-b"].message.startswith("pod default/node-b-")


def test_a_pod_without_a_resource_version_has_no_signature() -> None:
    memo = EvaluationMemo()
    pod = owned(make_pod("web", "1", "1Gi"))
    assert memo.pod_signature(pod) is None
    first, second = versioned(pod), versioned(owned(make_pod("web-2", "1", "1Gi")))
    assert memo.pod_signature(first) == memo.pod_signature(second)
    bound = first.with_changes(spec=dataclasses.replace(first.spec, node_name="node-a"))
    assert memo.pod_signature(bound.with_changes(metadata=bound.metadata.with_changes(name="web-3"))) == (
        memo.pod_signature(first)
    )
    other = versioned(owned(make_pod("web-4", "1", "1Gi", labels="{app: other}")))
    assert memo.pod_signature(other) != memo.pod_signature(first)
