#!/usr/bin/env python3
"""Generate the catalog of Karpenter's kwok instance types from Karpenter's own module.

Writes ``src/karpy/cloud/data/karpenter-kwok.json``: the types Karpenter's kwok
provider offers (``c-16x-amd64-linux`` and the like), read from
``kwok/cloudprovider/instance_types.json`` of ``sigs.k8s.io/karpenter`` at a pinned
version, with what Karpenter's provider derives from each entry at start-up
(``kwok/cloudprovider/helpers.go``): the ``karpenter.kwok.sh/instance-size``,
``instance-family``, ``instance-cpu`` and ``instance-memory`` labels, a default of 110
pods where an entry gives none, and the kube-reserved overhead every type carries.
The output is committed; this script exists so it can be audited and regenerated.

The module comes from the Go module proxy (``go mod download``; its exit status also
reports a go directive newer than the local toolchain, so only the zip's path is read).

Usage::

    python3 scripts/gen_kwok_catalog.py           # (re)write the JSON
    python3 scripts/gen_kwok_catalog.py --check   # exit 1 if the JSON is stale
    python3 scripts/gen_kwok_catalog.py --module-zip PATH   # read a zip already downloaded
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

MODULE = "sigs.k8s.io/karpenter"
VERSION = "v1.15.0"
TYPES_FILE = "kwok/cloudprovider/instance_types.json"
HELPERS_FILE = "kwok/cloudprovider/helpers.go"
OUTPUT = Path(__file__).resolve().parent.parent / "src" / "karpy" / "cloud" / "data" / "karpenter-kwok.json"

GROUP = "karpenter.kwok.sh"
LABEL_SIZE = f"{GROUP}/instance-size"
LABEL_FAMILY = f"{GROUP}/instance-family"
LABEL_CPU = f"{GROUP}/instance-cpu"
LABEL_MEMORY = f"{GROUP}/instance-memory"
LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_CAPACITY_TYPE = "karpenter.sh/capacity-type"
DEFAULT_PODS = "110"  # helpers.go: "Default number of pods on a node in Kubernetes"

# helpers.go's parseSizeFromType and parseFamilyFromType.
AWS_NAME = re.compile(r"^\w+\.(nano|micro|small|medium|large|\d*xlarge|metal)$")
FAMILY_DELIMITER = re.compile(r"[.-]")
# helpers.go's overhead:
# `KubeReserved: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), ...}`.
KUBE_RESERVED = re.compile(r"KubeReserved:\s*corev1\.ResourceList\{(?P<body>[^}]*)\}")
RESOURCE_ENTRY = re.compile(
    r"corev1\.Resource(?P<name>\w+):\s*resource\.MustParse\(\"(?P<quantity>[^\"]+)\"\)"
)
RESOURCE_NAMES = {"CPU": "cpu", "Memory": "memory", "EphemeralStorage": "ephemeral-storage", "Pods": "pods"}


def module_zip() -> Path:
    env = {**os.environ, "GOTOOLCHAIN": "local"}
    result = subprocess.run(
        ["go", "mod", "download", "-json", f"{MODULE}@{VERSION}"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    try:
        zip_path = json.loads(result.stdout).get("Zip", "")
    except json.JSONDecodeError:
        zip_path = ""
    if not zip_path or not Path(zip_path).is_file():
        sys.exit(f"cannot download {MODULE}@{VERSION}: {result.stdout}{result.stderr}")
    return Path(zip_path)


def size_of(name: str, cpu: str) -> str:
    match = AWS_NAME.match(name)
    return match.group(1) if match else cpu


def family_of(name: str) -> str:
    parts = FAMILY_DELIMITER.split(name, maxsplit=1)
    return name[:1] if len(parts) < 2 else parts[0]


def kube_reserved(helpers: str) -> dict[str, str]:
    match = KUBE_RESERVED.search(helpers)
    if match is None:
        sys.exit(f"{HELPERS_FILE}: no KubeReserved overhead found")
    return {
        RESOURCE_NAMES[entry["name"]]: entry["quantity"] for entry in RESOURCE_ENTRY.finditer(match["body"])
    }


def offering(raw: dict[str, Any]) -> dict[str, Any]:
    values = {requirement["key"]: requirement["values"] for requirement in raw["Requirements"]}
    (zone,) = values[LABEL_ZONE]
    (capacity_type,) = values[LABEL_CAPACITY_TYPE]
    return {"zone": zone, "capacityType": capacity_type, "price": raw["Price"]}


def instance_type(raw: dict[str, Any]) -> dict[str, Any]:
    resources = {"pods": DEFAULT_PODS, **raw["resources"]}
    cpu, memory = resources["cpu"], resources["memory"]
    return {
        "name": raw["name"],
        "architecture": raw["architecture"],
        "operatingSystems": raw["operatingSystems"],
        "capacity": dict(sorted(resources.items())),
        "labels": {
            LABEL_SIZE: size_of(raw["name"], cpu),
            LABEL_FAMILY: family_of(raw["name"]),
            LABEL_CPU: cpu,
            LABEL_MEMORY: memory,
        },
        "offerings": [offering(entry) for entry in raw["offerings"]],
    }


def generate(zip_path: Path) -> str:
    root = f"{MODULE}@{VERSION}/"
    with zipfile.ZipFile(zip_path) as module:
        raw_types = module.read(root + TYPES_FILE)
        helpers = module.read(root + HELPERS_FILE).decode()
    types = [instance_type(entry) for entry in json.loads(raw_types)]
    zones = sorted({entry["zone"] for it in types for entry in it["offerings"]})
    catalog = {
        "source": f"{MODULE}@{VERSION} {TYPES_FILE}, with the labels, default pods and overhead"
        f" that {HELPERS_FILE} derives",
        "sourceSha256": hashlib.sha256(raw_types).hexdigest(),
        "zones": zones,
        "kubeReserved": kube_reserved(helpers),
        "instanceTypes": types,
    }
    return json.dumps(catalog, indent=1) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed JSON differs")
    parser.add_argument(
        "--module-zip", type=Path, help=f"the {MODULE}@{VERSION} module zip (default: go mod download)"
    )
    args = parser.parse_args()
    text = generate(args.module_zip or module_zip())
    if args.check:
        if not OUTPUT.is_file() or OUTPUT.read_text() != text:
            print(f"{OUTPUT} is stale: run scripts/gen_kwok_catalog.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
