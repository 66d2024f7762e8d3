"""Core Kubernetes objects: effective pod requests, node constraints, taints, selectors, PDBs, owners."""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from karpy.api._reader import FieldReader, ManifestError
from karpy.api.core import (
    DaemonSet,
    Deployment,
    LabelSelector,
    Node,
    Pod,
    PodDisruptionBudget,
    PodSpec,
    ReplicaSet,
)
from karpy.api.meta import ObjectMeta
from karpy.api.quantity import ResourceAmounts
from karpy.api.requirements import LABEL_ARCH, LABEL_ZONE, Requirement, Requirements
from karpy.api.taints import Taint, Toleration, untolerated

GI = 1024**3
MI = 1024**2


def load(text: str) -> dict[str, Any]:
    document = yaml.safe_load(text)
    assert isinstance(document, dict)
    return document


def pod_spec(text: str) -> PodSpec:
    return PodSpec.parse(FieldReader(load(text), "spec"))


def parse_error(parse: Any, text: str) -> str:
    with pytest.raises(ManifestError) as raised:
        parse(FieldReader(load(text)))
    return str(raised.value)


# --- effective requests --------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "requests"),
    [
        pytest.param("containers: []", {}, id="no containers"),
        pytest.param(
            "containers: [{name: a, resources: {requests: {cpu: 100m, memory: 128Mi}}}]",
            {"cpu": 100, "memory": 128 * MI},
            id="one container",
        ),
        pytest.param(
            """
            containers:
            - {name: a, resources: {requests: {cpu: 100m, memory: 1Gi}}}
            - {name: b, resources: {requests: {cpu: 250m}}}
            - {name: c}
            """,
            {"cpu": 350, "memory": GI},
            id="containers are summed",
        ),
        pytest.param(
            """
            containers: [{name: a, resources: {limits: {cpu: "1", memory: 2Gi}}}]
            """,
            {"cpu": 1000, "memory": 2 * GI},
            id="a missing request defaults to the limit",
        ),
        pytest.param(
            """
            containers: [{name: a, resources: {requests: {cpu: 200m}, limits: {cpu: "1", memory: 2Gi}}}]
            """,
            {"cpu": 200, "memory": 2 * GI},
            id="limits default only the requests not written",
        ),
        pytest.param(
            """
            containers:
            - {name: a, resources: {requests: {cpu: 100m}}}
            - {name: b, resources: {requests: {cpu: 200m}}}
            initContainers: [{name: i, resources: {requests: {cpu: 500m}}}]
            """,
            {"cpu": 500},
            id="an init container larger than the sum wins",
        ),
        pytest.param(
            """
            containers: [{name: a, resources: {requests: {cpu: 100m}}}]
            initContainers:
            - {name: i1, resources: {requests: {cpu: 400m, memory: 64Mi}}}
            - {name: i2, resources: {requests: {cpu: 300m, memory: 256Mi}}}
            """,
            {"cpu": 400, "memory": 256 * MI},
            id="init containers take the maximum per resource, not the sum",
        ),
        pytest.param(
            """
            containers: [{name: a, resources: {requests: {cpu: 100m, memory: 1Gi}}}]
            initContainers: [{name: i, resources: {limits: {cpu: "2"}}}]
            """,
            {"cpu": 2000, "memory": GI},
            id="init container limits default its requests",
        ),
        pytest.param(
            """
            containers: [{name: a, resources: {requests: {cpu: 100m}}}]
            initContainers: [{name: proxy, restartPolicy: Always, resources: {requests: {cpu: 50m}}}]
            """,
            {"cpu": 150},
            id="a restartable sidecar adds to the app containers",
        ),
        pytest.param(
            """
            containers: [{name: a, resources: {requests: {cpu: 100m}}}]
            initContainers:
            - {name: proxy, restartPolicy: Always, resources: {requests: {cpu: 50m}}}
            - {name: migrate, resources: {requests: {cpu: 500m}}}
            """,
            {"cpu": 550},
            id="an init container after a sidecar runs beside it",
        ),
        pytest.param(
            """
            containers: [{name: a, resources: {requests: {cpu: 100m}}}]
            initContainers:
            - {name: migrate, resources: {requests: {cpu: 500m}}}
            - {name: proxy, restartPolicy: Always, resources: {requests: {cpu: 50m}}}
            """,
            {"cpu": 500},
            id="an init container before a sidecar runs alone",
        ),
        pytest.param(
            """
            containers: [{name: a, resources: {requests: {cpu: 100m}}}]
            initContainers:
            - {name: s1, restartPolicy: Always, resources: {requests: {cpu: 300m}}}
            - {name: s2, restartPolicy: Always, resources: {requests: {cpu: 300m}}}
            """,
            {"cpu": 700},
            id="every sidecar is added",
        ),
        pytest.param(
            """
            containers: [{name: a, resources: {requests: {cpu: 100m, memory: 1Gi}}}]
            overhead: {cpu: 250m, memory: 120Mi}
            """,
            {"cpu": 350, "memory": GI + 120 * MI},
            id="pod overhead is added",
        ),
        pytest.param(
            """
            containers: [{name: a, resources: {requests: {cpu: 100m}}}]
            initContainers: [{name: i, resources: {requests: {cpu: 500m}}}]
            overhead: {cpu: 50m}
            """,
            {"cpu": 550},
            id="overhead is added after the init container maximum",
        ),
        pytest.param(
            """
            containers: [{name: a, resources: {requests: {cpu: 100m}}}]
            initContainers: [{name: i, resources: {requests: {nvidia.com/gpu: 1}}}]
            """,
            {"cpu": 100, "nvidia.com/gpu": 1},
            id="a resource only an init container asks for is kept",
        ),
        pytest.param(
            """
            resources: {requests: {cpu: "3", memory: 6Gi}}
            containers: [{name: a}, {name: b, resources: {requests: {cpu: 100m, nvidia.com/gpu: 1}}}]
            overhead: {cpu: 50m}
            """,
            {"cpu": 3050, "memory": 6 * GI, "nvidia.com/gpu": 1},
            id="pod-level requests replace the containers' for cpu and memory",
        ),
        pytest.param(
            """
            resources: {limits: {cpu: "1", memory: 2Gi}}
            containers: [{name: a, resources: {requests: {cpu: 100m}}}]
            """,
            {"cpu": 100, "memory": 2 * GI},
            id="pod-level limits default the pod-level requests no container makes",
        ),
    ],
)
def test_effective_requests_are_what_the_kube_scheduler_reserves(
    spec: str, requests: ResourceAmounts
) -> None:
    assert pod_spec(spec).requests == requests


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        (
            "containers: [{name: a, resources: {requests: {cpu: '-1'}}}]",
            'spec.containers[0].resources.requests.cpu: quantity "-1" must not be negative',
        ),
        (
            "containers: [{name: a}, {name: b, resources: {limits: {memory: 1Gb}}}]",
            "spec.containers[1].resources.limits.memory: ",
        ),
        (
            "containers: [{name: a, resources: {requests: [cpu]}}]",
            "spec.containers[0].resources.requests: expected a map of resource names to quantities",
        ),
        ("overhead: {cpu: lots}", "spec.overhead.cpu: "),
        (
            "initContainers: [{name: i, resources: {requests: {memory: {}}}}]",
            "spec.initContainers[0].resources.requests.memory: "
            "expected a quantity string or number, got dict",
        ),
    ],
)
def test_a_bad_quantity_is_reported_at_the_resource_it_belongs_to(spec: str, error: str) -> None:
    with pytest.raises(ManifestError) as raised:
        pod_spec(spec)
    assert str(raised.value).startswith(error)
    assert 'resource "' not in str(raised.value)  # the path already names it


