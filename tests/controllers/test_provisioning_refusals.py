"""A NodePool whose NodeClaims the API server refuses (422 Invalid) fails alone, in the simulator.

The in-memory store is given a refusal of one pool's NodeClaims, as an
admission policy of a real cluster would refuse them (the integration test
runs the real thing, tests/integration/test_run_refused_pool.py). The other
pool's NodeClaims are made in the same batch; the refused pool gets
``ValidationSucceeded=False`` naming the NodePool's field, one Warning Event
and one warning line; its pods are planned again at once without it; it is
tried again only after a backoff, or at once when its template changes.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

import pytest
from tests.support import KWOK_NODE_CLASS, load_objects

from karpy.api.conditions import FALSE, TRUE, find_condition
from karpy.api.core import Deployment
from karpy.api.nodeclaim import NodeClaim
from karpy.api.nodepool import CONDITION_READY, CONDITION_VALIDATION_SUCCEEDED
from karpy.controllers.refusals import REFUSAL_RETRY, nodepool_field, refusal_message
from karpy.operator.cluster import InvalidError
from karpy.sim.simulation import Simulation

LABEL = "example.com/team"


def pool(name: str, weight: int, labels: str = "", limits: str = "{}") -> str:
    return f"""
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {name}}}
spec:
  weight: {weight}
  limits: {limits}
  template:
    metadata: {{labels: {{group: shared{labels}}}}}
    spec:
      nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}}
      requirements:
        - {{key: node.kubernetes.io/instance-type, operator: In, values: [c5.large]}}
"""


PODS = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: app, namespace: default}
spec:
  replicas: 3
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      nodeSelector: {group: shared}
      containers: [{name: app, image: pause, resources: {requests: {cpu: 1500m}}}]
"""


class RefusingPool:
    """The store's ``create_all``, refusing every NodeClaim of ``pool`` as a 422 names a label."""

    def __init__(self, simulation: Simulation, pool: str) -> None:
        self.pool = pool
        self.original = simulation.cluster.create_all
        self.refused = 0

    def __call__(self, objs: Sequence[object]) -> list[object]:
        results: list[object] = []
        for obj in objs:
            if isinstance(obj, NodeClaim) and obj.nodepool == self.pool:
                self.refused += 1
                results.append(
                    InvalidError(
                        f'NodeClaim.karpenter.sh "{self.pool}-x1" is invalid: metadata.labels: '
                        "Invalid value: not allowed here",
                        (("metadata.labels", "Invalid value: not allowed here"),),
                    )
                )
            else:
                results.extend(self.original([obj]))
        return results


def started(monkeypatch: pytest.MonkeyPatch, good_limits: str = "{}") -> tuple[Simulation, RefusingPool]:
    simulation = Simulation()
    refusing = RefusingPool(simulation, "bad")
    monkeypatch.setattr(simulation.cluster, "create_all", refusing)
    simulation.apply(
        load_objects(KWOK_NODE_CLASS, pool("good", 10, limits=good_limits), pool("bad", 100), PODS)
    )
    simulation.run(30, until_steady=False)
    return simulation, refusing


def scale(simulation: Simulation, replicas: int) -> None:
    deployment = simulation.cluster.get("Deployment", "default/app")
    assert isinstance(deployment, Deployment)
    simulation.cluster.update(deployment.with_changes(replicas=replicas))


