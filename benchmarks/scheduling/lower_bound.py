"""A price no plan can beat: the LP relaxation of packing pods onto instance types.

To say how close to optimal a plan's cost is, the plan needs a yardstick
that does not depend on any heuristic. The exact optimum (a bin-packing
problem with hundreds of bin sizes) is out of reach at these sizes, but a
lower bound is cheap:

    minimise    Σ_t price_t · x_t
    subject to  Σ_t usable_t[r] · x_t ≥ Σ_pods requests[r]   for r in cpu, memory, pods
                x_t ≥ 0 (continuous)

where ``x_t`` is the number of nodes of instance type ``t``, ``price_t`` the
cheapest offering of ``t`` that the NodePool admits (what the solver charges
a NodeClaim that ends up on ``t``), and ``usable_t`` its allocatable
resources less the NodePool's DaemonSet overhead.

Why it is a valid bound: take any feasible plan for pods that have no
topology constraints. On each of its nodes the pods' requests fit the
node's usable resources, resource by resource; adding those inequalities
up over all nodes says that the plan's vector of node counts per type
satisfies every constraint above. So that vector is a feasible point of
the LP, whose cost is the plan's price (or less, since each node is priced
at its type's cheapest offering), and the LP's minimum can only be lower.
The relaxation forgets three things, each of which only makes it looser:
that nodes come whole, that a pod cannot be split across nodes, and which
pods fit which types (a pod too big for a type still "uses" the type's
aggregate capacity). A gap between a plan and this bound is therefore an
upper bound on the plan's true distance from optimal.

For pods with topology constraints the bound is still a bound (constraints
only remove plans) but a loose one, so the benchmarks report it for
unconstrained ("generic") pods only.

The LP has three rows and one column per instance type; HiGHS (``highspy``,
a development dependency) solves it in milliseconds. Rows are scaled to
cores and GiB so the coefficients stay within a few orders of magnitude.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import highspy
import numpy as np

from karpy.api.core import Pod
from karpy.api.quantity import subtract_amounts
from karpy.scheduling.solver import NodePoolCapacity, pod_requests

RESOURCE_SCALES = {"cpu": 1000.0, "memory": float(1024**3), "pods": 1.0}


@dataclass(frozen=True, slots=True)
class Column:
    """One instance type of one NodePool, as the LP sees it."""

    nodepool: str
    instance_type: str
    price: float
    usable: tuple[float, ...]  # per resource of RESOURCE_SCALES, scaled


@dataclass(frozen=True, slots=True)
class LowerBound:
    price: float
    # The LP's optimal node counts, by "nodepool/instance-type", largest first (non-zero only).
    nodes: tuple[tuple[str, float], ...]
    # Σ requests per resource (scaled: cores, GiB, pods).
    demand: tuple[float, ...]

    def describe(self, limit: int = 3) -> str:
        return ", ".join(f"{count:.1f}× {name.split('/', 1)[1]}" for name, count in self.nodes[:limit])


def lp_columns(pools: Sequence[NodePoolCapacity]) -> list[Column]:
    """Every (NodePool, instance type) a NodeClaim could end up on, priced as the solver prices it."""
    columns: list[Column] = []
    for pool in pools:
        requirements = pool.nodepool.template.requirement_set()
        for instance_type in pool.instance_types:
            if instance_type.requirements.intersects(requirements) is not None:
                continue
            offerings = instance_type.available_offerings(requirements)
            if not offerings:
                continue
            usable = subtract_amounts(instance_type.allocatable, pool.daemon_overhead)
            columns.append(
                Column(
                    nodepool=pool.nodepool.name,
                    instance_type=instance_type.name,
                    price=min(offering.price for offering in offerings),
                    usable=tuple(
                        max(0, usable.get(resource, 0)) / scale for resource, scale in RESOURCE_SCALES.items()
                    ),
                )
            )
    return columns


def demand(pods: Sequence[Pod]) -> tuple[float, ...]:
    totals = dict.fromkeys(RESOURCE_SCALES, 0)
    for pod in pods:
        requests = pod_requests(pod)
        for resource in RESOURCE_SCALES:
            totals[resource] += requests.get(resource, 0)
    return tuple(totals[resource] / scale for resource, scale in RESOURCE_SCALES.items())


@contextmanager
def _quiet_stdout() -> Iterator[None]:
    """Silence HiGHS' banner, which its C++ side prints to file descriptor 1 on construction."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w", encoding="utf-8") as devnull:
            os.dup2(devnull.fileno(), 1)
            try:
                yield
            finally:
                os.dup2(saved, 1)
    finally:
        os.close(saved)


def _solve(lp: highspy.HighsLp) -> list[float]:
    """Solve a minimisation LP with HiGHS, quietly; the optimal column values."""
    with _quiet_stdout():
        highs = highspy.Highs()  # type: ignore[no-untyped-call]  # (its __init__ lacks "-> None")
    highs.silent()
    highs.passModel(lp)
    highs.run()
    status = highs.getModelStatus()
    if status != highspy.HighsModelStatus.kOptimal:
        raise RuntimeError(f"the LP relaxation was not solved: {highs.modelStatusToString(status)}")
    return list(highs.getSolution().col_value)


def _largest(columns: Sequence[Column], counts: Sequence[float]) -> tuple[tuple[str, float], ...]:
    chosen = [
        (f"{column.nodepool}/{column.instance_type}", count)
        for column, count in zip(columns, counts, strict=True)
        if count > 1e-9
    ]
    return tuple(sorted(chosen, key=lambda item: -item[1]))