# --- node constraints ------------------------------------------------------------


def test_node_requirements_without_affinity_are_the_node_selector_alone() -> None:
    spec = pod_spec("nodeSelector: {kubernetes.io/arch: arm64, team: a}")
    assert spec.node_requirements() == (Requirements.from_labels({LABEL_ARCH: "arm64", "team": "a"}),)


def test_node_requirements_with_neither_selector_nor_affinity_are_one_empty_alternative() -> None:
    assert pod_spec("containers: []").node_requirements() == (Requirements(),)


def test_each_required_node_affinity_term_is_an_alternative_with_the_node_selector_added() -> None:
    spec = pod_spec(
        """
        nodeSelector: {kubernetes.io/arch: arm64}
        affinity:
          nodeAffinity:
            requiredDuringSchedulingIgnoredDuringExecution:
              nodeSelectorTerms:
              - matchExpressions:
                - {key: topology.kubernetes.io/zone, operator: In, values: [zone-a]}
              - matchExpressions:
                - {key: topology.kubernetes.io/zone, operator: In, values: [zone-b]}
                - {key: team, operator: Exists}
        """
    )
    arm = Requirement.from_operator(LABEL_ARCH, "In", ["arm64"])
    assert spec.node_requirements() == (
        Requirements(arm, Requirement.from_operator(LABEL_ZONE, "In", ["zone-a"])),
        Requirements(
            arm,
            Requirement.from_operator(LABEL_ZONE, "In", ["zone-b"]),
            Requirement.from_operator("team", "Exists"),
        ),
    )


