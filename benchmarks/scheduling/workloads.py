"""The clusters the scheduling benchmarks solve: instance types, NodePools and pending pods.

Three families of inputs, each built directly from karpy's dataclasses (no YAML:
generating 50,000 pods through the manifest parser would take longer than
solving them, and would measure the parser instead of the solver).

**Karpenter's shapes.** kubernetes-sigs/karpenter measures its scheduler with
``pkg/controllers/provisioning/scheduling/scheduling_benchmark_test.go``; to
compare speeds the inputs have to be the same, so they are rebuilt here from
what that file and its fake cloud provider (``pkg/cloudprovider/fake``)
generate:

- 400 instance types, type *i* (from 0) with *i*+1 CPUs, 2(*i*+1) GiB of
  memory and 10(*i*+1) pods; a kube-reserved overhead of 100m CPU and 10Mi;
  offered as spot in two zones and on-demand in three; every offering priced
  as Karpenter's fake prices it, 0.1 per CPU plus 0.1 per 10^9 bytes of
  memory, so the price is proportional to the size and spot costs the same as
  on-demand; architecture amd64; operating systems linux, windows and darwin;
  and three more requirement keys (:func:`fake_keys`): ``size`` (``large``
  above 4 CPUs and 8Gi, else ``small``), ``special`` (``optional`` on large
  types, absent on small ones) and ``integer`` (the CPU count). One NodePool
  with no requirements admits them all.
- Diverse pods (:func:`karpenter_diverse_pods`): five kinds in fifths, as
  Karpenter's file has made them since January 2025 (six kinds in sixths
  before, five in sevenths before that): generic pods; a zonal and a
  hostname topology spread (``maxSkew: 1``, ``DoNotSchedule``); a zonal pod
  affinity; a hostname pod anti-affinity. CPU drawn from 100m, 250m, 500m,
  1, 1.5 and memory from 100Mi, 256Mi, 512Mi, 1Gi, 2Gi, 4Gi, with a seeded
  generator so every run solves the same pods. The labels are Karpenter's:
  generic and spread pods carry ``my-label`` (a..g), and a spread pod's own
  value and its selector's are drawn independently, so a spread counts pods
  of other kinds and often not itself; the affinity pods are affine to their
  own ``my-affininity`` value; the anti-affinity pods all repel each other.
  These shapes (``karpenter_exact_pools`` and ``karpenter_diverse_pods``)
  are the ``karpenter`` suite: the speed comparison is on exactly what
  Karpenter measures.

**Own-group shapes.** The same kinds and requests, but every pod labelled
with its kind and a group (``zonal-spread-c``: one of seven per kind) that
each constrained pod selects, as the pods of a Deployment do
(:func:`diverse_pods`, on the types without the three extra keys): the
``karpenter-groups`` and ``existing`` suites. Every constraint then counts
only pods that carry it, which is what real workloads look like, and
``checks`` can verify a plan's final state exactly. It was the benchmark's
only shape before the exact one.

**The real catalog.** The bundled AWS catalog (us-east-1, every zone, spot
and on-demand, with Karpenter's overhead rules) under one NodePool that
allows linux on amd64 and arm64, with a mix of a web tier (many replicas of a
few small Deployments), a batch tier (fewer pods of 2-8 CPUs and 4-32Gi) and
a few memory-heavy pods. None of these pods has a topology constraint: they
are the "generic" pods the cost lower bound (``lower_bound``) applies to.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import cache

from karpy.api.core import Pod, PodSpec
from karpy.api.instancetype import InstanceType, Offering, Overhead
from karpy.api.meta import ObjectMeta
from karpy.api.nodeclass import EC2_GROUP, EC2_KIND, KWOK_GROUP, KWOK_KIND
from karpy.api.nodepool import NodeClaimTemplate, NodeClassRef, NodePool
from karpy.api.requirements import (
    CAPACITY_TYPE_ON_DEMAND,
    CAPACITY_TYPE_SPOT,
    LABEL_ARCH,
    LABEL_CAPACITY_TYPE,
    LABEL_HOSTNAME,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEPOOL,
    LABEL_OS,
    LABEL_ZONE,
    Requirement,
    Requirements,
)
from karpy.cloud.aws_catalog import instance_type_from_entry, load_catalog
from karpy.scheduling.solver import ExistingCapacity, NodePoolCapacity

MIB = 1024**2
GIB = 1024**3
NAMESPACE = "default"
DEFAULT_SEED = 42

# --- Karpenter's fake cloud -------------------------------------------------

KARPENTER_INSTANCE_TYPE_COUNT = 400
KARPENTER_ZONES = ("test-zone-1", "test-zone-2", "test-zone-3")
KARPENTER_SPOT_ZONES = KARPENTER_ZONES[:2]
KARPENTER_OPERATING_SYSTEMS = ("darwin", "linux", "windows")
KARPENTER_KUBE_RESERVED = {"cpu": 100, "memory": 10 * MIB}

# The requests Karpenter's benchmark draws from, and its seven label values.
CPU_CHOICES_MILLIS = (100, 250, 500, 1000, 1500)
MEMORY_CHOICES_BYTES = tuple(mib * MIB for mib in (100, 256, 512, 1024, 2048, 4096))
GROUP_SUFFIXES = ("a", "b", "c", "d", "e", "f", "g")

KIND_LABEL = "kind"
GROUP_LABEL = "group"


def karpenter_price(cpu_millis: int, memory_bytes: int) -> float:
    """Karpenter's fake price: 0.1 a CPU plus 0.1 per 10^9 bytes of memory (pods are free)."""
    return 0.1 * cpu_millis / 1000 + 0.1 * memory_bytes / 1e9


