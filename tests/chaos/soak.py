"""The soak: random workload changes and faults for a bounded time, watching karpy's memory and latency.

``python -m tests.chaos.soak [--minutes 20] [--seed 1]`` (or ``make soak``)
starts a control plane of its own, two ``karpy run`` replicas and the chaos
suite's workload (:mod:`tests.chaos.harness`), then runs rounds until the
time is up: each a random change (scale-up, consolidation, drift) and a random
fault among those that leave the leader in place (the API server stopped for
less than the renew deadline, etcd killed and restarted, a NodeClaim or a Node
deleted by hand, the watches cut after a compaction), so that one process's
memory can be followed from start to end. The invariants of the chaos suite
are checked all along.

Every 10 seconds the leader's resident set (``VmRSS``) is sampled; every
minute its ``controller_runtime_reconcile_time_seconds`` histogram is scraped,
and the p99 of the reconciles of that minute (from the difference of the
cumulative buckets) is worked out per controller. The figures:

- the leader's RSS after the first 2 minutes and at the end; the target is an
  end within 10% of the former (no leak);
- per controller, the p99 of each minute (a bucket bound): stable means no
  upward drift from the first minutes to the last;
- the invariant violations (must be 0).

The exit status is 0 when the RSS target is met and nothing was violated.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.run_scale import bound_under, metrics_port, reconcile_buckets
from tests.chaos.harness import POOL, Rounds, Supervisor
from tests.integration.conftest import SCRIPT, ControlPlane, _kubectl_path, _parse_env, install_crds

from karpy.kube._http import ApiTransport

# The faults that leave the leader where it is (see the module docstring).
SOAK_FAULTS = (
    "API server stopped",
    "etcd killed and restarted",
    "NodeClaim deleted",
    "Node deleted",
    "watches cut (410)",
)
PHASES = ("scale-up", "consolidation", "drift")


@contextlib.contextmanager
def control_plane() -> Iterator[ControlPlane]:
    state_dir = Path(tempfile.mkdtemp(prefix="karpy-soak-"))
    env = {
        **os.environ,
        "KARPY_CONTROL_PLANE_DIR": str(state_dir),
        "KARPY_CONTROL_PLANE_OWNER": str(os.getpid()),
    }
    subprocess.run([str(SCRIPT), "build"], env=env, check=True)
    up = subprocess.run([str(SCRIPT), "up"], env=env, capture_output=True, text=True, check=False)
    try:
        if up.returncode != 0:
            raise RuntimeError(f"scripts/control-plane up failed:\n{up.stderr}")
        listed = subprocess.run([str(SCRIPT), "env"], env=env, capture_output=True, text=True, check=True)
        plane = ControlPlane(state_dir=state_dir, env=_parse_env(listed.stdout), kubectl_path=_kubectl_path())
        with (state_dir / "logs" / "fake-kubelet.log").open("wb") as output:
            kubelet = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "karpy.cloud.kwok.fake_kubelet",
                    "--kubeconfig",
                    str(plane.kubeconfig),
                ],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        (state_dir / "pids" / "fake-kubelet").write_text(f"{kubelet.pid} karpy.cloud.kwok.fake_kubelet\n")
        install_crds(plane)
        yield plane
    finally:
        subprocess.run([str(SCRIPT), "down"], env=env, capture_output=True, check=False)


def p99_between(before: list[tuple[float, float]], after: list[tuple[float, float]]) -> tuple[int, float]:
    """The reconciles between two scrapes and the bucket bound under which 99% of them ended."""
    earlier = dict(before)
    counts = [(bound, count - earlier.get(bound, 0.0)) for bound, count in after]
    if not counts or counts[-1][1] <= 0:
        return 0, 0.0
    return int(counts[-1][1]), bound_under(counts, 0.99)


@dataclass
class Watch:
    """The leader's memory every 10 s and its reconcile latency every minute, on a thread of its own."""

    supervisor: Supervisor
    api: ApiTransport
    started: float = field(default_factory=time.monotonic)
    rss: list[tuple[float, int, int]] = field(default_factory=list)  # (seconds, pid, kB)
    minutes: list[tuple[float, dict[str, tuple[int, float]]]] = field(default_factory=list)
    leaders: set[int] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        last: dict[str, list[tuple[float, float]]] = {}
        last_pid = 0
        next_scrape = time.monotonic() + 60
        while not self._stop.wait(10):
            index = self.supervisor.leader_index(self.api)
            process = self.supervisor.processes[index] if index is not None else None
            if process is None:
                continue
            pid = process.process.pid
            self.leaders.add(pid)
            with contextlib.suppress(OSError, ValueError):
                status = Path(f"/proc/{pid}/status").read_text()
                kb = int(next(line for line in status.splitlines() if line.startswith("VmRSS")).split()[1])
                self.rss.append((time.monotonic() - self.started, pid, kb))
            if time.monotonic() < next_scrape:
                continue
            next_scrape += 60
            port = metrics_port(process.log())
            if port is None:
                continue
            with contextlib.suppress(OSError):
                now = reconcile_buckets(port)
                if pid == last_pid:
                    minute = {c: p99_between(last.get(c, []), series) for c, series in now.items()}
                    self.minutes.append((time.monotonic() - self.started, minute))
                last, last_pid = now, pid

    def stop(self) -> None:
        self._stop.set()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.soak", description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=20.0, help="how long to run (default 20)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    logs = Path(tempfile.mkdtemp(prefix="karpy-soak-logs-"))
    with control_plane() as plane:
        namespace = "soak"
        plane.kubectl("create", "namespace", namespace)
        time.sleep(2)  # the namespace's default ServiceAccount
        supervisor = Supervisor(plane, logs).start()
        # Stops shorter than the renew deadline (10 s): the leader keeps its lease.
        rounds = Rounds(plane, namespace, supervisor, rng, api_stopped_for=(3.0, 6.0))
        watch = Watch(supervisor, rounds.api)
        thread = threading.Thread(target=watch.run, name="soak-watch", daemon=True)
        try:
            rounds.start()
            thread.start()
            deadline = time.monotonic() + args.minutes * 60
            number = 0
            while time.monotonic() < deadline:
                number += 1
                line = rounds.run(number, rng.choice(PHASES), (rng.choice(SOAK_FAULTS),))
                print(f"[{(time.monotonic() - watch.started) / 60:5.1f} min] {line}", flush=True)
        finally:
            watch.stop()
            thread.join(15)
            rounds.stop()
            plane.kubectl("delete", "namespace", namespace, "--wait=false")
            plane.kubectl("delete", "nodepool", POOL, "--wait=false", "--ignore-not-found")
            supervisor.stop()
    return report(watch, rounds, len(supervisor.exits))


