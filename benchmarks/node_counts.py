"""Node counts: karpy's plans, with and without per-node costs, next to Karpenter's packing.

Priced by instance alone, a plan of thirty 2-vCPU nodes costs what one
64-vCPU node does, and the cheapest plan for 20,000 small pods was 6,668
nodes of three pods each; no platform team runs that. karpy adds to each
node's price what a node costs beyond its instance (:mod:`karpy.api.nodecost`:
volumes, a public address, ``KARPY_NODE_OVERHEAD_COST``), and this benchmark
shows what that does to node counts and to the total cost, on open
NodePools (``requirements: []``) over the bundled catalog.

For each workload and node class it solves one batch of pending pods, as
the provisioner would, twice:

- **karpy**: the provisioner's own solver on ``scheduling_snapshot`` (so
  DaemonSets, the catalog and the per-node cost count exactly as in
  ``karpy run``), with the extra per-node cost (``KARPY_NODE_OVERHEAD_COST``)
  at 0 and at its default; the node class's volumes and address count in
  both;
- **Karpenter's packing**: Karpenter's scheduler loop, written out here
  (``scheduler.go``'s ``add``): pods by CPU then memory, largest first; each
  goes to the open NodeClaim with the fewest pods that still has a type
  holding all its pods and the DaemonSets' requests, else opens a new one;
  each NodeClaim is launched as the cheapest type that holds it. Karpenter
  knows no per-node cost, so its plan is the same in both rows; its total
  with per-node costs is what those nodes cost.

Every plan is priced twice: instance prices alone, and with the per-node
cost (default) added per node, the cost a team pays. Nothing is timed.

Run: ``python -m benchmarks.node_counts [--json]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from karpy.api.core import Pod
from karpy.api.instancetype import InstanceType
from karpy.api.manifest import parse_manifests
from karpy.api.nodecost import DEFAULT_NODE_OVERHEAD_COST, node_cost
from karpy.controllers.state import PoolTypesCache, scheduling_snapshot
from karpy.scheduling.solver import NodePoolCapacity, pool_requirements
from karpy.sim.simulation import Simulation

_EC2_CLASS = """
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
"""
NODE_CLASSES: dict[str, str] = {
    "KWOKNodeClass": """
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: default}
""",
    "EC2NodeClass 100Gi, public IPv4": _EC2_CLASS
    + """  associatePublicIPAddress: true
  blockDeviceMappings:
    - deviceName: /dev/xvda
      ebs: {volumeSize: 100Gi, volumeType: gp3}
""",
    "EC2NodeClass maxPods 110": _EC2_CLASS + "  kubelet: {maxPods: 110}\n",
}
NODEPOOL = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: GROUP, kind: KIND, name: default}
      requirements: []
"""
# (replicas, cpu, memory) per Deployment-like group of identical pods.
WORKLOADS: dict[str, tuple[tuple[int, str, str], ...]] = {
    "20,000 x 500m/1Gi": ((20_000, "500m", "1Gi"),),
    "5 x 10,000 mix": (
        (10_000, "250m", "512Mi"),
        (10_000, "1", "1Gi"),
        (10_000, "2", "8Gi"),
        (10_000, "500m", "4Gi"),
        (10_000, "4", "2Gi"),
    ),
}


@dataclass(frozen=True, slots=True)
class PlanFigures:
    nodes: int
    instance_price: float  # $/h of the instances
    node_cost: float  # $/h per node beyond its instance, at the default setting
    unschedulable: int
    types: dict[str, int]

    @property
    def total(self) -> float:
        return self.instance_price + self.nodes * self.node_cost

    def as_json(self) -> dict[str, object]:
        return {
            "nodes": self.nodes,
            "instancePerHour": round(self.instance_price, 4),
            "totalPerHour": round(self.total, 4),
            "unschedulable": self.unschedulable,
            "types": self.types,
        }


