"""The workload kinds users apply, run by the simulator's stand-in controllers.

StatefulSets with their volumes, Jobs that finish, CronJobs on their
schedule, PriorityClasses at pod admission, bare Pods, and Namespaces whose
labels pod affinity selects by.
"""

from __future__ import annotations

from tests.support import DATA, load_objects
from tests.support import KWOK_NODE_CLASS as NODE_CLASS
from tests.support import deployment_manifest as deployment
from tests.support import kwok_nodepool as nodepool

from karpy.api.core import POD_RUNNING, POD_SUCCEEDED, Job, Pod, StatefulSet
from karpy.api.requirements import LABEL_ZONE
from karpy.sim.cloud import CapacityFailure
from karpy.sim.report import result_json
from karpy.sim.scenario import load_inputs
from karpy.sim.simulation import Simulation

MINUTE = 60.0


def started(*texts: str) -> Simulation:
    simulation = Simulation()
    simulation.apply(load_objects(NODE_CLASS, *texts))
    return simulation


def workload_pods(simulation: Simulation) -> list[Pod]:
    return [pod for pod in simulation.pods() if not pod.is_daemonset_pod]


def node_zone(simulation: Simulation, node_name: str) -> str:
    node = simulation.cluster.node(node_name)
    assert node is not None
    return node.metadata.labels[LABEL_ZONE]


def volume_zone(simulation: Simulation, namespace: str, claim_name: str) -> str:
    claim = simulation.cluster.persistent_volume_claim(namespace, claim_name)
    assert claim is not None and claim.volume_name
    volume = simulation.cluster.persistent_volume(claim.volume_name)
    assert volume is not None
    (term,) = volume.node_terms
    (zone,) = term.get(LABEL_ZONE).values
    return str(zone)


STATEFULSET = """
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: default}
spec:
  replicas: 3
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      topologySpreadConstraints:
        - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule,
           labelSelector: {matchLabels: {app: db}}}
      containers:
        - name: main
          resources: {requests: {cpu: "1", memory: 1Gi}}
          volumeMounts: [{name: data, mountPath: /data}]
  volumeClaimTemplates:
    - metadata: {name: data}
      spec:
        accessModes: [ReadWriteOnce]
        resources: {requests: {storage: 10Gi}}
"""


def test_a_statefulset_gets_a_claim_per_pod_bound_to_the_zone_its_pod_landed_in() -> None:
    simulation = started(nodepool(), STATEFULSET)
    simulation.run(3600)
    pods = {pod.metadata.name: pod for pod in workload_pods(simulation)}
    assert sorted(pods) == ["db-0", "db-1", "db-2"]
    assert all(pod.phase == POD_RUNNING for pod in pods.values())
    claims = sorted(claim.metadata.name for claim in simulation.cluster.objects("PersistentVolumeClaim"))
    assert claims == ["data-db-0", "data-db-1", "data-db-2"]
    zones = set()
    for ordinal in range(3):
        pod = pods[f"db-{ordinal}"]
        assert pod.spec.claim_names == (f"data-db-{ordinal}",)
        zone = volume_zone(simulation, "default", f"data-db-{ordinal}")
        assert zone == node_zone(simulation, pod.node_name)
        zones.add(zone)
    assert len(zones) == 3  # spread over zones, so each volume pins its pod somewhere else


def test_a_statefulset_pod_recreated_after_its_node_goes_returns_to_its_volume_zone() -> None:
    simulation = started(nodepool(), STATEFULSET)
    simulation.run(3600)
    first = simulation.cluster.pod("default", "db-0")
    assert first is not None
    zone = volume_zone(simulation, "default", "data-db-0")
    # Spot in the volume's zone is gone: a pod free to move would take spot in another zone.
    simulation.cloud.settings.capacity_failures.append(CapacityFailure(zone=zone, capacity_type="spot"))
    claim = next(c for c in simulation.cluster.nodeclaims() if c.status.node_name == first.node_name)
    simulation.cluster.delete(claim)
    simulation.run(3600)
    again = simulation.cluster.pod("default", "db-0")
    assert again is not None and again.metadata.uid != first.metadata.uid
    assert again.phase == POD_RUNNING
    assert node_zone(simulation, again.node_name) == zone
    assert volume_zone(simulation, "default", "data-db-0") == zone  # the same claim, the same volume


