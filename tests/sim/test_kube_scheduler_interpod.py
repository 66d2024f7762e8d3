"""The stand-in kube-scheduler refuses what kube-scheduler refuses: required pod affinity and
anti-affinity (both ways) and DoNotSchedule topology spread.

Before these filters the stand-in bound such pods wherever they fitted: a
Deployment whose required podAffinity matched no pod was reported
unschedulable by karpy yet ran, and the run never agreed with itself.
"""

from __future__ import annotations

import dataclasses

import pytest
from tests.support import DATA, make_pod, simulate_json

from karpy.api.core import Node, NodeCondition, Pod
from karpy.api.meta import ObjectMeta
from karpy.sim.clock import VirtualClock
from karpy.sim.scheduler import SimulatedKubeScheduler
from karpy.sim.store import InMemoryCluster

GIB = 1024**3


def node(name: str, zone: str) -> Node:
    return Node(
        metadata=ObjectMeta(
            name=name, labels={"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone}
        ),
        allocatable={"cpu": 8000, "memory": 32 * GIB, "pods": 110},
        conditions=(NodeCondition("Ready", "True"),),
    )


def affinity(kind: str, app: str, key: str = "kubernetes.io/hostname") -> str:
    return f"""  affinity:
    {kind}:
      requiredDuringSchedulingIgnoredDuringExecution:
        - labelSelector: {{matchLabels: {{app: {app}}}}}
          topologyKey: {key}"""


SPREAD = """  topologySpreadConstraints:
    - maxSkew: 1
      topologyKey: topology.kubernetes.io/zone
      whenUnsatisfiable: DoNotSchedule
      labelSelector: {matchLabels: {app: spread}}"""


def schedule(nodes: list[Node], pods: list[Pod], bound: dict[str, str] | None = None) -> InMemoryCluster:
    """Create the nodes, the pods (those in ``bound`` already on their node), and run one pass."""
    cluster = InMemoryCluster(VirtualClock())
    for item in nodes:
        cluster.create(item)
    for pod in pods:
        target = (bound or {}).get(pod.metadata.name)
        cluster.create(
            pod if target is None else pod.with_changes(spec=dataclasses.replace(pod.spec, node_name=target))
        )
    SimulatedKubeScheduler(cluster).reconcile("schedule")
    return cluster


def placed(cluster: InMemoryCluster) -> dict[str, str]:
    return {pod.metadata.name: pod.spec.node_name for pod in cluster.pods()}


def reason(cluster: InMemoryCluster, name: str) -> str:
    pod = cluster.pod("default", name)
    assert pod is not None
    return pod.unschedulable_reason


def test_a_required_pod_affinity_that_matches_no_pod_leaves_the_pod_pending() -> None:
    cluster = schedule(
        [node("n1", "a"), node("n2", "b")],
        [make_pod("stray", "1", "1Gi", labels="{app: stray}", extra_spec=affinity("podAffinity", "ghost"))],
    )
    assert placed(cluster)["stray"] == ""
    assert reason(cluster, "stray") == "0/2 nodes are available: node(s) didn't match pod affinity rules"


def test_a_pod_whose_affinity_selects_itself_starts_its_group_and_the_next_joins_it() -> None:
    # The first replica matches nothing but itself: kube-scheduler lets it start the group.
    # The second must then share its zone.
    term = affinity("podAffinity", "cache", "topology.kubernetes.io/zone")
    pods = [make_pod(f"cache-{i}", "1", "1Gi", labels="{app: cache}", extra_spec=term) for i in (1, 2)]
    where = placed(schedule([node("n1", "a"), node("n2", "b"), node("n3", "a")], pods))
    zones = {"n1": "a", "n2": "b", "n3": "a"}
    assert where["cache-1"] and where["cache-2"]
    assert zones[where["cache-1"]] == zones[where["cache-2"]]


def test_a_pod_goes_where_its_affinity_finds_its_peer() -> None:
    peer = make_pod("db", "1", "1Gi", labels="{app: db}")
    client = make_pod("client", "1", "1Gi", extra_spec=affinity("podAffinity", "db"))
    cluster = schedule([node("n1", "a"), node("n2", "b")], [peer, client], bound={"db": "n2"})
    assert placed(cluster)["client"] == "n2"


def test_anti_affinity_by_host_spreads_replicas_and_leaves_the_one_too_many_pending() -> None:
    term = affinity("podAntiAffinity", "web")
    pods = [make_pod(f"web-{i}", "1", "1Gi", labels="{app: web}", extra_spec=term) for i in (1, 2, 3)]
    cluster = schedule([node("n1", "a"), node("n2", "b")], pods)
    hosts = [host for host in placed(cluster).values() if host]
    assert sorted(hosts) == ["n1", "n2"]
    [pending] = [name for name, host in placed(cluster).items() if not host]
    assert reason(cluster, pending) == "0/2 nodes are available: node(s) didn't match pod anti-affinity rules"


def test_a_bound_pods_anti_affinity_keeps_the_pods_it_selects_away() -> None:
    # "loner" on n1 repels app=noisy; the noisy pod has no terms of its own and still avoids
    # n1, although n1 is the emptier node.
    loner = make_pod(
        "loner", "1", "1Gi", labels="{app: loner}", extra_spec=affinity("podAntiAffinity", "noisy")
    )
    filler = make_pod("filler", "4", "8Gi")
    noisy = make_pod("noisy", "1", "1Gi", labels="{app: noisy}")
    cluster = schedule(
        [node("n1", "a"), node("n2", "b")], [loner, filler, noisy], bound={"loner": "n1", "filler": "n2"}
    )
    assert placed(cluster)["noisy"] == "n2"


def test_a_hard_zone_spread_keeps_the_skew_within_max_skew() -> None:
    # Zone a has two nodes, zone b one: least-allocated alone would put the second pod on the
    # other empty node of zone a; the spread sends it to zone b, and so on in turn.
    pods = [make_pod(f"spread-{i}", "1", "1Gi", labels="{app: spread}", extra_spec=SPREAD) for i in range(4)]
    cluster = schedule([node("a1", "a"), node("a2", "a"), node("b1", "b")], pods)
    zones = {"a1": "a", "a2": "a", "b1": "b"}
    counts = {"a": 0, "b": 0}
    for host in placed(cluster).values():
        assert host
        counts[zones[host]] += 1
    assert counts == {"a": 2, "b": 2}


def test_a_hard_spread_over_a_zone_with_no_room_leaves_the_pod_pending() -> None:
    # Zone b's only node is full: one pod in zone a is the most the skew allows.
    full = make_pod("full", "8", "1Gi")
    pods = [make_pod(f"spread-{i}", "1", "1Gi", labels="{app: spread}", extra_spec=SPREAD) for i in range(2)]
    cluster = schedule([node("a1", "a"), node("b1", "b")], [full, *pods], bound={"full": "b1"})
    hosts = sorted(host for name, host in placed(cluster).items() if name.startswith("spread"))
    assert hosts == ["", "a1"]


SCENARIO = DATA / "interpod" / "scenario.yaml"


def test_pods_karpy_calls_unschedulable_stay_pending_and_the_run_becomes_steady(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, document, err = simulate_json(capsys, str(SCENARIO))
    assert code == 0, err
    stray = [pod for pod in document["pods"] if pod["name"].startswith("stray-")]
    assert len(stray) == 2 and all(not pod.get("node") for pod in stray), stray
    assert document["steady"] is True
    # The web pods of the common file run on the node karpy launched for them.
    assert all(pod.get("node") for pod in document["pods"] if pod["name"].startswith("web-"))
