"""The RBAC table (karpy.kube.permissions) against the code, the chart and the docs.

The code side: the real adapter (KubeCluster with its informers and event
sender, LeaderElector, the /version read of the AWS path) runs against a
small fake API server that records every request, driven through each write
the controllers make (``DRIVEN``); every request must be granted by a rule of
the table, and every verb of the table must have been used. A scan of the
controllers that ``karpy run`` wires keeps ``DRIVEN`` honest: a controller
calling a write of the Cluster protocol this test does not drive (say
``bind``) fails here until the table and this test say what it needs.

The chart side: the rules of templates/rbac.yaml, rendered for each cloud
provider by evaluating the few template constructs the file uses, equal the
table's; docs/rbac.md holds the table as the module writes it.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
import yaml
from tests.kube.test_cluster_writes import FakeTransport

from karpy.api.capacitybuffer import CapacityBuffer, CapacityBufferStatus
from karpy.api.conditions import Condition
from karpy.api.core import Node, Pod, PodSpec
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import NodeClaim, NodeClaimSpec
from karpy.api.nodeclass import EC2NodeClass, KWOKNodeClass, NodeClassStatus
from karpy.api.nodeoverlay import NodeOverlay, NodeOverlayStatus
from karpy.api.nodepool import NodeClassRef, NodePool, NodePoolStatus
from karpy.api.taints import Taint
from karpy.kube._http import HTTP_CONFLICT, HTTP_NOT_FOUND, HTTP_UNPROCESSABLE, ApiStatusError, ApiTransport
from karpy.kube._resources import (
    BUFFER_TYPES,
    CAPACITY_BUFFER,
    EC2_NODE_CLASS,
    KWOK_NODE_CLASS,
    NODE_OVERLAY,
    NODEPOOL,
    OVERLAY_TYPES,
    POD,
    SPREAD_TYPES,
    WATCHED_TYPES,
)
from karpy.kube.cluster import EVENT_DEDUPE_SECONDS, KubeCluster, parse_record
from karpy.kube.leader import DEFAULT_LEASE_NAME, LeaderElectionConfig, LeaderElector
from karpy.kube.permissions import (
    NOT_EXERCISED_ON_KWOK,
    RULES,
    ApiRequest,
    Provider,
    Scope,
    api_request,
    granting_rule,
    markdown_not_exercised,
    markdown_table,
    policy_rules,
    rules_for,
    watched_resources,
)
from karpy.operator.cluster import EVENT_NORMAL, ClusterWriter
from karpy.providers import kubernetes_version
from karpy.sim.clock import VirtualClock

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "charts" / "karpy" / "templates" / "rbac.yaml"
DOCS = REPO / "docs" / "rbac.md"
SEED = REPO / "tests" / "data" / "seed-v1"
RELEASE_NAMESPACE = "karpy-system"

# The writes of the Cluster protocol the controllers of ``karpy run`` make, and the
# kinds they make them on (see the module docstring); :func:`drive` makes each one.
DRIVEN = {
    "create": ("NodeClaim", "Node (kwok)"),
    "create_all": ("NodeClaim",),
    "update": ("NodeClaim", "Node", "NodePool", "EC2NodeClass", "KWOKNodeClass"),
    "update_status": ("NodePool", "EC2NodeClass", "KWOKNodeClass"),
    "delete": ("NodeClaim", "Node", "Pod"),
    "evict": ("Pod",),
    "record_event": ("Pod", "NodeClaim"),
}


# -- a fake API server -------------------------------------------------------------


def _copy(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value))


def _merge(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = _copy(value)


class RecordingServer(FakeTransport):
    """A fake transport (recording every request) over objects kept by path: 404 and 409, no other checks."""

    def __init__(self) -> None:
        super().__init__(self._answer)
        self.objects: dict[str, dict[str, Any]] = {}
        self.watches: list[str] = []
        self.version = 0
        self.store_lock = threading.Lock()
        self.interrupted = threading.Event()

    def seed(self, collection: str, obj: dict[str, Any]) -> dict[str, Any]:
        with self.store_lock:
            return self._store(f"{collection}/{obj['metadata']['name']}", _copy(obj))

    def _store(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        obj.setdefault("metadata", {}).update(resourceVersion=str(self.version))
        obj["metadata"].setdefault("uid", f"uid-{self.version}")
        self.objects[path] = obj
        return cast(dict[str, Any], _copy(obj))

    def _answer(self, method: str, path: str, body: object) -> dict[str, Any]:
        with self.store_lock:
            return self._answer_locked(method, path, body)

    def _answer_locked(self, method: str, path: str, body: object) -> dict[str, Any]:
        if path == "/version":
            return {"major": "1", "minor": "37"}
        request = api_request(method, path)
        sent = cast(dict[str, Any], _copy(body)) if body is not None else {}
        if request.resource.endswith(("/eviction", "/binding")):
            return {}
        if request.verb == "list":
            return {"metadata": {"resourceVersion": str(self.version)}, "items": []}
        if request.verb == "create":
            meta = sent["metadata"]
            meta.setdefault("name", f"{meta.get('generateName', '')}x{self.version}")
            target = f"{path}/{meta['name']}"
            if target in self.objects:
                raise ApiStatusError(HTTP_CONFLICT, "AlreadyExists", "already exists")
            return self._store(target, sent)
        target = path.removesuffix("/status")
        stored = self.objects.get(target)
        if stored is None:
            raise ApiStatusError(HTTP_NOT_FOUND, "NotFound", f"{path} not found")
        if request.verb == "get":
            return cast(dict[str, Any], _copy(stored))
        if request.verb == "delete":
            return self.objects.pop(target)
        if request.verb == "patch":
            merged = _copy(stored)
            _merge(merged, sent)
            return self._store(target, merged)
        assert request.verb == "update", request
        return self._store(target, sent)

    @contextmanager
    def stream_lines(
        self, path: str, params: Mapping[str, str], read_timeout: float
    ) -> Iterator[Iterator[bytes]]:
        with self.lock:
            self.watches.append(path)
        if params.get("sendInitialEvents") == "true":
            # Refused, as a server with the WatchList gate off does: the informers then list
            # too, so both of their verbs are driven.
            raise ApiStatusError(HTTP_UNPROCESSABLE, "Invalid", "sendInitialEvents is forbidden")
        self.interrupted.wait(read_timeout)
        yield iter(())

    def interrupt_streams(self) -> None:
        self.interrupted.set()

    def close(self) -> None:
        self.interrupt_streams()

    def api_requests(self) -> list[ApiRequest]:
        with self.lock:
            return [api_request(method, path) for method, path, _ in self.requests] + [
                api_request("GET", path, {"watch": "true"}) for path in self.watches
            ]


# -- driving the adapter -------------------------------------------------------------


def _seed_file(name: str) -> dict[str, Any]:
    loaded = yaml.safe_load((SEED / name).read_text())
    assert isinstance(loaded, dict)
    return loaded


def _nodeclaim(name: str) -> NodeClaim:
    return NodeClaim(
        metadata=ObjectMeta(name=name, labels={"karpenter.sh/nodepool": "default"}),
        spec=NodeClaimSpec(node_class_ref=NodeClassRef("karpenter.kwok.sh", "KWOKNodeClass", "default")),
    )


READY = Condition("Ready", "True", "Ready", "", 1000.0)


def drive(server: RecordingServer) -> None:
    """Make every request of DRIVEN's writes, the informers and the election, as ``karpy run`` does."""
    transport = cast(ApiTransport, server)
    pool = server.seed(NODEPOOL.collection_path(), _seed_file("nodepool.yaml"))
    ec2 = server.seed(EC2_NODE_CLASS.collection_path(), _seed_file("ec2nodeclass.yaml"))
    kwok = server.seed(
        KWOK_NODE_CLASS.collection_path(),
        {"apiVersion": KWOK_NODE_CLASS.api_version, "kind": "KWOKNodeClass", "metadata": {"name": "default"}},
    )
    buffer = server.seed(
        CAPACITY_BUFFER.collection_path("shop"),
        {
            "apiVersion": CAPACITY_BUFFER.api_version,
            "kind": "CapacityBuffer",
            "metadata": {"name": "warm", "namespace": "shop"},
            "spec": {"podTemplateRef": {"name": "shape"}, "replicas": 1},
        },
    )
    overlay = server.seed(
        NODE_OVERLAY.collection_path(),
        {
            "apiVersion": NODE_OVERLAY.api_version,
            "kind": "NodeOverlay",
            "metadata": {"name": "savings-plan"},
            "spec": {"requirements": [], "priceAdjustment": "-20%"},
        },
    )
    # With the CapacityBuffer and NodeOverlay feature gates and default spread constraints
    # (SCHEDULER_CONFIG), as karpy run watches with them: each kind once.
    kinds = tuple(dict.fromkeys((*WATCHED_TYPES, *BUFFER_TYPES, *OVERLAY_TYPES, *SPREAD_TYPES)))
    clock = VirtualClock()
    cluster = KubeCluster(transport, kinds=kinds, clock=clock)
    cluster.start()
    assert cluster.wait_for_sync(10)
    # Informers watch after their list: wait for every watch to open.
    while len(set(server.watches)) < len(kinds):
        threading.Event().wait(0.01)

    # Provisioning (a batch, created together), disruption's replacements and the kwok provider.
    batch = cluster.create_all([_nodeclaim("default-b1"), _nodeclaim("default-b2")])
    assert all(isinstance(created, NodeClaim) for created in batch), batch
    claim = cluster.create(_nodeclaim("default-abc"))
    node = cluster.create(
        Node(
            metadata=ObjectMeta(name="node-abc"),
            provider_id="kwok://default-abc",
            capacity={"cpu": 2000},
            allocatable={"cpu": 1900},
        )
    )
    # The lifecycle: labels, then status; a second adapter with an empty cache reads first.
    cold = KubeCluster(transport, kinds=kinds)
    claim = cold.update(claim.with_metadata(labels={**claim.metadata.labels, "registered": "true"}))
    cold.update(claim.with_status(conditions=(READY,)))
    cold.update(node.with_changes(taints=(Taint("karpenter.sh/disrupted", "NoSchedule"),)))
    # The kwok provider's reboot: a new boot ID, in the Node's status.
    cold.update(node.with_changes(boot_id="kwok-reboot-1"))
    # Status of the NodePool and the node classes (the nodepool and EC2NodeClass status controllers).
    for resource, raw in ((NODEPOOL, pool), (EC2_NODE_CLASS, ec2), (KWOK_NODE_CLASS, kwok)):
        record = parse_record(resource, {"apiVersion": resource.api_version, "kind": resource.kind, **raw})
        status = (
            NodePoolStatus(conditions=(READY,))
            if resource is NODEPOOL
            else NodeClassStatus(conditions=(READY,))
        )
        written = cold.update_status(dataclasses.replace(record, status=status))  # type: ignore[type-var]
        # The hash annotations (nodepool.hash, nodeclass.hash).
        if isinstance(written, NodePool | EC2NodeClass | KWOKNodeClass):
            annotated = written.metadata.with_changes(annotations={"hash": "1"})
            cold.update(dataclasses.replace(written, metadata=annotated))
    # A CapacityBuffer's status (the capacitybuffer controller, provisioning).
    warm = parse_record(CAPACITY_BUFFER, buffer)
    assert isinstance(warm, CapacityBuffer)
    cold.update_status(warm.with_status(CapacityBufferStatus(conditions=(READY,), replicas=1)))
    # A NodeOverlay's status (the nodeoverlay controller).
    priced = parse_record(NODE_OVERLAY, overlay)
    assert isinstance(priced, NodeOverlay)
    cold.update_status(priced.with_status(NodeOverlayStatus(conditions=(READY,))))
    # Events, once and repeated past the dedupe window, about a pod (its namespace) and a
    # NodeClaim (default).
    pod = Pod(metadata=ObjectMeta(name="web-1", namespace="shop", uid="u1"), spec=PodSpec())
    for _ in range(2):
        cluster.record_event(pod, EVENT_NORMAL, "Nominated", "Pod should schedule on default-abc")
        cluster.record_event(claim, EVENT_NORMAL, "Launched", "Status condition transitioned")
        assert cluster.flush_events(10)
        clock.advance(EVENT_DEDUPE_SECONDS)
    # Termination: drain, delete the Node and the NodeClaim.
    cluster.evict(pod)
    server.seed(POD.collection_path("shop"), {"metadata": {"name": "web-1", "namespace": "shop"}})
    cluster.delete(pod)
    cluster.delete(node)
    cluster.delete(claim)
    cluster.close()

    # The election: create, renew, release.
    elector = LeaderElector(server, LeaderElectionConfig(namespace=RELEASE_NAMESPACE))
    assert elector.tick() is not None and elector.is_leader()
    elector.tick()
    assert elector.release()
    # The AWS path, without a configured Kubernetes version.
    assert kubernetes_version(transport) == "1.37"


