"""The ``karpy`` command.

- ``karpy simulate [PATH ...]``: run the controllers against an in-memory
  cluster and a simulated cloud, in virtual time. PATHs are manifest files,
  directories, or a Scenario file; with none, the built-in seed walkthrough
  runs. ``--output json`` prints the machine-readable result
  (docs/simulate-output.md). The controller's settings (``--feature-gates``,
  ``--node-overhead-cost``, ``--min-values-policy``, ``--preference-policy``,
  ``--scheduler-config``) take ``karpy run``'s syntax and win over the Scenario's
  ``spec.settings``. ``--from-cluster`` starts from a real
  cluster instead (``--kubeconfig``, read only: :mod:`karpy.sim.from_cluster`),
  and the PATHs are then steps applied after it (docs/simulate-from-cluster.md).
- ``karpy plan FILE ...``: read a real cluster (``--kubeconfig``, read only), diff its
  NodePools and node classes against the files, and simulate applying them from the
  cluster as it is: which nodes drift, are replaced when, where their pods go, $/h
  before and after (:mod:`karpy.sim.plan`, docs/simulate-from-cluster.md), with the controller
  settings ``simulate`` takes, from the same flags. The cluster's NodePools and node classes the
  files leave out are kept, and the plan lists them.
  ``karpy plan --from-cluster-autoscaler`` instead proposes NodePools for the cluster's
  Cluster Autoscaler node groups and simulates both (:mod:`karpy.sim.ca_migration`).
- ``karpy validate [--strict] PATH ...``: check manifests, or a Scenario
  and the files it applies, without running anything; the paths are read
  exactly as ``karpy simulate`` reads them. A NodePool whose node class is
  not in the files given is a warning (the class may live in the cluster):
  exit status 0 with warnings,
  2 with errors; ``--strict`` makes warnings errors. ``karpy simulate``
  keeps it an error: its cluster holds nothing but the inputs.
- ``karpy run [--kubeconfig PATH]``: run the controllers against a real
  cluster, launching kwok nodes or, with ``--cloud-provider aws``, EC2
  instances (docs/run.md, docs/aws.md); stops on SIGTERM or SIGINT.
  Replicas elect a leader through a Lease; one that loses its lease exits
  with status 1, to be restarted as a standby.
- ``karpy convert PATH ...``: print the objects of the files (a directory
  stands for its manifest files) as one YAML stream,
  v1beta1 NodePools and EC2NodeClasses rewritten as v1 (everything else
  unchanged), for ``kubectl apply -f <(karpy convert old.yaml)`` or
  ``karpy convert old.yaml > new.yaml``. What each conversion changed is
  written above the object as comments and on standard error as notes; a
  v1beta1 object that does not convert is left out, with an error (exit 2).
  See docs/crds.md.
- ``karpy crds``: print the CustomResourceDefinitions karpy needs in a real
  cluster, for ``karpy crds | kubectl apply -f -`` (docs/crds.md).
- ``karpy nodes [--kubeconfig PATH] [--once]``: each node of a real cluster
  with its NodePool, offering, $/h and requests against allocatable, and the
  cluster's totals, refreshed every ``--interval`` (``--once``: one frame),
  priced by karpy's cloud provider as ``karpy run`` prices (docs/run.md).
  It only reads (lists and watches); see :mod:`karpy.nodeview`.

Bad input is reported as one line per problem (file, object, field) on
standard error and the exit status is 2; the valid objects of the same run
are still used, so one typo does not hide the rest of the result.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from karpy import __version__
from karpy.api.convert import ConvertedDocument, convert_manifests
from karpy.api.convert import render_yaml as render_converted
from karpy.api.crds import all_crds, render_yaml
from karpy.api.duration import DurationError, format_duration, parse_duration
from karpy.api.manifest import LoadResult
from karpy.api.nodecost import DEFAULT_NODE_OVERHEAD_COST
from karpy.api.schedulerconfig import parse_scheduler_config
from karpy.api.snapshot import ClusterSnapshot
from karpy.controllers.core import consolidation_rules
from karpy.logs import configure as configure_logging
from karpy.scheduling.policy import (
    MIN_VALUES_POLICIES,
    MIN_VALUES_STRICT,
    PREFERENCE_POLICIES,
    PREFERENCE_RESPECT,
    SchedulingPolicy,
)
from karpy.settings import (
    SettingsError,
    add_run_options,
    parse_feature_gates,
    parse_node_overhead_cost,
    run_options,
)
from karpy.sim.budget import Heartbeat, MemoryBudgetError, RunWatch, pod_budget_problem, requested_pods
from karpy.sim.files import UnreadableFileError, os_error_reason, path_kind
from karpy.sim.from_cluster import StartingState, describe, seed, starting_state
from karpy.sim.html_report import ReportUnavailableError, figures_table, text_table, write_report
from karpy.sim.report import SCHEMA_VERSION, render_text, result_json
from karpy.sim.scenario import Scenario, builtin_scenario_path, load_inputs, manifest_texts
from karpy.sim.simulation import AUTOSCALERS, Simulation, SimulationSettings
from karpy.sim.timeseries import run_series
from karpy.sim.validation import priority_class_names, validate_priority_classes, validate_references

EXIT_OK = 0
EXIT_LEADERSHIP_LOST = 1
EXIT_BAD_INPUT = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="karpy", description="A Kubernetes node autoscaler that speaks Karpenter."
    )
    parser.add_argument("--version", action="version", version=f"karpy {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    simulate = commands.add_parser("simulate", help="run karpy against a simulated cluster and cloud")
    simulate.add_argument("paths", nargs="*", type=Path, help="manifests, directories or a Scenario file")
    simulate.add_argument("--output", "-o", choices=("text", "json"), default="text")
    simulate.add_argument(
        "--from-cluster",
        action="store_true",
        help="start from a real cluster as it is (read only, through --kubeconfig); PATHs are then"
        " steps applied after it (a Scenario, or manifests applied at once)",
    )
    simulate.add_argument(
        "--kubeconfig",
        help="with --from-cluster: kubeconfig file (default: $KUBECONFIG, else the in-cluster configuration)",
    )
    simulate.add_argument(
        "--duration", help="time limit of the run in cluster time (default: the scenario's, 24h)"
    )
    simulate.add_argument(
        "--no-stop-when-steady",
        action="store_true",
        help="run for the whole duration even once the cluster is steady",
    )
    _add_controller_settings(simulate)
    simulate.add_argument(
        "--report", type=Path, metavar="FILE", help="write an HTML report with plots (a self-contained file)"
    )
    simulate.add_argument("--report-dir", type=Path, metavar="DIR", help="write each plot as a PNG into DIR")
    simulate.add_argument(
        "--autoscaler",
        choices=AUTOSCALERS,
        default="karpy",
        help="who scales the cluster: karpy, or the Cluster Autoscaler baseline on the scenario's node groups"
        " (docs/cluster-autoscaler-baseline.md)",
    )
    simulate.add_argument(
        "--compare",
        choices=[name for name in AUTOSCALERS if name != "karpy"],
        help="run the scenario twice, with karpy and with this baseline, and compare them side by side",
    )
    simulate.add_argument("--verbose", "-v", action="store_true", help="log every controller decision")
    _add_plan_command(commands)
    validate = commands.add_parser("validate", help="check manifests")
    validate.add_argument("paths", nargs="+", type=Path)
    validate.add_argument(
        "--strict",
        action="store_true",
        help="treat warnings as errors (a node class the files do not hold is a warning)",
    )
    convert = commands.add_parser(
        "convert", help="print manifests with v1beta1 NodePools and EC2NodeClasses rewritten as v1"
    )
    convert.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="manifest files or directories")
    commands.add_parser("crds", help="print the CRDs (karpy crds | kubectl apply -f -)")
    run_command = commands.add_parser(
        "run",
        help="run karpy against a real cluster (kwok nodes, or EC2 instances with --cloud-provider aws)",
    )
    run_command.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, else the in-cluster configuration)"
    )
    run_command.add_argument(
        "--registration-delay",
        help="time between a launch and its kwok Node's creation"
        " (default: $KARPY_REGISTRATION_DELAY, else 0s)",
    )
    run_command.add_argument(
        "--kwok-instance-types",
        help="what a KWOKNodeClass without the karpy.dev/kwok-instance-types annotation offers: aws"
        " (the bundled AWS catalog) or karpenter (Karpenter's kwok types)"
        " (default: $KARPY_KWOK_INSTANCE_TYPES, else aws)",
    )
    run_command.add_argument(
        "--disable-leader-election",
        nargs="?",
        const="true",
        metavar="BOOL",
        help="reconcile without holding the lease (default: $DISABLE_LEADER_ELECTION, else false)",
    )
    run_command.add_argument(
        "--leader-election-name",
        help="the Lease to elect a leader with (default: $LEADER_ELECTION_NAME, else karpy-leader-election)",
    )
    run_command.add_argument(
        "--leader-election-namespace",
        help="the Lease's namespace (default: $LEADER_ELECTION_NAMESPACE, else the pod's, "
        "else the kubeconfig context's, else default)",
    )
    add_run_options(run_command)
    run_command.add_argument("--verbose", "-v", action="store_true", help="the same as --log-level debug")
    _add_nodes_command(commands)
    return parser


def _add_controller_settings(parser: argparse.ArgumentParser) -> None:
    """The flags of the settings the simulated controller runs with, as ``karpy run`` takes them.

    ``karpy simulate`` and ``karpy plan`` declare the same ones, read by :func:`_simulation_settings`,
    so a plan runs the controller a simulation runs.
    """
    parser.add_argument(
        "--feature-gates",
        metavar="GATES",
        help="Name=true,Other=false, as karpy run's FEATURE_GATES (over the Scenario's featureGates)",
    )
    parser.add_argument(
        "--node-overhead-cost",
        metavar="DOLLARS",
        help="$/h each node costs beyond its instance, volumes and address, as karpy run's"
        " KARPY_NODE_OVERHEAD_COST (over the Scenario's nodeOverheadCost;"
        f" default {DEFAULT_NODE_OVERHEAD_COST:g})",
    )
    parser.add_argument(
        "--min-values-policy",
        choices=MIN_VALUES_POLICIES,
        help="as karpy run's MIN_VALUES_POLICY (over the Scenario's minValuesPolicy;"
        f" default {MIN_VALUES_STRICT})",
    )
    parser.add_argument(
        "--preference-policy",
        choices=PREFERENCE_POLICIES,
        help="as karpy run's PREFERENCE_POLICY (over the Scenario's preferencePolicy;"
        f" default {PREFERENCE_RESPECT})",
    )
    parser.add_argument(
        "--scheduler-config",
        type=Path,
        metavar="FILE",
        help="a file holding karpy run's SCHEDULER_CONFIG document (over the Scenario's schedulerConfig)",
    )


def _simulation_settings(args: argparse.Namespace, scenario: Scenario, autoscaler: str) -> SimulationSettings:
    """What a simulation runs with: :func:`_add_controller_settings`' flags, over ``scenario``'s settings.

    Raises SettingsError naming the flag of a value that cannot be used.
    """
    gates = scenario.feature_gates
    if args.feature_gates is not None:
        try:
            gates = parse_feature_gates(args.feature_gates, gates)
        except ValueError as problem:
            raise SettingsError(f"--feature-gates: {problem}") from None
    node_overhead_cost = scenario.node_overhead_cost
    if args.node_overhead_cost is not None:
        try:
            node_overhead_cost = parse_node_overhead_cost(args.node_overhead_cost)
        except ValueError as problem:
            raise SettingsError(f"--node-overhead-cost: {problem}") from None
    scheduler_config = scenario.scheduler_config
    if args.scheduler_config is not None:
        try:
            scheduler_config = parse_scheduler_config(args.scheduler_config.read_text(encoding="utf-8"))
        except OSError as problem:
            raise SettingsError(f"--scheduler-config: {os_error_line(problem)}") from None
        except ValueError as problem:
            raise SettingsError(f"--scheduler-config: {args.scheduler_config}: {problem}") from None
    settings = SimulationSettings(autoscaler=autoscaler)
    if gates is not None:
        settings.consolidation = consolidation_rules(gates)
        settings.capacity_buffers = gates.capacity_buffer
        settings.static_capacity = gates.static_capacity
        settings.node_repair = gates.node_repair
        settings.terminate_first_drift = gates.terminate_first_drift
        settings.terminate_first_repair = gates.terminate_first_repair
        settings.node_overlays = gates.node_overlay
        settings.cloud.reserved_capacity = gates.reserved_capacity
    if node_overhead_cost is not None:
        settings.provisioning = dataclasses.replace(
            settings.provisioning, node_overhead_cost=node_overhead_cost
        )
    settings.provisioning = dataclasses.replace(
        settings.provisioning,
        scheduling=SchedulingPolicy(
            min_values=args.min_values_policy or scenario.min_values_policy or MIN_VALUES_STRICT,
            preferences=args.preference_policy or scenario.preference_policy or PREFERENCE_RESPECT,
        ),
    )
    if scheduler_config is not None:
        settings.provisioning = dataclasses.replace(settings.provisioning, scheduler_config=scheduler_config)
    return settings


def _add_plan_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    plan = commands.add_parser(
        "plan",
        help="what applying NodePool and node class files to a real cluster changes, and what then happens",
    )
    plan.add_argument("paths", nargs="*", type=Path, metavar="FILE", help="manifests or directories to apply")
    plan.add_argument(
        "--from-cluster-autoscaler",
        action="store_true",
        help="propose NodePools for the cluster's Cluster Autoscaler node groups, and compare both simulated",
    )
    plan.add_argument(
        "--manifests-dir",
        type=Path,
        help="with --from-cluster-autoscaler: write the proposed manifests there (default: print them)",
    )
    plan.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, else the in-cluster configuration)"
    )
    plan.add_argument("--output", "-o", choices=("text", "json"), default="text")
    plan.add_argument(
        "--duration", help="how far ahead to simulate, in cluster time (default 24h; it stops once settled)"
    )
    _add_controller_settings(plan)


def _add_nodes_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    nodes = commands.add_parser(
        "nodes",
        help="show each node with its NodePool, $/h and requests, and the cluster's cost, refreshing",
    )
    nodes.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, else the in-cluster configuration)"
    )
    nodes.add_argument("--once", action="store_true", help="print one frame and exit (for scripts)")
    nodes.add_argument("--interval", default="2s", help="time between two frames (default 2s)")
    nodes.add_argument("--no-bars", action="store_true", help="percentages only, no bars")
    # Read as karpy run reads them (flag, then environment), so both price with the same provider.
    nodes.add_argument(
        "--cloud-provider",
        help="whose catalog prices the nodes: kwok or aws (default: $KARPY_CLOUD_PROVIDER, else kwok)",
    )
    nodes.add_argument(
        "--kwok-instance-types",
        help="what a KWOKNodeClass without the annotation offers, as karpy run's"
        " (default: $KARPY_KWOK_INSTANCE_TYPES, else aws)",
    )
    nodes.add_argument(
        "--feature-gates",
        help="as karpy run's FEATURE_GATES; NodeOverlay=true applies the NodeOverlays' prices"
        " (default: $FEATURE_GATES)",
    )
    nodes.add_argument("--cluster-name", help="as karpy run's CLUSTER_NAME (required with aws)")


def _validate_scenario(
    scenario: Scenario,
    problems: LoadResult,
    *,
    missing_node_class_is_error: bool = True,
    keep_pools_missing_a_node_class: bool = False,
    missing_priority_class_is_error: bool = False,
) -> list[str]:
    """Check the references of every object a scenario applies; the warnings, if any.

    A PriorityClass applied by any step counts for the pods of any step, as a node class does.

    A node class applied by any step counts for a NodePool of any step: a
    step may apply a pool before or after its class, as users do with kubectl.
    """
    node_classes: set[tuple[str, str, str]] = set()
    for step in scenario.steps:
        for item in step.objects.objects:
            group = getattr(item.obj, "group", None)
            if isinstance(group, str):
                node_classes.add((group, item.kind, item.name))
    priority_classes = set().union(*(priority_class_names(step.objects.objects) for step in scenario.steps))
    warnings: list[str] = []
    for step in scenario.steps:
        if step.action == "apply":
            # A bare Pod naming a missing class is refused itself; a workload only in validate.
            validate_priority_classes(
                step.objects, priority_classes, pods_only=not missing_priority_class_is_error
            )
            warnings += validate_references(
                step.objects,
                node_classes,
                missing_node_class_is_error=missing_node_class_is_error,
                keep_pools_missing_a_node_class=keep_pools_missing_a_node_class,
            )
            problems.errors.extend(error for error in step.objects.errors if error not in problems.errors)
            step.objects.errors.clear()
    return warnings


def _read_cluster(kubeconfig: str | None) -> ClusterSnapshot:
    """The cluster's objects, read through a connection that refuses every write before it is sent."""
    import time

    from karpy.kube._http import ApiTransport
    from karpy.kube.snapshot import fetch_snapshot

    transport = ApiTransport.from_kubeconfig(kubeconfig)

    def refuse_write() -> None:
        raise PermissionError("karpy simulate --from-cluster only reads the cluster")

    try:
        return fetch_snapshot(transport.fenced(refuse_write), time.time)
    finally:
        transport.close()


