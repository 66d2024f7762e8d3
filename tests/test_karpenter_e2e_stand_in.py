"""The stand-in of Karpenter's install the e2e harness gives the suites (scripts/karpenter_e2e_stand_in.py).

What the specs read of it: the ``kube-system/karpenter`` Deployment with one
container whose env is karpy's settings, its pods labelled as Karpenter's chart
labels them and placed on the control-plane Node; kube-scheduler's mirror Pod
naming the configuration path the default spread specs look for, only when the
plane's kube-scheduler really reads that configuration; and the env the
supervisor runs karpy with, the pod's own.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "karpenter_e2e_stand_in.py"


def stand_in() -> ModuleType:
    spec = importlib.util.spec_from_file_location("karpenter_e2e_stand_in", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


def by_kind(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {obj["kind"]: obj for obj in objects}


def test_the_deployment_carries_karpys_settings_and_lands_on_the_control_plane_node() -> None:
    module = stand_in()
    objects = by_kind(module.manifests("cp", {"FEATURE_GATES": "NodeRepair=true"}, scheduler_config=False))
    assert set(objects) == {"Node", "Deployment"}
    deployment = objects["Deployment"]
    assert (deployment["metadata"]["namespace"], deployment["metadata"]["name"]) == (
        "kube-system",
        "karpenter",
    )
    template = deployment["spec"]["template"]
    assert template["metadata"]["labels"]["app.kubernetes.io/instance"] == "karpenter"
    (container,) = template["spec"]["containers"]
    assert container["env"] == [{"name": "FEATURE_GATES", "value": "NodeRepair=true"}]
    node = objects["Node"]
    assert node["metadata"]["annotations"] == {"kwok.x-k8s.io/node": "fake"}
    assert node["spec"]["taints"], "the suites' clean-cluster check wants every node it did not make tainted"
    assert set(template["spec"]["nodeSelector"]) <= set(node["metadata"]["labels"])


def test_the_scheduler_mirror_pod_names_the_path_the_specs_look_for_only_when_it_is_read() -> None:
    module = stand_in()
    objects = by_kind(module.manifests("cp", {}, scheduler_config=True))
    mirror = objects["Pod"]
    assert mirror["metadata"]["labels"]["component"] == "kube-scheduler"
    assert mirror["spec"]["nodeName"] == "cp"
    (container,) = mirror["spec"]["containers"]
    assert any(module.SCHEDULER_CONFIG_MOUNT in arg for arg in container["command"])
    assert "Pod" not in by_kind(module.manifests("cp", {}, scheduler_config=False))


def test_karpy_runs_with_the_pods_env_and_refuses_what_it_cannot_resolve() -> None:
    module = stand_in()
    pod = {
        "spec": {"containers": [{"env": [{"name": "SCHEDULER_CONFIG", "value": "podTopologySpread: {}"}]}]}
    }
    assert module.pod_env(pod) == {"SCHEDULER_CONFIG": "podTopologySpread: {}"}
    secret = {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
    with pytest.raises(SystemExit, match="TOKEN"):
        module.pod_env({"spec": {"containers": [{"env": [secret]}]}})
