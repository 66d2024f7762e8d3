"""Scenario files and the inputs of ``karpy simulate``.

A run's input is either plain Kubernetes manifests (files or directories,
applied at time zero, the run going on until the cluster is steady), or a
``Scenario`` (``karpy.dev/v1alpha1``) that adds timed steps:

.. code-block:: yaml

    apiVersion: karpy.dev/v1alpha1
    kind: Scenario
    metadata: {name: scale-up-and-down}
    spec:
      duration: 2h                      # time limit (default 24h)
      jobs: {duration: 5m}              # how long Job pods run without karpy.dev/duration
      load:                             # demand HorizontalPodAutoscalers read (karpy.sim.load)
        - kind: Deployment
          name: app
          cpu: {steps: [{at: 0s, value: 2}, {at: 10m, value: 12}]}
      settings:                         # karpy's settings, as karpy run takes them
        featureGates: SpotToSpotConsolidation=true
        nodeOverheadCost: 0.02          # $/h per node beyond its price (KARPY_NODE_OVERHEAD_COST)
        minValuesPolicy: BestEffort     # MIN_VALUES_POLICY (Strict by default)
        preferencePolicy: Ignore        # PREFERENCE_POLICY (Respect by default)
      cloud:                            # optional simulated-cloud settings
        registrationDelay: 30s
        capacityFailures:
          - {instanceType: c5.large, zone: "*", capacityType: spot, from: 0s, until: 10m}
        launchErrors:                   # every launch fails in the window
          - {message: "RequestLimitExceeded", from: 0s, until: 30s}
        registrationFailures:           # instances launched in the window never join
          - {from: 5m, until: 40m}
        interruptions:                  # EC2's warnings, handled as karpy run handles its queue's
          - {at: 10m, kind: spot-interruption, instanceTypes: [m5.large], fraction: 0.5}
        nodeFailures:                   # Nodes that break (node repair, gate NodeRepair, replaces them)
          - {at: 15m, condition: {type: Ready, status: Unknown}, count: 1}
      steps:
        - at: 0s
          apply: {files: [nodepool.yaml, app.yaml]}   # relative to the scenario
        - at: 5m
          scale: {kind: Deployment, namespace: default, name: app, replicas: 20}
        - at: 20m
          delete: {kind: Deployment, namespace: default, name: app}

``apply`` also takes ``objects:`` (inline manifests). Objects beside the
Scenario in its own file are applied at time zero (no step could name them);
a second Scenario is an error, as one run runs one. Errors in a scenario
file are reported like manifest errors, with the file, the object and the
field, all of them: a field that cannot be read is recorded and the parse
goes on (:class:`~karpy.sim.field_errors.FieldErrors`). Every field is checked for its type, its range
and what it names (a time after ``duration``, an instance type or zone the
simulated cloud does not have, a NodePool no step applies). A Scenario with
a bad field of its own is not run (a bad object it applies, or one beside it
in its file, is reported and skipped, as in plain manifests). A field the format does not
have (``durration``) is one of them, with a did-you-mean: the format's fields
are the ones :func:`parse_scenario` asks for (a ``ReadLog``, see
:mod:`karpy.api.fields`), so a new field is added in one place, by reading it
there; ``metadata`` is an ObjectMeta, as in every kind. docs/scenarios.md describes
every field, its default, and the workload kinds the simulator runs.
"""

from __future__ import annotations

import difflib
import itertools
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from importlib import resources
from pathlib import Path

from karpy.api._reader import FieldReader, ManifestError
from karpy.api.duration import DurationError, format_duration, parse_duration
from karpy.api.fields import CLOSE_ENOUGH, OBJECT_META, ReadLog, check, did_you_mean
from karpy.api.limits import INT32_MAX
from karpy.api.manifest import (
    IGNORED_KINDS,
    KNOWN_KINDS,
    LoadedObject,
    LoadResult,
    load_documents,
    parse_document,
)
from karpy.api.nodeclass import StatusCapacityReservation
from karpy.api.requirements import CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT
from karpy.api.schedulerconfig import SchedulerConfiguration, parse_scheduler_config
from karpy.api.text import TextDecodeError, decode_manifest_bytes
from karpy.baselines.cluster_autoscaler import (
    EXPANDERS,
    ClusterAutoscalerFlags,
    NodeGroup,
)
from karpy.cloud.aws_catalog import load_catalog
from karpy.cloud.kwok_catalog import KwokInstanceTypes, parse_kwok_instance_types
from karpy.cloud.reservations import (
    MATCH_OPEN,
    MATCH_TARGETED,
    RESERVATION_TYPE_CAPACITY_BLOCK,
    RESERVATION_TYPE_DEFAULT,
    RESERVATION_TYPES,
)
from karpy.operator.interruption import STATES
from karpy.settings import FeatureGates, parse_feature_gates, parse_node_overhead_cost, parse_policy
from karpy.sim.cloud import (
    INTERRUPTION_KINDS,
    SIMULATED_OWNER_ID,
    SPOT_INTERRUPTION,
    STATE_CHANGE,
    CapacityFailure,
    Interruption,
    LaunchError,
    NodeFailure,
    RegistrationFailure,
    SimulatedReservation,
)
from karpy.sim.field_errors import FieldErrors
from karpy.sim.files import (
    NO_SUCH_FILE,
    UnreadableFileError,
    directory_entries,
    path_kind,
    read_regular_file,
)
from karpy.sim.load import WorkloadLoad, parse_load

