"""The settings of ``karpy run``: flags, environment variables, and their defaults.

A Helm chart configures a controller through its container's environment,
and a person at a terminal through flags; ``karpy run`` takes both. Every
setting has an environment variable (Karpenter's name where Karpenter has the
setting: ``BATCH_IDLE_DURATION``, ``BATCH_MAX_DURATION``, ``CLUSTER_NAME``,
``LOG_LEVEL``, ``METRICS_PORT``, ``HEALTH_PROBE_PORT``; a ``KARPY_`` name
where it is karpy's own) and a flag spelled like the variable
(``--batch-idle-duration``). A flag wins over the variable, the variable over
the default; an empty variable counts as unset, as a chart's ``value: ""``
usually means "not set".

**Feature gates** (``FEATURE_GATES``) take Karpenter's format, a comma-separated
``Name=true,Other=false`` list, so a chart's ``settings.featureGates`` renders
into the same variable for both. Only the gates karpy honours are known
(:data:`FEATURE_GATES`); any other name is refused rather than ignored, since a
gate that is accepted and then does nothing would let an operator believe a
behaviour is on. A gate
not named keeps its default.

:data:`SETTINGS` is the one list of them: it declares the flags, and
``docs/run.md``'s table is checked against it by the tests, so the
documentation cannot drift from what the program accepts. ``KUBECONFIG`` and
the leader election settings are read where they are used
(:func:`karpy.kube._http.ApiTransport.from_kubeconfig`,
:mod:`karpy.kube.leader`).

Bad values are reported naming the flag or variable they came from
(``METRICS_PORT: 'http' is not a port number``), so the fix is obvious from a
pod's log.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from karpy.api.duration import DurationError, parse_duration
from karpy.api.nodecost import DEFAULT_NODE_OVERHEAD_COST
from karpy.api.schedulerconfig import SchedulerConfiguration, parse_scheduler_config
from karpy.logs import LOG_FORMATS, parse_level
from karpy.scheduling.policy import (
    MIN_VALUES_POLICIES,
    MIN_VALUES_STRICT,
    PREFERENCE_POLICIES,
    PREFERENCE_RESPECT,
)

T = TypeVar("T")

DEFAULT_METRICS_PORT = 8080
DEFAULT_LAUNCH_CONCURRENCY = 16
CLOUD_PROVIDERS = ("kwok", "aws")
# What a KWOKNodeClass offers (karpy.cloud.kwok_catalog.KwokInstanceTypes): the bundled AWS
# catalog, or Karpenter's kwok provider's types.
KWOK_INSTANCE_TYPES = ("aws", "karpenter")
DEFAULT_HEALTH_PROBE_PORT = 8081
# The feature gates karpy honours, with their defaults.
FEATURE_GATES: dict[str, bool] = {
    # Consolidation may replace a spot node by a cheaper spot node (the disruption controller's spot_to_spot).
    # On, unlike Karpenter: measured in the simulator, off leaves a scaled-down spot fleet at 3.5x the price
    # of a fresh plan, and the 15-type and 10% rules keep it from churning (docs/consolidation.md).
    "SpotToSpotConsolidation": True,
    # CapacityBuffers (autoscaling.x-k8s.io) are watched and their room kept free; off, as in Karpenter.
    "CapacityBuffer": False,
    # Static NodePools (spec.replicas) keep their replica count (karpy.controllers.static). On, unlike
    # Karpenter's alpha gate: karpy's API takes spec.replicas, so the pool does what it says unless
    # the gate is turned off, which leaves static pools without nodes, as Karpenter's gate does.
    "StaticCapacity": True,
    # Node repair (karpy.disruption.repair): nodes whose conditions match the cloud provider's repair
    # policies past their toleration are replaced, within the Unhealthy budgets. Off, as in Karpenter
    # v1.15 (an alpha gate): replacing nodes on a condition is a change of behaviour to opt into.
    "NodeRepair": False,
    # NodeOverlays (karpenter.sh/v1alpha1) are watched and applied to prices and capacities; off, as in
    # Karpenter (alpha).
    "NodeOverlay": False,
    # Capacity reservations (EC2NodeClass capacityReservationSelectorTerms) are resolved, offered as
    # capacity type reserved and launched into; on, as in Karpenter since v1.6.
    "ReservedCapacity": True,
    # Terminate-first (karpy.disruption.terminate_first): a drifted node whose replacement cannot be
    # staged first (its pods fit only in the full capacity reservation slot it holds; its static pool
    # is at its node limit or has only full reservations) is deleted first. Off, as in Karpenter (alpha).
    "TerminateFirstDrift": False,
    # The same for an unhealthy node node repair replaces (needs NodeRepair). Off, as in Karpenter (alpha).
    "TerminateFirstRepair": False,
}


# Karpenter's scheduling policies (settings of v1.4-v1.6), each value as Karpenter has it
# (karpy.scheduling.policy says what each does).
_POLICIES = {
    "MIN_VALUES_POLICY": MIN_VALUES_POLICIES,
    "PREFERENCE_POLICY": PREFERENCE_POLICIES,
}


class SettingsError(ValueError):
    """A flag or environment variable with a value karpy cannot use."""


@dataclass(frozen=True, slots=True)
class Setting:
    env: str
    default: str
    help: str

    @property
    def flag(self) -> str:
        return "--" + self.env.removeprefix("KARPY_").lower().replace("_", "-")

    @property
    def dest(self) -> str:
        return self.env.removeprefix("KARPY_").lower()


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "BATCH_IDLE_DURATION",
        "1s",
        "the batch of pending pods closes when no new one came for this long",
    ),
    Setting("BATCH_MAX_DURATION", "10s", "the batch of pending pods closes after this long at most"),
    Setting(
        "KARPY_CLOUD_PROVIDER",
        "kwok",
        "kwok (Node objects kept Ready by kwok or the fake kubelet) or aws (EC2 instances)",
    ),
    Setting(
        "CLUSTER_NAME",
        "",
        "the cluster's name: in the start-up log line, and on AWS in every tag (required there)",
    ),
    Setting(
        "INTERRUPTION_QUEUE",
        "",
        "AWS: the SQS queue of spot interruption and instance events (empty: not watched)",
    ),
    Setting(
        "CLUSTER_ENDPOINT",
        "",
        "AWS: the API server URL AL2, AL2023 and Bottlerocket nodes join (Custom user data needs none)",
    ),
    Setting("CLUSTER_CA_BUNDLE", "", "AWS: the cluster's CA certificate, base64 PEM, for the same nodes"),
    Setting(
        "KARPY_AWS_SSM_PREFIX",
        "",
        "AWS: a prefix to the /aws/service/... SSM parameters AMI aliases are read from",
    ),
    Setting(
        "KARPY_AWS_LAUNCH_CONCURRENCY",
        str(DEFAULT_LAUNCH_CONCURRENCY),
        "AWS: CreateFleet and TerminateInstances calls in flight at once",
    ),
    Setting(
        "FEATURE_GATES",
        ",".join(f"{name}={str(on).lower()}" for name, on in FEATURE_GATES.items()),
        "Name=true,Other=false: the feature gates to switch on or off",
    ),
    Setting(
        "KARPY_NODE_OVERHEAD_COST",
        f"{DEFAULT_NODE_OVERHEAD_COST:g}",
        "$/h every node costs beyond its instance, volumes and public IPv4 (per-host licences):"
        " the solver adds it to each node's price, so fewer, larger nodes win when they save it",
    ),
    Setting(
        "MIN_VALUES_POLICY",
        MIN_VALUES_STRICT,
        "Strict: a pod stays pending rather than launch a node with fewer values than a requirement's"
        " minValues; BestEffort: such a node is launched, its minValues lowered to what it offers and"
        " the NodeClaim annotated karpenter.sh/nodeclaim-min-values-relaxed",
    ),
    Setting(
        "PREFERENCE_POLICY",
        PREFERENCE_RESPECT,
        "Respect: preferred affinities and ScheduleAnyway spreads are honoured, relaxed one at a time"
        " when they cannot be met; Ignore: provisioning plans as if pods had none",
    ),
    Setting(
        "SCHEDULER_CONFIG",
        "",
        "a YAML or JSON document of the kube-scheduler settings to mirror, as Karpenter's"
        " --scheduler-config: podTopologySpread.defaultConstraints, which pods that declare no"
        " topologySpreadConstraints are planned with (empty: none)",
    ),
    Setting("LOG_LEVEL", "info", "debug, info, warn or error"),
    Setting("KARPY_LOG_FORMAT", "json", "json (one object per line) or text"),
    Setting("METRICS_PORT", str(DEFAULT_METRICS_PORT), "the port of /metrics (0: any free port)"),
    Setting(
        "HEALTH_PROBE_PORT",
        str(DEFAULT_HEALTH_PROBE_PORT),
        "the port of /healthz and /readyz (0: any free port)",
    ),
    Setting(
        "KARPY_REGISTRATION_DELAY",
        "0s",
        "time between a kwok launch and its Node's creation, as an instance's boot would take",
    ),
    Setting(
        "KARPY_KWOK_INSTANCE_TYPES",
        "aws",
        "what a KWOKNodeClass without the karpy.dev/kwok-instance-types annotation offers:"
        " aws (the bundled AWS catalog) or karpenter (Karpenter's kwok types, c-16x-amd64-linux...)",
    ),
)
_BY_ENV = {setting.env: setting for setting in SETTINGS}


@dataclass(frozen=True, slots=True)
class FeatureGates:
    """The gates of :data:`FEATURE_GATES`, each on or off."""

    spot_to_spot_consolidation: bool = FEATURE_GATES["SpotToSpotConsolidation"]
    """SpotToSpotConsolidation: consolidation may replace a spot node by a cheaper spot node."""

    capacity_buffer: bool = FEATURE_GATES["CapacityBuffer"]
    """CapacityBuffer: CapacityBuffers are watched and the room they ask for kept free."""
    static_capacity: bool = FEATURE_GATES["StaticCapacity"]
    """StaticCapacity: static NodePools (spec.replicas) are kept at their replica count."""
    node_repair: bool = FEATURE_GATES["NodeRepair"]
    """NodeRepair: nodes unhealthy by the cloud provider's repair policies are replaced."""
    node_overlay: bool = FEATURE_GATES["NodeOverlay"]
    """NodeOverlay: NodeOverlays are watched and applied wherever nodes are priced or sized."""
    reserved_capacity: bool = FEATURE_GATES["ReservedCapacity"]
    """ReservedCapacity: capacity reservations are offered as capacity type reserved and launched into."""
    terminate_first_drift: bool = FEATURE_GATES["TerminateFirstDrift"]
    """TerminateFirstDrift: a drifted node that cannot be replaced first is deleted first."""
    terminate_first_repair: bool = FEATURE_GATES["TerminateFirstRepair"]
    """TerminateFirstRepair: an unhealthy node that cannot be replaced first is deleted first."""