def test_a_term_contradicting_the_node_selector_leaves_an_empty_set_for_that_key() -> None:
    spec = pod_spec(
        """
        nodeSelector: {topology.kubernetes.io/zone: zone-a}
        affinity:
          nodeAffinity:
            requiredDuringSchedulingIgnoredDuringExecution:
              nodeSelectorTerms:
              - matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [zone-b]}]
        """
    )
    (alternative,) = spec.node_requirements()
    assert alternative.get(LABEL_ZONE).is_empty()


def test_expressions_within_one_term_on_the_same_key_are_intersected() -> None:
    spec = pod_spec(
        """
        affinity:
          nodeAffinity:
            requiredDuringSchedulingIgnoredDuringExecution:
              nodeSelectorTerms:
              - matchExpressions:
                - {key: topology.kubernetes.io/zone, operator: In, values: [zone-a, zone-b]}
                - {key: topology.kubernetes.io/zone, operator: NotIn, values: [zone-a]}
        """
    )
    assert spec.node_requirements() == (
        Requirements(Requirement.from_operator(LABEL_ZONE, "In", ["zone-b"])),
    )


def test_preferred_terms_keep_their_weight_and_are_not_hard_constraints() -> None:
    spec = pod_spec(
        """
        affinity:
          nodeAffinity:
            preferredDuringSchedulingIgnoredDuringExecution:
            - weight: 40
              preference:
                matchExpressions: [{key: karpenter.sh/capacity-type, operator: In, values: [spot]}]
        """
    )
    assert [term.weight for term in spec.preferred_node_terms] == [40]
    assert spec.node_requirements() == (Requirements(),)


NODE_AFFINITY = "spec.affinity.nodeAffinity"


@pytest.mark.parametrize(
    ("affinity", "error"),
    [
        (
            "requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: []}",
            f"{NODE_AFFINITY}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms: "
            "must have at least one term",
        ),
        (
            "requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: "
            "[{matchExpressions: [{key: team, operator: Near, values: [a]}]}]}",
            f"{NODE_AFFINITY}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
            ".matchExpressions[0]: ",
        ),
        (
            "preferredDuringSchedulingIgnoredDuringExecution: [{weight: 0, preference: {}}]",
            f"{NODE_AFFINITY}.preferredDuringSchedulingIgnoredDuringExecution[0].weight: "
            "must be between 1 and 100, got 0",
        ),
        (
            "preferredDuringSchedulingIgnoredDuringExecution: [{weight: 101, preference: {}}]",
            f"{NODE_AFFINITY}.preferredDuringSchedulingIgnoredDuringExecution[0].weight: "
            "must be between 1 and 100, got 101",
        ),
    ],
)
def test_invalid_node_affinity_is_reported_at_its_field(affinity: str, error: str) -> None:
    with pytest.raises(ManifestError) as raised:
        pod_spec(f"affinity: {{nodeAffinity: {{{affinity}}}}}")
    assert str(raised.value).startswith(error)


