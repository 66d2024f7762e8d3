"""The NodeOverlay controller, its store and the overlaid cloud provider (karpy.controllers.nodeoverlay)."""

from __future__ import annotations

import builtins
from typing import cast

import pytest
from tests.support import make_instance_type, make_nodepool, parse_object

from karpy.api.conditions import find_condition
from karpy.api.instancetype import InstanceType
from karpy.api.nodeoverlay import NodeOverlay
from karpy.api.nodepool import NodePool
from karpy.cloud.provider import CloudProvider, NodePoolNotEvaluatedError
from karpy.controllers.nodeoverlay import (
    OVERLAYS_EVALUATED,
    PASS_KEY,
    NodeOverlayController,
    OverlaidCloudProvider,
    OverlayStore,
)
from karpy.controllers.provisioning import Provisioner
from karpy.sim.clock import VirtualClock
from karpy.sim.store import InMemoryCluster

CATALOG = [make_instance_type("c5.large", 2, 4, 0.1), make_instance_type("c5.4xlarge", 16, 32, 0.8)]


class Catalog:
    """A provider that lists one catalog for every pool (the same list each time, as real ones do)."""

    name = "catalog"

    def get_instance_types(self, nodepool: NodePool) -> builtins.list[InstanceType]:
        return CATALOG


def overlay(name: str, spec: str) -> NodeOverlay:
    found = parse_object(
        f"apiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {{name: {name}}}\nspec: {spec}"
    )
    assert isinstance(found, NodeOverlay)
    return found


def setup(
    *overlays: NodeOverlay,
) -> tuple[InMemoryCluster, OverlayStore, NodeOverlayController, CloudProvider]:
    clock = VirtualClock()
    cluster = InMemoryCluster(clock)
    cluster.create(make_nodepool("default"))
    for item in overlays:
        cluster.create(item)
    store = OverlayStore()
    provider = cast(CloudProvider, Catalog())
    return (
        cluster,
        store,
        NodeOverlayController(cluster, provider, clock, store),
        OverlaidCloudProvider(provider, store),
    )


def validation(cluster: InMemoryCluster, name: str) -> tuple[str, str]:
    found = next(item for item in cluster.node_overlays() if item.name == name)
    condition = find_condition(found.status.conditions, "ValidationSucceeded")
    assert condition is not None
    ready = find_condition(found.status.conditions, "Ready")
    assert ready is not None and ready.status == condition.status
    return condition.status, condition.reason


def test_a_pool_awaits_the_first_evaluation_then_gets_the_overlaid_catalog() -> None:
    discount = overlay(
        "discount",
        "{requirements: [{key: node.kubernetes.io/instance-type, operator: In, values: [c5.4xlarge]}],"
        " price: '0.05'}",
    )
    cluster, store, controller, cloud = setup(discount)
    pool = make_nodepool("default")
    with pytest.raises(NodePoolNotEvaluatedError, match="awaiting nodeoverlay evaluation"):
        cloud.get_instance_types(pool)
    announced: list[str] = []
    store.subscribe(lambda kind, old, new: announced.append(kind))
    assert controller.reconcile(PASS_KEY) == 6 * 3600.0
    assert announced == [OVERLAYS_EVALUATED]
    catalog = cloud.get_instance_types(pool)
    assert {o.price for o in catalog[1].offerings} == {0.05}
    # The same list while nothing changes, so what is cached by the list's identity downstream stays.
    assert cloud.get_instance_types(pool) is catalog
    assert validation(cluster, "discount") == ("True", "ValidationSucceeded")
    controller.reconcile(PASS_KEY)
    assert announced == [OVERLAYS_EVALUATED]  # the same evaluation is not announced again


def test_a_pool_no_overlay_matches_gets_the_providers_list_itself() -> None:
    _, _, controller, cloud = setup(
        overlay(
            "elsewhere",
            "{requirements: [{key: karpenter.sh/nodepool, operator: In, values: [other]}], price: '0.01'}",
        )
    )
    controller.reconcile(PASS_KEY)
    assert cloud.get_instance_types(make_nodepool("default")) is CATALOG


def test_conflicts_and_runtime_problems_are_written_as_validation_failures() -> None:
    cluster, _, controller, cloud = setup(
        overlay("a", "{requirements: [], price: '0.01'}"),
        overlay("b", "{requirements: [], price: '0.02'}"),
        overlay("team", "{requirements: [{key: kubernetes.io/team, operator: Exists}], price: '0.03'}"),
    )
    controller.reconcile(PASS_KEY)
    assert validation(cluster, "b") == ("True", "ValidationSucceeded")
    assert validation(cluster, "a") == ("False", "Conflict")
    assert validation(cluster, "team") == ("False", "RuntimeValidation")
    assert {o.price for t in cloud.get_instance_types(make_nodepool("default")) for o in t.offerings} == {
        0.02
    }


def test_what_triggers_an_evaluation() -> None:
    _, _, controller, _ = setup()
    on_overlay = next(w for w in controller.watches() if w.kind == "NodeOverlay").mapper
    before = overlay("a", "{requirements: [], price: '0.01'}")
    assert list(on_overlay(None, before)) == [PASS_KEY]
    assert list(on_overlay(before, overlay("a", "{requirements: [], price: '0.02'}"))) == [PASS_KEY]
    written = before.with_status(before.status.__class__(conditions=()))
    assert list(on_overlay(before, written)) == []  # its own status write
    on_pool = next(w for w in controller.watches() if w.kind == "NodePool").mapper
    assert list(on_pool(None, make_nodepool("new"))) == [PASS_KEY]


def test_the_provisioner_plans_again_when_the_overlays_are_evaluated() -> None:
    clock = VirtualClock()
    cluster = InMemoryCluster(clock)
    provisioner = Provisioner(cluster, cast(CloudProvider, Catalog()), clock)
    assert OVERLAYS_EVALUATED in {watch.kind for watch in provisioner.watches()}
