"""The solver's two look-up structures for first-fit over thousands of NodeClaims.

``RoomIndex`` finds the first NodeClaim that may have CPU *and* memory room
for a pod; ``OpenBins`` skips NodeClaims closed to a kind of pod. Both are
checked against the obvious linear scans they replace, over random
sequences of appends, updates and queries, and then by what the solver asks
because of them.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support import make_instance_type, make_nodepool, make_pod

from karpy.api.requirements import LABEL_ZONE, Requirements
from karpy.scheduling import solver
from karpy.scheduling._bins import OpenBins
from karpy.scheduling._rooms import RoomIndex
from karpy.scheduling.solver import ExistingCapacity, NodePoolCapacity, solve

HOSTNAME_SPREAD = """  topologySpreadConstraints:
    - {{maxSkew: {skew}, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule,
       labelSelector: {{matchLabels: {{app: light}}}}}}"""

# (what, position or start, cpu, memory): append a room, set one, or ask for the first fit.
operation = st.tuples(
    st.sampled_from(["append", "set", "query"]),
    st.integers(0, 200),
    st.integers(-1, 20),
    st.integers(-1, 20),
)


@settings(max_examples=300, deadline=None)
@given(operations=st.lists(operation, max_size=120))
def test_room_index_finds_what_a_scan_finds(operations: list[tuple[str, int, int, int]]) -> None:
    index = RoomIndex()
    rooms: list[tuple[int, int]] = []
    for kind, position, cpu, memory in operations:
        if kind == "append":
            assert index.append((cpu, memory)) == len(rooms)
            rooms.append((cpu, memory))
        elif kind == "set" and rooms:
            index.set(position % len(rooms), (cpu, memory))
            rooms[position % len(rooms)] = (cpu, memory)
        elif kind == "query":
            # A pod asks for no less than nothing.
            start, wanted_cpu, wanted_memory = position % 64, max(cpu, 0), max(memory, 0)
            expected = next(
                (
                    i
                    for i in range(start, len(rooms))
                    if rooms[i][0] >= wanted_cpu and rooms[i][1] >= wanted_memory
                ),
                -1,
            )
            assert index.first_fit(start, wanted_cpu, wanted_memory) == expected


@settings(max_examples=200, deadline=None)
@given(
    rooms=st.lists(st.tuples(st.integers(-1, 20), st.integers(-1, 20)), max_size=70),
    queries=st.lists(st.tuples(st.integers(0, 80), st.integers(0, 20), st.integers(0, 20)), max_size=30),
)
def test_a_room_index_built_at_once_answers_as_one_appended_to(
    rooms: list[tuple[int, int]], queries: list[tuple[int, int, int]]
) -> None:
    appended = RoomIndex()
    for room in rooms:
        appended.append(room)
    built = RoomIndex.of(rooms)
    for start, cpu, memory in queries:
        assert built.first_fit(start, cpu, memory) == appended.first_fit(start, cpu, memory)
    # And it grows as the other does.
    assert built.append((5, 5)) == appended.append((5, 5))
    for start, cpu, memory in queries:
        assert built.first_fit(start, cpu, memory) == appended.first_fit(start, cpu, memory)


@settings(max_examples=300, deadline=None)
@given(
    closed=st.lists(st.integers(0, 80), max_size=60),
    queries=st.lists(st.integers(0, 90), max_size=40),
)
def test_open_bins_skip_exactly_the_closed_ones(closed: list[int], queries: list[int]) -> None:
    open_bins = OpenBins()
    shut: set[int] = set()
    # Interleave closing and asking: path compression must not hide a later close.
    for step, position in enumerate(closed):
        open_bins.close(position)
        shut.add(position)
        for start in queries[step % max(1, len(queries)) :][:3]:
            expected = next(i for i in range(start, 200) if i not in shut)
            assert open_bins.first_open(start) == expected


def test_a_pod_light_on_cpu_asks_no_nodeclaim_whose_memory_is_spent(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Twelve NodeClaims full of memory-hungry pods, CPU to spare: a CPU-light pod that needs
    memory is not offered any of them (an index over CPU alone offered all twelve, each of
    which then said no), and opens a NodeClaim of its own."""
    big = make_instance_type("big.8c16g", 8, 16, 1.0)
    pool = NodePoolCapacity(make_nodepool(), [big], {}, None)
    memory_hungry = [make_pod(f"mem-{i}", "1", "15Gi") for i in range(12)]
    asked: list[str] = []
    join_bin = solver._Scheduler._join_bin

    def counting(self: solver._Scheduler, constraints, requests, target):  # type: ignore[no-untyped-def]
        if constraints.pod.metadata.name == "light":
            asked.append(target.name)
        return join_bin(self, constraints, requests, target)

    monkeypatch.setattr(solver._Scheduler, "_join_bin", counting)
    # The light pod sorts after the memory-hungry ones (less CPU), so every NodeClaim exists;
    # its hostname spread has it placed on its own (pods without one are placed in bulk).
    light = make_pod("light", "100m", "2Gi", labels="{app: light}", extra_spec=HOSTNAME_SPREAD.format(skew=1))
    plan = solve([*memory_hungry, light], [], [pool])
    assert plan.unschedulable == {}
    assert len(plan.new_nodeclaims) == 13
    # Only the most recent NodeClaims are asked whether they could grow (none can here).
    assert len(asked) <= solver.GROWTH_WINDOW


