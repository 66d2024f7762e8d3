"""Every field of karpy's CRDs has an owner of its effect, or is refused in words.

Karpy's rule is that no field is accepted and ignored: a setting that passes
validation and then does nothing lets a user believe a behaviour is on. This
test walks the spec schemas of the CRDs karpy installs (NodePool, NodeClaim,
EC2NodeClass, KWOKNodeClass) and requires each field to be named here either
with the function whose behaviour it changes (``module:qualified.name``, which
must exist) or with the message that refuses it (which a case of
``tests/crd_cases.py`` must provoke, so the CRD and ``karpy validate`` both
refuse it). A field added to a CRD without an entry fails the test, and so does
an entry for a field that is gone. Where Karpenter v1.15's core CRDs are on the
machine (the Go module cache), their NodePool and NodeClaim fields must all be
karpy's too; the EC2NodeClass fields karpy lacks are refused as unsupported
(:data:`karpy.api.fields.UNSUPPORTED_FIELDS`).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.crd_cases import cel_witnesses

from karpy.api.crds import all_crds
from karpy.api.fields import UNSUPPORTED_FIELDS
from karpy.api.nodeclass import (
    CONTEXT_UNSUPPORTED_MESSAGE,
    SSM_PARAMETER_UNSUPPORTED_MESSAGE,
)
from karpy.api.taints import TIME_ADDED_UNSUPPORTED_MESSAGE

PROVISIONING = "karpy.controllers.provisioning:build_nodeclaim"
NODE_CLASS_REF = "karpy.controllers.state:node_class_problem"
SOLVER = "karpy.scheduling.solver:solve"
TAINTS = "karpy.scheduling.solver:_blocking_taint"
STARTUP_TAINTS = "karpy.controllers.nodeclaim:NodeClaimLifecycle._initialization_blocker"
BUDGETS = "karpy.disruption.budgets:allowed_disruptions"
BUDGET_WINDOW = "karpy.disruption.budgets:budget_active"
SIZING = "karpy.cloud.aws_catalog:instance_type_from_entry"
USER_DATA = "karpy.cloud.aws.userdata:render_user_data"
TEMPLATE = "karpy.cloud.aws.launchtemplates:LaunchOptions.template_data"
BLOCK_DEVICE = "karpy.cloud.aws.launchtemplates:_block_device"
RESERVATIONS = "karpy.cloud.aws.resolution:capacity_reservations"
RESERVATION_FILTERS = "karpy.cloud.aws.resolution:_reservation_filters"


def _claim_spec(prefix: str) -> dict[str, str]:
    """Owners of the NodeClaim spec fields a NodePool's template and a NodeClaim share."""
    owners = {
        "nodeClassRef": NODE_CLASS_REF,
        "nodeClassRef.group": NODE_CLASS_REF,
        "nodeClassRef.kind": NODE_CLASS_REF,
        "nodeClassRef.name": NODE_CLASS_REF,
        "requirements": SOLVER,
        "requirements[].key": SOLVER,
        "requirements[].operator": "karpy.api.requirements:Requirement.from_operator",
        "requirements[].values": SOLVER,
        "requirements[].minValues": "karpy.scheduling._model:min_values_met",
        "taints": TAINTS,
        "taints[].key": TAINTS,
        "taints[].value": TAINTS,
        "taints[].effect": TAINTS,
        "startupTaints": STARTUP_TAINTS,
        "startupTaints[].key": STARTUP_TAINTS,
        "startupTaints[].value": STARTUP_TAINTS,
        "startupTaints[].effect": STARTUP_TAINTS,
        "expireAfter": "karpy.disruption.expiration:expires_at",
        "terminationGracePeriod": "karpy.controllers.termination:Terminator.reconcile",
    }
    return {f"{prefix}{path}": owner for path, owner in owners.items()}


