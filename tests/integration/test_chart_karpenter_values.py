"""A values file written for Karpenter's chart, rendered by Helm into karpy's chart.

Every key of Karpenter's chart (tests/data/karpenter-chart-values.yaml) is set
alone to a value karpy does not take by default, and the chart must take it
(the rendered manifests change), refuse it with "karpy does not support KEY
(Karpenter: ...)", or install with "karpy ignores KEY (Karpenter: ...)" in the
release's notes; at the value karpy behaves as, it must do neither. Which of
the three a key gets is the chart's decision (karpy's values.yaml, or
charts/karpy/karpenter-keys.yaml); the key list is the data file's, so a key
of Karpenter's the chart has not decided fails here and in tests/test_chart.py.

Only Helm is needed (``scripts/control-plane build`` builds it), no cluster:
``helm template`` renders, ``helm install --dry-run=client`` also renders the
notes.
"""

from __future__ import annotations

import copy
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.test_chart import CHART, decision, karpenter_decisions, karpenter_keys

from karpy.cli import _parser
from karpy.settings import FeatureGates, run_options

from .conftest import SCRIPT

pytestmark = pytest.mark.integration

RELEASE = "karpy"
APP_VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
NAMESPACE = "karpy"
NO_FLAGS = _parser().parse_args(["run"])


@dataclass(frozen=True)
class Rendered:
    ok: bool
    stdout: str
    stderr: str

    @property
    def manifests(self) -> list[dict[str, Any]]:
        text = self.stdout.split("\nNOTES:\n")[0]
        if "\nMANIFEST:\n" in text:  # helm install --dry-run: the release, then its manifests
            text = text.split("\nMANIFEST:\n", 1)[1]
        return [document for document in yaml.safe_load_all(text) if document]

    @property
    def notes(self) -> str:
        return self.stdout.split("\nNOTES:\n", 1)[1] if "\nNOTES:\n" in self.stdout else ""


_RENDERED: dict[tuple[str, bool], Rendered] = {}