SCENARIO_API_VERSION = "karpy.dev/v1alpha1"
SCENARIO_KIND = "Scenario"
DEFAULT_DURATION = 24 * 3600.0
# A NodePool scales as `kubectl scale nodepool` does: its spec.replicas (a static pool only).
SCALABLE_KINDS = ("Deployment", "ReplicaSet", "StatefulSet", "NodePool")
STEP_ACTIONS = ("apply", "delete", "scale")
# The capacity types the simulated cloud offers; ``*`` in a cloud window: any.
CAPACITY_TYPES = (CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT)
ANY_OFFERING = "*"
DEFAULT_LAUNCH_ERROR = "simulated cloud API error"
INFINITY = float("inf")
NONE: tuple[str, ...] = ()
# The files a directory stands for, as kubectl apply -f DIR reads them.
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
# Kinds a delete step names in the ``default`` namespace when it names none.
NAMESPACED_KINDS = (
    "Deployment",
    "ReplicaSet",
    "StatefulSet",
    "DaemonSet",
    "Job",
    "CronJob",
    "Pod",
    "PodDisruptionBudget",
    "PersistentVolumeClaim",
)


@dataclass(slots=True)
class Step:
    at: float
    action: str  # "apply", "delete" or "scale"
    objects: LoadResult = field(default_factory=LoadResult)
    kind: str = ""
    namespace: str = ""
    name: str = ""
    replicas: int = 0
    description: str = ""
    # Where the Scenario declares it (spec.steps[2]); empty for the objects applied at time zero.
    where: str = ""


@dataclass(frozen=True, slots=True)
class ClusterAutoscalerSpec:
    """``spec.clusterAutoscaler``: the baseline's flags and node groups (None: one per NodePool type)."""

    flags: ClusterAutoscalerFlags = field(default_factory=ClusterAutoscalerFlags)
    node_groups: tuple[NodeGroup, ...] | None = None


@dataclass(slots=True)
class Scenario:
    name: str
    duration: float = DEFAULT_DURATION
    steps: list[Step] = field(default_factory=list)
    registration_delay: float | None = None
    # spec.cloud.kwokInstanceTypes: what a KWOKNodeClass offers unless its annotation says.
    kwok_instance_types: KwokInstanceTypes | None = None
    capacity_failures: list[CapacityFailure] = field(default_factory=list)
    launch_errors: list[LaunchError] = field(default_factory=list)
    registration_failures: list[RegistrationFailure] = field(default_factory=list)
    interruptions: list[Interruption] = field(default_factory=list)
    node_failures: list[NodeFailure] = field(default_factory=list)
    capacity_reservations: list[SimulatedReservation] = field(default_factory=list)
    # How long a Job's pod runs when its template has no karpy.dev/duration; None: until deleted.
    job_duration: float | None = None
    # spec.settings.featureGates, read as karpy run reads FEATURE_GATES; None: not given.
    feature_gates: FeatureGates | None = None
    # spec.settings.nodeOverheadCost ($/h), read as karpy run reads KARPY_NODE_OVERHEAD_COST; None: not given.
    node_overhead_cost: float | None = None
    # spec.settings.minValuesPolicy and preferencePolicy, read as karpy run reads MIN_VALUES_POLICY
    # and PREFERENCE_POLICY; None: not given.
    min_values_policy: str | None = None
    preference_policy: str | None = None
    # spec.settings.schedulerConfig, read as karpy run reads SCHEDULER_CONFIG; None: not given.
    scheduler_config: SchedulerConfiguration | None = None
    # spec.load: demand over time per workload, what HorizontalPodAutoscalers read.
    loads: list[WorkloadLoad] = field(default_factory=list)
    run_until_steady: bool = True
    # spec.clusterAutoscaler, for runs with the Cluster Autoscaler baseline; None: not given.
    cluster_autoscaler: ClusterAutoscalerSpec | None = None
    source: str = ""
    # Read from a Scenario document (not made up to apply plain manifests at time zero).
    from_document: bool = False

    def steps_after(self, end: float) -> list[Step]:
        """The Scenario's own steps a run ending at ``end`` (seconds from its start) leaves out."""
        return [step for step in self.steps if step.where and step.at > end]


def _duration(reader: FieldReader, key: str, default: float | None = None) -> float:
    text = reader.scalar_str(key)
    if text is None:
        if default is None:
            raise reader.error(key, "required")
        return default
    try:
        value = parse_duration(text)
    except DurationError as error:
        raise reader.error(key, str(error)) from error
    if value < 0:
        raise reader.error(key, "must not be negative")
    return value


def _kwok_instance_types(reader: FieldReader, key: str) -> KwokInstanceTypes:
    text = reader.scalar_str(key) or ""
    try:
        return parse_kwok_instance_types(text)
    except ValueError as error:
        raise reader.error(key, str(error)) from error


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _manifest_paths(paths: list[Path], result: LoadResult) -> Iterator[Path]:
    """Every manifest file among ``paths``, a directory standing for its manifest files.

    A path that does not exist, or is no regular file or directory (a FIFO,
    a device), is an error in ``result``, reported as the walk reaches it
    (:func:`karpy.sim.files.path_kind`: nothing is opened to tell).
    """
    for path in paths:
        try:
            if path_kind(path) == "file":
                yield path
                continue
            entries = _manifest_entries(path)
        except UnreadableFileError as error:
            result.add_error(f"{_display(path)}: {error}")
            continue
        yield from _manifest_paths(entries, result)


def manifest_texts(paths: list[Path], result: LoadResult) -> Iterator[tuple[str, str]]:
    """(file as displayed, text) of every manifest file among ``paths``.

    A directory stands for its ``*.yaml``, ``*.yml`` and ``*.json`` files,
    sorted; what cannot be read is an error in ``result``.
    """
    for path in _manifest_paths(paths, result):
        text = read_manifest_text(path, result)
        if text is not None:
            yield _display(path), text