def test_a_node_closes_to_a_hostname_spread_kind_at_max_skew(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """maxSkew 2 on hostname: two of the kind per node, the third opens the next node; and
    a full node is not asked again by the rest of the group."""
    big = make_instance_type("big.8c16g", 8, 16, 1.0)
    pool = NodePoolCapacity(make_nodepool(), [big], {}, None)
    spec = HOSTNAME_SPREAD.format(skew=2)
    pods = [make_pod(f"light-{i}", "100m", "100Mi", labels="{app: light}", extra_spec=spec) for i in range(6)]
    refused: list[str] = []
    join_bin = solver._Scheduler._join_bin

    def counting(self: solver._Scheduler, constraints, requests, target):  # type: ignore[no-untyped-def]
        verdict = join_bin(self, constraints, requests, target)
        if verdict is not solver._ACCEPTED:
            refused.append(target.name)
        return verdict

    monkeypatch.setattr(solver._Scheduler, "_join_bin", counting)
    plan = solve(pods, [], [pool])
    assert [len(claim.pods) for claim in plan.new_nodeclaims] == [2, 2, 2]
    assert refused == []


def test_full_existing_nodes_are_not_asked_and_alike_pods_resume_where_the_last_went(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """300 full nodes, then 3 with room for 2 pods each: 6 pods with a hostname spread of
    maxSkew 2 go 2 per roomy node, asking no full node and no node an alike pod already
    filled (a cluster of thousands of nodes made each pod ask every one of them)."""
    big = make_instance_type("big.8c16g", 8, 16, 1.0)
    pool = NodePoolCapacity(make_nodepool(), [big], {}, None)
    gib = 1024**3
    full = [
        ExistingCapacity(
            f"full-{i:03d}", "default", Requirements(), (), {"cpu": 50, "memory": gib, "pods": 5}
        )
        for i in range(300)
    ]
    roomy = [
        ExistingCapacity(f"roomy-{i}", "default", Requirements(), (), {"cpu": 200, "memory": gib, "pods": 5})
        for i in range(3)
    ]
    spec = HOSTNAME_SPREAD.format(skew=2)
    pods = [make_pod(f"light-{i}", "100m", "100Mi", labels="{app: light}", extra_spec=spec) for i in range(6)]
    asked: list[str] = []
    join_existing = solver._Scheduler._join_existing

    def counting(self: solver._Scheduler, constraints, requests, target):  # type: ignore[no-untyped-def]
        asked.append(target.name)
        return join_existing(self, constraints, requests, target)

    monkeypatch.setattr(solver._Scheduler, "_join_existing", counting)
    plan = solve(pods, [*full, *roomy], [pool])
    assert sorted(plan.existing.values()) == [
        "roomy-0",
        "roomy-0",
        "roomy-1",
        "roomy-1",
        "roomy-2",
        "roomy-2",
    ]
    assert plan.new_nodeclaims == []
    assert asked == ["roomy-0", "roomy-0", "roomy-1", "roomy-1", "roomy-2", "roomy-2"]


def test_a_zonal_spread_beside_a_hostname_spread_still_fills_earlier_nodeclaims() -> None:
    """Where the pod may go at all is not known when a hostname term sits beside the zone
    terms; alike pods must then walk from the first NodeClaim, not from where the last went."""
    spec = """  topologySpreadConstraints:
    - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule,
       labelSelector: {matchLabels: {app: w}}}
    - {maxSkew: 5, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule,
       labelSelector: {matchLabels: {app: w}}}"""
    pods = [make_pod(f"w-{i}", "2", "2Gi", labels="{app: w}", extra_spec=spec) for i in range(4)]
    big = make_instance_type("big", 8, 32, 1.0, zones=("zone-a", "zone-b", "zone-c"))
    plan = solve(pods, [], [NodePoolCapacity(make_nodepool(), [big], {}, None)])
    placed = [
        (claim.requirements.get(LABEL_ZONE).any(), sorted(pod.metadata.name for pod in claim.pods))
        for claim in plan.new_nodeclaims
    ]
    assert placed == [("zone-a", ["w-0", "w-3"]), ("zone-b", ["w-1"]), ("zone-c", ["w-2"])]
