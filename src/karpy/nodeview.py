"""What ``karpy nodes`` shows: each node with its NodePool, offering, $/h and requests, and the totals.

The live view Karpenter users get from eks-node-viewer, read from any
:class:`~karpy.operator.cluster.ClusterReader` and priced by karpy's own
cloud provider, so it works for every provider karpy serves and agrees with
``karpenter_nodepools_cost_total``: a node's $/h is the price, in its
NodePool's catalog (``get_instance_types``), of the offering its labels name
(instance type, zone, capacity type), the lookup the NodePool cost metric
makes (:func:`karpy.controllers.state.launched_price`), with the NodeOverlays'
price adjustments applied when their gate is on (evaluated here from the
overlays and catalogs, as the nodeoverlay controller evaluates them). A node
no NodePool manages (no ``karpenter.sh/nodepool`` label) is shown too,
marked, with no price: karpy has no catalog for it.
Requests are the sum of the effective requests of the pods bound to the node
that have not finished, as Karpenter's node metrics count them.

:func:`node_view` does the reading and the arithmetic; :func:`render` turns a
:class:`ClusterView` into the lines of one frame. Neither writes to the
cluster or the terminal: ``karpy nodes`` (cli.py) only draws the frames.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from karpy.api.instancetype import InstanceType, offering_price
from karpy.api.nodepool import NodePool
from karpy.api.requirements import LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_NODEPOOL, LABEL_ZONE
from karpy.cloud.provider import CloudProvider, CloudProviderError
from karpy.operator.cluster import ClusterReader
from karpy.scheduling.overlays import OverlayEvaluation, evaluate

# Hours in a month, as eks-node-viewer and the AWS price pages count them.
HOURS_PER_MONTH = 730
UNMANAGED = "(not karpy's)"
BAR_WIDTH = 20


@dataclass(frozen=True, slots=True)
class NodeRow:
    """One node as the view shows it. CPU in millicores, memory in bytes."""

    name: str
    nodepool: str  # "" for a node no NodePool manages
    instance_type: str
    capacity_type: str
    zone: str
    price: float | None  # $/h; None when karpy cannot price it
    cpu_requested: int
    cpu_allocatable: int
    memory_requested: int
    memory_allocatable: int
    pods: int
    ready: bool
    deleting: bool

    @property
    def managed(self) -> bool:
        return bool(self.nodepool)


@dataclass(frozen=True, slots=True)
class ClusterView:
    """Every node, and the cluster's totals."""

    rows: tuple[NodeRow, ...]

    @property
    def hourly_price(self) -> float:
        return sum(row.price or 0.0 for row in self.rows)

    @property
    def managed(self) -> int:
        return sum(1 for row in self.rows if row.managed)

    @property
    def unpriced(self) -> int:
        return sum(1 for row in self.rows if row.price is None)

    @property
    def pods(self) -> int:
        return sum(row.pods for row in self.rows)

    def total(self, field: str) -> int:
        return sum(int(getattr(row, field)) for row in self.rows)


def _catalogs(
    cluster: ClusterReader, cloud: CloudProvider
) -> dict[str, tuple[NodePool, Sequence[InstanceType]]]:
    """Each NodePool's catalog, for the pools whose catalog can be had (a node class not ready has none)."""
    catalogs: dict[str, tuple[NodePool, Sequence[InstanceType]]] = {}
    for pool in sorted(cluster.nodepools(), key=lambda pool: pool.name):
        try:
            catalogs[pool.name] = (pool, cloud.get_instance_types(pool))
        except CloudProviderError:
            continue
    return catalogs


def node_view(cluster: ClusterReader, cloud: CloudProvider, *, node_overlays: bool = False) -> ClusterView:
    """``cluster``'s nodes now, priced by ``cloud`` (and the NodeOverlays when ``node_overlays``)."""
    catalogs = _catalogs(cluster, cloud)
    evaluation: OverlayEvaluation | None = None
    if node_overlays:
        evaluation = evaluate(list(cluster.node_overlays()), list(catalogs.values()))
    rows = []
    for node in cluster.nodes():
        labels = node.metadata.labels
        nodepool = labels.get(LABEL_NODEPOOL, "")
        instance_type = labels.get(LABEL_INSTANCE_TYPE, "")
        zone = labels.get(LABEL_ZONE, "")
        capacity_type = labels.get(LABEL_CAPACITY_TYPE, "")
        price = _price(catalogs, evaluation, nodepool, instance_type, zone, capacity_type)
        pods = [pod for pod in cluster.pods_on_node(node.name) if not pod.is_terminal]
        rows.append(
            NodeRow(
                name=node.name,
                nodepool=nodepool,
                instance_type=instance_type,
                capacity_type=capacity_type,
                zone=zone,
                price=price,
                cpu_requested=sum(pod.spec.requests.get("cpu", 0) for pod in pods),
                cpu_allocatable=node.allocatable.get("cpu", 0),
                memory_requested=sum(pod.spec.requests.get("memory", 0) for pod in pods),
                memory_allocatable=node.allocatable.get("memory", 0),
                pods=len(pods),
                ready=node.ready,
                deleting=node.metadata.deletion_timestamp is not None,
            )
        )
    # Karpy's nodes by NodePool, then the others.
    rows.sort(key=lambda row: (not row.managed, row.nodepool, row.name))
    return ClusterView(tuple(rows))


