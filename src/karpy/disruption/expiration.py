"""Expiration: a NodeClaim older than its ``expireAfter`` is expired.

In Karpenter v1 expiration is forceful: the NodeClaim is deleted without
waiting for a budget or a replacement, and ``terminationGracePeriod`` bounds
the drain. This is the pure decision; the NodeClaim disruption controller
acts on it.
"""

from __future__ import annotations

from karpy.api.nodeclaim import NodeClaim


def expires_at(nodeclaim: NodeClaim) -> float | None:
    """When the NodeClaim expires (its creation plus expireAfter), or None for Never."""
    created = nodeclaim.metadata.creation_timestamp
    if nodeclaim.spec.expire_after is None or created is None:
        return None
    return created + nodeclaim.spec.expire_after


def is_expired(nodeclaim: NodeClaim, now: float) -> bool:
    deadline = expires_at(nodeclaim)
    return deadline is not None and now >= deadline


__all__ = ["expires_at", "is_expired"]
