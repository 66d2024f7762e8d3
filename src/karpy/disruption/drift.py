"""Drift: when a node no longer is what its NodePool asks for.

A NodeClaim is **drifted** (Karpenter v1) when:

- its ``karpenter.sh/nodepool-hash`` annotation differs from the NodePool's
  current template hash (same hash version): labels, annotations, taints,
  startup taints, the node class reference, expireAfter or
  terminationGracePeriod changed;
- its labels no longer satisfy the NodePool's requirements (a requirement was
  narrowed; widening one drifts nothing, which is why requirements are not
  part of the hash);
- the cloud provider says its node class drifted (an AMI, subnet or security
  group change), passed in as ``provider_reason``.

A pure function of the objects; expiration is :mod:`karpy.disruption.expiration`.
"""

from __future__ import annotations

from karpy.api.nodeclaim import NodeClaim
from karpy.api.nodepool import (
    NODEPOOL_HASH_ANNOTATION,
    NODEPOOL_HASH_VERSION,
    NODEPOOL_HASH_VERSION_ANNOTATION,
    NodePool,
)

REASON_NODEPOOL_DRIFTED = "NodePoolDrifted"
REASON_REQUIREMENTS_DRIFTED = "RequirementsDrifted"
REASON_NODECLASS_DRIFTED = "NodeClassDrifted"


def drift_reason(nodeclaim: NodeClaim, nodepool: NodePool, provider_reason: str = "") -> tuple[str, str]:
    """(reason, message) if the NodeClaim drifted from its NodePool, else ("", "")."""
    annotations = nodeclaim.metadata.annotations
    claimed = annotations.get(NODEPOOL_HASH_ANNOTATION)
    # A hash of another version was computed differently: comparing it means nothing.
    same_version = annotations.get(NODEPOOL_HASH_VERSION_ANNOTATION) == NODEPOOL_HASH_VERSION
    if claimed is not None and same_version and claimed != nodepool.template_hash():
        return REASON_NODEPOOL_DRIFTED, f"NodePool {nodepool.name}'s template changed"
    labels = nodeclaim.metadata.labels
    requirements = nodepool.template.requirement_set()
    for requirement in requirements:
        value = labels.get(requirement.key)
        if value is None:
            continue  # a label the node never had cannot have drifted
        if not requirement.has(value):
            message = f"label {requirement.key}={value} no longer satisfies {requirement}"
            return REASON_REQUIREMENTS_DRIFTED, message
    for key, value in nodepool.template.labels.items():
        if labels.get(key) != value:
            return REASON_REQUIREMENTS_DRIFTED, f"label {key} should be {value!r}"
    if provider_reason:
        return REASON_NODECLASS_DRIFTED, provider_reason
    return "", ""


__all__ = [
    "REASON_NODECLASS_DRIFTED",
    "REASON_NODEPOOL_DRIFTED",
    "REASON_REQUIREMENTS_DRIFTED",
    "drift_reason",
]