# --- taints and tolerations --------------------------------------------------------


def toleration(text: str) -> Toleration:
    return Toleration.parse(FieldReader(load(text)))


@pytest.mark.parametrize(
    ("written", "taint", "tolerated"),
    [
        ("{key: gpu, operator: Equal, value: 'true'}", Taint("gpu", "NoSchedule", "true"), True),
        ("{key: gpu, operator: Equal, value: 'true'}", Taint("gpu", "NoSchedule", "false"), False),
        ("{key: gpu, operator: Equal, value: 'true'}", Taint("other", "NoSchedule", "true"), False),
        ("{key: gpu, value: 'true'}", Taint("gpu", "NoSchedule", "true"), True),
        ("{key: gpu, operator: '', value: 'true'}", Taint("gpu", "NoSchedule", "true"), True),
        ("{key: gpu}", Taint("gpu", "NoSchedule"), True),
        ("{key: gpu}", Taint("gpu", "NoSchedule", "true"), False),
        ("{key: gpu, operator: Exists}", Taint("gpu", "NoExecute", "anything"), True),
        ("{key: gpu, operator: Exists}", Taint("tpu", "NoExecute"), False),
        ("{operator: Exists}", Taint("anything", "NoExecute", "v"), True),
        ("{operator: Exists, effect: NoSchedule}", Taint("anything", "NoSchedule"), True),
        ("{operator: Exists, effect: NoSchedule}", Taint("anything", "NoExecute"), False),
        ("{key: gpu, operator: Exists, effect: NoExecute}", Taint("gpu", "NoExecute"), True),
        ("{key: gpu, operator: Exists, effect: NoExecute}", Taint("gpu", "NoSchedule"), False),
        ("{key: gpu, value: x, effect: PreferNoSchedule}", Taint("gpu", "PreferNoSchedule", "x"), True),
    ],
)
def test_toleration_matches_taints_as_the_kubernetes_scheduler_does(
    written: str, taint: Taint, tolerated: bool
) -> None:
    assert toleration(written).tolerates(taint) is tolerated


@pytest.mark.parametrize(
    ("written", "error"),
    [
        ("{key: gpu, operator: In}", "operator: must be Equal or Exists, got 'In'"),
        ("{operator: Equal, value: x}", "operator: an empty key needs operator Exists"),
        ("{value: x}", "operator: an empty key needs operator Exists"),
        (
            "{key: gpu, effect: Never}",
            "effect: must be one of NoSchedule, PreferNoSchedule, NoExecute, got 'Never'",
        ),
        ("{key: gpu, tolerationSeconds: soon}", "tolerationSeconds: expected an integer, got string"),
    ],
)
def test_invalid_toleration_is_rejected_at_its_field(written: str, error: str) -> None:
    assert parse_error(Toleration.parse, written) == error


@pytest.mark.parametrize(
    ("written", "error"),
    [
        ("{effect: NoSchedule}", "key: required"),
        ("{key: gpu}", "effect: required"),
        (
            "{key: gpu, effect: noschedule}",
            "effect: must be one of NoSchedule, PreferNoSchedule, NoExecute, got 'noschedule'",
        ),
    ],
)
def test_invalid_taint_is_rejected_at_its_field(written: str, error: str) -> None:
    assert parse_error(Taint.parse, written) == error


GPU = Taint("gpu", "NoSchedule", "true")
DEDICATED = Taint("dedicated", "NoExecute", "db")
SOFT = Taint("spot", "PreferNoSchedule")


@pytest.mark.parametrize(
    ("taints", "tolerations", "first_untolerated"),
    [
        ((), (), None),
        ((GPU,), (), GPU),
        ((SOFT,), (), None),
        ((SOFT, GPU), (), GPU),
        ((GPU, DEDICATED), (Toleration("gpu", "Equal", "true"),), DEDICATED),
        ((GPU, DEDICATED, SOFT), (Toleration("gpu", "Exists"), Toleration("dedicated", "Exists")), None),
        ((GPU, DEDICATED), (Toleration(operator="Exists"),), None),
        ((GPU, DEDICATED), (Toleration(operator="Exists", effect="NoSchedule"),), DEDICATED),
    ],
)
def test_untolerated_names_the_first_hard_taint_left_and_ignores_prefer_no_schedule(
    taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...], first_untolerated: Taint | None
) -> None:
    assert untolerated(taints, tolerations) == first_untolerated


