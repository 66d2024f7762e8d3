"""``karpy run``'s settings: flags over environment variables over defaults, and their documentation."""

from __future__ import annotations

import argparse
import logging
import re
from pathlib import Path
from typing import cast

import pytest
from tests.support import root_logging_kept

from karpy.cli import _parser
from karpy.settings import SETTINGS, FeatureGates, RunOptions, SettingsError, run_options

DOCS = Path(__file__).resolve().parents[1] / "docs" / "run.md"


def options(*flags: str, environ: dict[str, str] | None = None) -> RunOptions:
    args = _parser().parse_args(["run", *flags])
    return run_options(args, environ or {}, verbose=args.verbose)


def test_the_defaults_are_karpenters() -> None:
    assert options() == RunOptions(
        batch_idle_duration=1.0,
        batch_max_duration=10.0,
        cluster_name="",
        log_level=logging.INFO,
        log_format="json",
        metrics_port=8080,
        health_probe_port=8081,
        registration_delay=0.0,
    )


def test_environment_variables_set_everything() -> None:
    environ = {
        "BATCH_IDLE_DURATION": "2s",
        "BATCH_MAX_DURATION": "1m",
        "CLUSTER_NAME": "prod-eu",
        "LOG_LEVEL": "debug",
        "KARPY_LOG_FORMAT": "text",
        "METRICS_PORT": "9090",
        "HEALTH_PROBE_PORT": "9091",
        "KARPY_REGISTRATION_DELAY": "30s",
    }
    assert options(environ=environ) == RunOptions(
        batch_idle_duration=2.0,
        batch_max_duration=60.0,
        cluster_name="prod-eu",
        log_level=logging.DEBUG,
        log_format="text",
        metrics_port=9090,
        health_probe_port=9091,
        registration_delay=30.0,
    )


def test_flags_win_over_the_environment_and_empty_variables_count_as_unset() -> None:
    environ = {"METRICS_PORT": "9090", "LOG_LEVEL": "error", "BATCH_IDLE_DURATION": "", "CLUSTER_NAME": " "}
    flags = ("--metrics-port", "0", "--log-level", "info", "--registration-delay", "5s")
    found = options(*flags, environ=environ)
    assert found.metrics_port == 0
    assert found.log_level == logging.INFO
    assert found.batch_idle_duration == 1.0
    assert found.cluster_name == ""
    assert found.registration_delay == 5.0


def test_verbose_means_debug_unless_a_level_is_given() -> None:
    assert options("-v").log_level == logging.DEBUG
    assert options("-v", environ={"LOG_LEVEL": "error"}).log_level == logging.ERROR
    assert options("-v", "--log-level", "info").log_level == logging.INFO


@pytest.mark.parametrize(
    ("flags", "environ", "message"),
    [
        ((), {"METRICS_PORT": "http"}, "METRICS_PORT: 'http' is not a port number"),
        (("--health-probe-port", "70000"), {}, "--health-probe-port: 70000 is not a port number"),
        ((), {"LOG_LEVEL": "loud"}, "LOG_LEVEL: unknown log level 'loud'"),
        (("--log-format", "xml"), {}, "--log-format: unknown log format 'xml'"),
        ((), {"BATCH_IDLE_DURATION": "soon"}, "BATCH_IDLE_DURATION: invalid duration 'soon'"),
        (("--batch-max-duration=-1s",), {}, "--batch-max-duration: '-1s' is negative"),
        ((), {"BATCH_MAX_DURATION": "500ms"}, "BATCH_MAX_DURATION (0.5s) is shorter than BATCH_IDLE"),
        (("--registration-delay", "later"), {}, "--registration-delay: invalid duration 'later'"),
    ],
)
def test_bad_values_name_where_they_came_from(
    flags: tuple[str, ...], environ: dict[str, str], message: str
) -> None:
    with pytest.raises(SettingsError) as raised:
        options(*flags, environ=environ)
    assert str(raised.value).startswith(message)


def test_a_bad_setting_is_bad_input_for_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    from karpy.cli import EXIT_BAD_INPUT, main

    assert main(["run", "--metrics-port", "eighty"]) == EXIT_BAD_INPUT
    assert "karpy: --metrics-port: 'eighty' is not a port number" in capsys.readouterr().err


def test_every_setting_has_a_flag() -> None:
    parser = _parser()
    run_parser = next(
        action.choices["run"]
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)  # the subcommands
    )
    flags = {flag for action in run_parser._actions for flag in action.option_strings}
    for setting in SETTINGS:
        assert setting.flag in flags, setting


