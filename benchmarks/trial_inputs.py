"""Bad and odd inputs through ``karpy validate``, ``simulate`` and ``convert``, counted by category.

The trials of issue 29 fed karpy about 370 inputs a user could give it by
mistake or malice. This makes a few hundred of the same kinds in a
scratch directory and runs each command on each, in a process of its own
under a memory cap (RLIMIT_AS, :data:`ADDRESS_SPACE_CAP`) and a time limit,
reading its output as it comes:

- ``binary``: files that are no text (random bytes, NULs, UTF-32, Latin-1,
  an executable, compressed data);
- ``special``: /dev/zero and /dev/urandom named and through ``*.yaml``
  symbolic links in a directory, FIFOs, a socket, symbolic link loops and
  links to nothing, a directory and a file without read permission (run as
  ``nobody`` when the trials run as root, who may read anything), names too
  long, a path through a regular file;
- ``sizes``: absurd replicas, scales, completions, HPA maximums and
  durations, files and documents past the limits, 10,000 NodePools, a file
  of tens of thousands of small documents, deep nesting, aliases;
- ``invalid``: objects the API server or karpy's CRDs refuse (issue 29's
  items 1 to 5), which ``validate`` and ``simulate`` must not accept.

For each category and command it prints: runs, tracebacks seen, exit codes,
invalid inputs accepted (exit 0 from ``validate`` or ``simulate``), runs
whose peak resident memory passed 1 GB, the largest peak, the longest run,
runs silent for a minute (no line on either stream for 60 s) and runs
killed at the time limit (:data:`TIME_LIMIT`; a run of ten thousand years
that replaces its nodes every 30 days is that much work, and says so as it
goes). ``make trials`` runs them all (about half an hour on two busy
cores); ``--only CATEGORY`` and ``--jobs`` narrow and widen it. The exit
status is 1 if any run saw a traceback, passed 1 GB, was silent for a
minute or accepted an invalid input.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import os
import random
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent.parent
SEED = ROOT / "src" / "karpy" / "sim" / "scenarios" / "seed"
COMMANDS = ("validate", "simulate", "convert")
CATEGORIES = ("binary", "special", "sizes", "invalid")
GB = 1_000_000_000
# The address space a run may map: a bit over 1 GB of memory in use (Python maps more than it touches).
ADDRESS_SPACE_CAP = 1536 * 1024 * 1024
SILENT_SECONDS = 60.0
TIME_LIMIT = 150.0
NOBODY = 65534


@dataclass(frozen=True, slots=True)
class Trial:
    """One input: what to pass karpy, in which category, and whether the API server would refuse it."""

    category: str
    name: str
    paths: tuple[str, ...]
    invalid: bool = False  # an input the API server or karpy's CRDs refuse
    extra: tuple[str, ...] = ()  # more arguments for simulate (--duration ...)
    as_nobody: bool = False  # needs an unprivileged user for a permission to matter


@dataclass(slots=True)
class Outcome:
    code: int | None  # None: killed at the time limit
    out: str
    err: str
    seconds: float
    peak_rss: int  # bytes
    longest_silence: float

    @property
    def traceback(self) -> bool:
        return "Traceback (most recent call last)" in self.err

    @property
    def silent_for_a_minute(self) -> bool:
        return self.longest_silence >= SILENT_SECONDS


def _limit_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_CAP, ADDRESS_SPACE_CAP))


def run_capped(
    argv: list[str], cwd: Path, *, timeout: float = TIME_LIMIT, user: int | None = None
) -> Outcome:
    """Run ``argv`` under the memory cap and ``timeout``; its output, peak memory and longest silence."""
    started = time.monotonic()
    last_output = [started]
    longest = [0.0]
    lock = threading.Lock()
    if user is not None:  # util-linux's setpriv: the interpreter's own setuid cannot reach it here
        argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *argv]
    process = subprocess.Popen(
        argv,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_limit_memory,  # noqa: PLW1509  # nothing but a system call before exec
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    chunks: dict[str, list[bytes]] = {"out": [], "err": []}

    def pump(name: str, stream: IO[bytes]) -> None:
        while True:
            data = stream.read1(65536)  # type: ignore[attr-defined]  # a BufferedReader's
            if not data:
                return
            now = time.monotonic()
            with lock:
                longest[0] = max(longest[0], now - last_output[0])
                last_output[0] = now
                chunks[name].append(data)

    threads = [
        threading.Thread(target=pump, args=("out", process.stdout), daemon=True),
        threading.Thread(target=pump, args=("err", process.stderr), daemon=True),
    ]
    for thread in threads:
        thread.start()
    status: int | None = None
    peak = 0
    while True:
        # The run's own high-water mark: a forked child's ru_maxrss counts the parent's pages too.
        peak = max(peak, _high_water_mark(process.pid))
        pid, wait_status, _ = os.wait4(process.pid, os.WNOHANG)
        if pid:
            status = os.waitstatus_to_exitcode(wait_status)
            break
        if time.monotonic() - started > timeout:
            process.kill()
            os.wait4(process.pid, 0)
            break
        time.sleep(0.02)
    process.returncode = status if status is not None else -9
    for thread in threads:
        thread.join(5)
    ended = time.monotonic()
    with lock:
        longest[0] = max(longest[0], ended - last_output[0])
    return Outcome(
        code=status,
        out=b"".join(chunks["out"]).decode(errors="replace"),
        err=b"".join(chunks["err"]).decode(errors="replace"),
        seconds=ended - started,
        peak_rss=peak,
        longest_silence=longest[0],
    )


def _high_water_mark(pid: int) -> int:
    """The peak resident memory of process ``pid`` so far (VmHWM), 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def karpy_argv(command: str, trial: Trial) -> list[str]:
    extra = list(trial.extra) if command == "simulate" else []
    return [sys.executable, "-m", "karpy.cli", command, *extra, *trial.paths]


