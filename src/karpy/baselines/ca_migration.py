"""From Cluster Autoscaler node groups to NodePools: which nodes form a group, what replaces them (pure).

:func:`discover_groups` reads a cluster's Nodes and Pods (records of the API
model, as :class:`~karpy.api.snapshot.ClusterSnapshot` holds them) and
recognises the nodes a Cluster Autoscaler node group made. Kubernetes does not
show the Auto Scaling group an instance belongs to (its tags are the cloud's),
and CA puts no group annotation on nodes, so a node's group is the first of
these labels it carries (:data:`GROUP_LABELS`):

- ``karpy.dev/node-group``: the nodes karpy's own CA baseline makes;
- ``eks.amazonaws.com/nodegroup``: EKS managed node groups;
- ``alpha.eksctl.io/nodegroup-name``: eksctl's self-managed node groups;
- ``cloud.google.com/gke-nodepool``, ``kubernetes.azure.com/agentpool``: GKE, AKS.

A node with none of them is grouped with the nodes of the same instance type,
capacity type, labels and taints (an ASG's nodes are identical), named
``inferred-<type>``. Nodes a NodePool made (``karpenter.sh/nodepool``), control-plane
nodes and nodes without an instance type label are left out, with a note.
The capacity type is ``karpenter.sh/capacity-type``, else EKS's
``eks.amazonaws.com/capacityType`` (``ON_DEMAND``/``SPOT``), else on-demand.

:func:`propose` turns the groups into NodePools: one per distinct set of
taints, of architectures and of the labels the pods on the groups select on
(node selector and required node affinity). Architectures part pools because a
pod that asks for none may have an image for one only; the pools of those the
non-DaemonSet pods asking for none ran on weigh more, so karpy launches those
first for such pods. Requirements cover the groups' architectures,
zones and capacity types and widened from their instance types to their
instance categories (AWS) or families (Karpenter's kwok types), so karpy can
choose cheaper sizes; and one node class (an ``EC2NodeClass`` whose role,
subnets and security groups name the cluster by its discovery tag and must be
checked, or a ``KWOKNodeClass`` on a kwok cluster). Manifests are plain dicts.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from karpy.api.core import Node, Pod
from karpy.api.requirements import (
    LABEL_ARCH,
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    LABEL_OS,
    LABEL_ZONE,
)
from karpy.api.taints import Taint
from karpy.baselines.cluster_autoscaler import LABEL_NODE_GROUP

# The labels naming a node's group, most specific first.
GROUP_LABELS = (
    LABEL_NODE_GROUP,
    "eks.amazonaws.com/nodegroup",
    "alpha.eksctl.io/nodegroup-name",
    "cloud.google.com/gke-nodepool",
    "kubernetes.azure.com/agentpool",
)
EKS_CAPACITY_TYPE = "eks.amazonaws.com/capacityType"
EKSCTL_CLUSTER_NAME = "alpha.eksctl.io/cluster-name"
CONTROL_PLANE_LABELS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
# Labels a node gets from its kubelet, cloud or node-group tooling: never a NodePool's template label.
_SYSTEM_PREFIXES = (
    "kubernetes.io/",
    "beta.kubernetes.io/",
    "node.kubernetes.io/",
    "topology.kubernetes.io/",
    "failure-domain.beta.kubernetes.io/",
    "node-role.kubernetes.io/",
    "karpenter.sh/",
    "karpenter.k8s.aws/",
    "karpenter.kwok.sh/",
    "eks.amazonaws.com/",
    "alpha.eksctl.io/",
    "cloud.google.com/",
    "kubernetes.azure.com/",
    "karpy.dev/",
    "kwok.x-k8s.io/",
)
# Taints the kubelet, the cloud or an autoscaler puts on a node for a while: not the group's own.
_TRANSIENT_TAINT_PREFIXES = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/", "karpenter.sh/")
_TRANSIENT_TAINTS = ("ToBeDeletedByClusterAutoscaler", "DeletionCandidateOfClusterAutoscaler")
AWS_LABEL_INSTANCE_CATEGORY = "karpenter.k8s.aws/instance-category"
AWS_LABEL_INSTANCE_GENERATION = "karpenter.k8s.aws/instance-generation"
KWOK_LABEL_INSTANCE_FAMILY = "karpenter.kwok.sh/instance-family"
KWOK_INSTANCE_TYPES_ANNOTATION = "karpy.dev/kwok-instance-types"
# Karpenter's kwok types: c-4x-amd64-linux (family, CPUs, arch, OS).
_KWOK_TYPE = re.compile(r"^([a-z]+)-\d+x-[a-z0-9]+-[a-z]+$")
PROVIDER_AWS = "aws"
# The weight of the NodePools of the architectures pods that ask for none ran on.
PREFERRED_WEIGHT = 10
PROVIDER_KWOK = "kwok"


@dataclass(frozen=True, slots=True)
class DiscoveredGroup:
    """A node group as its nodes show it."""

    name: str
    # The label that named it, or "" for a group inferred from identical nodes.
    named_by: str
    nodes: tuple[str, ...]
    instance_types: tuple[str, ...]
    zones: tuple[str, ...]
    capacity_type: str
    architectures: tuple[str, ...]
    # Labels every node of the group carries that are not a kubelet's, cloud's or tool's.
    labels: Mapping[str, str]
    # Labels identifying the group (its naming label...), kept when pods select on them.
    identity_labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    # Label keys the pods running on the group select on (node selector, required node affinity).
    selected_keys: frozenset[str]
    pods: int
    # Of those pods, how many ask for no architecture (DaemonSets' aside): their images may have
    # only the group's.
    pods_of_unasked_arch: int = 0


@dataclass(frozen=True, slots=True)
class Discovery:
    groups: tuple[DiscoveredGroup, ...]
    provider: str
    # The value of kwok's catalog annotation a KWOKNodeClass needs ("" for the default, AWS's).
    kwok_catalog: str
    cluster_name: str
    notes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ProposedPool:
    name: str
    groups: tuple[str, ...]
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    # (key, operator, values) as a NodePool writes them.
    requirements: tuple[tuple[str, str, tuple[str, ...]], ...]
    # The NodePool's spec.weight, 0 for none: higher is tried first.
    weight: int = 0


@dataclass(frozen=True, slots=True)
class Proposal:
    discovery: Discovery
    pools: tuple[ProposedPool, ...]
    node_class: Mapping[str, object]
    notes: tuple[str, ...]

    def manifests(self) -> list[dict[str, object]]:
        """The node class first, then the NodePools: ``kubectl apply`` order."""
        return [dict(self.node_class), *(nodepool_manifest(pool, self) for pool in self.pools)]


def node_group_of(node: Node) -> tuple[str, str] | None:
    """(group name, label that named it) when a node group label names the node's group."""
    for label in GROUP_LABELS:
        value = node.metadata.labels.get(label)
        if value:
            return value, label
    return None


