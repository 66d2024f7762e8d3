"""Recognising Cluster Autoscaler node groups in a cluster, and the NodePools proposed in their place."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from tests.support import KWOK_NODE_CLASS, deployment_manifest, run_cli

from karpy import cli
from karpy.api.manifest import parse_manifests
from karpy.api.snapshot import ClusterSnapshot
from karpy.baselines.ca_migration import discover_groups, propose
from karpy.sim.ca_migration import (
    manifests_yaml,
    outcome,
    simulate_after,
    simulate_before,
    unknown_instance_types,
)
from karpy.sim.scenario import load_inputs
from karpy.sim.simulation import Simulation, SimulationSettings


def node(
    name: str, instance_type: str, zone: str, labels: str = "", taints: str = "", arch: str = "amd64"
) -> str:
    return f"""
apiVersion: v1
kind: Node
metadata:
  name: {name}
  labels:
    node.kubernetes.io/instance-type: {instance_type}
    topology.kubernetes.io/zone: {zone}
    kubernetes.io/arch: {arch}
    kubernetes.io/os: linux
    {labels}
spec:
  providerID: aws:///{zone}/i-{name}
  taints: [{taints}]
status:
  allocatable: {{cpu: "3920m", memory: 14Gi, pods: "58"}}
  capacity: {{cpu: "4", memory: 16Gi, pods: "58"}}
"""


def pod(name: str, node_name: str, cpu: str, spec: str = "") -> str:
    return f"""
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  nodeName: {node_name}
  containers: [{{name: main, resources: {{requests: {{cpu: "{cpu}", memory: 1Gi}}}}}}]
  {spec}
