"""Price refreshes: the failure path against moto, the parsing and the guards with botocore's Stubber.

moto serves neither the Pricing API (GetProducts answers 500) nor a usable
spot price history (every price is a 0.00001 placeholder from 2006), so the
failure path runs against it for real: nothing is applied, the bundled prices
stay, one warning per kind, and the failures are counted. What a real answer
looks like cannot be had from a local endpoint, so the parsing, the merge over
the bundled prices and the implausibility guard are tested on a real boto3
client whose answers botocore's ``Stubber`` supplies in the API's own shapes
(the Stubber checks them against the service model).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from tests.cloud.aws.conftest import REGION, AwsWorld

from karpy.cloud.aws.client import AwsClient, on_demand_price
from karpy.cloud.aws.pricing import (
    POLL_INTERVAL,
    REASON_EMPTY,
    REASON_ERROR,
    REASON_IMPLAUSIBLE,
    REFRESH_INTERVAL,
    RETRY_INTERVAL,
    PricingRefresher,
)
from karpy.cloud.aws_catalog import load_catalog
from karpy.operator.karpenter_metrics import Metrics
from karpy.sim.clock import VirtualClock

CATALOG = load_catalog()
BUNDLED = {entry.name: entry.on_demand_price for entry in CATALOG.entries}
FAILURES = "karpenter_cloudprovider_pricing_refresh_failures_total"


class RecordingSink:
    def __init__(self) -> None:
        self.updates: list[tuple[dict[str, float], dict[tuple[str, str], float]]] = []

    def update_prices(self, on_demand: Mapping[str, float], spot: Mapping[tuple[str, str], float]) -> None:
        self.updates.append((dict(on_demand), dict(spot)))


def refresher(client: AwsClient) -> tuple[PricingRefresher, RecordingSink, Metrics]:
    sink, metrics = RecordingSink(), Metrics()
    return PricingRefresher(client, sink, VirtualClock(), metrics=metrics), sink, metrics


def refresh(pricing: PricingRefresher) -> float | None:
    """One refresh to its end: the reconcile that starts it, and those that look for its answers."""
    deadline = time.monotonic() + 120
    while (requeue := pricing.reconcile("refresh")) == POLL_INTERVAL:
        assert time.monotonic() < deadline, "the refresh never finished"
        time.sleep(0.01)
    return requeue


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]


# -- against moto ----------------------------------------------------------------------


def test_a_refresh_moto_cannot_answer_keeps_the_bundled_prices_and_says_so_once(
    aws: AwsWorld, caplog: pytest.LogCaptureFixture
) -> None:
    pricing, sink, metrics = refresher(AwsClient.for_region(REGION))
    caplog.set_level(logging.INFO, logger="karpy.aws.pricing")
    # AWS is asked in a thread of its own: the reconcile that starts a refresh does not wait for it
    # (moto's 500s are retried with backoff, seconds in all).
    started = time.monotonic()
    assert pricing.reconcile("refresh") == POLL_INTERVAL
    assert time.monotonic() - started < 1.0
    assert refresh(pricing) == RETRY_INTERVAL
    assert refresh(pricing) == RETRY_INTERVAL
    assert sink.updates == []
    assert pricing.on_demand == BUNDLED
    messages = warnings(caplog)
    assert len(messages) == 2, messages  # one per kind of price, not one per attempt
    assert any("on-demand prices not refreshed" in m and "AWS answered" in m for m in messages)
    assert any("spot prices not refreshed" in m and "against an on-demand price" in m for m in messages)
    assert all(CATALOG.retrieved in message for message in messages)
    assert pricing.failures.value(capacity_type="on-demand", reason=REASON_ERROR) == 2
    assert pricing.failures.value(capacity_type="spot", reason=REASON_IMPLAUSIBLE) == 2
    assert FAILURES in metrics.registry.exposition()


# -- answers in the API's shapes, through the Stubber ---------------------------------------


def price_list_entry(name: str, price: float, currency: str = "USD") -> str:
    return json.dumps(
        {
            "product": {"productFamily": "Compute Instance", "attributes": {"instanceType": name}},
            "terms": {
                "OnDemand": {
                    f"{name}.JRTCKXETXF": {
                        "priceDimensions": {
                            f"{name}.JRTCKXETXF.6YS6EN2CT7": {
                                "unit": "Hrs",
                                "pricePerUnit": {currency: f"{price:.10f}"},
                            }
                        }
                    }
                }
            },
        }
    )


def spot_record(name: str, zone: str, price: float, hour: int) -> dict[str, Any]:
    return {
        "AvailabilityZone": zone,
        "InstanceType": name,
        "ProductDescription": "Linux/UNIX",
        "SpotPrice": f"{price:.6f}",
        "Timestamp": datetime(2026, 12, 3, hour, tzinfo=UTC),
    }


@contextmanager
def answering(
    on_demand: Mapping[str, float] | None, spot: list[dict[str, Any]] | None
) -> Iterator[AwsClient]:
    """A real client whose GetProducts and DescribeSpotPriceHistory answer these (None: an error)."""
    session = boto3.session.Session(aws_access_key_id="x", aws_secret_access_key="x", region_name=REGION)
    client = AwsClient(session)
    pricing = Stubber(client.pricing_client())
    ec2 = Stubber(client._ec2)
    if on_demand is None:
        pricing.add_client_error("get_products", "AccessDeniedException", "not authorized", 400)
    else:
        entries = [price_list_entry(name, price) for name, price in on_demand.items()]
        # Two pages, as the API pages its price list.
        pricing.add_response(
            "get_products", {"PriceList": entries[:100], "FormatVersion": "aws_v1", "NextToken": "page-2"}
        )
        pricing.add_response("get_products", {"PriceList": entries[100:], "FormatVersion": "aws_v1"})
    if spot is None:
        ec2.add_client_error("describe_spot_price_history", "UnauthorizedOperation", "no", 403)
    else:
        ec2.add_response("describe_spot_price_history", {"SpotPriceHistory": spot})
    with pricing, ec2:
        yield client
        pricing.assert_no_pending_responses()
        ec2.assert_no_pending_responses()


def current_answers() -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Prices 10 % above the bundled ones for all types but the first, and two spot prices per offering."""
    on_demand = {name: round(price * 1.1, 4) for name, price in list(BUNDLED.items())[1:]}
    spot = []
    for name, price in on_demand.items():
        spot.append(spot_record(name, "us-east-1a", price * 0.5, hour=8))
        spot.append(spot_record(name, "us-east-1a", price * 0.3, hour=9))  # the newer one wins
    return on_demand, spot


