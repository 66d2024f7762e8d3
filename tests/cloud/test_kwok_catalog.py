"""A KWOKNodeClass can offer Karpenter's kwok instance types, in ``karpy run`` and in the simulator.

The catalog is generated from Karpenter's module (scripts/gen_kwok_catalog.py);
these tests hold it to what Karpenter's kwok provider derives: the
``c-16x-amd64-linux`` naming, the ``karpenter.kwok.sh/instance-*`` labels and
the prices of its generator (``kwok/tools/gen_instance_types.go``: 0.025 $/h a
CPU plus 0.001 $/h a GB of memory on demand, spot at 70% of that). A NodeClaim
that names one of the types gets it; a class keeps the AWS catalog unless its
annotation or the default says otherwise.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support import make_nodepool, simulate_json

from karpy.api.meta import ObjectMeta
from karpy.api.nodeclaim import NodeClaim, NodeClaimSpec
from karpy.api.nodeclass import KWOKNodeClass
from karpy.api.nodepool import NodeClassRef
from karpy.api.requirements import LABEL_INSTANCE_TYPE, Requirement
from karpy.cloud.kwok.provider import KwokCloudProvider
from karpy.cloud.kwok_catalog import INSTANCE_TYPES_ANNOTATION, KwokInstanceTypes, load_kwok_catalog
from karpy.sim.clock import VirtualClock
from karpy.sim.store import InMemoryCluster

REPO = Path(__file__).resolve().parents[2]
GIB = 1024**3
TYPE = "c-16x-amd64-linux"
KWOK_LABEL = "karpenter.kwok.sh"
MEMORY_PER_CPU_GIB = {"c": 2, "s": 4, "m": 8}


def test_the_types_are_named_labelled_and_priced_as_karpenters_generator_makes_them() -> None:
    types = {instance_type.name: instance_type for instance_type in load_kwok_catalog().instance_types()}
    assert len(types) == 144
    for name, instance_type in types.items():
        family, size, arch, os = name.split("-")
        cpu = int(size.removesuffix("x"))
        labels = instance_type.requirements.labels(include_well_known=True)
        memory = instance_type.capacity["memory"]
        assert memory == cpu * MEMORY_PER_CPU_GIB[family] * GIB, name
        assert instance_type.capacity["cpu"] == cpu * 1000
        assert labels[f"{KWOK_LABEL}/instance-family"] == family
        assert labels[f"{KWOK_LABEL}/instance-size"] == str(cpu)
        assert labels[f"{KWOK_LABEL}/instance-cpu"] == str(cpu)
        assert labels["kubernetes.io/arch"] == arch and labels["kubernetes.io/os"] == os
        # Allocatable: capacity less Karpenter's kwok kube-reserved (100m CPU, 10Mi).
        assert instance_type.allocatable["cpu"] == cpu * 1000 - 100
        assert instance_type.allocatable["memory"] == memory - 10 * 1024**2
        on_demand = 0.025 * cpu + 0.001 * memory / 1e9
        assert {(o.zone, o.capacity_type) for o in instance_type.offerings} == {
            (zone, capacity_type)
            for zone in ("test-zone-a", "test-zone-b", "test-zone-c", "test-zone-d")
            for capacity_type in ("spot", "on-demand")
        }
        for offering in instance_type.offerings:
            expected = on_demand if offering.capacity_type == "on-demand" else on_demand * 0.7
            assert offering.price == pytest.approx(expected, rel=1e-12), (name, offering)
    labels = types[TYPE].requirements.labels(include_well_known=True)
    assert labels[f"{KWOK_LABEL}/instance-memory"] == "32Gi"
    assert types[TYPE].capacity["pods"] == 256


@pytest.mark.skipif(shutil.which("go") is None, reason="needs the Go toolchain and module proxy")
def test_the_committed_catalog_is_what_the_generator_makes_from_karpenters_module() -> None:
    check = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_kwok_catalog.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert check.returncode == 0, check.stdout + check.stderr


def _store(annotations: dict[str, str]) -> InMemoryCluster:
    store = InMemoryCluster(VirtualClock())
    store.create(make_nodepool())
    store.create(KWOKNodeClass(metadata=ObjectMeta(name="default", annotations=annotations)))
    return store


def _claim(store: InMemoryCluster, instance_type: str) -> NodeClaim:
    return store.create(
        NodeClaim(
            metadata=ObjectMeta(name="standalone"),
            spec=NodeClaimSpec(
                node_class_ref=NodeClassRef("karpenter.kwok.sh", "KWOKNodeClass", "default"),
                requirements=(Requirement.from_operator(LABEL_INSTANCE_TYPE, "In", [instance_type]),),
            ),
        )
    )


def _wait_for_node(store: InMemoryCluster, name: str) -> Any:
    """The Node a boot creates off the caller's thread (no registration delay: at once)."""
    deadline = time.monotonic() + 10
    while store.node(name) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return store.node(name)