def capacity_type_of(labels: Mapping[str, str]) -> str:
    if labels.get(LABEL_CAPACITY_TYPE):
        return labels[LABEL_CAPACITY_TYPE]
    eks = labels.get(EKS_CAPACITY_TYPE, "")
    return "spot" if eks.upper() == "SPOT" else "on-demand"


def _is_system_label(key: str) -> bool:
    return key.startswith(_SYSTEM_PREFIXES) or key in GROUP_LABELS


def _own_taints(node: Node) -> tuple[Taint, ...]:
    return tuple(
        sorted(
            (
                taint
                for taint in node.taints
                if not taint.key.startswith(_TRANSIENT_TAINT_PREFIXES) and taint.key not in _TRANSIENT_TAINTS
            ),
            key=lambda taint: (taint.key, taint.value, taint.effect),
        )
    )


def selected_keys(pod: Pod) -> set[str]:
    """The node label keys a pod's placement depends on."""
    keys = set(pod.spec.node_selector)
    for term in pod.spec.required_node_terms:
        keys.update(term.keys())
    return keys


def _is_daemon(pod: Pod) -> bool:
    """A DaemonSet's pod: on every node whatever its architecture, so no sign of what its image runs on."""
    owner = pod.metadata.controller
    return owner is not None and owner.kind == "DaemonSet"


