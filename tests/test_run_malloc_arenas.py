"""``karpy run`` keeps glibc to two malloc arenas (``karpy.run.limit_malloc_arenas``).

Each probe runs in a process of its own: the limit is the whole process's and
is read when its first thread allocates. Eight threads hold allocations at
once, then glibc's ``malloc_stats`` prints one ``Arena N:`` line an arena.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent(
    """
    import ctypes, sys, threading
    from karpy.run import limit_malloc_arenas
    if sys.argv[1] == "limit":
        print(limit_malloc_arenas(), flush=True)
    barrier = threading.Barrier(8)
    kept = []
    def hold():
        barrier.wait()
        kept.append([bytes(1000) for _ in range(2000)])
        barrier.wait()  # every thread holds its objects at once
    threads = [threading.Thread(target=hold) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ctypes.CDLL(None).malloc_stats()
    """
)

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None,
    reason="malloc arenas are glibc's",
)


def arenas(mode: str, **env: str) -> tuple[int, str]:
    """The arenas the probe's process ended with, and what it printed."""
    environment = {key: value for key, value in os.environ.items() if key != "MALLOC_ARENA_MAX"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode],
        env={**environment, **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return sum(line.startswith("Arena ") for line in done.stderr.splitlines()), done.stdout.strip()


def test_eight_threads_share_two_arenas_once_limited() -> None:
    assert arenas("limit") == (2, "True")
    assert arenas("none")[0] > 2  # glibc's own limit is eight a core


def test_a_malloc_arena_max_in_the_environment_is_left_to_rule() -> None:
    count, printed = arenas("limit", MALLOC_ARENA_MAX="3")
    assert (count, printed) == (3, "False")
