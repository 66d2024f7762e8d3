"""``karpy run --cloud-provider aws`` launching into a capacity reservation, on the real control plane.

The world, the fault proxy and the instance booter are tests/integration/test_aws.py's; the proxy
plays EC2's capacity reservation API, which moto lacks (tests/aws/fault_proxy.py says how). One
reservation slot, two one-pod nodes: the status controller writes the reservation into the
EC2NodeClass's status, one node runs in the reservation as capacity type ``reserved``, the other
falls back to on-demand, and scaling to zero gives the slot back.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import ControlPlane, wait_until
from .karpy_run import LABEL_CAPACITY_TYPE, as_yaml, pool_claims, running_pods
from .test_aws import (
    Aws,
    _object,
    app_of,
    aws,
    fresh,
    k3s_node_class,
    karpenter_test,
    karpy_aws,
    pool,
    remove_aws_pool,
)

pytestmark = pytest.mark.integration
__all__ = ["aws", "fresh"]  # the fixtures, shared with test_aws

RESERVATION_ID = "cr-0int000000000001"
RESERVATION_LABEL = "karpenter.k8s.aws/capacity-reservation-id"


def test_one_node_launches_into_the_reservation_and_the_other_falls_back_to_on_demand(
    fresh: Aws, crds: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    aws, plane = fresh, crds
    aws.proxy.add_capacity_reservation(RESERVATION_ID, "c5.large", "us-east-1a", 1)
    karpy = karpy_aws(plane, aws, "aws-reserved", tmp_path)
    try:
        plane.kubectl(
            "apply",
            "-f",
            "-",
            stdin=as_yaml(
                k3s_node_class("reserved-aws", capacityReservationSelectorTerms=[{"id": RESERVATION_ID}]),
                pool("reserved-aws", "reserved-aws", ["c5.large"], ["reserved", "on-demand"]),
                karpenter_test(namespace, "reserved-aws", 2),
            ),
        )
        wait_until(
            lambda: (
                _object(plane, "ec2nodeclass", "reserved-aws").get("status", {}).get("capacityReservations")
            ),
            timeout=60,
            what="the reservation in the class' status",
        )
        [written] = _object(plane, "ec2nodeclass", "reserved-aws")["status"]["capacityReservations"]
        assert (written["id"], written["instanceType"], written["availabilityZone"]) == (
            RESERVATION_ID,
            "c5.large",
            "us-east-1a",
        )
        app = app_of(namespace, "reserved-aws")
        wait_until(lambda: len(running_pods(plane, namespace, app)) == 2, timeout=120, what="2 pods Running")
        claims = list(pool_claims(plane, "reserved-aws").values())
        by_type = sorted(claim["metadata"]["labels"][LABEL_CAPACITY_TYPE] for claim in claims)
        assert by_type == ["on-demand", "reserved"]
        [reserved] = [c for c in claims if c["metadata"]["labels"][LABEL_CAPACITY_TYPE] == "reserved"]
        assert reserved["metadata"]["labels"][RESERVATION_LABEL] == RESERVATION_ID
        assert aws.proxy.reservations[RESERVATION_ID].available == 0
        assert list(aws.proxy.reserved_instances.values()) == [RESERVATION_ID]

        plane.kubectl("scale", "deployment", app, "-n", namespace, "--replicas=0")
        wait_until(
            lambda: aws.proxy.reservations[RESERVATION_ID].available == 1,
            timeout=180,
            what="the reserved instance terminated and its slot given back",
        )
    finally:
        remove_aws_pool(plane, aws, "reserved-aws", "reserved-aws")
        karpy.stop()


def test_a_node_whose_reservation_is_cancelled_is_relabelled_on_demand(
    fresh: Aws, crds: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """Karpenter's capacityreservation.capacitytype: EC2 keeps the instance, now on-demand."""
    aws, plane = fresh, crds
    aws.proxy.add_capacity_reservation(RESERVATION_ID, "c5.large", "us-east-1a", 1)
    karpy = karpy_aws(plane, aws, "aws-reserved-ends", tmp_path)
    try:
        plane.kubectl(
            "apply",
            "-f",
            "-",
            stdin=as_yaml(
                k3s_node_class("reserved-ends", capacityReservationSelectorTerms=[{"id": RESERVATION_ID}]),
                pool("reserved-ends", "reserved-ends", ["c5.large"], ["reserved", "on-demand"]),
                karpenter_test(namespace, "reserved-ends", 1),
            ),
        )
        app = app_of(namespace, "reserved-ends")
        wait_until(lambda: len(running_pods(plane, namespace, app)) == 1, timeout=120, what="the pod Running")
        [claim] = pool_claims(plane, "reserved-ends").values()
        assert claim["metadata"]["labels"][LABEL_CAPACITY_TYPE] == "reserved"
        node_name = claim["status"]["nodeName"]

        aws.proxy.end_capacity_reservation(RESERVATION_ID, "cancelled")

        def relabelled() -> bool:
            labels = [
                _object(plane, "nodeclaim", claim["metadata"]["name"])["metadata"]["labels"],
                _object(plane, "node", node_name)["metadata"]["labels"],
            ]
            return all(
                found[LABEL_CAPACITY_TYPE] == "on-demand" and RESERVATION_LABEL not in found
                for found in labels
            )

        wait_until(relabelled, timeout=150, what="the NodeClaim and Node relabelled on-demand")
        # The class no longer lists it, and the node is not drifted: it is in no reservation now.
        wait_until(
            lambda: not _object(plane, "ec2nodeclass", "reserved-ends")["status"].get("capacityReservations"),
            timeout=90,
            what="the cancelled reservation gone from the class' status",
        )
        conditions = _object(plane, "nodeclaim", claim["metadata"]["name"])["status"].get("conditions", [])
        assert not [c for c in conditions if c["type"] == "Drifted" and c["status"] == "True"]
    finally:
        remove_aws_pool(plane, aws, "reserved-ends", "reserved-ends")
        karpy.stop()
