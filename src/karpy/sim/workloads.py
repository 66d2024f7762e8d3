"""Stand-ins for kube-controller-manager's workload controllers.

- Deployment → ReplicaSet: one ReplicaSet per pod-template hash, scaled to
  the Deployment's replicas; older ReplicaSets scale to zero (a rollout is
  instantaneous here; surge and unavailability settings are not modelled).
- ReplicaSet → Pods: create missing pods (``generateName``), delete surplus
  ones (unbound first, newest first), replace pods that went away.
- DaemonSet → one pod per node whose taints the template tolerates and whose
  labels its node constraints accept, bound directly to the node, as the
  DaemonSet controller does.
- StatefulSet → pods ``<name>-<start>`` … ``<name>-<start+replicas-1>`` (``start``
  from ``spec.ordinals``, 0 by default), each with its own
  PersistentVolumeClaims ``<template>-<name>-<ordinal>`` created before the
  pod and kept after it (the default Retain policy): a pod recreated under
  the same name mounts the same claims, and so, once its volume is bound to
  a zone, goes back to that zone. A ``Delete`` retention policy makes the
  claims owned, as the StatefulSet controller does: by the set
  (``whenDeleted``), or by a pod a scale-down removes (``whenScaled``), so
  the store's cascading deletion removes them after their owner. OrderedReady (the default) creates a pod
  only when the ones before it run, and removes surplus pods highest ordinal
  first, one at a time; Parallel does both at once.
- Job → at most ``parallelism`` running pods until ``completions`` of them
  have succeeded; then the Job is complete. As the Job controller does, it
  counts a succeeded pod through the pod's ``batch.kubernetes.io/job-tracking``
  finalizer (counted, then released), so a finished pod removed later (its
  node consolidated) is not counted twice nor run again.
- CronJob → a Job ``<name>-<minutes since the epoch>`` at each fire of the
  schedule in virtual time. Fires missed while the controller was not
  looking (or while suspended) are caught up with one Job, for the latest;
  ``Forbid`` skips a fire while a Job is still running, ``Replace`` deletes
  the running Job first, ``Allow`` runs them side by side. Complete Jobs
  beyond ``successfulJobsHistoryLimit`` (3) are deleted, oldest first.
- Pod garbage collection: pods bound to a Node that no longer exists go.

A pod the apiserver refuses (a PriorityClass that does not exist) is a
``FailedCreate`` Warning Event on its owner, as kube-controller-manager
records it, and is tried again when the owner next changes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable

from karpy.api.core import (
    POD_RUNNING,
    POD_SUCCEEDED,
    CronJob,
    CronJobStatus,
    DaemonSet,
    Deployment,
    Job,
    JobStatus,
    Node,
    PersistentVolumeClaim,
    Pod,
    PodTemplate,
    ReplicaSet,
    StatefulSet,
)
from karpy.api.cron import CronSchedule
from karpy.api.meta import ObjectMeta, OwnerReference
from karpy.api.taints import Taint, Toleration, untolerated
from karpy.operator.cluster import EVENT_NORMAL, EVENT_WARNING, AlreadyExistsError, Clock, NotFoundError
from karpy.operator.runtime import Watch
from karpy.sim.store import AdmissionError, InMemoryCluster

TEMPLATE_HASH_LABEL = "pod-template-hash"
STATEFULSET_POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
JOB_TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
# Taints the DaemonSet controller tolerates on every DaemonSet pod.
DAEMONSET_TOLERATIONS = tuple(
    Toleration(key=key, operator="Exists")
    for key in (
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/disk-pressure",
        "node.kubernetes.io/memory-pressure",
        "node.kubernetes.io/pid-pressure",
        "node.kubernetes.io/unschedulable",
        "node.kubernetes.io/network-unavailable",
    )
)


def template_hash(template: PodTemplate) -> str:
    material = json.dumps(
        {"labels": template.labels, "annotations": template.annotations, "spec": repr(template.spec)},
        sort_keys=True,
    )
    return hashlib.sha256(material.encode()).hexdigest()[:10]


def _same_template(replicaset: PodTemplate, deployment: PodTemplate) -> bool:
    """Whether a ReplicaSet's template is the Deployment's, but for the pod-template-hash label."""
    labels = {key: value for key, value in replicaset.labels.items() if key != TEMPLATE_HASH_LABEL}
    return dataclasses.replace(replicaset, labels=labels) == deployment


def _owner(kind: str, api_version: str, meta: ObjectMeta) -> OwnerReference:
    return OwnerReference(api_version=api_version, kind=kind, name=meta.name, uid=meta.uid, controller=True)


def pod_from_template(template: PodTemplate, owner: OwnerReference, namespace: str, prefix: str) -> Pod:
    return Pod(
        metadata=ObjectMeta(
            name="",
            generate_name=prefix,
            namespace=namespace,
            labels=dict(template.labels),
            annotations=dict(template.annotations),
            owner_references=(owner,),
        ),
        spec=template.spec,
    )


def ordinal_of(statefulset: StatefulSet, pod_name: str) -> int | None:
    """The ordinal in ``<statefulset>-<ordinal>``; None for a name of another shape."""
    prefix = f"{statefulset.metadata.name}-"
    suffix = pod_name.removeprefix(prefix)
    if suffix == pod_name or not suffix.isdigit():
        return None
    return int(suffix)


def claim_name(template: PersistentVolumeClaim, statefulset: StatefulSet, ordinal: int) -> str:
    """The claim a StatefulSet pod mounts from a volumeClaimTemplate, named as Kubernetes names it."""
    return f"{template.metadata.name}-{statefulset.metadata.name}-{ordinal}"


# Which pod changes concern the controller that owns the pod: for ReplicaSets the pod going
# away; for StatefulSets also a pod starting (OrderedReady waits for it); for Jobs also a pod
# finishing (it is counted).
_OWNER_KEYS = {"ReplicaSet": "replicaset", "StatefulSet": "statefulset", "Job": "job"}


class SimulatedWorkloadControllers:
    """Keys: "deployment/NS/NAME", "replicaset/NS/NAME", "statefulset/NS/NAME",
    "daemonset/NS/NAME", "job/NS/NAME", "cronjob/NS/NAME", "gc/NODE"."""

    name = "sim.workloads"

    def __init__(self, cluster: InMemoryCluster, clock: Clock) -> None:
        self.cluster = cluster
        self.clock = clock

    def watches(self) -> list[Watch]:
        return [
            Watch("Deployment", lambda old, new: self._keys("deployment", old, new)),
            Watch("ReplicaSet", lambda old, new: self._keys("replicaset", old, new)),
            Watch("StatefulSet", lambda old, new: self._keys("statefulset", old, new)),
            Watch("DaemonSet", lambda old, new: self._keys("daemonset", old, new)),
            Watch("Job", self._on_job),
            Watch("CronJob", lambda old, new: self._keys("cronjob", old, new)),
            Watch("Pod", self._on_pod),
            Watch("Node", self._on_node),
        ]

    def _on_job(self, old: object | None, new: object | None) -> Iterable[str]:
        keys = list(self._keys("job", old, new))
        job = new if new is not None else old
        controller = job.metadata.controller if isinstance(job, Job) else None
        finished = new is None or (isinstance(new, Job) and new.status.complete)
        if controller is not None and controller.kind == "CronJob" and finished and isinstance(job, Job):
            keys.append(f"cronjob/{job.metadata.namespace}/{controller.name}")  # Forbid may wait for it
        return keys

    @staticmethod
    def _keys(prefix: str, old: object | None, new: object | None) -> Iterable[str]:
        obj = new if new is not None else old
        meta = getattr(obj, "metadata", None)
        if isinstance(meta, ObjectMeta):
            return [f"{prefix}/{meta.namespace}/{meta.name}"]
        return []

    def _on_pod(self, old: object | None, new: object | None) -> Iterable[str]:
        pod = new if new is not None else old
        if not isinstance(pod, Pod):
            return []
        controller = pod.metadata.controller
        prefix = _OWNER_KEYS.get(controller.kind, "") if controller is not None else ""
        if controller is None or not prefix:
            return []
        key = [f"{prefix}/{pod.metadata.namespace}/{controller.name}"]
        if new is None or not isinstance(new, Pod):
            return key
        before = old if isinstance(old, Pod) else None
        if new.metadata.deleting and not (before is not None and before.metadata.deleting):
            return key
        if (
            prefix == "statefulset"
            and new.phase == POD_RUNNING
            and (before is None or before.phase != POD_RUNNING)
        ):
            return key
        if prefix == "job" and new.is_terminal and not (before is not None and before.is_terminal):
            return key
        return []

    def _on_node(self, old: object | None, new: object | None) -> Iterable[str]:
        keys = [f"daemonset/{ds.metadata.namespace}/{ds.metadata.name}" for ds in self.cluster.daemonsets()]
        if new is None and isinstance(old, Node):
            keys.append(f"gc/{old.name}")
        return keys

    def reconcile(self, key: str) -> float | None:
        kind, _, rest = key.partition("/")
        namespace, _, name = rest.partition("/")
        if kind == "deployment":
            self._deployment(namespace, name)
        elif kind == "replicaset":
            self._replicaset(namespace, name)
        elif kind == "statefulset":
            self._statefulset(namespace, name)
        elif kind == "daemonset":
            self._daemonset(namespace, name)
        elif kind == "job":
            self._job(namespace, name)
        elif kind == "cronjob":
            return self._cronjob(namespace, name)
        elif kind == "gc":
            self._collect(rest)
        return None

    def _create_pod(self, owner: object, pod: Pod) -> bool:
        """Create ``pod``; a refusal is a FailedCreate Event on ``owner``, as the controllers record it."""
        try:
            self.cluster.create(pod)
        except AdmissionError as error:
            self.cluster.record_event(owner, EVENT_WARNING, "FailedCreate", f"Error creating: {error}")
            return False
        return True

    def _delete(self, objects: Iterable[object]) -> None:
        """Delete each of ``objects``; one already gone is no matter."""
        for obj in objects:
            try:
                self.cluster.delete(obj)
            except NotFoundError:
                continue

    def _owned_pods(self, namespace: str, uid: str) -> list[Pod]:
        return [
            pod
            for pod in self.cluster.pods()
            if pod.metadata.namespace == namespace
            and (controller := pod.metadata.controller) is not None
            and controller.uid == uid
        ]

    def _deployment(self, namespace: str, name: str) -> None:
        deployment = self.cluster.get("Deployment", f"{namespace}/{name}")
        if not isinstance(deployment, Deployment) or deployment.metadata.deleting:
            return
        digest = template_hash(deployment.template)
        wanted = f"{name}-{digest}"
        owner = _owner("Deployment", "apps/v1", deployment.metadata)
        owned = [
            replicaset
            for replicaset in self.cluster.replicasets()
            if replicaset.metadata.namespace == namespace
            and (controller := replicaset.metadata.controller) is not None
            and controller.uid == deployment.metadata.uid
        ]
        if all(replicaset.metadata.name != wanted for replicaset in owned):
            # A ReplicaSet a real cluster's controller made (a run from the cluster): named by
            # Kubernetes' own hash, it is the current one if its template is the Deployment's.
            current = next((rs for rs in owned if _same_template(rs.template, deployment.template)), None)
            wanted = current.metadata.name if current is not None else wanted
        for replicaset in owned:
            replicas = deployment.replicas if replicaset.metadata.name == wanted else 0
            if replicaset.replicas != replicas:
                self.cluster.update(dataclasses.replace(replicaset, replicas=replicas))
        if self.cluster.get("ReplicaSet", f"{namespace}/{wanted}") is None:
            labels = dict(deployment.template.labels)
            labels[TEMPLATE_HASH_LABEL] = digest
            template = dataclasses.replace(deployment.template, labels=labels)
            self.cluster.create(
                ReplicaSet(
                    metadata=ObjectMeta(
                        name=wanted, namespace=namespace, labels=labels, owner_references=(owner,)
                    ),
                    replicas=deployment.replicas,
                    selector=deployment.selector,
                    template=template,
                )
            )

    def _replicaset(self, namespace: str, name: str) -> None:
        replicaset = self.cluster.get("ReplicaSet", f"{namespace}/{name}")
        if not isinstance(replicaset, ReplicaSet) or replicaset.metadata.deleting:
            return
        pods = [
            pod
            for pod in self._owned_pods(namespace, replicaset.metadata.uid)
            if not pod.metadata.deleting and not pod.is_terminal
        ]
        missing = replicaset.replicas - len(pods)
        owner = _owner("ReplicaSet", "apps/v1", replicaset.metadata)
        for _ in range(missing):
            pod = pod_from_template(replicaset.template, owner, namespace, f"{name}-")
            if not self._create_pod(replicaset, pod):
                break
        if missing < 0:
            # Unbound pods go first, then the newest: what the ReplicaSet controller prefers.
            surplus = sorted(
                pods,
                key=lambda pod: (bool(pod.node_name), -(pod.metadata.creation_timestamp or 0.0), pod.key),
            )
            self._delete(surplus[:-missing])

    def _daemonset(self, namespace: str, name: str) -> None:
        daemonset = self.cluster.get("DaemonSet", f"{namespace}/{name}")
        if not isinstance(daemonset, DaemonSet):
            return
        owner = _owner("DaemonSet", "apps/v1", daemonset.metadata)
        covered = {pod.node_name for pod in self._owned_pods(namespace, daemonset.metadata.uid)}
        for node in list(self.cluster.nodes()):
            if node.name in covered or node.metadata.deleting or not self._runs_on(daemonset, node):
                continue
            pod = pod_from_template(daemonset.template, owner, namespace, f"{name}-")
            bound = pod.with_changes(spec=dataclasses.replace(pod.spec, node_name=node.name))
            if not self._create_pod(daemonset, bound):
                break

    def _statefulset(self, namespace: str, name: str) -> None:
        statefulset = self.cluster.get("StatefulSet", f"{namespace}/{name}")
        if not isinstance(statefulset, StatefulSet) or statefulset.metadata.deleting:
            return
        by_ordinal: dict[int, Pod] = {}
        for owned in self._owned_pods(namespace, statefulset.metadata.uid):
            ordinal = ordinal_of(statefulset, owned.metadata.name)
            if ordinal is not None:
                by_ordinal[ordinal] = owned
        ordered = not statefulset.parallel
        for ordinal in statefulset.ordinals:
            pod = by_ordinal.get(ordinal)
            if pod is None:
                # A pod still being removed keeps its name: the new one waits for it to go.
                if self.cluster.pod(namespace, f"{name}-{ordinal}") is not None:
                    break
                if not self._create_statefulset_pod(statefulset, ordinal) or ordered:
                    break
            elif ordered and (pod.phase != POD_RUNNING or pod.metadata.deleting):
                break
        surplus = sorted((o for o in by_ordinal if o not in statefulset.ordinals), reverse=True)
        for ordinal in surplus:
            extra = by_ordinal[ordinal]
            if not extra.metadata.deleting:
                if statefulset.delete_claims_when_scaled:
                    self._hand_claims_to(extra)
                self._delete([extra])
            if ordered:
                break  # the next one goes when this one is gone

    def _create_statefulset_pod(self, statefulset: StatefulSet, ordinal: int) -> bool:
        namespace, name = statefulset.metadata.namespace, statefulset.metadata.name
        claims: list[str] = []
        owner = _owner("StatefulSet", "apps/v1", statefulset.metadata)
        for template in statefulset.volume_claim_templates:
            claim = claim_name(template, statefulset, ordinal)
            claims.append(claim)
            if self.cluster.persistent_volume_claim(namespace, claim) is None:
                labels = {**template.metadata.labels, **statefulset.selector.match_labels}
                # Owned by the set when it deletes its claims, so they go with it.
                owners = (owner,) if statefulset.delete_claims_when_deleted else ()
                metadata = ObjectMeta(name=claim, namespace=namespace, labels=labels, owner_references=owners)
                self.cluster.create(dataclasses.replace(template, metadata=metadata, volume_name=""))
        pod = pod_from_template(statefulset.template, owner, namespace, "")
        pod_name = f"{name}-{ordinal}"
        labels = {**pod.metadata.labels, STATEFULSET_POD_NAME_LABEL: pod_name, POD_INDEX_LABEL: str(ordinal)}
        spec = dataclasses.replace(pod.spec, claim_names=(*pod.spec.claim_names, *claims))
        metadata = pod.metadata.with_changes(name=pod_name, generate_name="", labels=labels)
        return self._create_pod(statefulset, pod.with_changes(metadata=metadata, spec=spec))

    def _hand_claims_to(self, pod: Pod) -> None:
        """Make ``pod`` an owner of its claims, so they go when it goes, as a scale-down that
        deletes claims does: the claim outlives the pod's last use of it, never the other way."""
        owner = OwnerReference(api_version="v1", kind="Pod", name=pod.metadata.name, uid=pod.metadata.uid)
        for name in pod.spec.claim_names:
            claim = self.cluster.persistent_volume_claim(pod.metadata.namespace, name)
            if claim is not None and owner not in claim.metadata.owner_references:
                owners = (*claim.metadata.owner_references, owner)
                metadata = claim.metadata.with_changes(owner_references=owners)
                self.cluster.update(dataclasses.replace(claim, metadata=metadata))

    def _release(self, pods: Iterable[Pod]) -> None:
        """Take the job-tracking finalizer off ``pods``: the Job has counted them, or is gone."""
        for pod in pods:
            finalizers = tuple(f for f in pod.metadata.finalizers if f != JOB_TRACKING_FINALIZER)
            try:
                self.cluster.update(
                    pod.with_changes(metadata=pod.metadata.with_changes(finalizers=finalizers))
                )
            except NotFoundError:
                continue

    def _job(self, namespace: str, name: str) -> None:
        job = self.cluster.get("Job", f"{namespace}/{name}")
        if not isinstance(job, Job) or job.metadata.deleting:
            # The pods of a deleted Job are let go, or they would never finish being deleted.
            gone_uid = job.metadata.uid if isinstance(job, Job) else None
            self._release(
                pod
                for pod in self.cluster.pods()
                if pod.metadata.namespace == namespace
                and JOB_TRACKING_FINALIZER in pod.metadata.finalizers
                and (controller := pod.metadata.controller) is not None
                and controller.kind == "Job"
                and controller.name == name
                and (gone_uid is None or controller.uid == gone_uid)
            )
            return
        pods = self._owned_pods(namespace, job.metadata.uid)
        tracked = [pod for pod in pods if JOB_TRACKING_FINALIZER in pod.metadata.finalizers]
        # Succeeded pods still carrying the finalizer are counted now; pods going away
        # without succeeding are let go (and replaced below).
        counted = [pod for pod in tracked if pod.phase == POD_SUCCEEDED]
        released = [
            pod for pod in tracked if pod.phase == POD_SUCCEEDED or pod.metadata.deleting or pod.is_terminal
        ]
        succeeded = job.status.succeeded + len(counted)
        done = succeeded >= job.wanted_successes
        status = JobStatus(
            succeeded=succeeded,
            completion_time=job.status.completion_time or (self.clock.now() if done else None),
        )
        if status != job.status:
            job = self.cluster.update(job.with_changes(status=status))  # counted before released
        self._release(released)
        active = [pod for pod in pods if not pod.is_terminal and not pod.metadata.deleting]
        if job.suspend:
            self._delete(active)
            return
        if done:
            return
        wanted_active = min(job.parallelism, job.wanted_successes - succeeded)
        owner = _owner("Job", "batch/v1", job.metadata)
        for _ in range(wanted_active - len(active)):
            pod = pod_from_template(job.template, owner, namespace, f"{name}-")
            metadata = pod.metadata.with_changes(
                labels={**pod.metadata.labels, JOB_NAME_LABEL: name, "job-name": name},
                finalizers=(JOB_TRACKING_FINALIZER,),
            )
            if not self._create_pod(job, pod.with_changes(metadata=metadata)):
                break

    def _cronjob(self, namespace: str, name: str) -> float | None:
        cronjob = self.cluster.get("CronJob", f"{namespace}/{name}")
        if not isinstance(cronjob, CronJob) or cronjob.metadata.deleting:
            return None
        self._prune_history(cronjob)
        schedule = CronSchedule(cronjob.schedule)
        now = self.clock.now()
        since = cronjob.status.last_schedule_time
        if since is None:
            since = cronjob.metadata.creation_timestamp or now
        due = schedule.next_fire_after(since)
        if due is None:
            return None
        if due > now:
            return due - now
        if cronjob.suspend:
            return None  # missed fires are caught up when it is resumed (an update wakes this up)
        latest = due
        while (following := schedule.next_fire_after(latest)) is not None and following <= now:
            latest = following
        self._fire(cronjob, latest)
        self.cluster.update(cronjob.with_changes(status=CronJobStatus(last_schedule_time=latest)))
        following = schedule.next_fire_after(latest)
        return None if following is None else following - now

    def _jobs_of(self, cronjob: CronJob) -> list[Job]:
        return [
            job
            for job in self.cluster.objects("Job")
            if isinstance(job, Job)
            and job.metadata.namespace == cronjob.metadata.namespace
            and (controller := job.metadata.controller) is not None
            and controller.uid == cronjob.metadata.uid
            and not job.metadata.deleting
        ]

    def _prune_history(self, cronjob: CronJob) -> None:
        complete = sorted(
            (job for job in self._jobs_of(cronjob) if job.status.complete),
            key=lambda job: (job.status.completion_time or 0.0, job.metadata.name),
        )
        self._delete(complete[: max(0, len(complete) - cronjob.successful_jobs_history_limit)])

    def _fire(self, cronjob: CronJob, scheduled: float) -> None:
        namespace = cronjob.metadata.namespace
        active = [job for job in self._jobs_of(cronjob) if not job.status.complete]
        if active and cronjob.concurrency_policy == "Forbid":
            self.cluster.record_event(
                cronjob,
                EVENT_NORMAL,
                "JobAlreadyActive",
                "Not starting job because prior execution is running",
            )
            return
        if cronjob.concurrency_policy == "Replace":
            self._delete(active)
        template = cronjob.job_template
        job = template.with_changes(
            metadata=template.metadata.with_changes(
                name=f"{cronjob.metadata.name}-{int(scheduled // 60)}",
                namespace=namespace,
                owner_references=(_owner("CronJob", "batch/v1", cronjob.metadata),),
            ),
            status=JobStatus(),
        )
        try:
            self.cluster.create(job)
        except AlreadyExistsError:
            return  # this fire's Job was made already
        self.cluster.record_event(
            cronjob, EVENT_NORMAL, "SuccessfulCreate", f"Created job {job.metadata.name}"
        )

    @staticmethod
    def _runs_on(daemonset: DaemonSet, node: Node) -> bool:
        spec = daemonset.template.spec
        tolerations = (*spec.tolerations, *DAEMONSET_TOLERATIONS)
        blocking: list[Taint] = list(node.taints)
        if untolerated(blocking, tolerations) is not None:
            return False
        return any(
            option.is_satisfied_by_labels(node.metadata.labels) is None for option in spec.node_requirements()
        )

    def _collect(self, node_name: str) -> None:
        if self.cluster.node(node_name) is not None:
            return
        for pod in self.cluster.pods_on_node(node_name):
            try:
                # Twice: the first marks a bound pod deleting, the second removes it (no kubelet is left).
                self.cluster.delete(pod)
                if self.cluster.pod(pod.metadata.namespace, pod.metadata.name) is not None:
                    self.cluster.delete(pod)
            except NotFoundError:
                continue
