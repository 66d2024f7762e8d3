"""The disruption orchestration on its own: an in-memory cluster, no kubelet, no cloud.

Each test hands the orchestrator a command as the disruption pass would and
plays the part of the rest of the cluster (a replacement that initializes,
one whose NodeClaim is deleted) by writing the objects directly.
"""

from __future__ import annotations

from tests.support import KWOK_NODE_CLASS as NODE_CLASS
from tests.support import deployment_manifest as deployment
from tests.support import kwok_nodepool as nodepool
from tests.support import load_objects, make_nodepool, make_pod

from karpy.api.conditions import TRUE, set_condition
from karpy.api.core import Node
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import (
    CONDITION_INITIALIZED,
    TERMINATION_FINALIZER,
    NodeClaim,
    NodeClaimSpec,
    NodeClaimStatus,
)
from karpy.api.nodepool import REASON_EMPTY, REASON_UNDERUTILIZED, NodeClassRef
from karpy.api.requirements import Requirements
from karpy.controllers.orchestration import (
    DISRUPTED_TAINT,
    EVICTION_SETTLE_BOUND,
    PLANNED_TAINT,
    REPLACEMENT_BACKOFF_START,
    REPLACEMENT_INITIALIZATION_TIMEOUT,
    Command,
    Orchestrator,
)
from karpy.operator.karpenter_metrics import Metrics
from karpy.scheduling.solver import NewNodeClaim
from karpy.sim.clock import VirtualClock
from karpy.sim.simulation import Simulation
from karpy.sim.store import InMemoryCluster

POLL_PERIOD = 10.0
VALIDATION_DELAY = 15.0
KWOK_CLASS = NodeClassRef("karpenter.kwok.sh", "KWOKNodeClass", "default")


def world(*names: str) -> tuple[VirtualClock, InMemoryCluster, Orchestrator]:
    """A NodePool and, for each name, a NodeClaim of that name on a Node ``node-<name>``."""
    clock = VirtualClock()
    cluster = InMemoryCluster(clock)
    cluster.create(make_nodepool("default"))
    for name in names:
        cluster.create(Node(metadata=ObjectMeta(name=f"node-{name}")))
        cluster.create(
            NodeClaim(
                metadata=ObjectMeta(name=name, finalizers=(TERMINATION_FINALIZER,)),
                spec=NodeClaimSpec(node_class_ref=KWOK_CLASS),
                status=NodeClaimStatus(node_name=f"node-{name}"),
            )
        )
    orchestrator: Orchestrator = Orchestrator(
        cluster, clock, Metrics(), poll_period=POLL_PERIOD, validation_delay=VALIDATION_DELAY
    )
    return clock, cluster, orchestrator


def replacement() -> NewNodeClaim:
    return NewNodeClaim("default", Requirements(), [], [], {}, {})


def replace(*names: str) -> Command:
    return Command(REASON_UNDERUTILIZED, list(names), [replacement()], f"replace {', '.join(names)}")


def delete(*names: str) -> Command:
    return Command(REASON_EMPTY, list(names), description=f"delete {', '.join(names)}")


def tainted(cluster: InMemoryCluster, name: str) -> bool:
    node = cluster.node(f"node-{name}")
    assert node is not None
    return DISRUPTED_TAINT in node.taints


def gone(cluster: InMemoryCluster, name: str) -> bool:
    claim = cluster.nodeclaim(name)
    return claim is None or claim.metadata.deleting


def carried_out(clock: VirtualClock, orchestrator: Orchestrator, command: Command) -> None:
    """Hand ``command`` over, and again once its re-check is due: it is then carried out."""
    assert orchestrator.carry_out(command, clock.now()) == VALIDATION_DELAY
    assert orchestrator.pending is not None
    clock.advance_to(clock.now() + VALIDATION_DELAY)
    orchestrator.carry_out(command, clock.now())
    assert orchestrator.pending is None


def launched(cluster: InMemoryCluster, orchestrator: Orchestrator) -> NodeClaim:
    assert orchestrator.in_flight is not None
    [name] = orchestrator.in_flight.replacement_names
    claim = cluster.nodeclaim(name)
    assert claim is not None
    return claim