# -- the inputs ------------------------------------------------------------------------------------

NODEPOOL = """\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {name}}}
spec:
  template:
    metadata: {{labels: {labels}}}
    spec:
      requirements: {requirements}
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
      expireAfter: {expire}
  disruption: {disruption}
  limits: {{cpu: "1000"}}
"""

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      {pod_spec}
"""

EC2NODECLASS = """\
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole-demo
  amiSelectorTerms: [{alias: al2@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
"""
CONTAINERS = "containers: [{name: c, image: x, resources: {requests: {cpu: 100m}}}]"


def nodepool(
    name: str = "default",
    *,
    labels: str = "{}",
    requirements: str = "[{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}]",
    expire: str = "720h",
    disruption: str = "{consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 30s}",
) -> str:
    return NODEPOOL.format(
        name=name, labels=labels, requirements=requirements, expire=expire, disruption=disruption
    )


def deployment(name: str = "app", replicas: object = 3, pod_spec: str = CONTAINERS) -> str:
    return DEPLOYMENT.format(name=name, replicas=replicas, pod_spec=pod_spec)


def container(resources: str) -> str:
    return f"containers: [{{name: c, image: x, resources: {resources}}}]"


def pod(spec: str, name: str = "p") -> str:
    return f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  {spec}\n"


def scenario(duration: str, steps: str, cloud: str = "") -> str:
    return (
        "apiVersion: karpy.dev/v1alpha1\nkind: Scenario\nmetadata: {name: trial}\nspec:\n"
        f"  duration: {duration}\n{cloud}  steps:\n"
        "    - {at: 0s, apply: {files: [ec2nodeclass.yaml, nodepool.yaml, app.yaml]}}\n"
        f"{steps}"
    )


class Workspace:
    """A scratch directory of trial inputs, each in a directory with the seed's EC2NodeClass."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.trials: list[Trial] = []
        self._count = 0

    def case(self, category: str, name: str) -> Path:
        self._count += 1
        directory = self.root / f"{self._count:03d}"
        directory.mkdir()
        (directory / "ec2nodeclass.yaml").write_text(EC2NODECLASS)
        directory.chmod(0o755)
        return directory

    def add(
        self,
        category: str,
        name: str,
        files: Mapping[str, str | bytes],
        *,
        invalid: bool = False,
        **kwargs: object,
    ) -> Path:
        """A trial of ``files`` (written beside the EC2NodeClass), run on the whole directory."""
        directory = self.case(category, name)
        for file_name, content in files.items():
            path = directory / file_name
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content)
        self.trials.append(Trial(category, name, (str(directory),), invalid=invalid, **kwargs))  # type: ignore[arg-type]
        return directory

    def add_paths(self, category: str, name: str, paths: list[Path | str], **kwargs: object) -> None:
        self.trials.append(Trial(category, name, tuple(str(path) for path in paths), **kwargs))  # type: ignore[arg-type]


def binary_trials(space: Workspace) -> None:
    rng = random.Random(29)
    for size in (16, 1000, 65536, 1_000_000):
        space.add("binary", f"random {size} bytes", {"random.yaml": rng.randbytes(size)})
    space.add("binary", "every byte value", {"bytes.yaml": bytes(range(256))})
    space.add("binary", "a NUL in YAML", {"nul.yaml": b"apiVersion: v1\nkind: Pod\x00\n"})
    space.add(
        "binary",
        "UTF-32 with its mark",
        {"utf32.yaml": codecs.BOM_UTF32_LE + "kind: Pod\n".encode("utf-32-le")},
    )
    space.add("binary", "UTF-16 without a mark", {"utf16.yaml": "kind: Pod\n".encode("utf-16-le")})
    space.add("binary", "Latin-1 text", {"latin1.yaml": "metadata: {name: caf\xe9}\n".encode("latin-1")})
    space.add("binary", "a broken UTF-16 mark", {"bad16.yaml": codecs.BOM_UTF16_LE + b"\x00\xd8"})
    space.add("binary", "an executable", {"exe.yaml": Path(sys.executable).resolve().read_bytes()[:200_000]})
    space.add("binary", "gzip data", {"manifest.yaml": b"\x1f\x8b\x08\x00" + rng.randbytes(5000)})
    space.add("binary", "control characters", {"ctl.yaml": "kind: Pod\nmetadata: {name: \x07\x1b}\n"})
    space.add(
        "binary",
        "a CSV load trace of bytes",
        {
            "trace.csv": rng.randbytes(3000),
            "nodepool.yaml": nodepool(),
            "app.yaml": deployment(),
            "scenario.yaml": scenario(
                "1h",
                "",
                "  load:\n    - {kind: Deployment, name: app, cpu: {csv: {file: trace.csv}}}\n",
            ),
        },
        invalid=True,
    )
    for _ in range(6):
        text = deployment()
        cut = rng.randrange(len(text))
        space.add(
            "binary",
            f"a manifest with random bytes at {cut}",
            {
                "nodepool.yaml": nodepool(),
                "app.yaml": text[:cut].encode() + rng.randbytes(8) + text[cut:].encode(),
            },
        )


def special_trials(space: Workspace, root_user: bool) -> None:
    for device in ("/dev/zero", "/dev/urandom", "/dev/null"):
        space.add_paths("special", f"{device} named", [device])
        directory = space.add(
            "special", f"a *.yaml link to {device} in a directory", {"nodepool.yaml": nodepool()}
        )
        (directory / "device.yaml").symlink_to(device)
        directory = space.case("special", f"a link to {device} named")
        (directory / "device.yaml").symlink_to(device)
        space.add_paths("special", f"a link to {device} named", [directory / "device.yaml"])
    directory = space.add("special", "a FIFO in a directory", {"nodepool.yaml": nodepool()})
    os.mkfifo(directory / "pipe.yaml")
    space.add_paths("special", "a FIFO named", [directory / "pipe.yaml"])
    directory = space.add("special", "a socket in a directory", {"nodepool.yaml": nodepool()})
    with contextlib.suppress(OSError):
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(str(directory / "sock.yaml"))
        listener.close()
    directory = space.add("special", "a symbolic link loop in a directory", {"nodepool.yaml": nodepool()})
    (directory / "a.yaml").symlink_to(directory / "b.yaml")
    (directory / "b.yaml").symlink_to(directory / "a.yaml")
    space.add_paths("special", "a symbolic link loop named", [directory / "a.yaml"])
    directory = space.add("special", "a link to nothing in a directory", {"nodepool.yaml": nodepool()})
    (directory / "gone.yaml").symlink_to(directory / "missing.yaml")
    space.add_paths("special", "a link to nothing named", [directory / "gone.yaml"])
    directory = space.case("special", "a file name of 300 characters")
    space.add_paths("special", "a file name of 300 characters", [directory / ("x" * 300 + ".yaml")])
    space.add_paths("special", "a directory name of 300 characters", [directory / ("d" * 300)])
    space.add_paths("special", "a path of 5,000 characters", [directory / "/".join(["abcdefgh"] * 550)])
    directory = space.add("special", "a path through a regular file", {"nodepool.yaml": nodepool()})
    space.add_paths("special", "a path through a regular file", [directory / "nodepool.yaml" / "x.yaml"])
    directory = space.add("special", "a directory named *.yaml", {"nodepool.yaml": nodepool()})
    (directory / "sub.yaml").mkdir()
    (directory / "sub.yaml" / "app.yaml").write_text(deployment())
    directory = space.add("special", "a directory without read permission", {"nodepool.yaml": nodepool()})
    locked = directory / "locked"
    locked.mkdir()
    (locked / "app.yaml").write_text(deployment())
    locked.chmod(0)
    space.add_paths("special", "a directory without read permission", [locked], as_nobody=root_user)
    space.add_paths(
        "special", "a file in a directory without permission", [locked / "app.yaml"], as_nobody=root_user
    )
    directory = space.add(
        "special", "a file without read permission", {"nodepool.yaml": nodepool()}, as_nobody=root_user
    )
    (directory / "secret.yaml").write_text(deployment())
    (directory / "secret.yaml").chmod(0)
    space.add_paths("special", "a path that does not exist", [space.root / "nowhere.yaml"])
    space.add_paths("special", "an empty path", [""])


def size_trials(space: Workspace) -> None:
    for replicas in (
        "1000000",
        "1000000000",
        "2147483647",
        "2147483648",
        "3000000000",
        "-1",
        "1e9",
        "99999999999999999999",
    ):
        invalid = replicas in ("2147483648", "3000000000", "-1", "1e9", "99999999999999999999")
        space.add(
            "sizes",
            f"replicas {replicas}",
            {"nodepool.yaml": nodepool(), "app.yaml": deployment(replicas=replicas)},
            invalid=invalid,
        )
    for replicas in ("1000000", "3000000000"):
        space.add(
            "sizes",
            f"a scale step to {replicas}",
            {
                "nodepool.yaml": nodepool(),
                "app.yaml": deployment(),
                "scenario.yaml": scenario(
                    "2h", f"    - {{at: 10m, scale: {{kind: Deployment, name: app, replicas: {replicas}}}}}\n"
                ),
            },
            invalid=replicas == "3000000000",
        )
    space.add(
        "sizes",
        "a Job of a million completions",
        {
            "nodepool.yaml": nodepool(),
            "job.yaml": "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\n"
            "spec:\n  completions: 1000000\n"
            "  parallelism: 1000000\n  template:\n    spec:\n      restartPolicy: Never\n      "
            + CONTAINERS
            + "\n",
        },
    )
    space.add(
        "sizes",
        "an HPA up to a million",
        {
            "nodepool.yaml": nodepool(),
            "app.yaml": deployment(),
            "hpa.yaml": "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\n"
            "metadata: {name: h}\nspec:\n"
            "  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: app}\n"
            "  minReplicas: 1\n  maxReplicas: 1000000\n"
            "  metrics: [{type: Resource, resource: {name: cpu,"
            " target: {type: Utilization, averageUtilization: 50}}}]\n",
        },
    )
    for duration, late in (("87600000h", "87000000h"), ("87600000h", "1000000h"), ("1000000h", "900000h")):
        for expire in ("Never", "720h"):
            space.add(
                "sizes",
                f"duration {duration}, a step at {late}, expireAfter {expire}",
                {
                    "nodepool.yaml": nodepool(expire=expire),
                    "app.yaml": deployment(),
                    "scenario.yaml": scenario(
                        duration, f"    - {{at: {late}, delete: {{kind: Deployment, name: app}}}}\n"
                    ),
                },
            )
    space.add(
        "sizes",
        "--duration 87600000h with nothing to do",
        {"nodepool.yaml": nodepool(expire="Never"), "app.yaml": deployment()},
        extra=("--duration", "87600000h", "--no-stop-when-steady"),
    )
    pools = "---\n".join(nodepool(f"pool-{index}") for index in range(10_000))
    space.add("sizes", "10,000 NodePools", {"pools.yaml": pools, "app.yaml": deployment()})
    space.add(
        "sizes",
        "1,000 NodePools",
        {
            "pools.yaml": "---\n".join(nodepool(f"pool-{index}") for index in range(1000)),
            "app.yaml": deployment(),
        },
    )
    small = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{0}, labels: {{app: x}}}}\ndata: {{k: v{0}}}\n"
    )
    documents: list[str] = []
    size = 0
    while size < 8 * 1024 * 1024 - 200:
        documents.append(small.format(len(documents)))
        size += len(documents[-1]) + 4
    space.add(
        "sizes",
        f"{len(documents):,} small documents in one file",
        {"many.yaml": "---\n".join(documents), "nodepool.yaml": nodepool()},
    )
    space.add(
        "sizes",
        "240,000 small documents (50 MB)",
        {"many.yaml": "---\n".join(small.format(index) for index in range(240_000)) * 1},
    )
    space.add(
        "sizes", "a 9 MiB file", {"big.yaml": "# padding\n" * (900 * 1024), "nodepool.yaml": nodepool()}
    )
    space.add(
        "sizes",
        "a 4 MiB document",
        {
            "big.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big}\ndata: {x: "
            + "a" * (4 * 1024 * 1024)
            + "}\n",
            "nodepool.yaml": nodepool(),
        },
        invalid=True,
    )
    space.add(
        "sizes",
        "a 2 MiB scalar",
        {
            "big.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big}\ndata: {x: "
            + "a" * (2 * 1024 * 1024)
            + "}\n",
            "nodepool.yaml": nodepool(),
        },
    )
    space.add(
        "sizes",
        "200 files",
        {f"app-{index}.yaml": deployment(f"app-{index}", 1) for index in range(200)}
        | {"nodepool.yaml": nodepool()},
    )
    for depth in (300, 10_000, 1_000_000):
        space.add("sizes", f"nesting {depth} deep", {"deep.yaml": "[" * depth + "]" * depth})
    laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + level)}: &{chr(98 + level)} [{', '.join(['*' + chr(97 + level)] * 10)}]\n"
        for level in range(9)
    )
    space.add("sizes", "a billion laughs", {"laughs.yaml": laughs})
    space.add("sizes", "a 5 MiB line of one key", {"long.yaml": "k" * (5 * 1024 * 1024) + ": v\n"})


