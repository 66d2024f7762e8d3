"""NodeClaim conditions are written as Karpenter writes them: with a reason, or not at all.

Karpenter's drift controller sets ``Drifted`` true with its reason and
clears it otherwise; it never writes ``Drifted=False`` without a reason.
"""

from __future__ import annotations

import dataclasses

import pytest
from tests.support import KWOK_NODE_CLASS, deployment_manifest, kwok_nodepool, load_objects

from karpy.api.conditions import FALSE, TRUE, UNKNOWN, set_condition
from karpy.api.nodeclaim import CONDITION_DRIFTED
from karpy.sim.simulation import Simulation


def test_every_condition_written_has_a_reason_and_an_undrifted_claim_has_no_drifted_condition() -> None:
    simulation = Simulation()
    simulation.apply(load_objects(KWOK_NODE_CLASS, kwok_nodepool(), deployment_manifest(replicas=3)))
    simulation.run(300, until_steady=False)
    claims = simulation.nodeclaims()
    assert claims and all(claim.initialized for claim in claims)
    for claim in claims:
        assert all(condition.reason for condition in claim.status.conditions), claim.status.conditions
        assert CONDITION_DRIFTED not in {condition.type for condition in claim.status.conditions}
    pool = simulation.cluster.nodepool("default")
    assert pool is not None
    labels = {**pool.template.labels, "example.com/generation": "2"}
    simulation.cluster.update(
        dataclasses.replace(pool, template=dataclasses.replace(pool.template, labels=labels))
    )
    simulation.run(5, until_steady=False)
    drifted = [claim for claim in simulation.nodeclaims() if claim.is_true(CONDITION_DRIFTED)]
    assert drifted
    for claim in drifted:
        condition = next(c for c in claim.status.conditions if c.type == CONDITION_DRIFTED)
        assert condition.reason == "NodePoolDrifted"


@pytest.mark.parametrize("status", [FALSE, UNKNOWN])
def test_a_condition_that_is_not_true_must_name_its_reason(status: str) -> None:
    with pytest.raises(ValueError, match="needs a reason"):
        set_condition((), "Drifted", status, 0.0)


def test_a_true_condition_takes_its_type_as_reason() -> None:
    (condition,) = set_condition((), "Launched", TRUE, 0.0)
    assert condition.reason == "Launched"
