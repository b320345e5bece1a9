"""The machine-readable record each rewrite leaves in ``metadata_props``.

Key ``onnxsurgeon.rewrites`` holds a JSON list, one object per rewrite, oldest first. Each object
has at least ``{"op": "extract"|"copy"|"insert"|"reroute", ...}`` with the op's targets, rename
map, inserted block and rerouted consumers, so ``verify --rewrite-log`` can check the invariants.
"""

from __future__ import annotations

import json
from typing import Any

import onnx

REWRITES_KEY = "onnxsurgeon.rewrites"


def rewrites(model: onnx.ModelProto) -> list[dict[str, Any]]:
    """The rewrite records of ``model`` (empty when none or unreadable)."""
    for prop in model.metadata_props:
        if prop.key == REWRITES_KEY:
            try:
                data = json.loads(prop.value)
            except ValueError:
                return []
            return [r for r in data if isinstance(r, dict)] if isinstance(data, list) else []
    return []


def add_rewrite(model: onnx.ModelProto, record: dict[str, Any]) -> None:
    """Append ``record`` to the model's rewrite log. Mutates model. Deterministic JSON."""
    log = rewrites(model)
    log.append(record)
    text = json.dumps(log, sort_keys=True, separators=(",", ":"))
    for prop in model.metadata_props:
        if prop.key == REWRITES_KEY:
            prop.value = text
            return
    entry = model.metadata_props.add()
    entry.key, entry.value = REWRITES_KEY, text
