"""Karpenter's kwok instance types, and which catalog a KWOKNodeClass offers.

Karpenter's own kwok provider offers generated types (``c-16x-amd64-linux``: a
family ``c``/``s``/``m``, a size in CPUs, an architecture and an OS), each in four
test zones, spot and on-demand, with labels ``karpenter.kwok.sh/instance-size``,
``instance-family``, ``instance-cpu`` and ``instance-memory``. Karpenter's manifests
and e2e suites name those types, so a KWOKNodeClass can offer them
(:attr:`KwokInstanceTypes.KARPENTER`). ``data/karpenter-kwok.json`` is generated
from Karpenter's module by ``scripts/gen_kwok_catalog.py``, with the labels, the
110-pod default and the kube-reserved overhead (100m CPU, 10Mi memory) that
Karpenter's provider derives at start-up; nothing here adds to them, so plans
and prices are Karpenter's.

karpy's KWOKNodeClass has offered the bundled AWS catalog
(:attr:`KwokInstanceTypes.AWS`, :mod:`karpy.cloud.aws_catalog`) so that a kwok
cluster plans as AWS would; that stays the default. A class chooses with the
annotation ``karpy.dev/kwok-instance-types`` (``aws`` or ``karpenter``), which
Karpenter ignores; a class without it gets the process' default
(``KARPY_KWOK_INSTANCE_TYPES`` for ``karpy run``, ``spec.cloud.kwokInstanceTypes``
in a scenario), so Karpenter's suites, whose node class carries no annotation,
run unchanged with that default set to ``karpenter``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from importlib import resources
from typing import Any

from karpy.api.instancetype import InstanceType, Offering, Overhead
from karpy.api.nodeclass import KWOKNodeClass
from karpy.api.quantity import ResourceAmounts, parse_resource_list
from karpy.api.requirements import (
    LABEL_ARCH,
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    LABEL_OS,
    LABEL_ZONE,
    Requirement,
    Requirements,
)

CATALOG_FILE = "karpenter-kwok.json"
INSTANCE_TYPES_ANNOTATION = "karpy.dev/kwok-instance-types"


class KwokInstanceTypes(StrEnum):
    """Which instance types a KWOKNodeClass offers."""

    AWS = "aws"
    KARPENTER = "karpenter"


def parse_kwok_instance_types(text: str) -> KwokInstanceTypes:
    try:
        return KwokInstanceTypes(text.strip().lower())
    except ValueError:
        choices = ", ".join(choice.value for choice in KwokInstanceTypes)
        raise ValueError(f"unknown kwok instance types {text!r} (one of {choices})") from None


def instance_types_of(node_class: KWOKNodeClass, default: KwokInstanceTypes) -> KwokInstanceTypes:
    """The class' annotation if it has a valid one, else ``default``."""
    chosen = node_class.metadata.annotations.get(INSTANCE_TYPES_ANNOTATION)
    if chosen is None:
        return default
    try:
        return parse_kwok_instance_types(chosen)
    except ValueError:
        return default


@dataclass(frozen=True, slots=True)
class KwokCatalogEntry:
    name: str
    architecture: str
    operating_systems: tuple[str, ...]
    capacity: ResourceAmounts
    labels: Mapping[str, str]
    # (zone, capacity type, price)
    offerings: tuple[tuple[str, str, float], ...]

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> KwokCatalogEntry:
        return cls(
            name=str(raw["name"]),
            architecture=str(raw["architecture"]),
            operating_systems=tuple(str(name) for name in raw["operatingSystems"]),
            capacity=parse_resource_list(raw["capacity"]),
            labels={str(key): str(value) for key, value in raw["labels"].items()},
            offerings=tuple(
                (str(item["zone"]), str(item["capacityType"]), float(item["price"]))
                for item in raw["offerings"]
            ),
        )


@dataclass(frozen=True, slots=True)
class KwokCatalog:
    source: str
    zones: tuple[str, ...]
    kube_reserved: ResourceAmounts
    entries: tuple[KwokCatalogEntry, ...]

    def instance_types(
        self, unavailable: frozenset[tuple[str, str, str]] = frozenset()
    ) -> list[InstanceType]:
        """Every type, with the offerings in ``unavailable`` (type, zone, capacity type) reported so."""
        return [self._instance_type(entry, unavailable) for entry in self.entries]

    def _instance_type(
        self, entry: KwokCatalogEntry, unavailable: frozenset[tuple[str, str, str]]
    ) -> InstanceType:
        offerings = tuple(
            Offering(zone, capacity_type, price, (entry.name, zone, capacity_type) not in unavailable)
            for zone, capacity_type, price in entry.offerings
        )
        requirements = Requirements.from_labels(
            {LABEL_INSTANCE_TYPE: entry.name, LABEL_ARCH: entry.architecture, **entry.labels}
        )
        requirements.add(Requirement.from_operator(LABEL_OS, "In", entry.operating_systems))
        requirements.add(Requirement.from_operator(LABEL_ZONE, "In", sorted({o.zone for o in offerings})))
        requirements.add(
            Requirement.from_operator(LABEL_CAPACITY_TYPE, "In", sorted({o.capacity_type for o in offerings}))
        )
        return InstanceType.build(
            entry.name,
            requirements,
            offerings,
            dict(entry.capacity),
            Overhead(kube_reserved=dict(self.kube_reserved)),
        )


@cache
def load_kwok_catalog(file_name: str = CATALOG_FILE) -> KwokCatalog:
    text = resources.files("karpy.cloud").joinpath("data", file_name).read_text(encoding="utf-8")
    raw = json.loads(text)
    return KwokCatalog(
        source=str(raw["source"]),
        zones=tuple(str(zone) for zone in raw["zones"]),
        kube_reserved=parse_resource_list(raw["kubeReserved"]),
        entries=tuple(KwokCatalogEntry.from_json(item) for item in raw["instanceTypes"]),
    )