def test_the_output_shows_a_statefulset_pod_created_again_as_a_pod_of_its_own() -> None:
    simulation = started(nodepool(), STATEFULSET)
    simulation.run(3600)
    first = simulation.cluster.pod("default", "db-0")
    assert first is not None
    claim = next(c for c in simulation.cluster.nodeclaims() if c.status.node_name == first.node_name)
    simulation.cluster.delete(claim)
    simulation.run(3600)
    again = simulation.cluster.pod("default", "db-0")
    assert again is not None and again.node_name != first.node_name
    entries = [pod for pod in result_json(simulation, "db", [])["pods"] if pod["name"] == "db-0"]
    assert [(pod["node"], pod["phase"]) for pod in entries] == [
        (first.node_name, "Deleted"),
        (again.node_name, "Running"),
    ]
    assert entries[1]["createdAt"] >= entries[0]["deletedAt"]


def test_a_statefulset_starts_its_pods_in_order_one_at_a_time() -> None:
    simulation = started(nodepool(), STATEFULSET)
    simulation.run(2, until_steady=False)
    assert [pod.metadata.name for pod in workload_pods(simulation)] == ["db-0"]
    simulation.run(3600)
    created = {pod.metadata.name: pod.metadata.creation_timestamp or 0.0 for pod in workload_pods(simulation)}
    assert created["db-0"] < created["db-1"] < created["db-2"]


def scale_statefulset(simulation: Simulation, replicas: int) -> StatefulSet:
    """Scale StatefulSet default/db to ``replicas`` and run an hour; the set as scaled."""
    statefulset = simulation.cluster.get("StatefulSet", "default/db")
    assert isinstance(statefulset, StatefulSet)
    scaled = simulation.cluster.update(statefulset.with_changes(replicas=replicas))
    simulation.run(3600)
    return scaled


def claim_names(simulation: Simulation) -> list[str]:
    return sorted(claim.metadata.name for claim in simulation.cluster.objects("PersistentVolumeClaim"))


def test_scaling_a_statefulset_down_removes_the_highest_ordinals_and_keeps_their_claims() -> None:
    simulation = started(nodepool(), STATEFULSET)
    simulation.run(3600)
    scale_statefulset(simulation, 1)
    assert [pod.metadata.name for pod in workload_pods(simulation)] == ["db-0"]
    assert len(list(simulation.cluster.objects("PersistentVolumeClaim"))) == 3


def test_a_statefulset_with_a_start_ordinal_numbers_its_pods_and_claims_from_it() -> None:
    # spec.ordinals.start (GA in Kubernetes 1.31): a set migrated from another cluster keeps its names.
    numbered = STATEFULSET.replace("  replicas: 3\n", "  replicas: 2\n  ordinals: {start: 5}\n")
    simulation = started(nodepool(), numbered)
    simulation.run(3600)
    assert sorted(pod.metadata.name for pod in workload_pods(simulation)) == ["db-5", "db-6"]
    scale_statefulset(simulation, 1)
    assert [pod.metadata.name for pod in workload_pods(simulation)] == ["db-5"]
    assert claim_names(simulation) == ["data-db-5", "data-db-6"]


def test_claims_deleted_when_scaled_go_with_the_pods_a_scale_down_removes() -> None:
    policy = "  persistentVolumeClaimRetentionPolicy: {whenDeleted: Retain, whenScaled: Delete}\n"
    simulation = started(
        nodepool(), STATEFULSET.replace("  serviceName: db\n", f"  serviceName: db\n{policy}")
    )
    simulation.run(3600)
    statefulset = scale_statefulset(simulation, 1)
    assert [pod.metadata.name for pod in workload_pods(simulation)] == ["db-0"]
    assert claim_names(simulation) == ["data-db-0"]
    simulation.cluster.delete(statefulset)
    simulation.run(600)
    assert claim_names(simulation) == ["data-db-0"]  # whenDeleted: Retain


def test_claims_deleted_when_the_statefulset_is_go_with_it() -> None:
    policy = "  persistentVolumeClaimRetentionPolicy: {whenDeleted: Delete}\n"
    simulation = started(
        nodepool(), STATEFULSET.replace("  serviceName: db\n", f"  serviceName: db\n{policy}")
    )
    simulation.run(3600)
    assert claim_names(simulation) == ["data-db-0", "data-db-1", "data-db-2"]
    statefulset = scale_statefulset(simulation, 2)
    assert claim_names(simulation) == ["data-db-0", "data-db-1", "data-db-2"]  # whenScaled: Retain
    simulation.cluster.delete(statefulset)
    simulation.run(600)
    assert workload_pods(simulation) == [] and claim_names(simulation) == []