def manifest_files(directory: Path) -> list[Path]:
    """The manifest files of ``directory`` (its :data:`MANIFEST_SUFFIXES` files), sorted.

    None if it cannot be listed: walking the paths reports why.
    """
    try:
        return _manifest_entries(directory)
    except UnreadableFileError:
        return []


def _manifest_entries(directory: Path) -> list[Path]:
    return [path for path in directory_entries(directory) if path.suffix in MANIFEST_SUFFIXES]


def _is_kind(path: Path, kind: str) -> bool:
    try:
        return path_kind(path) == kind
    except UnreadableFileError:
        return False


@dataclass(slots=True)
class _ReadFile:
    """One manifest file read once: its YAML documents and what kept it from being read in full."""

    source: str
    documents: list[object]
    # The file could not be read or decoded (no documents then).
    unreadable: list[str]
    # The YAML stream broke off after ``documents`` (a syntax error, a bound passed).
    broken_off: list[str]

    @classmethod
    def read(cls, path: Path) -> _ReadFile:
        unreadable, broken_off = LoadResult(), LoadResult()
        text = read_manifest_text(path, unreadable)
        source = _display(path)
        documents = list(load_documents(text, source, broken_off)) if text is not None else []
        return cls(source, documents, unreadable.errors, broken_off.errors)

    def parsed(self) -> LoadResult:
        """Its objects, as :func:`karpy.api.manifest.parse_manifests` makes them of its text."""
        result = LoadResult()
        for index, document in enumerate(self.documents):
            parse_document(document, self.source, index, result)
        result.errors.extend(self.broken_off)
        return result


def _load(paths: list[Path], read: Callable[[Path], _ReadFile]) -> LoadResult:
    """Manifests from files and directories: every file's reading problems, then its objects."""
    result = LoadResult()
    files: list[_ReadFile] = []
    for path in _manifest_paths(paths, result):
        read_file = read(path)
        result.errors.extend(read_file.unreadable)
        files.append(read_file)
    for read_file in files:
        result.extend(read_file.parsed())
    return result


def load_files(paths: list[Path]) -> LoadResult:
    """Manifests from files and directories (see :func:`manifest_texts`)."""
    return _load(paths, _ReadFile.read)


def read_manifest_text(path: Path, result: LoadResult) -> str | None:
    """The text of a manifest file, or None with the reason it cannot be read in ``result``."""
    try:
        return decode_manifest_bytes(read_regular_file(path))
    except (UnreadableFileError, TextDecodeError) as error:
        result.add_error(f"{_display(path)}: {error}")
    return None


def _window(errors: FieldErrors, reader: FieldReader, end_of_run: float) -> tuple[float, float]:
    """``from`` and ``until`` of a cloud window: open at some moment of the run, ``until`` after ``from``."""
    start = errors.read(reader, lambda: _duration(reader, "from", 0.0), 0.0)
    end = errors.read(reader, lambda: _duration(reader, "until", INFINITY), INFINITY)
    if end <= start:
        errors.add(
            reader.error(
                "until",
                f"{format_duration(end)} is not after from ({format_duration(start)}):"
                " the window is never open",
            )
        )
    elif start > end_of_run:
        errors.add(reader.error("from", _after_the_end(start, end_of_run, "the window would never open")))
    return start, end


def _after_the_end(at: float, end_of_run: float, consequence: str) -> str:
    end = format_duration(end_of_run)
    return f"{format_duration(at)} is after the end of the run (spec.duration {end}): {consequence}"


def _instance_type_error(name: str, path: str) -> ManifestError | None:
    """An error unless ``name`` is an instance type of the simulated cloud's catalog."""
    catalog = load_catalog()
    if catalog.entry(name) is not None:
        return None
    names = [entry.name for entry in catalog.entries]
    families = sorted({entry_name.split(".", 1)[0] for entry_name in names})
    # The closest name, though several are close: types differ by a character (m5.large, m5a.large).
    close = difflib.get_close_matches(name, names, n=1, cutoff=CLOSE_ENOUGH)
    closest = f' (did you mean "{close[0]}"?)' if close else ""
    return ManifestError(
        path,
        f"unknown instance type {name!r}{closest}: the simulated cloud has the"
        f" {len(names)} instance types of karpy's {catalog.region} catalog, of the families"
        f" {', '.join(families)}",
    )


def _zone_error(name: str, path: str) -> ManifestError | None:
    zones = load_catalog().zones
    if name in zones:
        return None
    return ManifestError(
        path, f"unknown zone {name!r}{did_you_mean(name, zones)}: the simulated cloud has {', '.join(zones)}"
    )


def _capacity_type_error(name: str, path: str) -> ManifestError | None:
    if name in CAPACITY_TYPES:
        return None
    return ManifestError(path, f"one of {', '.join(CAPACITY_TYPES)}, not {name!r}")


def _offering_field(
    errors: FieldErrors, reader: FieldReader, key: str, known: Callable[[str, str], ManifestError | None]
) -> str:
    """An offering's instance type, zone or capacity type: ``*`` (any, the default) or one the cloud has."""
    value = errors.read(reader, lambda: reader.string(key, ANY_OFFERING), ANY_OFFERING)
    error = known(value, reader.child_path(key)) if value != ANY_OFFERING else None
    if error is not None:
        errors.add(error)
    return value


def _offering_list(
    errors: FieldErrors, reader: FieldReader, key: str, known: Callable[[str, str], ManifestError | None]
) -> tuple[str, ...]:
    """A list of instance types or zones, each one the cloud has."""
    values = errors.read(reader, lambda: reader.str_list(key), NONE)
    for index, value in enumerate(values):
        error = known(value, f"{reader.child_path(key)}[{index}]")
        if error is not None:
            errors.add(error)
    return values