@pytest.fixture(scope="module")
def driven() -> list[ApiRequest]:
    server = RecordingServer()
    drive(server)
    return server.api_requests()


def test_every_request_the_adapter_makes_is_granted(driven: list[ApiRequest]) -> None:
    kwok, aws = rules_for(Provider.KWOK), rules_for(Provider.AWS)
    refused = {
        request
        for request in driven
        if granting_rule(kwok, request, RELEASE_NAMESPACE) is None
        and granting_rule(aws, request, RELEASE_NAMESPACE) is None
    }
    assert not refused
    # Each provider's own: a kwok install registers Nodes, an AWS one reads /version.
    node_create = ApiRequest("create", "", "nodes")
    version = ApiRequest("get", "", "/version")
    assert node_create in driven and version in driven
    assert granting_rule(kwok, node_create, RELEASE_NAMESPACE) is not None
    assert granting_rule(aws, node_create, RELEASE_NAMESPACE) is None
    assert granting_rule(aws, version, RELEASE_NAMESPACE) is not None
    assert granting_rule(kwok, version, RELEASE_NAMESPACE) is None


def test_every_verb_of_the_table_is_used(driven: list[ApiRequest]) -> None:
    used = {
        (rule, request.verb)
        for request in driven
        for rule in [granting_rule(RULES, request, RELEASE_NAMESPACE)]
        if rule is not None
    }
    unused = [(rule.resource, verb) for rule in RULES for verb in rule.verbs if (rule, verb) not in used]
    assert not unused