INVALID_POOLS = {
    "budget nodes as an integer": {
        "disruption": "{consolidationPolicy: WhenEmpty, consolidateAfter: 30s, budgets: [{nodes: 5}]}"
    },
    "51 budgets": {
        "disruption": "{consolidationPolicy: WhenEmpty, consolidateAfter: 30s, budgets: ["
        + ", ".join(['{nodes: "1"}'] * 51)
        + "]}"
    },
    "consolidateAfter 1.5h": {"disruption": "{consolidationPolicy: WhenEmpty, consolidateAfter: 1.5h}"},
    "consolidateAfter 5ms": {"disruption": "{consolidationPolicy: WhenEmpty, consolidateAfter: 5ms}"},
    "101 requirements": {
        "requirements": "["
        + ", ".join(f"{{key: example.com/k{i}, operator: Exists}}" for i in range(101))
        + "]"
    },
    "an integer label value": {"labels": "{team: 5}"},
    "requirement key bad key!": {"requirements": "[{key: 'bad key!', operator: Exists}]"},
    "a 64-character label name": {"labels": "{example.com/" + "a" * 64 + ": x}"},
    "expireAfter beyond Go's durations": {"expire": "3000000h"},
}


def invalid_trials(space: Workspace) -> None:
    for name, fields in INVALID_POOLS.items():
        space.add(
            "invalid",
            f"NodePool: {name}",
            {"nodepool.yaml": nodepool(**fields), "app.yaml": deployment()},
            invalid=True,
        )
    space.add(
        "invalid",
        "NodePool: a 64-character name",
        {"nodepool.yaml": nodepool("n" * 64), "app.yaml": deployment()},
        invalid=True,
    )
    space.add(
        "invalid",
        "NodePool: evictionHard 200%",
        {
            "nodepool.yaml": nodepool().replace(
                "      expireAfter:",
                "      kubelet: {evictionHard: {memory.available: 200%}}\n      expireAfter:",
            ),
            "app.yaml": deployment(),
        },
        invalid=True,
    )
    pods = {
        "duplicate container names": "containers: [{name: c, image: x}, {name: c, image: x}]",
        "a container without a name": "containers: [{image: x}]",
        "no containers": "containers: []",
        "requests above limits": container("{requests: {cpu: 2}, limits: {cpu: 1}}"),
        "hugepages without limits": container("{requests: {hugepages-2Mi: 2Mi, cpu: 1}}"),
        "a fractional extended resource": container(
            "{requests: {example.com/gpu: 500m}, limits: {example.com/gpu: 500m}}"
        ),
        "unequal extended resources": container(
            "{requests: {example.com/gpu: 1}, limits: {example.com/gpu: 2}}"
        ),
        "overhead without a RuntimeClass": f"overhead: {{cpu: 100m}}\n  {CONTAINERS}",
        "an Exists toleration with a value": "tolerations: [{key: k, operator: Exists, value: v}]\n  "
        + CONTAINERS,
        "minDomains with ScheduleAnyway": "topologySpreadConstraints: [{maxSkew: 1, minDomains: 2,"
        " topologyKey: zone,"
        f" whenUnsatisfiable: ScheduleAnyway, labelSelector: {{matchLabels: {{app: p}}}}}}]\n  {CONTAINERS}",
        "hostPort 70000": "containers: [{name: c, image: x, ports: [{containerPort: 80, hostPort: 70000}]}]",
        "priority beyond int32": f"priority: 3000000000\n  {CONTAINERS}",
        "a nodeSelector key bad key": f"nodeSelector: {{'bad key': x}}\n  {CONTAINERS}",
        "a PriorityClass that does not exist": f"priorityClassName: nowhere\n  {CONTAINERS}",
    }
    for name, spec in pods.items():
        space.add(
            "invalid", f"Pod: {name}", {"nodepool.yaml": nodepool(), "pod.yaml": pod(spec)}, invalid=True
        )
    space.add(
        "invalid",
        "Pod: a YAML 1.1 on label",
        {
            "nodepool.yaml": nodepool(),
            "pod.yaml": "apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {enabled: on}}\nspec:\n  "
            + CONTAINERS
            + "\n",
        },
        invalid=True,
    )
    space.add(
        "invalid",
        "Pod: a null label key",
        {
            "nodepool.yaml": nodepool(),
            "pod.yaml": "apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {~: x}}\nspec:\n  "
            + CONTAINERS
            + "\n",
        },
        invalid=True,
    )
    space.add(
        "invalid",
        "Deployment: restartPolicy Never",
        {
            "nodepool.yaml": nodepool(),
            "app.yaml": deployment(pod_spec="restartPolicy: Never\n      " + CONTAINERS),
        },
        invalid=True,
    )
    space.add(
        "invalid",
        "Deployment: no selector",
        {
            "nodepool.yaml": nodepool(),
            "app.yaml": deployment().replace("  selector: {matchLabels: {app: app}}\n", ""),
        },
        invalid=True,
    )
    space.add(
        "invalid",
        "Job: restartPolicy Always",
        {
            "nodepool.yaml": nodepool(),
            "job.yaml": "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n"
            "  template:\n    spec:\n      restartPolicy: Always\n      " + CONTAINERS + "\n",
        },
        invalid=True,
    )
    bad_manifests = (
        nodepool("bad")
        .replace("  limits:", "  weight: 0\n  limits:")
        .replace("requirements:", "requirments:")
    )
    space.add(
        "invalid",
        "Scenario: bad objects beside it in its file",
        {
            "nodepool.yaml": nodepool(),
            "app.yaml": deployment(),
            "scenario.yaml": scenario("1h", "")
            + "---\n"
            + bad_manifests
            + "---\n"
            + deployment("typo").replace("requests", "requets")
            + "---\n[not yaml\n",
        },
        invalid=True,
    )
    for name, text in {
        "duration forever": scenario("forever", ""),
        "a misspelt step kind": scenario(
            "1h", "    - {at: 5m, scael: {kind: Deployment, name: app, replicas: 1}}\n"
        ),
        "three errors": scenario(
            "forever", "    - {at: -5m, scale: {kind: Deployment, name: app, replicas: -1}}\n"
        ),
        "capacityFailures until before from": scenario(
            "1h", "", "  cloud:\n    capacityFailures: [{from: 30m, until: 10m}]\n"
        ),
        "a node group of an unknown type": scenario("1h", "").replace(
            "  steps:",
            "  clusterAutoscaler:\n    nodeGroups: [{name: g, instanceTypes: [z99.mega], maxSize: 3}]\n"
            "  steps:",
        ),
    }.items():
        space.add(
            "invalid",
            f"Scenario: {name}",
            {"nodepool.yaml": nodepool(), "app.yaml": deployment(), "scenario.yaml": text},
            invalid=True,
        )