# The three requirement keys Karpenter's fake types carry besides the well-known ones.
FAKE_SIZE_KEY = "size"
FAKE_EXOTIC_KEY = "special"
FAKE_INTEGER_KEY = "integer"


def fake_keys(size: int) -> tuple[Requirement, ...]:
    """The extra requirements of Karpenter's fake type of ``size`` CPUs (2 x size GiB).

    ``size`` is ``large`` above 4 CPUs and 8Gi, where ``special`` is
    ``optional``; ``small`` otherwise, without ``special``; ``integer`` is the
    CPU count.
    """
    large = size > 4 and 2 * size > 8
    return (
        Requirement.from_operator(FAKE_SIZE_KEY, "In", ("large" if large else "small",)),
        Requirement.from_operator(FAKE_EXOTIC_KEY, "In", ("optional",))
        if large
        else Requirement.from_operator(FAKE_EXOTIC_KEY, "DoesNotExist", ()),
        Requirement.from_operator(FAKE_INTEGER_KEY, "In", (str(size),)),
    )


def karpenter_instance_type(index: int, *, with_fake_keys: bool = False) -> InstanceType:
    """Instance type ``index`` of Karpenter's fake catalog: index+1 CPUs, 2(index+1)Gi, 10(index+1) pods.

    ``with_fake_keys``: with the three extra requirement keys (:func:`fake_keys`).
    """
    size = index + 1
    name = f"fake-it-{index}"
    capacity = {"cpu": size * 1000, "memory": 2 * size * GIB, "pods": 10 * size}
    price = karpenter_price(capacity["cpu"], capacity["memory"])
    offerings = tuple(Offering(zone, CAPACITY_TYPE_SPOT, price) for zone in KARPENTER_SPOT_ZONES) + tuple(
        Offering(zone, CAPACITY_TYPE_ON_DEMAND, price) for zone in KARPENTER_ZONES
    )
    requirements = Requirements.from_labels({LABEL_INSTANCE_TYPE: name, LABEL_ARCH: "amd64"})
    requirements.add(
        Requirement.from_operator(LABEL_OS, "In", KARPENTER_OPERATING_SYSTEMS),
        Requirement.from_operator(LABEL_ZONE, "In", KARPENTER_ZONES),
        Requirement.from_operator(LABEL_CAPACITY_TYPE, "In", (CAPACITY_TYPE_SPOT, CAPACITY_TYPE_ON_DEMAND)),
    )
    if with_fake_keys:
        requirements.add(*fake_keys(size))
    overhead = Overhead(kube_reserved=dict(KARPENTER_KUBE_RESERVED))
    return InstanceType.build(name, requirements, offerings, capacity, overhead)


