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
field; a Scenario with a bad field of its own is not run (a bad object it
applies is skipped, as in plain manifests). A field the format does not
have (``durration``) is one of them, with a did-you-mean: the format's fields
are the ones :func:`parse_scenario` asks for (a ``ReadLog``, see
:mod:`karpy.api.fields`), so a new field is added in one place, by reading it
there; ``metadata`` is an ObjectMeta, as in every kind. docs/scenarios.md describes
every field, its default, and the workload kinds the simulator runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from karpy.api._reader import FieldReader, ManifestError
from karpy.api.duration import DurationError, parse_duration
from karpy.api.fields import OBJECT_META, ReadLog, check
from karpy.api.limits import INT32_MAX
from karpy.api.manifest import LoadResult, load_documents, parse_document
from karpy.api.text import TextDecodeError, decode_manifest_bytes
from karpy.baselines.cluster_autoscaler import (
    EXPANDERS,
    ClusterAutoscalerFlags,
    NodeGroup,
    NodeGroupError,
)
from karpy.controllers.interruption import STATES
from karpy.settings import FeatureGates, parse_feature_gates, parse_node_cost
from karpy.sim.cloud import (
    INTERRUPTION_KINDS,
    SPOT_INTERRUPTION,
    STATE_CHANGE,
    CapacityFailure,
    Interruption,
    LaunchError,
    RegistrationFailure,
)
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
SCALABLE_KINDS = ("Deployment", "ReplicaSet", "StatefulSet")
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
    capacity_failures: list[CapacityFailure] = field(default_factory=list)
    launch_errors: list[LaunchError] = field(default_factory=list)
    registration_failures: list[RegistrationFailure] = field(default_factory=list)
    interruptions: list[Interruption] = field(default_factory=list)
    # How long a Job's pod runs when its template has no karpy.dev/duration; None: until deleted.
    job_duration: float | None = None
    # spec.settings.featureGates, read as karpy run reads FEATURE_GATES; None: not given.
    feature_gates: FeatureGates | None = None
    # spec.settings.nodeOverheadCost ($/h), read as karpy run reads KARPY_NODE_OVERHEAD_COST; None: not given.
    node_overhead_cost: float | None = None
    # spec.load: demand over time per workload, what HorizontalPodAutoscalers read.
    loads: list[WorkloadLoad] = field(default_factory=list)
    run_until_steady: bool = True
    # spec.clusterAutoscaler, for runs with the Cluster Autoscaler baseline; None: not given.
    cluster_autoscaler: ClusterAutoscalerSpec | None = None
    source: str = ""
    # Read from a Scenario document (not made up to apply plain manifests at time zero).
    from_document: bool = False


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


def _parse_failure(reader: FieldReader) -> CapacityFailure:
    return CapacityFailure(
        instance_type=reader.string("instanceType", "*"),
        zone=reader.string("zone", "*"),
        capacity_type=reader.string("capacityType", "*"),
        start=_duration(reader, "from", 0.0),
        end=_duration(reader, "until", float("inf")) if reader.has("until") else float("inf"),
    )


def _parse_launch_error(reader: FieldReader) -> LaunchError:
    return LaunchError(
        message=reader.string("message", "simulated cloud API error"),
        start=_duration(reader, "from", 0.0),
        end=_duration(reader, "until", float("inf")) if reader.has("until") else float("inf"),
    )