# --- label selectors -------------------------------------------------------------


def selector(text: str) -> LabelSelector:
    return LabelSelector.parse(FieldReader(load(text)))


@pytest.mark.parametrize(
    ("written", "pod_labels", "matches"),
    [
        ("{}", {}, True),
        ("{}", {"app": "web"}, True),
        ("{matchLabels: {app: web}}", {"app": "web", "tier": "front"}, True),
        ("{matchLabels: {app: web}}", {"app": "db"}, False),
        ("{matchLabels: {app: web}}", {}, False),
        ("{matchLabels: {app: web, tier: front}}", {"app": "web"}, False),
        ("{matchExpressions: [{key: app, operator: In, values: [web, api]}]}", {"app": "api"}, True),
        ("{matchExpressions: [{key: app, operator: In, values: [web, api]}]}", {"app": "db"}, False),
        ("{matchExpressions: [{key: app, operator: In, values: [web]}]}", {}, False),
        ("{matchExpressions: [{key: app, operator: NotIn, values: [web]}]}", {"app": "db"}, True),
        ("{matchExpressions: [{key: app, operator: NotIn, values: [web]}]}", {"app": "web"}, False),
        ("{matchExpressions: [{key: app, operator: NotIn, values: [web]}]}", {}, True),
        ("{matchExpressions: [{key: app, operator: Exists}]}", {"app": ""}, True),
        ("{matchExpressions: [{key: app, operator: Exists}]}", {"other": "x"}, False),
        ("{matchExpressions: [{key: app, operator: DoesNotExist}]}", {"other": "x"}, True),
        ("{matchExpressions: [{key: app, operator: DoesNotExist}]}", {"app": "web"}, False),
        (
            "{matchLabels: {app: web}, matchExpressions: [{key: tier, operator: In, values: [front]}]}",
            {"app": "web", "tier": "back"},
            False,
        ),
        (
            "{matchLabels: {app: web}, matchExpressions: [{key: tier, operator: In, values: [front]}]}",
            {"app": "web", "tier": "front"},
            True,
        ),
    ],
)
def test_label_selector_matches_with_every_operator_anded(
    written: str, pod_labels: dict[str, str], matches: bool
) -> None:
    assert selector(written).matches(pod_labels) is matches


def test_label_selector_rejects_an_operator_labels_do_not_have() -> None:
    error = parse_error(LabelSelector.parse, "{matchExpressions: [{key: a, operator: Gt, values: ['1']}]}")
    assert error == "matchExpressions[0].operator: unknown label selector operator 'Gt'"


# --- PodDisruptionBudget -----------------------------------------------------------


def budget(
    min_available: int | str | None = None, max_unavailable: int | str | None = None
) -> PodDisruptionBudget:
    return PodDisruptionBudget(ObjectMeta("pdb", "default"), LabelSelector(), min_available, max_unavailable)


