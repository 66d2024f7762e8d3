"""README's Layout table draws the floors that the import-linter `layers` contract enforces.

The contract is what `make test` checks; the table is what a new maintainer reads. Both list
the same packages on the same floors in the same order, so a move in one shows in the other.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _contract_floors() -> list[set[str]]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    (layers,) = [contract for contract in contracts if contract["type"] == "layers"]
    return [{name.strip() for name in floor.split("|")} for floor in layers["layers"]]


def _readme_floors() -> list[set[str]]:
    text = (REPO / "README.md").read_text()
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    floors: list[set[str]] = []
    for number, packages in re.findall(r"^\| (\d+) \| ([^|]+) \|", section, flags=re.M):
        assert int(number) == len(floors) + 1, f"floor {number} out of order"
        names = re.findall(r"`karpy/([\w/]+?)(?:\.py)?`", packages)
        floors.append(set(names))
    return floors


def test_readme_layout_draws_the_layers_contract() -> None:
    readme = _readme_floors()
    assert readme, "README has no Layout table"
    assert readme == _contract_floors()


def test_every_top_level_part_of_karpy_has_a_floor() -> None:
    parts = {
        path.stem if path.is_file() else path.name
        for path in (REPO / "src" / "karpy").iterdir()
        if (path.suffix == ".py" and path.stem != "__init__") or (path / "__init__.py").exists()
    }
    placed = set().union(*_contract_floors())
    assert parts - placed == set()