def _common(mappings: Sequence[Mapping[str, str]]) -> dict[str, str]:
    first = dict(mappings[0]) if mappings else {}
    return {key: value for key, value in first.items() if all(m.get(key) == value for m in mappings[1:])}


def _provider_of(nodes: Iterable[Node]) -> str:
    for node in nodes:
        if node.provider_id.startswith("aws://"):
            return PROVIDER_AWS
    return PROVIDER_KWOK


def discover_groups(objects: Iterable[object]) -> Discovery:
    """The CA node groups among ``objects``' Nodes, with the pods bound to them (rules: module docstring)."""
    nodes: list[Node] = []
    pods_by_node: dict[str, list[Pod]] = defaultdict(list)
    for obj in objects:
        if isinstance(obj, Node):
            nodes.append(obj)
        elif isinstance(obj, Pod) and obj.spec.node_name and not obj.is_terminal:
            pods_by_node[obj.spec.node_name].append(obj)
    notes: list[str] = []
    members: dict[str, list[Node]] = defaultdict(list)
    named_by: dict[str, str] = {}
    for node in sorted(nodes, key=lambda n: n.name):
        labels = node.metadata.labels
        if LABEL_NODEPOOL in labels:
            notes.append(f"node {node.name}: made by NodePool {labels[LABEL_NODEPOOL]}, left as it is")
            continue
        if any(label in labels for label in CONTROL_PLANE_LABELS):
            notes.append(f"node {node.name}: control plane, left out")
            continue
        if not labels.get(LABEL_INSTANCE_TYPE):
            notes.append(f"node {node.name}: no {LABEL_INSTANCE_TYPE} label, left out (fixed capacity)")
            continue
        found = node_group_of(node)
        if found is not None:
            name, label = found
        else:
            custom = ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if not _is_system_label(k))
            taints = ",".join(f"{t.key}={t.value}:{t.effect}" for t in _own_taints(node))
            shape = (labels[LABEL_INSTANCE_TYPE], capacity_type_of(labels), custom, taints)
            name, label = "inferred-" + "-".join(filter(None, shape[:2])), ""
            # Same type but other labels or taints: another group.
            same_name = [n for n in named_by if n == name or n.startswith(name + "-")]
            for candidate in same_name:
                if _shape_of(members[candidate][0]) == shape:
                    name = candidate
                    break
            else:
                if same_name:
                    name = f"{name}-{len(same_name) + 1}"
        members[name].append(node)
        named_by[name] = label
    groups = []
    for name, group_nodes in sorted(members.items()):
        group_pods = [pod for node in group_nodes for pod in pods_by_node.get(node.name, ())]
        keys: set[str] = set()
        for pod in group_pods:
            keys |= selected_keys(pod)
        all_labels = [node.metadata.labels for node in group_nodes]
        common = _common(all_labels)
        taint_sets = {_own_taints(node) for node in group_nodes}
        if len(taint_sets) > 1:
            notes.append(f"node group {name}: its nodes' taints differ; the first node's are kept")
        groups.append(
            DiscoveredGroup(
                name=name,
                named_by=named_by[name],
                nodes=tuple(node.name for node in group_nodes),
                instance_types=tuple(sorted({labels[LABEL_INSTANCE_TYPE] for labels in all_labels})),
                zones=tuple(sorted({labels[LABEL_ZONE] for labels in all_labels if labels.get(LABEL_ZONE)})),
                capacity_type=capacity_type_of(common or all_labels[0]),
                architectures=tuple(
                    sorted(
                        {labels.get(LABEL_ARCH, "amd64") for labels in all_labels if labels.get(LABEL_ARCH)}
                    )
                ),
                labels={k: v for k, v in sorted(common.items()) if not _is_system_label(k)},
                identity_labels={
                    k: v
                    for k, v in sorted(common.items())
                    if _is_system_label(k)
                    and not k.startswith(("kubernetes.io/", "node.kubernetes.io/"))
                    and k not in (LABEL_ZONE, LABEL_ARCH, LABEL_OS, LABEL_CAPACITY_TYPE)
                },
                taints=_own_taints(group_nodes[0]),
                selected_keys=frozenset(keys),
                pods=len(group_pods),
                pods_of_unasked_arch=sum(
                    1 for pod in group_pods if not _is_daemon(pod) and LABEL_ARCH not in selected_keys(pod)
                ),
            )
        )
    all_types = {t for group in groups for t in group.instance_types}
    kwok_catalog = "karpenter" if all_types and all(_KWOK_TYPE.match(t) for t in all_types) else ""
    cluster_name = next(
        (
            node.metadata.labels[EKSCTL_CLUSTER_NAME]
            for node in nodes
            if EKSCTL_CLUSTER_NAME in node.metadata.labels
        ),
        "",
    )
    return Discovery(tuple(groups), _provider_of(nodes), kwok_catalog, cluster_name, tuple(notes))