def _parse_failure(errors: FieldErrors, reader: FieldReader, end_of_run: float) -> CapacityFailure:
    start, end = _window(errors, reader, end_of_run)
    return CapacityFailure(
        instance_type=_offering_field(errors, reader, "instanceType", _instance_type_error),
        zone=_offering_field(errors, reader, "zone", _zone_error),
        capacity_type=_offering_field(errors, reader, "capacityType", _capacity_type_error),
        start=start,
        end=end,
    )


def _parse_reservation(
    errors: FieldErrors, reader: FieldReader, index: int, end_of_run: float
) -> SimulatedReservation:
    """One ``cloud.capacityReservations`` entry (docs/scenarios.md)."""
    instance_type = errors.read(reader, lambda: reader.string("instanceType"), "")
    zone = errors.read(reader, lambda: reader.string("zone"), "")
    for key, value, known in (
        ("instanceType", instance_type, _instance_type_error),
        ("zone", zone, _zone_error),
    ):
        problem = known(value, reader.child_path(key)) if value else reader.error(key, "required")
        if problem is not None:
            errors.add(problem)
    count = errors.read(reader, lambda: reader.integer("count"), None)
    if count is None or count < 1:
        errors.add(reader.error("count", "required: the reservation's number of instances, at least 1"))
    reservation_type = errors.read(reader, lambda: reader.string("type", RESERVATION_TYPE_DEFAULT), "")
    if reservation_type not in RESERVATION_TYPES:
        errors.add(reader.error("type", f"one of {', '.join(RESERVATION_TYPES)}, not {reservation_type!r}"))
    criteria = errors.read(reader, lambda: reader.string("instanceMatchCriteria", MATCH_TARGETED), "")
    if criteria not in (MATCH_OPEN, MATCH_TARGETED):
        errors.add(reader.error("instanceMatchCriteria", f"one of open, targeted, not {criteria!r}"))
    until = errors.read(reader, lambda: _duration(reader, "until", INFINITY), INFINITY)
    if reservation_type == RESERVATION_TYPE_CAPACITY_BLOCK and until == INFINITY:
        errors.add(reader.error("until", "required for a capacity-block: a Capacity Block ends"))
    reservation = StatusCapacityReservation(
        id=errors.read(reader, lambda: reader.string("id", f"cr-{index:017x}"), ""),
        instance_type=instance_type,
        zone=zone,
        reservation_type=reservation_type,
        interruptible=errors.read(reader, lambda: reader.boolean("interruptible"), False),
        instance_match_criteria=criteria,
        owner_id=errors.read(reader, lambda: reader.string("ownerID", SIMULATED_OWNER_ID), ""),
        end_time=None if until == INFINITY else until,
    )
    return SimulatedReservation(
        reservation, count or 0, errors.read(reader, lambda: reader.str_map("tags"), {})
    )


def _parse_launch_error(errors: FieldErrors, reader: FieldReader, end_of_run: float) -> LaunchError:
    start, end = _window(errors, reader, end_of_run)
    message = errors.read(
        reader, lambda: reader.string("message", DEFAULT_LAUNCH_ERROR), DEFAULT_LAUNCH_ERROR
    )
    return LaunchError(message=message, start=start, end=end)


def _parse_registration_failure(
    errors: FieldErrors, reader: FieldReader, end_of_run: float
) -> RegistrationFailure:
    start, end = _window(errors, reader, end_of_run)
    return RegistrationFailure(start, end)


def _parse_interruption(errors: FieldErrors, reader: FieldReader, end_of_run: float) -> Interruption:
    at = errors.read(reader, lambda: _duration(reader, "at"), 0.0)
    if at > end_of_run:
        errors.add(reader.error("at", _after_the_end(at, end_of_run, "the interruption would never come")))
    kind = errors.read(reader, lambda: reader.string("kind", SPOT_INTERRUPTION), SPOT_INTERRUPTION)
    if kind not in INTERRUPTION_KINDS:
        errors.add(reader.error("kind", f"one of {', '.join(INTERRUPTION_KINDS)}, not {kind!r}"))
    fraction, count = _parse_share(errors, reader)
    state = errors.read(reader, lambda: reader.string("state"), "")
    if state and kind != STATE_CHANGE:
        errors.add(reader.error("state", f"only for kind {STATE_CHANGE}"))
    elif state and state not in STATES:
        errors.add(reader.error("state", f"one of {', '.join(STATES)}, not {state!r}"))
    return Interruption(
        at=at,
        kind=kind,
        instance_types=_offering_list(errors, reader, "instanceTypes", _instance_type_error),
        zones=_offering_list(errors, reader, "zones", _zone_error),
        fraction=fraction,
        count=count,
        state=state or STATES[0],
    )


def _parse_share(errors: FieldErrors, reader: FieldReader) -> tuple[float | None, int | None]:
    """How many of the chosen instances an interruption or failure takes: ``fraction`` or ``count``."""
    fraction: float | None = None
    text = errors.read(reader, lambda: reader.scalar_str("fraction"), None)
    if text is not None:
        try:
            fraction = float(text)
        except ValueError:
            fraction = -1.0
        if not 0.0 < fraction <= 1.0:
            errors.add(reader.error("fraction", f"a number above 0 and at most 1, not {text!r}"))
    count = errors.read(reader, lambda: reader.integer("count"), None)
    if count is not None and count < 0:
        errors.add(reader.error("count", "must not be negative"))
    if fraction is not None and count is not None:
        errors.add(reader.error("", "give fraction or count, not both"))
    return fraction, count