@dataclass(frozen=True, slots=True)
class RunOptions:
    """The values of :data:`SETTINGS`, one field a setting, as :func:`run_options` read them.

    Flat, as the flags and variables are; ``karpy`` groups them per part of
    karpy into :class:`karpy.run.RunSettings` (the provider's through
    :data:`karpy.providers.PROVIDERS`).
    """

    # Provisioning and disruption.
    batch_idle_duration: float = 1.0
    """BATCH_IDLE_DURATION, in seconds."""
    batch_max_duration: float = 10.0
    """BATCH_MAX_DURATION, in seconds."""
    node_overhead_cost: float = DEFAULT_NODE_OVERHEAD_COST
    """KARPY_NODE_OVERHEAD_COST, in $/h."""
    min_values_policy: str = MIN_VALUES_STRICT
    """MIN_VALUES_POLICY: Strict or BestEffort."""
    preference_policy: str = PREFERENCE_RESPECT
    """PREFERENCE_POLICY: Respect or Ignore."""
    feature_gates: FeatureGates = FeatureGates()
    """FEATURE_GATES."""
    scheduler_config: SchedulerConfiguration | None = None
    """SCHEDULER_CONFIG: the cluster's default topology spread constraints; None: not set."""

    # The cloud provider.
    cloud_provider: str = "kwok"
    """KARPY_CLOUD_PROVIDER: a name of :data:`CLOUD_PROVIDERS`."""
    cluster_name: str = ""
    """CLUSTER_NAME: for the logs, and on AWS for the tags."""
    registration_delay: float = 0.0
    """KARPY_REGISTRATION_DELAY (kwok), in seconds."""
    kwok_instance_types: str = "aws"
    """KARPY_KWOK_INSTANCE_TYPES (kwok): a name of :data:`KWOK_INSTANCE_TYPES`."""
    interruption_queue: str = ""
    """INTERRUPTION_QUEUE (AWS)."""
    cluster_endpoint: str = ""
    """CLUSTER_ENDPOINT (AWS)."""
    cluster_ca_bundle: str = ""
    """CLUSTER_CA_BUNDLE (AWS)."""
    aws_ssm_prefix: str = ""
    """KARPY_AWS_SSM_PREFIX (AWS), without a trailing slash."""
    aws_launch_concurrency: int = DEFAULT_LAUNCH_CONCURRENCY
    """KARPY_AWS_LAUNCH_CONCURRENCY (AWS)."""

    # Logs and observability.
    log_level: int = logging.INFO
    """LOG_LEVEL, as a :mod:`logging` level."""
    log_format: str = "json"
    """KARPY_LOG_FORMAT: json or text."""
    metrics_port: int = DEFAULT_METRICS_PORT
    """METRICS_PORT."""
    health_probe_port: int = DEFAULT_HEALTH_PROBE_PORT
    """HEALTH_PROBE_PORT."""


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """Declare a flag for every setting; each defaults to None, meaning "see the environment"."""
    for setting in SETTINGS:
        if setting.env in ("KARPY_REGISTRATION_DELAY", "KARPY_KWOK_INSTANCE_TYPES"):
            continue  # declared with ``karpy run``'s other kwok flags; its value is read here all the same
        default = f"${setting.env}, else {setting.default}" if setting.default else f"${setting.env}"
        parser.add_argument(setting.flag, dest=setting.dest, help=f"{setting.help} (default: {default})")


