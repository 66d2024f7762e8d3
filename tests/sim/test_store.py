"""The in-memory cluster behaves like an apiserver where controllers can tell."""

from __future__ import annotations

import pytest
from tests.support import make_pod, parse_object

from karpy.api.core import Pod
from karpy.api.meta import ObjectMeta
from karpy.operator.cluster import (
    AlreadyExistsError,
    ConflictError,
    EvictionRefusedError,
    NotFoundError,
)
from karpy.sim.clock import VirtualClock
from karpy.sim.store import InMemoryCluster


def cluster() -> InMemoryCluster:
    return InMemoryCluster(VirtualClock())


def test_an_update_with_a_stale_resource_version_conflicts() -> None:
    store = cluster()
    stored = store.create(make_pod("p"))
    store.update(stored.with_changes(phase="Running"))
    with pytest.raises(ConflictError):
        store.update(stored.with_changes(phase="Failed"))


def test_create_twice_is_refused_and_generate_name_is_unique() -> None:
    store = cluster()
    store.create(make_pod("p"))
    with pytest.raises(AlreadyExistsError):
        store.create(make_pod("p"))
    template = make_pod("x")
    generated = template.with_changes(metadata=ObjectMeta(name="", generate_name="web-", namespace="default"))
    names = {store.create(generated).metadata.name for _ in range(50)}
    assert len(names) == 50 and all(name.startswith("web-") for name in names)


def test_finalizers_hold_an_object_until_they_are_removed() -> None:
    store = cluster()
    pod = make_pod("p")
    stored = store.create(
        pod.with_changes(metadata=pod.metadata.with_changes(finalizers=("example.com/hold",)))
    )
    store.delete(stored)
    held = store.pod("default", "p")
    assert held is not None and held.metadata.deleting
    store.update(held.with_changes(metadata=held.metadata.with_changes(finalizers=())))
    assert store.pod("default", "p") is None


def test_deleting_an_owner_deletes_its_dependents() -> None:
    store = cluster()
    deployment = store.create(
        parse_object(
            """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  selector: {matchLabels: {app: web}}
  template: {metadata: {labels: {app: web}}, spec: {containers: [{name: c}]}}
"""
        )
    )
    pod = make_pod("web-1")
    owner = parse_object(
        f"""
apiVersion: v1
kind: Pod
metadata:
  name: web-1
  namespace: default
  ownerReferences:
    - {{apiVersion: apps/v1, kind: Deployment, name: web, uid: {deployment.metadata.uid}, controller: true}}
spec: {{containers: [{{name: c}}]}}
"""
    )
    assert isinstance(owner, Pod)
    store.create(owner)
    store.create(make_pod("unrelated"))
    store.delete(deployment)
    assert store.pod("default", pod.metadata.name) is None
    assert store.pod("default", "unrelated") is not None


def test_dependents_go_in_the_order_they_were_stored_and_a_recreated_one_goes_last() -> None:
    store = cluster()
    owner = store.create(make_pod("owner"))
    reference = f"[{{apiVersion: v1, kind: Pod, name: owner, uid: {owner.metadata.uid}}}]"

    def dependent(name: str) -> Pod:
        pod = parse_object(
            f"""
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default, ownerReferences: {reference}}}
spec: {{containers: [{{name: c}}]}}
"""
        )
        assert isinstance(pod, Pod)
        return pod

    for name in ("c", "a", "b"):
        store.create(dependent(name))
    # Updating keeps a dependent's place; deleting and creating it again moves it last.
    stored_c = store.pod("default", "c")
    assert stored_c is not None
    store.update(stored_c.with_changes(phase="Running"))
    store.delete(store.pod("default", "a"))
    store.create(dependent("a"))
    removed: list[str] = []
    store.subscribe(lambda kind, old, new: removed.append(old.metadata.name) if new is None else None)  # type: ignore[union-attr]
    store.delete(owner)
    assert removed == ["owner", "c", "b", "a"]


def test_eviction_honours_pod_disruption_budgets() -> None:
    store = cluster()
    labels = "{app: web}"
    for name in ("a", "b"):
        created = store.create(make_pod(name, labels=labels))
        store.bind(created, "node-1")
        bound = store.pod("default", name)
        assert bound is not None
        store.update(bound.with_changes(phase="Running"))
    store.create(
        parse_object(
            """
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: default}
spec: {maxUnavailable: 1, selector: {matchLabels: {app: web}}}
"""
        )
    )
    first = store.pod("default", "a")
    assert first is not None
    store.evict(first)
    second = store.pod("default", "b")
    assert second is not None
    with pytest.raises(EvictionRefusedError):
        store.evict(second)


def test_a_bound_pod_is_deleted_gracefully() -> None:
    store = cluster()
    stored = store.create(make_pod("p"))
    store.bind(stored, "node-1")
    bound = store.pod("default", "p")
    assert bound is not None
    store.delete(bound)
    marked = store.pod("default", "p")
    assert marked is not None and marked.metadata.deleting
    store.delete(marked)
    assert store.pod("default", "p") is None
    with pytest.raises(NotFoundError):
        store.delete(marked)


def test_indexes_follow_binding_and_removal() -> None:
    store = cluster()
    stored = store.create(make_pod("p"))
    assert [pod.metadata.name for pod in store.pending_pods()] == ["p"]
    store.bind(stored, "node-1")
    assert store.pending_pods() == []
    assert [pod.metadata.name for pod in store.pods_on_node("node-1")] == ["p"]
    with pytest.raises(ConflictError):
        store.bind(stored, "node-2")


def test_subscribers_see_old_and_new() -> None:
    store = cluster()
    seen: list[tuple[str, bool, bool]] = []
    store.subscribe(lambda kind, old, new: seen.append((kind, old is None, new is None)))
    stored = store.create(make_pod("p"))
    store.delete(stored)
    assert seen == [("Pod", True, False), ("Pod", False, True)]
