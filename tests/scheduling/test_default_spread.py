"""Default topology spread: the cluster's defaultConstraints for pods that declare none (Karpenter v1.15)."""

from __future__ import annotations

import pytest
from tests.support import make_instance_type, make_nodepool, make_pod

from karpy.api.core import LabelSelector, Pod
from karpy.api.meta import OwnerReference
from karpy.api.schedulerconfig import SchedulerConfigError, parse_scheduler_config
from karpy.scheduling.default_spread import DefaultSpread, SelectorSources
from karpy.scheduling.solver import NodePoolCapacity, solve

ZONE_AND_HOST = """
podTopologySpread:
  defaultConstraints:
    - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule}
    - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule}
"""


def owned(pod: Pod, kind: str, api_version: str = "apps/v1", name: str = "web-abc") -> Pod:
    owner = OwnerReference(api_version, kind, name, uid=f"uid-{name}", controller=True)
    return pod.with_changes(metadata=pod.metadata.with_changes(owner_references=(owner,)))


def labelled(name: str, labels: dict[str, str], extra_spec: str = "") -> Pod:
    pod = make_pod(name, "1", "1Gi", extra_spec=extra_spec)
    return pod.with_changes(metadata=pod.metadata.with_changes(labels=labels))


def spread(
    services: dict[str, list[dict[str, str] | None]] | None = None,
    owners: dict[tuple[str, str], LabelSelector] | None = None,
) -> DefaultSpread:
    config = parse_scheduler_config(ZONE_AND_HOST)
    assert config is not None
    sources = SelectorSources(
        services=lambda namespace: (services or {}).get(namespace, []),
        owner=lambda api_version, kind, namespace, name: (owners or {}).get((kind, name)),
    )
    return DefaultSpread(config.default_constraints, sources)


def test_a_replica_set_pod_gets_every_default_with_its_owners_selector() -> None:
    pod = owned(labelled("web-1", {"app": "web"}), "ReplicaSet")
    (defaulted,) = spread(owners={("ReplicaSet", "web-abc"): LabelSelector({"app": "web"})}).apply([pod])
    constraints = defaulted.spec.topology_spread_constraints
    assert [c["topologyKey"] for c in constraints] == [
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
    ]
    assert constraints[0]["labelSelector"] == {
        "matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]
    }


def test_a_service_selecting_the_pod_gives_its_selector_as_labels() -> None:
    pod = labelled("web-1", {"app": "web", "tier": "front"})
    services = {"default": [{"app": "web"}, {"app": "other"}, None]}
    (defaulted,) = spread(services=services).apply([pod])
    assert defaulted.spec.topology_spread_constraints[0]["labelSelector"] == {"matchLabels": {"app": "web"}}


def test_a_replication_controller_overwrites_the_services_labels() -> None:
    pod = owned(labelled("rc-1", {"app": "web", "v": "2"}), "ReplicationController", "v1", "rc")
    owners = {("ReplicationController", "rc"): LabelSelector({"v": "2"})}
    (defaulted,) = spread({"default": [{"app": "web"}]}, owners).apply([pod])
    assert defaulted.spec.topology_spread_constraints[0]["labelSelector"] == {
        "matchLabels": {"app": "web", "v": "2"}
    }


def test_a_pod_nothing_selects_and_a_job_pod_are_left_alone() -> None:
    bare = labelled("bare", {"app": "web"})
    job_pod = owned(labelled("job-1", {"app": "web"}), "Job", "batch/v1", "job")
    assert spread().apply([bare, job_pod]) == [bare, job_pod]


def test_a_pod_with_constraints_of_its_own_keeps_only_those() -> None:
    own = """  topologySpreadConstraints:
    - {maxSkew: 4, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway,
       labelSelector: {matchLabels: {app: web}}}"""
    pod = labelled("web-1", {"app": "web"}, own)
    (kept,) = spread(services={"default": [{"app": "web"}]}).apply([pod])
    assert kept is pod


def test_the_plan_spreads_defaulted_pods_one_per_node_and_packs_the_others() -> None:
    types = [make_instance_type("big.8x", 8, 32, 0.4, zones=("zone-a", "zone-b", "zone-c", "zone-d"))]
    pools = [NodePoolCapacity(make_nodepool("default"), types, {}, None)]
    pods = [owned(labelled(f"web-{i}", {"app": "web"}), "ReplicaSet") for i in range(4)]
    defaulted = spread(owners={("ReplicaSet", "web-abc"): LabelSelector({"app": "web"})}).apply(pods)
    assert len(solve(pods, [], pools).new_nodeclaims) == 1
    plan = solve(defaulted, [], pools)
    assert len(plan.new_nodeclaims) == 4
    zones = {
        next(iter(claim.requirements.get("topology.kubernetes.io/zone").values))
        for claim in plan.new_nodeclaims
    }
    assert len(zones) == 4


def defaults(*constraints: str) -> str:
    return "podTopologySpread: {defaultConstraints: [" + ", ".join(constraints) + "]}"


HOST = "maxSkew: 1, topologyKey: a, whenUnsatisfiable: DoNotSchedule"


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (
            defaults("{maxSkew: 0, topologyKey: a, whenUnsatisfiable: DoNotSchedule}"),
            ".maxSkew must be greater than 0",
        ),
        (defaults("{maxSkew: 1, whenUnsatisfiable: DoNotSchedule}"), ".topologyKey must be set"),
        (defaults("{maxSkew: 1, topologyKey: a, whenUnsatisfiable: Maybe}"), ".whenUnsatisfiable 'Maybe'"),
        (
            defaults("{" + HOST + ", labelSelector: {matchLabels: {app: x}}}"),
            ".labelSelector must not be set",
        ),
        (defaults("{" + HOST + ", matchLabelKeys: [app]}"), ".matchLabelKeys must not be set"),
        (defaults("{" + HOST + "}", "{" + HOST.replace("1", "2") + "}"), "is a duplicate of [0]"),
        ("podTopologySpread: {defaultingType: List}", 'unknown field "podTopologySpread.defaultingType"'),
        ("profiles: []", 'unknown field "profiles"'),
    ],
)
def test_a_configuration_kube_scheduler_would_refuse_is_refused(document: str, message: str) -> None:
    with pytest.raises(SchedulerConfigError, match=message.replace("[", r"\[").replace(".", r"\.")):
        parse_scheduler_config(document)


def test_an_empty_configuration_mirrors_nothing() -> None:
    assert parse_scheduler_config("") is None
    config = parse_scheduler_config(ZONE_AND_HOST)
    assert config is not None and len(config.default_constraints) == 2