@pytest.mark.parametrize(
    ("min_available", "max_unavailable", "healthy", "expected", "allowed"),
    [
        (2, None, 3, 3, 1),
        (3, None, 3, 3, 0),
        (5, None, 3, 3, 0),
        (0, None, 3, 3, 3),
        ("50%", None, 3, 3, 1),  # 1.5 pods desired rounds up to 2
        ("50%", None, 4, 4, 2),
        ("100%", None, 4, 4, 0),
        ("0%", None, 4, 4, 4),
        (None, 1, 3, 3, 1),
        (None, 1, 2, 3, 0),  # one pod is already down
        (None, 0, 3, 3, 0),
        (None, "50%", 3, 3, 2),  # 1.5 pods unavailable rounds up to 2
        (None, "10%", 10, 10, 1),
        (None, "10%", 11, 11, 2),
        (None, "100%", 4, 4, 4),
        # More unavailability allowed than pods expected: never more than the healthy ones.
        (None, 5, 3, 3, 3),
        # No pod expected yet: nothing may be disrupted, as Kubernetes' disruption controller.
        (None, 1, 0, 0, 0),
        (None, "100%", 0, 0, 0),
        (None, None, 3, 3, 3),
    ],
)
def test_pdb_disruptions_allowed_follow_the_disruption_controller(
    min_available: int | str | None,
    max_unavailable: int | str | None,
    healthy: int,
    expected: int,
    allowed: int,
) -> None:
    assert budget(min_available, max_unavailable).disruptions_allowed(healthy, expected) == allowed


PDB = """
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: web, namespace: shop}}
spec:
  selector: {{matchLabels: {{app: web}}}}
  {fields}
"""


@pytest.mark.parametrize(
    ("fields", "min_available", "max_unavailable"),
    [
        ("minAvailable: 2", 2, None),
        ("minAvailable: '60%'", "60%", None),
        ("maxUnavailable: 1", None, 1),
        ("maxUnavailable: '25%'", None, "25%"),
        ("maxUnavailable: 0", None, 0),
        ("", None, None),
    ],
)
def test_pdb_reads_integers_and_percentages(
    fields: str, min_available: int | str | None, max_unavailable: int | str | None
) -> None:
    parsed = PodDisruptionBudget.parse(FieldReader(load(PDB.format(fields=fields))))
    assert (parsed.min_available, parsed.max_unavailable) == (min_available, max_unavailable)
    assert parsed.metadata.namespace == "shop"
    assert parsed.selector is not None and parsed.selector.matches({"app": "web"})


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        (
            "minAvailable: 1\n  maxUnavailable: 1",
            "spec.maxUnavailable: minAvailable and maxUnavailable are mutually exclusive",
        ),
        ("minAvailable: -1", "spec.minAvailable: must not be negative"),
        ("maxUnavailable: '150%'", "spec.maxUnavailable: must not be more than 100%, got '150%'"),
        ("minAvailable: '101%'", "spec.minAvailable: must not be more than 100%, got '101%'"),
        ("minAvailable: half", "spec.minAvailable: expected an integer or a percentage, got 'half'"),
        ("maxUnavailable: '-5%'", "spec.maxUnavailable: expected an integer or a percentage, got '-5%'"),
        ("maxUnavailable: 1.5", "spec.maxUnavailable: expected an integer or a percentage, got 1.5"),
    ],
)
def test_invalid_pdb_is_rejected_at_its_field(fields: str, error: str) -> None:
    assert parse_error(PodDisruptionBudget.parse, PDB.format(fields=fields)) == error


# --- workloads -------------------------------------------------------------------

WORKLOAD = """
metadata: {{name: web}}
spec:
  {replicas}
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers: [{{name: web, resources: {{requests: {{cpu: 250m}}}}}}]
"""


@pytest.mark.parametrize("kind", [Deployment, ReplicaSet])
@pytest.mark.parametrize(("replicas", "count"), [("", 1), ("replicas: 0", 0), ("replicas: 5", 5)])
def test_replicas_default_to_one(
    kind: type[Deployment] | type[ReplicaSet], replicas: str, count: int
) -> None:
    workload = kind.parse(FieldReader(load(WORKLOAD.format(replicas=replicas))))
    assert workload.replicas == count
    assert workload.metadata.namespace == "default"
    assert workload.template.labels == {"app": "web"}
    assert workload.template.spec.requests == {"cpu": 250}
    assert workload.selector.matches(workload.template.labels)


@pytest.mark.parametrize("kind", [Deployment, ReplicaSet])
@pytest.mark.parametrize(
    ("replicas", "error"),
    [
        ("replicas: -1", "spec.replicas: must not be negative"),
        ("replicas: '3'", "spec.replicas: expected an integer, got string"),
    ],
)
def test_invalid_replicas_are_rejected(
    kind: type[Deployment] | type[ReplicaSet], replicas: str, error: str
) -> None:
    assert parse_error(kind.parse, WORKLOAD.format(replicas=replicas)) == error


