"""Recognising Cluster Autoscaler node groups in a cluster, and the NodePools proposed in their place."""

from __future__ import annotations

from karpy.api.manifest import parse_manifests
from karpy.api.snapshot import ClusterSnapshot
from karpy.baselines.ca_migration import discover_groups, propose
from karpy.sim.ca_migration import outcome, simulate_after, simulate_before


def node(name: str, instance_type: str, zone: str, labels: str = "", taints: str = "") -> str:
    return f"""
apiVersion: v1
kind: Node
metadata:
  name: {name}
  labels:
    node.kubernetes.io/instance-type: {instance_type}
    topology.kubernetes.io/zone: {zone}
    kubernetes.io/arch: amd64
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
    loaded = parse_manifests(
        "\n---\n".join(__import__("yaml").safe_dump(m) for m in proposal.manifests()), "proposal"
    )
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
