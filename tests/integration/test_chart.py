"""The Helm chart on the real control plane: lint, render, server-side dry run, install, upgrade, uninstall.

Helm is the one ``scripts/control-plane build`` builds (``scripts/control-plane
helm`` prints its path), run with a home of its own under the test's temporary
directory. The control plane has no container runtime: the chart's pods are
created (so the API server admitted their spec) but never run. What the
container would run is checked instead by running ``karpy run`` here with the
installed Deployment's environment: it must accept every setting, take the
lease in the release's namespace and answer ``/readyz`` on the chart's probe
port.

One release is installed for the module (the slow part); the other checks
render only.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from karpy.api.crds import all_crds
from karpy.cli import _parser
from karpy.kube.leader import DEFAULT_LEASE_NAME, election_config
from karpy.settings import FeatureGates, run_options

from .conftest import REPO, SCRIPT, ControlPlane, wait_until
from .karpy_run import start_karpy_run
from .test_run_observability import free_port, get

pytestmark = pytest.mark.integration

CHART = REPO / "charts" / "karpy"
FULL_VALUES = REPO / "tests" / "data" / "chart-values-full.yaml"
RBAC_TEMPLATE = CHART / "templates" / "rbac.yaml"
RBAC_KINDS = {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
NAMESPACE = "it-chart"
RELEASE = "karpy-it"
APP_VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
# `karpy run`'s flags, none given: the settings come from the environment, as in the pod.
NO_FLAGS = _parser().parse_args(["run"])

Manifest = dict[str, Any]


@dataclass(frozen=True)
class Helm:
    path: str
    env: dict[str, str]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.path, *args], env=self.env, capture_output=True, text=True, timeout=180, check=False
        )

    def ok(self, *args: str) -> str:
        result = self.run(*args)
        if result.returncode != 0:
            pytest.fail(f"helm {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        return result.stdout

    def template(self, *args: str) -> list[Manifest]:
        text = self.ok("template", RELEASE, str(CHART), "--namespace", NAMESPACE, *args)
        return [document for document in yaml.safe_load_all(text) if document]


@pytest.fixture(scope="module")
def helm(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    found = subprocess.run([str(SCRIPT), "helm"], capture_output=True, text=True, check=False)
    if found.returncode != 0:
        pytest.fail("helm is not built: run scripts/control-plane build")
    home = tmp_path_factory.mktemp("helm-home")
    env = {
        **os.environ,
        "KUBECONFIG": str(control_plane.kubeconfig),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    return Helm(found.stdout.strip(), env)


@pytest.fixture(scope="module")
def chart_namespace(control_plane: ControlPlane, helm: Helm) -> Iterator[str]:
    """The release's namespace, enforcing the "restricted" Pod Security Standard on the pods created in it."""
    control_plane.kubectl("create", "namespace", NAMESPACE)
    control_plane.kubectl("label", "namespace", NAMESPACE, "pod-security.kubernetes.io/enforce=restricted")
    try:
        yield NAMESPACE
    finally:
        helm.run("uninstall", RELEASE, "--namespace", NAMESPACE, "--ignore-not-found")
        control_plane.kubectl("delete", "namespace", NAMESPACE, "--wait=false")


def by_kind(manifests: list[Manifest], kind: str) -> list[Manifest]:
    return [manifest for manifest in manifests if manifest["kind"] == kind]


def one(manifests: list[Manifest], kind: str) -> Manifest:
    (found,) = by_kind(manifests, kind)
    return found