def report(watch: Watch, rounds: Rounds, restarts: int) -> int:
    print("\n" + rounds.table())
    print("\nminute | leader RSS MB | reconciles p99 per controller (count)")
    print("---|---|---")
    for seconds, minute in watch.minutes:
        rss = [kb for at, _, kb in watch.rss if at <= seconds]
        latencies = ", ".join(
            f"{controller} {p99:g}s ({count})" for controller, (count, p99) in sorted(minute.items()) if count
        )
        print(f"{seconds / 60:.0f} | {rss[-1] / 1024 if rss else 0:.0f} | {latencies}")
    after_two = [kb for at, _, kb in watch.rss if at >= 120]
    violations = len(rounds.monitor.violations)
    for violation in rounds.monitor.violations:
        print(f"VIOLATION {violation.invariant}: {violation.detail}")
    if len(watch.leaders) != 1 or not after_two:
        print(f"\nleaders during the run: {len(watch.leaders)}; replica restarts: {restarts}")
        print("no single leader to follow from start to end: no memory figure")
        return 1
    first, last = after_two[0], watch.rss[-1][2]
    growth = last / first - 1
    met = growth <= 0.10 and violations == 0
    print(
        f"\nleader RSS after 2 min {first / 1024:.0f} MB, at the end {last / 1024:.0f} MB ({growth:+.1%};"
        f" target within +10%); invariant violations {violations}; replica restarts {restarts}"
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
