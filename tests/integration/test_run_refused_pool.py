"""``karpy run`` against the real control plane: a NodePool whose NodeClaims cannot be created fails alone.

Two NodePools take the same pods; the preferred one (weight 100) is bad, the
other (weight 10) is fine:

- the bad pool's template has a label key the API server refuses on any
  object (``bad key!``), which its CRD lets through: karpy's reading refuses
  the pool, which gets ``ValidationSucceeded=False`` naming the label, and
  the pods go to the other pool;
- the cluster has an admission policy (a ValidatingAdmissionPolicy: 422
  Invalid) refusing NodeClaims with a label of the bad pool's template, which
  karpy cannot know of in advance: the first refusal fails that pool only
  (``ValidationSucceeded=False`` with the server's message, a Warning Event,
  one warning line and no traceback), the pods are planned again without it
  and get nodes from the other pool in the same minute, and the refused pool
  is not tried again in a loop.
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import ControlPlane, wait_until
from .karpy_run import (
    as_yaml,
    condition,
    deployment,
    get_items,
    get_object,
    node_class,
    nodepool,
    pool_claims,
    running_karpy,
    running_pods,
)

pytestmark = pytest.mark.integration

GOOD_POOL = "it-refused-good"
BAD_LABEL_POOL = "it-refused-label"
POLICY_POOL = "it-refused-policy"
INSTANCE_TYPES = ["c5.large", "c5.xlarge", "m5.large", "m5.xlarge"]
# Both pools carry it; the pods select it, so only these pools can take them.
GROUP_LABEL = "karpy.dev/refused-test"
REFUSED_LABEL = "karpy.dev/refuse-me"
POLICY = "it-refuse-nodeclaims"


def pool(name: str, group: str, weight: int, labels: dict[str, str]) -> dict[str, Any]:
    manifest = nodepool(name, INSTANCE_TYPES)
    manifest["spec"]["weight"] = weight
    manifest["spec"]["template"]["metadata"] = {"labels": {GROUP_LABEL: group, **labels}}
    return manifest


def pods(namespace: str, app: str, group: str, replicas: int) -> dict[str, Any]:
    manifest = deployment(GOOD_POOL, namespace, app, replicas)
    manifest["spec"]["template"]["spec"]["nodeSelector"] = {GROUP_LABEL: group}
    return manifest


def admission_policy() -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": POLICY},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": ["karpenter.sh"],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["nodeclaims"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": "!has(object.metadata.labels)"
                        f" || !('{REFUSED_LABEL}' in object.metadata.labels)",
                        "message": f"NodeClaims labelled {REFUSED_LABEL} are not allowed here",
                    }
                ],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": POLICY},
            "spec": {"policyName": POLICY, "validationActions": ["Deny"]},
        },
    ]


@pytest.fixture
def plane(crds: ControlPlane) -> Iterator[ControlPlane]:
    yield crds
    crds.kubectl(
        "delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", POLICY, "--ignore-not-found"
    )


def warnings_on(plane: ControlPlane, pool_name: str) -> list[dict[str, Any]]:
    events = get_items(
        plane,
        "events",
        "-n",
        "default",
        "--field-selector",
        f"involvedObject.kind=NodePool,involvedObject.name={pool_name}",
    )
    return [event for event in events if event["type"] == "Warning"]


def validation_failed(plane: ControlPlane, pool_name: str) -> dict[str, Any] | None:
    found = condition(get_object(plane, "nodepool", pool_name), "ValidationSucceeded")
    return found if found.get("status") == "False" else None


def test_a_pool_with_a_label_key_the_server_refuses_fails_validation_and_the_other_pool_provisions(
    plane: ControlPlane, namespace: str
) -> None:
    group = "label"
    with running_karpy(plane, pools=[GOOD_POOL, BAD_LABEL_POOL]):
        plane.kubectl(
            "apply",
            "-f",
            "-",
            stdin=as_yaml(
                node_class(GOOD_POOL),
                node_class(BAD_LABEL_POOL),
                pool(GOOD_POOL, group, 10, {}),
                pool(BAD_LABEL_POOL, group, 100, {"bad key!": "x"}),
                pods(namespace, "refused-label", group, 3),
            ),
        )
        found = wait_until(
            lambda: validation_failed(plane, BAD_LABEL_POOL), timeout=30, what="ValidationSucceeded=False"
        )
        assert found["reason"] == "NodePoolValidationFailed"
        assert found["message"].startswith("spec.template.metadata.labels"), found
        assert "bad key!" in found["message"]
        wait_until(
            lambda: len(running_pods(plane, namespace, "refused-label")) == 3,
            timeout=60,
            what="the pods running on the good pool's nodes",
        )
        assert pool_claims(plane, GOOD_POOL)
        assert not pool_claims(plane, BAD_LABEL_POOL)
        (event,) = wait_until(
            lambda: warnings_on(plane, BAD_LABEL_POOL) or None, timeout=30, what="a Warning"
        )
        assert "spec.template.metadata.labels" in event["message"]


def test_a_pool_whose_nodeclaims_an_admission_policy_refuses_fails_alone(
    plane: ControlPlane, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    group = "policy"
    plane.kubectl("apply", "-f", "-", stdin=as_yaml(*admission_policy()))

    def policy_in_force() -> bool:
        # The policy is enforced once the server has compiled it: a dry-run create is refused.
        probe = {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": "it-refused-probe", "labels": {REFUSED_LABEL: "true"}},
            "spec": {
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": GOOD_POOL},
                "requirements": [],
            },
        }
        result = subprocess.run(
            [
                plane.kubectl_path,
                "--kubeconfig",
                str(plane.kubeconfig),
                "create",
                "--dry-run=server",
                "-f",
                "-",
            ],
            input=as_yaml(probe),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return result.returncode != 0 and REFUSED_LABEL in result.stderr

    wait_until(policy_in_force, timeout=30, what="the admission policy to be enforced")
    caplog.set_level(logging.WARNING)
    with running_karpy(plane, pools=[GOOD_POOL, POLICY_POOL]):
        plane.kubectl(
            "apply",
            "-f",
            "-",
            stdin=as_yaml(
                node_class(GOOD_POOL),
                node_class(POLICY_POOL),
                pool(GOOD_POOL, group, 10, {}),
                pool(POLICY_POOL, group, 100, {REFUSED_LABEL: "true"}),
                pods(namespace, "refused-policy", group, 3),
            ),
        )
        wait_until(
            lambda: len(running_pods(plane, namespace, "refused-policy")) == 3,
            timeout=60,
            what="the pods running on the good pool's nodes",
        )
        found = wait_until(
            lambda: validation_failed(plane, POLICY_POOL), timeout=30, what="ValidationSucceeded=False"
        )
        assert found["reason"] == "NodePoolValidationFailed"
        assert f"NodeClaims labelled {REFUSED_LABEL} are not allowed here" in found["message"], found
        assert condition(get_object(plane, "nodepool", POLICY_POOL), "Ready").get("status") == "False"
        (event,) = wait_until(lambda: warnings_on(plane, POLICY_POOL) or None, timeout=30, what="a Warning")
        assert event["reason"] == "NodePoolValidationFailed"
        assert not pool_claims(plane, POLICY_POOL)
        # More passes come and go meanwhile (pods bind, nodes register): the refused pool is not tried.
        time.sleep(5)
    refusals = [record for record in caplog.records if "refused its NodeClaim" in record.getMessage()]
    assert len(refusals) == 1, [record.getMessage() for record in refusals]
    assert POLICY_POOL in refusals[0].getMessage()
    tracebacks = [record for record in caplog.records if record.exc_info]
    assert not tracebacks, [record.getMessage() for record in tracebacks]
