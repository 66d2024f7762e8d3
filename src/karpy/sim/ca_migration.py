"""``karpy plan --from-cluster-autoscaler``: the cluster's pods under its CA node groups, and under NodePools.

:func:`migration_workload` takes the cluster's workload as it is (Namespaces,
PriorityClasses, workload controllers, PodDisruptionBudgets, DaemonSets, and the
pods that are not a DaemonSet's, unbound and pending, as a fresh cluster would
see them). :func:`simulate_before`
runs it with karpy's Cluster Autoscaler baseline growing the discovered node
groups (one template NodePool per group carries the group's labels and taints;
sizes 0 to ``max(100, 2 x nodes)``: the Auto Scaling group's bounds are not
visible from Kubernetes), :func:`simulate_after` with karpy and the proposed
NodePools. Both start empty from the same pods, so their $/h and pending
times compare like for like; :func:`outcome` reads them from the recorder.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml

from karpy.api.core import POD_PENDING, Pod
from karpy.api.manifest import parse_manifests
from karpy.api.snapshot import ClusterSnapshot
from karpy.baselines.ca_migration import Proposal, pool_labels
from karpy.baselines.cluster_autoscaler import ClusterAutoscalerFlags, NodeGroup
from karpy.sim.scenario import ClusterAutoscalerSpec, Scenario
from karpy.sim.simulation import Simulation, SimulationSettings

MIGRATION_DURATION = 2 * 3600.0
# What both runs take from the cluster, in the order it is created: what others refer to first.
_WORKLOAD_ORDER = (
    "Namespace",
    "PriorityClass",
    "Deployment",
    "ReplicaSet",
    "StatefulSet",
    "DaemonSet",
    "PodDisruptionBudget",
    "Pod",
)


def manifests_yaml(manifests: Iterable[dict[str, object]]) -> str:
    return yaml.safe_dump_all(list(manifests), sort_keys=False)


def migration_workload(snapshot: ClusterSnapshot) -> list[object]:
    """What both runs start from: the cluster's pods pending, with their controllers and what they refer to.

    Pods keep their owners (a ReplicaSet's pod is still its ReplicaSet's), so both autoscalers see
    the same controllers when they drain a node.
    """
    kept: list[object] = []
    for obj in snapshot.objects:
        if type(obj).__name__ in _WORKLOAD_ORDER and not isinstance(obj, Pod):
            kept.append(obj)
        elif isinstance(obj, Pod) and not obj.is_terminal and obj.metadata.deletion_timestamp is None:
            owner = obj.metadata.controller
            if owner is not None and owner.kind == "DaemonSet":
                continue  # the DaemonSet makes its own on each node
            kept.append(
                dataclasses.replace(
                    obj,
                    metadata=dataclasses.replace(obj.metadata, creation_timestamp=None),
                    spec=dataclasses.replace(obj.spec, node_name=""),
                    phase=POD_PENDING,
                    unschedulable_reason="",
                    start_time=None,
                    ready=False,
                )
            )
    return sorted(kept, key=lambda obj: _WORKLOAD_ORDER.index(type(obj).__name__))


def _records(manifests: list[dict[str, object]]) -> list[object]:
    loaded = parse_manifests(manifests_yaml(manifests), "the proposal")
    if loaded.errors:
        raise ValueError("; ".join(loaded.errors))
    return [item.obj for item in loaded.objects]


def before_node_groups(proposal: Proposal) -> tuple[list[dict[str, object]], tuple[NodeGroup, ...]]:
    """A template NodePool per discovered group, and the group as the CA baseline models it."""
    meta = proposal.node_class["metadata"]
    assert isinstance(meta, dict)
    ref = {
        "group": str(proposal.node_class["apiVersion"]).split("/", 1)[0],
        "kind": proposal.node_class["kind"],
        "name": meta["name"],
    }
    pools: list[dict[str, object]] = []
    groups = []
    for group in proposal.discovery.groups:
        name = f"ca-{group.name}".lower()
        spec: dict[str, object] = {"nodeClassRef": ref, "requirements": []}
        if group.taints:
            spec["taints"] = [taint.to_dict() for taint in group.taints]
        template: dict[str, object] = {"spec": spec}
        labels = pool_labels(group)
        if labels:
            template["metadata"] = {"labels": labels}
        pools.append(
            {
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodePool",
                "metadata": {"name": name},
                "spec": {"template": template},
            }
        )
        groups.append(
            NodeGroup(
                name=group.name,
                instance_types=group.instance_types,
                capacity_type=group.capacity_type,
                min_size=0,
                max_size=max(100, 2 * len(group.nodes)),
                zones=group.zones,
                nodepool=name,
            )
        )
    return pools, tuple(groups)


def _run(simulation: Simulation, objects: list[object], scenario: Scenario) -> Simulation:
    for obj in objects:
        simulation.cluster.create(obj)
    simulation.run_scenario(scenario)
    return simulation


def simulate_before(
    snapshot: ClusterSnapshot,
    proposal: Proposal,
    duration: float = MIGRATION_DURATION,
    settings: SimulationSettings | None = None,
) -> Simulation:
    """The node groups grown by the Cluster Autoscaler baseline (``settings``' autoscaler is replaced)."""
    pools, groups = before_node_groups(proposal)
    simulation = Simulation(
        dataclasses.replace(settings or SimulationSettings(), autoscaler="cluster-autoscaler")
    )
    scenario = Scenario(
        name="cluster-autoscaler",
        duration=duration,
        cluster_autoscaler=ClusterAutoscalerSpec(ClusterAutoscalerFlags(), groups),
    )
    return _run(
        simulation, [*_records([dict(proposal.node_class), *pools]), *migration_workload(snapshot)], scenario
    )


def simulate_after(
    snapshot: ClusterSnapshot,
    proposal: Proposal,
    duration: float = MIGRATION_DURATION,
    settings: SimulationSettings | None = None,
) -> Simulation:
    """The proposed NodePools run by karpy (``settings``' autoscaler is replaced)."""
    simulation = Simulation(dataclasses.replace(settings or SimulationSettings(), autoscaler="karpy"))
    scenario = Scenario(name="karpy", duration=duration)
    return _run(simulation, [*_records(proposal.manifests()), *migration_workload(snapshot)], scenario)


def unknown_instance_types(simulation: Simulation, proposal: Proposal) -> list[str]:
    """Notes on the groups whose instance types the simulated cloud does not offer: they never grow."""
    notes = []
    for group in proposal.discovery.groups:
        pool = simulation.cluster.nodepool(f"ca-{group.name}".lower())
        offered = {t.name for t in simulation.cloud.get_instance_types(pool)} if pool is not None else set()
        missing = [name for name in group.instance_types if name not in offered]
        if missing:
            notes.append(
                f"node group {group.name}: {', '.join(missing)} not in the simulated cloud's catalog:"
                " the Cluster Autoscaler run cannot grow it with them"
            )
    return notes


@dataclass(frozen=True, slots=True)
class Outcome:
    """One run's figures at its end."""

    nodes: int
    price_per_hour: float
    pods: int
    pending: int
    # Seconds from a pod's creation to its running; over the pods that ran.
    pending_median: float | None
    pending_max: float | None


def outcome(simulation: Simulation) -> Outcome:
    recorder = simulation.recorder
    alive = [r for r in recorder.nodeclaims.values() if r.launched_at is not None and r.deleted_at is None]
    pods = [r for r in recorder.pods.values() if not r.daemonset and r.deleted_at is None]
    waits = [r.running_at - r.created_at for r in pods if r.running_at is not None]
    return Outcome(
        nodes=len(alive),
        price_per_hour=round(sum(r.price_per_hour for r in alive), 6),
        pods=len(pods),
        pending=sum(1 for r in pods if r.running_at is None),
        pending_median=statistics.median(waits) if waits else None,
        pending_max=max(waits) if waits else None,
    )


def outcome_json(result: Outcome) -> dict[str, Any]:
    return {
        "nodes": result.nodes,
        "pricePerHour": result.price_per_hour,
        "pods": result.pods,
        "podsPending": result.pending,
        "pendingSecondsMedian": result.pending_median,
        "pendingSecondsMax": result.pending_max,
    }


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}s"


