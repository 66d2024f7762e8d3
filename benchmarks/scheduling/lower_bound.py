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


def _run(lp: highspy.HighsLp, *, optimal: bool = True, mip_rel_gap: float | None = None) -> highspy.Highs:
    """Solve ``lp`` with HiGHS, quietly; the solver, for its solution and figures.

    ``optimal``: raise unless HiGHS proved the optimum (an integer knapsack's
    bound is read from its dual bound instead, so it may stop short).
    """
    with _quiet_stdout():
        highs = highspy.Highs()  # type: ignore[no-untyped-call]  # (its __init__ lacks "-> None")
    highs.silent()
    if mip_rel_gap is not None:
        highs.setOptionValue("mip_rel_gap", mip_rel_gap)
    highs.passModel(lp)
    highs.run()
    status = highs.getModelStatus()
    if optimal and status != highspy.HighsModelStatus.kOptimal:
        raise RuntimeError(f"the LP relaxation was not solved: {highs.modelStatusToString(status)}")
    return highs


def _solve(lp: highspy.HighsLp) -> list[float]:
    """Solve a minimisation LP with HiGHS, quietly; the optimal column values."""
    return list(_run(lp).getSolution().col_value)


def _sparse_lp(
    costs: Sequence[float],
    row_lower: Sequence[float],
    row_upper: Sequence[float],
    matrix: tuple[Sequence[int], Sequence[int], Sequence[float]],
    *,
    col_upper: Sequence[float] | None = None,
    rowwise: bool = False,
    maximize: bool = False,
) -> highspy.HighsLp:
    """A HiGHS model: non-negative columns priced ``costs``, row bounds, and a sparse matrix
    given as (starts, indices, values) by column (or by row with ``rowwise``)."""
    starts, indices, values = matrix
    lp = highspy.HighsLp()
    lp.num_col_ = len(costs)
    lp.num_row_ = len(row_lower)
    if maximize:
        lp.sense_ = highspy.ObjSense.kMaximize
    lp.col_cost_ = np.array(costs, dtype=np.float64)
    lp.col_lower_ = np.zeros(len(costs), dtype=np.float64)
    if col_upper is None:
        lp.col_upper_ = np.full(len(costs), highspy.kHighsInf, dtype=np.float64)
    else:
        lp.col_upper_ = np.array(col_upper, dtype=np.float64)
    lp.row_lower_ = np.array(row_lower, dtype=np.float64)
    lp.row_upper_ = np.array(row_upper, dtype=np.float64)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise if rowwise else highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = np.array(starts, dtype=np.int64)
    lp.a_matrix_.index_ = np.array(indices, dtype=np.int64)
    lp.a_matrix_.value_ = np.array(values, dtype=np.float64)
    return lp


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
    lp = _sparse_lp(
        [column.price for column in columns],
        needed,
        [highspy.kHighsInf] * rows,
        (
            range(0, rows * len(columns) + 1, rows),
            [row for _ in columns for row in range(rows)],
            [value for column in columns for value in column.usable],
        ),
    )
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


def _placeable_classes(pods: Sequence[Pod], columns: Sequence[Column]) -> dict[tuple[float, ...], int]:
    """The request classes of ``pods`` that fit some column (no plan can place the others either)."""
    return {
        vector: count
        for vector, count in request_classes(pods).items()
        if any(_fits(vector, column.usable) for column in columns)
    }


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
    classes = _placeable_classes(pods, columns)
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
    lp = _sparse_lp(costs, row_lower, row_upper, (starts, indices, values))
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


def _undominated(columns: Sequence[Column]) -> list[Column]:
    """The columns no other column beats: none as cheap with at least as much of every resource.

    A node of a dominated type holds nothing that a node of the type
    dominating it could not hold for no more money, so leaving dominated
    types out changes no optimum below; it only makes the pricing step cheaper.
    """
    kept: list[Column] = []
    for column in sorted(columns, key=lambda column: (column.price, [-amount for amount in column.usable])):
        if any(
            other.price <= column.price
            and all(mine <= theirs for mine, theirs in zip(column.usable, other.usable, strict=True))
            for other in kept
        ):
            continue
        kept.append(column)
    return kept