def karpenter_instance_types(
    count: int = KARPENTER_INSTANCE_TYPE_COUNT, *, with_fake_keys: bool = False
) -> list[InstanceType]:
    return list(_karpenter_instance_types(count, with_fake_keys))


@cache
def _karpenter_instance_types(count: int, with_fake_keys: bool) -> tuple[InstanceType, ...]:
    # InstanceTypes are frozen, so one build serves every case of a process.
    return tuple(karpenter_instance_type(index, with_fake_keys=with_fake_keys) for index in range(count))


def nodepool(name: str, node_class_ref: NodeClassRef, requirements: Sequence[Requirement] = ()) -> NodePool:
    return NodePool(
        metadata=ObjectMeta(name=name),
        template=NodeClaimTemplate(node_class_ref=node_class_ref, requirements=tuple(requirements)),
    )


def karpenter_pools(
    instance_type_count: int = KARPENTER_INSTANCE_TYPE_COUNT, *, with_fake_keys: bool = False
) -> list[NodePoolCapacity]:
    """One unconstrained NodePool holding every fake instance type, as Karpenter's benchmark has."""
    pool = nodepool("default", NodeClassRef(KWOK_GROUP, KWOK_KIND, "default"))
    types = karpenter_instance_types(instance_type_count, with_fake_keys=with_fake_keys)
    return [NodePoolCapacity(pool, types)]


def karpenter_exact_pools() -> list[NodePoolCapacity]:
    """Karpenter's fake catalog exactly: the 400 types with their three extra requirement keys."""
    return karpenter_pools(with_fake_keys=True)


# --- A cluster already running ----------------------------------------------

# One node in this many has room for pods; the others are all but full.
EXISTING_ROOMY_EVERY = 10


def existing_nodes(count: int) -> list[ExistingCapacity]:
    """``count`` registered nodes of the ``default`` pool, round-robin over Karpenter's zones.

    Nine in ten are all but full (50m CPU and 64Mi free: no diverse pod
    fits); one in ten has 4 CPUs and 16Gi free. That is what a cluster that
    has been running a while shows a scale-up: thousands of nodes, a few
    with room, and every pending pod to be tried on existing capacity first.
    """
    nodes: list[ExistingCapacity] = []
    for index in range(count):
        zone = KARPENTER_ZONES[index % len(KARPENTER_ZONES)]
        requirements = Requirements(
            Requirement.from_operator(LABEL_ZONE, "In", (zone,)),
            Requirement.from_operator(LABEL_NODEPOOL, "In", ("default",)),
        )
        if index % EXISTING_ROOMY_EVERY == 0:
            free = {"cpu": 4000, "memory": 16 * GIB, "pods": 40}
        else:
            free = {"cpu": 50, "memory": 64 * MIB, "pods": 2}
        nodes.append(ExistingCapacity(f"node-{index:05d}", "default", requirements, (), free))
    return nodes


def existing_zones(nodes: Sequence[ExistingCapacity]) -> dict[str, str]:
    """Each existing node's zone (for checking plans that use them)."""
    return {node.name: node.requirements.get(LABEL_ZONE).any() or "" for node in nodes}


# --- Karpenter's diverse pods ----------------------------------------------


