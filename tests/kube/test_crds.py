"""The CRDs' shape: what the API server and kubectl read from them, checked without a cluster.

The integration test (tests/integration/test_crds.py) applies them to a real API
server; these tests pin the parts a reader would otherwise have to dig out of a
long nested dict: group, names, scope, versions, status subresource, printer
columns and Karpenter's defaults.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from tests.support import run_cli

from karpy.api.crds import (
    V1BETA1,
    all_crds,
    ec2nodeclass_crd,
    kwoknodeclass_crd,
    nodeclaim_crd,
    nodepool_crd,
    render_yaml,
)

EXPECTED_NAMES = {
    "nodeoverlays.karpenter.sh": ("karpenter.sh", "NodeOverlay", "nodeoverlays", "v1alpha1"),
    "nodepools.karpenter.sh": ("karpenter.sh", "NodePool", "nodepools", "v1"),
    "nodeclaims.karpenter.sh": ("karpenter.sh", "NodeClaim", "nodeclaims", "v1"),
    "ec2nodeclasses.karpenter.k8s.aws": ("karpenter.k8s.aws", "EC2NodeClass", "ec2nodeclasses", "v1"),
    "kwoknodeclasses.karpenter.kwok.sh": (
        "karpenter.kwok.sh",
        "KWOKNodeClass",
        "kwoknodeclasses",
        "v1alpha1",
    ),
    "capacitybuffers.autoscaling.x-k8s.io": (
        "autoscaling.x-k8s.io",
        "CapacityBuffer",
        "capacitybuffers",
        "v1beta1",
    ),
}


def stored_version(crd: dict[str, Any]) -> dict[str, Any]:
    stored: list[dict[str, Any]] = [version for version in crd["spec"]["versions"] if version["storage"]]
    assert len(stored) == 1
    return stored[0]


def properties(schema: dict[str, Any], *path: str) -> dict[str, Any]:
    """The schema at ``path`` (property names) below ``schema``."""
    for name in path:
        schema = schema["properties"][name]
    return schema


def openapi(crd: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = stored_version(crd)["schema"]["openAPIV3Schema"]
    return schema


def columns(crd: dict[str, Any]) -> list[tuple[str, str, int]]:
    return [
        (column["name"].upper(), column["jsonPath"], column.get("priority", 0))
        for column in stored_version(crd)["additionalPrinterColumns"]
    ]


@pytest.mark.parametrize("crd", all_crds(), ids=lambda crd: crd["metadata"]["name"])
def test_every_crd_is_an_apiextensions_v1_crd_with_its_names_scope_and_status(crd: dict[str, Any]) -> None:
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    group, kind, plural, version = EXPECTED_NAMES[crd["metadata"]["name"]]
    spec = crd["spec"]
    assert spec["group"] == group
    assert spec["scope"] == ("Namespaced" if kind == "CapacityBuffer" else "Cluster")
    assert spec["names"]["kind"] == kind
    assert spec["names"]["plural"] == plural
    assert spec["names"]["singular"] == kind.lower()
    assert spec["names"]["listKind"] == f"{kind}List"
    assert crd["metadata"]["name"] == f"{plural}.{group}"
    stored = stored_version(crd)
    assert stored["name"] == version
    assert stored["served"] is True
    # A NodePool also scales, as Karpenter's does (kubectl scale nodepool: static NodePools).
    scale = {"scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.nodes"}}
    assert stored["subresources"] == {"status": {}, **(scale if kind == "NodePool" else {})}
    schema = openapi(crd)
    assert schema["type"] == "object"
    assert {"apiVersion", "kind", "metadata", "spec", "status"} <= set(schema["properties"])


def test_the_crds_cover_the_six_kinds_node_classes_first() -> None:
    assert [crd["metadata"]["name"] for crd in all_crds()] == [
        "ec2nodeclasses.karpenter.k8s.aws",
        "kwoknodeclasses.karpenter.kwok.sh",
        "nodepools.karpenter.sh",
        "nodeclaims.karpenter.sh",
        "capacitybuffers.autoscaling.x-k8s.io",
        "nodeoverlays.karpenter.sh",
    ]


def test_capacitybuffer_names_and_printer_columns_are_karpenters() -> None:
    (crd,) = [crd for crd in all_crds() if crd["spec"]["names"]["kind"] == "CapacityBuffer"]
    assert crd["spec"]["names"]["shortNames"] == ["cb"]
    assert crd["spec"]["names"]["categories"] == ["autoscaling"]
    assert [column[0] for column in columns(crd)] == [
        "STRATEGY",
        "PODTEMPLATE",
        "REPLICAS",
        "CONDITIONSTYPE",
        "CONDITIONSSTATUS",
        "CONDITIONSREASON",
        "AGE",
    ]


def test_nodeoverlay_names_and_printer_columns_are_karpenters() -> None:
    (crd,) = [crd for crd in all_crds() if crd["spec"]["names"]["kind"] == "NodeOverlay"]
    assert crd["spec"]["names"]["shortNames"] == ["overlays"]
    assert crd["spec"]["names"]["categories"] == ["karpenter"]
    assert columns(crd) == [
        ("READY", '.status.conditions[?(@.type=="Ready")].status', 0),
        ("AGE", ".metadata.creationTimestamp", 0),
        ("WEIGHT", ".spec.weight", 1),
    ]


def test_nodepool_printer_columns_are_karpenters() -> None:
    assert columns(nodepool_crd()) == [
        ("NODECLASS", ".spec.template.spec.nodeClassRef.name", 0),
        ("NODES", ".status.resources.nodes", 0),
        ("READY", '.status.conditions[?(@.type=="Ready")].status', 0),
        ("AGE", ".metadata.creationTimestamp", 0),
        ("WEIGHT", ".spec.weight", 1),
        ("CPU", ".status.resources.cpu", 1),
        ("MEMORY", ".status.resources.memory", 1),
    ]


def test_nodeclaim_printer_columns_are_karpenters() -> None:
    assert columns(nodeclaim_crd()) == [
        ("TYPE", r".metadata.labels.node\.kubernetes\.io/instance-type", 0),
        ("CAPACITY", r".metadata.labels.karpenter\.sh/capacity-type", 0),
        ("ZONE", r".metadata.labels.topology\.kubernetes\.io/zone", 0),
        ("NODE", ".status.nodeName", 0),
        ("READY", '.status.conditions[?(@.type=="Ready")].status', 0),
        ("AGE", ".metadata.creationTimestamp", 0),
        ("IMAGEID", ".status.imageID", 1),
        ("ID", ".status.providerID", 1),
        ("NODEPOOL", r".metadata.labels.karpenter\.sh/nodepool", 1),
        ("NODECLASS", ".spec.nodeClassRef.name", 1),
        ("DRIFTED", '.status.conditions[?(@.type=="Drifted")].status', 1),
    ]


def test_age_columns_are_dates() -> None:
    for crd in all_crds():
        (age,) = [
            column for column in stored_version(crd)["additionalPrinterColumns"] if column["name"] == "Age"
        ]
        assert age["type"] == "date"


def test_nodepool_defaults_are_karpenters() -> None:
    spec = properties(openapi(nodepool_crd()), "spec")
    disruption = properties(spec, "disruption")
    assert disruption["default"] == {"consolidateAfter": "0s"}
    assert properties(disruption, "consolidationPolicy")["default"] == "WhenEmptyOrUnderutilized"
    # Karpenter v1.15's enum, Balanced included and accepted (karpy.disruption.balanced).
    policy = properties(disruption, "consolidationPolicy")
    assert policy["enum"] == ["WhenEmpty", "WhenEmptyOrUnderutilized", "Balanced"]
    assert "x-kubernetes-validations" not in policy
    assert properties(disruption, "budgets")["default"] == [{"nodes": "10%"}]
    assert properties(disruption, "budgets")["items"]["properties"]["reasons"]["items"]["enum"] == [
        "Empty",
        "Underutilized",
        "Drifted",
        "Unhealthy",
    ]
    assert properties(spec, "template", "spec", "expireAfter")["default"] == "720h"
    weight = properties(spec, "weight")
    assert (weight["minimum"], weight["maximum"]) == (1, 100)
    assert properties(spec, "template", "spec")["required"] == ["nodeClassRef", "requirements"]


def test_nodeclaim_spec_is_immutable_and_defaults_expire_after() -> None:
    spec = properties(openapi(nodeclaim_crd()), "spec")
    assert {"rule": "self == oldSelf", "message": "spec is immutable"} in spec["x-kubernetes-validations"]
    assert properties(spec, "expireAfter")["default"] == "720h"
    assert set(properties(openapi(nodeclaim_crd()), "status")["properties"]) >= {
        "nodeName",
        "providerID",
        "imageID",
        "capacity",
        "allocatable",
        "conditions",
        "lastPodEventTime",
    }


def test_ec2nodeclass_requires_selector_terms_and_closes_karpenters_fields() -> None:
    crd = ec2nodeclass_crd()
    assert crd["spec"]["names"]["shortNames"] == ["ec2nc", "ec2ncs"]
    spec = properties(openapi(crd), "spec")
    assert spec["required"] == ["amiSelectorTerms", "securityGroupSelectorTerms", "subnetSelectorTerms"]
    # Block device mappings are Karpenter's fixed fields too: "volumeSiz" is refused, not kept.
    mapping = properties(spec, "blockDeviceMappings")["items"]
    assert "x-kubernetes-preserve-unknown-fields" not in mapping
    assert set(mapping["properties"]) == {"deviceName", "ebs", "rootVolume"}
    # The kubelet block is Karpenter's fixed set of fields: closed, so that a typo is refused.
    assert "x-kubernetes-preserve-unknown-fields" not in properties(spec, "kubelet")
    assert "maxPods" in properties(spec, "kubelet")["properties"]
    messages = [rule["message"] for rule in spec["x-kubernetes-validations"]]
    assert "must specify exactly one of ['role', 'instanceProfile']" in messages


def test_kwoknodeclass_has_one_version_and_no_v1beta1() -> None:
    crd = kwoknodeclass_crd()
    assert [version["name"] for version in crd["spec"]["versions"]] == ["v1alpha1"]


@pytest.mark.parametrize("crd", [nodepool_crd(), nodeclaim_crd(), ec2nodeclass_crd()])
def test_v1beta1_is_served_but_never_stored_and_refuses_every_write(crd: dict[str, Any]) -> None:
    (beta,) = [version for version in crd["spec"]["versions"] if version["name"] == V1BETA1]
    assert beta["served"] is True
    assert beta["storage"] is False
    assert beta["deprecated"] is True
    assert len(beta["deprecationWarning"]) <= 256  # the API server's limit
    (rule,) = beta["schema"]["openAPIV3Schema"]["x-kubernetes-validations"]
    assert rule["rule"] == "false"
    assert f"{crd['spec']['group']}/v1" in rule["message"]
    assert "karpy convert" in rule["message"]
    assert crd["spec"].get("conversion") is None  # strategy None: no webhook


def test_render_yaml_round_trips_through_safe_load_all() -> None:
    crds = all_crds()
    text = render_yaml(crds)
    assert text.startswith("---\n")
    assert list(yaml.safe_load_all(text)) == crds


def test_karpy_crds_prints_all_crds(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "crds")
    assert (code, err) == (0, "")
    assert out == render_yaml(all_crds())