status: {{phase: Running}}
"""


def ca_cluster() -> ClusterSnapshot:
    """Two EKS managed node groups, one tainted for batch pods that select it, and a node of its own."""
    batch = "eks.amazonaws.com/nodegroup: batch\n    eks.amazonaws.com/capacityType: SPOT\n    team: batch"
    web = "eks.amazonaws.com/nodegroup: web\n    eks.amazonaws.com/capacityType: ON_DEMAND\n    tier: web"
    taint = "{key: team, value: batch, effect: NoSchedule}"
    manifests = [
        node("web-1", "m5.xlarge", "us-east-1a", web),
        node("web-2", "m5.xlarge", "us-east-1b", web),
        node("batch-1", "c5.xlarge", "us-east-1a", batch, taint),
        node("odd-1", "r5.large", "us-east-1a"),
        node("cp-1", "m5.large", "us-east-1a", "node-role.kubernetes.io/control-plane: ''"),
    ]
    for index in range(6):
        manifests.append(pod(f"web-{index}", f"web-{1 + index % 2}", "1"))
    toleration = "tolerations: [{key: team, operator: Equal, value: batch, effect: NoSchedule}]"
    for index in range(3):
        manifests.append(
            pod(f"batch-{index}", "batch-1", "1", f"nodeSelector: {{team: batch}}\n  {toleration}")
        )
    manifests.append(pod("odd-0", "odd-1", "500m"))
    loaded = parse_manifests("\n---\n".join(manifests), "cluster")
    assert not loaded.errors, loaded.errors
    return ClusterSnapshot(tuple(item.obj for item in loaded.objects), 0.0)


def test_node_groups_are_recognised_by_their_labels_and_identical_nodes() -> None:
    discovery = discover_groups(ca_cluster().objects)
    groups = {group.name: group for group in discovery.groups}
    assert set(groups) == {"batch", "web", "inferred-r5.large-on-demand"}
    assert groups["web"].named_by == "eks.amazonaws.com/nodegroup"
    assert groups["web"].nodes == ("web-1", "web-2")
    assert groups["web"].zones == ("us-east-1a", "us-east-1b")
    assert groups["web"].capacity_type == "on-demand"
    assert groups["batch"].capacity_type == "spot"
    assert [t.key for t in groups["batch"].taints] == ["team"]
    assert groups["batch"].selected_keys == {"team"}
    assert groups["web"].pods == 6
    assert discovery.provider == "aws"
    assert any("cp-1" in note and "control plane" in note for note in discovery.notes)


def test_the_proposal_has_one_pool_per_taints_and_selected_labels_widened_to_categories() -> None:
    proposal = propose(discover_groups(ca_cluster().objects))
    pools = {pool.name: pool for pool in proposal.pools}
    # web and the inferred group: no taints, no label their pods select on, so one pool.
    assert set(pools) == {"batch", "default"}
    assert pools["default"].groups == ("inferred-r5.large-on-demand", "web")
    batch = pools["batch"]
    assert batch.labels == {"team": "batch"}
    assert [t.key for t in batch.taints] == ["team"]
    requirements = {key: values for key, _, values in batch.requirements}
    assert requirements["karpenter.k8s.aws/instance-category"] == ("c",)
    assert requirements["karpenter.sh/capacity-type"] == ("spot",)
    other = {key: values for key, _, values in pools["default"].requirements}
    assert other["karpenter.k8s.aws/instance-category"] == ("m", "r")
    assert other["topology.kubernetes.io/zone"] == ("us-east-1a", "us-east-1b")
    assert "tier" not in pools["default"].labels  # no pod selects on it
    kinds = [manifest["kind"] for manifest in proposal.manifests()]
    assert kinds == ["EC2NodeClass", "NodePool", "NodePool"]
    loaded = parse_manifests("\n---\n".join(yaml.safe_dump(m) for m in proposal.manifests()), "proposal")
    assert not loaded.errors, loaded.errors


def test_the_proposed_pools_place_every_pod_and_both_runs_report_cost_and_waits() -> None:
    snapshot = ca_cluster()
    proposal = propose(discover_groups(snapshot.objects))
    after = outcome(simulate_after(snapshot, proposal))
    assert after.pods == 10 and after.pending == 0
    assert after.price_per_hour > 0 and after.pending_max is not None
    before = outcome(simulate_before(snapshot, proposal))
    assert before.pods == 10 and before.pending == 0
    assert before.price_per_hour > 0


def test_groups_of_other_architectures_get_pools_of_their_own_so_pods_keep_theirs() -> None:
    """A pod that asks for no architecture ran on amd64: its image may have no arm64 build.

    One pool for both would let karpy launch the cheaper arm64 for it. Apart, the amd64 pool
    weighs more, so karpy tries it first for such a pod (pods are placed larger first, so the
    web pods' node is launched before the smaller arm pods' one could take them).
    """
    general = "eks.amazonaws.com/nodegroup: general"
    graviton = "eks.amazonaws.com/nodegroup: graviton"
    manifests = [
        node("general-1", "m5.xlarge", "us-east-1a", general),
        node("graviton-1", "m6g.xlarge", "us-east-1a", graviton, arch="arm64"),
        *(pod(f"web-{index}", "general-1", "1") for index in range(3)),
        *(
            pod(f"arm-{index}", "graviton-1", "500m", "nodeSelector: {kubernetes.io/arch: arm64}")
            for index in range(3)
        ),
        # A DaemonSet's pod is on every node: it says nothing of its image's architecture.
        pod("agent-graviton", "graviton-1", "100m").replace(
            "namespace: default}",
            "namespace: default, ownerReferences: [{apiVersion: apps/v1, kind: DaemonSet, name: agent,"
            " uid: u1, controller: true}]}",
        ),
    ]
    loaded = parse_manifests("\n---\n".join(manifests), "cluster")
    assert not loaded.errors, loaded.errors
    snapshot = ClusterSnapshot(tuple(item.obj for item in loaded.objects), 0.0)
    discovery = discover_groups(snapshot.objects)
    assert [group.pods_of_unasked_arch for group in discovery.groups] == [3, 0]
    proposal = propose(discovery)
    pools = {pool.name: pool for pool in proposal.pools}
    assert set(pools) == {"default", "graviton"}
    assert pools["default"].groups == ("general",)
    requirements = {
        name: {key: values for key, _, values in pool.requirements} for name, pool in pools.items()
    }
    assert requirements["default"]["kubernetes.io/arch"] == ("amd64",)
    assert requirements["graviton"]["kubernetes.io/arch"] == ("arm64",)
    # Through YAML, as kubectl reads it.
    written = [doc for doc in yaml.safe_load_all(manifests_yaml(proposal.manifests())) if doc]
    spec_of = {doc["metadata"]["name"]: doc["spec"] for doc in written if doc["kind"] == "NodePool"}
    assert spec_of["default"]["weight"] == 10
    assert "weight" not in spec_of["graviton"]
    assert any("architectures" in note for note in proposal.notes)
    # Simulated: the web pods stay on amd64 though an arm64 node of the same category is cheaper.
    after = simulate_after(snapshot, proposal)
    arch_of = {n.name: n.metadata.labels["kubernetes.io/arch"] for n in after.cluster.objects("Node")}
    placed = {p.metadata.name: arch_of[p.spec.node_name] for p in after.pods() if p.spec.node_name}
    assert len(placed) == 6
    assert {placed[f"web-{index}"] for index in range(3)} == {"amd64"}
    assert {placed[f"arm-{index}"] for index in range(3)} == {"arm64"}


def test_groups_of_one_architecture_share_a_pool_without_weight() -> None:
    manifests = [
        node("general-1", "m5.xlarge", "us-east-1a", "eks.amazonaws.com/nodegroup: general"),
        node("other-1", "m5.large", "us-east-1b", "eks.amazonaws.com/nodegroup: other"),
        pod("web-0", "general-1", "1"),
        pod("web-1", "other-1", "1"),
    ]
    loaded = parse_manifests("\n---\n".join(manifests), "cluster")
    proposal = propose(discover_groups(tuple(item.obj for item in loaded.objects)))
    assert [(pool.name, pool.groups, pool.weight) for pool in proposal.pools] == [
        ("default", ("general", "other"), 0)
    ]
    assert not any("architectures" in note for note in proposal.notes)


CA_NODEPOOLS = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: general}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements: []
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: gpu-like}
spec:
  template:
    metadata: {labels: {workload: heavy}}
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      taints: [{key: heavy, value: "true", effect: NoSchedule}]
      requirements: []
"""

