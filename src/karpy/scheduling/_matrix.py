"""A NodePool's instance types as a matrix: one row per type, one column per resource.

The solver's bins (:mod:`karpy.scheduling._options`) keep their options as
rows of their pool's matrix, so that whether a bin's summed requests still
fit each option is one vectorised comparison; the matrix of a pool's types is
the same for every solve over them, so :class:`karpy.scheduling._model.TypeMemo`
keeps it between solves. It is built from the types and their DaemonSet
overhead alone, which keeps this module below both. A column counting a CSI
driver's volumes (:mod:`karpy.api.storage`) holds each type's attach limit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from karpy.api.instancetype import InstanceType
from karpy.api.quantity import ResourceAmounts
from karpy.api.requirements import Requirements
from karpy.api.storage import UNLIMITED_VOLUMES, VOLUME_RESOURCE_PREFIX, is_volume_resource


class PoolMatrix:
    """One NodePool's instance types as a matrix of what each has for pods.

    Row i is instance type i, column j a resource; the value is allocatable
    less the DaemonSets that would run there. Whether a bin's summed requests
    still fit each of its options, and how many more alike pods each option
    takes, are then one vectorised comparison over all options instead of a
    Python loop over them, which is where a solver for thousands of pods and
    hundreds of instance types spends its time.
    """

    def __init__(
        self,
        instance_types: Sequence[InstanceType],
        overhead: Callable[[InstanceType], ResourceAmounts],
        resources: Sequence[str],
        requirements: Requirements,
    ) -> None:
        """The matrix of a pool's ``instance_types``, less ``overhead`` (the DaemonSets' requests on each)."""
        self.columns = {resource: index for index, resource in enumerate(resources)}
        # The cheapest offering each type has under the pool's requirements (inf: none).
        self.price = np.array(
            [
                min((o.price for o in t.available_offerings(requirements)), default=np.inf)
                for t in instance_types
            ]
            or [np.inf],
            dtype=np.float64,
        )
        self.row_of = {id(instance_type): row for row, instance_type in enumerate(instance_types)}
        net = np.zeros((max(1, len(instance_types)), len(resources)), dtype=np.int64)
        # Volume attach limits are columns only in a solve whose pods mount volumes.
        volume_columns = [
            (column, resource.removeprefix(VOLUME_RESOURCE_PREFIX))
            for resource, column in self.columns.items()
            if is_volume_resource(resource)
        ]
        for row, instance_type in enumerate(instance_types):
            daemons = overhead(instance_type)
            for resource, amount in instance_type.allocatable.items():
                column = self.columns.get(resource)
                if column is not None:
                    net[row, column] = amount - daemons.get(resource, 0)
            for column, driver in volume_columns:
                net[row, column] = instance_type.volume_limits.get(driver, UNLIMITED_VOLUMES)
        self.net = net
        self.cpu_column = self.columns.get("cpu")
        self.memory_column = self.columns.get("memory")

    def vector(self, amounts: Mapping[str, int]) -> npt.NDArray[np.int64]:
        vector = np.zeros(len(self.columns), dtype=np.int64)
        for resource, amount in amounts.items():
            vector[self.columns[resource]] = amount
        return vector

    def rows(self, options: Sequence[InstanceType]) -> npt.NDArray[np.intp]:
        return np.fromiter((self.row_of[id(t)] for t in options), dtype=np.intp, count=len(options))

    def cost_alone(self, rows: npt.NDArray[np.intp], requests: npt.NDArray[np.int64], count: int) -> float:
        """What ``count`` pods of ``requests`` cost on fresh nodes of one of ``rows``, at best.

        For each type: as many nodes as it takes to hold them all, times its
        price; the cheapest type wins (inf if no type holds even one).
        """
        if len(rows) == 0:
            return float("inf")
        used = requests > 0
        if not used.any():
            return 0.0
        per_node = (np.maximum(self.net[rows][:, used], 0) // requests[used]).min(axis=1)
        holds = per_node > 0
        if not holds.any():
            return float("inf")
        nodes = -(-count // per_node[holds])
        return float((nodes * self.price[rows][holds]).min())