class PodKind(StrEnum):
    """The five kinds of diverse pod, in the order they are generated."""

    GENERIC = "generic"
    ZONAL_SPREAD = "zonal-spread"
    HOSTNAME_SPREAD = "hostname-spread"
    ZONAL_AFFINITY = "zonal-affinity"
    HOSTNAME_ANTI_AFFINITY = "hostname-anti-affinity"


def make_pod(
    name: str,
    labels: Mapping[str, str],
    cpu_millis: int,
    memory_bytes: int,
    *,
    topology_spread_constraints: tuple[Mapping[str, object], ...] = (),
    pod_affinity: Mapping[str, object] | None = None,
    pod_anti_affinity: Mapping[str, object] | None = None,
) -> Pod:
    """A pending pod in the default namespace, built without parsing."""
    return Pod(
        metadata=ObjectMeta(name=name, namespace=NAMESPACE, labels=dict(labels)),
        spec=PodSpec(
            requests={"cpu": cpu_millis, "memory": memory_bytes},
            topology_spread_constraints=topology_spread_constraints,
            pod_affinity=pod_affinity or {},
            pod_anti_affinity=pod_anti_affinity or {},
        ),
    )


def spread_constraint(topology_key: str, selector: Mapping[str, str]) -> Mapping[str, object]:
    return {
        "maxSkew": 1,
        "topologyKey": topology_key,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": dict(selector)},
    }


def required_pod_affinity(topology_key: str, selector: Mapping[str, str]) -> Mapping[str, object]:
    """An ``affinity.podAffinity`` (or ``podAntiAffinity``) with one required term."""
    return {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": dict(selector)}, "topologyKey": topology_key}
        ]
    }


def diverse_kind_counts(count: int) -> dict[PodKind, int]:
    """How many pods of each kind ``diverse_pods(count)`` makes: a fifth each, the rest generic."""
    fifth = count // len(PodKind)
    counts = dict.fromkeys(PodKind, fifth)
    counts[PodKind.GENERIC] += count - fifth * len(PodKind)
    return counts


def diverse_pods(count: int, seed: int = DEFAULT_SEED) -> list[Pod]:
    """Karpenter's diverse benchmark pods (see the module docstring), deterministic for a seed."""
    rng = random.Random(seed)
    pods: list[Pod] = []
    for kind, kind_count in diverse_kind_counts(count).items():
        for index in range(kind_count):
            if kind is PodKind.HOSTNAME_ANTI_AFFINITY:
                group = str(kind)
            else:
                group = f"{kind}-{rng.choice(GROUP_SUFFIXES)}"
            labels = {KIND_LABEL: str(kind), GROUP_LABEL: group}
            selector = {GROUP_LABEL: group}
            cpu_millis, memory_bytes = rng.choice(CPU_CHOICES_MILLIS), rng.choice(MEMORY_CHOICES_BYTES)
            name = f"{kind}-{index}"
            if kind is PodKind.ZONAL_SPREAD:
                pod = make_pod(
                    name,
                    labels,
                    cpu_millis,
                    memory_bytes,
                    topology_spread_constraints=(spread_constraint(LABEL_ZONE, selector),),
                )
            elif kind is PodKind.HOSTNAME_SPREAD:
                pod = make_pod(
                    name,
                    labels,
                    cpu_millis,
                    memory_bytes,
                    topology_spread_constraints=(spread_constraint(LABEL_HOSTNAME, selector),),
                )
            elif kind is PodKind.ZONAL_AFFINITY:
                affinity = required_pod_affinity(LABEL_ZONE, selector)
                pod = make_pod(name, labels, cpu_millis, memory_bytes, pod_affinity=affinity)
            elif kind is PodKind.HOSTNAME_ANTI_AFFINITY:
                anti_affinity = required_pod_affinity(LABEL_HOSTNAME, selector)
                pod = make_pod(name, labels, cpu_millis, memory_bytes, pod_anti_affinity=anti_affinity)
            else:
                pod = make_pod(name, labels, cpu_millis, memory_bytes)
            pods.append(pod)
    return pods