def build(root: Path, categories: tuple[str, ...]) -> list[Trial]:
    space = Workspace(root)
    root_user = os.geteuid() == 0
    makers: dict[str, Callable[[], None]] = {
        "binary": lambda: binary_trials(space),
        "special": lambda: special_trials(space, root_user),
        "sizes": lambda: size_trials(space),
        "invalid": lambda: invalid_trials(space),
    }
    for category in categories:
        makers[category]()
    return space.trials


# -- running and counting --------------------------------------------------------------------------


@dataclass(slots=True)
class Tally:
    runs: int = 0
    tracebacks: int = 0
    exits: dict[str, int] = field(default_factory=dict)
    accepted_invalid: int = 0
    over_1gb: int = 0
    silent: int = 0
    killed: int = 0
    peak_rss: int = 0
    longest: float = 0.0
    examples: list[str] = field(default_factory=list)

    def add(self, trial: Trial, command: str, outcome: Outcome) -> None:
        self.runs += 1
        code = "killed" if outcome.code is None else str(outcome.code)
        self.exits[code] = self.exits.get(code, 0) + 1
        self.peak_rss = max(self.peak_rss, outcome.peak_rss)
        self.longest = max(self.longest, outcome.seconds)
        problems = []
        if outcome.traceback:
            self.tracebacks += 1
            problems.append("traceback")
        if trial.invalid and command != "convert" and outcome.code == 0:
            self.accepted_invalid += 1
            problems.append("accepted")
        if outcome.peak_rss > GB:
            self.over_1gb += 1
            problems.append(f"{outcome.peak_rss / GB:.2f} GB")
        if outcome.silent_for_a_minute:
            self.silent += 1
            problems.append(f"silent for {outcome.longest_silence:.0f} s")
        if outcome.code is None:
            self.killed += 1  # still working (and saying so) at the time limit: not a failure by itself
            problems.append(f"killed at the time limit, {outcome.seconds:.0f} s")
        if problems:
            self.examples.append(f"{trial.name} ({', '.join(problems)})")