def _parse_node_failure(errors: FieldErrors, reader: FieldReader, end_of_run: float) -> NodeFailure:
    at = errors.read(reader, lambda: _duration(reader, "at"), 0.0)
    if at > end_of_run:
        errors.add(reader.error("at", _after_the_end(at, end_of_run, "the failure would never come")))
    condition = errors.read(
        reader, lambda: reader.obj("condition"), FieldReader({}, reader.child_path("condition"))
    )
    condition_type = errors.read(condition, lambda: condition.string("type", "Ready"), "Ready")
    if not condition_type:
        errors.add(condition.error("type", "must not be empty"))
    status = errors.read(condition, lambda: condition.string("status", "Unknown"), "Unknown")
    if status not in ("True", "False", "Unknown"):
        errors.add(condition.error("status", f"one of True, False, Unknown, not {status!r}"))
    reason = errors.read(condition, lambda: condition.string("reason", "NodeStatusUnknown"), "")
    fraction, count = _parse_share(errors, reader)
    return NodeFailure(
        at=at,
        condition_type=condition_type,
        condition_status=status,
        reason=reason,
        instance_types=_offering_list(errors, reader, "instanceTypes", _instance_type_error),
        zones=_offering_list(errors, reader, "zones", _zone_error),
        fraction=fraction,
        count=count,
    )


def _parse_node_group(errors: FieldErrors, reader: FieldReader) -> NodeGroup:
    min_size = errors.read(reader, lambda: reader.integer("minSize"), None) or 0
    max_size = errors.read(reader, lambda: _required_integer(reader, "maxSize"), None)
    instance_types = _offering_list(errors, reader, "instanceTypes", _instance_type_error)
    zones = _offering_list(errors, reader, "zones", _zone_error)
    group = NodeGroup(
        name=errors.read(reader, lambda: reader.string("name"), ""),
        instance_types=instance_types,
        capacity_type=errors.read(reader, lambda: reader.string("capacityType", "on-demand"), "on-demand"),
        min_size=min_size if min_size is not None else 0,
        max_size=max_size if max_size is not None else min_size or 0,
        zones=zones,
        nodepool=errors.read(reader, lambda: reader.string("nodePool"), ""),
    )
    for problem in group.problems():
        errors.add(reader.error(problem.field_name, str(problem).split(": ", 1)[1]))
    template = load_catalog().entry(instance_types[0]) if instance_types else None
    known_zones = all(zone in load_catalog().zones for zone in zones)
    if template is not None and group.capacity_type in CAPACITY_TYPES and known_zones:
        offered = template.spot_prices if group.capacity_type == CAPACITY_TYPE_SPOT else template.zones
        if not any(zone in offered for zone in zones or offered):
            where = f" in {', '.join(zones)}" if zones else ""
            errors.add(
                reader.error(
                    "instanceTypes[0]",
                    f"{template.name} (the group's template) has no {group.capacity_type} offering{where}:"
                    " the group could never grow",
                )
            )
    return group


def _required_integer(reader: FieldReader, key: str) -> int:
    value = reader.integer(key)
    if value is None:
        raise reader.error(key, "required")
    return value


def _non_negative_int(errors: FieldErrors, reader: FieldReader, key: str, default: int) -> int:
    value = errors.read(reader, lambda: reader.integer(key), None)
    if value is None:
        return default
    if value < 0:
        errors.add(reader.error(key, "must not be negative"))
        return default
    return value


def _fraction(errors: FieldErrors, reader: FieldReader, key: str, default: float) -> float:
    text = errors.read(reader, lambda: reader.scalar_str(key), None)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        errors.add(reader.error(key, f"a number from 0 to 1, not {text!r}"))
        return default
    return value


def _parse_cluster_autoscaler(
    errors: FieldErrors, reader: FieldReader
) -> tuple[ClusterAutoscalerSpec, list[tuple[str, NodeGroup]]]:
    """``spec.clusterAutoscaler``: Cluster Autoscaler's flags, camel-cased, and its node groups.

    The node groups come with their paths too, for the checks of what they name.
    """
    defaults = ClusterAutoscalerFlags()
    expander = errors.read(reader, lambda: reader.string("expander", defaults.expander), defaults.expander)
    if expander not in EXPANDERS:
        errors.add(reader.error("expander", f"one of {', '.join(EXPANDERS)}, not {expander!r}"))
    priorities: dict[int, tuple[str, ...]] = {}
    raw_priorities = errors.read(reader, lambda: reader.obj("priorities"), FieldReader({}))
    for key in raw_priorities:
        try:
            priority = int(key)
        except ValueError:
            errors.add(raw_priorities.error(key, "a priority is an integer"))
            continue
        patterns = errors.read(raw_priorities, partial(raw_priorities.str_list, key), NONE)
        for index, pattern in enumerate(patterns):
            try:
                re.compile(pattern)
            except re.error as error:
                errors.add(
                    ManifestError(
                        f"{raw_priorities.child_path(key)}[{index}]", f"not a regular expression: {error}"
                    )
                )
        priorities[priority] = patterns
    if expander == "priority" and not priorities and not reader.has("priorities"):
        errors.add(reader.error("priorities", "required with expander: priority"))

    def duration(key: str, default: float) -> float:
        return errors.read(reader, lambda: _duration(reader, key, default), default)

    flags = ClusterAutoscalerFlags(
        scan_interval=duration("scanInterval", defaults.scan_interval),
        expander=expander,
        priorities=priorities,
        seed=_non_negative_int(errors, reader, "seed", defaults.seed),
        max_nodes_total=_non_negative_int(errors, reader, "maxNodesTotal", defaults.max_nodes_total),
        max_node_provision_time=duration("maxNodeProvisionTime", defaults.max_node_provision_time),
        scale_down_enabled=errors.read(
            reader, lambda: reader.boolean("scaleDownEnabled", defaults.scale_down_enabled), True
        ),
        utilization_threshold=_fraction(
            errors, reader, "scaleDownUtilizationThreshold", defaults.utilization_threshold
        ),
        unneeded_time=duration("scaleDownUnneededTime", defaults.unneeded_time),
        delay_after_add=duration("scaleDownDelayAfterAdd", defaults.delay_after_add),
        max_empty_bulk_delete=_non_negative_int(
            errors, reader, "maxEmptyBulkDelete", defaults.max_empty_bulk_delete
        ),
        skip_nodes_with_system_pods=errors.read(
            reader,
            lambda: reader.boolean("skipNodesWithSystemPods", defaults.skip_nodes_with_system_pods),
            True,
        ),
        derived_max_size=_non_negative_int(errors, reader, "derivedMaxSize", defaults.derived_max_size),
    )
    if flags.scan_interval <= 0:
        errors.add(reader.error("scanInterval", "must be above zero"))
    if flags.max_node_provision_time <= 0:
        errors.add(reader.error("maxNodeProvisionTime", "must be above zero"))
    located = errors.items(reader, "nodeGroups", lambda item: (item.path, _parse_node_group(errors, item)))
    seen: set[str] = set()
    for where, group in located:
        if group.name in seen:
            errors.add(ManifestError(f"{where}.name", f"node group {group.name!r} is declared twice"))
        seen.add(group.name)
    groups = tuple(group for _, group in located) if reader.has("nodeGroups") else None
    return ClusterAutoscalerSpec(flags, groups), located


