"""Manifests written the way Karpenter's and Kubernetes' docs write them, run as a user runs them.

``tests/data/realworld/`` holds NodePools and EC2NodeClasses with every field
of Karpenter's concept pages (v1 and v1beta1, a GPU pool on Bottlerocket, a
Windows pool, the getting-started pool), workloads with what Kubernetes' docs
put in a pod spec (probes, volumes, init and sidecar containers, topology
spread, affinity), the workload kinds of its docs (a StatefulSet with claim
templates, Jobs, CronJobs, PriorityClasses, a Namespace, PDBs as
percentages), and what tools print: ``kubectl get -o yaml`` (a List with
status and managedFields) and ``helm template`` (``# Source:`` comments,
skipped kinds). A valid field refused, a traceback, or a pod left pending
that Karpenter would run is a defect, whatever the unit tests say.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml
from tests.support import DATA, run_cli, simulate_json

from karpy.api.core import Job, PersistentVolumeClaim, Pod
from karpy.api.manifest import IGNORED_KINDS
from karpy.api.requirements import LABEL_ZONE
from karpy.sim.scenario import load_inputs
from karpy.sim.simulation import Simulation

REALWORLD = DATA / "realworld"
EVERY_FIELD_V1 = REALWORLD / "nodepool-v1-every-field.yaml"
EVERY_FIELD_V1BETA1 = REALWORLD / "nodepool-v1beta1-every-field.yaml"
GPU = REALWORLD / "nodepool-gpu-bottlerocket.yaml"
WINDOWS = REALWORLD / "nodepool-windows.yaml"
WORKLOADS = REALWORLD / "workloads.yaml"
CAPACITY_SPREAD = REALWORLD / "nodepools-capacity-spread.yaml"
GENERAL_PURPOSE = REALWORLD / "nodepool-general-purpose.yaml"
BATCH = REALWORLD / "batch-workloads.yaml"
STATEFUL = REALWORLD / "stateful-workloads.yaml"
BATCH_AND_STATEFUL = REALWORLD / "scenario-batch-and-stateful.yaml"
KUBECTL_GET = REALWORLD / "kubectl-get-o-yaml.yaml"
HELM_RENDERED = REALWORLD / "helm-rendered.yaml"

VALID = [
    EVERY_FIELD_V1,
    EVERY_FIELD_V1BETA1,
    GPU,
    WORKLOADS,
    CAPACITY_SPREAD,
    GENERAL_PURPOSE,
    BATCH,
    STATEFUL,
    KUBECTL_GET,
    HELM_RENDERED,
    pytest.param(
        WINDOWS,
        marks=pytest.mark.xfail(
            strict=True, reason="the bundled catalog offers Linux only, so a Windows pool matches no type"
        ),
    ),
]


@pytest.mark.parametrize("path", VALID, ids=lambda path: path.name)
def test_every_file_validates_with_no_error(capsys: pytest.CaptureFixture[str], path: Path) -> None:
    code, out, err = run_cli(capsys, "validate", str(path))
    assert code == 0, err
    assert "error:" not in err and "Traceback" not in err
    assert out.count("ok: ") == len(objects_of(path))


def objects_of(path: Path) -> list[dict[str, object]]:
    """The objects of a manifest file karpy acts on: a List's items, not the kinds it skips."""
    objects = []
    for document in yaml.safe_load_all(path.read_text()):
        for item in document.get("items", []) if document and document["kind"] == "List" else [document]:
            if item and item["kind"] not in IGNORED_KINDS:
                objects.append(item)
    return objects


def test_the_every_field_pool_runs_the_documented_workloads(capsys: pytest.CaptureFixture[str]) -> None:
    code, result, err = simulate_json(capsys, str(EVERY_FIELD_V1), str(WORKLOADS))
    assert code == 0, err
    phases = {pod["name"]: (pod["phase"], pod["unschedulableReason"]) for pod in result["pods"]}
    web = [phase for name, phase in phases.items() if name.startswith("web-")]
    assert [phase for phase, _ in web] == ["Running"] * 4
    # The pool's taint is not tolerated by the GPU pod; that is its one reason.
    assert phases["gpu-pod"] == (
        "Pending",
        "NodePool default: the pod does not tolerate taint example.com/special-taint:NoSchedule",
    )


def test_the_gpu_pool_runs_its_gpu_pods(capsys: pytest.CaptureFixture[str]) -> None:
    code, result, err = simulate_json(capsys, str(GPU))
    assert code == 0, err
    assert [pod["phase"] for pod in result["pods"]] == ["Running", "Running"]
    assert all(name.startswith(("g", "p")) for name in result["summary"]["instanceTypes"])