_TRUE = frozenset({"1", "t", "true"})
_FALSE = frozenset({"0", "f", "false"})


def parse_bool(text: str, what: str) -> bool:
    """A boolean flag or environment value as Go's strconv.ParseBool reads it."""
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{what}: expected true or false, got {text!r}")


def parse_feature_gates(text: str, base: FeatureGates | None = None) -> FeatureGates:
    """``Name=true,Other=false`` over ``base`` (the defaults when None).

    Empty items are skipped, as Go's flag parser does. ``karpy run``'s
    ``FEATURE_GATES``, a Scenario's ``spec.settings.featureGates`` and
    ``karpy simulate --feature-gates`` are all read here, so a gate means the
    same thing wherever it is written. Raises ValueError (a SettingsError for
    an unknown or malformed item) naming what is wrong.
    """
    base = base if base is not None else FeatureGates()
    gates = {
        "SpotToSpotConsolidation": base.spot_to_spot_consolidation,
        "CapacityBuffer": base.capacity_buffer,
        "StaticCapacity": base.static_capacity,
        "NodeRepair": base.node_repair,
        "NodeOverlay": base.node_overlay,
        "ReservedCapacity": base.reserved_capacity,
        "TerminateFirstDrift": base.terminate_first_drift,
        "TerminateFirstRepair": base.terminate_first_repair,
    }
    for item in text.split(","):
        if not item.strip():
            continue
        name, equals, value = item.partition("=")
        name = name.strip()
        if not equals:
            raise SettingsError(f"{item.strip()!r} is not Name=true or Name=false")
        if name not in gates:
            known = ", ".join(FEATURE_GATES)
            raise SettingsError(f"unknown feature gate {name!r} (karpy knows {known})")
        gates[name] = parse_bool(value, name)
    return FeatureGates(
        spot_to_spot_consolidation=gates["SpotToSpotConsolidation"],
        capacity_buffer=gates["CapacityBuffer"],
        static_capacity=gates["StaticCapacity"],
        node_repair=gates["NodeRepair"],
        node_overlay=gates["NodeOverlay"],
        reserved_capacity=gates["ReservedCapacity"],
        terminate_first_drift=gates["TerminateFirstDrift"],
        terminate_first_repair=gates["TerminateFirstRepair"],
    )