def test_the_lease_is_written_only_in_the_release_namespace_and_under_its_name(
    driven: list[ApiRequest],
) -> None:
    leases = [request for request in driven if request.resource == "leases"]
    assert {request.verb for request in leases} == {"get", "create", "update"}
    assert {request.namespace for request in leases} == {RELEASE_NAMESPACE}
    elsewhere = ApiRequest("update", "coordination.k8s.io", "leases", "kube-system", DEFAULT_LEASE_NAME)
    other_name = ApiRequest("get", "coordination.k8s.io", "leases", RELEASE_NAMESPACE, "someone-elses")
    assert granting_rule(RULES, elsewhere, RELEASE_NAMESPACE) is None
    assert granting_rule(RULES, other_name, RELEASE_NAMESPACE) is None


def test_events_go_to_the_objects_namespace_and_default_so_the_rule_is_cluster_wide(
    driven: list[ApiRequest],
) -> None:
    events = {(request.verb, request.namespace) for request in driven if request.resource == "events"}
    assert events == {("create", "shop"), ("create", "default"), ("patch", "shop"), ("patch", "default")}
    rule = granting_rule(RULES, ApiRequest("create", "", "events", "shop"), RELEASE_NAMESPACE)
    assert rule is not None and rule.scope is Scope.CLUSTER