@contextlib.contextmanager
def workspace() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="karpy-trials-"))
    root.chmod(0o755)  # an unprivileged user's runs read it too
    try:
        yield root
    finally:
        for path in root.rglob("*"):
            with contextlib.suppress(OSError):
                if not path.is_symlink() and path.is_dir():
                    path.chmod(stat.S_IRWXU)
                elif not path.is_symlink():
                    path.chmod(stat.S_IRUSR | stat.S_IWUSR)
        shutil.rmtree(root, ignore_errors=True)


def run_trials(
    trials: list[Trial], commands: tuple[str, ...], jobs: int, progress: Callable[[str], None]
) -> dict[tuple[str, str], Tally]:
    tallies: dict[tuple[str, str], Tally] = {}
    work = [(trial, command) for trial in trials for command in commands]

    def one(item: tuple[Trial, str]) -> tuple[Trial, str, Outcome]:
        trial, command = item
        user = NOBODY if trial.as_nobody else None
        return trial, command, run_capped(karpy_argv(command, trial), ROOT, user=user)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for done, (trial, command, outcome) in enumerate(pool.map(one, work), start=1):
            tallies.setdefault((trial.category, command), Tally()).add(trial, command, outcome)
            progress(
                f"[{done}/{len(work)}] {command} {trial.category}: {trial.name}: exit {outcome.code},"
                f" {outcome.seconds:.1f} s, {outcome.peak_rss / 1e6:.0f} MB"
            )
    return tallies


