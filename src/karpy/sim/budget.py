"""The memory a simulation may take, and how karpy keeps to it.

A simulated cluster lives in karpy's memory: every pod is an object, every
change of a NodeClaim a row of the report. ``karpy simulate`` keeps to
:data:`MEMORY_BUDGET_BYTES` (900 MiB, under 1 GB) three ways, each saying why before the
run could pass it:

- **before the run**, the inputs' pods are counted (:func:`requested_pods`:
  the replicas of every Deployment, ReplicaSet and StatefulSet at their
  largest, with the scale steps and HorizontalPodAutoscalers' maximums; a
  Job's completions; a bare Pod) and a run asking for more than
  :data:`MAX_SIMULATED_PODS` is refused before anything is built;
- **during the run**, the in-memory API server refuses a pod beyond
  :data:`MAX_SIMULATED_PODS` (a DaemonSet over many nodes, a CronJob's
  Jobs piling up), as a ResourceQuota would, with a warning;
- **every turn of the loop**, :class:`RunWatch` reads the process's peak
  resident memory and stops the run with an error once it reaches the
  budget (a run of centuries, whose report grows with every node expired
  and replaced).

:class:`Heartbeat` says on standard error how far a long command is, every
:data:`PROGRESS_SECONDS`, so that no run is silent for a minute.

:data:`BYTES_PER_POD` was measured: ``karpy simulate`` of the seed's
manifests with 5,000 and 20,000 replicas of 100m (all running on 130 and
513 nodes) peaked at 70.7 and 122.4 MB of resident memory, 3.4 KiB a pod
with its share of nodes, events and report; 4 KiB leaves room for pods of
larger templates. What is left of the budget, :data:`BASE_BYTES`, is the
interpreter, the instance type catalog and the controllers (60 MB for the
seed walkthrough) with room to spare.
"""

from __future__ import annotations

import resource
import sys
import threading
import time
from collections.abc import Callable, Iterable

from karpy.api.core import Deployment, Job, Pod, ReplicaSet, StatefulSet
from karpy.api.hpa import HorizontalPodAutoscaler
from karpy.api.manifest import LoadedObject

MIB = 1024 * 1024
MEMORY_BUDGET_BYTES = 900 * MIB  # under 1 GB (954 MiB), with a turn of the loop to spare
BASE_BYTES = 200 * MIB
BYTES_PER_POD = 4 * 1024
MAX_SIMULATED_PODS = (MEMORY_BUDGET_BYTES - BASE_BYTES) // BYTES_PER_POD  # 179,200
PROGRESS_SECONDS = 15.0

ScaleStep = tuple[str, str, int]  # (kind, namespace/name, replicas)


def requested_pods(objects: Iterable[LoadedObject], scales: Iterable[ScaleStep] = ()) -> dict[str, int]:
    """The most pods each workload of ``objects`` asks for, by ``Kind namespace/name``.

    A workload counts at the largest of its replicas, the replicas scale
    steps give it and its HorizontalPodAutoscaler's ``maxReplicas``; a Job at
    its completions (finished pods stay, as in a cluster), a Pod as one.
    """
    wanted: dict[str, int] = {}

    def want(kind: str, key: str, count: int) -> None:
        label = f"{kind} {key}"
        wanted[label] = max(wanted.get(label, 0), count)

    for loaded in objects:
        obj = loaded.obj
        if isinstance(obj, Deployment | ReplicaSet | StatefulSet):
            want(obj.kind, f"{obj.metadata.namespace}/{obj.metadata.name}", obj.replicas)
        elif isinstance(obj, Job):
            want(
                "Job",
                f"{obj.metadata.namespace}/{obj.metadata.name}",
                max(obj.parallelism, obj.wanted_successes),
            )
        elif isinstance(obj, Pod):
            want("Pod", obj.key, 1)
        elif isinstance(obj, HorizontalPodAutoscaler):
            want(obj.target_kind, obj.target_key, obj.max_replicas)
    for kind, key, replicas in scales:
        want(kind, key, replicas)
    return wanted


def pod_budget_problem(wanted: dict[str, int], limit: int = MAX_SIMULATED_PODS) -> str | None:
    """Why a run asking for ``wanted`` pods is not simulated, or None if it fits the budget."""
    total = sum(wanted.values())
    if total <= limit:
        return None
    largest = sorted(wanted.items(), key=lambda item: -item[1])[:3]
    named = ", ".join(f"{label}: {count:,}" for label, count in largest)
    return (
        f"the inputs ask for up to {total:,} pods ({named}); karpy simulates at most {limit:,}"
        f" (about {BYTES_PER_POD // 1024} KiB of memory a pod, {MEMORY_BUDGET_BYTES // MIB:,} MiB in all):"
        " lower the replicas"
    )


class MemoryBudgetError(Exception):
    """The run reached its memory budget; the message says when and how far it got."""


def peak_resident_bytes() -> int:
    """The process's peak resident memory (Linux counts ru_maxrss in KiB, macOS in bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


class RunWatch:
    """Called every turn of the simulation's loop: stops it at the memory budget, saying where."""

    def __init__(self, describe: Callable[[], str], *, budget_bytes: int = MEMORY_BUDGET_BYTES) -> None:
        self.describe = describe
        self.budget_bytes = budget_bytes

    def __call__(self) -> None:
        peak = peak_resident_bytes()
        if peak >= self.budget_bytes:
            raise MemoryBudgetError(
                f"stopped at {self.describe()}: the run's memory reached {peak / MIB:,.0f} MiB,"
                f" its budget of {self.budget_bytes / MIB:,.0f} MiB;"
                " shorten the run (--duration) or the inputs"
            )


class Heartbeat:
    """A thread that tells ``say`` what a long command is doing (``status``), every ``every`` seconds.

    A thread, not a check in the loop: one step of a command (reading a big
    file, a reconcile making thousands of pods) may take long by itself. The
    results never depend on it: it only says, on the side, how far they are.
    """

    def __init__(
        self, status: Callable[[], str], say: Callable[[str], None], every: float = PROGRESS_SECONDS
    ) -> None:
        self.status = status
        self.say = say
        self.every = every
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="karpy-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stopped.set()
        self._thread.join()

    def _beat(self) -> None:
        started = time.monotonic()
        while not self._stopped.wait(self.every):
            self.say(f"still working after {time.monotonic() - started:.0f} s: {self.status()}")
