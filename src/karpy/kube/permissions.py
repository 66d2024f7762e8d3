"""What ``karpy run`` may do on the API server: the table its RBAC is made from.

Every request karpy makes is one of a few shapes (see :mod:`karpy.kube.cluster`,
:mod:`karpy.kube._informer`, :mod:`karpy.kube.leader` and :func:`karpy.run.kubernetes_version`):

- the informers list and watch every kind in ``_resources.WATCHED_TYPES``,
  across all namespaces, and with the CapacityBuffer feature gate those of
  ``_resources.BUFFER_TYPES`` (CapacityBuffers, PodTemplates, Deployments,
  StatefulSets, ReplicaSets), whose ``status`` karpy writes for CapacityBuffers,
  and with the NodeOverlay feature gate NodeOverlays, whose ``status`` it writes too;
- the controllers create, update (PUT) and delete NodeClaims and write their
  ``status`` subresource; patch Nodes (taints, labels, the termination
  finalizer) and delete them once their instance is gone; evict pods
  (``pods/eviction``) and, past a NodeClaim's terminationGracePeriod, delete
  them; write the ``status`` of NodePools and node classes; a write whose
  object is not in the cache reads it first (``get``);
- the kwok provider creates the Node objects of its instances (with AWS the
  kubelet registers them, so that verb is kwok's alone);
- Events go to the namespace of the object they are about, and to
  ``default`` for cluster-scoped objects (NodeClaims, Nodes, NodePools), as
  Karpenter's do: pods live in every namespace, so creating and patching
  Events is granted cluster-wide, the same as Karpenter's ClusterRole;
- the leader election Lease is read and written in the namespace karpy runs
  in, under its one name; creating it cannot be narrowed to that name
  (Kubernetes authorizes a create before the object has a name), so
  ``create`` is a rule of its own without ``resourceNames``;
- with AWS, and no Kubernetes version configured, ``GET /version`` (a
  non-resource URL every authenticated user may read through the default
  ``system:public-info-viewer`` binding; granted here too so that the role
  does not depend on that binding).

Nothing else: no ``*``, no Secrets or ConfigMaps, no pod creation, no RBAC
objects. Each :class:`Rule` names the code path that needs it, and the
tests hold the table to the code from both sides: tests/kube/test_permissions.py
drives the real adapter through a recording transport and requires a rule for
every request, and the integration test runs karpy as the chart's
ServiceAccount and reads the API server's audit log, requiring no refusal and
that every rule it never exercised is in :data:`NOT_EXERCISED_ON_KWOK`.
The chart's ``templates/rbac.yaml`` and docs/rbac.md are checked against this
table, so the three cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from karpy.kube._resources import BUFFER_TYPES, OVERLAY_TYPES, SPREAD_TYPES, WATCHED_TYPES
from karpy.kube.leader import DEFAULT_LEASE_NAME


class Scope(StrEnum):
    CLUSTER = "cluster"  # the ClusterRole: every namespace, and cluster-scoped kinds
    NAMESPACE = "namespace"  # the Role in the namespace karpy is installed in


class Provider(StrEnum):
    """Which ``--cloud-provider`` needs a rule."""

    ALL = "all"
    KWOK = "kwok"
    AWS = "aws"


@dataclass(frozen=True, slots=True)
class Rule:
    """One RBAC rule; ``resource`` is ``plural``, ``plural/subresource`` or a non-resource URL (``/...``)."""

    group: str
    resource: str
    verbs: tuple[str, ...]
    scope: Scope
    provider: Provider
    why: str
    resource_names: tuple[str, ...] = ()

    @property
    def non_resource(self) -> bool:
        return self.resource.startswith("/")

    def applies_to(self, provider: str) -> bool:
        return self.provider in (Provider.ALL, provider)

    def policy_rule(self) -> dict[str, Any]:
        """The rule as an RBAC PolicyRule (what the chart's template holds)."""
        if self.non_resource:
            return {"nonResourceURLs": [self.resource], "verbs": list(self.verbs)}
        rule: dict[str, Any] = {"apiGroups": [self.group], "resources": [self.resource]}
        if self.resource_names:
            rule["resourceNames"] = list(self.resource_names)
        rule["verbs"] = list(self.verbs)
        return rule


LIST_WATCH = ("list", "watch")
INFORMER = "the informers list and watch them (_informer.py)"

_WATCHED_ONLY = {
    ("apps", "daemonsets"): "DaemonSet pods count on every new node (provisioning)",
    ("policy", "poddisruptionbudgets"): "disruption and drains respect them",
    ("", "persistentvolumeclaims"): "a pending pod's claims lead to the volumes it needs",
    ("", "persistentvolumes"): "a bound volume's node affinity constrains where its pods go, its CSI"
    " driver counts against a node's attach limit",
    ("storage.k8s.io", "storageclasses"): "an unbound claim's volume counts under its class's"
    " provisioner against a node's attach limit",
    ("storage.k8s.io", "csinodes"): "a node's attach limit per CSI driver (volume attach limits)",
    ("", "namespaces"): "pod affinity's namespaceSelector selects namespaces by label",
    ("", "limitranges"): "a new node's DaemonSet pods are sized with their LimitRange defaults",
    ("node.k8s.io", "runtimeclasses"): "a new node's DaemonSet pods are sized with their RuntimeClass"
    " overhead",
    ("", "podtemplates"): "a CapacityBuffer's podTemplateRef names one (CapacityBuffer gate)",
    ("apps", "deployments"): "a CapacityBuffer's scalableRef may name one (CapacityBuffer gate)",
    ("apps", "statefulsets"): "a CapacityBuffer's scalableRef may name one (CapacityBuffer gate); a"
    " pod's owner selects its default topology spread (SCHEDULER_CONFIG)",
    ("apps", "replicasets"): "a CapacityBuffer's scalableRef may name one (CapacityBuffer gate); a"
    " pod's owner selects its default topology spread (SCHEDULER_CONFIG)",
    ("", "services"): "the Services selecting a pod select its default topology spread (SCHEDULER_CONFIG)",
    ("", "replicationcontrollers"): "a pod's owner selects its default topology spread (SCHEDULER_CONFIG)",
}
BUFFER_GATE = "only with the CapacityBuffer feature gate on, which the walkthrough leaves off"
SPREAD_SETTING = "only with SCHEDULER_CONFIG's default constraints, which the walkthrough leaves unset"
BUFFER_OR_SPREAD = (
    "only with the CapacityBuffer feature gate on or SCHEDULER_CONFIG's default constraints,"
    " which the walkthrough leaves off"
)
OVERLAY_GATE = "only with the NodeOverlay feature gate on, which the walkthrough leaves off"
STREAMED = (
    "only where the API server refuses a streaming watch (WatchList) or ends it without its"
    " initial-events bookmark, and after a 410 Gone"
)

RULES: tuple[Rule, ...] = (
    Rule(
        "",
        "pods",
        ("list", "watch", "delete"),
        Scope.CLUSTER,
        Provider.ALL,
        f"{INFORMER}; a drain deletes a pod past its NodeClaim's terminationGracePeriod (termination)",
    ),
    Rule(
        "",
        "pods/eviction",
        ("create",),
        Scope.CLUSTER,
        Provider.ALL,
        "a drain evicts pods through the Eviction API, honouring PodDisruptionBudgets (termination)",
    ),
    Rule(
        "",
        "nodes",
        ("list", "watch", "get", "patch", "delete"),
        Scope.CLUSTER,
        Provider.ALL,
        f"{INFORMER}; merge patches of taints, labels and karpy's finalizer, read first when not cached;"
        " a Node is deleted once its instance is terminated (nodeclaim, disruption, termination)",
    ),
    Rule(
        "",
        "nodes",
        ("create",),
        Scope.CLUSTER,
        Provider.KWOK,
        "the kwok provider registers the Node of each instance itself (cloud/kwok/provider.py)",
    ),
    Rule(
        "",
        "nodes/status",
        ("patch",),
        Scope.CLUSTER,
        Provider.KWOK,
        "the kwok provider reboots a Node in place by giving it a new boot ID, as Karpenter's kwok"
        " provider does (node repair's RebootNode)",
    ),
    Rule(
        "karpenter.sh",
        "nodeclaims",
        ("list", "watch", "get", "create", "update", "delete"),
        Scope.CLUSTER,
        Provider.ALL,
        f"{INFORMER}; provisioning and disruption create them, the lifecycle updates labels and"
        " finalizers (PUT), and so does capacityreservation.capacitytype when a reservation ends;"
        " disruption, failed launches or registrations, interruption, an expiring"
        " Capacity Block (capacityreservation.expiration) and garbage collection delete them",
    ),
    Rule(
        "karpenter.sh",
        "nodeclaims/status",
        ("update",),
        Scope.CLUSTER,
        Provider.ALL,
        "launch, registration, initialization and disruption conditions (PUT of the status subresource)",
    ),
    Rule(
        "karpenter.sh",
        "nodepools",
        ("list", "watch", "get", "patch"),
        Scope.CLUSTER,
        Provider.ALL,
        f"{INFORMER}; read before a status write when not cached; the nodepool-hash annotations"
        " (nodepool.hash)",
    ),
    Rule(
        "karpenter.sh",
        "nodepools/status",
        ("update",),
        Scope.CLUSTER,
        Provider.ALL,
        "resources, node count and the Ready conditions (nodepool status controller)",
    ),
    Rule(
        "karpenter.k8s.aws",
        "ec2nodeclasses",
        ("list", "watch", "get", "patch"),
        Scope.CLUSTER,
        Provider.ALL,
        f"{INFORMER}, whatever the provider (a NodePool may name either class); read before a status"
        " write when not cached; the hash annotations (nodeclass.hash, a metadata merge patch)",
    ),
    Rule(
        "karpenter.k8s.aws",
        "ec2nodeclasses/status",
        ("update",),
        Scope.CLUSTER,
        Provider.ALL,
        "the class's Ready condition (nodepool status controller; with AWS also subnets, security"
        " groups, AMIs and instance profile)",
    ),
    Rule(
        "karpenter.kwok.sh",
        "kwoknodeclasses",
        ("list", "watch", "get", "patch"),
        Scope.CLUSTER,
        Provider.ALL,
        f"{INFORMER}; read before a status write when not cached; the hash annotations (nodeclass.hash,"
        " a metadata merge patch)",
    ),
    Rule(
        "karpenter.kwok.sh",
        "kwoknodeclasses/status",
        ("update",),
        Scope.CLUSTER,
        Provider.ALL,
        "the class's Ready condition (nodepool status controller)",
    ),
    Rule(
        "autoscaling.x-k8s.io",
        "capacitybuffers",
        ("list", "watch", "get"),
        Scope.CLUSTER,
        Provider.ALL,
        f"{INFORMER} (CapacityBuffer gate); read before a status write when not cached",
    ),
    Rule(
        "autoscaling.x-k8s.io",
        "capacitybuffers/status",
        ("update",),
        Scope.CLUSTER,
        Provider.ALL,
        "replicas, the resolved template and the ReadyForProvisioning and Provisioning conditions"
        " (capacitybuffer controller, provisioning)",
    ),
    Rule(
        "karpenter.sh",
        "nodeoverlays",
        ("list", "watch", "get"),
        Scope.CLUSTER,
        Provider.ALL,
        f"{INFORMER} (NodeOverlay gate); read before a status write when not cached",
    ),
    Rule(
        "karpenter.sh",
        "nodeoverlays/status",
        ("update",),
        Scope.CLUSTER,
        Provider.ALL,
        "the ValidationSucceeded and Ready conditions (nodeoverlay controller)",
    ),
    *(
        Rule(group, plural, LIST_WATCH, Scope.CLUSTER, Provider.ALL, f"{INFORMER}: {why}")
        for (group, plural), why in _WATCHED_ONLY.items()
    ),
    Rule(
        "",
        "events",
        ("create", "patch"),
        Scope.CLUSTER,
        Provider.ALL,
        "Events in the namespace of the pod they are about, and in default for cluster-scoped"
        " objects; a repeat patches the count (cluster.py)",
    ),
    Rule(
        "",
        "/version",
        ("get",),
        Scope.CLUSTER,
        Provider.AWS,
        "the Kubernetes version picks the EKS AMI alias when none is configured (providers.py)",
    ),
    Rule(
        "coordination.k8s.io",
        "leases",
        ("create",),
        Scope.NAMESPACE,
        Provider.ALL,
        "the first replica creates the leader election Lease (leader.py); a create cannot be"
        " restricted to a name",
    ),
    Rule(
        "coordination.k8s.io",
        "leases",
        ("get", "update"),
        Scope.NAMESPACE,
        Provider.ALL,
        "replicas read the Lease, the leader renews and releases it (leader.py)",
        resource_names=(DEFAULT_LEASE_NAME,),
    ),
)

#: (group, resource, verb) of the rules a kwok run of the seed walkthrough and a drift
#: replacement does not exercise (or only by chance), and why: the integration test requires every
#: verb it did not use to be one of these.
NOT_EXERCISED_ON_KWOK: Mapping[tuple[str, str, str], str] = {
    # The informers take their initial objects from a streaming watch (karpy.kube._informer).
    **{(resource.group, resource.plural, "list"): STREAMED for resource in WATCHED_TYPES},
    ("", "pods", "delete"): "only past a terminationGracePeriod, which the walkthrough does not set",
    ("", "events", "patch"): "only for a repeat of an Event karpy recorded, which these runs do not cause",
    ("", "nodes", "get"): "only when a patched Node is not in the cache yet",
    (
        "",
        "nodes/status",
        "patch",
    ): "only when node repair reboots a kwok node (the NodeRepair gate, off in these runs)",
    ("karpenter.sh", "nodeclaims", "get"): "only when an updated NodeClaim is not in the cache yet",
    ("karpenter.sh", "nodepools", "get"): "only when a NodePool is not in the cache yet",
    ("karpenter.k8s.aws", "ec2nodeclasses", "get"): "only when a class is not in the cache yet",
    ("karpenter.k8s.aws", "ec2nodeclasses/status", "update"): "no EC2NodeClass in a kwok walkthrough",
    ("karpenter.k8s.aws", "ec2nodeclasses", "patch"): "no EC2NodeClass in a kwok walkthrough",
    ("karpenter.kwok.sh", "kwoknodeclasses", "get"): "only when a class is not in the cache yet",
    **{
        (group, plural, verb): BUFFER_GATE
        for group, plural, verbs in (
            ("autoscaling.x-k8s.io", "capacitybuffers", ("list", "watch", "get")),
            ("autoscaling.x-k8s.io", "capacitybuffers/status", ("update",)),
            ("", "podtemplates", LIST_WATCH),
            ("apps", "deployments", LIST_WATCH),
        )
        for verb in verbs
    },
    **{
        (group, plural, verb): BUFFER_OR_SPREAD
        for group, plural in (("apps", "statefulsets"), ("apps", "replicasets"))
        for verb in LIST_WATCH
    },
    **{
        (group, plural, verb): SPREAD_SETTING
        for group, plural in (("", "services"), ("", "replicationcontrollers"))
        for verb in LIST_WATCH
    },
    **{
        (group, plural, verb): OVERLAY_GATE
        for group, plural, verbs in (
            ("karpenter.sh", "nodeoverlays", ("list", "watch", "get")),
            ("karpenter.sh", "nodeoverlays/status", ("update",)),
        )
        for verb in verbs
    },
}


def rules_for(provider: str, scope: Scope | None = None) -> tuple[Rule, ...]:
    """The rules a ``provider`` installation needs (of one ``scope``, or all)."""
    return tuple(rule for rule in RULES if rule.applies_to(provider) and scope in (None, rule.scope))


def policy_rules(provider: str, scope: Scope) -> list[dict[str, Any]]:
    """The PolicyRules of the ClusterRole (``Scope.CLUSTER``) or the Role of a ``provider`` install."""
    return [rule.policy_rule() for rule in rules_for(provider, scope)]


@dataclass(frozen=True, slots=True)
class ApiRequest:
    """A request as RBAC authorizes it (the attributes an audit event's objectRef carries)."""

    verb: str
    group: str
    resource: str  # with its subresource: "pods/eviction"
    namespace: str = ""
    name: str = ""


_VERB_OF_METHOD = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def api_request(method: str, path: str, params: Mapping[str, str] | None = None) -> ApiRequest:
    """The RBAC attributes of an HTTP request, as the API server's request-info resolver reads them."""
    parts = [part for part in path.split("?", maxsplit=1)[0].split("/") if part]
    if parts[:1] == ["api"] and len(parts) >= 2:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:  # a non-resource URL
        return ApiRequest(method.lower(), "", path)
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest:
        raise ValueError(f"no resource in {path}")
    resource, name, subresource = rest[0], rest[1] if len(rest) > 1 else "", "/".join(rest[2:])
    if method == "GET":
        verb = ("watch" if (params or {}).get("watch") == "true" else "list") if not name else "get"
    else:
        verb = _VERB_OF_METHOD[method]
        if verb == "delete" and not name:
            verb = "deletecollection"
    return ApiRequest(verb, group, f"{resource}/{subresource}" if subresource else resource, namespace, name)


def granting_rule(rules: Iterable[Rule], request: ApiRequest, namespace: str) -> Rule | None:
    """The first of ``rules`` that allows ``request``, for karpy installed in ``namespace``."""
    for rule in rules:
        if request.verb not in rule.verbs or rule.resource != request.resource:
            continue
        if not rule.non_resource and rule.group != request.group:
            continue
        if rule.scope is Scope.NAMESPACE and request.namespace != namespace:
            continue
        if rule.resource_names and request.name not in rule.resource_names:
            continue
        return rule
    return None


def watched_resources() -> set[tuple[str, str]]:
    """(group, plural) of every kind the informers list and watch (the gated kinds' too)."""
    return {
        (resource.group, resource.plural)
        for resource in (*WATCHED_TYPES, *BUFFER_TYPES, *OVERLAY_TYPES, *SPREAD_TYPES)
    }


DOCS_TABLE_HEADER = (
    "| API group | resource | verbs | scope | provider | why |\n| --- | --- | --- | --- | --- | --- |"
)


def markdown_table() -> str:
    """The table of docs/rbac.md."""
    lines = [DOCS_TABLE_HEADER]
    for rule in RULES:
        group = "(non-resource URL)" if rule.non_resource else (f"`{rule.group}`" if rule.group else "core")
        resource = f"`{rule.resource}`"
        if rule.resource_names:
            resource += " named " + ", ".join(f"`{name}`" for name in rule.resource_names)
        scope = "cluster" if rule.scope is Scope.CLUSTER else "release namespace"
        verbs = ", ".join(rule.verbs)
        lines.append(f"| {group} | {resource} | {verbs} | {scope} | {rule.provider} | {rule.why} |")
    return "\n".join(lines)


def markdown_not_exercised() -> str:
    """The list of docs/rbac.md of what a kwok walkthrough does not exercise."""
    return "\n".join(
        f"- `{verb}` `{resource}`{f' (`{group}`)' if group else ''}: {why}"
        for (group, resource, verb), why in NOT_EXERCISED_ON_KWOK.items()
    )