def _most_of(vector: Sequence[float], usable: Sequence[float]) -> int:
    """How many pods of ``vector`` one node of ``usable`` holds (the pods row included)."""
    return min(int(room // amount + 1e-9) for room, amount in zip(usable, vector, strict=True) if amount > 0)


def _best_pattern(
    values: Sequence[float], vectors: Sequence[Sequence[float]], usable: Sequence[float], upper: Sequence[int]
) -> tuple[float, list[int]]:
    """The most valuable set of pods one node of ``usable`` holds: an integer knapsack in three dimensions.

    Returns an upper bound on the best value (HiGHS' dual bound, so that the
    bound built from it stays valid even if the search stopped early) and the
    best pattern found (pods per class).
    """
    count = len(values)
    starts, indices, entries = [0], [], []
    for resource in range(len(usable)):
        for index, vector in enumerate(vectors):
            if vector[resource]:
                indices.append(index)
                entries.append(vector[resource])
        starts.append(len(indices))
    lp = _sparse_lp(
        values,
        [-highspy.kHighsInf] * len(usable),
        usable,
        (starts, indices, entries),
        col_upper=upper,
        rowwise=True,
        maximize=True,
    )
    lp.integrality_ = [highspy.HighsVarType.kInteger] * count
    highs = _run(lp, optimal=False, mip_rel_gap=0.0)
    info = highs.getInfo()
    pattern = [round(value) for value in highs.getSolution().col_value]
    return max(float(info.mip_dual_bound), float(info.objective_function_value)), pattern


def _master(
    patterns: Sequence[Sequence[int]], prices: Sequence[float], counts: Sequence[int]
) -> tuple[float, list[float], list[float]]:
    """The restricted configuration LP: its optimum, the class rows' duals and the patterns' node counts."""
    starts, indices, entries = [0], [], []
    for pattern in patterns:
        for index, pods in enumerate(pattern):
            if pods:
                indices.append(index)
                entries.append(float(pods))
        starts.append(len(indices))
    lp = _sparse_lp(prices, counts, [highspy.kHighsInf] * len(counts), (starts, indices, entries))
    highs = _run(lp)
    solution = highs.getSolution()
    return (
        float(highs.getInfo().objective_function_value),
        [max(0.0, dual) for dual in solution.row_dual],
        list(solution.col_value),
    )


def configuration_lower_bound(
    pods: Sequence[Pod], pools: Sequence[NodePoolCapacity], *, max_rounds: int = 200
) -> LowerBound:
    """The tightest bound here: the configuration LP (Gilmore and Gomory's relaxation of bin packing).

    A *pattern* is one node of a type with a whole number of pods of each
    request class that fit it together. Variables: ``λ_p ≥ 0`` nodes of
    pattern ``p`` (continuous). Minimise Σ price_p·λ_p subject to
    Σ_p pods_cp·λ_p ≥ n_c per class. Every plan is such a set of patterns
    with whole λ, so the LP's optimum is a lower bound; unlike the
    assignment LP, it knows that pods are indivisible within a node (a
    512Mi pod and a 256Mi pod cannot share a node with 700Mi free). Only
    the number of nodes per pattern is relaxed, which at thousands of pods
    costs a fraction of a node per pattern: this bound is close to the true
    optimum.

    There are far too many patterns to list, so they are generated
    (column generation): solve the LP over the patterns known, take the
    class rows' duals π (what one more pod of each class is worth), and ask
    each type for its most valuable pattern, an integer knapsack solved by
    HiGHS; a pattern worth more than its type's price improves the LP and
    joins it. Every round also yields a valid bound (Farley's): with
    κ = max_t value_t / price_t ≥ 1, π/κ is a feasible dual, so
    optimum ≥ (restricted optimum)/κ. The best such bound is returned, and
    it equals the LP's optimum once no pattern improves it.
    """
    columns = _undominated(lp_columns(pools))
    needed = demand(pods)
    fitting = _placeable_classes(pods, columns)
    if not fitting:
        return LowerBound(0.0, (), needed)
    vectors = list(fitting)
    counts = [fitting[vector] for vector in vectors]
    upper = [
        [
            min(count, _most_of(vector, column.usable)) if _fits(vector, column.usable) else 0
            for vector, count in zip(vectors, counts, strict=True)
        ]
        for column in columns
    ]
    patterns: list[list[int]] = []
    pattern_columns: list[int] = []
    for column_index, limits in enumerate(upper):
        for class_index, most in enumerate(limits):
            if most:
                pattern = [0] * len(vectors)
                pattern[class_index] = most
                patterns.append(pattern)
                pattern_columns.append(column_index)
    best = 0.0
    nodes: list[float] = []
    for _ in range(max_rounds):
        restricted, duals, nodes = _master(patterns, [columns[i].price for i in pattern_columns], counts)
        ratio = 1.0
        added = 0
        for column_index, column in enumerate(columns):
            # No pattern of this type can be worth more than its resources at the best value per unit.
            ceiling = min(
                (
                    column.usable[resource]
                    * max(
                        dual / vector[resource]
                        for dual, vector in zip(duals, vectors, strict=True)
                        if vector[resource] > 0
                    )
                    for resource in range(len(RESOURCE_SCALES))
                    if any(vector[resource] > 0 for vector in vectors)
                ),
                default=0.0,
            )
            if ceiling <= column.price:
                continue
            value, pattern = _best_pattern(duals, vectors, column.usable, upper[column_index])
            ratio = max(ratio, value / column.price)
            if sum(dual * pods for dual, pods in zip(duals, pattern, strict=True)) > column.price * (
                1 + 1e-7
            ):
                patterns.append(pattern)
                pattern_columns.append(column_index)
                added += 1
        best = max(best, restricted / ratio)
        if added == 0 or restricted <= best * (1 + 1e-6):
            break
    per_type: dict[int, float] = {}
    for column_index, count in zip(pattern_columns, nodes, strict=True):
        per_type[column_index] = per_type.get(column_index, 0.0) + count
    return LowerBound(
        best,
        _largest([columns[i] for i in per_type], list(per_type.values())),
        needed,
    )
