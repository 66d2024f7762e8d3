"""The simulator with the cluster's default topology spread constraints (a Scenario's
``spec.settings.schedulerConfig``, karpy run's SCHEDULER_CONFIG).

Both sides use them, as on a cluster whose kube-scheduler profile has
``defaultConstraints``: provisioning plans a node per pod in as many zones,
and the stand-in kube-scheduler binds them so. Pods no Service or controller
selects are not defaulted and share a node.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml
from tests.support import KWOK_NODE_CLASS, load_objects, run_cli, simulate_json
from tests.support import deployment_manifest as deployment
from tests.support import kwok_nodepool as nodepool

from karpy.api.core import POD_RUNNING
from karpy.api.requirements import LABEL_ZONE
from karpy.api.schedulerconfig import parse_scheduler_config
from karpy.controllers.provisioning import ProvisioningSettings
from karpy.sim.scenario import parse_scenario
from karpy.sim.simulation import Simulation, SimulationSettings

DEFAULTS = """
podTopologySpread:
  defaultConstraints:
    - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule}
    - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule}
"""

BARE_PODS = "\n---\n".join(
    f"""
apiVersion: v1
kind: Pod
metadata: {{name: bare-{index}, namespace: default, labels: {{app: bare}}}}
spec:
  containers: [{{name: main, resources: {{requests: {{cpu: "1", memory: 1Gi}}}}}}]
"""
    for index in range(4)
)


def run(config: str | None, *texts: str, seconds: float = 3600) -> Simulation:
    settings = SimulationSettings(
        provisioning=ProvisioningSettings(scheduler_config=parse_scheduler_config(config or ""))
    )
    simulation = Simulation(settings)
    simulation.apply(load_objects(KWOK_NODE_CLASS, nodepool(instance_types=("m5.4xlarge",)), *texts))
    simulation.run(seconds)
    return simulation


def launched_zones(simulation: Simulation) -> list[str]:
    """The zones each NodeClaim provisioning created may be in, one entry a NodeClaim."""
    return sorted(
        ",".join(sorted(str(zone) for zone in claim.requirement_set().get(LABEL_ZONE).values))
        for claim in simulation.cluster.nodeclaims()
    )


def placement(simulation: Simulation, app: str) -> Counter[str]:
    pods = [pod for pod in simulation.pods() if pod.metadata.labels.get("app") == app]
    assert pods and all(pod.phase == POD_RUNNING for pod in pods)
    return Counter(pod.node_name for pod in pods)


def test_a_deployment_gets_a_node_per_pod_in_as_many_zones_by_the_defaults() -> None:
    # Its ReplicaSet is the selector. Planned before any node is up: a node per pod, a zone each.
    planned = run(DEFAULTS, deployment("web", replicas=4), seconds=20)
    assert len(set(launched_zones(planned))) == 4
    simulation = run(DEFAULTS, deployment("web", replicas=4))
    assert sum(placement(simulation, "web").values()) == 4
    assert not any(pod.spec.topology_spread_constraints for pod in simulation.pods()), "never written back"


def test_without_the_defaults_the_same_deployment_gets_one_node() -> None:
    assert len(launched_zones(run(None, deployment("web", replicas=4), seconds=20))) == 1
    assert sorted(placement(run(None, deployment("web", replicas=4)), "web").values()) == [4]


def test_pods_nothing_selects_are_not_defaulted() -> None:
    assert len(launched_zones(run(DEFAULTS, BARE_PODS, seconds=20))) == 1
    assert sorted(placement(run(DEFAULTS, BARE_PODS), "bare").values()) == [4]


def test_a_service_selecting_bare_pods_has_them_defaulted() -> None:
    service = """
apiVersion: v1
kind: Service
metadata: {name: bare, namespace: default}
spec: {selector: {app: bare}, ports: [{port: 80}]}
"""
    assert len(set(launched_zones(run(DEFAULTS, BARE_PODS, service, seconds=20)))) == 4
    assert sum(placement(run(DEFAULTS, BARE_PODS, service), "bare").values()) == 4


def scenario_document(scheduler_config: object) -> dict[str, object]:
    return {
        "apiVersion": "karpy.dev/v1alpha1",
        "kind": "Scenario",
        "metadata": {"name": "spread"},
        "spec": {"duration": "1h", "settings": {"schedulerConfig": scheduler_config}, "steps": []},
    }


def test_a_scenario_names_the_defaults_in_its_settings() -> None:
    scenario, errors = parse_scenario(scenario_document(yaml.safe_load(DEFAULTS)), "scenario.yaml", None)
    assert errors == []
    assert scenario.scheduler_config == parse_scheduler_config(DEFAULTS)
    as_text, errors = parse_scenario(scenario_document(DEFAULTS), "scenario.yaml", None)
    assert errors == [] and as_text.scheduler_config == scenario.scheduler_config
    refused = scenario_document("podTopologySpread: {defaultingType: List}")
    _, errors = parse_scenario(refused, "scenario.yaml", None)
    assert any('unknown field "podTopologySpread.defaultingType"' in error for error in errors)


def test_consolidation_keeps_the_spread_the_provisioner_gave() -> None:
    # A node per pod, a zone each; by CPU one node holds all four. Moving a pod to another zone's
    # node would break the zone spread the defaults ask for, and a new node in its zone costs as
    # much: consolidation, planning with the defaults, leaves the four nodes alone.
    simulation = run(DEFAULTS, deployment("web", replicas=4), seconds=3 * 3600)
    assert sorted(placement(simulation, "web").values()) == [1, 1, 1, 1]
    assert len(list(simulation.cluster.nodeclaims())) == 4
    disrupted = [event for event in simulation.cluster.events if event.reason == "DisruptionTerminating"]
    assert disrupted == []


def test_karpy_simulate_takes_the_defaults_from_a_scheduler_config_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``--scheduler-config FILE``: the document karpy run's SCHEDULER_CONFIG holds, read from a file."""
    manifests = tmp_path / "cluster.yaml"
    manifests.write_text(
        "\n---\n".join(
            [KWOK_NODE_CLASS, nodepool(instance_types=("m5.4xlarge",)), deployment("web", replicas=4)]
        )
    )
    config = tmp_path / "kube-scheduler.yaml"
    config.write_text(DEFAULTS)
    code, without, _ = simulate_json(capsys, str(manifests), "--duration", "1h")
    assert code == 0 and len(without["nodeclaims"]) == 1
    code, spread, _ = simulate_json(
        capsys, str(manifests), "--duration", "1h", "--scheduler-config", str(config)
    )
    assert code == 0 and len(spread["nodeclaims"]) == 4
    config.write_text("podTopologySpread: {defaultingType: Sometimes}\n")
    code, out, err = run_cli(capsys, "simulate", str(manifests), "--scheduler-config", str(config))
    assert code == 2 and out == ""
    assert err.startswith(f"karpy: --scheduler-config: {config}: ")
