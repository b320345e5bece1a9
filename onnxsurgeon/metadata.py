"""``metadata_props`` entries by key: the one reader and writer behind the rewrite log, the
converters' name map, the recipe provenance and the converters' source facts."""

from __future__ import annotations

from collections.abc import Mapping

import onnx


def get_metadata(model: onnx.ModelProto, key: str) -> str | None:
    """The value of the first ``metadata_props`` entry named ``key``, or None."""
    for prop in model.metadata_props:
        if prop.key == key:
            return str(prop.value)
    return None


def set_metadata(model: onnx.ModelProto, entries: Mapping[str, str]) -> None:
    """Set each entry: the first ``metadata_props`` entry with its key takes the value, else a
    new entry is appended (in the order of ``entries``). Mutates model."""
    todo = dict(entries)
    for prop in model.metadata_props:
        if prop.key in todo:
            prop.value = todo.pop(prop.key)
    for key, value in todo.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
