"""CapacityBuffers in the simulator: the room they ask for is launched, kept, refilled and let go.

The same controllers as ``karpy run`` (:mod:`karpy.controllers.capacitybuffer`)
with the CapacityBuffer feature gate on; the shapes are those of Karpenter's
CapacityBuffer e2e specs (1-CPU chunks on 2-CPU nodes, so each chunk takes a node).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from tests.support import KWOK_NODE_CLASS, deployment_manifest, kwok_nodepool, load_objects

from karpy.api.capacitybuffer import CapacityBuffer
from karpy.api.conditions import find_condition
from karpy.cli import EXIT_OK, main
from karpy.sim.simulation import Simulation, SimulationSettings

TEMPLATE = """
apiVersion: v1
kind: PodTemplate
metadata: {name: buffer-template, namespace: default}
template:
  metadata: {labels: {app: buffer}}
  spec:
    containers: [{name: pause, image: pause, resources: {requests: {cpu: "1", memory: 512Mi}}}]
"""


def buffer_manifest(spec: str, name: str = "warm") -> str:
    return f"""
apiVersion: autoscaling.x-k8s.io/v1beta1
kind: CapacityBuffer
metadata: {{name: {name}, namespace: default}}
spec: {spec}
"""


def nodepool(extra_spec: str = "") -> str:
    return kwok_nodepool(
        extra_spec,
        disruption="consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 0s",
        instance_types=("c5.large",),  # 2 vCPUs: one 1-CPU chunk a node
    )


def simulation(*manifests: str, gate: bool = True) -> Simulation:
    sim = Simulation(SimulationSettings(capacity_buffers=gate))
    sim.apply(load_objects(KWOK_NODE_CLASS, *manifests))
    return sim


def buffer(sim: Simulation, name: str = "warm") -> CapacityBuffer:
    found = sim.cluster.capacity_buffer("default", name)
    assert found is not None
    return found


def condition(sim: Simulation, kind: str, name: str = "warm") -> tuple[str, str]:
    found = find_condition(buffer(sim, name).status.conditions, kind)
    assert found is not None, kind
    return found.status, found.reason


def claims(sim: Simulation) -> set[str]:
    return {claim.name for claim in sim.nodeclaims() if not claim.metadata.deleting}


def test_a_buffer_gets_its_room_and_consolidation_keeps_it_until_the_buffer_goes() -> None:
    sim = simulation(
        nodepool(), TEMPLATE, buffer_manifest("{podTemplateRef: {name: buffer-template}, replicas: 3}")
    )
    sim.run(120, until_steady=False)
    assert len(claims(sim)) == 3
    assert buffer(sim).status.replicas == 3
    assert buffer(sim).status.pod_template_ref == "buffer-template"
    assert condition(sim, "ReadyForProvisioning") == ("True", "Resolved")
    assert condition(sim, "Provisioning") == ("True", "FitsExistingCapacity")
    held = claims(sim)

    sim.run(1200, until_steady=False)  # consolidateAfter 0s: empty nodes would have gone at once
    assert claims(sim) == held
    assert not [
        e for e in sim.cluster.events if e.reason == "DisruptionBlocked" and "capacity-buffer" in e.message
    ]

    sim.cluster.delete(buffer(sim))
    sim.run(120, until_steady=False)
    assert claims(sim) == set()


def test_a_consumer_takes_the_room_and_the_buffer_refills() -> None:
    sim = simulation(
        nodepool(), TEMPLATE, buffer_manifest("{podTemplateRef: {name: buffer-template}, replicas: 2}")
    )
    sim.run(120, until_steady=False)
    before = claims(sim)
    assert len(before) == 2

    sim.apply(load_objects(deployment_manifest("consumer", replicas=1, cpu="1", memory="512Mi")))
    sim.run(180, until_steady=False)
    consumer = next(pod for pod in sim.pods() if pod.key.startswith("default/consumer-"))
    assert consumer.phase == "Running"
    assert len(claims(sim)) == 3 and before < claims(sim)
    assert condition(sim, "Provisioning") == ("True", "FitsExistingCapacity")


def test_nodepool_limits_cap_the_room_and_the_buffer_says_it_needs_more() -> None:
    sim = simulation(
        nodepool("  limits: {cpu: '4'}"),
        TEMPLATE,
        buffer_manifest("{podTemplateRef: {name: buffer-template}, replicas: 10}"),
    )
    sim.run(600, until_steady=False)
    assert len(claims(sim)) == 2
    assert condition(sim, "Provisioning") == ("False", "RequiresNewCapacity")
    # Virtual pods are never created, so nothing is told about them.
    assert not [e for e in sim.cluster.events if "capacity-buffer" in e.name]


def test_a_scalable_ref_percentage_follows_the_workload() -> None:
    sim = simulation(
        nodepool(),
        deployment_manifest("app", replicas=5, cpu="500m", memory="256Mi"),
        buffer_manifest("{scalableRef: {apiGroup: apps, kind: Deployment, name: app}, percentage: 20}"),
    )
    sim.run(120, until_steady=False)
    assert buffer(sim).status.replicas == 1
    assert buffer(sim).status.pod_template_ref == ""
    assert condition(sim, "Provisioning") == ("True", "FitsExistingCapacity")

    app = sim.cluster.scalable("Deployment", "default", "app")
    assert app is not None
    sim.cluster.update(dataclasses.replace(app, replicas=20))
    sim.run(120, until_steady=False)
    assert buffer(sim).status.replicas == 4


def test_a_buffer_naming_nothing_there_waits_not_ready_and_recovers() -> None:
    sim = simulation(
        nodepool(),
        buffer_manifest("{scalableRef: {apiGroup: apps, kind: Deployment, name: app}, replicas: 2}"),
    )
    sim.run(30, until_steady=False)
    assert condition(sim, "ReadyForProvisioning") == ("False", "ScalableRefNotFound")
    assert condition(sim, "Provisioning") == ("False", "NotReadyForProvisioning")
    assert claims(sim) == set()

    sim.apply(load_objects(deployment_manifest("app", replicas=1, cpu="1", memory="512Mi")))
    sim.run(120, until_steady=False)
    assert buffer(sim).status.replicas == 2
    assert condition(sim, "ReadyForProvisioning") == ("True", "Resolved")


def test_required_anti_affinity_spreads_the_chunks() -> None:
    template = TEMPLATE.replace(
        "    containers:",
        "    affinity:\n      podAntiAffinity:\n        requiredDuringSchedulingIgnoredDuringExecution:\n"
        "          - {labelSelector: {matchLabels: {app: buffer}}, topologyKey: kubernetes.io/hostname}\n"
        "    containers:",
    )
    pool = kwok_nodepool(
        disruption="consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 0s",
        instance_types=("c5.2xlarge",),  # 8 vCPUs: room for all three, were they not kept apart
    )
    sim = simulation(
        pool, template, buffer_manifest("{podTemplateRef: {name: buffer-template}, replicas: 3}")
    )
    sim.run(120, until_steady=False)
    assert len(claims(sim)) == 3


def test_without_the_feature_gate_buffers_are_ignored() -> None:
    sim = simulation(
        nodepool(),
        TEMPLATE,
        buffer_manifest("{podTemplateRef: {name: buffer-template}, replicas: 3}"),
        gate=False,
    )
    sim.run(120, until_steady=False)
    assert claims(sim) == set()
    assert buffer(sim).status.conditions == ()


def test_a_scenario_holding_a_buffer_keeps_its_room_until_a_step_deletes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifests = "\n---\n".join(
        (
            KWOK_NODE_CLASS,
            nodepool(),
            TEMPLATE,
            buffer_manifest("{podTemplateRef: {name: buffer-template}, replicas: 2}"),
        )
    )
    (tmp_path / "cluster.yaml").write_text(manifests)
    (tmp_path / "scenario.yaml").write_text(
        """
apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {name: warm}
spec:
  duration: 20m
  settings: {featureGates: CapacityBuffer=true}
  steps:
    - at: 0s
      apply: {files: [cluster.yaml]}
    - at: 10m
      delete: {kind: CapacityBuffer, namespace: default, name: warm}
"""
    )
    code = main(["simulate", "--output", "json", str(tmp_path / "scenario.yaml")])
    out = capsys.readouterr().out
    assert code == EXIT_OK
    claims = json.loads(out)["nodeclaims"]
    # Two nodes for nothing but the buffer, kept by consolidation (consolidateAfter 0s) for the
    # ten minutes the buffer stands, and removed once it is gone.
    assert len(claims) == 2
    assert all(claim["readyAt"] < 60 for claim in claims)
    assert all(600 < claim["deletedAt"] < 660 for claim in claims)