def test_the_v1beta1_manifests_convert_to_v1_that_validates(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = run_cli(capsys, "convert", str(EVERY_FIELD_V1BETA1))
    assert code == 0, err
    converted = tmp_path / "converted.yaml"
    converted.write_text(out)
    code, validated, err = run_cli(capsys, "validate", "--strict", str(converted))
    assert code == 0, err
    assert validated.count("ok: ") == 3 and "note: " not in err


def test_the_on_demand_spot_split_puts_one_pod_in_five_on_demand(capsys: pytest.CaptureFixture[str]) -> None:
    code, result, err = simulate_json(capsys, str(CAPACITY_SPREAD))
    assert code == 0, err
    pools = {claim["node"]: claim["nodepool"] for claim in result["nodeclaims"]}
    placed = Counter(pools[pod["node"]] for pod in result["pods"])
    assert placed == {"on-demand": 2, "spot": 8}


def test_a_requirement_narrowed_to_one_domain_labels_the_node_for_kube_scheduler() -> None:
    # The spread's custom key is a requirement of each NodeClaim, narrowed by the scheduler to
    # one domain; as in Karpenter's launch, the NodeClaim and its Node carry it as a label, or
    # kube-scheduler would see no domain and refuse every node.
    scenario, problems = load_inputs([CAPACITY_SPREAD])
    assert problems.errors == []
    simulation = Simulation()
    simulation.run_scenario(scenario)
    for claim in simulation.nodeclaims():
        [value] = claim.requirement_set().get("capacity-spread").values
        assert claim.metadata.labels["capacity-spread"] == value
        node = simulation.cluster.node(claim.status.node_name)
        assert node is not None and node.metadata.labels["capacity-spread"] == value


def batch_and_stateful(until: float) -> Simulation:
    scenario, problems = load_inputs([BATCH_AND_STATEFUL])
    assert problems.errors == []
    scenario.duration = until
    simulation = Simulation()
    simulation.run_scenario(scenario)
    return simulation


def test_the_documented_workload_kinds_run_as_kubernetes_runs_them() -> None:
    simulation = batch_and_stateful(until=60)
    # The Priority admission plugin's values, a class named or the built-in default of 0.
    priorities = {pod.metadata.name.rsplit("-", 1)[0]: pod.spec.priority for pod in simulation.pods()}
    assert priorities["pi"] == 1_000_000 and priorities["indexed-job"] == 0
    simulation.run(2 * 3600 - 60, until_steady=False)

    def job(name: str) -> Job:
        found = simulation.cluster.get("Job", f"batch/{name}")
        assert isinstance(found, Job)
        return found

    # A Job without completions is done when its one pod is; the Indexed Job when all five are.
    assert job("pi").status.complete and job("pi").status.succeeded == 1
    assert job("indexed-job").status.complete and job("indexed-job").status.succeeded == 5
    # "*/5 * * * *" from 00:00: a Job at each 5 minutes after the CronJob's creation, none at 0;
    # "0 9 * * mon-fri" not before 09:00.
    fired = [
        event.time - simulation.clock.start
        for event in simulation.cluster.events
        if event.reason == "SuccessfulCreate"
    ]
    assert fired == [300.0 * fire for fire in range(1, 25)]
    # Each StatefulSet pod runs in the zone of its volume, wherever consolidation moved it.
    for ordinal in range(3):
        pod = simulation.cluster.pod("default", f"web-{ordinal}")
        volume_claim = simulation.cluster.persistent_volume_claim("default", f"www-web-{ordinal}")
        assert isinstance(pod, Pod) and isinstance(volume_claim, PersistentVolumeClaim)
        volume = simulation.cluster.persistent_volume(volume_claim.volume_name)
        node = simulation.cluster.node(pod.node_name)
        assert volume is not None and node is not None
        (term,) = volume.node_terms
        assert term.get(LABEL_ZONE).values == {node.metadata.labels[LABEL_ZONE]}
    # No node is kept for finished Jobs: each one left runs a pod that has not finished.
    for claim in simulation.cluster.nodeclaims():
        on_node = [pod for pod in simulation.pods() if pod.node_name == claim.status.node_name]
        assert any(not pod.is_terminal for pod in on_node), claim.name


def test_kubectl_get_and_helm_template_output_runs(capsys: pytest.CaptureFixture[str]) -> None:
    code, result, err = simulate_json(capsys, str(GENERAL_PURPOSE), str(KUBECTL_GET), str(HELM_RENDERED))
    assert code == 0, err
    assert "Traceback" not in err and result["errors"] == []
    running = [pod for pod in result["pods"] if pod["phase"] == "Running"]
    assert {pod["name"].rsplit("-", 2)[0] for pod in running} >= {"web", "release-web"}