def test_the_refused_pool_fails_alone_and_its_pods_go_to_the_other_pool(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    simulation, refusing = started(monkeypatch)
    assert refusing.refused == 3  # one pass planned the three pods on the preferred pool
    claims = simulation.nodeclaims()
    assert len(claims) == 3 and {claim.nodepool for claim in claims} == {"good"}
    bad = simulation.cluster.nodepool("bad")
    assert bad is not None
    validation = find_condition(bad.status.conditions, CONDITION_VALIDATION_SUCCEEDED)
    assert validation is not None and validation.status == FALSE
    assert validation.reason == "NodePoolValidationFailed"
    assert validation.message == "spec.template.metadata.labels: Invalid value: not allowed here"
    ready = find_condition(bad.status.conditions, CONDITION_READY)
    assert ready is not None and ready.status == FALSE
    good = simulation.cluster.nodepool("good")
    assert good is not None
    good_ready = find_condition(good.status.conditions, CONDITION_READY)
    assert good_ready is not None and good_ready.status == TRUE
    warnings = [
        event for event in simulation.cluster.events if event.name == "bad" and event.type == "Warning"
    ]
    assert [event.reason for event in warnings] == ["NodePoolValidationFailed"]
    lines = [record for record in caplog.records if "refused its NodeClaim" in record.getMessage()]
    assert len(lines) == 1 and not lines[0].exc_info


def test_the_refused_pool_is_tried_again_after_a_backoff_not_in_a_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The other pool has room for two of the three pods: one stays pending for the refused pool.
    simulation, refusing = started(monkeypatch, good_limits="{cpu: '4'}")
    assert len(simulation.nodeclaims()) == 2
    # More pods: the passes they start leave the refused pool out until the retry is due.
    scale(simulation, 4)
    simulation.run(REFUSAL_RETRY - 40, until_steady=False)
    assert refusing.refused == 3
    simulation.run(REFUSAL_RETRY, until_steady=False)
    assert refusing.refused > 3  # retried once it was due
    tried = refusing.refused
    simulation.run(REFUSAL_RETRY, until_steady=False)
    assert refusing.refused == tried  # the next retry waits twice as long


def test_a_changed_template_is_tried_again_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    simulation, refusing = started(monkeypatch)
    bad = simulation.cluster.nodepool("bad")
    assert bad is not None
    changed = dataclasses.replace(
        bad, template=dataclasses.replace(bad.template, labels={**bad.template.labels, LABEL: "a"})
    )
    simulation.cluster.update(changed)
    scale(simulation, 6)
    simulation.run(10, until_steady=False)
    assert refusing.refused > 3


def test_the_message_names_the_nodepool_fields_the_server_named() -> None:
    assert nodepool_field("metadata.labels") == "spec.template.metadata.labels"
    assert nodepool_field("metadata.annotations[a]") == "spec.template.metadata.annotations[a]"
    assert nodepool_field("spec.taints[0].key") == "spec.template.spec.taints[0].key"
    assert (
        refusal_message(
            InvalidError(
                'nodeclaims.karpenter.sh "bad-x1" is forbidden: '
                "ValidatingAdmissionPolicy 'p' denied request: no"
            )
        )
        == "forbidden: ValidatingAdmissionPolicy 'p' denied request: no"
    )


def test_consolidation_launches_no_replacement_in_a_refused_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    # The good pool has only a type dearer than the refused pool's: consolidation would replace
    # its nodes with the refused pool's, which the server would refuse pass after pass.
    simulation = Simulation()
    refusing = RefusingPool(simulation, "bad")
    original_create = simulation.cluster.create

    def create(obj: object) -> object:
        if isinstance(obj, NodeClaim) and obj.nodepool == "bad":
            refusing.refused += 1
            raise InvalidError("metadata.labels: not allowed here", (("metadata.labels", "not allowed"),))
        return original_create(obj)

    monkeypatch.setattr(simulation.cluster, "create_all", refusing)
    monkeypatch.setattr(simulation.cluster, "create", create)
    # On-demand only: a spot node is replaced by a spot node only with 15 cheaper types to choose from.
    on_demand = "}\n        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]"
    good = pool("good", 10).replace("values: [c5.large]", "values: [m5.2xlarge]" + on_demand)
    bad = pool("bad", 100).replace("values: [c5.large]", "values: [c5.large]" + on_demand)
    simulation.apply(load_objects(KWOK_NODE_CLASS, good, bad, PODS.replace("replicas: 3", "replicas: 1")))
    simulation.run(30, until_steady=False)
    assert refusing.refused == 1
    assert {claim.nodepool for claim in simulation.nodeclaims()} == {"good"}
    simulation.run(1800, until_steady=False)
    assert refusing.refused == 1  # no replacement tried in the refused pool
    assert [claim.nodepool for claim in simulation.nodeclaims()] == ["good"]
    assert not simulation.runtime.errors, simulation.runtime.errors[:3]