def test_a_command_is_carried_out_only_after_its_recheck() -> None:
    clock, cluster, orchestrator = world("old")
    command = replace("old")
    assert orchestrator.carry_out(command, clock.now()) == VALIDATION_DELAY
    assert not tainted(cluster, "old") and orchestrator.in_flight is None
    clock.advance_to(clock.now() + VALIDATION_DELAY - 1)
    assert orchestrator.carry_out(command, clock.now()) == 1.0, "the re-check is not due yet"
    assert not tainted(cluster, "old")
    clock.advance_to(clock.now() + 1)
    assert orchestrator.carry_out(command, clock.now()) == 1.0, "in flight: followed every second"
    assert tainted(cluster, "old")


def test_a_command_that_no_longer_holds_at_its_recheck_is_dropped() -> None:
    clock, cluster, orchestrator = world("old")
    assert orchestrator.carry_out(replace("old"), clock.now()) == VALIDATION_DELAY
    clock.advance_to(clock.now() + VALIDATION_DELAY)
    assert orchestrator.carry_out(None, clock.now()) is None
    assert orchestrator.pending is None and orchestrator.in_flight is None
    assert not tainted(cluster, "old")
    assert [claim.name for claim in cluster.nodeclaims()] == ["old"]


def test_the_candidates_are_deleted_only_once_the_replacement_is_initialized() -> None:
    clock, cluster, orchestrator = world("old")
    command = replace("old")
    carried_out(clock, orchestrator, command)
    new = launched(cluster, orchestrator)
    assert tainted(cluster, "old") and not gone(cluster, "old")
    in_flight = orchestrator.in_flight
    assert in_flight is not None
    assert orchestrator.follow(in_flight, clock.now()) == 1.0
    assert not gone(cluster, "old"), "deleted before its replacement is initialized"
    conditions = set_condition(new.status.conditions, CONDITION_INITIALIZED, TRUE, clock.now())
    cluster.update(new.with_status(conditions=conditions))
    assert orchestrator.follow(in_flight, clock.now()) == POLL_PERIOD
    assert gone(cluster, "old") and not gone(cluster, new.name)
    assert orchestrator.in_flight is None
    assert orchestrator.executed == [command]
    assert orchestrator.deleted == {"old"}


def test_a_failed_replacement_rolls_the_command_back_and_untaints_the_candidates() -> None:
    clock, cluster, orchestrator = world("old")
    carried_out(clock, orchestrator, replace("old"))
    new = launched(cluster, orchestrator)
    assert tainted(cluster, "old")
    cluster.delete(new)  # never launched: its NodeClaim is deleted
    in_flight = orchestrator.in_flight
    assert in_flight is not None
    assert orchestrator.follow(in_flight, clock.now()) == POLL_PERIOD
    assert not tainted(cluster, "old"), "the node keeps serving"
    assert not gone(cluster, "old")
    assert orchestrator.in_flight is None and orchestrator.executed == []
    failed = [event for event in cluster.events if event.reason == "DisruptionFailed"]
    assert [(event.name, event.type) for event in failed] == [("old", "Warning")]


def test_a_replacement_not_initialized_within_ten_minutes_rolls_the_command_back_and_stays() -> None:
    """Karpenter's orchestration queue gives up after 10 minutes (its e2e "should not disrupt a
    drifted node if the replacement node registers but never initialized")."""
    clock, cluster, orchestrator = world("old")
    carried_out(clock, orchestrator, replace("old"))
    new = launched(cluster, orchestrator)
    in_flight = orchestrator.in_flight
    assert in_flight is not None
    clock.advance_to(clock.now() + REPLACEMENT_INITIALIZATION_TIMEOUT - 1)
    assert orchestrator.follow(in_flight, clock.now()) == 1.0, "still waiting"
    assert tainted(cluster, "old")
    clock.advance_to(clock.now() + 1)
    assert orchestrator.follow(in_flight, clock.now()) == POLL_PERIOD
    assert not tainted(cluster, "old") and not gone(cluster, "old")
    assert not gone(cluster, new.name), "the replacement is kept"
    assert orchestrator.in_flight is None and orchestrator.executed == []