def _parse_step(
    errors: FieldErrors, item: FieldReader, source: str, base: Path | None, end_of_run: float
) -> Step:
    at = errors.read(item, lambda: _duration(item, "at", 0.0), 0.0)
    if at > end_of_run:
        errors.add(item.error("at", _after_the_end(at, end_of_run, "the step would never run")))
    actions = [action for action in STEP_ACTIONS if item.has(action)]
    if len(actions) != 1:
        # Raised, not recorded: a step without its action has nothing else to read.
        raise item.error("", "a step needs exactly one of apply, delete or scale")
    action = actions[0]
    body = item.obj(action)
    parsed = Step(at=at, action=action, where=item.path)
    if action == "apply":
        files = errors.read(body, lambda: body.str_list("files"), NONE)
        for index, file_name in enumerate(files):
            path = (base / file_name) if base is not None else Path(file_name)
            try:
                path_kind(path)
            except UnreadableFileError as error:
                found = str(error) != NO_SUCH_FILE
                errors.add(
                    ManifestError(
                        f"{body.child_path('files')}[{index}]",
                        f"{file_name}: {error}" if found else f"file not found: {file_name}",
                    )
                )
                continue
            parsed.objects.extend(load_files([path]))
        objects = body.raw("objects")
        if isinstance(objects, list):
            for index, document in enumerate(objects):
                parse_document(
                    document, f"{source} ({body.child_path('objects')}[{index}])", 0, parsed.objects
                )
        elif objects is not None:
            errors.add(body.error("objects", "expected a list of manifests"))
        if not files and not objects and not any(error.path.startswith(body.path) for error in errors.found):
            errors.add(body.error("", "needs files or objects to apply"))
        parsed.description = ", ".join(f"{loaded.kind} {loaded.name}" for loaded in parsed.objects.objects)
        return parsed
    parsed.kind = errors.read(body, lambda: body.required_str("kind"), "")
    parsed.namespace = errors.read(body, lambda: body.string("namespace"), "")
    parsed.name = errors.read(body, lambda: body.required_str("name"), "")
    if action == "scale":
        if parsed.kind and parsed.kind not in SCALABLE_KINDS:
            errors.add(body.error("kind", f"can scale {' or '.join(SCALABLE_KINDS)}, not {parsed.kind!r}"))
        parsed.replicas = errors.read(body, lambda: _replicas(body), 0)
        if parsed.kind in NAMESPACED_KINDS:
            parsed.namespace = parsed.namespace or "default"
    else:
        if parsed.kind and parsed.kind not in KNOWN_KINDS | IGNORED_KINDS:
            errors.add(
                body.error(
                    "kind",
                    f"unknown kind {parsed.kind!r}{did_you_mean(parsed.kind, KNOWN_KINDS | IGNORED_KINDS)}",
                )
            )
        if parsed.kind in NAMESPACED_KINDS:
            parsed.namespace = parsed.namespace or "default"
    target = f"{parsed.namespace}/{parsed.name}" if parsed.namespace else parsed.name
    parsed.description = f"{parsed.kind} {target}" + (
        f" to {parsed.replicas} replicas" if action == "scale" else ""
    )
    return parsed


def _check_node_group_pools(
    errors: FieldErrors, node_groups: list[tuple[str, NodeGroup]], applied_pools: set[str]
) -> None:
    """Each node group's NodePool is one the Scenario applies (its nodes' class, labels and taints)."""
    pools = sorted(applied_pools)
    if node_groups and not pools:
        where = node_groups[0][0].rsplit("[", 1)[0]
        errors.add(
            ManifestError(
                where,
                "the Scenario applies no NodePool: a node group's nodes take their node class,"
                " labels and taints from one",
            )
        )
        return
    for where, group in node_groups:
        if group.nodepool and group.nodepool not in pools:
            errors.add(
                ManifestError(
                    f"{where}.nodePool",
                    f"no NodePool {group.nodepool!r}{did_you_mean(group.nodepool, pools)}"
                    f" (the Scenario applies {', '.join(pools)}): the group's nodes take their node class,"
                    " labels and taints from it",
                )
            )