def lp_lower_bound(pods: Sequence[Pod], pools: Sequence[NodePoolCapacity]) -> LowerBound:
    """The aggregate LP relaxation's optimal price for ``pods`` on ``pools`` (see the module docstring)."""
    columns = lp_columns(pools)
    needed = demand(pods)
    if not any(needed):
        return LowerBound(0.0, (), needed)
    if not columns:
        raise ValueError("no instance type is available to any NodePool")
    rows = len(RESOURCE_SCALES)
    lp = highspy.HighsLp()
    lp.num_col_ = len(columns)
    lp.num_row_ = rows
    lp.col_cost_ = np.array([column.price for column in columns], dtype=np.float64)
    lp.col_lower_ = np.zeros(len(columns), dtype=np.float64)
    lp.col_upper_ = np.full(len(columns), highspy.kHighsInf, dtype=np.float64)
    lp.row_lower_ = np.array(needed, dtype=np.float64)
    lp.row_upper_ = np.full(rows, highspy.kHighsInf, dtype=np.float64)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = np.arange(0, rows * len(columns) + 1, rows, dtype=np.int64)
    lp.a_matrix_.index_ = np.tile(np.arange(rows, dtype=np.int64), len(columns))
    lp.a_matrix_.value_ = np.array([value for column in columns for value in column.usable], dtype=np.float64)
    counts = _solve(lp)
    price = sum(column.price * count for column, count in zip(columns, counts, strict=True))
    return LowerBound(price, _largest(columns, counts), needed)


def request_classes(pods: Sequence[Pod]) -> dict[tuple[float, ...], int]:
    """The pods grouped by their (scaled) requests: how many pods ask for each vector."""
    classes: dict[tuple[float, ...], int] = {}
    for pod in pods:
        requests = pod_requests(pod)
        vector = tuple(requests.get(resource, 0) / scale for resource, scale in RESOURCE_SCALES.items())
        classes[vector] = classes.get(vector, 0) + 1
    return classes


def _fits(vector: Sequence[float], usable: Sequence[float]) -> bool:
    return all(amount <= room for amount, room in zip(vector, usable, strict=True))


def assignment_lower_bound(pods: Sequence[Pod], pools: Sequence[NodePoolCapacity]) -> LowerBound:
    """A tighter valid bound: the LP relaxation of assigning pods to instance types, type by type.

    Variables: ``x_t`` nodes of type ``t`` and ``y_ct`` pods of request class
    ``c`` (pods with identical requests) on type ``t``, the latter only where
    one such pod fits ``t`` on its own. Minimise Σ price_t·x_t subject to
    Σ_t y_ct = n_c for each class and Σ_c request_c[r]·y_ct ≤ usable_t[r]·x_t
    for each type and resource. Any feasible plan yields such x and y (count
    its nodes and pods per type; add its per-node inequalities up per type),
    so this too is a lower bound, and a tighter one than ``lp_lower_bound``:
    capacity a pod cannot use (the CPU of a type too small in memory for
    any pod) no longer counts. Pods too large for every type are left
    out: no plan can place them either.
    """
    columns = lp_columns(pools)
    needed = demand(pods)
    classes = {
        vector: count
        for vector, count in request_classes(pods).items()
        if any(_fits(vector, column.usable) for column in columns)
    }
    if not classes:
        return LowerBound(0.0, (), needed)
    resources = len(RESOURCE_SCALES)
    class_rows = len(classes)
    # Rows: one demand row per class, then one capacity row per (type, resource).
    row_lower: list[float] = [float(count) for count in classes.values()]
    row_upper: list[float] = [highspy.kHighsInf] * class_rows
    row_lower += [-highspy.kHighsInf] * (len(columns) * resources)
    row_upper += [0.0] * (len(columns) * resources)
    costs: list[float] = []
    starts: list[int] = [0]
    indices: list[int] = []
    values: list[float] = []
    for type_index, column in enumerate(columns):
        costs.append(column.price)
        for resource_index, usable in enumerate(column.usable):
            indices.append(class_rows + type_index * resources + resource_index)
            values.append(-usable)
        starts.append(len(indices))
    for class_index, vector in enumerate(classes):
        for type_index, column in enumerate(columns):
            if not _fits(vector, column.usable):
                continue
            costs.append(0.0)
            indices.append(class_index)
            values.append(1.0)
            for resource_index, amount in enumerate(vector):
                if amount:
                    indices.append(class_rows + type_index * resources + resource_index)
                    values.append(amount)
            starts.append(len(indices))
    lp = highspy.HighsLp()
    lp.num_col_ = len(costs)
    lp.num_row_ = len(row_lower)
    lp.col_cost_ = np.array(costs, dtype=np.float64)
    lp.col_lower_ = np.zeros(len(costs), dtype=np.float64)
    lp.col_upper_ = np.full(len(costs), highspy.kHighsInf, dtype=np.float64)
    lp.row_lower_ = np.array(row_lower, dtype=np.float64)
    lp.row_upper_ = np.array(row_upper, dtype=np.float64)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = np.array(starts, dtype=np.int64)
    lp.a_matrix_.index_ = np.array(indices, dtype=np.int64)
    lp.a_matrix_.value_ = np.array(values, dtype=np.float64)
    solution = _solve(lp)
    counts = solution[: len(columns)]
    return LowerBound(
        sum(column.price * count for column, count in zip(columns, counts, strict=True)),
        _largest(columns, counts),
        needed,
    )


def single_resource_bound(pods: Sequence[Pod], pools: Sequence[NodePoolCapacity]) -> float:
    """A weaker bound, for checking the LP: the dearest resource bought at its cheapest unit price."""
    columns = lp_columns(pools)
    needed = demand(pods)
    best = 0.0
    for index, amount in enumerate(needed):
        unit_prices = [column.price / column.usable[index] for column in columns if column.usable[index] > 0]
        if amount > 0 and unit_prices:
            best = max(best, amount * min(unit_prices))
    return best