def test_every_watched_kind_may_be_listed_and_watched_everywhere() -> None:
    for group, plural in watched_resources():
        for verb in ("list", "watch"):
            rule = granting_rule(RULES, ApiRequest(verb, group, plural), RELEASE_NAMESPACE)
            assert rule is not None and rule.provider is Provider.ALL and rule.scope is Scope.CLUSTER, (
                group,
                plural,
                verb,
            )


def test_nothing_broad_is_granted() -> None:
    for rule in RULES:
        assert "*" not in rule.verbs and "*" not in rule.resource and rule.group != "*"
        assert rule.resource not in ("secrets", "configmaps", "serviceaccounts/token")
        assert not rule.group.startswith("rbac.authorization.k8s.io")
        assert not {"escalate", "bind", "impersonate", "deletecollection"} & set(rule.verbs)
        assert rule.scope is Scope.CLUSTER or rule.resource == "leases"
    pods_create = ApiRequest("create", "", "pods", "default")
    assert granting_rule(RULES, pods_create, RELEASE_NAMESPACE) is None
    assert granting_rule(RULES, ApiRequest("create", "", "pods/binding", "default", "x"), "") is None


def test_not_exercised_entries_are_verbs_of_the_kwok_table() -> None:
    granted = {(rule.group, rule.resource, verb) for rule in rules_for(Provider.KWOK) for verb in rule.verbs}
    assert set(NOT_EXERCISED_ON_KWOK) <= granted


@pytest.mark.parametrize(
    ("method", "path", "params", "expected"),
    [
        ("GET", "/api/v1/pods", {"limit": "500"}, ApiRequest("list", "", "pods")),
        ("GET", "/api/v1/namespaces", {"watch": "true"}, ApiRequest("watch", "", "namespaces")),
        ("GET", "/api/v1/namespaces/shop", {}, ApiRequest("get", "", "namespaces", "", "shop")),
        (
            "POST",
            "/api/v1/namespaces/shop/pods/web-1/eviction",
            {},
            ApiRequest("create", "", "pods/eviction", "shop", "web-1"),
        ),
        (
            "PUT",
            "/apis/karpenter.sh/v1/nodeclaims/a/status",
            {},
            ApiRequest("update", "karpenter.sh", "nodeclaims/status", "", "a"),
        ),
        (
            "POST",
            "/apis/coordination.k8s.io/v1/namespaces/k/leases",
            {},
            ApiRequest("create", "coordination.k8s.io", "leases", "k"),
        ),
        ("DELETE", "/api/v1/nodes", {}, ApiRequest("deletecollection", "", "nodes")),
        ("GET", "/version", {}, ApiRequest("get", "", "/version")),
    ],
)
def test_requests_read_as_the_api_server_reads_them(
    method: str, path: str, params: dict[str, str], expected: ApiRequest
) -> None:
    assert api_request(method, path, params) == expected