def _shape_of(node: Node) -> tuple[str, str, str, str]:
    labels = node.metadata.labels
    custom = ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if not _is_system_label(k))
    taints = ",".join(f"{t.key}={t.value}:{t.effect}" for t in _own_taints(node))
    return (labels[LABEL_INSTANCE_TYPE], capacity_type_of(labels), custom, taints)


def instance_category(instance_type: str) -> str:
    """An AWS type's category (``c5.xlarge``: ``c``; ``inf2.xlarge``: ``inf``); a kwok type's family."""
    kwok = _KWOK_TYPE.match(instance_type)
    if kwok is not None:
        return kwok.group(1)
    family = instance_type.split(".", 1)[0]
    letters = re.match(r"[a-z]+", family)
    return letters.group(0) if letters is not None else family


def pool_labels(group: DiscoveredGroup) -> dict[str, str]:
    """The labels a group's NodePool must put on nodes: those the group's pods select on."""
    both = {**group.labels, **group.identity_labels}
    return {key: value for key, value in sorted(both.items()) if key in group.selected_keys}


# What sets a pool apart: the labels its pods select on, its taints, its architectures.
_Shape = tuple[tuple[tuple[str, str], ...], tuple[Taint, ...], tuple[str, ...]]


def propose(discovery: Discovery, node_class_name: str = "default") -> Proposal:
    """NodePools and a node class covering ``discovery``'s groups (rules: module docstring)."""
    notes: list[str] = []
    by_shape: dict[_Shape, list[DiscoveredGroup]] = {}
    for group in discovery.groups:
        labels = pool_labels(group)
        for key in sorted(set(labels) & set(group.identity_labels)):
            notes.append(
                f"node group {group.name}: its pods select on {key}, kept as the NodePool's label;"
                " select on a label of your own before removing the group"
            )
        dropped = sorted(set(group.labels) - set(labels))
        if dropped:
            notes.append(
                f"node group {group.name}: labels no pod selects on, not carried over: {', '.join(dropped)}"
            )
        by_shape.setdefault((tuple(labels.items()), group.taints, group.architectures), []).append(group)
    # Pods that ask for no architecture ran on these: where karpy may choose, it keeps them there.
    unasked = {
        arch for group in discovery.groups if group.pods_of_unasked_arch for arch in group.architectures
    }
    preferred = len({shape[2] for shape in by_shape}) > 1 and any(
        not set(shape[2]) <= unasked for shape in by_shape
    )
    if preferred:
        notes.append(
            "node groups of other architectures get NodePools of their own, and those of"
            f" {', '.join(sorted(unasked))} weight {PREFERRED_WEIGHT}: pods that ask for no architecture"
            " ran there, and their images may have no other; merge the NodePools where they are multi-arch"
        )
    aws = discovery.provider == PROVIDER_AWS
    pools = []
    used: set[str] = set()
    shapes = sorted(by_shape.items(), key=lambda item: item[1][0].name)
    plain = [shape for shape, _ in shapes if not shape[0] and not shape[1]]
    # The plain pool named ``default``: the one amd64 pods go to, as most clusters' are.
    default_shape = next((shape for shape in plain if "amd64" in shape[2]), plain[0] if plain else None)
    for shape, groups in shapes:
        label_items, taints, _ = shape
        name = _pool_name(groups, used, shape != default_shape)
        used.add(name)
        types = sorted({t for group in groups for t in group.instance_types})
        categories = tuple(sorted({instance_category(t) for t in types}))
        category_key = KWOK_LABEL_INSTANCE_FAMILY if discovery.kwok_catalog else AWS_LABEL_INSTANCE_CATEGORY
        requirements: list[tuple[str, str, tuple[str, ...]]] = [
            (category_key, "In", categories),
            (LABEL_CAPACITY_TYPE, "In", tuple(sorted({group.capacity_type for group in groups}))),
        ]
        archs = tuple(sorted({arch for group in groups for arch in group.architectures}))
        if archs:
            requirements.append((LABEL_ARCH, "In", archs))
        zones = tuple(sorted({zone for group in groups for zone in group.zones}))
        if zones:
            requirements.append((LABEL_ZONE, "In", zones))
        if aws or not discovery.kwok_catalog:
            # Karpenter's default NodePool leaves out the oldest generations, so do we.
            requirements.append((AWS_LABEL_INSTANCE_GENERATION, "Gt", ("2",)))
        pools.append(
            ProposedPool(
                name=name,
                groups=tuple(group.name for group in groups),
                labels=dict(label_items),
                taints=taints,
                requirements=tuple(sorted(requirements)),
                weight=PREFERRED_WEIGHT if preferred and set(shape[2]) <= unasked else 0,
            )
        )
    return Proposal(discovery, tuple(pools), _node_class(discovery, node_class_name), tuple(notes))