def test_docs_list_every_setting_with_its_flag_and_default() -> None:
    text = DOCS.read_text()
    rows = {
        match.group(1): match.group(0)
        for match in re.finditer(r"^\| `([A-Z_]+)` \|.*$", text, flags=re.MULTILINE)
    }
    for setting in SETTINGS:
        assert setting.env in rows, f"docs/run.md has no row for {setting.env}"
        row = rows[setting.env]
        assert f"`{setting.flag}" in row, row
        if setting.default:
            assert f"`{setting.default}`" in row, row


def test_the_aws_provider_is_chosen_and_configured_by_karpenters_names() -> None:
    from karpy.providers import aws_settings

    environ = {
        "KARPY_CLOUD_PROVIDER": "aws",
        "CLUSTER_NAME": "my-k3s",
        "INTERRUPTION_QUEUE": "my-k3s-karpy",
        "CLUSTER_ENDPOINT": "https://10.0.0.10:6443",
        "CLUSTER_CA_BUNDLE": "LS0tLS1CRUdJTg==",
        "KARPY_AWS_SSM_PREFIX": "/mirror/",
        "KARPY_AWS_LAUNCH_CONCURRENCY": "4",
        "AWS_REGION": "eu-west-1",
    }
    found = options(environ=environ)
    assert (found.cloud_provider, found.interruption_queue, found.aws_ssm_prefix) == (
        "aws",
        "my-k3s-karpy",
        "/mirror",
    )
    settings = aws_settings(found, environ)
    assert (settings.cluster_name, settings.region, settings.launch_concurrency) == ("my-k3s", "eu-west-1", 4)
    assert (settings.cluster_endpoint, settings.cluster_ca_bundle) == (
        "https://10.0.0.10:6443",
        "LS0tLS1CRUdJTg==",
    )
    assert settings.resolution().ssm_prefix == "/mirror"
    assert options().cloud_provider == "kwok"


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"KARPY_CLOUD_PROVIDER": "aws"}, "CLUSTER_NAME is required with the aws cloud provider"),
        ({"KARPY_CLOUD_PROVIDER": "gcp"}, "KARPY_CLOUD_PROVIDER: unknown cloud provider 'gcp'"),
        ({"KARPY_AWS_LAUNCH_CONCURRENCY": "0"}, "KARPY_AWS_LAUNCH_CONCURRENCY: 0 is not at least 1"),
    ],
)
def test_bad_aws_settings_are_refused_naming_the_variable(environ: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=re.escape(message)):
        options(environ=environ)


def test_feature_gates_take_karpenters_format_over_the_defaults() -> None:
    assert options().feature_gates == FeatureGates(spot_to_spot_consolidation=True)
    off = FeatureGates(spot_to_spot_consolidation=False)
    assert options(environ={"FEATURE_GATES": "SpotToSpotConsolidation=false"}).feature_gates == off
    assert options(environ={"FEATURE_GATES": " SpotToSpotConsolidation = False ,"}).feature_gates == off
    assert options("--feature-gates", "SpotToSpotConsolidation=0").feature_gates == off
    # The flag wins over the variable, as for every setting.
    flag_on = options("--feature-gates", "SpotToSpotConsolidation=true", environ={"FEATURE_GATES": "X=1"})
    assert flag_on.feature_gates == FeatureGates()


def test_static_capacity_is_a_gate_karpy_honours_on_by_default() -> None:
    assert options().feature_gates.static_capacity is True
    off = options(environ={"FEATURE_GATES": "StaticCapacity=false"}).feature_gates
    assert off == FeatureGates(static_capacity=False)
    assert options(environ={"FEATURE_GATES": "StaticCapacity=true"}).feature_gates == FeatureGates()


def test_node_repair_is_a_gate_karpy_honours_off_by_default_as_in_karpenter() -> None:
    assert options().feature_gates.node_repair is False
    on = options(environ={"FEATURE_GATES": "NodeRepair=true"}).feature_gates
    assert on == FeatureGates(node_repair=True)


