"""``karpy`` as its console script runs it, with the time of each stage of a command written to a file.

``python -m benchmarks.timed_karpy FIGURES.json simulate --from-cluster ...`` runs
:func:`karpy.cli.main` with those arguments, in this process, after wrapping the
functions ``karpy simulate --from-cluster`` and ``karpy plan`` go through in order
(reading the cluster, the starting state, the seed, the run); at the end it writes,
per stage, the wall seconds and the process' CPU seconds spent in it (all threads:
the lists run four at a time). The parse of the objects read (``parse_objects``) is
timed by the CPU of the thread that runs it (the reading threads parse each page as
it comes, so its wall time overlaps the lists'): the read's CPU less the parse's is
what the lists, the HTTP and the JSON cost.
Nothing of karpy's is changed but that the calls are timed.
"""

from __future__ import annotations

import functools
import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from karpy import cli
from karpy.kube import snapshot

# (stage, module, function, CPU clock): each call of the function counts to the stage.
STAGES: tuple[tuple[str, Any, str, Callable[[], float]], ...] = (
    ("read", cli, "_read_cluster", time.process_time),
    ("parse", snapshot, "parse_objects", time.thread_time),
    ("convert", cli, "starting_state", time.process_time),
    ("seed", cli, "_seed", time.process_time),
    ("run", cli, "_run_scenario", time.process_time),
)


def timed(
    figures: dict[str, float], stage: str, function: Callable[..., Any], clock: Callable[[], float]
) -> Callable[..., Any]:
    lock = threading.Lock()

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        wall, cpu = time.perf_counter(), clock()
        try:
            return function(*args, **kwargs)
        finally:
            spent_wall, spent_cpu = time.perf_counter() - wall, clock() - cpu
            with lock:
                figures[f"{stage}Seconds"] = figures.get(f"{stage}Seconds", 0.0) + spent_wall
                figures[f"{stage}CpuSeconds"] = figures.get(f"{stage}CpuSeconds", 0.0) + spent_cpu

    return wrapper


def main(argv: list[str]) -> int:
    output, arguments = Path(argv[0]), argv[1:]
    # A process started in the background of a shell inherits SIGINT ignored: the benchmark's
    # timeout interrupts the command with it, and the stages must still be written.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # The interpreter's start and karpy's imports, before the command begins.
    figures: dict[str, float] = {"startCpuSeconds": time.process_time()}
    for stage, module, name, clock in STAGES:
        setattr(module, name, timed(figures, stage, getattr(module, name), clock))
    try:
        return cli.main(arguments)
    finally:
        output.write_text(json.dumps({key: round(value, 3) for key, value in figures.items()}))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