@pytest.mark.parametrize(
    ("annotations", "default"),
    [
        ({INSTANCE_TYPES_ANNOTATION: "karpenter"}, KwokInstanceTypes.AWS),
        ({}, KwokInstanceTypes.KARPENTER),
    ],
)
def test_a_nodeclaim_naming_a_karpenter_kwok_type_launches_it(
    annotations: dict[str, str], default: KwokInstanceTypes
) -> None:
    store = _store(annotations)
    provider = KwokCloudProvider(store, default_instance_types=default)
    assert len(provider.get_instance_types(make_nodepool())) == 144
    launched = provider.create(_claim(store, TYPE))
    assert launched.metadata.labels[LABEL_INSTANCE_TYPE] == TYPE
    assert launched.metadata.labels[f"{KWOK_LABEL}/instance-family"] == "c"
    node = _wait_for_node(store, "standalone")
    assert node is not None
    assert node.metadata.labels[LABEL_INSTANCE_TYPE] == TYPE
    assert node.metadata.labels["topology.kubernetes.io/zone"].startswith("test-zone-")
    assert node.capacity["cpu"] == 16000


def test_a_class_offers_the_aws_catalog_by_default() -> None:
    store = _store({})
    provider = KwokCloudProvider(store)
    names = {instance_type.name for instance_type in provider.get_instance_types(make_nodepool())}
    assert "c5.large" in names and TYPE not in names
    with pytest.raises(Exception, match="no available offering"):
        provider.create(_claim(store, TYPE))


def _scenario(tmp_path: Path, *, annotations: dict[str, str], cloud: dict[str, str]) -> Path:
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "karpenter.kwok.sh/v1alpha1",
            "kind": "KWOKNodeClass",
            "metadata": {"name": "default", "annotations": annotations},
        },
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {
                "template": {
                    "spec": {
                        "nodeClassRef": {
                            "group": "karpenter.kwok.sh",
                            "kind": "KWOKNodeClass",
                            "name": "default",
                        },
                        "requirements": [],
                    }
                }
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "wants-c-16x", "namespace": "default"},
            "spec": {
                "nodeSelector": {LABEL_INSTANCE_TYPE: TYPE},
                "containers": [{"name": "app", "image": "pause", "resources": {"requests": {"cpu": "1"}}}],
            },
        },
    ]
    scenario = {
        "apiVersion": "karpy.dev/v1alpha1",
        "kind": "Scenario",
        "metadata": {"name": "karpenter-kwok-types"},
        "spec": {"duration": "10m", "cloud": cloud, "steps": [{"at": "0s", "apply": {"objects": objects}}]},
    }
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario))
    return path


@pytest.mark.parametrize(
    ("annotations", "cloud"),
    [({INSTANCE_TYPES_ANNOTATION: "karpenter"}, {}), ({}, {"kwokInstanceTypes": "karpenter"})],
)
def test_the_simulator_launches_the_karpenter_kwok_type_a_pod_selects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], annotations: dict[str, str], cloud: dict[str, str]
) -> None:
    code, result, err = simulate_json(capsys, str(_scenario(tmp_path, annotations=annotations, cloud=cloud)))
    assert code == 0, err
    assert result["errors"] == []
    claims = result["nodeclaims"]
    assert [claim["instanceType"] for claim in claims] == [TYPE], json.dumps(claims)
    assert claims[0]["pricePerHour"] == pytest.approx(0.7 * (0.4 + 0.001 * 32 * GIB / 1e9))
    (pod,) = result["pods"]
    assert pod["runningAt"] is not None


def test_the_simulator_keeps_the_aws_catalog_without_the_choice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, result, _ = simulate_json(capsys, str(_scenario(tmp_path, annotations={}, cloud={})))
    assert result["nodeclaims"] == []
    (pod,) = result["pods"]
    assert pod["runningAt"] is None


def test_karpy_run_takes_the_default_from_its_flag_or_environment() -> None:
    from karpy.cli import _parser
    from karpy.providers import kwok_settings
    from karpy.settings import SettingsError, run_options

    def chosen(*flags: str, environ: dict[str, str]) -> KwokInstanceTypes:
        args = _parser().parse_args(["run", *flags])
        return kwok_settings(run_options(args, environ), environ).instance_types

    assert chosen(environ={}) is KwokInstanceTypes.AWS
    assert chosen(environ={"KARPY_KWOK_INSTANCE_TYPES": "karpenter"}) is KwokInstanceTypes.KARPENTER
    assert chosen("--kwok-instance-types", "karpenter", environ={}) is KwokInstanceTypes.KARPENTER
    with pytest.raises(SettingsError, match="unknown kwok instance types"):
        chosen(environ={"KARPY_KWOK_INSTANCE_TYPES": "gcp"})


def test_pods_and_pools_select_by_the_karpenter_kwok_labels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The four labels are well known, as Karpenter's kwok provider registers them: a pod may require one
    its NodePool does not mention, and a pool may bound them."""
    path = _scenario(tmp_path, annotations={}, cloud={"kwokInstanceTypes": "karpenter"})
    scenario = yaml.safe_load(path.read_text())
    _, nodepool, pod = scenario["spec"]["steps"][0]["apply"]["objects"]
    pod["spec"]["nodeSelector"] = {f"{KWOK_LABEL}/instance-family": "m", f"{KWOK_LABEL}/instance-cpu": "4"}
    nodepool["spec"]["template"]["spec"]["requirements"] = [
        {"key": f"{KWOK_LABEL}/instance-size", "operator": "Gt", "values": ["2"]}
    ]
    path.write_text(yaml.safe_dump(scenario))
    code, result, err = simulate_json(capsys, str(path))
    assert code == 0, err
    assert [claim["instanceType"] for claim in result["nodeclaims"]] == ["m-4x-amd64-linux"]