def container_env(deployment: Manifest, namespace: str) -> dict[str, str]:
    """The controller's environment as the kubelet gives it (the pod's namespace resolved)."""
    container = deployment["spec"]["template"]["spec"]["containers"][0]  # karpy's, before any sidecar
    env: dict[str, str] = {}
    for variable in container["env"]:
        if "valueFrom" in variable:
            assert variable["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace", variable
            env[variable["name"]] = namespace
        else:  # the API server leaves out an empty value
            env[variable["name"]] = variable.get("value", "")
    return env


def test_helm_lint_is_clean_with_the_defaults_and_with_every_value_set(helm: Helm) -> None:
    helm.ok("lint", "--strict", str(CHART))
    helm.ok("lint", "--strict", str(CHART), "--values", str(FULL_VALUES))


def test_the_default_manifests(helm: Helm) -> None:
    manifests = helm.template()
    kinds = {manifest["kind"] for manifest in manifests}
    assert {"Deployment", "ServiceAccount", "PodDisruptionBudget", "Service"} <= kinds
    assert "ServiceMonitor" not in kinds
    assert kinds - {"Deployment", "ServiceAccount", "PodDisruptionBudget", "Service"} <= RBAC_KINDS
    deployment = one(manifests, "Deployment")
    selector = deployment["spec"]["selector"]["matchLabels"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert deployment["spec"]["replicas"] == 2
    assert (container["image"], container["args"]) == (f"karpy:{APP_VERSION}", ["run"])
    assert pod["serviceAccountName"] == one(manifests, "ServiceAccount")["metadata"]["name"] == RELEASE
    assert {port["name"]: port["containerPort"] for port in container["ports"]} == {
        "http-metrics": 8080,
        "http": 8081,
    }
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": 8081}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 8081}
    assert container["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert pod["securityContext"]["fsGroup"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"}]}
        ]
    }
    assert pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": selector}}
    ]
    assert pod["topologySpreadConstraints"] == [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": selector},
        }
    ]
    pdb = one(manifests, "PodDisruptionBudget")["spec"]
    assert pdb == {"maxUnavailable": 1, "selector": {"matchLabels": selector}}
    service = one(manifests, "Service")["spec"]
    assert service["selector"] == selector
    assert service["ports"] == [
        {"name": "http-metrics", "port": 8080, "targetPort": "http-metrics", "protocol": "TCP"}
    ]
    # What karpy run makes of the environment: its defaults, leader election in the release's namespace.
    env = container_env(deployment, NAMESPACE)
    options = run_options(NO_FLAGS, env)
    assert (options.cloud_provider, options.metrics_port, options.health_probe_port) == ("kwok", 8080, 8081)
    assert (options.batch_idle_duration, options.batch_max_duration) == (1.0, 10.0)
    assert options.feature_gates == FeatureGates(spot_to_spot_consolidation=True, static_capacity=True)
    election = election_config(disable=None, name=None, namespace=None, environ=env)
    assert election is not None
    assert (election.namespace, election.name) == (NAMESPACE, DEFAULT_LEASE_NAME)