def _replicas(body: FieldReader) -> int:
    replicas = body.integer("replicas")
    if replicas is None or replicas < 0:
        raise body.error("replicas", "required, not negative")
    if replicas > INT32_MAX:
        raise body.error("replicas", f"{replicas} is over {INT32_MAX}, the most a workload has")
    return replicas


def parse_scenario(
    raw: dict[str, object], source: str, base: Path | None, beside: Sequence[LoadedObject] = ()
) -> tuple[Scenario, list[str]]:
    """A Scenario document; file references resolve against ``base``.

    Every error is returned, one line each: the Scenario's own (a Scenario
    with any is not run: its steps are dropped) and those of the objects its
    steps apply (skipped, as in plain manifests).
    """
    log = ReadLog()
    errors = FieldErrors(log)
    reader = FieldReader(raw, log=log)
    metadata = reader.raw("metadata")
    name = "scenario"
    if isinstance(metadata, dict) and isinstance(metadata.get("name"), str) and metadata["name"]:
        name = metadata["name"]
    elif metadata is not None:
        errors.read(reader, lambda: FieldReader.of(metadata, "metadata").string("name"), "")
    label = f'{source}: Scenario "{name}"'
    scenario = Scenario(name=name, source=source, from_document=True)
    own: list[str] = []
    if (reader.raw("apiVersion"), reader.raw("kind")) != (SCENARIO_API_VERSION, SCENARIO_KIND):
        own.append(f"{label}: apiVersion: a {SCENARIO_KIND} is {SCENARIO_API_VERSION}")
    spec = errors.read(reader, lambda: reader.obj("spec"), FieldReader({}, "spec"))

    scenario.duration = errors.read(spec, lambda: _duration(spec, "duration", DEFAULT_DURATION), INFINITY)
    if scenario.duration == 0:
        errors.add(spec.error("duration", "must be above zero"))
    # Times after the end are checked against a duration that could be read.
    end_of_run = scenario.duration
    if scenario.duration == INFINITY:
        scenario.duration = DEFAULT_DURATION

    cloud = errors.read(spec, lambda: spec.obj("cloud"), FieldReader({}, "spec.cloud"))
    if cloud.has("registrationDelay"):
        scenario.registration_delay = errors.read(cloud, lambda: _duration(cloud, "registrationDelay"), None)
    if cloud.has("kwokInstanceTypes"):
        scenario.kwok_instance_types = errors.read(
            cloud, lambda: _kwok_instance_types(cloud, "kwokInstanceTypes"), None
        )
    scenario.capacity_failures = errors.items(
        cloud, "capacityFailures", lambda item: _parse_failure(errors, item, end_of_run)
    )
    scenario.launch_errors = errors.items(
        cloud, "launchErrors", lambda item: _parse_launch_error(errors, item, end_of_run)
    )
    scenario.registration_failures = errors.items(
        cloud, "registrationFailures", lambda item: _parse_registration_failure(errors, item, end_of_run)
    )
    scenario.interruptions = errors.items(
        cloud, "interruptions", lambda item: _parse_interruption(errors, item, end_of_run)
    )
    scenario.node_failures = errors.items(
        cloud, "nodeFailures", lambda item: _parse_node_failure(errors, item, end_of_run)
    )
    numbered = itertools.count(1)  # a reservation without an id gets cr-000...1, cr-000...2...
    scenario.capacity_reservations = errors.items(
        cloud,
        "capacityReservations",
        lambda item: _parse_reservation(errors, item, next(numbered), end_of_run),
    )

    settings = errors.read(spec, lambda: spec.obj("settings"), FieldReader({}, "spec.settings"))
    gates = errors.read(settings, lambda: settings.string("featureGates"), "")
    if settings.has("featureGates"):
        try:
            scenario.feature_gates = parse_feature_gates(gates)
        except ValueError as error:
            errors.add(settings.error("featureGates", str(error)))
    if settings.has("nodeOverheadCost"):
        try:
            scenario.node_overhead_cost = parse_node_overhead_cost(str(settings.raw("nodeOverheadCost")))
        except ValueError as error:
            errors.add(settings.error("nodeOverheadCost", str(error)))
    policies = (("minValuesPolicy", "MIN_VALUES_POLICY"), ("preferencePolicy", "PREFERENCE_POLICY"))
    for field_name, env in policies:
        if settings.has(field_name):
            try:
                value = parse_policy(env, str(settings.raw(field_name)))
            except ValueError as error:
                errors.add(settings.error(field_name, str(error)))
                continue
            if field_name == "minValuesPolicy":
                scenario.min_values_policy = value
            else:
                scenario.preference_policy = value
    if settings.has("schedulerConfig"):
        document = settings.raw("schedulerConfig")
        text = document if isinstance(document, str) else json.dumps(document)
        try:
            # A document as the setting's text, or written out in place as an object.
            scenario.scheduler_config = parse_scheduler_config(text)
        except ValueError as error:
            errors.add(settings.error("schedulerConfig", str(error)))

    node_groups: list[tuple[str, NodeGroup]] = []
    if spec.has("clusterAutoscaler"):
        cluster_autoscaler = errors.read(spec, lambda: spec.obj("clusterAutoscaler"), None)
        if cluster_autoscaler is not None:
            scenario.cluster_autoscaler, node_groups = _parse_cluster_autoscaler(errors, cluster_autoscaler)

    jobs = errors.read(spec, lambda: spec.obj("jobs"), FieldReader({}, "spec.jobs"))
    if jobs.has("duration"):
        scenario.job_duration = errors.read(jobs, lambda: _duration(jobs, "duration"), None)

    scenario.loads = errors.items(spec, "load", lambda item: parse_load(item, base, errors))
    targets = [load.key for load in scenario.loads]
    for index, key in enumerate(targets):
        if key in targets[:index]:
            errors.add(ManifestError(f"{spec.child_path('load')}[{index}]", f"a second load for {key}"))

    steps = errors.items(spec, "steps", lambda item: _parse_step(errors, item, source, base, end_of_run))
    scenario.steps = sorted(steps, key=lambda step: step.at)

    applied = [*beside, *(loaded for step in steps for loaded in step.objects.objects)]
    _check_node_group_pools(
        errors, node_groups, {loaded.name for loaded in applied if loaded.kind == "NodePool"}
    )
    own += [f"{label}: {error}" for error in errors.found]
    own += [f"{label}: {field}" for field in check(metadata, OBJECT_META, "metadata")]
    own += [f"{label}: {field}" for field in log.unknown_fields(errors.stopped)]
    object_errors = [error for parsed_step in scenario.steps for error in parsed_step.objects.errors]
    for parsed_step in scenario.steps:
        parsed_step.objects.errors.clear()  # returned once, below; the step keeps its objects
    if own:
        scenario.steps = []  # a Scenario with a bad field of its own is not run
    return scenario, [*own, *object_errors]


