"""karpy's CRDs against a real API server: installed, defaulted, validated, printed by kubectl.

The CRDs are applied once for the module with ``kubectl apply -f -`` (the output of
``karpy crds``) and deleted at the end, with the objects the tests made, since the
control plane is shared by the whole session. Each test checks what a user would
see: the seed manifests accepted unchanged, Karpenter's defaults filled in by the
API server, bad values refused by schema and CEL validation, a v1beta1 manifest
refused with a message that says how to convert it, and ``kubectl get``'s columns.
"""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.integration.conftest import ControlPlane, install_crds

from karpy.api.requirements import LABEL_NODEPOOL, NORMALIZED_LABELS, WELL_KNOWN_LABELS

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SEED_V1 = REPO / "tests" / "data" / "seed-v1"
SEED_V1BETA1_NODEPOOL = REPO / "src" / "karpy" / "sim" / "scenarios" / "seed" / "nodepool.yaml"
EVERY_FIELD_V1 = REPO / "tests" / "data" / "realworld" / "nodepool-v1-every-field.yaml"

KWOK_NODE_CLASS = """\
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: it-crds}
"""

NODECLAIM = """\
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: it-crds-abcde
  labels:
    karpenter.sh/nodepool: default
    node.kubernetes.io/instance-type: c5.large
    karpenter.sh/capacity-type: spot
    topology.kubernetes.io/zone: us-east-1a
spec:
  requirements:
    - {key: node.kubernetes.io/instance-type, operator: In, values: [c5.large]}
  nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: it-crds}
  resources: {requests: {cpu: "1", memory: 1Gi}}
"""


def nodepool(name: str, spec_lines: str = "") -> str:
    return f"""\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {name}}}
spec:
{spec_lines}  template:
    spec:
      requirements: []
      nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: it-crds}}
"""