JOB = """
apiVersion: batch/v1
kind: Job
metadata: {name: batch, namespace: default}
spec:
  completions: 4
  parallelism: 2
  template:
    metadata: {annotations: {karpy.dev/duration: 5m}}
    spec:
      restartPolicy: Never
      containers: [{name: main, resources: {requests: {cpu: "1", memory: 1Gi}}}]
"""


def test_a_job_runs_two_then_two_pods_then_is_complete_and_its_nodes_go() -> None:
    simulation = started(nodepool(), JOB)
    simulation.run(4 * MINUTE, until_steady=False)
    pods = workload_pods(simulation)
    assert len(pods) == 2 and all(pod.phase == POD_RUNNING for pod in pods)
    simulation.run(3 * MINUTE, until_steady=False)  # the first two finished; two more run
    phases = sorted(pod.phase for pod in workload_pods(simulation))
    assert phases == [POD_RUNNING, POD_RUNNING, POD_SUCCEEDED, POD_SUCCEEDED]
    simulation.run(3600)
    job = simulation.cluster.get("Job", "default/batch")
    assert isinstance(job, Job)
    assert job.status.complete and job.status.succeeded == 4
    assert len(simulation.recorder.pods) == 4  # no pod more than the completions
    assert simulation.nodeclaims() == []  # finished pods hold nothing: the nodes were consolidated
    assert simulation.steady()


def test_a_scenario_job_duration_applies_to_job_pods_without_an_annotation() -> None:
    simulation = started(nodepool(), JOB.replace("metadata: {annotations: {karpy.dev/duration: 5m}}", ""))
    simulation.kubelet.settings.job_duration = 2 * MINUTE
    simulation.run(3600)
    job = simulation.cluster.get("Job", "default/batch")
    assert isinstance(job, Job) and job.status.complete and job.status.succeeded == 4
    # Finished pods went with their consolidated nodes, and none was run again.
    assert len(simulation.recorder.pods) == 4
    assert (job.status.completion_time or 0.0) - simulation.clock.start < 10 * MINUTE


CRONJOB = """
apiVersion: batch/v1
kind: CronJob
metadata: {name: report, namespace: default}
spec:
  schedule: "*/10 * * * *"
  concurrencyPolicy: POLICY
  jobTemplate:
    spec:
      template:
        metadata: {annotations: {karpy.dev/duration: DURATION}}
        spec:
          restartPolicy: Never
          containers: [{name: main, resources: {requests: {cpu: "1", memory: 1Gi}}}]
"""


def cronjob(policy: str = "Allow", duration: str = "2m") -> str:
    return CRONJOB.replace("POLICY", policy).replace("DURATION", duration)


def job_times(simulation: Simulation) -> list[float]:
    return sorted(
        (job.metadata.creation_timestamp or 0.0) - simulation.clock.start
        for job in simulation.cluster.objects("Job")
    )