OWNERS: dict[str, dict[str, str]] = {
    "NodePool": {
        "spec.template": PROVISIONING,
        "spec.template.metadata": PROVISIONING,
        "spec.template.metadata.labels": PROVISIONING,
        "spec.template.metadata.annotations": PROVISIONING,
        "spec.template.spec": PROVISIONING,
        **_claim_spec("spec.template.spec."),
        "spec.disruption": "karpy.controllers.disruption:DisruptionController.reconcile",
        # WhenEmpty holds nodes with pods back; Balanced scores each move (karpy.disruption.balanced).
        "spec.disruption.consolidationPolicy": "karpy.disruption.candidates:consolidation_candidates",
        "spec.disruption.consolidateAfter": "karpy.disruption.emptiness:consolidatable_at",
        "spec.disruption.budgets": BUDGETS,
        "spec.disruption.budgets[].nodes": BUDGETS,
        "spec.disruption.budgets[].reasons": BUDGETS,
        "spec.disruption.budgets[].schedule": BUDGET_WINDOW,
        "spec.disruption.budgets[].duration": BUDGET_WINDOW,
        "spec.limits": "karpy.scheduling.solver:_Scheduler._within_limits",
        "spec.weight": "karpy.scheduling.solver:_Scheduler.__init__",
        "spec.replicas": "karpy.controllers.static:StaticCapacity.reconcile",
    },
    "NodeClaim": {
        **_claim_spec("spec."),
        "spec.resources": STARTUP_TAINTS,  # initialization waits for the requested resources
        "spec.resources.requests": STARTUP_TAINTS,
    },
    "EC2NodeClass": {
        "spec.subnetSelectorTerms": "karpy.cloud.aws.resolution:_subnets",
        "spec.subnetSelectorTerms[].tags": "karpy.cloud.aws.selectors:subnet_filters",
        "spec.subnetSelectorTerms[].id": "karpy.cloud.aws.selectors:subnet_filters",
        "spec.securityGroupSelectorTerms": "karpy.cloud.aws.resolution:_security_groups",
        "spec.securityGroupSelectorTerms[].tags": "karpy.cloud.aws.selectors:security_group_filters",
        "spec.securityGroupSelectorTerms[].id": "karpy.cloud.aws.selectors:security_group_filters",
        "spec.securityGroupSelectorTerms[].name": "karpy.cloud.aws.selectors:security_group_filters",
        "spec.amiSelectorTerms": "karpy.cloud.aws.resolution:_amis",
        "spec.amiSelectorTerms[].alias": "karpy.cloud.aws.selectors:alias_parameters",
        "spec.amiSelectorTerms[].tags": "karpy.cloud.aws.selectors:image_queries",
        "spec.amiSelectorTerms[].id": "karpy.cloud.aws.selectors:image_queries",
        "spec.amiSelectorTerms[].name": "karpy.cloud.aws.selectors:image_queries",
        "spec.amiSelectorTerms[].owner": "karpy.cloud.aws.selectors:image_queries",
        "spec.amiFamily": "karpy.cloud.aws.userdata:user_data",
        "spec.role": "karpy.cloud.aws.resolution:_instance_profile",
        "spec.instanceProfile": "karpy.cloud.aws.launchtemplates:launch_options",
        "spec.tags": "karpy.cloud.aws.launchtemplates:template_tags",
        "spec.kubelet": USER_DATA,
        # Sizing and the kubelet alike: karpy's allocatable is the kubelet's.
        "spec.kubelet.maxPods": SIZING,
        "spec.kubelet.podsPerCore": SIZING,
        "spec.kubelet.systemReserved": SIZING,
        "spec.kubelet.kubeReserved": SIZING,
        "spec.kubelet.evictionHard": SIZING,
        # The kubelet only (a Custom class refuses them: karpy.api.nodeclass.custom_kubelet_message).
        "spec.kubelet.clusterDNS": USER_DATA,
        "spec.kubelet.evictionSoft": USER_DATA,
        "spec.kubelet.evictionSoftGracePeriod": USER_DATA,
        "spec.kubelet.evictionMaxPodGracePeriod": USER_DATA,
        "spec.kubelet.imageGCHighThresholdPercent": USER_DATA,
        "spec.kubelet.imageGCLowThresholdPercent": USER_DATA,
        "spec.kubelet.cpuCFSQuota": USER_DATA,
        "spec.userData": USER_DATA,
        "spec.detailedMonitoring": TEMPLATE,
        "spec.associatePublicIPAddress": TEMPLATE,
        "spec.instanceStorePolicy": SIZING,  # and the user data's RAID0 step
        "spec.blockDeviceMappings": BLOCK_DEVICE,
        "spec.blockDeviceMappings[].deviceName": BLOCK_DEVICE,
        "spec.blockDeviceMappings[].rootVolume": "karpy.api.nodeclass:EC2NodeClass.ephemeral_volume_size",
        "spec.blockDeviceMappings[].ebs": BLOCK_DEVICE,
        "spec.blockDeviceMappings[].ebs.deleteOnTermination": BLOCK_DEVICE,
        "spec.blockDeviceMappings[].ebs.encrypted": BLOCK_DEVICE,
        "spec.blockDeviceMappings[].ebs.iops": BLOCK_DEVICE,
        "spec.blockDeviceMappings[].ebs.kmsKeyID": BLOCK_DEVICE,
        "spec.blockDeviceMappings[].ebs.snapshotID": BLOCK_DEVICE,
        "spec.blockDeviceMappings[].ebs.throughput": BLOCK_DEVICE,
        "spec.blockDeviceMappings[].ebs.volumeInitializationRate": BLOCK_DEVICE,
        "spec.blockDeviceMappings[].ebs.volumeSize": BLOCK_DEVICE,
        "spec.capacityReservationSelectorTerms": RESERVATIONS,
        "spec.capacityReservationSelectorTerms[].tags": RESERVATION_FILTERS,
        "spec.capacityReservationSelectorTerms[].id": RESERVATIONS,
        "spec.capacityReservationSelectorTerms[].ownerID": RESERVATION_FILTERS,
        "spec.capacityReservationSelectorTerms[].instanceMatchCriteria": RESERVATION_FILTERS,
        "spec.blockDeviceMappings[].ebs.volumeType": BLOCK_DEVICE,
        "spec.metadataOptions": TEMPLATE,
        "spec.metadataOptions.httpEndpoint": TEMPLATE,
        "spec.metadataOptions.httpProtocolIPv6": TEMPLATE,
        "spec.metadataOptions.httpPutResponseHopLimit": TEMPLATE,
        "spec.metadataOptions.httpTokens": TEMPLATE,
    },
    "KWOKNodeClass": {
        "spec.nodeRegistrationDelay": "karpy.cloud.kwok.provider:KwokCloudProvider._registration_delay_of",
    },
}