def _pool_name(groups: list[DiscoveredGroup], used: set[str], special: bool) -> str:
    """``default`` for the pool without labels or taints, else its first named group's name."""
    named = [group.name for group in groups if group.named_by] or [group.name for group in groups]
    base = re.sub(r"[^a-z0-9-]+", "-", named[0].lower()).strip("-") if special else "default"
    base = base or "pool"
    name, index = base, 2
    while name in used:
        name, index = f"{base}-{index}", index + 1
    return name


def _node_class(discovery: Discovery, name: str) -> dict[str, object]:
    if discovery.provider == PROVIDER_AWS:
        cluster = discovery.cluster_name or "CLUSTER_NAME"
        return {
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": name},
            "spec": {
                "role": f"KarpenterNodeRole-{cluster}",
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                # Two dicts, not one shared: YAML would write a shared one as an anchor and alias.
                "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": cluster}}],
                "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": cluster}}],
            },
        }
    metadata: dict[str, object] = {"name": name}
    if discovery.kwok_catalog:
        metadata["annotations"] = {KWOK_INSTANCE_TYPES_ANNOTATION: discovery.kwok_catalog}
    return {"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "metadata": metadata}


def nodepool_manifest(pool: ProposedPool, proposal: Proposal) -> dict[str, object]:
    node_class = proposal.node_class
    api_version = str(node_class["apiVersion"])
    meta = node_class["metadata"]
    assert isinstance(meta, Mapping)
    template_spec: dict[str, object] = {
        "nodeClassRef": {
            "group": api_version.split("/", 1)[0],
            "kind": node_class["kind"],
            "name": meta["name"],
        },
        "requirements": [
            {"key": key, "operator": operator, "values": list(values)}
            for key, operator, values in pool.requirements
        ],
    }
    if pool.taints:
        template_spec["taints"] = [taint.to_dict() for taint in pool.taints]
    template: dict[str, object] = {"spec": template_spec}
    if pool.labels:
        template["metadata"] = {"labels": dict(pool.labels)}
    spec: dict[str, object] = {
        "template": template,
        "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "1m"},
    }
    if pool.weight:
        spec["weight"] = pool.weight
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {
            "name": pool.name,
            "annotations": {"karpy.dev/migrated-from-node-groups": ",".join(pool.groups)},
        },
        "spec": spec,
    }