def _simulation_inputs(paths: list[Path], from_cluster: bool) -> tuple[Scenario, LoadResult]:
    """The Scenario a run follows: the files', else (from a cluster) none, else the seed walkthrough."""
    if from_cluster and not paths:
        return Scenario(name="cluster", source="the cluster"), LoadResult()
    return load_inputs(paths or [builtin_scenario_path()])


def _seed(simulation: Simulation, state: StartingState, *, announce: bool) -> None:
    """Start the simulation from the cluster as read, telling on stderr what was left out when asked."""
    notes = seed(simulation, state)
    if announce:
        print(f"note: from the cluster: {describe(state)}", file=sys.stderr)
        for note in notes:
            print(f"note: from the cluster: {note}", file=sys.stderr)


def _run_scenario(simulation: Simulation, scenario: Scenario) -> bool:
    """Run the Scenario with the progress line on; False (reported) when it outgrew its memory budget."""
    simulation.watch = RunWatch(simulation.progress_line)
    STATUS.describe = simulation.progress_line
    try:
        simulation.run_scenario(scenario)
    except MemoryBudgetError as problem:
        print(f"error: {problem}", file=sys.stderr)
        return False
    return True


def simulate(args: argparse.Namespace) -> int:
    from_cluster: bool = args.from_cluster
    if args.kubeconfig is not None and not from_cluster:
        print("karpy: --kubeconfig: only with --from-cluster", file=sys.stderr)
        return EXIT_BAD_INPUT
    paths: list[Path] = args.paths
    state: StartingState | None = None
    if from_cluster:
        from karpy.kube._http import ApiStatusError, KubeconfigError
        from karpy.kube.snapshot import ClusterUnreachableError

        STATUS.describe = lambda: "reading the cluster"
        try:
            state = starting_state(_read_cluster(args.kubeconfig))
        except (KubeconfigError, ApiStatusError, ClusterUnreachableError) as problem:
            print(f"karpy: --from-cluster: {problem}", file=sys.stderr)
            return EXIT_BAD_INPUT
        STATUS.describe = _reading
    scenario, problems = _simulation_inputs(paths, from_cluster)
    # From a cluster, a NodePool of the files may name a node class the cluster holds.
    _validate_scenario(
        scenario,
        problems,
        missing_node_class_is_error=not from_cluster,
        keep_pools_missing_a_node_class=True,
    )
    if args.duration:
        try:
            scenario.duration = parse_duration(args.duration)
        except DurationError as problem:
            print(f"karpy: --duration: {problem}", file=sys.stderr)
            return EXIT_BAD_INPUT
        for step in scenario.steps_after(scenario.duration):
            late = f"at {format_duration(step.at)}, after --duration {args.duration}"
            print(f"warning: {scenario.source}: {step.where}: {late}: not run", file=sys.stderr)
    scenario.run_until_steady = not args.no_stop_when_steady
    try:
        _simulation_settings(args, scenario, args.autoscaler)  # a bad flag stops the run before it starts
    except SettingsError as problem:
        print(f"karpy: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for error in problems.errors:
        print(f"error: {error}", file=sys.stderr)
    if args.output == "text":
        for note in problems.notes:
            print(f"note: {note}", file=sys.stderr)
        for step in scenario.steps:
            for note in step.objects.notes:
                print(f"note: {note}", file=sys.stderr)
    wanted = requested_pods(
        (item for step in scenario.steps for item in step.objects.objects),
        [(s.kind, f"{s.namespace}/{s.name}", s.replicas) for s in scenario.steps if s.action == "scale"],
    )
    if state is not None:
        wanted["the cluster's pods"] = state.count("Pod")
    budget_problem = pod_budget_problem(wanted)
    if budget_problem is not None:
        # Refused before a pod is made: the run would pass the memory budget (karpy.sim.budget).
        print(f"error: {budget_problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    autoscalers = [args.autoscaler] if args.compare is None else ["karpy", args.compare]
    simulations: list[tuple[str, Simulation]] = []
    for autoscaler in autoscalers:
        if simulations:
            # Each run reads the inputs afresh: nothing one run did can leak into the next.
            again, _ = _simulation_inputs(paths, from_cluster)
            _validate_scenario(
                again,
                LoadResult(),
                missing_node_class_is_error=not from_cluster,
                keep_pools_missing_a_node_class=True,
            )
            again.duration, again.run_until_steady = scenario.duration, scenario.run_until_steady
            scenario = again
        settings = _simulation_settings(args, scenario, autoscaler)
        simulation = Simulation(settings, start=state.start if state is not None else None)
        if state is not None:
            _seed(simulation, state, announce=args.output == "text" and not simulations)
        if not _run_scenario(simulation, scenario):
            return EXIT_BAD_INPUT
        simulations.append((autoscaler, simulation))
    # Runs that stopped steady at different times are compared up to the later end.
    longest = max(run.recorder.end - run.clock.start for _, run in simulations)
    runs = [
        run_series(name, run.recorder, run.clock.start, run.cluster.evictions, run.clock.start + longest)
        for name, run in simulations
    ]
    if args.compare is None:
        if args.output == "json":
            print(json.dumps(result_json(simulation, scenario.name, problems.errors), indent=2))
        else:
            print(render_text(simulation, scenario.name))
    elif args.output == "json":
        document = {
            "apiVersion": SCHEMA_VERSION,
            "scenario": scenario.name,
            "runs": {name: result_json(run, scenario.name, problems.errors) for name, run in simulations},
            "comparison": figures_table(runs),
        }
        print(json.dumps(document, indent=2))
    else:
        for name, run in simulations:
            print(f"== {name} ==")
            print(render_text(run, scenario.name))
        print(f"== karpy vs {args.compare} ==")
        print(text_table(figures_table(runs)))
    if args.report is not None or args.report_dir is not None:
        title = f"karpy simulate: {scenario.name}" + (f", karpy vs {args.compare}" if args.compare else "")
        try:
            written = write_report(title, runs, args.report, args.report_dir)
        except (ReportUnavailableError, OSError) as problem:
            print(f"karpy: --report: {problem}", file=sys.stderr)
            return EXIT_BAD_INPUT
        for path in written:
            print(f"report: {path}", file=sys.stderr)
    if problems.errors:
        return EXIT_BAD_INPUT
    return EXIT_OK


def plan(args: argparse.Namespace) -> int:
    """``karpy plan``: the diff of the files against the cluster, and the simulated consequence."""
    from karpy.kube._http import ApiStatusError, KubeconfigError
    from karpy.kube.snapshot import ClusterUnreachableError
    from karpy.sim.plan import (
        diff_objects,
        left_as_they_are,
        observed_initialization_delay,
        observed_registration_delay,
        plan_json,
        plan_of,
        render_plan_text,
    )

    paths: list[Path] = args.paths
    if args.from_cluster_autoscaler:
        if paths:
            print("karpy: plan: --from-cluster-autoscaler takes no FILE", file=sys.stderr)
            return EXIT_BAD_INPUT
        return _plan_migration(args)
    if not paths:
        print("karpy: plan: FILE required (or --from-cluster-autoscaler)", file=sys.stderr)
        return EXIT_BAD_INPUT
    scenario, problems = load_inputs(paths)
    # A NodePool of the files may name a node class the cluster holds.
    _validate_scenario(
        scenario, problems, missing_node_class_is_error=False, keep_pools_missing_a_node_class=True
    )
    if args.duration:
        try:
            scenario.duration = parse_duration(args.duration)
        except DurationError as problem:
            print(f"karpy: --duration: {problem}", file=sys.stderr)
            return EXIT_BAD_INPUT
    try:
        settings = _simulation_settings(args, scenario, "karpy")
    except SettingsError as problem:
        print(f"karpy: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    STATUS.describe = lambda: "reading the cluster"
    try:
        snapshot = _read_cluster(args.kubeconfig)
    except (KubeconfigError, ApiStatusError, ClusterUnreachableError) as problem:
        print(f"karpy: plan: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    state = starting_state(snapshot)
    applied = [
        item.obj
        for step in scenario.steps
        if step.action == "apply" and step.at == 0
        for item in step.objects.objects
    ]
    changes = diff_objects(state.objects, applied)
    simulation = Simulation(settings, start=state.start)
    registration = observed_registration_delay(state.objects)
    if registration is not None:
        # Replacements register as fast as the cluster's nodes did (a Scenario's cloud setting wins).
        simulation.cloud.settings.registration_delay = registration
    initialization = observed_initialization_delay(state.objects)
    if initialization is not None:
        simulation.kubelet.settings.node_ready_delay = initialization
    _seed(simulation, state, announce=args.output == "text")
    if not _run_scenario(simulation, scenario):
        return EXIT_BAD_INPUT
    result = plan_of(simulation, changes, left_as_they_are(state.objects, applied))
    if args.output == "json":
        print(json.dumps({**plan_json(result), "errors": problems.errors}, indent=2))
    else:
        print(render_plan_text(result))
    return EXIT_BAD_INPUT if problems.errors else EXIT_OK


def _plan_migration(args: argparse.Namespace) -> int:
    """``karpy plan --from-cluster-autoscaler``: NodePools for the CA node groups, both simulated."""
    from karpy.baselines.ca_migration import discover_groups, propose
    from karpy.kube._http import ApiStatusError, KubeconfigError
    from karpy.kube.snapshot import ClusterUnreachableError
    from karpy.sim.ca_migration import (
        MIGRATION_DURATION,
        manifests_yaml,
        outcome,
        outcome_json,
        render_migration_text,
        simulate_after,
        simulate_before,
        unknown_instance_types,
    )

    duration = MIGRATION_DURATION
    if args.duration:
        try:
            duration = parse_duration(args.duration)
        except DurationError as problem:
            print(f"karpy: --duration: {problem}", file=sys.stderr)
            return EXIT_BAD_INPUT
    # Both runs with the same settings, as simulate --compare runs karpy and its baseline.
    no_scenario = Scenario(name="cluster", source="the cluster")
    try:
        settings = {name: _simulation_settings(args, no_scenario, name) for name in AUTOSCALERS}
    except SettingsError as problem:
        print(f"karpy: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    STATUS.describe = lambda: "reading the cluster"
    try:
        snapshot = _read_cluster(args.kubeconfig)
    except (KubeconfigError, ApiStatusError, ClusterUnreachableError) as problem:
        print(f"karpy: plan: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    proposal = propose(discover_groups(snapshot.objects))
    if not proposal.pools:
        print("karpy: plan: no node of a Cluster Autoscaler node group found", file=sys.stderr)
        return EXIT_BAD_INPUT
    STATUS.describe = lambda: "simulating the node groups and the proposed NodePools"
    before_run = simulate_before(snapshot, proposal, duration, settings["cluster-autoscaler"])
    notes = unknown_instance_types(before_run, proposal)
    before = outcome(before_run)
    after = outcome(simulate_after(snapshot, proposal, duration, settings["karpy"]))
    text = manifests_yaml(proposal.manifests())
    if args.manifests_dir is not None:
        args.manifests_dir.mkdir(parents=True, exist_ok=True)
        for manifest in proposal.manifests():
            meta = manifest["metadata"]
            assert isinstance(meta, dict)
            path = args.manifests_dir / f"{str(manifest['kind']).lower()}-{meta['name']}.yaml"
            path.write_text(manifests_yaml([manifest]), encoding="utf-8")
            print(f"wrote {path}", file=sys.stderr)
    if args.output == "json":
        document = {
            "manifests": proposal.manifests(),
            "clusterAutoscaler": outcome_json(before),
            "karpy": outcome_json(after),
            "notes": [*proposal.discovery.notes, *proposal.notes, *notes],
        }
        print(json.dumps(document, indent=2))
    else:
        # As YAML comments after the manifests, so the output can go to kubectl apply as it is.
        if args.manifests_dir is None:
            print(text.rstrip())
        report = render_migration_text(proposal, before, after, notes)
        print("\n".join(f"# {line}" for line in report.splitlines()))
    return EXIT_OK


def _reading() -> str:
    return "reading and checking the inputs"


class _Status:
    """What the command is doing, for its heartbeat: reading until a simulation says more."""

    def __init__(self) -> None:
        self.describe: Callable[[], str] = _reading

    def __call__(self) -> str:
        return self.describe()


STATUS = _Status()


def _progress(line: str) -> None:
    print(f"karpy: {line}", file=sys.stderr, flush=True)


def validate(args: argparse.Namespace) -> int:
    """Check manifests, or a Scenario and every file it applies, without running anything.

    Read exactly as ``karpy simulate`` reads the same paths, so what validates
    clean is what a run would use.
    """
    scenario, problems = load_inputs(args.paths)
    warnings = _validate_scenario(
        scenario, problems, missing_node_class_is_error=args.strict, missing_priority_class_is_error=True
    )
    label = f'{scenario.source}: Scenario "{scenario.name}"'
    if scenario.from_document and not any(error.startswith(label) for error in problems.errors):
        print(f"ok: {scenario.source}: Scenario {scenario.name}")
    for step in scenario.steps:
        for item in step.objects.objects:
            print(f"ok: {item.source}: {item.kind} {item.name}")
    for note in problems.notes + [note for step in scenario.steps for note in step.objects.notes]:
        print(f"note: {note}")
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for error in problems.errors:
        print(f"error: {error}", file=sys.stderr)
    return EXIT_BAD_INPUT if problems.errors else EXIT_OK


def convert(args: argparse.Namespace) -> int:
    documents: list[ConvertedDocument] = []
    unreadable = LoadResult()
    errors: list[str] = []
    for source, text in list(manifest_texts(args.paths, unreadable)):
        converted = convert_manifests(text, source)
        documents.extend(converted.documents)
        errors.extend(converted.errors)
    sys.stdout.write(render_converted(documents))
    for document in documents:
        for note in document.notes:
            print(f"note: {note}", file=sys.stderr)
    for error in unreadable.errors + errors:
        print(f"error: {error}", file=sys.stderr)
    return EXIT_BAD_INPUT if unreadable.errors or errors else EXIT_OK


def run_against_cluster(args: argparse.Namespace) -> int:
    # The real-cluster stack is loaded only when it runs.
    from karpy.controllers.provisioning import ProvisioningSettings
    from karpy.kube._http import KubeconfigError, kubeconfig_namespace
    from karpy.kube.leader import LeadershipLostError, election_config
    from karpy.observability import ObservabilitySettings
    from karpy.providers import PROVIDERS
    from karpy.run import RunSettings, run

    try:
        options = run_options(args, os.environ, verbose=args.verbose)
    except SettingsError as problem:
        print(f"karpy: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    configure_logging(options.log_level, options.log_format)
    kubeconfig = args.kubeconfig or os.environ.get("KUBECONFIG") or None
    if kubeconfig is not None and os.pathsep not in kubeconfig and os.path.lexists(kubeconfig):
        # Checked as manifests are: /dev/zero or a FIFO given as the kubeconfig is never read.
        try:
            if path_kind(Path(kubeconfig)) != "file":
                raise UnreadableFileError("a directory, not a kubeconfig file")
        except UnreadableFileError as problem:
            print(f"karpy: no cluster to run against: kubeconfig {kubeconfig}: {problem}", file=sys.stderr)
            return EXIT_BAD_INPUT
    try:
        election = election_config(
            disable=args.disable_leader_election,
            name=args.leader_election_name,
            namespace=args.leader_election_namespace,
            environ=os.environ,
            kubeconfig_namespace=kubeconfig_namespace(args.kubeconfig),
        )
    except ValueError as problem:
        print(f"karpy: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        settings = RunSettings(
            provisioning=ProvisioningSettings(
                batch_idle=options.batch_idle_duration,
                batch_max=options.batch_max_duration,
                node_overhead_cost=options.node_overhead_cost,
                scheduling=SchedulingPolicy(
                    min_values=options.min_values_policy, preferences=options.preference_policy
                ),
                scheduler_config=options.scheduler_config,
            ),
            consolidation=consolidation_rules(options.feature_gates),
            capacity_buffers=options.feature_gates.capacity_buffer,
            static_capacity=options.feature_gates.static_capacity,
            node_repair=options.feature_gates.node_repair,
            terminate_first_drift=options.feature_gates.terminate_first_drift,
            terminate_first_repair=options.feature_gates.terminate_first_repair,
            node_overlays=options.feature_gates.node_overlay,
            leader_election=election,
            observability=ObservabilitySettings(
                metrics_port=options.metrics_port, health_probe_port=options.health_probe_port
            ),
            cluster_name=options.cluster_name,
            tune_gc=True,
            cloud=PROVIDERS[options.cloud_provider].settings(options, os.environ),
        )
        run(args.kubeconfig, settings=settings)
    except LeadershipLostError as lost:
        print(f"karpy: {lost}; exiting", file=sys.stderr)
        return EXIT_LEADERSHIP_LOST
    except KubeconfigError as problem:
        print(f"karpy: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return EXIT_OK


def show_nodes(args: argparse.Namespace) -> int:
    """``karpy nodes``: frames of :func:`karpy.nodeview.render` over an informer cache, until interrupted."""
    import time

    from karpy.kube._http import ApiTransport, KubeconfigError
    from karpy.kube._resources import (
        EC2_NODE_CLASS,
        KWOK_NODE_CLASS,
        NODE,
        NODE_OVERLAY,
        NODECLAIM,
        NODEPOOL,
        POD,
    )
    from karpy.kube.cluster import KubeCluster
    from karpy.nodeview import node_view, render
    from karpy.operator.cluster import WallClock
    from karpy.operator.karpenter_metrics import Metrics
    from karpy.providers import PROVIDERS, ProviderContext

    try:
        options = run_options(args, os.environ)
        interval = parse_duration(args.interval)
        settings = PROVIDERS[options.cloud_provider].settings(options, os.environ)
        transport = ApiTransport.from_kubeconfig(args.kubeconfig)
    except (SettingsError, DurationError, KubeconfigError) as problem:
        print(f"karpy: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT

    def refuse_write() -> None:
        raise PermissionError("karpy nodes only reads the cluster")

    # Every write this transport would send is refused before it leaves: the view lists and watches only.
    reads = transport.fenced(refuse_write)
    overlays = options.feature_gates.node_overlay
    # What the view reads: the nodes, their pods, and what prices them (pools, classes, overlays).
    kinds = (
        POD,
        NODE,
        NODECLAIM,
        NODEPOOL,
        EC2_NODE_CLASS,
        KWOK_NODE_CLASS,
        *((NODE_OVERLAY,) if overlays else ()),
    )
    clock = WallClock()
    cluster = KubeCluster(reads, clock=clock, kinds=kinds)
    stack = PROVIDERS[options.cloud_provider].build(
        settings, ProviderContext(cluster, clock, Metrics(), reads, lambda kind, old, new: None)
    )
    cluster.start()
    try:
        if not cluster.wait_for_sync(60):
            print("karpy: the cluster's objects were not listed within 60s", file=sys.stderr)
            return EXIT_BAD_INPUT
        while True:
            frame = render(node_view(cluster, stack.cloud, node_overlays=overlays), bars=not args.no_bars)
            if args.once:
                print("\n".join(frame))
                return EXIT_OK
            # Home the cursor and clear the screen, then draw: one frame replaces the last.
            sys.stdout.write("\x1b[H\x1b[2J" + "\n".join(frame) + "\n")
            sys.stdout.flush()
            time.sleep(interval)
    except KeyboardInterrupt:
        return EXIT_OK
    finally:
        stack.stop()
        cluster.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if getattr(args, "verbose", False) else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        if args.command == "run":
            return run_against_cluster(args)
        if args.command == "nodes":
            return show_nodes(args)
        if args.command == "crds":
            sys.stdout.write(render_yaml(all_crds()))
            return EXIT_OK
        command = {"simulate": simulate, "plan": plan, "convert": convert, "validate": validate}[args.command]
        STATUS.describe = _reading
        # A long command says how far it is on standard error: never a minute without a word.
        with Heartbeat(STATUS, _progress):
            return command(args)
    except OSError as error:
        # What the operating system refused (a file, a directory, a port) that no reader said in its
        # own words: one line, as every bad input.
        print(f"karpy: {os_error_line(error)}", file=sys.stderr)
        return EXIT_BAD_INPUT


def os_error_line(error: OSError) -> str:
    """An operating system's error as one line: the file it names, if any, and its reason."""
    reason = os_error_reason(error)
    return f"{error.filename}: {reason}" if error.filename is not None else reason


if __name__ == "__main__":
    sys.exit(main())
