"""What converting a v1beta1 manifest to v1 changed, field by field.

The NodePool and EC2NodeClass converters (:func:`karpy.api.nodepool.convert_v1beta1`,
:func:`karpy.api.nodeclass.convert_v1beta1`) rewrite the raw mapping before
typed parsing and say what they did, one line per field, at the field's
v1beta1 path: a user migrating a manifest needs to know which lines moved,
which values were renamed or defaulted, and above all what was dropped and
where it goes now (a NodePool's ``kubelet`` block). ``karpy validate`` and
``karpy simulate`` print the lines as notes; ``karpy convert`` writes them
above each converted object.

Mappings are rewritten as copies (:func:`copied_mapping`), so the input a
caller holds is never changed and a failed conversion leaves nothing half
done.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field


@dataclass(slots=True)
class Conversion:
    """A manifest rewritten as v1 (its ``apiVersion`` left as written) and what changed."""

    mapping: dict[str, object]
    notes: list[str] = field(default_factory=list)

    def note(self, path: str, change: str) -> None:
        self.notes.append(f"{path}: {change}")


def copied_mapping(parent: dict[str, object], key: str) -> dict[str, object] | None:
    """A copy of the mapping at ``parent[key]``, put in its place; None if that is not a mapping."""
    value = parent.get(key)
    if not isinstance(value, dict):
        return None
    copy = dict(value)
    parent[key] = copy
    return copy


def inline(value: object) -> str:
    """``value`` on one line as YAML flow (JSON is YAML), for a note to quote what it moved."""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(", ", ": "), default=str)
