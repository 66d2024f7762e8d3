"""A real control plane for the integration tests, started once per test run.

``scripts/control-plane build`` (a no-op once the binaries are cached) and ``up``
start etcd, kube-apiserver, kube-scheduler and kube-controller-manager on
127.0.0.1 in a state dir of their own; a node agent runs beside them and keeps
kwok Nodes Ready: the fake kubelet (``python -m karpy.cloud.kwok.fake_kubelet``),
or, for a module that overrides ``control_plane`` with :data:`KWOK_AGENT`, the real
kwok (``scripts/kwok``). At the end, the agent is stopped and ``down`` stops exactly
the processes ``up`` started. Should this test process die before its teardown,
the watchdog that ``up`` starts (``KARPY_CONTROL_PLANE_OWNER``) stops everything,
the agent included.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest
from lightkube import ApiError, Client, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, ServiceAccount

from karpy.api.crds import all_crds, render_yaml

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "control-plane"
KWOK_SCRIPT = REPO / "scripts" / "kwok"
FAKE_KUBELET_MODULE = "karpy.cloud.kwok.fake_kubelet"
# What kwok logs once it has read its stages and starts watching the Nodes it manages.
KWOK_STARTED = "Watch nodes"

T = TypeVar("T")


@dataclass(frozen=True)
class ControlPlane:
    state_dir: Path
    env: dict[str, str]  # the environment of `scripts/control-plane env` (KUBECONFIG, ETCDCTL_ENDPOINTS...)
    kubectl_path: str

    @property
    def kubeconfig(self) -> Path:
        return Path(self.env["KUBECONFIG"])

    def client(self) -> Client:
        return Client(KubeConfig.from_file(self.kubeconfig), field_manager="karpy-tests")

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        """Run kubectl against the control plane; fail the test on a non-zero exit."""
        result = subprocess.run(
            [self.kubectl_path, "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if result.returncode != 0:
            pytest.fail(f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        return result.stdout

    def etcdctl(self, *args: str) -> str:
        result = subprocess.run(
            [self.env["KARPY_ETCDCTL"], *args],
            env={**os.environ, "ETCDCTL_ENDPOINTS": self.env["ETCDCTL_ENDPOINTS"]},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if result.returncode != 0:
            pytest.fail(f"etcdctl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        return result.stdout


def _script(command: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), command], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _parse_env(text: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("export ") and "=" in line:
            key, _, value = line.removeprefix("export ").partition("=")
            values[key] = value
    return values


def _kubectl_path() -> str:
    beside_python = Path(sys.executable).parent / "kubectl"
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which("kubectl")
    if found is None:
        pytest.fail("kubectl not found: `make env` installs it into .venv")
    return found


def _stop(process: subprocess.Popen[bytes], timeout: float = 10) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)


@dataclass(frozen=True)
class NodeAgent:
    """What keeps the kwok Nodes Ready and runs their pods: its command, and its "started" log line."""

    name: str
    command: Callable[[Path], list[str]]  # given the kubeconfig
    started: str
    pid_tag: str  # what `down` checks the recorded pid's command line for


FAKE_KUBELET_AGENT = NodeAgent(
    name="fake-kubelet",
    command=lambda kubeconfig: [sys.executable, "-m", FAKE_KUBELET_MODULE, "--kubeconfig", str(kubeconfig)],
    started="fake kubelet started",
    pid_tag=FAKE_KUBELET_MODULE,
)
KWOK_AGENT = NodeAgent(
    name="kwok",
    # `scripts/kwok run` execs the cached binary with karpy's node selector.
    command=lambda kubeconfig: ["env", f"KUBECONFIG={kubeconfig}", str(KWOK_SCRIPT), "run"],
    started=KWOK_STARTED,
    pid_tag="kwok",
)


def _wait_started(agent: NodeAgent, process: subprocess.Popen[bytes], log: Path, timeout: float = 30) -> None:
    """Wait for the agent's "started" line; fail with its log if it exits first."""
    deadline = time.monotonic() + timeout
    while agent.started not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() >= deadline:
            pytest.fail(f"{agent.name} did not start:\n{log.read_text(errors='replace')}")
        time.sleep(0.1)


def _build(config: pytest.Config) -> None:
    """Build the binaries unless cached; a cold build shows its progress on the terminal."""
    if subprocess.run([str(SCRIPT), "built"], check=False).returncode == 0:
        return
    capture = config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        build = subprocess.run([str(SCRIPT), "build"], check=False)
    if build.returncode != 0:
        pytest.fail("scripts/control-plane build failed (see its output above)")