def render_migration_text(
    proposal: Proposal, before: Outcome, after: Outcome, notes: Iterable[str] = ()
) -> str:
    lines = ["Node groups recognised:"]
    for group in proposal.discovery.groups:
        by = f"label {group.named_by}" if group.named_by else "identical nodes"
        lines.append(
            f"  {group.name} ({by}): {len(group.nodes)} nodes, {', '.join(group.instance_types)}"
            f" {group.capacity_type}, {group.pods} pods"
        )
    lines.append("NodePools proposed:")
    for pool in proposal.pools:
        lines.append(f"  {pool.name}: from {', '.join(pool.groups)}")
    lines.append("Simulated from the same pods (both start empty):")
    lines.append(f"  {'':22} {'nodes':>6} {'$/h':>10} {'pending':>8} {'wait p50':>9} {'wait max':>9}")
    for name, figures in (("cluster-autoscaler", before), ("karpy (proposed)", after)):
        lines.append(
            f"  {name:22} {figures.nodes:>6} {figures.price_per_hour:>10.4f} {figures.pending:>8}"
            f" {_seconds(figures.pending_median):>9} {_seconds(figures.pending_max):>9}"
        )
    for note in (*proposal.discovery.notes, *proposal.notes, *notes):
        lines.append(f"note: {note}")
    return "\n".join(lines)