def test_daemonset_reads_its_pod_template() -> None:
    daemonset = DaemonSet.parse(FieldReader(load(WORKLOAD.format(replicas=""))))
    assert daemonset.template.spec.requests == {"cpu": 250}
    assert daemonset.selector.match_labels == {"app": "web"}


# --- pods --------------------------------------------------------------------------

POD = """
metadata:
  name: web-1
  {metadata}
spec:
  containers: [{{name: web}}]
  {spec}
status:
  {status}
"""


def pod(metadata: str = "", spec: str = "", status: str = "") -> Pod:
    return Pod.parse(FieldReader(load(POD.format(metadata=metadata, spec=spec, status=status))))


CONTROLLED_BY = (
    "ownerReferences: [{{apiVersion: apps/v1, kind: {kind}, name: owner, controller: {controller}}}]"
)


@pytest.mark.parametrize(
    ("metadata", "spec", "status", "provisionable"),
    [
        pytest.param("", "", "phase: Pending", True, id="pending and unbound"),
        pytest.param("", "", "", True, id="no status yet"),
        pytest.param("", "nodeName: node-a", "phase: Pending", False, id="bound to a node"),
        pytest.param("", "", "phase: Running", True, id="running but unbound"),
        pytest.param("", "", "phase: Succeeded", False, id="succeeded"),
        pytest.param("", "", "phase: Failed", False, id="failed"),
        pytest.param("deletionTimestamp: '2024-01-01T00:00:00Z'", "", "", False, id="being deleted"),
        pytest.param("", "schedulerName: volcano", "", False, id="another scheduler"),
        pytest.param(
            "",
            "schedulerName: topology-spread-defaults",
            "conditions: [{type: PodScheduled, status: 'False', reason: Unschedulable, message: 0/1 nodes}]",
            True,
            id="another scheduler that found no node",
        ),
        pytest.param("", "schedulerName: default-scheduler", "", True, id="the default scheduler named"),
        pytest.param(
            CONTROLLED_BY.format(kind="DaemonSet", controller="true"), "", "", False, id="daemonset pod"
        ),
        pytest.param(
            CONTROLLED_BY.format(kind="ReplicaSet", controller="true"), "", "", True, id="replicaset pod"
        ),
        pytest.param(
            CONTROLLED_BY.format(kind="DaemonSet", controller="false"),
            "",
            "",
            True,
            id="daemonset owner not controller",
        ),
    ],
)
def test_pod_is_provisionable_only_when_unbound_alive_and_the_default_schedulers_or_unschedulable(
    metadata: str, spec: str, status: str, provisionable: bool
) -> None:
    assert pod(metadata, spec, status).is_provisionable() is provisionable


def test_pod_reads_unschedulable_message_namespace_and_do_not_disrupt() -> None:
    parsed = pod(
        metadata="annotations: {karpenter.sh/do-not-disrupt: 'true'}",
        status="""conditions:
  - {type: Initialized, status: 'True'}
  - {type: PodScheduled, status: 'False', reason: Unschedulable, message: 0/3 nodes are available}""",
    )
    assert parsed.key == "default/web-1"
    assert parsed.unschedulable_reason == "0/3 nodes are available"
    assert parsed.do_not_disrupt


@pytest.mark.parametrize("value", ["false", "yes", ""])
def test_do_not_disrupt_needs_the_annotation_value_true(value: str) -> None:
    assert not pod(metadata=f"annotations: {{karpenter.sh/do-not-disrupt: '{value}'}}").do_not_disrupt