# Fields the CRDs keep (so a manifest's shape is checked) but refuse when set, by message.
_TIMED_TAINTS = {
    f"{prefix}{field}[].timeAdded": TIME_ADDED_UNSUPPORTED_MESSAGE
    for field in ("taints", "startupTaints")
    for prefix in ("spec.", "spec.template.spec.")
}
REFUSED: dict[str, dict[str, str]] = {
    "NodePool": {
        path: message for path, message in _TIMED_TAINTS.items() if path.startswith("spec.template")
    },
    "NodeClaim": {
        path: message for path, message in _TIMED_TAINTS.items() if not path.startswith("spec.template")
    },
    "EC2NodeClass": {
        "spec.context": CONTEXT_UNSUPPORTED_MESSAGE,
        "spec.amiSelectorTerms[].ssmParameter": SSM_PARAMETER_UNSUPPORTED_MESSAGE,
    },
    "KWOKNodeClass": {},
}
KINDS = ("NodePool", "NodeClaim", "EC2NodeClass", "KWOKNodeClass")
KARPENTER_CRDS = Path.home() / "go/pkg/mod/sigs.k8s.io/karpenter@v1.15.0/pkg/apis/crds"


def field_paths(schema: dict[str, Any], path: str = "spec") -> set[str]:
    """Every field under ``schema``: ``a.b``, list items as ``a[].b``; free-form maps are leaves."""
    found: set[str] = set()
    for name, field in schema.get("properties", {}).items():
        child = f"{path}.{name}"
        found.add(child)
        found |= field_paths(field, child)
    items = schema.get("items")
    if isinstance(items, dict):
        found |= field_paths(items, f"{path}[]")
    return found


def spec_schema(crd: dict[str, Any]) -> dict[str, Any]:
    version = next(version for version in crd["spec"]["versions"] if version.get("storage"))
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema


def karpys_fields() -> dict[str, set[str]]:
    return {crd["spec"]["names"]["kind"]: field_paths(spec_schema(crd)) for crd in all_crds()}


@pytest.mark.parametrize("kind", KINDS)
def test_every_field_has_an_owner_or_a_refusal(kind: str) -> None:
    fields = karpys_fields()[kind]
    named = set(OWNERS[kind]) | set(REFUSED[kind])
    assert not set(OWNERS[kind]) & set(REFUSED[kind])
    assert sorted(fields - named) == [], "a field with neither an owner nor a refusal"
    assert sorted(named - fields) == [], "an entry for a field the CRD no longer has"


@pytest.mark.parametrize("owner", sorted({owner for owners in OWNERS.values() for owner in owners.values()}))
def test_each_owner_exists(owner: str) -> None:
    module_name, _, qualified = owner.partition(":")
    found: object = importlib.import_module(module_name)
    for part in filter(None, qualified.split(".")):
        found = getattr(found, part)
    assert found is not None


@pytest.mark.parametrize(
    ("kind", "path", "message"),
    [(kind, path, message) for kind in KINDS for path, message in REFUSED[kind].items()],
)
def test_each_refusal_is_a_rule_of_the_crd_with_a_case(kind: str, path: str, message: str) -> None:
    """The CRD refuses it with these words, and a case shows the loader and the API server doing so."""
    rule_path = path.replace("[]", "")
    while rule_path and not cel_witnesses(kind, rule_path, message):
        rule_path = rule_path.rpartition(".")[0]
    assert rule_path, f"no case of tests/crd_cases.py refuses {kind} {path} with {message!r}"


@pytest.mark.skipif(not KARPENTER_CRDS.is_dir(), reason="Karpenter v1.15's module is not in the Go cache")
@pytest.mark.parametrize(("kind", "file"), [("NodePool", "nodepools"), ("NodeClaim", "nodeclaims")])
def test_karpenter_v1_15_has_no_field_karpy_lacks(kind: str, file: str) -> None:
    crd = yaml.safe_load((KARPENTER_CRDS / f"karpenter.sh_{file}.yaml").read_text())
    assert sorted(field_paths(spec_schema(crd)) - karpys_fields()[kind]) == []


def test_karpenters_newer_ec2nodeclass_fields_are_refused_as_unsupported() -> None:
    refused = {path for (_, kind, path) in UNSUPPORTED_FIELDS if kind == "EC2NodeClass"}
    assert refused == {
        "spec.placementGroupSelector",
        "spec.connectionTracking",
        "spec.networkInterfaces",
        "spec.ipPrefixCount",
        "spec.cpuOptions",
    }
    assert not refused & karpys_fields()["EC2NodeClass"]