def parse_node_overhead_cost(text: str | float) -> float:
    """A node overhead cost in $/h: a number, not negative and finite ("0.02", "0")."""
    try:
        cost = float(str(text).strip().removeprefix("$"))
    except ValueError:
        raise SettingsError(f"{text!r} is not a cost in $/h (a number such as 0.02)") from None
    if not 0 <= cost < float("inf"):
        raise SettingsError(f"{text!r} is not a cost in $/h (0 or more)")
    return cost


def _duration(text: str) -> float:
    seconds = parse_duration(text)
    if seconds < 0:
        raise DurationError(f"{text!r} is negative")
    return seconds


def _port(text: str) -> int:
    try:
        port = int(text.strip())
    except ValueError:
        raise SettingsError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise SettingsError(f"{port} is not a port number (0 to 65535)")
    return port


def _cloud_provider(text: str) -> str:
    value = text.strip().lower()
    if value not in CLOUD_PROVIDERS:
        raise SettingsError(f"unknown cloud provider {text!r} (expected kwok or aws)")
    return value


def _kwok_instance_types(text: str) -> str:
    value = text.strip().lower()
    if value not in KWOK_INSTANCE_TYPES:
        raise SettingsError(f"unknown kwok instance types {text!r} (expected aws or karpenter)")
    return value