def _parse_interruption(reader: FieldReader) -> Interruption:
    kind = reader.string("kind", SPOT_INTERRUPTION)
    if kind not in INTERRUPTION_KINDS:
        raise reader.error("kind", f"one of {', '.join(INTERRUPTION_KINDS)}, not {kind!r}")
    if reader.has("fraction") and reader.has("count"):
        raise reader.error("", "give fraction or count, not both")
    fraction: float | None = None
    text = reader.scalar_str("fraction")
    if text is not None:
        try:
            fraction = float(text)
        except ValueError:
            fraction = -1.0
        if not 0.0 < fraction <= 1.0:
            raise reader.error("fraction", f"a number above 0 and at most 1, not {text!r}")
    count = reader.integer("count")
    if count is not None and count < 0:
        raise reader.error("count", "must not be negative")
    state = reader.string("state")
    if state and kind != STATE_CHANGE:
        raise reader.error("state", f"only for kind {STATE_CHANGE}")
    if state and state not in STATES:
        raise reader.error("state", f"one of {', '.join(STATES)}, not {state!r}")
    return Interruption(
        at=_duration(reader, "at"),
        kind=kind,
        instance_types=reader.str_list("instanceTypes"),
        zones=reader.str_list("zones"),
        fraction=fraction,
        count=count,
        state=state or STATES[0],
    )


def _parse_node_group(reader: FieldReader) -> NodeGroup:
    min_size = reader.integer("minSize", 0)
    max_size = reader.integer("maxSize")
    if max_size is None:
        raise reader.error("maxSize", "required")
    group = NodeGroup(
        name=reader.required_str("name"),
        instance_types=reader.str_list("instanceTypes"),
        capacity_type=reader.string("capacityType", "on-demand"),
        min_size=min_size if min_size is not None else 0,
        max_size=max_size,
        zones=reader.str_list("zones"),
        nodepool=reader.string("nodePool"),
    )
    try:
        group.check()
    except NodeGroupError as error:
        raise reader.error(error.field_name, str(error).split(": ", 1)[1]) from error
    return group


def _non_negative_int(reader: FieldReader, key: str, default: int) -> int:
    value = reader.integer(key, default)
    if value is None or value < 0:
        raise reader.error(key, "must not be negative")
    return value


def _parse_cluster_autoscaler(reader: FieldReader) -> ClusterAutoscalerSpec:
    """``spec.clusterAutoscaler``: Cluster Autoscaler's flags, camel-cased, and its node groups."""
    defaults = ClusterAutoscalerFlags()
    expander = reader.string("expander", defaults.expander)
    if expander not in EXPANDERS:
        raise reader.error("expander", f"one of {', '.join(EXPANDERS)}, not {expander!r}")
    priorities: dict[int, tuple[str, ...]] = {}
    raw_priorities = reader.obj("priorities")
    for key in raw_priorities:
        try:
            priority = int(key)
        except ValueError:
            raise raw_priorities.error(key, "a priority is an integer") from None
        priorities[priority] = raw_priorities.str_list(key)
    if expander == "priority" and not priorities:
        raise reader.error("priorities", "required with expander: priority")
    threshold_text = reader.scalar_str("scaleDownUtilizationThreshold")
    threshold = defaults.utilization_threshold
    if threshold_text is not None:
        try:
            threshold = float(threshold_text)
        except ValueError:
            threshold = -1.0
        if not 0.0 <= threshold <= 1.0:
            raise reader.error(
                "scaleDownUtilizationThreshold", f"a number from 0 to 1, not {threshold_text!r}"
            )
    flags = ClusterAutoscalerFlags(
        scan_interval=_duration(reader, "scanInterval", defaults.scan_interval),
        expander=expander,
        priorities=priorities,
        seed=_non_negative_int(reader, "seed", defaults.seed),
        max_nodes_total=_non_negative_int(reader, "maxNodesTotal", defaults.max_nodes_total),
        max_node_provision_time=_duration(reader, "maxNodeProvisionTime", defaults.max_node_provision_time),
        scale_down_enabled=reader.boolean("scaleDownEnabled", defaults.scale_down_enabled),
        utilization_threshold=threshold,
        unneeded_time=_duration(reader, "scaleDownUnneededTime", defaults.unneeded_time),
        delay_after_add=_duration(reader, "scaleDownDelayAfterAdd", defaults.delay_after_add),
        max_empty_bulk_delete=_non_negative_int(reader, "maxEmptyBulkDelete", defaults.max_empty_bulk_delete),
        skip_nodes_with_system_pods=reader.boolean(
            "skipNodesWithSystemPods", defaults.skip_nodes_with_system_pods
        ),
        derived_max_size=_non_negative_int(reader, "derivedMaxSize", defaults.derived_max_size),
    )
    if flags.scan_interval <= 0:
        raise reader.error("scanInterval", "must be above zero")
    groups: tuple[NodeGroup, ...] | None = None
    if reader.has("nodeGroups"):
        groups = reader.items("nodeGroups", _parse_node_group)
        seen: set[str] = set()
        for index, group in enumerate(groups):
            if group.name in seen:
                raise reader.error(
                    f"nodeGroups[{index}].name", f"node group {group.name!r} is declared twice"
                )
            seen.add(group.name)
    return ClusterAutoscalerSpec(flags, groups)