HEAVY = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: heavy, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: heavy}}
  template:
    metadata: {labels: {app: heavy}}
    spec:
      nodeSelector: {workload: heavy}
      tolerations: [{key: heavy, operator: Exists, effect: NoSchedule}]
      containers: [{name: main, resources: {requests: {cpu: "3", memory: 8Gi}}}]
"""


def ca_baseline_cluster(tmp_path: Path) -> ClusterSnapshot:
    """A cluster the simulator's Cluster Autoscaler baseline grew: its nodes as node groups made them."""
    (tmp_path / "cluster.yaml").write_text(
        "\n---\n".join([KWOK_NODE_CLASS, CA_NODEPOOLS, deployment_manifest(replicas=5), HEAVY])
    )
    (tmp_path / "scenario.yaml").write_text(
        """
apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {name: ca}
spec:
  duration: 30m
  clusterAutoscaler:
    nodeGroups:
      - {name: general, instanceTypes: [m5.xlarge], maxSize: 10, nodePool: general}
      - {name: heavy, instanceTypes: [c5.2xlarge], maxSize: 10, nodePool: gpu-like}
  steps:
    - at: 0s
      apply: {files: [cluster.yaml]}
"""
    )
    scenario, problems = load_inputs([tmp_path / "scenario.yaml"])
    assert not problems.errors, problems.errors
    simulation = Simulation(SimulationSettings(autoscaler="cluster-autoscaler"))
    simulation.run_scenario(scenario)
    kinds = ("Namespace", "Node", "Deployment", "ReplicaSet", "DaemonSet", "Pod")
    objects = tuple(obj for kind in kinds for obj in simulation.cluster.objects(kind))
    assert all(pod.phase == "Running" for pod in simulation.pods())
    return ClusterSnapshot(objects, simulation.clock.now())


def test_a_cluster_grown_by_node_groups_migrates_to_pools_that_place_every_pod(tmp_path: Path) -> None:
    snapshot = ca_baseline_cluster(tmp_path)
    discovery = discover_groups(snapshot.objects)
    groups = {group.name: group for group in discovery.groups}
    assert set(groups) == {"general", "heavy"}
    assert groups["heavy"].named_by == "karpy.dev/node-group"
    assert groups["heavy"].instance_types == ("c5.2xlarge",)
    assert discovery.provider == "kwok"
    proposal = propose(discovery)
    assert proposal.node_class["kind"] == "KWOKNodeClass"
    pools = {pool.name: pool for pool in proposal.pools}
    assert set(pools) == {"default", "heavy"}
    assert pools["heavy"].labels == {"workload": "heavy"}
    after_run, before_run = simulate_after(snapshot, proposal), simulate_before(snapshot, proposal)
    after, before = outcome(after_run), outcome(before_run)
    assert (after.pods, after.pending) == (7, 0)
    assert (before.pods, before.pending) == (7, 0)
    for run in (after_run, before_run):
        # The pods keep their ReplicaSets, which adopt them as they are: none made or removed.
        records = [record for record in run.recorder.pods.values() if not record.daemonset]
        assert len(records) == 7
        assert all(record.owner.startswith("ReplicaSet/") for record in records)
    # karpy may pick any m, c or r size: it is never dearer than the groups' fixed types here.
    assert after.price_per_hour <= before.price_per_hour


