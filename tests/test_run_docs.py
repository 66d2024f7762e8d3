"""docs/run.md's walkthrough says which nodes its example gets: the simulator must agree, so it cannot rot.

The page's first YAML example (a KWOKNodeClass, a NodePool and a Deployment)
is run in the simulator, which makes the plan ``karpy run`` makes from the
same objects; the nodes it launches, by instance type and capacity type, must
be the ones the page names ("on two `m5.xlarge`, spot"). The seed walkthrough
under ``karpy run`` (tests/integration/test_run.py) checks the same sentence
against the NodeClaims it gets on the real control plane.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from karpy.api.manifest import parse_manifests
from karpy.operator.interruption import InterruptionMetrics
from karpy.operator.karpenter_metrics import Metrics
from karpy.sim.simulation import Simulation

PAGE = Path(__file__).parent.parent / "docs" / "run.md"
NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}


def walkthrough_manifests() -> str:
    text = PAGE.read_text(encoding="utf-8")
    blocks: list[str] = re.findall(r"^```yaml\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)
    return blocks[0]


def documented_nodes() -> Counter[tuple[str, str]]:
    """The walkthrough's nodes as the page names them: (instance type, capacity type) → how many."""
    text = " ".join(PAGE.read_text(encoding="utf-8").split())
    found = re.search(
        r"\(on (?P<nodes>[^()]+?), (?P<capacity>spot|on-demand): the same plan as the simulator\)", text
    )
    assert found is not None, "docs/run.md no longer says which nodes the walkthrough gets"
    nodes = re.findall(r"(\w+) `([^`]+)`", found.group("nodes"))
    assert nodes, found.group(0)
    return Counter({(type_, found.group("capacity")): NUMBERS[count] for count, type_ in nodes})


def test_the_walkthrough_gets_the_nodes_the_page_names() -> None:
    loaded = parse_manifests(walkthrough_manifests(), "docs/run.md")
    assert loaded.errors == []
    kinds = [obj.kind for obj in loaded.objects]
    assert kinds == ["KWOKNodeClass", "NodePool", "Deployment"], kinds
    simulation = Simulation()
    simulation.apply(loaded.objects)
    simulation.run(120)
    assert all(pod.spec.node_name for pod in simulation.pods()), "the walkthrough's pods did not all run"
    launched = Counter((claim.instance_type, claim.capacity_type) for claim in simulation.nodeclaims())
    assert launched == documented_nodes()


def test_the_metrics_table_lists_every_metric_karpy_run_exports() -> None:
    """docs/run.md's table of exported metrics names every family of the registry, and no other."""
    section = (
        PAGE.read_text().split("## Metrics", 1)[1].split("metrics karpy does not export yet, and why", 1)[0]
    )
    documented = set(re.findall(r"^\| `([a-z0-9_]+)` \|", section, re.M))
    metrics = Metrics()
    InterruptionMetrics.of(metrics)  # declared by the interruption controller when it runs
    assert documented == set(metrics.registry.names())
