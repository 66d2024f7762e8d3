"""Cost-aware packing of pods that constrain nothing but resources (``karpy.scheduling._patterns``).

First-fit decreasing keeps alike pods together and grows a NodeClaim towards
bigger types; on a catalog where small nodes are cheapest per unit, pairing
complementary pods (CPU-hungry with memory-hungry) on small nodes is what the
cheapest plan does. These tests pin the packer's contract (every pod covered
exactly once, every pattern fits its type, determinism) and its effect on the
solver's plans, and check that the solver never moves a pod some other pod's
topology term counts.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support import make_instance_type, make_nodepool, make_pod

from karpy.api.core import Pod
from karpy.scheduling import solver
from karpy.scheduling._patterns import CHUNK_DIVISORS, pack, undominated
from karpy.scheduling.solver import NodePoolCapacity, Plan, solve

GIB = 1024**3

# One node of SMALL holds one CPU-hungry and one memory-hungry pod; CPU4 two of the
# former, MEM8 two of the latter. Pairing on SMALL is the cheapest plan.
SMALL = make_instance_type("small.2c4g", 2, 4, 1.0)
CPU4 = make_instance_type("cpu.4c2g", 4, 2, 1.6)
MEM8 = make_instance_type("mem.2c8g", 2, 8, 1.6)


def _pool() -> NodePoolCapacity:
    return NodePoolCapacity(make_nodepool(), [SMALL, CPU4, MEM8], {}, None)


def _complementary_pods(labels: str = "{}") -> list[Pod]:
    cpu_hungry = [make_pod(f"cpu-{i}", "1500m", "512Mi", labels=labels) for i in range(4)]
    memory_hungry = [make_pod(f"mem-{i}", "250m", "3Gi", labels=labels) for i in range(4)]
    return [*cpu_hungry, *memory_hungry]


def _price(plan: Plan) -> float:
    return sum(claim.price for claim in plan.new_nodeclaims)


def test_complementary_pods_share_the_cheapest_small_nodes() -> None:
    plan = solve(_complementary_pods(), [], [_pool()])
    assert plan.unschedulable == {}
    # Four SMALL nodes at the spot price (0.4 × 1.0), each with one pod of each kind.
    assert _price(plan) == pytest.approx(4 * 0.4)
    for claim in plan.new_nodeclaims:
        assert sorted(pod.metadata.name.split("-")[0] for pod in claim.pods) == ["cpu", "mem"]
        assert claim.instance_types[0].name == "small.2c4g"


def test_first_fit_alone_would_pay_more_for_the_same_pods(monkeypatch: pytest.MonkeyPatch) -> None:
    packed = _price(solve(_complementary_pods(), [], [_pool()]))
    monkeypatch.setattr(solver._Scheduler, "repack", lambda self: None)
    first_fit = _price(solve(_complementary_pods(), [], [_pool()]))
    assert first_fit == pytest.approx(4 * 0.4 * 1.6)  # two CPU4 and two MEM8 nodes
    assert packed < first_fit


def test_pods_another_pods_topology_counts_are_not_moved(monkeypatch: pytest.MonkeyPatch) -> None:
    # A spread constraint over hostname that selects app=web: moving the web pods between
    # nodes could change its verdicts, so the plan is first-fit's, untouched.
    spread = """\
  topologySpreadConstraints:
    - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule,
       labelSelector: {matchLabels: {app: web}}}"""
    pods = [
        *_complementary_pods("{app: web}"),
        make_pod("spread-0", "100m", "128Mi", labels="{app: web}", extra_spec=spread),
    ]
    with_repack = solve(pods, [], [_pool()])
    monkeypatch.setattr(solver._Scheduler, "repack", lambda self: None)
    without = solve(pods, [], [_pool()])
    assert [sorted(p.key for p in claim.pods) for claim in with_repack.new_nodeclaims] == [
        sorted(p.key for p in claim.pods) for claim in without.new_nodeclaims
    ]


def test_a_repacked_plan_is_deterministic_whatever_the_input_order() -> None:
    pods = _complementary_pods()
    first = solve(pods, [], [_pool()])
    second = solve(list(reversed(pods)), [], [_pool()])
    assert [[p.key for p in claim.pods] for claim in first.new_nodeclaims] == [
        [p.key for p in claim.pods] for claim in second.new_nodeclaims
    ]


def test_dominated_types_are_left_out() -> None:
    capacity = np.array([[2, 4], [2, 4], [4, 8], [1, 1]], dtype=np.int64)
    price = np.array([1.0, 1.5, 2.5, 0.2])
    # Type 1 is type 0 dearer; type 2 and type 3 are beaten by nothing.
    assert undominated(capacity, price).tolist() == [0, 2, 3]


def test_no_answer_for_a_class_that_fits_nowhere_or_a_free_type() -> None:
    requests = np.array([[5, 1]], dtype=np.int64)
    assert pack(requests, np.array([3]), np.array([[4, 4]], dtype=np.int64), np.array([1.0])) is None
    fits = np.array([[1, 1]], dtype=np.int64)
    assert pack(fits, np.array([3]), np.array([[4, 4]], dtype=np.int64), np.array([0.0])) is None


classes_strategy = st.lists(
    st.tuples(st.integers(1, 8), st.integers(1, 8), st.integers(1, 40)),
    min_size=1,
    max_size=6,
    unique_by=lambda c: c[:2],
)
types_strategy = st.lists(
    st.tuples(st.integers(8, 32), st.integers(8, 32), st.floats(0.1, 10.0)), min_size=1, max_size=6
)


@settings(max_examples=150, deadline=None)
@given(classes=classes_strategy, types=types_strategy, divisor=st.sampled_from(CHUNK_DIVISORS))
def test_every_pod_is_covered_once_and_every_pattern_fits_its_type(
    classes: list[tuple[int, int, int]], types: list[tuple[int, int, float]], divisor: int
) -> None:
    requests = np.array([[cpu, memory, 1] for cpu, memory, _ in classes], dtype=np.int64)
    counts = np.array([count for *_, count in classes], dtype=np.int64)
    capacity = np.array([[cpu, memory, 10] for cpu, memory, _ in types], dtype=np.int64)
    price = np.array([cost for *_, cost in types])
    patterns = pack(requests, counts, capacity, price, divisor)
    assert patterns is not None  # every class fits the 8×8 smallest type
    covered = np.zeros(len(classes), dtype=np.int64)
    for pattern in patterns:
        assert pattern.repeat >= 1 and pattern.pods.min() >= 0 and pattern.pods.sum() >= 1
        assert (pattern.pods @ requests <= capacity[pattern.type_index]).all()
        covered += pattern.pods * pattern.repeat
    assert covered.tolist() == counts.tolist()
    again = pack(requests, counts, capacity, price, divisor)
    assert again is not None
    assert [(p.type_index, p.pods.tolist(), p.repeat) for p in again] == [
        (p.type_index, p.pods.tolist(), p.repeat) for p in patterns
    ]