def test_accepted_prices_are_laid_over_the_bundled_ones_and_handed_over() -> None:
    on_demand, spot = current_answers()
    with answering(on_demand, spot) as client:
        pricing, sink, metrics = refresher(client)
        assert refresh(pricing) == REFRESH_INTERVAL
    ((handed_on_demand, handed_spot),) = sink.updates
    first = next(iter(BUNDLED))
    assert handed_on_demand == {**BUNDLED, **on_demand} and handed_on_demand[first] == BUNDLED[first]
    for name, price in on_demand.items():
        assert handed_spot[(name, "us-east-1a")] == pytest.approx(price * 0.3, abs=1e-6)
    # Offerings AWS did not price keep the bundled spot price.
    bundled_zone, bundled_price = next(iter(CATALOG.entries[0].spot_prices.items()))
    assert handed_spot[(first, bundled_zone)] == bundled_price
    assert pricing.last_refresh.value(capacity_type="on-demand") == pricing.clock.now()
    assert "karpenter_cloudprovider_pricing_last_refresh_timestamp_seconds" in metrics.registry.exposition()


@pytest.mark.parametrize(
    ("case", "reason", "said"),
    [
        ("a price ten times off", REASON_IMPLAUSIBLE, "more than 10 times off"),
        ("few types", REASON_IMPLAUSIBLE, "for only 10 of the"),
        ("nothing", REASON_EMPTY, "listed no on-demand prices"),
        ("an error", REASON_ERROR, "AccessDeniedException"),
    ],
)
def test_a_refused_on_demand_answer_keeps_the_previous_prices_and_spot_still_refreshes(
    case: str, reason: str, said: str, caplog: pytest.LogCaptureFixture
) -> None:
    good, spot = current_answers()
    answers: dict[str, Mapping[str, float] | None] = {
        "a price ten times off": {**good, "m5.large": BUNDLED["m5.large"] * 11},
        "few types": dict(list(good.items())[:10]),
        "nothing": {},
        "an error": None,
    }
    with answering(answers[case], spot) as client:
        pricing, sink, metrics = refresher(client)
        assert refresh(pricing) == RETRY_INTERVAL
    ((handed_on_demand, handed_spot),) = sink.updates
    assert handed_on_demand == BUNDLED
    assert handed_spot[("m5.large", "us-east-1a")] == pytest.approx(good["m5.large"] * 0.3, abs=1e-6)
    (message,) = warnings(caplog)
    assert said in message
    assert pricing.failures.value(capacity_type="on-demand", reason=reason) == 1
    assert FAILURES in metrics.registry.exposition()


def test_an_implausible_spot_price_is_refused() -> None:
    on_demand, spot = current_answers()
    spot.append(spot_record("m5.large", "us-east-1b", 0.00001, hour=10))
    with answering(on_demand, spot) as client:
        pricing, sink, _ = refresher(client)
        refresh(pricing)
    ((handed_on_demand, handed_spot),) = sink.updates
    assert handed_on_demand["m5.large"] == on_demand["m5.large"]
    assert handed_spot == pricing.spot and ("m5.large", "us-east-1b") in handed_spot
    assert handed_spot[("m5.large", "us-east-1b")] == CATALOG.entries[
        [entry.name for entry in CATALOG.entries].index("m5.large")
    ].spot_prices.get("us-east-1b")


def test_a_streak_of_failures_warns_once_and_a_success_ends_it(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="karpy.aws.pricing")
    on_demand, spot = current_answers()
    sink, metrics = RecordingSink(), Metrics()
    clock = VirtualClock()
    pricing: PricingRefresher | None = None
    for answer in (None, None, on_demand, None):
        with answering(answer, spot) as client:
            if pricing is None:
                pricing = PricingRefresher(client, sink, clock, metrics=metrics)
            pricing.client = client
            refresh(pricing)
    assert pricing is not None
    assert len(warnings(caplog)) == 2  # the first streak, and the one after the success
    assert any("refreshed from AWS again" in record.getMessage() for record in caplog.records)
    # The failure after the success keeps what the success brought.
    assert pricing.on_demand["m5.large"] == on_demand["m5.large"]


def test_price_list_entries_are_read_in_dollars_or_yuan() -> None:
    assert on_demand_price(json.loads(price_list_entry("m5.large", 0.096))) == ("m5.large", 0.096)
    assert on_demand_price(json.loads(price_list_entry("m5.large", 0.7, currency="CNY"))) == ("m5.large", 0.7)
    assert on_demand_price(json.loads(price_list_entry("m5.large", 0.0))) is None  # a free placeholder SKU
    assert on_demand_price({"product": {"attributes": {}}, "terms": {}}) is None
