"""Bad HorizontalPodAutoscalers and load traces: one line each, naming file, object and field; exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from karpy.api.hpa import HorizontalPodAutoscaler
from karpy.api.manifest import parse_manifests
from karpy.cli import EXIT_BAD_INPUT, main

HPA = """apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {{name: web, namespace: default}}
spec:
{spec}
"""


def hpa_errors(spec: str) -> list[str]:
    return parse_manifests(HPA.format(spec=spec), "hpa.yaml").errors


def test_a_valid_hpa_with_the_documented_defaults() -> None:
    result = parse_manifests(
        HPA.format(
            spec="  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}\n  maxReplicas: 5"
        ),
        "hpa.yaml",
    )
    assert result.errors == [] and result.notes == []
    hpa = result.objects[0].obj
    assert isinstance(hpa, HorizontalPodAutoscaler)
    assert hpa.min_replicas == 1
    assert [(m.resource, m.average_utilization) for m in hpa.metrics] == [("cpu", 80)]
    assert hpa.scale_down.stabilization_window_seconds == 300
    assert hpa.scale_up.stabilization_window_seconds == 0
    assert [(p.type, p.value, p.period_seconds) for p in hpa.scale_up.policies] == [
        ("Percent", 100, 15),
        ("Pods", 4, 15),
    ]


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ("  maxReplicas: 5", "spec.scaleTargetRef: required"),
        (
            "  scaleTargetRef: {kind: Deployment, name: web}\n  minReplicas: 4\n  maxReplicas: 2",
            "spec.maxReplicas: must be greater than or equal to minReplicas (4)",
        ),
        (
            "  scaleTargetRef: {kind: Deployment, name: web}\n  maxReplicas: 2\n  metrics: [{type: Custom}]",
            "spec.metrics[0].type: must be one of Resource, Pods, Object, External, ContainerResource,"
            " not 'Custom'",
        ),
        (
            "  scaleTargetRef: {kind: Deployment, name: web}\n  maxReplicas: 2\n"
            "  metrics: [{type: Resource, resource: {name: cpu, target: {type: Value}}}]",
            "spec.metrics[0].resource.target.type: must be Utilization or AverageValue for a Resource"
            " metric, not 'Value'",
        ),
        (
            "  scaleTargetRef: {kind: Deployment, name: web}\n  maxReplicas: 2\n"
            "  behavior: {scaleDown: {policies: [{type: Pods, value: 0, periodSeconds: 60}]}}",
            "spec.behavior.scaleDown.policies[0].value: must be greater than zero",
        ),
    ],
)
def test_the_api_servers_errors_name_file_object_and_field(spec: str, error: str) -> None:
    assert hpa_errors(spec) == [f'hpa.yaml: HorizontalPodAutoscaler "web": {error}']


SCENARIO = """apiVersion: karpy.dev/v1alpha1
kind: Scenario
metadata: {{name: bad}}
spec:
  duration: 10m
  load:
    - kind: Deployment
      name: web
      cpu: {cpu}
"""


@pytest.mark.parametrize(
    ("trace", "cpu", "error"),
    [
        ("0,1\n60,-2\n", "{csv: {file: t.csv}}", "spec.load[0].cpu.csv.file: t.csv:2: value -2 must be"),
        ("0,1\n60,x\n", "{csv: {file: t.csv}}", "spec.load[0].cpu.csv.file: t.csv:2: value 'x' is not"),
        (
            "0,1\n60,2\n6,1\n",
            "{csv: {file: t.csv}}",
            "spec.load[0].cpu.csv.file: t.csv:3: time 6 is not after",
        ),
        ("", "{csv: {file: missing.csv}}", "spec.load[0].cpu.csv.file: cannot read missing.csv"),
        ("", "{constant: {value: many}}", "spec.load[0].cpu.constant.value: expected a number, got 'many'"),
    ],
)
def test_bad_traces_stop_karpy_simulate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], trace: str, cpu: str, error: str
) -> None:
    (tmp_path / "t.csv").write_text(trace)
    path = tmp_path / "scenario.yaml"
    path.write_text(SCENARIO.format(cpu=cpu))
    assert main(["simulate", str(path)]) == EXIT_BAD_INPUT
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1
    assert f'scenario.yaml: Scenario "bad": {error}' in lines[0]


def test_a_bad_hpa_stops_karpy_validate_and_simulate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "hpa.yaml"
    path.write_text(
        HPA.format(spec="  scaleTargetRef: {kind: Deployment, name: web}\n  minReplicas: 3\n  maxReplicas: 1")
    )
    assert main(["validate", str(path)]) == EXIT_BAD_INPUT
    assert main(["simulate", str(path)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count('HorizontalPodAutoscaler "web": spec.maxReplicas: must be greater than or equal') == 2