def _files_applied(raw: dict[str, object], base: Path) -> set[Path]:
    """The files the steps of a Scenario document apply, resolved (what is not a file name is left out)."""
    spec = raw.get("spec")
    steps = spec.get("steps") if isinstance(spec, dict) else None
    named: set[Path] = set()
    for step in steps if isinstance(steps, list) else ():
        apply = step.get("apply") if isinstance(step, dict) else None
        files = apply.get("files") if isinstance(apply, dict) else None
        for name in files if isinstance(files, list) else ():
            if isinstance(name, str):
                named.add((base / name).resolve())
    return named


def is_scenario(raw: object) -> bool:
    return isinstance(raw, dict) and raw.get("kind") == SCENARIO_KIND


def _scenario_name(raw: object) -> str:
    metadata = raw.get("metadata") if isinstance(raw, dict) else None
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return str(name) if name is not None else "scenario"


def load_inputs(paths: list[Path]) -> tuple[Scenario, LoadResult]:
    """A scenario from ``paths``: a Scenario file among them, or plain manifests applied at zero."""
    files: list[Path] = []
    # The files a directory stood for: those of the Scenario's own directory are its steps' to apply.
    listed: set[Path] = set()
    for path in paths:
        if _is_kind(path, "directory"):
            listed.update(manifest_files(path))
            files.extend(manifest_files(path))
        else:
            files.append(path)
    # Each file is read and its YAML loaded once, whether it holds the Scenario or not.
    read_files: dict[Path, _ReadFile] = {}

    def read(path: Path) -> _ReadFile:
        if path not in read_files:
            read_files[path] = _ReadFile.read(path)
        return read_files[path]

    for path in files:
        if not _is_kind(path, "file"):
            continue
        # What cannot be read is reported here if the file holds the Scenario, else when
        # the files are loaded as manifests below.
        read_file = read(path)
        documents = read_file.documents
        scenario_docs = [document for document in documents if is_scenario(document)]
        if scenario_docs:
            raw = scenario_docs[0]
            assert isinstance(raw, dict)
            # The other objects of the Scenario's own file are applied at time zero, as
            # those of files from other directories are: no step could name them. Their
            # errors are reported as the same file's would be without the Scenario.
            extra = LoadResult(errors=list(read_file.unreadable))
            for index, document in enumerate(documents):
                if document is raw:
                    continue
                if is_scenario(document):
                    name = _scenario_name(document)
                    extra.add_error(
                        f'{_display(path)}: Scenario "{name}": not run: a run runs one Scenario,'
                        f' the first found ("{_scenario_name(raw)}")'
                    )
                else:
                    parse_document(document, _display(path), index, extra)
            extra.errors.extend(read_file.broken_off)
            # A file named on the command line is applied unless a step applies it; the other
            # files of the Scenario's directory, given as the directory, are its steps' to name.
            named = _files_applied(raw, path.parent)
            others = [
                p
                for p in files
                if p != path and not (p.parent == path.parent and p in listed) and p.resolve() not in named
            ]
            if others:
                extra.extend(_load(others, read))
            scenario, errors = parse_scenario(raw, _display(path), path.parent, beside=extra.objects)
            if extra.objects:
                # The step holds the objects only: the errors are the run's, returned below.
                beside = LoadResult(objects=extra.objects)
                scenario.steps.insert(
                    0, Step(at=0.0, action="apply", objects=beside, description="extra manifests")
                )
            return scenario, LoadResult(errors=[*extra.errors, *errors], notes=extra.notes)
    loaded = _load(paths, read)
    source = ", ".join(_display(p) for p in paths)
    if not (loaded.objects or loaded.errors or loaded.notes):
        # Nothing at all, not even a skipped kind: a wrong path or an empty file, as
        # kubectl apply's "no objects passed to apply"; an empty run would hide it.
        suffixes = f"{', '.join(MANIFEST_SUFFIXES[:-1])} and {MANIFEST_SUFFIXES[-1]}"
        read_for = (
            f" (a directory is read for its {suffixes} files)"
            if any(_is_kind(p, "directory") for p in paths)
            else ""
        )
        loaded.add_error(f"{source}: no Kubernetes objects{read_for}")
    scenario = Scenario(name="manifests", source=source)
    scenario.steps.append(
        Step(
            at=0.0,
            action="apply",
            objects=LoadResult(objects=loaded.objects),
            description=", ".join(f"{o.kind} {o.name}" for o in loaded.objects),
        )
    )
    return scenario, LoadResult(errors=loaded.errors, notes=loaded.notes)


def builtin_scenario_path(name: str = "seed") -> Path:
    return Path(str(resources.files("karpy.sim").joinpath("scenarios", name, "scenario.yaml")))