def test_a_failed_replacement_is_backed_off_doubling_per_failure() -> None:
    clock, cluster, orchestrator = world("old")
    for failures in (1, 2):
        carried_out(clock, orchestrator, replace("old"))
        cluster.delete(launched(cluster, orchestrator))
        in_flight = orchestrator.in_flight
        assert in_flight is not None
        orchestrator.follow(in_flight, clock.now())
        wait = REPLACEMENT_BACKOFF_START * 2 ** (failures - 1)
        assert orchestrator.backed_off(clock.now()) == {"old"}
        clock.advance_to(clock.now() + wait - 1)
        assert orchestrator.backed_off(clock.now()) == {"old"}
        clock.advance_to(clock.now() + 1)
        assert orchestrator.backed_off(clock.now()) == set()
    assert orchestrator.replacement_backoff["old"][0] == 2


def test_a_delete_launches_nothing_and_goes_at_once() -> None:
    clock, cluster, orchestrator = world("a", "b")
    command = delete("a", "b")
    carried_out(clock, orchestrator, command)
    assert orchestrator.in_flight is None
    assert gone(cluster, "a") and gone(cluster, "b")
    assert orchestrator.executed == [command]
    assert {claim.name for claim in cluster.nodeclaims()} == {"a", "b"}, "no replacement launched"


def test_a_left_over_disrupted_taint_is_taken_off_but_not_one_of_a_nodeclaim_it_deleted() -> None:
    _, cluster, orchestrator = world("left", "deleted")
    for name in ("left", "deleted"):
        node = cluster.node(f"node-{name}")
        assert node is not None
        cluster.update(node.with_changes(taints=(DISRUPTED_TAINT,)))
    orchestrator.deleted.add("deleted")  # deleted, its deletionTimestamp not seen yet
    orchestrator.untaint_leftovers()
    assert not tainted(cluster, "left")
    assert tainted(cluster, "deleted")


def test_the_planned_mark_follows_the_latest_plan() -> None:
    _, cluster, orchestrator = world("a", "b")

    def marked() -> set[str]:
        return {name for name in ("a", "b") if PLANNED_TAINT in cluster.node(f"node-{name}").taints}  # type: ignore[union-attr]

    orchestrator.mark_planned({"a"})
    assert marked() == {"a"}
    orchestrator.mark_planned({"b"})
    assert marked() == {"b"}
    orchestrator.mark_planned(set())
    assert marked() == set()


def test_a_left_over_disrupted_taint_is_removed() -> None:
    # A replica that lost its leadership mid-command leaves the taint on a node whose
    # NodeClaim nobody deletes; the next disruption pass takes it off.
    simulation = Simulation()
    pool = nodepool(disruption="consolidateAfter: Never")
    simulation.apply(load_objects(NODE_CLASS, pool, deployment(replicas=3)))
    simulation.run(120, until_steady=False)
    node = next(iter(simulation.cluster.nodes()))
    simulation.cluster.update(node.with_changes(taints=(*node.taints, DISRUPTED_TAINT)))
    assert DISRUPTED_TAINT in simulation.cluster.node(node.name).taints  # type: ignore[union-attr]
    simulation.run(30, until_steady=False)
    tainted = [n.name for n in simulation.cluster.nodes() if DISRUPTED_TAINT in n.taints]
    assert tainted == []
    claims = simulation.nodeclaims()
    assert len(claims) >= 1 and all(not claim.metadata.deleting for claim in claims)


def test_consolidation_waits_while_the_pods_of_a_deleted_node_move() -> None:
    """A delete evicts pods; the next consolidation is not worked out until they have landed
    (kube-scheduler puts them by least allocation, on room a plan made meanwhile counts on),
    for at most EVICTION_SETTLE_BOUND."""
    clock, cluster, orchestrator = world("a", "b", "c")
    cluster.create(make_pod("app-1", extra_spec="  nodeName: node-a"))
    assert not orchestrator.evicting(clock.now())
    carried_out(clock, orchestrator, delete("a"))
    assert orchestrator.evicting(clock.now()), "its pod is still on the node being deleted"
    cluster.delete(cluster.pod("default", "app-1"))
    cluster.create(make_pod("app-2"))
    assert orchestrator.evicting(clock.now()), "its replacement pod is pending"
    clock.advance_to(clock.now() + EVICTION_SETTLE_BOUND)
    assert not orchestrator.evicting(clock.now()), "a pod that never schedules holds it no longer"
    carried_out(clock, orchestrator, delete("b"))
    assert not orchestrator.evicting(clock.now()), "an empty node moves no pod"