def parse_scenario(raw: dict[str, object], source: str, base: Path | None) -> tuple[Scenario, list[str]]:
    """A Scenario document; file references resolve against ``base``."""
    errors: list[str] = []
    log = ReadLog()
    reader = FieldReader(raw, log=log)
    metadata = reader.raw("metadata")
    name = FieldReader.of(metadata or {}, "metadata").string("name") or "scenario"
    label = f'{source}: Scenario "{name}"'
    scenario = Scenario(name=name, source=source, from_document=True)

    def unknown_fields(stopped_at: str | None) -> list[str]:
        found = [*check(metadata, OBJECT_META, "metadata"), *log.unknown_fields(stopped_at)]
        return [f"{label}: {field}" for field in found]

    if (reader.string("apiVersion"), reader.string("kind")) != (SCENARIO_API_VERSION, SCENARIO_KIND):
        errors.append(f"{label}: apiVersion: a {SCENARIO_KIND} is {SCENARIO_API_VERSION}")
    try:
        spec = reader.obj("spec")
        scenario.duration = _duration(spec, "duration", DEFAULT_DURATION)
        cloud = spec.obj("cloud")
        if cloud.has("registrationDelay"):
            scenario.registration_delay = _duration(cloud, "registrationDelay")
        scenario.capacity_failures = list(cloud.items("capacityFailures", _parse_failure))
        scenario.launch_errors = list(cloud.items("launchErrors", _parse_launch_error))
        scenario.registration_failures = [
            RegistrationFailure(failure.start, failure.end)
            for failure in cloud.items("registrationFailures", _parse_launch_error)
        ]
        scenario.interruptions = list(cloud.items("interruptions", _parse_interruption))
        settings = spec.obj("settings")
        if settings.has("featureGates"):
            gates = settings.string("featureGates")
            try:
                scenario.feature_gates = parse_feature_gates(gates)
            except ValueError as error:
                raise settings.error("featureGates", str(error)) from error
        if settings.has("nodeOverheadCost"):
            try:
                scenario.node_overhead_cost = parse_node_cost(str(settings.raw("nodeOverheadCost")))
            except ValueError as error:
                raise settings.error("nodeOverheadCost", str(error)) from error
        if spec.has("clusterAutoscaler"):
            scenario.cluster_autoscaler = _parse_cluster_autoscaler(spec.obj("clusterAutoscaler"))
        jobs = spec.obj("jobs")
        if jobs.has("duration"):
            scenario.job_duration = _duration(jobs, "duration")
        scenario.loads = list(spec.items("load", lambda item: parse_load(item, base)))
        targets = [load.key for load in scenario.loads]
        for index, key in enumerate(targets):
            if key in targets[:index]:
                raise ManifestError(f"{spec.child_path('load')}[{index}]", f"a second load for {key}")
    except ManifestError as error:
        return scenario, [*errors, f"{label}: {error}", *unknown_fields(error.path)]

    def step(item: FieldReader) -> Step:
        at = _duration(item, "at", 0.0)
        actions = [action for action in ("apply", "delete", "scale") if item.has(action)]
        if len(actions) != 1:
            raise item.error("", "a step needs exactly one of apply, delete or scale")
        action = actions[0]
        body = item.obj(action)
        parsed = Step(at=at, action=action)
        if action == "apply":
            for index, file_name in enumerate(body.str_list("files")):
                path = (base / file_name) if base is not None else Path(file_name)
                try:
                    path_kind(path)
                except UnreadableFileError as error:
                    found = str(error) != NO_SUCH_FILE
                    raise ManifestError(
                        f"{body.child_path('files')}[{index}]",
                        f"{file_name}: {error}" if found else f"file not found: {file_name}",
                    ) from None
                parsed.objects.extend(load_files([path]))
            objects = body.raw("objects")
            if isinstance(objects, list):
                for index, document in enumerate(objects):
                    parse_document(
                        document, f"{source} ({body.child_path('objects')}[{index}])", 0, parsed.objects
                    )
            elif objects is not None:
                raise body.error("objects", "expected a list of manifests")
            parsed.description = ", ".join(
                f"{loaded.kind} {loaded.name}" for loaded in parsed.objects.objects
            )
        else:
            parsed.kind = body.required_str("kind")
            parsed.namespace = body.string("namespace")
            parsed.name = body.required_str("name")
            if action == "scale":
                if parsed.kind not in SCALABLE_KINDS:
                    raise body.error("kind", f"can scale {' or '.join(SCALABLE_KINDS)}, not {parsed.kind!r}")
                replicas = body.integer("replicas")
                if replicas is None or replicas < 0:
                    raise body.error("replicas", "required, not negative")
                if replicas > INT32_MAX:  # as the API server refuses a scale beyond its int32
                    raise body.error(
                        "replicas", f"{replicas} does not fit the field's int32 (at most {INT32_MAX})"
                    )
                parsed.replicas = replicas
                parsed.namespace = parsed.namespace or "default"
            elif parsed.kind in NAMESPACED_KINDS:
                parsed.namespace = parsed.namespace or "default"
            target = f"{parsed.namespace}/{parsed.name}" if parsed.namespace else parsed.name
            parsed.description = f"{parsed.kind} {target}" + (
                f" to {parsed.replicas} replicas" if action == "scale" else ""
            )
        return parsed

    stopped_at: str | None = None
    try:
        scenario.steps = sorted(spec.items("steps", step), key=lambda s: s.at)
    except ManifestError as error:
        errors.append(f"{label}: {error}")
        stopped_at = error.path
    errors.extend(unknown_fields(stopped_at))
    object_errors = [error for parsed_step in scenario.steps for error in parsed_step.objects.errors]
    if errors:
        scenario.steps = []  # a Scenario with a bad field is not run, as one with a bad step is not
    return scenario, [*errors, *object_errors]


def is_scenario(raw: object) -> bool:
    return isinstance(raw, dict) and raw.get("kind") == SCENARIO_KIND


def _scenario_name(raw: object) -> str:
    metadata = raw.get("metadata") if isinstance(raw, dict) else None
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return str(name) if name is not None else "scenario"


def load_inputs(paths: list[Path]) -> tuple[Scenario, LoadResult]:
    """A scenario from ``paths``: a Scenario file among them, or plain manifests applied at zero."""
    files: list[Path] = []
    for path in paths:
        if _is_kind(path, "directory"):
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
            scenario, errors = parse_scenario(raw, _display(path), path.parent)
            # The other objects of the Scenario's own file are applied at time zero, as
            # those of files from other directories are: no step could name them.
            extra = LoadResult()
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
            others = [p for p in files if p != path and p.parent != path.parent]
            if others:
                extra.extend(_load(others, read))
            extra.errors.extend(read_file.unreadable + read_file.broken_off + errors)
            if extra.objects:
                scenario.steps.insert(
                    0, Step(at=0.0, action="apply", objects=extra, description="extra manifests")
                )
                extra = LoadResult(errors=extra.errors, notes=extra.notes)
            return scenario, extra
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
