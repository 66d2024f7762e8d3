"""Parsing the workload kinds the simulator runs: StatefulSet, Job, CronJob, PriorityClass, Namespace."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from tests.support import parse_object

from karpy.api.core import CronJob, Job, Namespace, PriorityClass, StatefulSet, run_duration
from karpy.api.cron import CronSchedule
from karpy.api.manifest import parse_manifests


def test_a_statefulset_keeps_its_volume_claim_templates_in_its_namespace() -> None:
    statefulset = parse_object("""
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: shop}
spec:
  replicas: 2
  podManagementPolicy: Parallel
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: main}]}
  volumeClaimTemplates:
    - metadata: {name: data}
      spec: {storageClassName: gp3}
""")
    assert isinstance(statefulset, StatefulSet)
    assert statefulset.replicas == 2 and statefulset.parallel
    (template,) = statefulset.volume_claim_templates
    assert (template.metadata.name, template.metadata.namespace, template.storage_class_name) == (
        "data",
        "shop",
        "gp3",
    )


def test_a_job_defaults_as_kubernetes_does() -> None:
    job = parse_object("""
apiVersion: batch/v1
kind: Job
metadata: {name: once}
spec:
  template:
    metadata: {annotations: {karpy.dev/duration: 90s}}
    spec: {restartPolicy: Never, containers: [{name: main}]}
""")
    assert isinstance(job, Job)
    assert (job.completions, job.parallelism, job.backoff_limit, job.wanted_successes) == (None, 1, 6, 1)
    assert run_duration(job.template.annotations) == 90.0


def test_a_cronjob_reads_its_schedule_policy_and_job_template() -> None:
    cronjob = parse_object("""
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly, namespace: ops}
spec:
  schedule: "@daily"
  concurrencyPolicy: Forbid
  suspend: true
  jobTemplate:
    metadata: {labels: {kind: report}}
    spec:
      completions: 3
      template: {spec: {restartPolicy: OnFailure, containers: [{name: main}]}}
""")
    assert isinstance(cronjob, CronJob)
    assert (cronjob.schedule, cronjob.concurrency_policy, cronjob.suspend) == ("@daily", "Forbid", True)
    assert cronjob.job_template.completions == 3
    assert cronjob.job_template.metadata.labels == {"kind": "report"}
    assert cronjob.job_template.metadata.namespace == "ops"


# A pod template the API server accepts in a Job, so that only the field under test is wrong.
JOB_POD = "{restartPolicy: Never, containers: [{name: c, image: c}]}"


@pytest.mark.parametrize(
    ("document", "error"),
    [
        (
            "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: c}\n"
            "spec: {schedule: '61 * * * *', jobTemplate: {spec: {template: {spec: " + JOB_POD + "}}}}\n",
            "spec.schedule: '61' is out of range 0-59",
        ),
        (
            "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: c}\n"
            "spec: {schedule: '* * * * *', concurrencyPolicy: Sometimes,"
            " jobTemplate: {spec: {template: {spec: " + JOB_POD + "}}}}\n",
            "spec.concurrencyPolicy: must be one of Allow, Forbid, Replace",
        ),
        (
            "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: c}\n"
            "spec: {schedule: '* * * * *', timeZone: Europe/Paris,"
            " jobTemplate: {spec: {template: {spec: " + JOB_POD + "}}}}\n",
            "spec.timeZone: only UTC is simulated, got 'Europe/Paris'",
        ),
        (
            "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: c}\n"
            "spec: {schedule: '* * * * *', jobTemplate: {spec: {parallelism: -1, template: {spec: "
            + JOB_POD
            + "}}}}\n",
            "spec.jobTemplate.spec.parallelism: Invalid value: -1: must be greater than or equal to 0",
        ),
        (
            "apiVersion: batch/v1\nkind: Job\nmetadata: {name: c}\n"
            "spec: {template: {metadata: {annotations: {karpy.dev/duration: soon}}, spec: "
            + JOB_POD
            + "}}\n",
            "spec.template.metadata.annotations.karpy.dev/duration:",
        ),
        (
            "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: s}\n"
            "spec: {podManagementPolicy: Random, selector: {matchLabels: {app: s}},"
            " template: {metadata: {labels: {app: s}}, spec: {containers: [{name: c, image: c}]}}}\n",
            "spec.podManagementPolicy: must be OrderedReady or Parallel, got 'Random'",
        ),
        (
            "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: p}\n",
            "value: required",
        ),
        (
            "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: p}\nvalue: 2000000000\n",
            "value: Forbidden: maximum allowed value of a user defined priority is 1000000000",
        ),
    ],
)
def test_bad_workload_fields_are_errors_with_their_path(document: str, error: str) -> None:
    result = parse_manifests(document, "f.yaml")
    assert result.objects == []
    (message,) = result.errors
    assert error in message


def test_a_priority_class_and_a_namespace_are_read_not_skipped() -> None:
    priority_class = parse_object(
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\n"
        "value: 1000\nglobalDefault: true\n"
    )
    assert isinstance(priority_class, PriorityClass)
    assert (priority_class.value, priority_class.global_default) == (1000, True)
    namespace = parse_object("apiVersion: v1\nkind: Namespace\nmetadata: {name: shop, labels: {team: web}}\n")
    assert isinstance(namespace, Namespace)
    assert namespace.labels == {"team": "web", "kubernetes.io/metadata.name": "shop"}


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        ("*/10 * * * *", "2026-01-01T00:00:00", "2026-01-01T00:10:00"),
        ("*/10 * * * *", "2026-01-01T00:09:59", "2026-01-01T00:10:00"),
        ("*/10 * * * *", "2026-01-01T23:55:00", "2026-01-02T00:00:00"),
        ("30 2 * * 1", "2026-01-01T00:00:00", "2026-01-05T02:30:00"),  # the first Monday
        ("0 0 29 2 *", "2026-01-01T00:00:00", "2028-02-29T00:00:00"),  # the next leap day
        ("@monthly", "2026-12-15T00:00:00", "2027-01-01T00:00:00"),
    ],
)
def test_the_next_fire_of_a_schedule(expression: str, after: str, expected: str) -> None:
    assert CronSchedule(expression).next_fire_after(at(after)) == at(expected)


def test_a_schedule_that_can_never_fire_has_no_next_fire() -> None:
    assert CronSchedule("0 0 31 2 *").next_fire_after(at("2026-01-01T00:00:00")) is None