def pods_for(workload: Sequence[tuple[int, str, str]]) -> list[Pod]:
    pods: list[Pod] = []
    for group, (replicas, cpu, memory) in enumerate(workload):
        text = f"""
apiVersion: v1
kind: Pod
metadata: {{name: app{group}, namespace: default, labels: {{app: app{group}}}}}
spec:
  containers: [{{name: app, resources: {{requests: {{cpu: "{cpu}", memory: "{memory}"}}}}}}]
"""
        (loaded,) = parse_manifests(text, "workload").objects
        template = loaded.obj
        assert isinstance(template, Pod)
        for index in range(replicas):
            meta = template.metadata.with_changes(name=f"app{group}-{index}")
            pods.append(template.with_changes(metadata=meta))
    return pods


def simulation_for(node_class: str) -> Simulation:
    simulation = Simulation()
    kind = "KWOKNodeClass" if node_class.startswith("KWOK") else "EC2NodeClass"
    group = "karpenter.kwok.sh" if kind == "KWOKNodeClass" else "karpenter.k8s.aws"
    text = NODE_CLASSES[node_class] + "---" + NODEPOOL.replace("GROUP", group).replace("KIND", kind)
    loaded = parse_manifests(text, node_class)
    if loaded.errors:
        raise ValueError("; ".join(loaded.errors))
    simulation.apply(loaded.objects)
    return simulation


def _price(instance_type: InstanceType, pool: NodePoolCapacity) -> float:
    offerings = instance_type.available_offerings(pool_requirements(pool.nodepool))
    return min((offering.price for offering in offerings), default=float("inf"))


@dataclass(slots=True)
class _OpenClaim:
    """A NodeClaim of Karpenter's packing: its pods' requests, the types still holding them, its pods."""

    requests: npt.NDArray[np.int64]
    holding: npt.NDArray[np.bool_]
    pods: int


def karpenter_packing(pods: Sequence[Pod], pool: NodePoolCapacity) -> list[InstanceType | None]:
    """Karpenter's scheduler loop on new NodeClaims: each NodeClaim's cheapest type (None: no pod fits)."""
    types = [t for t in pool.instance_types if _price(t, pool) < float("inf")]
    resources = sorted({"pods", *(name for pod in pods for name in pod.spec.requests)})
    room = np.array(
        [[t.allocatable.get(name, 0) - pool.overhead(t).get(name, 0) for name in resources] for t in types],
        dtype=np.int64,
    )
    prices = np.array([_price(t, pool) for t in types])
    pods_row = resources.index("pods")

    def demand(pod: Pod) -> npt.NDArray[np.int64]:
        vector = np.array([pod.spec.requests.get(name, 0) for name in resources], dtype=np.int64)
        vector[pods_row] = 1
        return vector

    ordered = sorted(
        pods, key=lambda pod: (-pod.spec.requests.get("cpu", 0), -pod.spec.requests.get("memory", 0))
    )
    claims: list[_OpenClaim] = []
    # Per pod shape, the claims that could not take it: claims only grow, so they never
    # will, and skipping them changes no answer (it only saves re-checking full claims).
    refused: dict[bytes, set[int]] = {}
    unschedulable = 0
    for pod in ordered:
        need = demand(pod)
        shape = need.tobytes()
        full = refused.setdefault(shape, set())
        claims.sort(key=lambda claim: claim.pods)  # Karpenter's order: fewest pods first
        for claim in claims:
            if id(claim) in full:
                continue
            total = claim.requests + need
            holding = claim.holding & (room >= total).all(axis=1)
            if holding.any():
                claim.requests, claim.holding, claim.pods = total, holding, claim.pods + 1
                break
            full.add(id(claim))
        else:
            holding = np.asarray((room >= need).all(axis=1))
            if not holding.any():
                unschedulable += 1
                continue
            claims.append(_OpenClaim(need, holding, 1))
    chosen: list[InstanceType | None] = []
    for claim in claims:
        candidates = np.flatnonzero(claim.holding)
        chosen.append(types[int(candidates[np.argmin(prices[candidates])])])
    chosen.extend([None] * unschedulable)
    return chosen


