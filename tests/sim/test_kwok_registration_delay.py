"""A KWOKNodeClass' ``nodeRegistrationDelay`` is how long its nodes take to register, in the simulator too."""

from __future__ import annotations

import pytest
from tests.support import deployment_manifest, kwok_nodepool, load_objects

from karpy.api._reader import FieldReader, ManifestError
from karpy.api.nodeclass import KWOKNodeClass
from karpy.sim.simulation import Simulation


def kwok_class(delay: str) -> str:
    spec = f"spec: {{nodeRegistrationDelay: {delay}}}\n" if delay else ""
    return f"apiVersion: karpenter.kwok.sh/v1alpha1\nkind: KWOKNodeClass\nmetadata: {{name: default}}\n{spec}"


def registered_after(delay: str) -> float:
    """Seconds from the first NodeClaim's creation to its Node's, with the class' delay."""
    simulation = Simulation()
    simulation.apply(load_objects(kwok_class(delay), kwok_nodepool(), deployment_manifest(replicas=1)))
    simulation.run(600)
    [claim] = simulation.nodeclaims()
    [node] = [node for node in simulation.cluster.nodes() if node.provider_id == claim.status.provider_id]
    assert node.metadata.creation_timestamp is not None and claim.metadata.creation_timestamp is not None
    return node.metadata.creation_timestamp - claim.metadata.creation_timestamp


def test_the_class_delay_is_the_registration_time() -> None:
    default = registered_after("")
    assert registered_after("2m") == pytest.approx(120.0, abs=2.0)
    assert registered_after("5s") == pytest.approx(5.0, abs=2.0)
    assert default != pytest.approx(120.0, abs=2.0)


def test_a_delay_that_is_no_duration_is_refused() -> None:
    manifest = {
        "apiVersion": "karpenter.kwok.sh/v1alpha1",
        "kind": "KWOKNodeClass",
        "metadata": {"name": "default"},
        "spec": {"nodeRegistrationDelay": "soon"},
    }
    with pytest.raises(ManifestError, match="nodeRegistrationDelay"):
        KWOKNodeClass.parse(FieldReader(manifest))