def test_a_cronjob_creates_a_job_every_ten_minutes_of_virtual_time() -> None:
    simulation = started(nodepool(), cronjob())
    simulation.run(35 * MINUTE)
    assert job_times(simulation) == [10 * MINUTE, 20 * MINUTE, 30 * MINUTE]
    names = sorted(job.metadata.name for job in simulation.cluster.objects("Job"))
    minute = int(simulation.clock.start // 60)
    assert names == [f"report-{minute + 10}", f"report-{minute + 20}", f"report-{minute + 30}"]
    assert all(job.status.complete for job in simulation.cluster.objects("Job") if isinstance(job, Job))


def test_a_cronjob_every_interval_creates_a_job_each_interval_after_its_creation() -> None:
    # "@every 25m": the cron library's constant delay, which Kubernetes reads and Helm charts use.
    every = cronjob().replace('schedule: "*/10 * * * *"', 'schedule: "@every 25m"')
    simulation = started(nodepool(), every)
    simulation.run(80 * MINUTE)
    assert job_times(simulation) == [25 * MINUTE, 50 * MINUTE, 75 * MINUTE]


def test_forbid_skips_a_fire_while_the_last_job_runs_and_allow_does_not() -> None:
    forbid = started(nodepool(), cronjob("Forbid", "15m"))
    forbid.run(35 * MINUTE)
    assert job_times(forbid) == [10 * MINUTE, 30 * MINUTE]  # the 20-minute fire found the first running
    allow = started(nodepool(), cronjob("Allow", "15m"))
    allow.run(35 * MINUTE)
    assert job_times(allow) == [10 * MINUTE, 20 * MINUTE, 30 * MINUTE]


def test_a_suspended_cronjob_creates_nothing_and_catches_up_once_when_resumed() -> None:
    simulation = started(nodepool(), cronjob().replace("schedule:", "suspend: true\n  schedule:"))
    simulation.run(35 * MINUTE, until_steady=False)
    assert job_times(simulation) == []
    simulation.clock.advance_to(simulation.clock.start + 35 * MINUTE)  # nothing was due meanwhile
    simulation.apply(load_objects(cronjob()))
    simulation.run(1, until_steady=False)
    assert job_times(simulation) == [35 * MINUTE]  # one Job, for the latest missed fire
    minute = int(simulation.clock.start // 60)
    assert [job.metadata.name for job in simulation.cluster.objects("Job")] == [f"report-{minute + 30}"]


PRIORITY_CLASSES = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: normal}
value: 10
globalDefault: true
"""


def bare_pod(name: str, extra_spec: str = "") -> str:
    return f"""
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  {extra_spec}
  containers: [{{name: main, resources: {{requests: {{cpu: "1", memory: 1Gi}}}}}}]
"""


def test_pods_get_their_priority_from_their_class_or_the_global_default() -> None:
    simulation = started(
        nodepool(),
        PRIORITY_CLASSES,
        bare_pod("important", "priorityClassName: high"),
        bare_pod("plain"),
        bare_pod("system", "priorityClassName: system-cluster-critical"),
    )
    pods = {pod.metadata.name: pod for pod in simulation.pods()}
    assert pods["important"].spec.priority == 1000
    assert (pods["plain"].spec.priority, pods["plain"].spec.priority_class_name) == (10, "normal")
    assert pods["system"].spec.priority == 2000000000


def test_a_pod_naming_an_unknown_priority_class_is_refused_and_reported() -> None:
    simulation = started(nodepool(), bare_pod("lost", "priorityClassName: missing"))
    assert simulation.cluster.pod("default", "lost") is None
    notes = [message for _, message in simulation.recorder.notes]
    assert any(
        'refused Pod default/lost: pods "lost" is forbidden: no PriorityClass with name missing was found'
        in note
        for note in notes
    )


def test_a_deployment_whose_pods_name_an_unknown_class_gets_a_failed_create_event() -> None:
    text = deployment(replicas=2).replace("containers:", "priorityClassName: missing\n      containers:")
    simulation = started(nodepool(), text)
    simulation.run(60)
    assert workload_pods(simulation) == []
    failed = [event for event in simulation.cluster.events if event.reason == "FailedCreate"]
    assert (
        failed
        and failed[0].kind == "ReplicaSet"
        and "no PriorityClass with name missing" in failed[0].message
    )


def test_a_bare_pod_runs() -> None:
    simulation = started(nodepool(), bare_pod("solo"))
    simulation.run(3600)
    (pod,) = simulation.pods()
    assert pod.phase == POD_RUNNING and pod.node_name
    assert len(simulation.nodeclaims()) == 1


def test_a_bare_pod_with_a_duration_finishes_and_its_node_goes() -> None:
    text = bare_pod("task").replace(
        "namespace: default}", "namespace: default, annotations: {karpy.dev/duration: 3m}}"
    )
    simulation = started(nodepool(), text)
    simulation.run(3600)
    (record,) = simulation.recorder.pods.values()
    assert record.running_at is not None and record.succeeded_at == record.running_at + 3 * MINUTE
    assert simulation.nodeclaims() == []  # the finished pod held nothing: its node was consolidated


NAMESPACES = """
apiVersion: v1
kind: Namespace
metadata: {name: shop, labels: {team: web}}
---
apiVersion: v1
kind: Namespace
metadata: {name: batch, labels: {team: data}}
"""


def labelled_pod(name: str, namespace: str, extra_spec: str = "") -> str:
    return f"""
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {namespace}, labels: {{app: cache}}}}
spec:
  {extra_spec}
  containers: [{{name: main, resources: {{requests: {{cpu: 100m, memory: 128Mi}}}}}}]