# Karpenter's label keys: spread and generic pods share one, affinity pods have their own.
KARPENTER_LABEL_KEY = "my-label"
KARPENTER_AFFINITY_LABEL_KEY = "my-affininity"  # sic: Karpenter's spelling
KARPENTER_ANTI_AFFINITY_LABELS = {"app": "nginx"}


def karpenter_diverse_pods(count: int, seed: int = DEFAULT_SEED) -> list[Pod]:
    """Karpenter's diverse pods exactly as its benchmark makes them (``makeDiversePods``).

    Five kinds, a fifth each, in this order, the remainder generic at the end:

    - generic: labelled ``my-label`` with a value drawn from a..g;
    - zonal and hostname topology spread (``maxSkew: 1``, ``DoNotSchedule``):
      the pod's own ``my-label`` value and its selector's are drawn
      independently, so a spread counts generic pods and the other spread's
      pods, and often not the pod itself;
    - zonal pod affinity: labelled ``my-affininity`` (Karpenter's spelling)
      with a drawn value, and affine to its own label;
    - hostname anti-affinity: every one labelled ``app: nginx`` and repelling
      that label, so each needs a node of its own.

    Requests are drawn as Karpenter draws them (CPU from 100m to 1.5, memory
    from 100Mi to 4Gi), each pod's labels before its selector before its
    CPU before its memory. Python's generator is not Go's, so the same seed
    gives the same distribution, not the same pods.
    """
    rng = random.Random(seed)

    def value() -> str:
        return rng.choice(GROUP_SUFFIXES)

    def requests() -> tuple[int, int]:
        return rng.choice(CPU_CHOICES_MILLIS), rng.choice(MEMORY_CHOICES_BYTES)

    fifth = count // len(PodKind)
    pods: list[Pod] = []
    for index in range(fifth):
        labels = {KARPENTER_LABEL_KEY: value()}
        pods.append(make_pod(f"{PodKind.GENERIC}-{index}", labels, *requests()))
    for kind, key in ((PodKind.ZONAL_SPREAD, LABEL_ZONE), (PodKind.HOSTNAME_SPREAD, LABEL_HOSTNAME)):
        for index in range(fifth):
            labels = {KARPENTER_LABEL_KEY: value()}
            selector = {KARPENTER_LABEL_KEY: value()}
            spread = (spread_constraint(key, selector),)
            pods.append(make_pod(f"{kind}-{index}", labels, *requests(), topology_spread_constraints=spread))
    for index in range(fifth):
        labels = {KARPENTER_AFFINITY_LABEL_KEY: value()}
        affinity = required_pod_affinity(LABEL_ZONE, labels)
        pods.append(make_pod(f"{PodKind.ZONAL_AFFINITY}-{index}", labels, *requests(), pod_affinity=affinity))
    for index in range(fifth):
        labels = dict(KARPENTER_ANTI_AFFINITY_LABELS)
        anti = required_pod_affinity(LABEL_HOSTNAME, labels)
        name = f"{PodKind.HOSTNAME_ANTI_AFFINITY}-{index}"
        pods.append(make_pod(name, labels, *requests(), pod_anti_affinity=anti))
    for index in range(fifth, fifth + count - len(pods)):
        labels = {KARPENTER_LABEL_KEY: value()}
        pods.append(make_pod(f"{PodKind.GENERIC}-{index}", labels, *requests()))
    return pods


def generic_pods(count: int, seed: int = DEFAULT_SEED) -> list[Pod]:
    """Only the generic kind of the diverse pods: the same request distribution, no constraints."""
    rng = random.Random(seed)
    pods: list[Pod] = []
    for index in range(count):
        group = f"{PodKind.GENERIC}-{rng.choice(GROUP_SUFFIXES)}"
        labels = {KIND_LABEL: str(PodKind.GENERIC), GROUP_LABEL: group}
        cpu_millis, memory_bytes = rng.choice(CPU_CHOICES_MILLIS), rng.choice(MEMORY_CHOICES_BYTES)
        pods.append(make_pod(f"{PodKind.GENERIC}-{index}", labels, cpu_millis, memory_bytes))
    return pods


