"""What a NodePool may launch, worked out once per pool and kept while its inputs stay.

A consolidation pass solves once per candidate; each solve used to scan the
provider's whole catalog against the pool's requirements. The snapshot now
hands the solver only the types the pool admits, and keeps that answer (and
the DaemonSets' overhead on each type) between passes until the pool's
template, the DaemonSets or the catalog change.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from tests.support import make_instance_type, make_nodepool, make_pod, parse_object

from karpy.api.core import DaemonSet
from karpy.api.instancetype import InstanceType
from karpy.controllers.state import PoolTypesCache
from karpy.scheduling.solver import NodePoolCapacity, Plan, TypeMemo, launchable_types, solve

CATALOG = [
    make_instance_type("c.2x", cpu=2, memory_gib=4, price=0.10),
    make_instance_type("c.4x", cpu=4, memory_gib=8, price=0.20),
    make_instance_type("m.4x", cpu=4, memory_gib=16, price=0.24),
    make_instance_type("g.8x", cpu=8, memory_gib=32, price=0.90, arch="arm64"),
]
ONLY_C = """
      requirements:
        - {key: node.kubernetes.io/instance-type, operator: In, values: [c.2x, c.4x]}
"""
AMD64 = """
      requirements:
        - {key: kubernetes.io/arch, operator: In, values: [amd64]}
"""
DAEMONSET = """
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: kube-system}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers: [{name: agent, image: agent, resources: {requests: {cpu: 200m, memory: 128Mi}}}]
"""


def names(types: Sequence[InstanceType]) -> list[str]:
    return [t.name for t in types]


def test_a_pool_launches_only_the_types_its_requirements_admit_in_catalog_order() -> None:
    assert names(launchable_types(make_nodepool(template_spec=ONLY_C), CATALOG)) == ["c.2x", "c.4x"]
    assert names(launchable_types(make_nodepool(template_spec=AMD64), CATALOG)) == ["c.2x", "c.4x", "m.4x"]
    assert names(launchable_types(make_nodepool(), CATALOG)) == names(CATALOG)


def test_leaving_out_the_types_a_pool_excludes_changes_no_plan() -> None:
    pools = [make_nodepool(template_spec=ONLY_C), make_nodepool("general", template_spec=AMD64)]
    pods = [
        make_pod(f"p{i}", cpu=cpu, memory=memory)
        for i, (cpu, memory) in enumerate(
            [("1", "1Gi"), ("3", "2Gi"), ("500m", "6Gi"), ("2", "10Gi"), ("1", "1Gi")] * 3
        )
    ]

    def plan(filtered: bool) -> list[tuple[str, list[str], list[str]]]:
        capacities = [
            NodePoolCapacity(pool, launchable_types(pool, CATALOG) if filtered else CATALOG) for pool in pools
        ]
        result = solve(pods, [], capacities)
        assert not result.unschedulable
        return [
            (claim.nodepool, names(claim.instance_types), sorted(pod.key for pod in claim.pods))
            for claim in result.new_nodeclaims
        ]

    assert plan(filtered=True) == plan(filtered=False)


def test_the_cache_answers_again_only_while_pool_daemonsets_and_catalog_stay() -> None:
    cache = PoolTypesCache()
    pool = make_nodepool(template_spec=AMD64)
    daemonset = parse_object(DAEMONSET)
    assert isinstance(daemonset, DaemonSet)
    first = cache.get(pool, (), CATALOG)
    assert cache.get(pool, (), CATALOG) is first
    # A status-only change of the pool (a new object, same template) keeps the answer.
    assert cache.get(dataclasses.replace(pool), (), CATALOG) is first

    with_agent = cache.get(pool, (daemonset,), CATALOG)
    assert with_agent is not first
    assert with_agent.overhead["cpu"] == 200

    narrowed = cache.get(make_nodepool(template_spec=ONLY_C), (daemonset,), CATALOG)
    assert names(narrowed.launchable) == ["c.2x", "c.4x"]

    # The provider returns a new list when the catalog changes: worked out afresh.
    smaller = CATALOG[:1]
    assert names(cache.get(pool, (daemonset,), smaller).launchable) == ["c.2x"]


def test_solves_sharing_a_memo_plan_as_solves_without_one_and_reuse_its_answers() -> None:
    pool = make_nodepool(template_spec=AMD64)
    pods = [
        make_pod(f"p{i}", cpu=cpu, memory=memory)
        for i, (cpu, memory) in enumerate([("1", "1Gi"), ("3", "6Gi")] * 4)
    ]
    memo = TypeMemo()
    shared = NodePoolCapacity(pool, launchable_types(pool, CATALOG), memo=memo)
    alone = NodePoolCapacity(pool, launchable_types(pool, CATALOG))

    def shape(plan: Plan) -> list[tuple[list[str], list[str]]]:
        return [(names(c.instance_types), sorted(p.key for p in c.pods)) for c in plan.new_nodeclaims]

    first = solve(pods, [], [shared])
    filled = (len(memo.matrices), len(memo.ranks), len(memo.compatible))
    assert all(filled)
    assert shape(first) == shape(solve(pods, [], [alone]))
    # Another solve over the same types (a consolidation's next candidate) asks nothing new.
    assert shape(solve(pods[:5], [], [shared])) == shape(solve(pods[:5], [], [alone]))
    assert (len(memo.matrices), len(memo.ranks), len(memo.compatible)) == filled


def test_pools_with_catalogs_of_their_own_keep_their_priced_lists() -> None:
    # NodeOverlays give pools their own lists: pricing one must not throw away the other's.
    cache = PoolTypesCache(0.02)
    first, second = make_nodepool("first"), make_nodepool("second")
    own = [dataclasses.replace(instance_type) for instance_type in CATALOG]
    priced_first = cache.priced(first, None, CATALOG)
    priced_second = cache.priced(second, None, own)
    assert cache.priced(first, None, CATALOG) is priced_first
    assert cache.priced(second, None, own) is priced_second