@dataclass(frozen=True)
class Helm:
    path: str
    env: dict[str, str]
    scratch: Path

    def render(self, values: dict[str, Any], *, notes: bool = False) -> Rendered:
        """The chart with ``values``: ``helm template``, or an install's dry run for its notes too."""
        text = yaml.safe_dump(values)
        if (text, notes) not in _RENDERED:  # most keys compare with the same baseline
            _RENDERED[text, notes] = self._render(text, notes)
        return _RENDERED[text, notes]

    def _render(self, text: str, notes: bool) -> Rendered:
        file = self.scratch / "values.yaml"
        file.write_text(text)
        command = ["install", "--dry-run=client"] if notes else ["template"]
        result = subprocess.run(
            [self.path, *command, RELEASE, str(CHART), "--namespace", NAMESPACE, "--values", str(file)],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return Rendered(result.returncode == 0, result.stdout, result.stderr)


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    found = subprocess.run([str(SCRIPT), "helm"], capture_output=True, text=True, check=False)
    if found.returncode != 0:
        pytest.fail("helm is not built: run scripts/control-plane build")
    home = tmp_path_factory.mktemp("helm-home")
    env = {
        **os.environ,
        "KUBECONFIG": str(home / "no-cluster"),  # a dry run on the client: no cluster is asked
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    return Helm(found.stdout.strip(), env, home)


def nested(path: list[str], value: Any, into: dict[str, Any] | None = None) -> dict[str, Any]:
    """A values file setting ``path`` to ``value`` (merged into ``into``)."""
    values = {} if into is None else into
    node = values
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = copy.deepcopy(value)
    return values


def merged(*layers: dict[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = {}

    def merge(into: dict[str, Any], layer: dict[str, Any]) -> None:
        for key, value in layer.items():
            if isinstance(value, dict) and isinstance(into.get(key), dict):
                merge(into[key], value)
            else:
                into[key] = copy.deepcopy(value)

    for layer in layers:
        merge(values, layer)
    return values


def refusal(key: str) -> str:
    return f"karpy does not support {key} (Karpenter: {karpenter_decisions()[key]['karpenter']})"


def warning(key: str) -> str:
    return f"karpy ignores {key} (Karpenter: {karpenter_decisions()[key]['karpenter']})"


def every_refusal_and_warning(rendered: Rendered) -> Iterator[str]:
    for key in karpenter_decisions():
        for sentence in (refusal(key), warning(key)):
            if sentence in rendered.stderr or sentence in rendered.notes:
                yield sentence


@pytest.mark.parametrize("entry", karpenter_keys(), ids=lambda entry: entry["key"])
def test_each_key_of_karpenters_chart_is_taken_refused_or_warned_about(
    helm: Helm, entry: dict[str, Any]
) -> None:
    key, also = entry["key"], entry.get("also", {})
    changed = merged(also, nested(entry["path"], entry["changed"]))
    kind = decision(key)
    if kind == "supported":
        before, after = helm.render(also), helm.render(changed)
        assert before.ok and after.ok, after.stderr
        assert after.manifests != before.manifests, f"{key}: {entry['changed']!r} changed nothing"
        return
    default = merged(also, nested(entry["path"], karpenter_decisions()[key]["default"]))
    if kind == "refused":
        refused = helm.render(changed)
        assert not refused.ok and refusal(key) in refused.stderr, refused.stderr
        assert "values don't meet the specifications of the schema" not in refused.stderr
        kept = helm.render(default)
        assert kept.ok and refusal(key) not in kept.stderr, kept.stderr
    else:
        assert kind == "ignored", key
        warned = helm.render(changed, notes=True)
        assert warned.ok, warned.stderr
        assert f"WARNING: {warning(key)}: " in warned.notes, warned.notes
        quiet = helm.render(default, notes=True)
        assert quiet.ok and "karpy ignores" not in quiet.notes, quiet.notes


def karpenter_values(field: str, *, removed_keys: bool) -> dict[str, Any]:
    """A values file for Karpenter's chart: every key at ``field`` ("default" or "changed")."""
    values: dict[str, Any] = {}
    for entry in karpenter_keys():
        if removed_keys or "release" not in entry:
            nested(entry["path"], entry[field], values)
    return values


def test_karpenters_default_values_install_karpy_with_karpys_image(helm: Helm) -> None:
    """`helm show values` of Karpenter's chart installs karpy, saying nothing but for the image."""
    values = karpenter_values("default", removed_keys=False)
    assert values["controller"]["image"]["repository"] == "public.ecr.aws/karpenter/controller"
    installed = helm.render(values, notes=True)
    assert installed.ok, installed.stderr
    assert list(every_refusal_and_warning(installed)) == []
    (deployment,) = [manifest for manifest in installed.manifests if manifest["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"karpy:{APP_VERSION}", (
        "Karpenter's controller image, tag and digest are not run"
    )
    assert (
        "WARNING: controller.image.repository public.ecr.aws/karpenter/controller is Karpenter's controller:"
        f" karpy runs its own image, karpy:{APP_VERSION}"
    ) in installed.notes
    environ = {variable["name"]: variable.get("value", "") for variable in container["env"]}
    # Karpenter's defaults for the gates both know: off.
    assert run_options(NO_FLAGS, environ).feature_gates == FeatureGates(
        spot_to_spot_consolidation=False, static_capacity=False
    )
    # A mirror of Karpenter's image is Karpenter's image too; karpy's own is kept.
    values["controller"]["image"] = {
        "repository": "123456789012.dkr.ecr.us-east-1.amazonaws.com/karpenter/controller"
    }
    assert f"image: karpy:{APP_VERSION}" in helm.render(values).stdout
    values["controller"]["image"] = {"repository": "registry.example.com/karpy", "tag": "1.2.3"}
    mirrored = helm.render(values, notes=True)
    assert "image: registry.example.com/karpy:1.2.3" in mirrored.stdout
    assert "Karpenter's controller" not in mirrored.notes


def test_the_defaults_of_earlier_karpenter_charts_install_karpy_as_they_say(helm: Helm) -> None:
    """An earlier v1 chart's different default (reservedCapacity: false before v1.6) is a value karpy
    honours: the gate goes off, with no warning (it was ignored with one before reservations)."""
    earlier = [entry for entry in karpenter_keys() if "earlier_default" in entry]
    assert [entry["key"] for entry in earlier] == ["settings.featureGates.reservedCapacity"]
    values = karpenter_values("default", removed_keys=False)
    for entry in earlier:
        nested(entry["path"], entry["earlier_default"], values)
    installed = helm.render(values, notes=True)
    assert installed.ok, installed.stderr
    assert list(every_refusal_and_warning(installed)) == []
    deployment = next(m for m in installed.manifests if m["kind"] == "Deployment")
    env = {
        e["name"]: e.get("value")
        for c in deployment["spec"]["template"]["spec"]["containers"]
        for e in c["env"]
    }
    assert "ReservedCapacity=false" in env["FEATURE_GATES"]


def test_every_refused_key_is_named_in_one_failure(helm: Helm) -> None:
    values = karpenter_values("changed", removed_keys=True)
    refused = helm.render(values)
    assert not refused.ok
    named = [key for key, entry in karpenter_decisions().items() if refusal(key) in refused.stderr]
    assert named == [key for key, entry in karpenter_decisions().items() if entry["decision"] == "refused"]
    assert (
        len(named) >= 5
    )  # a handful stays refused (the gates karpy has no behaviour for and settings without one)


def test_every_taken_and_ignored_key_at_once(helm: Helm) -> None:
    """A Karpenter values file with every key changed but the refused ones: karpy's manifests carry them."""
    values = karpenter_values("changed", removed_keys=True)
    for key, entry in karpenter_decisions().items():
        if entry["decision"] == "refused":
            nested(key.split("."), entry["default"], values)
    installed = helm.render(values, notes=True)
    assert installed.ok, installed.stderr
    ignored = [key for key, entry in karpenter_decisions().items() if entry["decision"] == "ignored"]
    assert [key for key in ignored if f"WARNING: {warning(key)}: " in installed.notes] == ignored
    by_kind = {manifest["kind"]: manifest for manifest in installed.manifests}
    assert set(by_kind) == {"Deployment", "PodDisruptionBudget", "Service", "ServiceMonitor"} | {
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    }, "serviceAccount.create: false makes no ServiceAccount"
    assert by_kind["ClusterRole"]["rules"][-1] == {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "verbs": ["get", "list"],
    }
    pod = by_kind["Deployment"]["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True
    assert pod["schedulerName"] == "my-scheduler"
    assert [container["name"] for container in pod["initContainers"]] == ["list-ec2-instances"]
    controller, sidecar = pod["containers"]
    assert (controller["name"], sidecar["name"]) == ("karpy-controller", "proxy")
    assert controller["securityContext"]["appArmorProfile"] == {"type": "RuntimeDefault"}
    assert controller["securityContext"]["seLinuxOptions"] == {"level": "s0:c123,c456"}
    assert controller["securityContext"]["seccompProfile"]["type"] == "Localhost"
    assert controller["volumeMounts"] == [{"name": "cache", "mountPath": "/cache"}]
    assert sidecar["volumeMounts"] == [
        {"name": "cache", "mountPath": "/cache"},
        {"name": "cache", "mountPath": "/sidecar-cache"},
    ]
    monitor = by_kind["ServiceMonitor"]["spec"]
    assert monitor["sampleLimit"] == 5000
    (endpoint,) = monitor["endpoints"]
    assert endpoint["relabelings"][0]["targetLabel"] == "node"
    assert endpoint["metricRelabelings"][0]["regex"] == "go_.*"
    assert endpoint["interval"] == "30s"
    options = run_options(
        NO_FLAGS, {variable["name"]: variable.get("value", "") for variable in controller["env"]}
    )
    assert (options.cluster_name, options.cluster_endpoint, options.interruption_queue) == (
        "my-k3s",
        "https://10.0.0.10:6443",
        "my-k3s-karpy",
    )
    assert (options.batch_idle_duration, options.batch_max_duration) == (2.0, 30.0)


def test_karpenters_empty_container_security_context_keeps_karpys(helm: Helm) -> None:
    """Karpenter's appArmorProfile, seLinuxOptions, seccompProfile at {}: "not set" (the API refuses {})."""
    values: dict[str, Any] = {
        "controller": {"securityContext": {"appArmorProfile": {}, "seLinuxOptions": {}, "seccompProfile": {}}}
    }
    rendered = helm.render(values)
    assert rendered.ok, rendered.stderr
    (deployment,) = [manifest for manifest in rendered.manifests if manifest["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "appArmorProfile" not in container["securityContext"]
    assert "seLinuxOptions" not in container["securityContext"]
    assert container["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


def test_additional_cluster_role_rules_join_karpys_cluster_role(helm: Helm) -> None:
    rule = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}
    rendered = helm.render({"additionalClusterRoleRules": [rule]})
    assert rendered.ok, rendered.stderr
    (role,) = [manifest for manifest in rendered.manifests if manifest["kind"] == "ClusterRole"]
    assert role["rules"][-1] == rule
    assert len(role["rules"]) > 1


@pytest.mark.parametrize("cluster_name", ["", "  "])
def test_aws_without_a_cluster_name_says_so_in_words(helm: Helm, cluster_name: str) -> None:
    refused = helm.render({"settings": {"cloudProvider": "aws", "clusterName": cluster_name}})
    assert not refused.ok
    assert (
        "settings.clusterName is required with settings.cloudProvider=aws:"
        " it tags every instance karpy launches" in refused.stderr
    ), refused.stderr
    assert "schema" not in refused.stderr
    assert helm.render({"settings": {"cloudProvider": "aws", "clusterName": "my-k3s"}}).ok
