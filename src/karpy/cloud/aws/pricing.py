"""Instance prices refreshed from AWS: on-demand from the Pricing API, spot from the price history.

karpy chooses the cheapest offering that fits and consolidates onto cheaper
ones, so its prices must be AWS' current ones, as Karpenter's are. The bundled
catalog (:mod:`karpy.cloud.aws_catalog`, with the date it was captured) is the
starting point and the fallback; :class:`PricingRefresher` replaces it with
what AWS says, at start and every :data:`REFRESH_INTERVAL` seconds (12 hours,
Karpenter's pricing interval), and hands the result to a :class:`PriceSink`
(the AWS cloud provider):

- **on-demand**: GetProducts of the Pricing API for AmazonEC2 in the
  instances' region, Linux, shared tenancy, no pre-installed software,
  capacity status ``Used``, operation ``RunInstances`` (plain Linux);
- **spot**: DescribeSpotPriceHistory for ``Linux/UNIX`` from an hour ago, the
  newest price of each (type, zone).

What AWS reports is laid over the bundled prices (types AWS does not list
keep theirs), so a type is never left without a price.

**Refusing a bad answer.** Each kind of price is checked on its own, and a
refresh that fails is not applied: the previous prices stay (the bundled ones
until a refresh succeeds). It fails when AWS answers with an error, with
nothing, or with something implausible:

- fewer than half of the bundled types priced: the filter or the parsing
  missed most of the list (a renamed attribute, a region with no price list),
  and prices for the few types found would make those alone look cheap or
  dear against bundled ones from another day;
- an on-demand price more than :data:`MAX_FACTOR` (10) times off the bundled
  one, or a spot price above 10 times the bundled on-demand price or below
  1/100 of it: regions differ by well under 2 times and spot discounts stop
  at about 90 %, so such a price is a unit or currency error (a monthly
  price, a yuan read as a dollar, a placeholder), and one wrong price is
  enough to steer every launch to that type, so the whole answer is refused.

**Not blocking the other controllers.** The price list of a region is
several pages of GetProducts, and an endpoint that fails is retried with
backoff before the error comes back: seconds either way. So the calls run in
a thread of their own; the reconcile that starts them returns, and the ones
that follow (every :data:`POLL_INTERVAL`) find the answers and apply them. The
checks, the log lines, the metrics and the hand-over to the sink all happen
in the reconcile, on the controllers' thread, so the sink needs no locking
for the refresher's sake.

A failed refresh is retried after :data:`RETRY_INTERVAL` (an hour: a few
calls an hour cost nothing and stale prices are fixed within the hour).
It is one warning in the log when a streak of failures starts, not one per
attempt, and one info line when a refresh succeeds again; the metrics
``karpenter_cloudprovider_pricing_refresh_failures_total{capacity_type,reason}``
(``reason``: ``error``, ``empty``, ``implausible``) and
``karpenter_cloudprovider_pricing_last_refresh_timestamp_seconds{capacity_type}``
(when that kind was last refreshed from AWS; absent while the bundled prices
are in use) tell a dashboard the same. Karpenter has no metric for this; the
names follow its ``karpenter_cloudprovider_`` family.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol, TypeVar

from karpy.api.requirements import CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT
from karpy.cloud.aws.client import AwsApiError, AwsClient
from karpy.cloud.aws_catalog import Catalog, load_catalog
from karpy.logs import FailureStreak, about
from karpy.operator.cluster import Clock
from karpy.operator.karpenter_metrics import NAMESPACE, Metrics
from karpy.operator.runtime import Watch

log = logging.getLogger("karpy.aws.pricing")

REFRESH_KEY = "refresh"
# Seconds between two refreshes (Karpenter's 12 hours), and after a failed one.
REFRESH_INTERVAL = 12 * 3600.0
RETRY_INTERVAL = 3600.0
# While AWS is being asked (in a thread of its own), the answer is looked for this often.
POLL_INTERVAL = 1.0
# How far a price may be from the bundled one before the answer is refused.
MAX_FACTOR = 10.0
# Below this fraction of the bundled on-demand price a spot price is a placeholder.
MIN_SPOT_FRACTION = 0.01
# The share of the bundled types a refresh must price.
MIN_COVERAGE = 0.5
# Spot prices are asked from this many seconds back (the price in effect then, and changes since).
SPOT_HISTORY = 3600.0

REASON_ERROR = "error"
REASON_EMPTY = "empty"
REASON_IMPLAUSIBLE = "implausible"

OnDemandPrices = Mapping[str, float]
SpotPrices = Mapping[tuple[str, str], float]
Prices = TypeVar("Prices", OnDemandPrices, SpotPrices)


class PriceSink(Protocol):
    """Who uses the prices: the AWS cloud provider."""

    def update_prices(self, on_demand: OnDemandPrices, spot: SpotPrices) -> None: ...


@dataclass(frozen=True, slots=True)
class Refused:
    """Why an answer was not applied: a metric reason and a message for the log."""

    reason: str
    message: str

    def __str__(self) -> str:
        return self.message


def check_on_demand(prices: OnDemandPrices, bundled: OnDemandPrices) -> Refused | None:
    """None when ``prices`` may replace the on-demand prices; see the module docstring."""
    if not prices:
        return Refused(REASON_EMPTY, "the Pricing API listed no on-demand prices")
    priced = sum(1 for name in bundled if name in prices)
    if priced < MIN_COVERAGE * len(bundled):
        return Refused(
            REASON_IMPLAUSIBLE,
            f"on-demand prices for only {priced} of the {len(bundled)} instance types karpy knows",
        )
    for name, price in sorted(prices.items()):
        reference = bundled.get(name)
        if reference and not reference / MAX_FACTOR <= price <= reference * MAX_FACTOR:
            return Refused(
                REASON_IMPLAUSIBLE,
                f"on-demand price of {name} is {price:g}/h, more than {MAX_FACTOR:g} times off"
                f" the bundled {reference:g}/h",
            )
    return None


def check_spot(prices: SpotPrices, bundled_on_demand: OnDemandPrices) -> Refused | None:
    """None when ``prices`` may replace the spot prices; see the module docstring."""
    if not prices:
        return Refused(REASON_EMPTY, "the spot price history holds no prices")
    types = {name for name, _ in prices}
    priced = sum(1 for name in bundled_on_demand if name in types)
    if priced < MIN_COVERAGE * len(bundled_on_demand):
        return Refused(
            REASON_IMPLAUSIBLE,
            f"spot prices for only {priced} of the {len(bundled_on_demand)} instance types karpy knows",
        )
    for (name, zone), price in sorted(prices.items()):
        reference = bundled_on_demand.get(name)
        if reference and not reference * MIN_SPOT_FRACTION <= price <= reference * MAX_FACTOR:
            return Refused(
                REASON_IMPLAUSIBLE,
                f"spot price of {name} in {zone} is {price:g}/h against an on-demand price of"
                f" {reference:g}/h",
            )
    return None


class PricingRefresher:
    """Refreshes the prices a :class:`PriceSink` uses; see the module docstring. One key: ``refresh``."""

    name = "pricing"

    def __init__(
        self,
        client: AwsClient,
        sink: PriceSink,
        clock: Clock,
        *,
        metrics: Metrics | None = None,
        interval: float = REFRESH_INTERVAL,
        catalog: Catalog | None = None,
    ) -> None:
        self.client = client
        self.sink = sink
        self.clock = clock
        self.interval = interval
        self.catalog = catalog or load_catalog()
        registry = (metrics if metrics is not None else Metrics()).registry
        self.failures = registry.counter(
            f"{NAMESPACE}_cloudprovider_pricing_refresh_failures_total",
            "Number of instance price refreshes that failed or were refused, the previous prices being "
            "kept. Labeled by capacity type and reason (error, empty, implausible).",
            ["capacity_type", "reason"],
        )
        self.last_refresh = registry.gauge(
            f"{NAMESPACE}_cloudprovider_pricing_last_refresh_timestamp_seconds",
            "When the prices of a capacity type were last refreshed from AWS (Unix time); absent while "
            "the bundled prices are in use.",
            ["capacity_type"],
        )
        self.bundled_on_demand: dict[str, float] = {
            entry.name: entry.on_demand_price for entry in self.catalog.entries
        }
        bundled_spot = {
            (entry.name, zone): price
            for entry in self.catalog.entries
            for zone, price in entry.spot_prices.items()
        }
        # The prices in use: the bundled ones, each replaced by AWS' once a refresh is accepted.
        self.on_demand: dict[str, float] = dict(self.bundled_on_demand)
        self.spot: dict[tuple[str, str], float] = dict(bundled_spot)
        self._bundled_spot = bundled_spot
        # Each capacity type's refreshes failing in a row (a streak being logged).
        self._failing = {
            capacity_type: FailureStreak(log, RETRY_INTERVAL, RETRY_INTERVAL)
            for capacity_type in (CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT)
        }
        self._started = False
        self._fetching: Future[_Answers] | None = None

    def watches(self) -> list[Watch]:
        # Prices matter once there is something to launch: the first NodePool starts the refreshes,
        # which then keep themselves going by requeueing.
        return [Watch("NodePool", self._start)]

    def _start(self, old: object | None, new: object | None) -> Iterable[str]:
        return () if self._started else [REFRESH_KEY]

    def reconcile(self, key: str) -> float | None:
        self._started = True
        if self._fetching is None:
            self._fetching = self._fetch(self.clock.now())
        if not self._fetching.done():
            return POLL_INTERVAL
        answers, self._fetching = self._fetching.result(), None
        on_demand = self._accepted(
            CAPACITY_TYPE_ON_DEMAND,
            answers.on_demand,
            lambda prices: check_on_demand(prices, self.bundled_on_demand),
            answers.asked_at,
        )
        spot = self._accepted(
            CAPACITY_TYPE_SPOT,
            answers.spot,
            lambda prices: check_spot(prices, self.bundled_on_demand),
            answers.asked_at,
        )
        if on_demand is not None:
            self.on_demand = {**self.bundled_on_demand, **on_demand}
        if spot is not None:
            self.spot = {**self._bundled_spot, **spot}
        if on_demand is not None or spot is not None:
            self.sink.update_prices(self.on_demand, self.spot)
        return self.interval if on_demand is not None and spot is not None else RETRY_INTERVAL

    def _fetch(self, now: float) -> Future[_Answers]:
        """Ask AWS for both kinds of price in a thread of its own; the future holds the answers."""
        fetched: Future[_Answers] = Future()

        def fetch() -> None:
            fetched.set_result(
                _Answers(
                    on_demand=_asked(lambda: self.client.on_demand_prices(self.client.region)),
                    spot=_asked(lambda: self.client.spot_prices(now - SPOT_HISTORY)),
                    asked_at=now,
                )
            )

        threading.Thread(target=fetch, name="karpy-pricing", daemon=True).start()
        return fetched

    def _accepted(
        self,
        capacity_type: str,
        answer: Prices | Refused,
        check: Callable[[Prices], Refused | None],
        now: float,
    ) -> Prices | None:
        """``answer`` when it is prices ``check`` accepts, else None (logged and counted)."""
        refused = answer if isinstance(answer, Refused) else check(answer)
        if refused is None:
            assert not isinstance(answer, Refused)
            self.last_refresh.labels(capacity_type=capacity_type).set(now)
            self._failing[capacity_type].succeeded(
                f"{capacity_type} prices refreshed from AWS again", extra=about(controller=self.name)
            )
            return answer
        self.failures.labels(capacity_type=capacity_type, reason=refused.reason).inc()
        self._failing[capacity_type].failed(
            f"{capacity_type} prices not refreshed, keeping the previous ones"
            f" (bundled: {self.catalog.retrieved})",
            refused,
            extra=about(controller=self.name),
        )
        return None


@dataclass(frozen=True, slots=True)
class _Answers:
    """What AWS answered a refresh, each kind of price or why there is none, and when it was asked."""

    on_demand: OnDemandPrices | Refused
    spot: SpotPrices | Refused
    asked_at: float


def _asked(call: Callable[[], Prices]) -> Prices | Refused:
    """``call()``, or why it gave no prices; nothing is raised, as the fetching thread has nobody to tell."""
    try:
        return call()
    except AwsApiError as error:
        return Refused(REASON_ERROR, f"AWS answered {error}")
    except Exception as error:  # an answer that cannot be read is a failed refresh, not a dead thread
        log.debug("reading the prices failed", exc_info=True)
        return Refused(REASON_ERROR, f"the answer could not be read: {type(error).__name__}: {error}")
