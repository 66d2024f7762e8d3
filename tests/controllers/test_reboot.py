"""The reboot lifecycle's pieces: the drain bound annotation Karpenter writes, read and written back."""

from __future__ import annotations

import pytest

from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import REBOOT_TERMINATION_GRACE_PERIOD_ANNOTATION, NodeClaim, NodeClaimSpec
from karpy.api.nodepool import NodeClassRef
from karpy.controllers.reboot import go_duration, reboot_drain_bound


@pytest.mark.parametrize(("seconds", "text"), [(0, "0s"), (45, "45s"), (60, "1m0s"), (3725, "1h2m5s")])
def test_the_drain_bound_is_written_as_go_writes_a_duration(seconds: float, text: str) -> None:
    assert go_duration(seconds) == text


def claim(annotations: dict[str, str]) -> NodeClaim:
    return NodeClaim(
        metadata=ObjectMeta(name="a", annotations=annotations),
        spec=NodeClaimSpec(node_class_ref=NodeClassRef("karpenter.kwok.sh", "KWOKNodeClass", "default")),
    )


def test_the_drain_bound_is_read_back_and_a_bad_one_refused() -> None:
    assert reboot_drain_bound(claim({})) is None
    assert reboot_drain_bound(claim({REBOOT_TERMINATION_GRACE_PERIOD_ANNOTATION: "1m0s"})) == 60.0
    with pytest.raises(ValueError, match="reboot-termination-grace-period"):
        reboot_drain_bound(claim({REBOOT_TERMINATION_GRACE_PERIOD_ANNOTATION: "soon"}))
    with pytest.raises(ValueError, match="negative"):
        reboot_drain_bound(claim({REBOOT_TERMINATION_GRACE_PERIOD_ANNOTATION: "-1s"}))


def test_a_cached_nodeclaim_older_than_the_controllers_own_write_is_not_acted_on() -> None:
    from karpy.controllers.reboot import _older

    assert _older("5", "7") and not _older("7", "7") and not _older("9", "7")
    assert not _older("", "7") and not _older("abc", "7")
