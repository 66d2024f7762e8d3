#!/usr/bin/env python3
"""What Karpenter's e2e suites read of Karpenter's install on kind, with ``karpy run`` behind it.

Some of Karpenter's specs configure Karpenter the way its own cluster
(``hack/kind``) runs it: they patch the env of the ``kube-system/karpenter``
Deployment (``ExpectSettingsOverridden``: ``SCHEDULER_CONFIG``), wait for its
rollout (a new Running, Ready pod with the ``restartedAt`` annotation) and for
a pod of ``app.kubernetes.io/instance=karpenter`` to hold the
``kube-system/karpenter-leader-election`` Lease; and they find kube-scheduler's
configuration by the path in the command of its mirror Pod
(``component=kube-scheduler``). ``scripts/karpenter-e2e`` runs karpy as a
process on a control plane of plain processes, so this gives the suites those
objects, each standing for what is really there:

- ``apply``: a control-plane Node (tainted, kept Ready by kwok as kind's is by
  its kubelet); kube-scheduler's mirror Pod on it, naming the configuration
  the plane's kube-scheduler really reads (only when it does, ``--scheduler-config``);
  and the ``karpenter`` Deployment, its container's env karpy's settings. The
  plane's kube-controller-manager rolls the Deployment out and kube-scheduler
  binds its pod to the Node, where kwok runs it.
- ``supervise``: the kubelet of that pod's one container. It runs ``karpy run``
  for the newest Running pod of the Deployment, with the env of the pod's
  container over the harness's, its hostname the pod's name (a UTS namespace
  of its own) and leader election on the Lease Karpenter's pod holds, so the
  holder is ``<pod>_<random>`` as Karpenter's. A new pod (a rollout) stops the
  old process (SIGTERM: karpy releases the Lease) and starts one for it. karpy
  exiting on its own ends the supervisor with an error, which the harness reports.

What it does not stand for: the pod's readiness is kwok's (Ready once bound,
not when karpy's probes pass), and its logs cannot be read through the API
(kwok has no kubelet to serve them); karpy's log is the harness's file.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

NAMESPACE = "kube-system"
DEPLOYMENT = "karpenter"
LEASE = "karpenter-leader-election"
INSTANCE_LABEL = "app.kubernetes.io/instance"
POD_LABELS = {INSTANCE_LABEL: "karpenter", "app.kubernetes.io/name": "karpenter"}
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
# Where Karpenter's hack/kind/cluster.yaml mounts the scheduler configuration; the specs look for it.
SCHEDULER_CONFIG_MOUNT = "/etc/kubernetes/karpenter-scheduler-config/kube-scheduler-config.yaml"
STOP_GRACE = 30.0


def kubectl(args: argparse.Namespace, *command: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        [args.kubectl, "--kubeconfig", args.kubeconfig, *command],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if result.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(command)}: {result.stderr.strip()}")
    return result.stdout


def manifests(node: str, env: dict[str, str], scheduler_config: bool) -> list[dict[str, Any]]:
    control_plane_toleration = {"key": CONTROL_PLANE_LABEL, "operator": "Exists", "effect": "NoSchedule"}
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": node,
                "annotations": {KWOK_ANNOTATION: "fake"},
                "labels": {
                    "kubernetes.io/hostname": node,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    CONTROL_PLANE_LABEL: "",
                },
            },
            "spec": {"taints": [{"key": CONTROL_PLANE_LABEL, "effect": "NoSchedule"}]},
            "status": {
                "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            },
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": DEPLOYMENT, "namespace": NAMESPACE, "labels": {INSTANCE_LABEL: "karpenter"}},
            "spec": {
                "replicas": 1,
                # One pod at a time, as Karpenter's chart with one replica: the old goes before the new.
                "strategy": {"type": "Recreate"},
                "selector": {
                    "matchLabels": {INSTANCE_LABEL: "karpenter", "app.kubernetes.io/name": "karpenter"}
                },
                "template": {
                    "metadata": {
                        "labels": {INSTANCE_LABEL: "karpenter", "app.kubernetes.io/name": "karpenter"}
                    },
                    "spec": {
                        "nodeSelector": {CONTROL_PLANE_LABEL: ""},
                        "tolerations": [control_plane_toleration],
                        "terminationGracePeriodSeconds": 1,
                        "containers": [
                            {
                                "name": "controller",
                                "image": "karpy:stand-in",
                                "env": [
                                    {"name": name, "value": value} for name, value in sorted(env.items())
                                ],
                            }
                        ],
                    },
                },
            },
        },
    ]
    if scheduler_config:
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"kube-scheduler-{node}",
                    "namespace": NAMESPACE,
                    "labels": {"component": "kube-scheduler", "tier": "control-plane"},
                },
                "spec": {
                    "nodeName": node,
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [
                        {
                            "name": "kube-scheduler",
                            "image": "registry.k8s.io/kube-scheduler",
                            "command": ["kube-scheduler", f"--config={SCHEDULER_CONFIG_MOUNT}"],
                        }
                    ],
                },
            }
        )
    return objects


def apply(args: argparse.Namespace) -> None:
    env = dict(item.split("=", 1) for item in args.env)
    # Made afresh: a spec that failed half-way may have left its env in the old one.
    kubectl(args, "delete", "deployment", DEPLOYMENT, "-n", NAMESPACE, "--ignore-not-found", "--wait=true")
    objects = manifests(args.node, env, args.scheduler_config)
    kubectl(
        args, "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    )


def running_pod(args: argparse.Namespace) -> dict[str, Any] | None:
    """The newest Running pod of the Deployment that is not being deleted."""
    listed = json.loads(
        kubectl(args, "get", "pods", "-n", NAMESPACE, "-l", f"{INSTANCE_LABEL}=karpenter", "-o", "json")
    )
    pods = [
        pod
        for pod in listed["items"]
        if not pod["metadata"].get("deletionTimestamp") and pod.get("status", {}).get("phase") == "Running"
    ]
    return max(pods, key=lambda pod: pod["metadata"]["creationTimestamp"], default=None)


def pod_env(pod: dict[str, Any]) -> dict[str, str]:
    (container,) = pod["spec"]["containers"]
    env: dict[str, str] = {}
    for item in container.get("env", []):
        if "valueFrom" in item:
            raise SystemExit(f"stand-in: env {item['name']} has valueFrom, which the stand-in cannot resolve")
        env[item["name"]] = item.get("value", "")
    return env


def start(args: argparse.Namespace, pod: dict[str, Any], log: Any) -> subprocess.Popen[bytes]:
    name = pod["metadata"]["name"]
    env = {**os.environ, **pod_env(pod)}
    command = [
        "unshare",
        "--uts",
        "sh",
        "-c",
        'hostname "$0" && exec "$@"',
        name,
        args.python,
        "-m",
        "karpy.cli",
        "run",
        "--kubeconfig",
        args.kubeconfig,
        "--leader-election-namespace",
        NAMESPACE,
        "--leader-election-name",
        LEASE,
    ]
    log.write(f"--- stand-in: karpy run as pod {name} ---\n".encode())
    log.flush()
    return subprocess.Popen(command, cwd=args.repo, env=env, stdout=log, stderr=subprocess.STDOUT)


def stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(STOP_GRACE)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def supervise(args: argparse.Namespace) -> int:
    stopping = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    process: subprocess.Popen[bytes] | None = None
    running_as = ""
    with Path(args.log).open("ab") as log:
        while not stopping:
            if process is not None and process.poll() is not None:
                print(f"stand-in: karpy run as {running_as} exited ({process.returncode})", file=sys.stderr)
                return 1
            try:
                pod = running_pod(args)
            except (RuntimeError, subprocess.TimeoutExpired) as error:
                print(f"stand-in: {error}", file=sys.stderr)
                pod = None
            name = pod["metadata"]["name"] if pod is not None else ""
            if pod is not None and name != running_as:
                if process is not None:
                    stop(process)
                process, running_as = start(args, pod, log), name
            time.sleep(1.0)
        if process is not None:
            stop(process)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kubectl", default="kubectl")
    parser.add_argument("--kubeconfig", required=True)
    commands = parser.add_subparsers(dest="command", required=True)
    applying = commands.add_parser(
        "apply", help="create the Node, the Deployment and kube-scheduler's mirror Pod"
    )
    applying.add_argument("--node", default="karpy-e2e-control-plane")
    applying.add_argument(
        "--env", action="append", default=[], help="NAME=VALUE of the Deployment's container"
    )
    applying.add_argument(
        "--scheduler-config",
        action="store_true",
        help="the plane's kube-scheduler reads Karpenter's configuration",
    )
    supervising = commands.add_parser("supervise", help="run karpy for the Deployment's pod")
    supervising.add_argument("--python", default=sys.executable)
    supervising.add_argument("--repo", default=str(Path(__file__).resolve().parent.parent))
    supervising.add_argument("--log", required=True)
    args = parser.parse_args()
    if args.command == "apply":
        apply(args)
        return 0
    return supervise(args)


if __name__ == "__main__":
    sys.exit(main())
