"""A pod naming a PriorityClass that does not exist is said, as Priority admission says it.

``karpy validate`` refuses the object unless the files hold the class (or it
is one every cluster has); ``karpy simulate`` applies a workload, as the API
server would, and shows the workload controller's FailedCreate Warning in the
timeline and the summary, which then does not call the run steady; a bare Pod
it refuses, as the API server refuses the Pod itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.support import KWOK_NODE_CLASS, deployment_manifest, kwok_nodepool

from karpy.cli import main

REFUSAL = "is forbidden: no PriorityClass with name batch-low was found"


def with_class(manifest: str, class_name: str) -> str:
    return manifest.replace("containers:", f"priorityClassName: {class_name}\n      containers:")


def priority_class(name: str) -> str:
    return f"apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {{name: {name}}}\nvalue: 100\n"


def write(tmp_path: Path, name: str, *documents: str) -> Path:
    path = tmp_path / name
    path.write_text("\n---\n".join(documents))
    return path


JOB = """
apiVersion: batch/v1
kind: Job
metadata: {name: nightly, namespace: default}
spec:
  template:
    spec:
      restartPolicy: Never
      priorityClassName: batch-low
      containers: [{name: main, resources: {requests: {cpu: "1"}}}]
"""


@pytest.mark.parametrize(
    ("manifest", "field"),
    [
        (
            with_class(deployment_manifest(name="web", replicas=2), "batch-low"),
            'Deployment "web": spec.template.spec',
        ),
        (JOB, 'Job "nightly": spec.template.spec'),
    ],
)
def test_validate_refuses_a_pod_naming_a_class_the_files_do_not_hold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], manifest: str, field: str
) -> None:
    path = write(tmp_path, "app.yaml", manifest)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{field}.priorityClassName: pods " in err
    assert REFUSAL in err


def test_validate_accepts_a_class_in_another_file_or_built_in(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    app = write(tmp_path, "app.yaml", with_class(deployment_manifest(name="web"), "batch-low"))
    classes = write(tmp_path, "classes.yaml", priority_class("batch-low"))
    system = write(
        tmp_path, "system.yaml", with_class(deployment_manifest(name="agent"), "system-node-critical")
    )
    assert main(["validate", str(app), str(classes), str(system)]) == 0
    assert "error" not in capsys.readouterr().err


def test_simulate_says_the_pods_were_refused_and_does_not_call_the_run_steady(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(
        tmp_path,
        "app.yaml",
        kwok_nodepool(),
        KWOK_NODE_CLASS,
        with_class(deployment_manifest(name="web", replicas=2), "batch-low"),
    )
    assert main(["simulate", str(path)]) == 0
    out = capsys.readouterr().out
    timeline, summary = out.split("\nSummary\n")
    assert "# Warning FailedCreate ReplicaSet default/web-" in timeline
    assert REFUSAL in timeline
    assert "  not created          1 (refused by the API server)" in summary
    assert REFUSAL in summary
    assert "steady at the end    yes" not in summary
    assert main(["simulate", "--output", "json", str(path)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["steady"] is False
    assert any(event["reason"] == "FailedCreate" for event in result["events"])


def test_simulate_with_the_class_runs_the_pods_and_is_steady(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(
        tmp_path,
        "app.yaml",
        kwok_nodepool(),
        KWOK_NODE_CLASS,
        priority_class("batch-low"),
        with_class(deployment_manifest(name="web", replicas=2), "batch-low"),
    )
    assert main(["simulate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "FailedCreate" not in out
    assert "steady at the end    yes" in out


def test_simulate_refuses_a_bare_pod_naming_a_missing_class_as_the_api_server_refuses_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The Pod object itself is what admission refuses: nothing of it is ever applied, unlike a
    # workload, which is stored and whose pods alone fail to be created.
    pod = (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: lone, namespace: default}\n"
        "spec:\n  priorityClassName: batch-low\n"
        "  containers: [{name: main, image: x, resources: {requests: {cpu: 100m}}}]\n"
    )
    path = write(tmp_path, "app.yaml", kwok_nodepool(), KWOK_NODE_CLASS, pod)
    assert main(["simulate", str(path)]) == 2
    err = capsys.readouterr().err
    assert 'Pod "lone": spec.priorityClassName: pods "lone" ' in err
    assert REFUSAL in err