def kubectl_failing(plane: ControlPlane, *args: str, stdin: str | None = None) -> str:
    """Run kubectl expecting it to fail; return its standard error."""
    result = subprocess.run(
        [plane.kubectl_path, "--kubeconfig", str(plane.kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0, f"kubectl {' '.join(args)} succeeded:\n{result.stdout}"
    return result.stderr


def header(table: str) -> list[str]:
    return table.splitlines()[0].split()


@pytest.fixture(scope="module")
def crds(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    names = install_crds(control_plane)
    yield control_plane
    for kind in ("nodeclaims", "nodepools", "ec2nodeclasses", "kwoknodeclasses"):
        control_plane.kubectl("delete", kind, "--all", "--ignore-not-found", "--wait=true")
    control_plane.kubectl("delete", "crd", *names, "--ignore-not-found", "--wait=true")


def test_seed_v1_manifests_are_accepted_and_defaulted(crds: ControlPlane) -> None:
    crds.kubectl("apply", "-f", str(SEED_V1 / "ec2nodeclass.yaml"), "-f", str(SEED_V1 / "nodepool.yaml"))

    assert header(crds.kubectl("get", "nodepools")) == ["NAME", "NODECLASS", "NODES", "READY", "AGE"]
    assert header(crds.kubectl("get", "nodepools", "-o", "wide")) == [
        *["NAME", "NODECLASS", "NODES", "READY", "AGE"],
        *["WEIGHT", "CPU", "MEMORY"],
    ]
    pool = json.loads(crds.kubectl("get", "nodepool", "default", "-o", "json"))
    assert pool["apiVersion"] == "karpenter.sh/v1"
    assert pool["spec"]["disruption"]["budgets"] == [{"nodes": "10%"}]
    assert pool["spec"]["disruption"]["consolidateAfter"] == "30s"  # as written
    node_class = json.loads(crds.kubectl("get", "ec2nodeclass", "default", "-o", "json"))
    assert node_class["spec"]["amiSelectorTerms"] == [{"alias": "al2@latest"}]
    assert node_class["spec"]["metadataOptions"]["httpTokens"] == "required"


def test_every_karpenter_field_is_accepted_and_a_misspelt_kubelet_or_metadata_option_refused(
    crds: ControlPlane,
) -> None:
    text = EVERY_FIELD_V1.read_text().replace("name: default", "name: it-crds-every-field")
    crds.kubectl("apply", "-f", "-", stdin=text)
    node_class = json.loads(crds.kubectl("get", "ec2nodeclass", "it-crds-every-field", "-o", "json"))
    assert node_class["spec"]["kubelet"]["maxPods"] == 20
    assert node_class["spec"]["metadataOptions"]["httpPutResponseHopLimit"] == 1
    for written, misspelt, field in [
        ("maxPods: 20", "maxPod: 20", "spec.kubelet.maxPod"),
        ("httpTokens: required", "httpToken: required", "spec.metadataOptions.httpToken"),
    ]:
        typo = text.replace(written, misspelt).replace("it-crds-every-field", "it-crds-typo")
        error = kubectl_failing(crds, "apply", "-f", "-", stdin=typo)
        assert f'unknown field "{field}"' in error, error


def test_a_minimal_nodepool_gets_every_karpenter_default(crds: ControlPlane) -> None:
    crds.kubectl("apply", "-f", "-", stdin=KWOK_NODE_CLASS + "---\n" + nodepool("it-crds-minimal"))
    spec = json.loads(crds.kubectl("get", "nodepool", "it-crds-minimal", "-o", "json"))["spec"]
    assert spec["disruption"] == {
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "consolidateAfter": "0s",
        "budgets": [{"nodes": "10%"}],
    }
    assert spec["template"]["spec"]["expireAfter"] == "720h"


def test_v1beta1_nodepool_is_rejected_with_how_to_convert(crds: ControlPlane) -> None:
    error = kubectl_failing(crds, "create", "-f", str(SEED_V1BETA1_NODEPOOL))
    assert "karpenter.sh/v1beta1 is not accepted" in error
    assert "karpy convert" in error
    assert "karpenter.sh/v1" in error


@pytest.mark.parametrize(
    ("spec_lines", "expected"),
    [
        ("  disruption: {consolidationPolicy: Sometimes, consolidateAfter: 0s}\n", "Sometimes"),
        ("  weight: 200\n", "spec.weight"),
        ('  disruption: {consolidateAfter: 0s, budgets: [{nodes: "110%"}]}\n', "budgets[0].nodes"),
        (
            '  disruption: {consolidateAfter: 0s, budgets: [{nodes: "1", schedule: "@daily"}]}\n',
            "'schedule' must be set with 'duration'",
        ),
    ],
    ids=["unknown-consolidation-policy", "weight-200", "budget-110-percent", "schedule-without-duration"],
)
def test_invalid_v1_nodepool_is_rejected(crds: ControlPlane, spec_lines: str, expected: str) -> None:
    error = kubectl_failing(crds, "create", "-f", "-", stdin=nodepool("it-crds-invalid", spec_lines))
    assert "is invalid" in error
    assert expected in error


@pytest.mark.parametrize("cpu", ['"-5"', "-5", '"-500m"'], ids=["string", "integer", "millicores"])
def test_a_negative_limit_is_rejected(crds: ControlPlane, cpu: str) -> None:
    manifest = nodepool("it-crds-negative", f"  limits: {{cpu: {cpu}, memory: 1Gi}}\n")
    error = kubectl_failing(crds, "create", "-f", "-", stdin=manifest)
    assert "is invalid" in error and "spec.limits.cpu" in error


def test_non_negative_limits_are_accepted(crds: ControlPlane) -> None:
    manifest = nodepool("it-crds-limits", '  limits: {cpu: 5, memory: "+1Gi", nvidia.com/gpu: "0"}\n')
    crds.kubectl("create", "-f", "-", stdin=manifest)
    crds.kubectl("delete", "nodepool", "it-crds-limits", "--wait=true")


def test_restricted_requirement_key_is_rejected_by_cel(crds: ControlPlane) -> None:
    manifest = nodepool("it-crds-hostname").replace(
        "requirements: []", "requirements: [{key: kubernetes.io/hostname, operator: Exists}]"
    )
    error = kubectl_failing(crds, "create", "-f", "-", stdin=manifest)
    assert 'label "kubernetes.io/hostname" is restricted' in error


def test_nodeclaim_columns_status_subresource_and_immutable_spec(crds: ControlPlane) -> None:
    crds.kubectl("apply", "-f", "-", stdin=KWOK_NODE_CLASS + "---\n" + NODECLAIM)
    table = crds.kubectl("get", "nodeclaims")
    assert header(table) == ["NAME", "TYPE", "CAPACITY", "ZONE", "NODE", "READY", "AGE"]
    assert table.splitlines()[1].split()[:4] == ["it-crds-abcde", "c5.large", "spot", "us-east-1a"]

    status = {
        "status": {
            "nodeName": "it-crds-node",
            "providerID": "kwok://it-crds-node",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Ready",
                    "lastTransitionTime": "2024-01-01T00:00:00Z",
                }
            ],
        }
    }
    crds.kubectl(
        "patch",
        "nodeclaim",
        "it-crds-abcde",
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(status),
    )
    row = crds.kubectl("get", "nodeclaims", "--no-headers").split()
    assert row[:6] == ["it-crds-abcde", "c5.large", "spot", "us-east-1a", "it-crds-node", "True"]
    wide = crds.kubectl("get", "nodeclaims", "-o", "wide")
    assert header(wide)[7:] == ["IMAGEID", "ID", "NODEPOOL", "NODECLASS", "DRIFTED"]

    error = kubectl_failing(
        crds, "patch", "nodeclaim", "it-crds-abcde", "--type=merge", "-p", '{"spec":{"expireAfter":"1h"}}'
    )
    assert "spec is immutable" in error


# --- Karpenter's validation rules, one bad object each -----------------------------------------
#
# Each case is a small change to a valid object, sent with ``kubectl create --dry-run=server``:
# the API server runs the whole admission chain (schema, CEL) and stores nothing, so the cases
# need no clean-up and one API server checks them all quickly.

DOCS_EXAMPLES = REPO / "tests" / "data" / "karpenter-docs"
REALWORLD = REPO / "tests" / "data" / "realworld"
RULE_OBJECT = "it-crds-rule"

POOL: dict[str, Any] = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodePool",
    "metadata": {"name": RULE_OBJECT},
    "spec": {
        "template": {
            "spec": {
                "requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            }
        }
    },
}
NODE_CLASS: dict[str, Any] = {
    "apiVersion": "karpenter.k8s.aws/v1",
    "kind": "EC2NodeClass",
    "metadata": {"name": RULE_OBJECT},
    "spec": {
        "role": "KarpenterNodeRole-it",
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "it"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "it"}}],
    },
}
CLAIM: dict[str, Any] = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodeClaim",
    "metadata": {"name": RULE_OBJECT},
    "spec": {
        "requirements": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.large"]}
        ],
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
    },
}