def measure(workload: str, node_class: str) -> dict[str, PlanFigures]:
    pods = pods_for(WORKLOADS[workload])
    simulation = simulation_for(node_class)
    cluster, cloud = simulation.cluster, simulation.cloud
    pool = next(iter(cluster.nodepools()))
    ref = pool.template.node_class_ref
    cost = node_cost(cluster.node_class(ref.group, ref.kind, ref.name), DEFAULT_NODE_OVERHEAD_COST).total
    figures: dict[str, PlanFigures] = {}
    for label, node_overhead_cost in (
        ("karpy, extra cost 0", 0.0),
        ("karpy, default", DEFAULT_NODE_OVERHEAD_COST),
    ):
        snapshot = scheduling_snapshot(cluster, cloud, pool_types=PoolTypesCache(node_overhead_cost))
        charged = node_cost(cluster.node_class(ref.group, ref.kind, ref.name), node_overhead_cost).total
        plan = snapshot.solve(pods)
        counts: dict[str, int] = {}
        for claim in plan.new_nodeclaims:
            counts[claim.instance_types[0].name] = counts.get(claim.instance_types[0].name, 0) + 1
        figures[label] = PlanFigures(
            nodes=len(plan.new_nodeclaims),
            # The solver's prices include what it was told a node costs; take it back out.
            instance_price=sum(claim.price - charged for claim in plan.new_nodeclaims),
            node_cost=cost,
            unschedulable=len(plan.unschedulable),
            types=dict(sorted(counts.items(), key=lambda item: -item[1])),
        )
    bare = scheduling_snapshot(cluster, cloud, pool_types=PoolTypesCache(0.0))
    charged = node_cost(cluster.node_class(ref.group, ref.kind, ref.name), 0.0).total
    (capacity,) = bare.pools
    chosen = karpenter_packing(pods, capacity)
    launched = [t for t in chosen if t is not None]
    counts = {}
    for instance_type in launched:
        counts[instance_type.name] = counts.get(instance_type.name, 0) + 1
    figures["Karpenter's packing"] = PlanFigures(
        nodes=len(launched),
        instance_price=sum(_price(t, capacity) - charged for t in launched),
        node_cost=cost,
        unschedulable=len(chosen) - len(launched),
        types=dict(sorted(counts.items(), key=lambda item: -item[1])),
    )
    return figures


def _types(types: dict[str, int]) -> str:
    shown = [f"{count} {name}" for name, count in list(types.items())[:3]]
    return ", ".join(shown) + (", ..." if len(types) > 3 else "")


def table(results: dict[tuple[str, str], dict[str, PlanFigures]]) -> str:
    lines = [
        "| workload | node class | plan | nodes | pods/node | instances $/h | with per-node costs $/h"
        " | types |",
        "|---|---|---|---:|---:|---:|---:|---|",
    ]
    for (workload, node_class), figures in results.items():
        pods = sum(replicas for replicas, _, _ in WORKLOADS[workload])
        for plan, figure in figures.items():
            per_node = pods / figure.nodes if figure.nodes else 0.0
            lines.append(
                f"| {workload} | {node_class} | {plan} | {figure.nodes:,} | {per_node:.0f} |"
                f" {figure.instance_price:,.2f} | {figure.total:,.2f} | {_types(figure.types)} |"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.node_counts", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--workload", action="append", choices=sorted(WORKLOADS))
    parser.add_argument("--node-class", action="append", choices=sorted(NODE_CLASSES))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = {
        (workload, node_class): measure(workload, node_class)
        for workload in args.workload or WORKLOADS
        for node_class in args.node_class or NODE_CLASSES
    }
    if args.json:
        document = [
            {"workload": w, "nodeClass": c, "plans": {k: v.as_json() for k, v in f.items()}}
            for (w, c), f in results.items()
        ]
        print(json.dumps(document, indent=2))
    else:
        print(f"per-node cost at the default: volumes + public IPv4 + {DEFAULT_NODE_OVERHEAD_COST:g} $/h")
        print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["karpenter_packing", "measure", "pods_for", "table"]
