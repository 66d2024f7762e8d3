"""The container image's ``karpy run`` against the real control plane: what the chart's pod does.

``make image-test`` builds the image, then runs this module with ``KARPY_IMAGE`` naming it;
without that variable (a plain ``make test``, where no image is built) it is skipped. The
container is started by ``scripts/image run`` (podman, read-only root filesystem) with its
default entrypoint and command, so it runs as the image's non-root user, exactly
``karpy run``, configured through environment variables as the chart configures it. It
shares the host's network to reach the control plane on 127.0.0.1; the kubeconfig it reads is
a flattened copy (certificates inline) that the container's user may read.

It proves what the unit checks of the Dockerfile cannot: the locked environment in the image
talks to a real API server, provisions a kwok node for a pending pod, and stops cleanly on
SIGTERM as PID 1 (``podman stop``), releasing its leader lease.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import REPO, ControlPlane, wait_until
from .karpy_run import as_yaml, deployment, node_class, nodepool, remove_pools, running_pods

IMAGE = os.environ.get("KARPY_IMAGE", "")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not IMAGE, reason="KARPY_IMAGE names no image (make image-test builds one and sets it)"
    ),
]

POOL = "it-image"
APP = "image-probe"
CONTAINER = f"karpy-it-image-{os.getpid()}"


def podman(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, check=False)


def logs() -> str:
    result = podman("logs", CONTAINER)
    return result.stdout + result.stderr


@pytest.fixture
def karpy_in_image(crds: ControlPlane, tmp_path: Path) -> Iterator[ControlPlane]:
    """``karpy run`` in the image, as the image starts it; removed whatever happens."""
    kube = tmp_path / "kube"
    kube.mkdir()
    kube.chmod(0o755)
    config = kube / "config"
    config.write_text(crds.kubectl("config", "view", "--raw", "--flatten"))
    config.chmod(0o644)
    started = subprocess.run(
        [
            str(REPO / "scripts" / "image"),
            "run",
            "--detach",
            "--name",
            CONTAINER,
            "--network",
            "host",
            "--volume",
            f"{kube}:/kube:ro",
            "--env",
            "KUBECONFIG=/kube/config",
            # Free ports: the host's network is shared with whatever else runs here.
            "--env",
            "METRICS_PORT=0",
            "--env",
            "HEALTH_PROBE_PORT=0",
            IMAGE,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert started.returncode == 0, started.stderr
    try:
        wait_until(
            lambda: "controllers running" in logs(), timeout=60, what="karpy run in the image to start"
        )
        yield crds
    finally:
        podman("rm", "--force", CONTAINER)


def test_karpy_run_in_the_image_provisions_a_node_and_stops_on_sigterm(
    karpy_in_image: ControlPlane, namespace: str
) -> None:
    plane = karpy_in_image
    user = podman("exec", CONTAINER, "id", "-u").stdout.strip()
    assert user == "65532"

    plane.kubectl(
        "apply", "-f", "-", stdin=as_yaml(node_class(POOL), nodepool(POOL, ["c5.large", "m5.large"]))
    )
    plane.kubectl("apply", "-f", "-", stdin=as_yaml(deployment(POOL, namespace, APP, 1, cpu="500m")))
    pods = wait_until(
        lambda: running_pods(plane, namespace, APP) or None, timeout=60, what="the pod running on a kwok node"
    )
    node = plane.kubectl("get", "node", pods[0]["spec"]["nodeName"], "-o", "jsonpath={.spec.providerID}")
    assert node.startswith("kwok://")
    assert "created nodeclaim" in logs()

    plane.kubectl("delete", "deployment", APP, "-n", namespace)
    remove_pools(plane, POOL)

    stopped = podman("stop", "--time", "30", CONTAINER)
    assert stopped.returncode == 0, stopped.stderr
    state = podman("inspect", "--format", "{{.State.ExitCode}}", CONTAINER).stdout.strip()
    assert state == "0", logs()
    assert "released lease" in logs()