# --- The real catalog and a mixed workload ----------------------------------


def catalog_instance_types() -> list[InstanceType]:
    """Every type of the bundled AWS catalog, offered in every zone it lists."""
    return list(_catalog_instance_types())


@cache
def _catalog_instance_types() -> tuple[InstanceType, ...]:
    catalog = load_catalog()
    return tuple(instance_type_from_entry(entry, catalog.region) for entry in catalog.entries)


CATALOG_NODEPOOL_REQUIREMENTS = (
    Requirement.from_operator(LABEL_OS, "In", ("linux",)),
    Requirement.from_operator(LABEL_ARCH, "In", ("amd64", "arm64")),
    Requirement.from_operator(LABEL_CAPACITY_TYPE, "In", (CAPACITY_TYPE_SPOT, CAPACITY_TYPE_ON_DEMAND)),
)


def catalog_pools() -> list[NodePoolCapacity]:
    """One NodePool over the whole catalog: linux, amd64 and arm64, spot and on-demand."""
    pool = nodepool("default", NodeClassRef(EC2_GROUP, EC2_KIND, "default"), CATALOG_NODEPOOL_REQUIREMENTS)
    return [NodePoolCapacity(pool, catalog_instance_types())]


@dataclass(frozen=True, slots=True)
class Workload:
    """One Deployment-like group of identical pods in the mixed workload."""

    name: str
    tier: str
    cpu_millis: int
    memory_bytes: int


TIER_WEB = "web"
TIER_BATCH = "batch"
TIER_MEMORY = "memory"

WEB_WORKLOADS = (
    Workload("frontend", TIER_WEB, 250, 512 * MIB),
    Workload("api", TIER_WEB, 500, 1 * GIB),
    Workload("checkout", TIER_WEB, 250, 512 * MIB),
    Workload("search", TIER_WEB, 500, 1 * GIB),
)
BATCH_WORKLOADS = (
    Workload("etl", TIER_BATCH, 2000, 4 * GIB),
    Workload("render", TIER_BATCH, 4000, 8 * GIB),
    Workload("report", TIER_BATCH, 4000, 16 * GIB),
    Workload("train", TIER_BATCH, 8000, 32 * GIB),
)
MEMORY_WORKLOADS = (
    Workload("cache", TIER_MEMORY, 1000, 16 * GIB),
    Workload("analytics", TIER_MEMORY, 2000, 32 * GIB),
)

# Shares of the pod count; what the two shares leave goes to the memory-heavy tier.
WEB_SHARE = 0.75
BATCH_SHARE = 0.20


def mixed_tier_counts(count: int) -> dict[str, int]:
    web = round(count * WEB_SHARE)
    batch = min(count - web, round(count * BATCH_SHARE))
    return {TIER_WEB: web, TIER_BATCH: batch, TIER_MEMORY: count - web - batch}


def mixed_pods(count: int, seed: int = DEFAULT_SEED) -> list[Pod]:
    """The web/batch/memory-heavy mix, each pod drawn (seeded) from its tier's workloads."""
    rng = random.Random(seed)
    tiers = {TIER_WEB: WEB_WORKLOADS, TIER_BATCH: BATCH_WORKLOADS, TIER_MEMORY: MEMORY_WORKLOADS}
    replicas: dict[str, int] = {}
    pods: list[Pod] = []
    for tier, tier_count in mixed_tier_counts(count).items():
        for _ in range(tier_count):
            workload = rng.choice(tiers[tier])
            index = replicas.get(workload.name, 0)
            replicas[workload.name] = index + 1
            labels = {"app": workload.name, "tier": workload.tier}
            pods.append(
                make_pod(f"{workload.name}-{index}", labels, workload.cpu_millis, workload.memory_bytes)
            )
    return pods