def _build_kwok(config: pytest.Config) -> None:
    if subprocess.run([str(KWOK_SCRIPT), "built"], check=False).returncode == 0:
        return
    capture = config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        build = subprocess.run([str(KWOK_SCRIPT), "build"], check=False)
    if build.returncode != 0:
        pytest.fail("scripts/kwok build failed (see its output above)")


@pytest.fixture(scope="session")
def control_plane(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[ControlPlane]:
    with running_control_plane(tmp_path_factory, pytestconfig, FAKE_KUBELET_AGENT) as plane:
        yield plane


@contextlib.contextmanager
def running_control_plane(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config, agent: NodeAgent
) -> Iterator[ControlPlane]:
    _build(pytestconfig)
    if agent is KWOK_AGENT:
        _build_kwok(pytestconfig)

    state_dir = tmp_path_factory.mktemp("control-plane")
    logs_dir = tmp_path_factory.mktemp("control-plane-logs")
    env = {
        **os.environ,
        "KARPY_CONTROL_PLANE_DIR": str(state_dir),
        "KARPY_CONTROL_PLANE_OWNER": str(os.getpid()),
    }
    node_agent: subprocess.Popen[bytes] | None = None
    try:
        up = _script("up", env, timeout=300)
        if up.returncode != 0:
            # One more try in a fresh state dir: a start-up can lose a race for a port to
            # another process of the machine. A second failure is a real one.
            sys.stderr.write(f"scripts/control-plane up failed, trying once more:\n{up.stderr}\n")
            state_dir = tmp_path_factory.mktemp("control-plane-retry")
            env["KARPY_CONTROL_PLANE_DIR"] = str(state_dir)
            up = _script("up", env, timeout=300)
        if up.returncode != 0:
            pytest.fail(f"scripts/control-plane up failed:\n{up.stderr}")
        plane_env = _parse_env(_script("env", env, timeout=30).stdout)
        plane = ControlPlane(state_dir=state_dir, env=plane_env, kubectl_path=_kubectl_path())

        agent_log = state_dir / "logs" / f"{agent.name}.log"
        with agent_log.open("wb") as log:
            node_agent = subprocess.Popen(
                agent.command(plane.kubeconfig),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPO,
            )
        # `down` (and the watchdog) stop every process recorded in pids/.
        (state_dir / "pids" / agent.name).write_text(f"{node_agent.pid} {agent.pid_tag}\n")
        _wait_started(agent, node_agent, agent_log)
        yield plane
    finally:
        if node_agent is not None:
            _stop(node_agent)
        if (state_dir / "logs").is_dir():
            shutil.copytree(state_dir / "logs", logs_dir, dirs_exist_ok=True)
        down = _script("down", env, timeout=120)
        if down.returncode != 0:
            print(f"scripts/control-plane down failed:\n{down.stderr}", file=sys.stderr)


def wait_until(
    probe: Callable[[], T | None], *, timeout: float = 60, interval: float = 0.25, what: str = "condition"
) -> T:
    """Call ``probe`` until it returns something other than None (or False); return that."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


@pytest.fixture
def namespace(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace whose default ServiceAccount exists (pods can be created)."""
    name = "it-" + request.node.name.removeprefix("test_").replace("_", "-")[:40].rstrip("-")
    with control_plane.client() as client:
        client.create(Namespace(metadata=ObjectMeta(name=name)))

        def has_service_account() -> bool:
            try:
                client.get(ServiceAccount, "default", namespace=name)
            except ApiError:
                return False
            return True

        wait_until(has_service_account, timeout=30, what=f"ServiceAccount {name}/default")
        yield name
        client.delete(Namespace, name)


def install_crds(plane: ControlPlane) -> list[str]:
    """Apply karpy's CRDs (idempotent) and wait until they are Established; their names."""
    names = [crd["metadata"]["name"] for crd in all_crds()]
    plane.kubectl("apply", "-f", "-", stdin=render_yaml(all_crds()))
    plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", *(f"crd/{n}" for n in names))
    return names


@pytest.fixture(scope="module")
def crds(control_plane: ControlPlane) -> ControlPlane:
    """The control plane with karpy's CRDs installed (left installed for later modules)."""
    install_crds(control_plane)
    return control_plane