def _price(
    catalogs: dict[str, tuple[NodePool, Sequence[InstanceType]]],
    evaluation: OverlayEvaluation | None,
    nodepool: str,
    instance_type: str,
    zone: str,
    capacity_type: str,
) -> float | None:
    """The offering's $/h in the NodePool's catalog, overlaid; None if the pool or the offering is unknown."""
    found = catalogs.get(nodepool)
    if found is None:
        return None
    _, catalog = found
    base = offering_price(catalog, instance_type, zone, capacity_type)
    if base is None or evaluation is None:
        return base
    return evaluation.price(nodepool, instance_type, zone, capacity_type, base)


# -- one frame -------------------------------------------------------------------


def _percent(part: int, whole: int) -> float:
    return 100.0 * part / whole if whole > 0 else 0.0


def bar(part: int, whole: int, width: int = BAR_WIDTH) -> str:
    """``part`` of ``whole`` as a bar of ``width`` cells (full past 100 %)."""
    filled = round(width * min(part / whole, 1.0)) if whole > 0 else 0
    return "█" * filled + "░" * (width - filled)


def cores(millis: int) -> str:
    return f"{millis / 1000:g}"


def gibibytes(amount: int) -> str:
    return f"{amount / 2**30:.1f}Gi"


def price_text(price: float | None) -> str:
    return "-" if price is None else f"${price:.4f}"


def render(view: ClusterView, *, bars: bool = True) -> list[str]:
    """The lines of one frame: the totals, then one line per node."""
    cpu_req, cpu_alloc = view.total("cpu_requested"), view.total("cpu_allocatable")
    mem_req, mem_alloc = view.total("memory_requested"), view.total("memory_allocatable")
    unmanaged = len(view.rows) - view.managed
    hourly = view.hourly_price
    lines = [
        f"{len(view.rows)} nodes ({view.managed} karpy's, {unmanaged} not), {view.pods} pods"
        f"   ${hourly:.4f}/hour   ${hourly * HOURS_PER_MONTH:,.2f}/month"
        + (f"   ({_count(view.unpriced, 'node')} without a price)" if view.unpriced else ""),
        f"CPU     {_total_line(cpu_req, cpu_alloc, cores(cpu_req), cores(cpu_alloc), bars)}",
        f"Memory  {_total_line(mem_req, mem_alloc, gibibytes(mem_req), gibibytes(mem_alloc), bars)}",
        "",
    ]
    header = (
        "NODE",
        "NODEPOOL",
        "INSTANCE TYPE",
        "CAPACITY",
        "ZONE",
        "$/HOUR",
        "CPU",
        "MEMORY",
        "PODS",
        "STATUS",
    )
    table = [header]
    for row in view.rows:
        table.append(
            (
                row.name,
                row.nodepool or UNMANAGED,
                row.instance_type or "-",
                row.capacity_type or "-",
                row.zone or "-",
                price_text(row.price),
                _usage(row.cpu_requested, row.cpu_allocatable, bars),
                _usage(row.memory_requested, row.memory_allocatable, bars),
                str(row.pods),
                ("Ready" if row.ready else "NotReady") + (",Deleting" if row.deleting else ""),
            )
        )
    widths = [max(len(cells[column]) for cells in table) for column in range(len(header))]
    lines.extend(
        "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip()
        for cells in table
    )
    return lines


def _count(number: int, thing: str) -> str:
    return f"{number} {thing}" + ("" if number == 1 else "s")


def _total_line(part: int, whole: int, part_text: str, whole_text: str, bars: bool) -> str:
    figures = f"{part_text} of {whole_text} requested ({_percent(part, whole):.0f}%)"
    return f"{bar(part, whole)} {figures}" if bars else figures


def _usage(part: int, whole: int, bars: bool) -> str:
    text = f"{_percent(part, whole):3.0f}%"
    return f"{bar(part, whole, 10)} {text}" if bars else text