"""


ANTI_AFFINITY_TO_TEAM_WEB = """affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - topologyKey: kubernetes.io/hostname
          labelSelector: {matchLabels: {app: cache}}
          namespaceSelector: {matchLabels: {team: web}}"""


def launched(simulation: Simulation) -> int:
    return sum(1 for record in simulation.recorder.nodeclaims.values() if record.launched_at is not None)


def test_pod_anti_affinity_namespace_selector_selects_by_namespace_labels() -> None:
    # Anti-affinity to app=cache pods in namespaces labelled team=web: shop is one of them.
    simulation = started(
        nodepool(),
        NAMESPACES,
        labelled_pod("web-cache", "shop"),
        labelled_pod("loner", "batch", ANTI_AFFINITY_TO_TEAM_WEB),
    )
    simulation.run(3600)
    assert launched(simulation) == 2


def test_a_namespace_selector_matching_no_namespace_labels_keeps_pods_together() -> None:
    # batch is team=data: its app=cache pod is not selected, and one node holds both pods.
    simulation = started(
        nodepool(),
        NAMESPACES,
        labelled_pod("data-cache", "batch"),
        labelled_pod("loner", "batch", ANTI_AFFINITY_TO_TEAM_WEB),
    )
    simulation.run(3600)
    assert launched(simulation) == 1


def test_the_workloads_scenario_runs_every_kind_together() -> None:
    scenario, problems = load_inputs([DATA / "scenarios" / "workloads"])
    assert problems.errors == []
    simulation = Simulation()
    simulation.run_scenario(scenario)
    assert simulation.runtime.errors == []
    statefulset_pods = sorted(
        pod.metadata.name for pod in simulation.pods() if pod.metadata.labels.get("app") == "db"
    )
    assert statefulset_pods == ["db-0", "db-1"]  # scaled from 3 to 2 at 20m
    assert all(
        pod.spec.priority == 100000 for pod in simulation.pods() if pod.metadata.name.startswith("db-")
    )
    for name in statefulset_pods:
        pod = simulation.cluster.pod("shop", name)
        assert pod is not None
        assert volume_zone(simulation, "shop", f"data-{name}") == node_zone(simulation, pod.node_name)
    job = simulation.cluster.get("Job", "shop/import")
    assert isinstance(job, Job) and job.status.succeeded == 4
    report_jobs = [
        job for job in simulation.cluster.objects("Job") if job.metadata.name.startswith("report-")
    ]
    assert report_jobs == []  # deleted with their CronJob at 50m, after firing at 15, 30 and 45m
    fired = [
        event
        for event in simulation.cluster.events
        if event.kind == "CronJob" and event.reason == "SuccessfulCreate"
    ]
    assert len(fired) == 3
    completed = [record for record in simulation.recorder.pods.values() if record.succeeded_at is not None]
    assert len(completed) == 4 + 3 + 1  # the Job's, the CronJob's and the bare Pod


def test_a_replicaset_applied_on_its_own_keeps_its_pods() -> None:
    replicaset = deployment(replicas=2).replace("kind: Deployment", "kind: ReplicaSet")
    simulation = started(nodepool(), replicaset)
    simulation.run(3600)
    pods = workload_pods(simulation)
    assert len(pods) == 2 and all(pod.phase == POD_RUNNING for pod in pods)
    simulation.cluster.delete(pods[0])
    simulation.run(3600)
    assert sum(1 for pod in workload_pods(simulation) if pod.phase == POD_RUNNING) == 2


def test_a_cronjob_keeps_the_last_three_complete_jobs_and_deletes_older_ones_with_their_pods() -> None:
    simulation = started(nodepool(), cronjob())
    simulation.run(65 * MINUTE)
    assert job_times(simulation) == [40 * MINUTE, 50 * MINUTE, 60 * MINUTE]
    fired = [event for event in simulation.cluster.events if event.reason == "SuccessfulCreate"]
    assert len(fired) == 6
    jobs = {job.metadata.name for job in simulation.cluster.objects("Job")}
    owners = {
        pod.metadata.controller.name for pod in simulation.pods() if pod.metadata.controller is not None
    }
    assert owners <= jobs  # the pruned Jobs' pods went with them


def test_deleting_a_running_job_removes_its_pods_and_then_its_nodes() -> None:
    simulation = started(nodepool(), JOB.replace("karpy.dev/duration: 5m", "karpy.dev/duration: 1h"))
    simulation.run(2 * MINUTE, until_steady=False)
    assert sum(1 for pod in workload_pods(simulation) if pod.phase == POD_RUNNING) == 2
    job = simulation.cluster.get("Job", "default/batch")
    simulation.cluster.delete(job)
    simulation.run(3600)
    assert workload_pods(simulation) == []
    assert simulation.nodeclaims() == []
    assert simulation.steady()


def test_replace_deletes_the_running_job_and_its_pods_for_the_new_one() -> None:
    simulation = started(nodepool(), cronjob("Replace", "15m"))
    simulation.run(35 * MINUTE)
    assert job_times(simulation) == [30 * MINUTE]
    fired = [event for event in simulation.cluster.events if event.reason == "SuccessfulCreate"]
    assert len(fired) == 3
    (pod,) = workload_pods(simulation)
    assert pod.phase == POD_RUNNING and not pod.metadata.deleting