def report(tallies: dict[tuple[str, str], Tally]) -> str:
    header = (
        f"{'category':<9} {'command':<9} {'runs':>5} {'trace':>6} {'accept':>7} {'>1GB':>5} {'silent':>7}"
        f" {'killed':>7} {'peak MB':>8} {'max s':>6}  exit codes"
    )
    lines = [header, "-" * len(header)]
    for (category, command), tally in sorted(
        tallies.items(), key=lambda item: (CATEGORIES.index(item[0][0]), item[0][1])
    ):
        exits = ", ".join(f"{code}: {count}" for code, count in sorted(tally.exits.items()))
        lines.append(
            f"{category:<9} {command:<9} {tally.runs:>5} {tally.tracebacks:>6} {tally.accepted_invalid:>7}"
            f" {tally.over_1gb:>5} {tally.silent:>7} {tally.killed:>7} {tally.peak_rss / 1e6:>8.0f}"
            f" {tally.longest:>6.1f}  {exits}"
        )
    for (category, command), tally in sorted(tallies.items()):
        for example in tally.examples:
            lines.append(f"  {category}/{command}: {example}")
    return "\n".join(lines)


def failed(tallies: dict[tuple[str, str], Tally]) -> bool:
    return any(t.tracebacks or t.accepted_invalid or t.over_1gb or t.silent for t in tallies.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--only", choices=CATEGORIES, action="append", help="a category (repeatable)")
    parser.add_argument("--command", choices=COMMANDS, action="append", help="a command (repeatable)")
    parser.add_argument("--jobs", "-j", type=int, default=2)
    parser.add_argument("--quiet", "-q", action="store_true", help="no line per run")
    args = parser.parse_args(argv)
    categories = tuple(args.only or CATEGORIES)
    commands = tuple(args.command or COMMANDS)
    with workspace() as root:
        trials = build(root, categories)
        print(f"{len(trials)} inputs x {len(commands)} commands", file=sys.stderr, flush=True)
        tallies = run_trials(
            trials,
            commands,
            args.jobs,
            (lambda _: None) if args.quiet else lambda line: print(line, file=sys.stderr, flush=True),
        )
    print(report(tallies))
    return 1 if failed(tallies) else 0


if __name__ == "__main__":
    sys.exit(main())