def test_plan_from_cluster_autoscaler_prints_applicable_manifests_and_both_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli, "_read_cluster", lambda kubeconfig: ca_cluster())
    code, out, _ = run_cli(capsys, "plan", "--from-cluster-autoscaler")
    assert code == 0
    documents = [doc for doc in yaml.safe_load_all(out) if doc]
    assert [doc["kind"] for doc in documents] == ["EC2NodeClass", "NodePool", "NodePool"]
    assert "&id" not in out  # no YAML anchors: kubectl users read and edit this
    assert "# Simulated from the same pods" in out
    assert any(line.startswith("#   cluster-autoscaler") for line in out.splitlines())
    code, out, _ = run_cli(capsys, "plan", "--from-cluster-autoscaler", "--output", "json")
    document = json.loads(out)
    assert document["karpy"]["podsPending"] == 0 and document["clusterAutoscaler"]["pods"] == 10
    code, _, err = run_cli(
        capsys, "plan", "--from-cluster-autoscaler", "--manifests-dir", str(tmp_path / "out")
    )
    assert code == 0
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == [
        "ec2nodeclass-default.yaml",
        "nodepool-batch.yaml",
        "nodepool-default.yaml",
    ]
    code, _, err = run_cli(capsys, "plan", "--from-cluster-autoscaler", "extra.yaml")
    assert code != 0 and "takes no FILE" in err


def test_plan_without_files_or_the_flag_says_what_it_needs(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "plan")
    assert code != 0 and "FILE required (or --from-cluster-autoscaler)" in err


def test_identical_nodes_without_a_group_label_split_by_taints_and_kwok_types_keep_their_catalog() -> None:
    taint = "{key: dedicated, value: db, effect: NoSchedule}"
    loaded = parse_manifests(
        "\n---\n".join(
            [
                node("a", "c-4x-amd64-linux", "test-zone-a"),
                node("b", "c-4x-amd64-linux", "test-zone-b"),
                node("c", "c-4x-amd64-linux", "test-zone-a", taints=taint),
            ]
        ).replace("aws:///", "kwok://"),
        "cluster",
    )
    assert not loaded.errors, loaded.errors
    discovery = discover_groups(item.obj for item in loaded.objects)
    assert [(group.name, group.nodes) for group in discovery.groups] == [
        ("inferred-c-4x-amd64-linux-on-demand", ("a", "b")),
        ("inferred-c-4x-amd64-linux-on-demand-2", ("c",)),
    ]
    assert (discovery.provider, discovery.kwok_catalog) == ("kwok", "karpenter")
    proposal = propose(discovery)
    assert proposal.node_class["kind"] == "KWOKNodeClass"
    assert proposal.node_class["metadata"] == {
        "name": "default",
        "annotations": {"karpy.dev/kwok-instance-types": "karpenter"},
    }
    for pool in proposal.pools:
        requirements = {key: values for key, _, values in pool.requirements}
        assert requirements["karpenter.kwok.sh/instance-family"] == ("c",)
        assert "karpenter.k8s.aws/instance-generation" not in requirements
    assert sorted(len(pool.taints) for pool in proposal.pools) == [0, 1]


def test_a_group_of_types_the_catalog_lacks_is_noted_and_its_pods_stay_pending_before() -> None:
    loaded = parse_manifests(
        "\n---\n".join(
            [
                node("x-1", "x9.mega", "us-east-1a", "eks.amazonaws.com/nodegroup: exotic"),
                pod("p-0", "x-1", "1"),
            ]
        ),
        "cluster",
    )
    snapshot = ClusterSnapshot(tuple(item.obj for item in loaded.objects), 0.0)
    proposal = propose(discover_groups(snapshot.objects))
    run = simulate_before(snapshot, proposal, 600.0)
    assert unknown_instance_types(run, proposal) == [
        "node group exotic: x9.mega not in the simulated cloud's catalog:"
        " the Cluster Autoscaler run cannot grow it with them"
    ]
    assert outcome(run).pending == 1