# -- what the controllers call -------------------------------------------------------

# Modules ``karpy run`` runs: the controllers and the cloud providers (not the simulator,
# nor the fake kubelet, a test stand-in with a client of its own).
RUN_SOURCES = [
    path
    for path in sorted((REPO / "src" / "karpy").glob("**/*.py"))
    if (path.parts[-2] in ("controllers", "cloud", "kwok", "aws") or path.name == "run.py")
    and path.name != "fake_kubelet.py"
]
WRITES = {name for name in vars(ClusterWriter) if not name.startswith("_")}


def cluster_writes(source: str) -> set[str]:
    """The Cluster writes a module calls: ``<...>cluster.<write>(...)``."""
    called: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in WRITES:
            owner = node.func.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if name == "cluster":
                called.add(node.func.attr)
    return called


def test_the_controllers_make_only_the_writes_driven_here() -> None:
    assert {"create", "update", "update_status", "delete", "bind", "evict", "record_event"} <= WRITES
    called = {write for path in RUN_SOURCES for write in cluster_writes(path.read_text())}
    assert called == set(DRIVEN), "a new kind of write: add its rule to karpy.kube.permissions and drive it"
    # The scan sees a call it must see.
    assert cluster_writes("self.cluster.bind(pod, 'n')\ncluster.evict(p)") == {"bind", "evict"}


# -- the chart and the docs ----------------------------------------------------------

_PLACEHOLDERS = {
    '{{ include "karpy.fullname" . }}': "karpy",
    '{{ include "karpy.serviceAccountName" . }}': "karpy",
    "{{ .Release.Namespace }}": RELEASE_NAMESPACE,
}
_IF_PROVIDER = re.compile(r'^\s*\{\{- if eq \.Values\.settings\.cloudProvider "(\w+)" \}\}$')


def render(provider: str) -> list[dict[str, Any]]:
    """templates/rbac.yaml with rbac.create true and ``provider``: only the constructs the file uses."""
    text = re.sub(r"\{\{- /\*.*?\*/\}\}\n", "", TEMPLATE.read_text(), flags=re.DOTALL)
    kept: list[str] = []
    shown: list[bool] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped == "{{- if .Values.rbac.create }}":
            shown.append(True)
        elif match := _IF_PROVIDER.match(line):
            shown.append(match.group(1) == provider)
        elif stripped == "{{- with .Values.additionalClusterRoleRules }}":
            shown.append(False)  # empty by default: the operator's rules, not karpy's
        elif stripped == "{{- end }}":
            shown.pop()
        elif stripped == '{{- include "karpy.labels" . | nindent 4 }}':
            kept.append(line.replace(stripped, "app.kubernetes.io/name: karpy") if all(shown) else "")
        elif all(shown):
            rendered = line
            for placeholder, value in _PLACEHOLDERS.items():
                rendered = rendered.replace(placeholder, value)
            assert "{{" not in rendered, f"a template construct this test does not evaluate: {line}"
            kept.append(rendered)
    assert not shown
    return [doc for doc in yaml.safe_load_all("\n".join(kept)) if doc]


@pytest.mark.parametrize("provider", [Provider.KWOK, Provider.AWS])
def test_the_charts_rules_are_the_table(provider: Provider) -> None:
    objects = {obj["kind"]: obj for obj in render(provider)}
    assert set(objects) == {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    assert objects["ClusterRole"]["rules"] == policy_rules(provider, Scope.CLUSTER)
    assert objects["Role"]["rules"] == policy_rules(provider, Scope.NAMESPACE)
    assert objects["Role"]["metadata"]["namespace"] == RELEASE_NAMESPACE
    for binding in ("ClusterRoleBinding", "RoleBinding"):
        subject = objects[binding]["subjects"]
        assert subject == [{"kind": "ServiceAccount", "name": "karpy", "namespace": RELEASE_NAMESPACE}]
    assert objects["ClusterRoleBinding"]["roleRef"]["kind"] == "ClusterRole"
    assert objects["RoleBinding"]["roleRef"]["kind"] == "Role"


def test_the_docs_hold_the_table() -> None:
    docs = DOCS.read_text()
    assert markdown_table() in docs, "docs/rbac.md: paste karpy.kube.permissions.markdown_table()"
    assert markdown_not_exercised() in docs, "docs/rbac.md: paste markdown_not_exercised()"