def test_every_value_set(helm: Helm) -> None:
    manifests = helm.template("--values", str(FULL_VALUES))
    assert {manifest["kind"] for manifest in manifests} == {
        "Deployment",
        "ServiceAccount",
        "PodDisruptionBudget",
        "Service",
        "ServiceMonitor",
        "ConfigMap",
    }, "rbac.create=false makes no RBAC objects"
    for manifest in manifests:
        assert manifest["metadata"]["labels"]["team"] == "platform", manifest["kind"]
        assert manifest["metadata"]["annotations"]["owner"] == "platform@example.com", manifest["kind"]
    deployment = one(manifests, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container, sidecar = pod["containers"]
    assert (container["name"], sidecar["name"]) == ("karpy-controller", "proxy")
    assert sidecar["volumeMounts"] == [
        *container["volumeMounts"],
        {**container["volumeMounts"][0], "mountPath": "/proxy/token"},
    ]
    assert (pod["hostNetwork"], pod["schedulerName"]) == (True, "my-scheduler")
    assert [init["name"] for init in pod["initContainers"]] == ["wait-for-api"]
    assert deployment["metadata"]["name"] == "karpy-full"
    assert deployment["spec"]["replicas"] == 3
    assert container["image"] == (
        "registry.example.com/karpy:9.9.9@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    )
    assert (
        pod["serviceAccountName"]
        == one(manifests, "ServiceAccount")["metadata"]["name"]
        == "karpy-controller"
    )
    assert one(manifests, "ServiceAccount")["metadata"]["annotations"]["eks.amazonaws.com/role-arn"]
    assert one(manifests, "PodDisruptionBudget")["metadata"]["name"] == "karpy-pdb"
    assert one(manifests, "PodDisruptionBudget")["spec"]["maxUnavailable"] == "50%"
    assert container["livenessProbe"]["httpGet"]["port"] == 9091
    names = [variable["name"] for variable in container["env"]]
    assert names[-2:] == ["AWS_REGION", "KARPY_LOG_FORMAT"], (
        "controller.env comes after the chart's variables"
    )
    options = run_options(NO_FLAGS, container_env(deployment, NAMESPACE))
    assert (options.cloud_provider, options.cluster_name, options.interruption_queue) == (
        "aws",
        "my-k3s",
        "my-k3s-karpy",
    )
    assert (options.cluster_endpoint, options.metrics_port, options.health_probe_port) == (
        "https://10.0.0.10:6443",
        9090,
        9091,
    )
    assert (options.batch_idle_duration, options.batch_max_duration, options.log_format) == (
        2.0,
        30.0,
        "text",
    )
    assert options.feature_gates == FeatureGates(
        spot_to_spot_consolidation=False,
        capacity_buffer=True,
        static_capacity=False,
        node_repair=True,
        node_overlay=True,
        reserved_capacity=False,
        terminate_first_drift=True,
        terminate_first_repair=True,
    )
    monitor = one(manifests, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["endpoints"] == [
        {
            "port": "http-metrics",
            "path": "/metrics",
            "interval": "30s",
            "scrapeTimeout": "10s",
            "relabelings": [
                {
                    "action": "replace",
                    "sourceLabels": ["__meta_kubernetes_pod_node_name"],
                    "targetLabel": "node",
                }
            ],
            "metricRelabelings": [{"action": "drop", "sourceLabels": ["__name__"], "regex": "go_.*"}],
        }
    ]
    assert monitor["spec"]["sampleLimit"] == 5000
    assert monitor["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (("--set", "setings.clusterName=my-k3s"), "additional properties 'setings' not allowed"),
        (("--set", "replica=2"), "additional properties 'replica' not allowed"),
        (("--set", "settings.featureGates.drift=true"), "additional properties 'drift' not allowed"),
        (("--set", "logLevel=verbose"), "/logLevel"),
    ],
)
def test_a_typo_in_values_is_refused_naming_the_field(helm: Helm, flags: tuple[str, ...], named: str) -> None:
    result = helm.run("template", RELEASE, str(CHART), *flags)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    assert named in result.stderr, result.stderr


def test_the_rendered_manifests_pass_the_api_servers_validation(
    control_plane: ControlPlane, helm: Helm, chart_namespace: str
) -> None:
    """A server-side dry run: the API server's schemas and admission, nothing stored."""
    # The dashboards' namespace of the full values is not there: they go in the release's here.
    full = ("--values", str(FULL_VALUES), "--set", "serviceMonitor.enabled=false")
    for values in ((), (*full, "--set", f"dashboards.namespace={chart_namespace}")):
        rendered = helm.ok("template", RELEASE, str(CHART), "--namespace", chart_namespace, *values)
        applied = control_plane.kubectl("apply", "--dry-run=server", "-f", "-", stdin=rendered)
        assert "deployment.apps/" in applied and "(server dry run)" in applied, applied


def manifest_objects(helm: Helm) -> list[tuple[str, str, str]]:
    """(kind, name, namespace or "") of every object the release holds."""
    text = helm.ok("get", "manifest", RELEASE, "--namespace", NAMESPACE)
    return [
        (manifest["kind"], manifest["metadata"]["name"], manifest["metadata"].get("namespace", ""))
        for manifest in yaml.safe_load_all(text)
        if manifest
    ]


def exists(plane: ControlPlane, kind: str, name: str, namespace: str) -> bool:
    where = ["--namespace", namespace] if namespace else []
    found = plane.kubectl("get", kind, name, "--ignore-not-found", "-o", "name", *where)
    return bool(found.strip())


def test_install_upgrade_and_uninstall(
    control_plane: ControlPlane, helm: Helm, chart_namespace: str, tmp_path: Path
) -> None:
    crd_names = [crd["metadata"]["name"] for crd in all_crds()]
    absent_before = not control_plane.kubectl(
        "get", "crd", *crd_names, "--ignore-not-found", "-o", "name"
    ).strip()

    helm.ok("install", RELEASE, str(CHART), "--namespace", chart_namespace)

    # The CRDs of crds/, Established; made by Helm itself unless an earlier module had applied them.
    control_plane.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", *(f"crd/{n}" for n in crd_names)
    )
    if absent_before:
        for name in crd_names:
            crd = json.loads(control_plane.kubectl("get", "crd", name, "-o", "json", "--show-managed-fields"))
            assert "helm" in {entry["manager"] for entry in crd["metadata"]["managedFields"]}, name
    notes = helm.ok("get", "notes", RELEASE, "--namespace", chart_namespace)
    assert f"kubectl logs -n {chart_namespace} deploy/{RELEASE}" in notes, notes
    objects = manifest_objects(helm)
    kinds = {kind for kind, _, _ in objects}
    assert {"Deployment", "ServiceAccount", "PodDisruptionBudget", "Service"} <= kinds
    if RBAC_TEMPLATE.exists():
        assert kinds >= RBAC_KINDS, kinds
    for kind, name, namespace in objects:
        assert exists(control_plane, kind, name, namespace), (kind, name)
    deployment = json.loads(
        control_plane.kubectl("get", "deployment", RELEASE, "-n", chart_namespace, "-o", "json")
    )
    assert deployment["spec"]["replicas"] == 2
    selector = ",".join(
        f"{key}={value}" for key, value in deployment["spec"]["selector"]["matchLabels"].items()
    )

    def pods_created() -> list[dict[str, Any]] | None:
        pods = json.loads(
            control_plane.kubectl("get", "pods", "-n", chart_namespace, "-l", selector, "-o", "json")
        )
        items: list[dict[str, Any]] = pods["items"]
        return items if len(items) == 2 else None

    # The namespace refuses a pod that is not "restricted" (the check below can fail)...
    plain_pod = ("run", "plain", "--namespace", chart_namespace, "--image=pause", "--dry-run=server")
    refused = subprocess.run(
        [control_plane.kubectl_path, "--kubeconfig", str(control_plane.kubeconfig), *plain_pod],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode != 0 and "violates PodSecurity" in refused.stderr, refused
    # ...and the ReplicaSet's pods were admitted: restricted security contexts, priority class and all.
    for pod in wait_until(
        pods_created,
        timeout=60,
        what="the Deployment's two pods (refused ones show in the ReplicaSet's events)",
    ):
        assert pod["spec"]["priority"] > 1_000_000_000, "system-cluster-critical"
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True

    # What the container would run: karpy run with the installed Deployment's environment.
    env = container_env(deployment, chart_namespace)
    probe_port = free_port()
    env.update(
        METRICS_PORT=str(free_port()),
        HEALTH_PROBE_PORT=str(probe_port),
        KUBECONFIG=str(control_plane.kubeconfig),
    )
    karpy = start_karpy_run(control_plane, "chart", tmp_path, env=env)
    try:
        karpy.wait_for("controllers running", timeout=90)
        lease = json.loads(
            control_plane.kubectl("get", "lease", DEFAULT_LEASE_NAME, "-n", chart_namespace, "-o", "json")
        )
        assert lease["spec"]["holderIdentity"], lease
        assert get(probe_port, "/readyz") == (200, "ok\n")
        assert get(probe_port, "/healthz")[0] == 200
        karpy.signal(signal.SIGTERM)
        assert karpy.wait_exit(30) == 0, karpy.tail()
    finally:
        karpy.stop()

    # An upgrade with a changed value rolls it into the Deployment.
    helm.ok(
        "upgrade",
        RELEASE,
        str(CHART),
        "--namespace",
        chart_namespace,
        "--reuse-values",
        "--set",
        "logLevel=debug",
    )
    upgraded = json.loads(
        control_plane.kubectl("get", "deployment", RELEASE, "-n", chart_namespace, "-o", "json")
    )
    assert container_env(upgraded, chart_namespace)["LOG_LEVEL"] == "debug"
    # A typo is refused and leaves the release as it was.
    refused = helm.run(
        "upgrade", RELEASE, str(CHART), "--namespace", chart_namespace, "--reuse-values", "--set", "replica=3"
    )
    assert refused.returncode != 0 and "additional properties 'replica' not allowed" in refused.stderr
    status = json.loads(helm.ok("status", RELEASE, "--namespace", chart_namespace, "-o", "json"))
    assert (status["version"], status["info"]["status"]) == (2, "deployed")

    # Uninstall removes every object of the release; the CRDs stay, as Helm never deletes crds/.
    helm.ok("uninstall", RELEASE, "--namespace", chart_namespace, "--wait", "--timeout", "60s")

    def all_gone() -> bool:
        return not any(exists(control_plane, *found) for found in objects)

    wait_until(all_gone, timeout=60, what="the release's objects to go")
    assert control_plane.kubectl("get", "crd", *crd_names, "-o", "name").split() == [
        f"customresourcedefinition.apiextensions.k8s.io/{name}" for name in crd_names
    ]