@pytest.mark.parametrize(
    ("value", "started", "until"),
    [
        ("true", None, math.inf),
        ("true", 100.0, math.inf),
        ("1m", 100.0, 160.0),  # counted from the pod's start, as Karpenter v1.12+ does
        ("1h30m", 0.0, 5400.0),
        ("1m", None, math.inf),  # not started yet: protected, as Karpenter fails safe
        ("0s", 100.0, None),  # neither "true" nor a positive duration: as if absent
        ("-1m", 100.0, None),
        ("soon", 100.0, None),
    ],
)
def test_do_not_disrupt_with_a_duration_protects_the_pod_from_its_start_for_that_long(
    value: str, started: float | None, until: float | None
) -> None:
    parsed = pod(metadata=f"annotations: {{karpenter.sh/do-not-disrupt: '{value}'}}")
    parsed = dataclasses.replace(parsed, start_time=started)
    assert parsed.do_not_disrupt_until() == until
    if until is not None and until < math.inf:
        assert parsed.do_not_disrupt_at(until - 1)
        assert not parsed.do_not_disrupt_at(until)


def test_pod_reads_its_start_time() -> None:
    parsed = pod(status="startTime: '2026-12-07T10:00:00Z'")
    assert parsed.start_time == datetime(2026, 12, 7, 10, tzinfo=UTC).timestamp()
    assert pod().start_time is None


def test_pod_without_name_or_generate_name_is_rejected() -> None:
    error = parse_error(Pod.parse, "metadata: {namespace: a}\nspec: {containers: []}")
    assert error == "metadata.name: required"


# --- nodes ---------------------------------------------------------------------------

NODE = """
metadata: {{name: node-a, labels: {{kubernetes.io/arch: amd64}}}}
spec:
  providerID: kwok://node-a
  taints: [{{key: karpenter.sh/unregistered, effect: NoExecute}}]
status:
  capacity: {{cpu: "4", memory: 16Gi, pods: "110"}}
  allocatable: {{cpu: 3920m, memory: 15Gi, pods: "110"}}
  conditions: {conditions}
"""


@pytest.mark.parametrize(
    ("conditions", "ready"),
    [
        ("[{type: Ready, status: 'True'}]", True),
        ("[{type: MemoryPressure, status: 'False'}, {type: Ready, status: 'True'}]", True),
        ("[{type: Ready, status: 'False'}]", False),
        ("[{type: Ready, status: Unknown}]", False),
        ("[{type: Ready}]", False),
        ("[{type: MemoryPressure, status: 'True'}]", False),
        ("[]", False),
    ],
)
def test_node_is_ready_only_with_a_true_ready_condition(conditions: str, ready: bool) -> None:
    assert Node.parse(FieldReader(load(NODE.format(conditions=conditions)))).ready is ready


def test_node_reads_provider_id_taints_and_resources() -> None:
    node = Node.parse(FieldReader(load(NODE.format(conditions="[]"))))
    assert node.name == "node-a"
    assert node.metadata.namespace == ""
    assert node.provider_id == "kwok://node-a"
    assert node.taints == (Taint("karpenter.sh/unregistered", "NoExecute"),)
    assert node.capacity == {"cpu": 4000, "memory": 16 * GI, "pods": 110}
    assert node.allocatable == {"cpu": 3920, "memory": 15 * GI, "pods": 110}


def test_a_pdb_without_a_selector_selects_no_pod_and_an_empty_one_selects_all() -> None:
    pod = Pod.parse(
        FieldReader(load("apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: shop, labels: {a: b}}\n"))
    )
    missing = PodDisruptionBudget.parse(
        FieldReader(load("metadata: {name: x, namespace: shop}\nspec: {maxUnavailable: 1}\n"))
    )
    empty = PodDisruptionBudget.parse(
        FieldReader(load("metadata: {name: x, namespace: shop}\nspec: {maxUnavailable: 1, selector: {}}\n"))
    )
    assert not missing.selects(pod)
    assert empty.selects(pod)


@pytest.mark.parametrize(("status", "ready"), [("True", True), ("False", False), (None, False)])
def test_a_pod_is_ready_when_its_ready_condition_is_true(status: str | None, ready: bool) -> None:
    conditions = [] if status is None else [{"type": "Ready", "status": status}]
    manifest = {
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "a"}]},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "PodScheduled", "status": "True"}, *conditions],
        },
    }
    assert Pod.parse(FieldReader(manifest)).ready is ready