def test_the_node_repair_gate_reaches_the_disruption_controller(monkeypatch: pytest.MonkeyPatch) -> None:
    from karpy.cli import EXIT_OK, main
    from karpy.controllers.disruption import DisruptionController
    from karpy.kube._http import ApiTransport
    from karpy.run import Runner, RunSettings

    given: list[RunSettings] = []
    monkeypatch.setattr("karpy.run.run", lambda kubeconfig, *, settings: given.append(settings))
    with root_logging_kept():
        flags = ["run", "--disable-leader-election", "--feature-gates", "NodeRepair=true"]
        assert main(flags) == EXIT_OK
    (settings,) = given
    assert settings.node_repair
    for gate_on in (True, False):
        # The runner is only built, never run: no request reaches the transport.
        runner = Runner(cast(ApiTransport, object()), RunSettings(node_repair=gate_on))
        disruption = runner.runtime._controllers[DisruptionController.name]
        assert isinstance(disruption, DisruptionController)
        assert (disruption.repair_policies is not None) is gate_on


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "PodDeletionCostManagement=true",
            "FEATURE_GATES: unknown feature gate 'PodDeletionCostManagement'"
            " (karpy knows SpotToSpotConsolidation, CapacityBuffer, StaticCapacity, NodeRepair, NodeOverlay,"
            " ReservedCapacity, TerminateFirstDrift, TerminateFirstRepair)",
        ),
        (
            "SpotToSpotConsolidation",
            "FEATURE_GATES: 'SpotToSpotConsolidation' is not Name=true or Name=false",
        ),
        (
            "SpotToSpotConsolidation=maybe",
            "FEATURE_GATES: SpotToSpotConsolidation: expected true or false, got 'maybe'",
        ),
    ],
)
def test_unknown_or_malformed_feature_gates_are_refused(text: str, message: str) -> None:
    with pytest.raises(SettingsError) as raised:
        options(environ={"FEATURE_GATES": text})
    assert str(raised.value) == message


def test_an_unknown_feature_gate_stops_karpy_run_with_exit_status_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from karpy.cli import EXIT_BAD_INPUT, main

    assert main(["run", "--feature-gates", "Drift=false"]) == EXIT_BAD_INPUT
    assert "karpy: --feature-gates: unknown feature gate 'Drift'" in capsys.readouterr().err


def test_the_spot_to_spot_gate_reaches_the_disruption_controller(monkeypatch: pytest.MonkeyPatch) -> None:
    from karpy.cli import EXIT_OK, main
    from karpy.controllers.core import consolidation_rules
    from karpy.controllers.disruption import DisruptionController
    from karpy.kube._http import ApiTransport
    from karpy.run import Runner, RunSettings

    given: list[RunSettings] = []
    monkeypatch.setattr("karpy.run.run", lambda kubeconfig, *, settings: given.append(settings))
    with root_logging_kept():
        flags = ["run", "--disable-leader-election", "--feature-gates", "SpotToSpotConsolidation=false"]
        assert main(flags) == EXIT_OK
    (settings,) = given
    assert not settings.consolidation.spot_to_spot
    for gate_on in (True, False):
        # The runner is only built, never run: no request reaches the transport.
        rules = consolidation_rules(FeatureGates(spot_to_spot_consolidation=gate_on))
        runner = Runner(cast(ApiTransport, object()), RunSettings(consolidation=rules))
        disruption = runner.runtime._controllers[DisruptionController.name]
        assert isinstance(disruption, DisruptionController)
        assert disruption.rules.spot_to_spot is gate_on


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        (
            {"MIN_VALUES_POLICY": "Loose"},
            "MIN_VALUES_POLICY: unknown policy 'Loose' (expected Strict or BestEffort)",
        ),
        (
            {"PREFERENCE_POLICY": "ignore"},
            "PREFERENCE_POLICY: unknown policy 'ignore' (expected Respect or Ignore)",
        ),
    ],
)
def test_an_unknown_scheduling_policy_is_refused_by_name(environ: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError) as raised:
        options(environ=environ)
    assert str(raised.value) == message


def test_karpenters_other_scheduling_policies_are_taken_and_reach_both_deciding_controllers() -> None:
    chosen = options(environ={"MIN_VALUES_POLICY": "BestEffort", "PREFERENCE_POLICY": "Ignore"})
    assert (chosen.min_values_policy, chosen.preference_policy) == ("BestEffort", "Ignore")
    assert options("--min-values-policy", "BestEffort").min_values_policy == "BestEffort"
    from karpy.controllers.disruption import DisruptionController
    from karpy.controllers.provisioning import ProvisioningSettings
    from karpy.kube._http import ApiTransport
    from karpy.run import Runner, RunSettings
    from karpy.scheduling.policy import SchedulingPolicy

    policy = SchedulingPolicy(min_values="BestEffort", preferences="Ignore")
    settings = RunSettings(provisioning=ProvisioningSettings(scheduling=policy))
    # The runner is only built, never run: no request reaches the transport.
    runner = Runner(cast(ApiTransport, object()), settings)
    disruption = runner.runtime._controllers[DisruptionController.name]
    assert isinstance(disruption, DisruptionController)
    assert disruption.scheduling == policy


def test_karpenters_default_scheduling_policies_are_karpys() -> None:
    chosen = options(environ={"MIN_VALUES_POLICY": "Strict", "PREFERENCE_POLICY": "Respect"})
    assert (chosen.min_values_policy, chosen.preference_policy) == ("Strict", "Respect")
    assert options("--preference-policy", "Respect").preference_policy == "Respect"