def merged(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``patch`` merged in: mappings merge, anything else (lists too) replaces."""
    result = copy.deepcopy(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merged(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def pool(spec: dict[str, Any]) -> dict[str, Any]:
    return merged(POOL, {"spec": spec})


def claim_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """A NodePool whose template spec has ``spec`` merged in."""
    return pool({"template": {"spec": spec}})


def requirement(key: str, operator: str, *values: str, **extra: Any) -> dict[str, Any]:
    """A NodePool with the one requirement."""
    item: dict[str, Any] = {"key": key, "operator": operator, **extra}
    if values:
        item["values"] = list(values)
    return claim_spec({"requirements": [item]})


def template_labels(keys: dict[str, str]) -> dict[str, Any]:
    return pool({"template": {"metadata": {"labels": keys}}})


def node_class(spec: dict[str, Any]) -> dict[str, Any]:
    return merged(NODE_CLASS, {"spec": spec})


def kubelet(settings: dict[str, Any]) -> dict[str, Any]:
    return node_class({"kubelet": settings})


def dry_run_create(plane: ControlPlane, manifest: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [plane.kubectl_path, "--kubeconfig", str(plane.kubeconfig), "create", "--dry-run=server", "-f", "-"],
        input=json.dumps(manifest),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


SELECTOR_TAGS = {"karpenter.sh/discovery": "it"}
BAD_OBJECTS: list[tuple[str, dict[str, Any], str]] = [
    # Requirement keys and template labels outside the restricted label domains.
    (
        "requirement-kubernetes-io",
        requirement("kubernetes.io/team", "Exists"),
        'label domain "kubernetes.io" is restricted',
    ),
    (
        "requirement-k8s-io",
        requirement("example.k8s.io/team", "Exists"),
        'label domain "k8s.io" is restricted',
    ),
    (
        "requirement-karpenter-sh",
        requirement("karpenter.sh/team", "Exists"),
        'label domain "karpenter.sh" is restricted',
    ),
    (
        "requirement-karpenter-k8s-aws",
        requirement("karpenter.k8s.aws/team", "Exists"),
        'label domain "karpenter.k8s.aws" is restricted',
    ),
    (
        "requirement-nodepool",
        requirement("karpenter.sh/nodepool", "In", "other"),
        'label "karpenter.sh/nodepool" is restricted',
    ),
    (
        "label-kubernetes-io",
        template_labels({"kubernetes.io/team": "a"}),
        'label domain "kubernetes.io" is restricted',
    ),
    ("label-k8s-io", template_labels({"example.k8s.io/team": "a"}), 'label domain "k8s.io" is restricted'),
    (
        "label-karpenter-sh",
        template_labels({"karpenter.sh/team": "a"}),
        'label domain "karpenter.sh" is restricted',
    ),
    (
        "label-karpenter-k8s-aws",
        template_labels({"karpenter.k8s.aws/team": "a"}),
        'label domain "karpenter.k8s.aws" is restricted',
    ),
    (
        "label-nodepool",
        template_labels({"karpenter.sh/nodepool": "other"}),
        'label "karpenter.sh/nodepool" is restricted',
    ),
    (
        "label-hostname",
        template_labels({"kubernetes.io/hostname": "node-a"}),
        'label "kubernetes.io/hostname" is restricted',
    ),
    ("label-value-too-long", template_labels({"team": "a" * 64}), "may not be more than 63"),
    # Operators and their values.
    ("unknown-operator", requirement("team", "Equals", "a"), 'Unsupported value: "Equals"'),
    (
        "in-without-values",
        requirement("team", "In"),
        "requirements with operator 'In' must have a value defined",
    ),
    (
        "gt-with-two-values",
        requirement("karpenter.k8s.aws/instance-cpu", "Gt", "2", "4"),
        "requirements operator 'Gt' or 'Lt' must have a single positive integer value",
    ),
    (
        "lt-negative",
        requirement("karpenter.k8s.aws/instance-cpu", "Lt", "-1"),
        "requirements operator 'Gt' or 'Lt' must have a single positive integer value",
    ),
    (
        "min-values-above-values",
        requirement("team", "In", "a", "b", minValues=3),
        "requirements with 'minValues' must have at least that many values specified in the 'values' field",
    ),
    ("min-values-zero", requirement("team", "Exists", minValues=0), "greater than or equal to 1"),
    ("min-values-51", requirement("team", "Exists", minValues=51), "less than or equal to 50"),
    # Budgets, consolidation and durations.
    (
        "budget-110-percent",
        pool({"disruption": {"consolidateAfter": "0s", "budgets": [{"nodes": "110%"}]}}),
        "should match",
    ),
    (
        "budget-negative",
        pool({"disruption": {"consolidateAfter": "0s", "budgets": [{"nodes": "-1"}]}}),
        "should match",
    ),
    (
        "budget-words",
        pool({"disruption": {"consolidateAfter": "0s", "budgets": [{"nodes": "ten"}]}}),
        "should match",
    ),
    (
        "duration-without-schedule",
        pool({"disruption": {"consolidateAfter": "0s", "budgets": [{"nodes": "0", "duration": "10m"}]}}),
        "'schedule' must be set with 'duration'",
    ),
    (
        "budget-duration-in-seconds",
        pool(
            {
                "disruption": {
                    "consolidateAfter": "0s",
                    "budgets": [{"nodes": "0", "schedule": "@daily", "duration": "30s"}],
                }
            }
        ),
        "budgets[0].duration",
    ),
    (
        "budget-schedule-not-cron",
        pool(
            {
                "disruption": {
                    "consolidateAfter": "0s",
                    "budgets": [{"nodes": "0", "schedule": "daily", "duration": "1h"}],
                }
            }
        ),
        "budgets[0].schedule",
    ),
    (
        "budget-unknown-reason",
        pool({"disruption": {"consolidateAfter": "0s", "budgets": [{"nodes": "1", "reasons": ["Expired"]}]}}),
        'Unsupported value: "Expired"',
    ),
    ("consolidate-after-days", pool({"disruption": {"consolidateAfter": "1d"}}), "consolidateAfter"),
    ("consolidate-after-bare-number", pool({"disruption": {"consolidateAfter": "30"}}), "consolidateAfter"),
    (
        "consolidate-after-missing",
        pool({"disruption": {"consolidationPolicy": "WhenEmpty"}}),
        "Required value",
    ),
    ("expire-after-forever", claim_spec({"expireAfter": "forever"}), "expireAfter"),
    ("termination-grace-never", claim_spec({"terminationGracePeriod": "Never"}), "terminationGracePeriod"),
    ("weight-zero", pool({"weight": 0}), "greater than or equal to 1"),
    (
        "taint-effect",
        claim_spec({"taints": [{"key": "team", "effect": "Sometimes"}]}),
        'Unsupported value: "Sometimes"',
    ),
    # The node class reference.
    (
        "node-class-group-empty",
        claim_spec({"nodeClassRef": {"group": ""}}),
        "group may not be empty",
    ),
    ("node-class-kind-empty", claim_spec({"nodeClassRef": {"kind": ""}}), "kind may not be empty"),
    ("node-class-name-empty", claim_spec({"nodeClassRef": {"name": ""}}), "name may not be empty"),
    # NodeClaims: requests are not negative either.
    (
        "nodeclaim-negative-request",
        merged(CLAIM, {"spec": {"resources": {"requests": {"cpu": "-1"}}}}),
        "spec.resources.requests.cpu",
    ),
    (
        "nodeclaim-in-without-values",
        merged(CLAIM, {"spec": {"requirements": [{"key": "team", "operator": "In"}]}}),
        "requirements with operator 'In' must have a value defined",
    ),
    # EC2NodeClass selector terms.
    ("subnets-empty", node_class({"subnetSelectorTerms": []}), "subnetSelectorTerms cannot be empty"),
    (
        "security-groups-empty",
        node_class({"securityGroupSelectorTerms": []}),
        "securityGroupSelectorTerms cannot be empty",
    ),
    ("amis-empty", node_class({"amiSelectorTerms": []}), "should have at least 1 items"),
    (
        "subnet-term-empty",
        node_class({"subnetSelectorTerms": [{}]}),
        "expected at least one, got none, ['tags', 'id']",
    ),
    (
        "subnet-id-and-tags",
        node_class({"subnetSelectorTerms": [{"id": "subnet-0abc", "tags": SELECTOR_TAGS}]}),
        "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector "
        "term",
    ),
    (
        "subnet-id-malformed",
        node_class({"subnetSelectorTerms": [{"id": "sn-0abc"}]}),
        "subnetSelectorTerms[0].id",
    ),
    (
        "security-group-term-empty",
        node_class({"securityGroupSelectorTerms": [{}]}),
        "expected at least one, got none, ['tags', 'id', 'name']",
    ),
    (
        "security-group-id-and-name",
        node_class({"securityGroupSelectorTerms": [{"id": "sg-0abc", "name": "web"}]}),
        "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group "
        "selector term",
    ),
    (
        "security-group-name-and-tags",
        node_class({"securityGroupSelectorTerms": [{"name": "web", "tags": SELECTOR_TAGS}]}),
        "'name' is mutually exclusive, cannot be set with a combination of other fields in a security group "
        "selector term",
    ),
    (
        "selector-tag-value-empty",
        node_class({"subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": ""}}]}),
        "empty tag keys or values aren't supported",
    ),
    (
        "ami-term-owner-only",
        node_class({"amiFamily": "AL2023", "amiSelectorTerms": [{"owner": "self"}]}),
        "expected at least one, got none, ['tags', 'id', 'name', 'alias']",
    ),
    (
        "ami-id-and-owner",
        node_class({"amiFamily": "AL2023", "amiSelectorTerms": [{"id": "ami-0abc", "owner": "self"}]}),
        "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
    ),
    (
        "ami-alias-and-tags",
        node_class({"amiSelectorTerms": [{"alias": "al2023@latest", "tags": SELECTOR_TAGS}]}),
        "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
    ),
    (
        "ami-alias-and-another-term",
        node_class({"amiSelectorTerms": [{"alias": "al2023@latest"}, {"tags": SELECTOR_TAGS}]}),
        "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms",
    ),
    (
        "ami-alias-without-version",
        node_class({"amiSelectorTerms": [{"alias": "al2023"}]}),
        "'alias' is improperly formatted, must match the format 'family@version'",
    ),
    (
        "ami-alias-unknown-family",
        node_class({"amiSelectorTerms": [{"alias": "ubuntu@latest"}]}),
        "family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', "
        "'windows2019', 'windows2022'",
    ),
    (
        "ami-alias-windows-pinned",
        node_class({"amiSelectorTerms": [{"alias": "windows2022@v20240101"}]}),
        "windows families may only specify version 'latest'",
    ),
    (
        "ami-alias-too-long",
        node_class({"amiSelectorTerms": [{"alias": "bottlerocket@v1.20.0-aaaaaaaaaaaaa"}]}),
        "may not be more than 30",
    ),
    (
        "ami-family-other-than-alias",
        node_class({"amiFamily": "AL2", "amiSelectorTerms": [{"alias": "al2023@latest"}]}),
        "if set, amiFamily must be 'AL2023' or 'Custom' when using an AL2023 alias",
    ),
    (
        "ami-family-bottlerocket-alias",
        node_class({"amiFamily": "AL2023", "amiSelectorTerms": [{"alias": "bottlerocket@latest"}]}),
        "if set, amiFamily must be 'Bottlerocket' or 'Custom' when using a Bottlerocket alias",
    ),
    (
        "ami-family-missing",
        node_class({"amiSelectorTerms": [{"tags": SELECTOR_TAGS}]}),
        "must specify amiFamily if amiSelectorTerms does not contain an alias",
    ),
    ("ami-family-ubuntu", node_class({"amiFamily": "Ubuntu"}), 'Unsupported value: "Ubuntu"'),
    # Role, instance profile and tags.
    (
        "role-and-instance-profile",
        node_class({"instanceProfile": "KarpenterNodeInstanceProfile-it"}),
        "must specify exactly one of ['role', 'instanceProfile']",
    ),
    ("role-empty", node_class({"role": ""}), "role cannot be empty"),
    (
        "tag-cluster",
        node_class({"tags": {"kubernetes.io/cluster/it": "owned"}}),
        "tag contains a restricted tag matching kubernetes.io/cluster/",
    ),
    (
        "tag-eks-cluster-name",
        node_class({"tags": {"eks:eks-cluster-name": "it"}}),
        "tag contains a restricted tag matching eks:eks-cluster-name",
    ),
    (
        "tag-nodepool",
        node_class({"tags": {"karpenter.sh/nodepool": "default"}}),
        "tag contains a restricted tag matching karpenter.sh/nodepool",
    ),
    (
        "tag-nodeclaim",
        node_class({"tags": {"karpenter.sh/nodeclaim": "default-abcde"}}),
        "tag contains a restricted tag matching karpenter.sh/nodeclaim",
    ),
    (
        "tag-ec2nodeclass",
        node_class({"tags": {"karpenter.k8s.aws/ec2nodeclass": "default"}}),
        "tag contains a restricted tag matching karpenter.k8s.aws/ec2nodeclass",
    ),
    # Kubelet settings.
    ("kubelet-max-pods-negative", kubelet({"maxPods": -1}), "greater than or equal to 0"),
    (
        "kubelet-eviction-signal",
        kubelet({"evictionHard": {"memory.free": "5%"}}),
        "valid keys for evictionHard are ['memory.available', 'nodefs.available', 'nodefs.inodesFree', "
        "'imagefs.available', 'imagefs.inodesFree', 'pid.available']",
    ),
    ("kubelet-eviction-threshold", kubelet({"evictionHard": {"memory.available": "lots"}}), "should match"),
    ("kubelet-eviction-over-100", kubelet({"evictionHard": {"memory.available": "101%"}}), "should match"),
    (
        "kubelet-reserved-resource",
        kubelet({"kubeReserved": {"nvidia.com/gpu": "1"}}),
        "valid keys for kubeReserved are ['cpu', 'memory', 'ephemeral-storage', 'pid']",
    ),
    (
        "kubelet-reserved-negative",
        kubelet({"systemReserved": {"cpu": "-100m"}}),
        "systemReserved value cannot be a negative resource quantity",
    ),
    (
        "kubelet-image-gc-order",
        kubelet({"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 60}),
        "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent",
    ),
    (
        "kubelet-soft-eviction-without-grace",
        kubelet({"evictionSoft": {"memory.available": "500Mi"}}),
        "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod",
    ),
    (
        "kubelet-grace-without-soft-eviction",
        kubelet({"evictionSoftGracePeriod": {"memory.available": "1m"}}),
        "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft",
    ),
    # Instance metadata and block devices.
    (
        "metadata-hop-limit",
        node_class({"metadataOptions": {"httpPutResponseHopLimit": 65}}),
        "less than or equal to 64",
    ),
    (
        "two-root-volumes",
        node_class(
            {
                "blockDeviceMappings": [
                    {"deviceName": "/dev/xvda", "rootVolume": True, "ebs": {"volumeSize": "20Gi"}},
                    {"deviceName": "/dev/xvdb", "rootVolume": True, "ebs": {"volumeSize": "20Gi"}},
                ]
            }
        ),
        "must have only one blockDeviceMappings with rootVolume",
    ),
    (
        "volume-without-size-or-snapshot",
        node_class({"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeType": "gp3"}}]}),
        "snapshotID or volumeSize must be defined",
    ),
    (
        "volume-size-unit",
        node_class({"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "100Mi"}}]}),
        "volumeSize",
    ),
    (
        "volume-type",
        node_class(
            {
                "blockDeviceMappings": [
                    {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "1Gi", "volumeType": "gp4"}}
                ]
            }
        ),
        'Unsupported value: "gp4"',
    ),
    (
        "volume-field-misspelt",
        node_class({"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSiz": "1Gi"}}]}),
        'unknown field "spec.blockDeviceMappings[0].ebs.volumeSiz"',
    ),
    # Capacity reservations.
    (
        "reservation-owner-only",
        node_class({"capacityReservationSelectorTerms": [{"ownerID": "123456789012"}]}),
        "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']",
    ),
    (
        "reservation-id-and-tags",
        node_class({"capacityReservationSelectorTerms": [{"id": "cr-0abc", "tags": SELECTOR_TAGS}]}),
        "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation "
        "selector term",
    ),
    (
        "reservation-id-malformed",
        node_class({"capacityReservationSelectorTerms": [{"id": "res-0abc"}]}),
        "capacityReservationSelectorTerms[0].id",
    ),
]


@pytest.mark.parametrize(
    ("manifest", "expected"), [case[1:] for case in BAD_OBJECTS], ids=[case[0] for case in BAD_OBJECTS]
)
def test_karpenters_rule_refuses_the_bad_object_with_its_message(
    crds: ControlPlane, manifest: dict[str, Any], expected: str
) -> None:
    result = dry_run_create(crds, manifest)
    assert result.returncode != 0, f"accepted:\n{json.dumps(manifest, indent=1)}"
    assert "is invalid" in result.stderr or "unknown field" in result.stderr, result.stderr
    assert expected in result.stderr, result.stderr


GOOD_OBJECTS: list[tuple[str, dict[str, Any]]] = [
    *(
        (
            f"budget-nodes-{nodes}",
            pool({"disruption": {"consolidateAfter": "0s", "budgets": [{"nodes": nodes}]}}),
        )
        for nodes in ("0", "10", "10%", "100%")
    ),
    (
        "budget-window",
        pool(
            {
                "disruption": {
                    "consolidateAfter": "0s",
                    "budgets": [
                        {
                            "nodes": "0",
                            "schedule": "0 9 * * mon-fri",
                            "duration": "8h",
                            "reasons": ["Drifted"],
                        },
                        {"nodes": "1", "schedule": "@daily", "duration": "1h30m"},
                    ],
                }
            }
        ),
    ),
    *(
        (f"consolidate-after-{after}", pool({"disruption": {"consolidateAfter": after}}))
        for after in ("30s", "1h30m", "Never")
    ),
    ("when-empty", pool({"disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "5m"}})),
    ("expire-never-and-grace", claim_spec({"expireAfter": "Never", "terminationGracePeriod": "48h"})),
    ("gt-one-integer", requirement("karpenter.k8s.aws/instance-generation", "Gt", "2")),
    (
        "min-values-equal-to-values",
        requirement("karpenter.k8s.aws/instance-family", "In", "c5", "m5", minValues=2),
    ),
    (
        "not-in-and-exists",
        claim_spec(
            {
                "requirements": [
                    {
                        "key": "karpenter.k8s.aws/instance-size",
                        "operator": "NotIn",
                        "values": ["nano", "micro"],
                    },
                    {"key": "example.com/team", "operator": "Exists"},
                    {"key": "example.com/legacy", "operator": "DoesNotExist"},
                ]
            }
        ),
    ),
    ("limits-zero", pool({"limits": {"cpu": 0, "memory": "0", "nvidia.com/gpu": "0"}})),
    (
        "labels-in-allowed-subdomains",
        template_labels(
            {
                "node.kubernetes.io/team": "a",
                "node-restriction.kubernetes.io/team": "a",
                "kops.k8s.io/instancegroup": "a",
                "example.com/team": "a",
                "team": "",
            }
        ),
    ),
    (
        "nodeclaim-with-requests",
        merged(CLAIM, {"spec": {"resources": {"requests": {"cpu": "1", "pods": 3}}}}),
    ),
    ("ami-id", node_class({"amiFamily": "AL2023", "amiSelectorTerms": [{"id": "ami-0abc"}]})),
    (
        "ami-name-and-owner",
        node_class({"amiFamily": "Custom", "amiSelectorTerms": [{"name": "my-ami", "owner": "self"}]}),
    ),
    (
        "ami-tags-and-owner",
        node_class({"amiFamily": "AL2", "amiSelectorTerms": [{"tags": SELECTOR_TAGS, "owner": "amazon"}]}),
    ),
    ("ami-alias-pinned", node_class({"amiSelectorTerms": [{"alias": "bottlerocket@v1.20.0"}]})),
    (
        "ami-alias-with-custom-family",
        node_class({"amiFamily": "Custom", "amiSelectorTerms": [{"alias": "al2@latest"}]}),
    ),
    (
        "ami-alias-with-its-family",
        node_class({"amiFamily": "Windows2019", "amiSelectorTerms": [{"alias": "windows2019@latest"}]}),
    ),
    (
        "instance-profile",
        merged(
            {k: v for k, v in NODE_CLASS.items() if k != "spec"},
            {
                "spec": {
                    **{k: v for k, v in NODE_CLASS["spec"].items() if k != "role"},
                    "instanceProfile": "KarpenterNodeInstanceProfile-it",
                }
            },
        ),
    ),
    (
        "subnet-and-security-group-ids",
        node_class(
            {
                "subnetSelectorTerms": [{"id": "subnet-0abc"}, {"tags": SELECTOR_TAGS}],
                "securityGroupSelectorTerms": [{"id": "sg-0abc"}, {"name": "web"}, {"tags": {"Name": "*"}}],
            }
        ),
    ),
    (
        "reservations",
        node_class(
            {
                "capacityReservationSelectorTerms": [
                    {"id": "cr-0abc"},
                    {"tags": SELECTOR_TAGS, "ownerID": "123456789012"},
                    {"instanceMatchCriteria": "open"},
                ]
            }
        ),
    ),
    (
        "one-root-volume-and-a-snapshot",
        node_class(
            {
                "blockDeviceMappings": [
                    {
                        "deviceName": "/dev/xvda",
                        "rootVolume": True,
                        "ebs": {"volumeSize": "64T", "volumeType": "gp3"},
                    },
                    {
                        "deviceName": "/dev/xvdb",
                        "ebs": {"snapshotID": "snap-0abc", "volumeInitializationRate": 100},
                    },
                ]
            }
        ),
    ),
    (
        "kubelet",
        kubelet(
            {
                "maxPods": 110,
                "kubeReserved": {"cpu": "200m", "memory": "100Mi", "ephemeral-storage": "1Gi", "pid": "100"},
                "evictionHard": {
                    "memory.available": "5%",
                    "nodefs.available": "10.5%",
                    "pid.available": "100",
                },
                "evictionSoft": {"memory.available": "500Mi"},
                "evictionSoftGracePeriod": {"memory.available": "1m30s"},
                "imageGCHighThresholdPercent": 85,
                "imageGCLowThresholdPercent": 80,
            }
        ),
    ),
]


@pytest.mark.parametrize(
    "manifest", [case[1] for case in GOOD_OBJECTS], ids=[case[0] for case in GOOD_OBJECTS]
)
def test_a_good_object_of_each_shape_is_accepted(crds: ControlPlane, manifest: dict[str, Any]) -> None:
    result = dry_run_create(crds, manifest)
    assert result.returncode == 0, result.stderr


def test_each_well_known_label_may_be_required_and_set(crds: ControlPlane) -> None:
    allowed = sorted((WELL_KNOWN_LABELS | set(NORMALIZED_LABELS)) - {LABEL_NODEPOOL})
    manifest = claim_spec({"requirements": [{"key": key, "operator": "Exists"} for key in allowed]})
    manifest = merged(manifest, {"spec": {"template": {"metadata": {"labels": dict.fromkeys(allowed, "a")}}}})
    result = dry_run_create(crds, manifest)
    assert result.returncode == 0, result.stderr


def karpenter_objects(path: Path) -> list[dict[str, Any]]:
    return [
        document
        for document in yaml.safe_load_all(path.read_text())
        if document and document.get("apiVersion") in ("karpenter.sh/v1", "karpenter.k8s.aws/v1")
    ]


@pytest.mark.parametrize(
    "path",
    [
        *sorted(DOCS_EXAMPLES.glob("*.yaml")),
        *(REALWORLD / name for name in ("nodepool-general-purpose.yaml", "nodepool-gpu-bottlerocket.yaml")),
        *(REALWORLD / name for name in ("nodepool-windows.yaml", "nodepools-capacity-spread.yaml")),
        SEED_V1 / "ec2nodeclass.yaml",
        SEED_V1 / "nodepool.yaml",
    ],
    ids=lambda path: path.name,
)
def test_karpenters_documented_examples_and_the_seed_are_accepted(crds: ControlPlane, path: Path) -> None:
    objects = karpenter_objects(path)
    assert objects
    for manifest in objects:
        # Renamed, as other tests of the module create objects named "default".
        result = dry_run_create(crds, merged(manifest, {"metadata": {"name": RULE_OBJECT}}))
        assert result.returncode == 0, f"{manifest['kind']} {manifest['metadata']['name']}:\n{result.stderr}"


def test_node_class_ref_group_and_kind_and_role_are_immutable(crds: ControlPlane) -> None:
    name = "it-crds-immutable"
    created = [
        merged(node_class({}), {"metadata": {"name": name}}),
        merged(claim_spec({"nodeClassRef": {"name": name}}), {"metadata": {"name": name}}),
    ]
    crds.kubectl("create", "-f", "-", stdin="\n---\n".join(json.dumps(item) for item in created))
    try:
        for patch, expected in [
            ({"group": "karpenter.kwok.sh"}, "nodeClassRef.group is immutable"),
            ({"kind": "KWOKNodeClass"}, "nodeClassRef.kind is immutable"),
        ]:
            body = {"spec": {"template": {"spec": {"nodeClassRef": patch}}}}
            error = kubectl_failing(crds, "patch", "nodepool", name, "--type=merge", "-p", json.dumps(body))
            assert expected in error, error
        crds.kubectl(
            "patch",
            "nodepool",
            name,
            "--type=merge",
            "-p",
            json.dumps({"spec": {"template": {"spec": {"nodeClassRef": {"name": "another"}}}}}),
        )
        error = kubectl_failing(
            crds, "patch", "ec2nodeclass", name, "--type=merge", "-p", '{"spec":{"role":"another-role"}}'
        )
        assert "immutable field changed" in error, error
        to_profile = {"spec": {"role": None, "instanceProfile": "KarpenterNodeInstanceProfile-it"}}
        error = kubectl_failing(
            crds, "patch", "ec2nodeclass", name, "--type=merge", "-p", json.dumps(to_profile)
        )
        assert "You must delete and recreate this node class" in error, error
    finally:
        crds.kubectl("delete", "nodepool,ec2nodeclass", name, "--ignore-not-found", "--wait=true")
