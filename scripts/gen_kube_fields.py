#!/usr/bin/env python3
"""Generate the field trees of the Kubernetes kinds karpy reads from files.

Writes ``src/karpy/api/data/kube-fields.json``: for each kind in ``KINDS``,
the names of its fields as a compact tree (``karpy.api.fields`` describes the
format), and the Kubernetes version they came from. ``karpy validate`` and
``karpy simulate`` refuse a manifest with a field its kind does not have, so
the names must be the real API's, not the subset karpy's parsers read.

The source is the OpenAPI v2 document a real kube-apiserver serves
(``/openapi/v2``): by default the one of the control plane the integration
tests build (``scripts/control-plane up``, then this script with that
``KUBECONFIG``), or a saved copy with ``--openapi FILE --kubernetes-version V``.
Descriptions, validations and formats are dropped; definitions that are plain
values (Quantity, Time, IntOrString) are inlined as "any value". Status
definitions are left out, since ``status`` is taken as written.

Usage::

    eval $(scripts/control-plane env)
    .venv/bin/python scripts/gen_kube_fields.py           # (re)write the JSON
    .venv/bin/python scripts/gen_kube_fields.py --check   # exit 1 if the JSON is stale
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from karpy.api.fields import ANY, REFERENCE, FieldTree, short_definition_name, tree_from_openapi

OUTPUT = Path(__file__).resolve().parent.parent / "src" / "karpy" / "api" / "data" / "kube-fields.json"

# (apiVersion, kind) of every Kubernetes kind karpy reads, or is about to read, from files.
KINDS: tuple[tuple[str, str], ...] = (
    ("v1", "Pod"),
    ("v1", "Node"),
    ("v1", "Namespace"),
    ("v1", "PersistentVolumeClaim"),
    ("v1", "PersistentVolume"),
    ("v1", "Service"),
    ("v1", "ReplicationController"),
    ("storage.k8s.io/v1", "StorageClass"),
    ("storage.k8s.io/v1", "CSINode"),
    ("v1", "LimitRange"),
    ("v1", "PodTemplate"),
    ("apps/v1", "Deployment"),
    ("apps/v1", "ReplicaSet"),
    ("apps/v1", "DaemonSet"),
    ("apps/v1", "StatefulSet"),
    ("batch/v1", "Job"),
    ("batch/v1", "CronJob"),
    ("policy/v1", "PodDisruptionBudget"),
    ("scheduling.k8s.io/v1", "PriorityClass"),
    ("node.k8s.io/v1", "RuntimeClass"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"),
)


def _kubectl() -> str:
    local = Path(sys.executable).parent / "kubectl"
    found = str(local) if local.exists() else shutil.which("kubectl")
    if found is None:
        sys.exit("gen_kube_fields: no kubectl (run `make env`, or pass --openapi FILE)")
    return found


def _get_raw(path: str) -> Any:
    output = subprocess.run(
        [_kubectl(), "get", "--raw", path], capture_output=True, text=True, check=False, env=os.environ
    )
    if output.returncode != 0:
        sys.exit(f"gen_kube_fields: kubectl get --raw {path} failed: {output.stderr.strip()}")
    return json.loads(output.stdout)


def _definition_of(definitions: Mapping[str, Any], api_version: str, kind: str) -> str:
    group, _, version = api_version.rpartition("/")
    for name, schema in definitions.items():
        for gvk in schema.get("x-kubernetes-group-version-kind", ()):
            if (gvk.get("group", ""), gvk.get("version"), gvk.get("kind")) == (group, version, kind):
                return str(name)
    sys.exit(f"gen_kube_fields: {api_version} {kind} is not in the OpenAPI document")


def _references(tree: FieldTree) -> list[str]:
    if isinstance(tree, str):
        return [tree[len(REFERENCE) :]] if tree.startswith(REFERENCE) else []
    if isinstance(tree, list):
        return _references(tree[0])
    if isinstance(tree, dict):
        return [name for child in tree.values() for name in _references(child)]
    return []


def _inline_plain_values(tree: FieldTree, plain: set[str]) -> FieldTree:
    """``tree`` with references to definitions that are plain values (any value) replaced by ANY."""
    if isinstance(tree, str) and tree.startswith(REFERENCE):
        return ANY if tree[len(REFERENCE) :] in plain else tree
    if isinstance(tree, list):
        return [_inline_plain_values(tree[0], plain)]
    if isinstance(tree, dict):
        return {name: _inline_plain_values(child, plain) for name, child in tree.items()}
    return tree


def field_trees(document: Mapping[str, Any], kubernetes_version: str) -> dict[str, Any]:
    """The bundled file's content, from an OpenAPI v2 document."""
    source = document["definitions"]
    by_short_name = {short_definition_name(name): schema for name, schema in source.items()}
    kinds: dict[str, FieldTree] = {}
    definitions: dict[str, FieldTree] = {}
    pending: list[str] = []
    for api_version, kind in KINDS:
        root = tree_from_openapi(
            source[_definition_of(source, api_version, kind)], bare_object_is_free_form=True
        )
        assert isinstance(root, dict)
        if "status" in root:
            root["status"] = ANY  # taken as written, and its definitions are left out
        kinds[f"{api_version}/{kind}"] = root
        pending.extend(_references(root))
    while pending:
        name = pending.pop()
        if name in definitions:
            continue
        tree = tree_from_openapi(by_short_name[name], bare_object_is_free_form=True)
        definitions[name] = tree
        pending.extend(_references(tree))
    plain = {name for name, tree in definitions.items() if tree == ANY}
    return {
        "kubernetesVersion": kubernetes_version,
        "source": "kube-apiserver /openapi/v2, field names only (scripts/gen_kube_fields.py)",
        "kinds": {key: _inline_plain_values(tree, plain) for key, tree in sorted(kinds.items())},
        "definitions": {
            name: _inline_plain_values(tree, plain)
            for name, tree in sorted(definitions.items())
            if name not in plain
        },
    }


def _compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def render(content: Mapping[str, Any]) -> str:
    """JSON with one kind or definition a line: small, and a regenerated file diffs line by line."""
    lines = ["{"]
    for section, value in content.items():
        if isinstance(value, dict):
            entries = [f"  {json.dumps(key)}:{_compact(item)}" for key, item in value.items()]
            lines.append(f"{json.dumps(section)}:{{\n" + ",\n".join(entries) + "\n},")
        else:
            lines.append(f"{json.dumps(section)}:{json.dumps(value)},")
    lines[-1] = lines[-1].rstrip(",")
    return "\n".join([*lines, "}"]) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--openapi", type=Path, help="a saved /openapi/v2 document instead of the API server")
    parser.add_argument("--kubernetes-version", help="the version the saved document came from")
    parser.add_argument("--check", action="store_true", help="exit 1 if the bundled file is stale")
    args = parser.parse_args()
    if args.openapi is not None:
        if not args.kubernetes_version:
            parser.error("--openapi needs --kubernetes-version")
        document = json.loads(args.openapi.read_text(encoding="utf-8"))
        version = str(args.kubernetes_version)
    else:
        document = _get_raw("/openapi/v2")
        version = str(_get_raw("/version")["gitVersion"])
    text = render(field_trees(document, version))
    if args.check:
        if OUTPUT.read_text(encoding="utf-8") != text:
            print(f"{OUTPUT} is stale: run scripts/gen_kube_fields.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT} ({len(text)} bytes, Kubernetes {version})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