def _positive_integer(text: str) -> int:
    try:
        number = int(text.strip())
    except ValueError:
        raise SettingsError(f"{text!r} is not a whole number") from None
    if number < 1:
        raise SettingsError(f"{number} is not at least 1")
    return number


def _log_format(text: str) -> str:
    value = text.strip().lower()
    if value not in LOG_FORMATS:
        raise SettingsError(f"unknown log format {text!r} (expected json or text)")
    return value


def _policy(env: str) -> Callable[[str], str]:
    """The converter of MIN_VALUES_POLICY or PREFERENCE_POLICY: one of Karpenter's values, as written."""
    return lambda text: parse_policy(env, text)


def parse_policy(env: str, text: str) -> str:
    """A value of MIN_VALUES_POLICY or PREFERENCE_POLICY (``karpy run`` and a Scenario's settings)."""
    supported = _POLICIES[env]
    value = text.strip()
    if value not in supported:
        raise SettingsError(f"unknown policy {text!r} (expected {' or '.join(supported)})")
    return value


def run_options(args: argparse.Namespace, environ: Mapping[str, str], *, verbose: bool = False) -> RunOptions:
    """The settings from ``args`` (flags), then ``environ``, then the defaults.

    ``verbose`` (``-v``) means ``LOG_LEVEL=debug`` unless a level is given.
    """

    def source(env: str) -> tuple[str, str, bool]:
        """(text, where it came from, whether it was given at all)."""
        setting = _BY_ENV[env]
        given = getattr(args, setting.dest, None)
        if given is not None:
            return str(given), setting.flag, True
        from_env = environ.get(env, "")
        if from_env.strip():
            return from_env, env, True
        return setting.default, setting.flag, False

    def read(env: str, convert: Callable[[str], T]) -> T:
        text, where, _ = source(env)
        try:
            return convert(text)
        except ValueError as problem:  # DurationError and SettingsError are ValueErrors
            raise SettingsError(f"{where}: {problem}") from None

    log_level = read("LOG_LEVEL", parse_level)
    if verbose and not source("LOG_LEVEL")[2]:
        log_level = logging.DEBUG
    idle = read("BATCH_IDLE_DURATION", _duration)
    maximum = read("BATCH_MAX_DURATION", _duration)
    if maximum < idle:
        raise SettingsError(
            f"BATCH_MAX_DURATION ({maximum:g}s) is shorter than BATCH_IDLE_DURATION ({idle:g}s)"
        )
    cloud_provider = read("KARPY_CLOUD_PROVIDER", _cloud_provider)
    cluster_name = source("CLUSTER_NAME")[0].strip()
    if cloud_provider == "aws" and not cluster_name:
        raise SettingsError(
            "CLUSTER_NAME is required with the aws cloud provider: it tags every instance karpy launches"
        )
    return RunOptions(
        batch_idle_duration=idle,
        batch_max_duration=maximum,
        cluster_name=cluster_name,
        log_level=log_level,
        log_format=read("KARPY_LOG_FORMAT", _log_format),
        metrics_port=read("METRICS_PORT", _port),
        health_probe_port=read("HEALTH_PROBE_PORT", _port),
        registration_delay=read("KARPY_REGISTRATION_DELAY", _duration),
        kwok_instance_types=read("KARPY_KWOK_INSTANCE_TYPES", _kwok_instance_types),
        cloud_provider=cloud_provider,
        interruption_queue=source("INTERRUPTION_QUEUE")[0].strip(),
        cluster_endpoint=source("CLUSTER_ENDPOINT")[0].strip(),
        cluster_ca_bundle=source("CLUSTER_CA_BUNDLE")[0].strip(),
        aws_ssm_prefix=source("KARPY_AWS_SSM_PREFIX")[0].strip().rstrip("/"),
        aws_launch_concurrency=read("KARPY_AWS_LAUNCH_CONCURRENCY", _positive_integer),
        feature_gates=read("FEATURE_GATES", parse_feature_gates),
        node_overhead_cost=read("KARPY_NODE_OVERHEAD_COST", parse_node_overhead_cost),
        min_values_policy=read("MIN_VALUES_POLICY", _policy("MIN_VALUES_POLICY")),
        preference_policy=read("PREFERENCE_POLICY", _policy("PREFERENCE_POLICY")),
        scheduler_config=read("SCHEDULER_CONFIG", parse_scheduler_config),
    )
